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
# The largest value the EXPRESS rule allows (the retries are constants: ProcessRetries).
EXPRESS_LARGEST = {"ProcessorTimeoutSeconds": "40"}


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


def test_a_map_lasts_its_item_processors_worst_case_for_every_wave_of_items() -> None:
    # GIVEN a Map whose iteration is a 10 s task, then a Parallel whose longer branch is 7 s
    task = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "TimeoutSeconds": 10}
    iteration = {"StartAt": "Work", "States": {"Work": {**task, "End": True}}}
    branch = {"StartAt": "Wait", "States": {"Wait": {**task, "TimeoutSeconds": 7, "End": True}}}
    definition = {
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "ItemProcessor": iteration, "Next": "Both"},
            "Both": {"Type": "Parallel", "Branches": [iteration, branch], "End": True},
        },
    }
    # WHEN its worst case is computed: every item at once (MaxConcurrency absent)
    # THEN the Map counts its iteration, and the Parallel its longest branch
    assert worst_case_seconds(definition) == 10 + 10
    assert worst_case_seconds(definition, items=10) == 10 + 10
    # AND with MaxConcurrency 4, ten items run in three waves
    definition["States"]["Each"]["MaxConcurrency"] = 4
    assert worst_case_seconds(definition, items=10) == 3 * 10 + 10
    # AND the same when the limit is a JSONata expression of plain arithmetic
    definition["States"]["Each"]["MaxConcurrency"] = "{% (2 + 2) %}"
    assert worst_case_seconds(definition, items=10) == 3 * 10 + 10


def _batch_definition(parameters: Mapping[str, str]) -> dict[str, Any]:
    batch = {"SqsSource": "create", "SqsBatchMode": "true", **parameters}
    with LocalEngine(parameters=batch, function_log=io.StringIO(), stack_name="wc") as engine:
        text, _ = engine.state_machine_definition("BatchProcessorStateMachine")
    return dict(json.loads(text))


def test_the_sqs_batch_workflow_at_the_rules_largest_values_fits_in_five_minutes() -> None:
    # GIVEN the batch workflow as it deploys at the largest values the EXPRESS rule allows,
    # with the largest batch (every message of it runs at once)
    Stack.from_file(
        DEFAULT_TEMPLATE, {"SqsSource": "create", "SqsBatchMode": "true", **EXPRESS_LARGEST}
    )
    definition = _batch_definition(EXPRESS_LARGEST)
    # WHEN the worst case of the whole workflow is computed (its Map included)
    worst = worst_case_seconds(definition)
    # THEN it is one message's path through the Map, and it fits in five minutes
    one_message = worst_case_seconds(definition["States"]["EachMessage"]["ItemProcessor"])
    assert worst == one_message > 0
    assert worst < EXPRESS_LIMIT_SECONDS, worst
    # AND a batch of ten is no longer: the Map runs its messages at once
    assert worst_case_seconds(definition, items=10) == worst


def test_the_template_and_the_design_doc_state_the_computed_express_bounds() -> None:
    # GIVEN the computed worst cases at the largest values the EXPRESS rule allows
    processor = worst_case_seconds(
        processor_definition({"WorkflowType": "EXPRESS", **EXPRESS_LARGEST})
    )
    batch = worst_case_seconds(_batch_definition(EXPRESS_LARGEST), items=10)
    # WHEN we read what the rule's comment and docs/design.md say of them
    template = DEFAULT_TEMPLATE.read_text(encoding="utf-8")
    comment = template[: template.index("  ExpressFitsInFiveMinutes:")].rsplit("Rules:", 1)[1]
    design = DESIGN.read_text(encoding="utf-8")
    # THEN both name the numbers the ASL gives, not older ones
    for text, where in ((comment, "the template's EXPRESS rule"), (design, "docs/design.md")):
        for seconds in (processor, batch):
            assert re.search(rf"\b{seconds:.0f} s\b", text), f"{where}: no {seconds:.0f} s"


def test_express_takes_fewer_retries_and_refuses_the_default_timeout() -> None:
    # GIVEN STANDARD's retries, whose worst case is over five minutes
    assert worst_case_seconds(processor_definition({})) > EXPRESS_LIMIT_SECONDS
    # THEN EXPRESS retries once (ProcessRetries), and at 40 s it fits
    express = processor_definition({"WorkflowType": "EXPRESS", **EXPRESS_LARGEST})
    assert worst_case_seconds(express) < EXPRESS_LIMIT_SECONDS
    # AND with the default timeout the rule refuses the deploy
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
        name: max(_allowed_under_express(name), key=int) for name in ("ProcessorTimeoutSeconds",)
    }
    # WHEN the stack is resolved as EXPRESS with them
    parameters = {"WorkflowType": "EXPRESS", **largest}
    Stack.from_file(DEFAULT_TEMPLATE, parameters)  # the rule lets it deploy
    worst = worst_case_seconds(processor_definition(parameters))
    # THEN its worst case stays under five minutes
    assert worst < EXPRESS_LIMIT_SECONDS, worst


def test_the_design_doc_states_the_computed_worst_cases() -> None:
    standard = worst_case_seconds(processor_definition({}))
    express = worst_case_seconds(
        processor_definition({"WorkflowType": "EXPRESS", "ProcessorTimeoutSeconds": "40"})
    )
    text = DESIGN.read_text(encoding="utf-8")
    assert re.search(rf"\b{standard:.0f} s\b", text), f"docs/design.md: no {standard:.0f} s"
    assert re.search(rf"\b{express:.0f} s\b", text), f"docs/design.md: no {express:.0f} s"


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        {"ProcessorTimeoutSeconds": "890"},  # above the lock's 900 s floor (a constant)
        {"WorkflowType": "EXPRESS", "ProcessorTimeoutSeconds": "40"},
    ],
)
def test_the_lock_covers_the_worst_case_from_claim_to_the_last_fenced_write(
    parameters: dict[str, str],
) -> None:
    # GIVEN the resolved processor and the lock expression of its Claim
    definition = processor_definition(parameters)
    states = definition["States"]
    after_claim = worst_case_seconds({"StartAt": "Process", "States": states})
    expression = definition["States"]["Claim"]["Catch"][0]["Assign"]["lockSeconds"]
    # WHEN the lock's length is evaluated as the ASL does (plain arithmetic once resolved)
    lock = _evaluate_lock(expression)
    # THEN the lock outlasts the longest path from Process to the last write that needs it
    assert lock > after_claim, (lock, after_claim)


def _evaluate_lock(expression: str) -> float:
    from onceflow.local import patches

    return float(patches.eval_jsonata(expression.strip()[2:-2]))
