"""A Map's iterations read from an execution's history: which iteration each event ran
in, what each iteration did, and the units of work the reports count.

The histories here have the shape Step Functions records (previousEventId chains),
including where the chain crosses iterations. The first one follows the ids, types and
chain of an inline Map recorded on AWS in LocalStack's snapshot
tests/aws/services/stepfunctions/v2/scenarios/test_base_scenarios.snapshot.json,
test_map_state_break_condition (recorded 21-09-2023): MapIterationStarted of iteration
n+1 chains to the last exit of iteration n, and MapStateFailed to the last event of the
failed iteration.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from onceflow.asl import diagram
from onceflow.harness.common import processed_twice
from onceflow.view import history, text, units
from onceflow.view.records import Record
from onceflow.view.trace import trace

T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def _events(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """(id, previous id, type, state name or Map iteration index) as a chained history."""
    events = []
    for event_id, previous, kind, name in rows:
        event: dict[str, Any] = {
            "id": event_id,
            "previousEventId": previous,
            "type": kind,
            "timestamp": T0 + datetime.timedelta(milliseconds=event_id),
        }
        if kind.endswith("StateEntered"):
            event["stateEnteredEventDetails"] = {"name": name, "input": "{}"}
        elif kind.endswith("StateExited"):
            event["stateExitedEventDetails"] = {"name": name, "output": "{}"}
        elif kind.startswith("MapIteration"):
            key = kind[0].lower() + kind[1:] + "EventDetails"
            event[key] = {"name": "MapState", "index": name}
        events.append(event)
    return events


# test_map_state_break_condition as AWS recorded it: iterations one after another
# (MaxConcurrency 1), the fifth breaks out through a Fail state.
_RECORDED = [
    (1, 0, "ExecutionStarted", None),
    (2, 0, "PassStateEntered", "StartState"),
    (3, 2, "PassStateExited", "StartState"),
    (4, 3, "MapStateEntered", "MapState"),
    (5, 4, "MapStateStarted", None),
    (6, 5, "MapIterationStarted", 0),
    (7, 6, "ChoiceStateEntered", "Equals3"),
    (8, 7, "ChoiceStateExited", "Equals3"),
    (9, 8, "PassStateEntered", "Pass"),
    (10, 9, "PassStateExited", "Pass"),
    (11, 10, "MapIterationSucceeded", 0),
    (12, 10, "MapIterationStarted", 1),
    (13, 12, "ChoiceStateEntered", "Equals3"),
    (14, 13, "ChoiceStateExited", "Equals3"),
    (15, 14, "PassStateEntered", "Pass"),
    (16, 15, "PassStateExited", "Pass"),
    (17, 16, "MapIterationSucceeded", 1),
    (18, 16, "MapIterationStarted", 2),
    (19, 18, "ChoiceStateEntered", "Equals3"),
    (20, 19, "ChoiceStateExited", "Equals3"),
    (21, 20, "FailStateEntered", "Break"),
    (22, 21, "MapIterationFailed", 2),
    (23, 21, "MapStateFailed", None),
    (24, 23, "ExecutionFailed", None),
]
_BREAK_CONDITION = {
    "StartAt": "StartState",
    "States": {
        "StartState": {"Type": "Pass", "Next": "MapState"},
        "MapState": {
            "Type": "Map",
            "ItemProcessor": {
                "StartAt": "Equals3",
                "States": {
                    "Equals3": {
                        "Type": "Choice",
                        "Choices": [{"Condition": "{% true %}", "Next": "Break"}],
                        "Default": "Pass",
                    },
                    "Break": {"Type": "Fail"},
                    "Pass": {"Type": "Pass", "End": True},
                },
            },
            "End": True,
        },
    },
}


def _record(events: list[dict[str, Any]], status: str) -> Record:
    return Record(
        {
            "executionArn": "arn:aws:states:us-east-1:123456789012:execution:m:run",
            "name": "run",
            "stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:m",
            "logicalId": None,
            "status": status,
            "startDate": T0,
            "stopDate": T0 + datetime.timedelta(seconds=1),
            "input": {},
            "output": None,
            "error": "States.Fail" if status == "FAILED" else None,
            "cause": None,
            "events": events,
        }
    )


def test_each_event_runs_in_the_iteration_its_chain_leads_to_as_aws_records_it() -> None:
    # GIVEN a history as AWS records an inline Map: the next iteration's start chained to
    # the last exit of the one before, the Map's end chained into the last iteration
    events = _events(_RECORDED)
    # WHEN the iterations are read
    found = dict(zip((e["id"] for e in events), history.iterations_of(events), strict=True))
    # THEN each iteration's events are its own, and the Map's own events and the
    # execution's are in none
    assert [found[i] for i in (6, 7, 10, 11)] == [("MapState", 0)] * 4
    assert [found[i] for i in (12, 13, 16, 17)] == [("MapState", 1)] * 4
    assert [found[i] for i in (18, 21, 22)] == [("MapState", 2)] * 3
    assert [found[i] for i in (1, 2, 4, 5, 23, 24)] == [None] * 6
    # ... and without the chain, no iteration can be told: none
    unchained = [{k: v for k, v in e.items() if k != "previousEventId"} for e in events]
    assert history.iterations_of(unchained) == [None] * len(events)


def test_each_iteration_has_its_own_path_and_unit_of_work() -> None:
    # GIVEN the recorded execution, failed in its third iteration
    execution = _record(_events(_RECORDED), "FAILED")
    graph = diagram.graph(_BREAK_CONDITION)
    # WHEN it is traced and its units counted
    traced = trace(graph, execution)
    found = units.units(execution.result())
    # THEN each iteration took its own way out of Equals3
    paths = {item.iteration[1]: item for item in traced.iterations}
    assert sorted(paths) == [0, 1, 2]
    assert [paths[n].status for n in (0, 1, 2)] == ["Succeeded", "Succeeded", "Failed"]

    def edges(item: Any) -> set[tuple[str, str]]:
        return {(graph.edges[i].source, graph.edges[i].target) for i in item.taken}

    assert edges(paths[0]) == edges(paths[1]) == {("Equals3", "Pass")}
    assert edges(paths[2]) == {("Equals3", "Break")}
    assert paths[2].failed == {"Break"} and paths[0].failed == set()
    # ... and each iteration is a unit, ended where it ended
    assert [(u.iteration, u.end_state, u.ended) for u in found] == [
        (("MapState", 0), "Pass", True),
        (("MapState", 1), "Pass", True),
        (("MapState", 2), "Break", True),
    ]
    assert [unit.end_state for unit in units.per_message(found)] == ["Pass", "Pass", "Break"]


def test_an_execution_without_a_map_is_one_unit_ended_in_its_last_state() -> None:
    rows = [
        (1, 0, "ExecutionStarted", None),
        (2, 1, "PassStateEntered", "StartState"),
        (3, 2, "PassStateExited", "StartState"),
        (4, 3, "SucceedStateEntered", "Done"),
        (5, 4, "ExecutionSucceeded", None),
    ]
    [unit] = units.units(_record(_events(rows), "SUCCEEDED").result())
    assert (unit.iteration, unit.end_state, unit.ended, unit.key) == (None, "Done", True, None)
    aborted = units.units(_record(_events(rows[:3]), "ABORTED").result())
    assert [unit.end_state for unit in aborted] == ["ABORTED"]


def test_the_terminal_groups_each_iterations_states_under_an_iteration_column() -> None:
    # GIVEN two iterations whose events interleave
    rows = [
        (1, 0, "ExecutionStarted", None),
        (2, 0, "MapStateEntered", "MapState"),
        (3, 2, "MapStateStarted", None),
        (4, 3, "MapIterationStarted", 0),
        (5, 3, "MapIterationStarted", 1),
        (6, 5, "ChoiceStateEntered", "Equals3"),
        (7, 4, "ChoiceStateEntered", "Equals3"),
        (8, 6, "ChoiceStateExited", "Equals3"),
        (9, 7, "ChoiceStateExited", "Equals3"),
        (10, 9, "PassStateEntered", "Pass"),
        (11, 8, "FailStateEntered", "Break"),
        (12, 10, "PassStateExited", "Pass"),
        (13, 12, "MapIterationSucceeded", 0),
        (14, 11, "MapIterationFailed", 1),
        (15, 14, "MapStateFailed", None),
        (16, 15, "ExecutionFailed", None),
    ]
    lines = text.terminal(_record(_events(rows), "FAILED")).splitlines()
    # WHEN printed, THEN an iteration column, each iteration's rows together, by index
    header = next(line for line in lines if line.split()[:1] == ["#"])
    assert header.split()[:3] == ["#", "iteration", "state"]
    table = [line.split()[:3] for line in lines[lines.index(header) + 1 :] if line[:4].strip()]
    table = [row for row in table if row[0].isdigit()]
    assert table == [
        ["1", "-", "MapState"],
        ["3", "MapState#0", "Equals3"],
        ["4", "MapState#0", "Pass"],
        ["2", "MapState#1", "Equals3"],
        ["5", "MapState#1", "Break"],
    ]
    # ... and one line per iteration with where it ended
    assert "    MapState#0: Pass" in "\n".join(lines)
    assert any(line.strip().startswith("MapState#1: Break") for line in lines)


@pytest.mark.parametrize("error_first", [False, True])
def test_a_state_left_in_one_iteration_is_that_iterations_step(error_first: bool) -> None:
    # GIVEN two iterations that enter Work one after the other and leave it in the
    # opposite order (they run at once), each with its own output; with error_first,
    # iteration 0's Work has a TaskFailed (retried or caught) before it leaves
    failed = [(8, 6, "TaskFailed", None)] if error_first else []
    rows = [
        (1, 0, "ExecutionStarted", None),
        (2, 0, "MapStateEntered", "MapState"),
        (3, 2, "MapStateStarted", None),
        (4, 3, "MapIterationStarted", 0),
        (5, 3, "MapIterationStarted", 1),
        (6, 4, "TaskStateEntered", "Work"),
        (7, 5, "TaskStateEntered", "Work"),
        *failed,
        (9, 8 if error_first else 6, "TaskStateExited", "Work"),  # iteration 0's first
        (10, 7, "TaskStateExited", "Work"),
        (11, 9, "MapIterationSucceeded", 0),
        (12, 10, "MapIterationSucceeded", 1),
        (13, 12, "MapStateSucceeded", None),
        (14, 12, "MapStateExited", "MapState"),
        (15, 14, "ExecutionSucceeded", None),
    ]
    events = _events(rows)
    exits = {e["id"]: e for e in events if e["type"] == "TaskStateExited"}
    exits[9]["stateExitedEventDetails"]["output"] = '{"item": 0}'
    exits[10]["stateExitedEventDetails"]["output"] = '{"item": 1}'
    if error_first:
        events[7]["taskFailedEventDetails"] = {"error": "Lambda.TooManyRequestsException"}
    # WHEN the history is read
    steps = history.steps(_record(events, "SUCCEEDED").result())
    # THEN each iteration's step has the output it left with, and both were left
    work = {step.iteration: step for step in steps if step.name == "Work"}
    assert work[("MapState", 0)].output == {"item": 0}
    assert work[("MapState", 1)].output == {"item": 1}
    assert work[("MapState", 0)].exited == exits[9]["timestamp"]
    assert work[("MapState", 1)].exited == exits[10]["timestamp"]
    assert bool(work[("MapState", 0)].errors) is error_first
    assert not work[("MapState", 1)].errors


def test_an_object_two_messages_processed_is_named_and_a_redelivery_counts_once() -> None:
    # GIVEN three deliveries of one object's message: kept by a batch (a duplicate of
    # work in progress), then delivered again; and another object processed twice
    ran = [
        units.Unit(("EachMessage", 0), "m-1", "Duplicate", "s3://b/a#1", True),
        units.Unit(("EachMessage", 3), "m-1", "Duplicate", "s3://b/a#1", True),
        units.Unit(("EachMessage", 1), "m-2", "Processed", "s3://b/a#1", True),
        units.Unit(("EachMessage", 2), "m-3", "Processed", "s3://b/b#1", True),
        units.Unit(None, "arn:x", "Processed", "s3://b/b#1", True),
    ]
    # THEN each message counts once, as its last delivery ended, in the order first seen
    assert [(u.message, u.iteration) for u in units.per_message(ran)] == [
        ("m-1", ("EachMessage", 3)),
        ("m-2", ("EachMessage", 1)),
        ("m-3", ("EachMessage", 2)),
        ("arn:x", None),
    ]
    # ... and the object two messages processed is named (the reports' per-message check)
    assert processed_twice(ran) == ["s3://b/b#1"]
