"""The path an execution took through its state machine's graph: the states entered,
failed and caught, and the transitions taken."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onceflow.asl import diagram
from onceflow.view import history
from onceflow.view.records import Record


@dataclass
class Trace:
    """What the execution did, per state: its steps, and the transitions it took."""

    steps: list[history.StateStep]
    entered: list[str]
    failed: set[str]
    caught: set[str]
    taken: set[int]  # indexes into graph.edges
    ambiguous: set[int]  # taken edges of which the history cannot tell one from another
    unknown: list[str]  # entered states the ASL does not have
    event_steps: list[int | None]  # each event's step (an index into steps), if any


def trace(graph: diagram.Graph, record: Record) -> Trace:
    result = record.result()
    reading = history.read(result)
    steps = reading.steps
    entered = list(dict.fromkeys(step.name for step in steps))
    failed = {step.name for step in steps if step.outcome.startswith("failed")}
    if steps and record.status in ("FAILED", "TIMED_OUT", "ABORTED"):
        failed.add(steps[-1].name)
    caught = {step.name for step in steps if step.errors} - failed
    taken: set[int] = set()
    ambiguous: set[int] = set()
    for source, target, after_error in _transitions(graph, steps, result.events):
        candidates = [
            index
            for index, edge in enumerate(graph.edges)
            if edge.source == source and edge.target == target
        ]
        caught_here = [i for i in candidates if graph.edges[i].kind == "catch"]
        plain = [i for i in candidates if graph.edges[i].kind != "catch"]
        chosen = caught_here if after_error and caught_here else plain or caught_here
        taken.update(chosen)
        if len(chosen) > 1:
            ambiguous.update(chosen)
    unknown = [name for name in entered if name not in graph.states]
    return Trace(steps, entered, failed, caught, taken, ambiguous, unknown, reading.event_steps)


def _transitions(
    graph: diagram.Graph, steps: list[history.StateStep], events: list[dict[str, Any]]
) -> list[tuple[str, str, bool]]:
    """(from, to, left after an error) for each transition the execution took.

    Step Functions chains each event to the one before it in its own branch or
    Map iteration (previousEventId), so interleaved iterations are told apart:
    a state entered follows the state whose exit its chain reaches first. An
    older history without the chain falls back to consecutive states of one
    scope (the top level, or the inside of one Map or Parallel).
    """
    by_id = {event.get("id"): event for event in events}
    if events and all("previousEventId" in event and "id" in event for event in events):
        found = []
        for event in events:
            if "stateEnteredEventDetails" not in event:
                continue
            previous = by_id.get(event["previousEventId"])
            while previous is not None and "stateExitedEventDetails" not in previous:
                if str(previous["type"]).endswith(("IterationStarted", "StateStarted")):
                    previous = None  # the first state of a branch or iteration
                    break
                previous = by_id.get(previous.get("previousEventId"))
            if previous is None:
                continue
            before_exit = by_id.get(previous.get("previousEventId")) or {}
            after_error = bool(history.ERROR_EVENT.search(str(before_exit.get("type", ""))))
            found.append(
                (
                    str(previous["stateExitedEventDetails"]["name"]),
                    str(event["stateEnteredEventDetails"]["name"]),
                    after_error,
                )
            )
        return found
    scope = {name: parent for parent, names in graph.children.items() for name in names}
    last: dict[str | None, history.StateStep] = {}
    pairs: list[tuple[str, str, bool]] = []
    for step in steps:
        parent = scope.get(step.name)
        if parent in last:
            pairs.append((last[parent].name, step.name, bool(last[parent].errors)))
        last[parent] = step
    return pairs
