"""What STANDARD bills per delivery: state transitions on the processor's happy and duplicate
paths, from every source, counted from real executions on the local engine (P12 item 3).

A transition is a state entered or a Task retried, as `onceflow bench` counts them
(bench/run.py, ``_transitions``): Step Functions bills "each time a step of
your workflow is executed" (https://aws.amazon.com/step-functions/pricing/).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from bench.run import _transitions
from onceflow.local.engine import LocalEngine
from tests.helpers import MACHINE, load_event, s3_event, upload

# What each path costs today, the ceiling no change may raise: no state reads the event
# before Claim, and the happy path ends on MarkComplete.
TODAY = {
    ("s3", "happy"): 3,
    ("s3", "duplicate"): 3,
    ("sqs", "happy"): 3,
    ("sqs", "duplicate"): 3,
    ("custom", "happy"): 3,
    ("custom", "duplicate"): 3,
}
# The floor of the card's shape: Claim, Process, MarkComplete; Claim, Reclaim, Duplicate.
TARGET = 3


def delivery(engine: LocalEngine, source: str) -> Any:
    """One new unit of work from the source, as that source starts the processor."""
    if source == "s3":
        return s3_event(engine, "uploads/t.png", upload(engine, "uploads/t.png"))
    if source == "sqs":  # the pipe's input: an array of one message
        event = copy.deepcopy(load_event("sqs-business-message.json"))
        event[0]["messageId"] = str(uuid.uuid4())
        return event
    event = copy.deepcopy(load_event("eventbridge-custom-event.json"))
    event["id"] = str(uuid.uuid4())
    return event


def measured(engine: LocalEngine, source: str) -> dict[str, int]:
    """The transitions of a first delivery (happy) and of the same delivery again
    (duplicate), each checked to have taken its path."""
    event = delivery(engine, source)
    happy = engine.execute(MACHINE, event)
    again = engine.execute(MACHINE, event)
    assert happy.status == "SUCCEEDED", happy.states_entered
    assert happy.output["status"] == "PROCESSED" and happy.outcome == "Processed"
    assert again.status == "SUCCEEDED", again.states_entered
    assert again.output["status"] == "DUPLICATE"
    return {"happy": _transitions(happy), "duplicate": _transitions(again)}


@pytest.mark.parametrize("source", ["s3", "sqs", "custom"])
def test_no_path_costs_more_transitions_than_today(engine: LocalEngine, source: str) -> None:
    # GIVEN a delivery from the source WHEN it is delivered twice
    counts = measured(engine, source)
    # THEN neither path takes more transitions than it does today
    for path, count in counts.items():
        assert count <= TODAY[(source, path)], (source, path, count)


@pytest.mark.parametrize("source", ["s3", "sqs", "custom"])
def test_a_duplicate_is_at_the_floor_of_its_shape(engine: LocalEngine, source: str) -> None:
    # GIVEN a delivery from the source WHEN it is delivered twice
    counts = measured(engine, source)
    # THEN the duplicate takes at most three transitions: Claim, Reclaim, Duplicate
    assert counts["duplicate"] <= TARGET, counts


@pytest.mark.parametrize("source", ["s3", "sqs", "custom"])
def test_the_happy_path_is_at_the_floor_of_its_shape(engine: LocalEngine, source: str) -> None:
    # GIVEN a delivery from the source WHEN it is delivered twice
    counts = measured(engine, source)
    # THEN the happy path takes at most three transitions: Claim, Process, MarkComplete
    assert counts["happy"] <= TARGET, counts
