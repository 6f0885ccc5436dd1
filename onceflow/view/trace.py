"""The path an execution took through its state machine's graph: the states entered,
failed and caught, and the transitions taken, in all and in each Map iteration."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    # Each event's Map iteration, and what each iteration did (in the order of its index).
    event_iterations: list[history.Iteration | None] = field(default_factory=list)
    iterations: list[IterationPath] = field(default_factory=list)


@dataclass
class IterationPath:
    """One Map iteration's own path: the states it entered, failed and caught inside
    the Map, and the transitions it took there."""

    iteration: history.Iteration
    status: str  # how its MapIteration* event ended it: Succeeded, Failed, Aborted, or Running
    steps: list[int]  # indexes into Trace.steps
    entered: list[str]
    failed: set[str]
    caught: set[str]
    taken: set[int]


def _edges(graph: diagram.Graph, source: str, target: str, after_error: bool) -> list[int]:
    """The graph's edges a transition from source to target may have taken."""
    candidates = [
        index
        for index, edge in enumerate(graph.edges)
        if edge.source == source and edge.target == target
    ]
    caught_here = [i for i in candidates if graph.edges[i].kind == "catch"]
    plain = [i for i in candidates if graph.edges[i].kind != "catch"]
    return caught_here if after_error and caught_here else plain or caught_here


def trace(graph: diagram.Graph, record: Record) -> Trace:
    result = record.result()
    reading = history.read(result, graph.states)
    steps = reading.steps
    entered = list(dict.fromkeys(step.name for step in steps))
    failed = {step.name for step in steps if step.outcome.startswith("failed")}
    if steps and record.status in ("FAILED", "TIMED_OUT", "ABORTED"):
        failed.add(steps[-1].name)
    caught = {step.name for step in steps if step.errors} - failed
    taken: set[int] = set()
    ambiguous: set[int] = set()
    taken_in: dict[history.Iteration, set[int]] = {}
    for source, target, after_error, step in _transitions(graph, steps, result.events, reading):
        chosen = _edges(graph, source, target, after_error)
        taken.update(chosen)
        if len(chosen) > 1:
            ambiguous.update(chosen)
        iteration = steps[step].iteration
        if iteration is not None:
            taken_in.setdefault(iteration, set()).update(chosen)
    unknown = [name for name in entered if name not in graph.states]
    return Trace(
        steps,
        entered,
        failed,
        caught,
        taken,
        ambiguous,
        unknown,
        reading.event_steps,
        reading.event_iterations,
        _iteration_paths(reading, taken_in, result.events),
    )


def _iteration_paths(
    reading: history.Reading,
    taken_in: dict[history.Iteration, set[int]],
    events: list[dict[str, Any]],
) -> list[IterationPath]:
    ended = history.iteration_ends(events, reading.event_iterations)
    paths = []
    for iteration, steps in sorted(reading.iterations().items()):
        failed = {step.name for step in steps if step.outcome.startswith("failed")}
        status = ended.get(iteration, "Running")
        if status in ("Failed", "Aborted") and not failed:
            # The iteration ended in error: the state it stopped in failed, as an
            # execution's last state does when the execution fails.
            failed = {steps[-1].name}
        paths.append(
            IterationPath(
                iteration,
                "Running" if status == "Started" else status,
                [step.index for step in steps],
                list(dict.fromkeys(step.name for step in steps)),
                failed,
                {step.name for step in steps if step.errors} - failed,
                taken_in.get(iteration, set()),
            )
        )
    return paths


def _transitions(
    graph: diagram.Graph,
    steps: list[history.StateStep],
    events: list[dict[str, Any]],
    reading: history.Reading,
) -> list[tuple[str, str, bool, int]]:
    """(from, to, left after an error, the step entered) for each transition taken.

    Step Functions chains each event to the one before it in its own branch or
    Map iteration (previousEventId), so interleaved iterations are told apart:
    a state entered follows the state whose exit its chain reaches first. An
    older history without the chain falls back to consecutive states of one
    scope (the top level, or the inside of one Map or Parallel).
    """
    by_id = {event.get("id"): event for event in events}
    if events and all("previousEventId" in event and "id" in event for event in events):
        found = []
        for position, event in enumerate(events):
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
            target_step = reading.event_steps[position]
            found.append(
                (
                    str(previous["stateExitedEventDetails"]["name"]),
                    str(event["stateEnteredEventDetails"]["name"]),
                    after_error,
                    0 if target_step is None else target_step,
                )
            )
        return found
    scope = {name: parent for parent, names in graph.children.items() for name in names}
    last: dict[str | None, history.StateStep] = {}
    pairs: list[tuple[str, str, bool, int]] = []
    for step in steps:
        parent = scope.get(step.name)
        if parent in last:
            pairs.append((last[parent].name, step.name, bool(last[parent].errors), step.index))
        last[parent] = step
    return pairs
