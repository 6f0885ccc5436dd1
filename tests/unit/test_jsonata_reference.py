"""Every expression of both state machines, through the engine's evaluator, against
the recorded results of jsonata 2.0.6 run directly (tests/data/jsonata_reference.py)."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any

import pytest
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEventException,
)
from moto.stepfunctions.parser.asl.jsonata.jsonata import JSONataException

from onceflow.local import jsonata_node
from onceflow.local.engine import LocalEngine
from onceflow.local.patches import fidelity
from tests.data import jsonata_reference as reference

RERECORD = "re-record: .venv/bin/python -m tests.data.jsonata_reference --record"


@functools.cache
def _recording() -> dict[str, Any]:
    return json.loads(reference.RECORDING.read_text(encoding="ascii"))  # type: ignore[no-any-return]


def _engine_outcome(expression: str, states: Any, variables: dict[str, Any]) -> dict[str, Any]:
    """What the engine makes of an expression in a state: its value, or how it fails."""
    env = SimpleNamespace(
        stack=[],
        states=SimpleNamespace(_states_data=states),
        variable_store=SimpleNamespace(_outer_scope=variables, _inner_scope={}),
        next_state_name="State",
        event_history_context=SimpleNamespace(source_event_id=1),
        event_manager=SimpleNamespace(add_event=lambda **event: None),
    )
    try:
        fidelity._jsonata_eval_body(SimpleNamespace(expression=expression), env)
    except FailureEventException as exc:
        details = exc.failure_event.event_details["evaluationFailedEventDetails"]  # type: ignore[index]
        cause = str(details["cause"])
        if cause.endswith("returned nothing (undefined)."):
            return {"u": 1}
        if cause.endswith(f"{fidelity.UNSUPPORTED_RESULT}."):
            return {"s": "function or number"}
        error = exc.__cause__
        assert isinstance(error, JSONataException), cause
        code = None if error.error == "UNKNOWN" else error.error
        details = str(error.details)
        return {"c": code, "m": details.removeprefix(f"{code}: ") if code else details}
    return reference.outcome_of_value(env.stack[-1])


def _same(recorded: dict[str, Any], engine: dict[str, Any], expression: str) -> bool:
    if "s" in recorded:  # either kind is "a value JSON cannot hold"
        return "s" in engine
    if reference.RANDOM.search(expression):
        return recorded.keys() == engine.keys()
    return recorded == engine


def test_every_expression_of_both_state_machines_is_recorded(engine: LocalEngine) -> None:
    # GIVEN the definitions as deployed with the default parameters
    expressions = reference.machine_expressions(engine)
    # WHEN they are compared with the expressions the recording holds
    recorded = _recording()["expressions"]
    # THEN each one has reference results (a changed definition needs a new recording)
    missing = [e for e in expressions if e not in recorded]
    assert not missing, f"{len(missing)} expressions have no reference results ({RERECORD}): " + (
        "; ".join(m[:80] for m in missing[:5])
    )
    assert _recording()["jsonata"] == jsonata_node.JSONATA_VERSION


def test_the_engine_evaluates_every_case_as_jsonata_2_0_6_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the recorded cases: every expression in captured and generic contexts,
    # each mutated with edge strings, edge numbers, nulls, arrays and edge keys
    recording = _recording()
    monkeypatch.setattr(
        jsonata_node,
        "evaluate",
        functools.partial(jsonata_node.evaluate, clock=recording["clock_ms"]),
    )
    expressions = recording["expressions"]
    contexts = recording["contexts"]
    mutations = recording["mutations"]
    assert mutations == reference.MUTATIONS, RERECORD
    assert len(recording["cases"]) > 40 * len(mutations)
    differences = []
    kinds: set[str] = set()
    # WHEN the engine's evaluator evaluates each one
    for e, c, m, recorded in recording["cases"]:
        states, variables = reference.case_context(contexts[c], mutations[m])
        outcome = _engine_outcome(expressions[e], states, variables)
        kinds.update(recorded)
        # THEN its value, or the way it fails, is the reference's
        if not _same(recorded, outcome, expressions[e]):
            differences.append((expressions[e][:100], mutations[m], recorded, outcome))
    assert not differences, f"{len(differences)} differ, e.g. {differences[:3]}"
    assert {"v", "sha256", "u", "c"} <= kinds  # values, long values, undefined and errors met
