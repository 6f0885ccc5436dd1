"""The processor's worst case, read from the ASL that deploys, against EXPRESS's 5 minutes
and against the lock it takes."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from onceflow.asl.worstcase import (
    EXPRESS_LIMIT_SECONDS,
    retry_delays,
    state_seconds,
    worst_case_seconds,
)
from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.template import Stack, TemplateError

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def processor_definition(parameters: Mapping[str, str]) -> dict[str, Any]:
    with LocalEngine(parameters=dict(parameters), function_log=io.StringIO()) as engine:
        text, _ = engine.state_machine_definition("ProcessorStateMachine")
    return dict(json.loads(text))


def test_a_retrier_waits_at_most_its_capped_delays() -> None:
    # GIVEN 1 s doubling, capped at 5 s, four times: 1 + 2 + 4 + 5
    retrier = {"IntervalSeconds": 1, "BackoffRate": 2, "MaxDelaySeconds": 5, "MaxAttempts": 4}
    assert retry_delays({"ErrorEquals": ["X"], **retrier}) == 12
    # AND Step Functions' defaults: 1 s, three attempts, rate 2.0, no cap
    assert retry_delays({"ErrorEquals": ["X"]}) == 1 + 2 + 4


def test_a_task_that_times_out_uses_its_timeout_on_every_retried_attempt() -> None:
    state = {
        "Type": "Task",
        "TimeoutSeconds": "{% (30 + 10) %}",
        "Retry": [
            {"ErrorEquals": ["States.Timeout"], "IntervalSeconds": 2, "MaxAttempts": 2},
            {"ErrorEquals": ["Lambda.TooManyRequestsException"], "MaxAttempts": 1},
        ],
    }
    # 40 s x 3 calls, plus 2 + 4 s and 1 s of waiting
    assert state_seconds(state) == 40 * 3 + 6 + 1


def test_express_with_the_default_retries_is_refused_at_deploy() -> None:
    # GIVEN the defaults, whose worst case is over five minutes
    assert worst_case_seconds(processor_definition({})) > EXPRESS_LIMIT_SECONDS
    # WHEN the stack is deployed as EXPRESS, THEN its rule refuses the parameters
    with pytest.raises(TemplateError, match="ExpressFitsInFiveMinutes"):
        Stack.from_file(DEFAULT_TEMPLATE, {"WorkflowType": "EXPRESS"})


def _allowed_under_express(parameter: str) -> list[str]:
    """The values the template's EXPRESS rule allows a parameter (None: not bounded)."""
    stack = Stack.from_file(DEFAULT_TEMPLATE)
    rule = stack.template["Rules"]["ExpressFitsInFiveMinutes"]
    for assertion in rule["Assertions"]:
        values, ref = assertion["Assert"]["Fn::Contains"]
        if ref == {"Ref": parameter}:
            return [str(v) for v in values]
    raise AssertionError(f"the EXPRESS rule does not bound {parameter}")


def test_every_parameter_set_the_express_rule_allows_fits_in_five_minutes() -> None:
    # GIVEN the largest values the rule allows (the worst case grows with each of them),
    # and the largest allowed values of the parameters it leaves free
    largest = {
        name: max(_allowed_under_express(name), key=int)
        for name in ("RetryMaxAttempts", "ProcessorTimeoutSeconds", "RetryIntervalSeconds")
    }
    free = {"RetryBackoffRate": "1000", "RetryMaxDelaySeconds": "86400"}
    # WHEN the stack is resolved as EXPRESS with them
    parameters = {"WorkflowType": "EXPRESS", **largest, **free}
    Stack.from_file(DEFAULT_TEMPLATE, parameters)  # the rule lets it deploy
    worst = worst_case_seconds(processor_definition(parameters))
    # THEN its worst case stays under five minutes
    assert worst < EXPRESS_LIMIT_SECONDS, worst


def test_the_design_doc_states_the_computed_worst_cases() -> None:
    standard = worst_case_seconds(processor_definition({}))
    express = worst_case_seconds(
        processor_definition(
            {"RetryMaxAttempts": "1", "ProcessorTimeoutSeconds": "40", "RetryIntervalSeconds": "10"}
        )
    )
    text = DESIGN.read_text(encoding="utf-8")
    assert re.search(rf"\b{standard:.0f} s\b", text), f"docs/design.md: no {standard:.0f} s"
    assert re.search(rf"\b{express:.0f} s\b", text), f"docs/design.md: no {express:.0f} s"


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        {"ProcessorTimeoutSeconds": "890", "LockTimeoutSeconds": "900"},
        {"RetryMaxAttempts": "0"},
    ],
)
def test_the_lock_covers_the_worst_case_from_claim_to_the_last_fenced_write(
    parameters: dict[str, str],
) -> None:
    # GIVEN the resolved processor and the lock expression of its Claim
    definition = processor_definition(parameters)
    states = definition["States"]
    after_claim = worst_case_seconds({"StartAt": "Process", "States": states})
    expression = definition["States"]["Normalize"]["Choices"][2]["Assign"]["lockSeconds"]
    # WHEN the lock's length is evaluated as the ASL does (plain arithmetic once resolved)
    lock = _evaluate_lock(expression)
    # THEN the lock outlasts the longest path from Process to the last write that needs it
    assert lock > after_claim, (lock, after_claim)


def _evaluate_lock(expression: str) -> float:
    from onceflow.local import patches

    return float(patches.eval_jsonata(expression.strip()[2:-2]))
