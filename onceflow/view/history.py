"""An execution's history read as the console reads it: states in order, outcome, timing,
the variables each state assigned, and the state and the Map iteration each event
belongs to."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from onceflow.asl import outcome


class Execution(Protocol):
    """A finished execution as the viewer reads it: DescribeExecution's facts and the history.

    The local engine's ExecutionResult has this shape, and so has a record's
    (records.RecordedExecution): the viewer imports neither the engine nor moto.
    """

    @property
    def arn(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def input(self) -> Any: ...

    @property
    def output(self) -> Any: ...

    @property
    def error(self) -> str | None: ...

    @property
    def cause(self) -> str | None: ...

    @property
    def events(self) -> list[dict[str, Any]]: ...


# A state that failed inside a Parallel branch or a Map iteration when no event of the
# history names the error (no TaskFailed, no EvaluationFailed): the branch's failure shows
# only in the ParallelStateFailed or MapIterationFailed that follows, which carry no error
# (API reference, HistoryEvent: no details for the one, a Map's name and index for the
# other). A Fail state's fixed Error is read from the definition instead (_raised).
UNNAMED = "(an error the history does not name)"

# A definition's states by name, nested ones included (diagram.graph(asl).states).
States = Mapping[str, Mapping[str, Any]]
# Events that end a state's attempt in an error (TaskFailed, EvaluationFailed, ...).
ERROR_EVENT = re.compile(r"(Failed|TimedOut|Aborted)$")
# Events that open a branch or an iteration: the first state inside sees the variables
# of the Parallel or Map it runs in ("Passing data between states with variables":
# inner scopes read the outer scope's variables).
_OPENS_SCOPE = ("ParallelStateStarted", "MapStateStarted", "MapIterationStarted")
# A Map iteration: the Map state's name and the index of its item (the history's
# MapIterationEventDetails: "name", the iteration's parent Map state, and "index").
Iteration = tuple[str, int]
_ITERATION_EVENTS = (
    "MapIterationStarted",
    "MapIterationSucceeded",
    "MapIterationFailed",
    "MapIterationAborted",
)
_MAP_ENDS = ("MapStateSucceeded", "MapStateFailed", "MapStateAborted", "MapStateExited")


@dataclass
class StateStep:
    """One state the execution entered."""

    name: str
    type: str
    entered: datetime.datetime | None
    exited: datetime.datetime | None = None
    errors: list[str] = field(default_factory=list)
    outcome: str = "running"
    # What the console shows on a state's Input and Output tabs, and the last error's cause.
    input: Any = None
    output: Any = None
    cause: str | None = None
    # The variables the state assigned (its exit event's assignedVariables), decoded.
    assigned: dict[str, Any] = field(default_factory=dict)
    # Where the variables in scope when it was entered come from: ("after", i) the step at
    # index i of the path (its scope plus what it assigned), ("inside", i) the Map or
    # Parallel step i it runs in (that step's scope), or None (nothing assigned yet).
    scope_from: tuple[str, int] | None = None
    index: int = 0
    # The Map iteration it ran in (the innermost), or None outside any Map's iterations.
    iteration: Iteration | None = None

    @property
    def duration_ms(self) -> float | None:
        if self.entered is None or self.exited is None:
            return None
        return (self.exited - self.entered).total_seconds() * 1000

    @property
    def error(self) -> str | None:
        return self.errors[-1] if self.errors else None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "outcome": self.outcome,
            "errors": self.errors,
            "duration_ms": None if self.duration_ms is None else round(self.duration_ms, 1),
        }


@dataclass
class Reading:
    """The steps, and for each event (by its position) the index of the step it belongs
    to (None for the execution's own events: started, succeeded, failed) and the Map
    iteration it ran in (None outside any)."""

    steps: list[StateStep]
    event_steps: list[int | None]
    event_iterations: list[Iteration | None] = field(default_factory=list)

    def iterations(self) -> dict[Iteration, list[StateStep]]:
        """The steps of each Map iteration, iterations in the order they started."""
        found: dict[Iteration, list[StateStep]] = {}
        for step in self.steps:
            if step.iteration is not None:
                found.setdefault(step.iteration, []).append(step)
        return found


def iteration_ends(
    events: list[dict[str, Any]], event_iterations: list[Iteration | None]
) -> dict[Iteration, str]:
    """How each Map iteration ended, by its last MapIteration* event: Succeeded, Failed
    or Aborted (Started: it had not ended when the history was read)."""
    ended: dict[Iteration, str] = {}
    for event, iteration in zip(events, event_iterations, strict=True):
        kind = str(event.get("type", ""))
        if iteration is not None and kind in _ITERATION_EVENTS:
            ended[iteration] = kind.removeprefix("MapIteration")
    return ended


def iterations_of(events: list[dict[str, Any]]) -> list[Iteration | None]:
    """The Map iteration each event ran in, by following previousEventId.

    Step Functions chains an event to the one before it in its own iteration, and an
    iteration's MapIterationStarted names its Map and index. The chain crosses
    iterations in two places (recorded on AWS: LocalStack's snapshot
    test_base_scenarios.py::test_map_state_break_condition): MapIterationStarted of
    the next iteration follows the last event of the one before, and the Map's own
    end (MapStateSucceeded, MapStateFailed, MapStateExited) follows the last event
    of an iteration. So the iteration events name theirs, and a Map's end leaves the
    iteration its chain came from for the one the Map was entered in. A history
    without the chain has no iterations to tell apart: all None.
    """
    if not events or not all("previousEventId" in event and "id" in event for event in events):
        return [None] * len(events)
    by_id = {event["id"]: event for event in events}
    of_id: dict[Any, Iteration | None] = {}
    entered_in: dict[str, Iteration | None] = {}  # a Map's name -> where it was entered
    map_opening: set[Any] = set()  # ids of MapStateEntered and MapStateStarted events
    found: list[Iteration | None] = []
    for event in events:
        kind = str(event.get("type", ""))
        previous = by_id.get(event.get("previousEventId"))
        inherited = None if previous is None else of_id.get(previous["id"])
        iteration: Iteration | None
        if kind in _ITERATION_EVENTS:
            details = _details(event)
            iteration = (str(details.get("name", "")), int(details.get("index", 0)))
        elif kind == "MapStateEntered":
            iteration = inherited
            entered_in[str(event["stateEnteredEventDetails"]["name"])] = inherited
            map_opening.add(event["id"])
        elif kind == "MapStateStarted":
            iteration = inherited
            map_opening.add(event["id"])
        elif kind in _MAP_ENDS and previous is not None and inherited is not None:
            if previous["id"] in map_opening or str(previous.get("type")) in _MAP_ENDS:
                iteration = inherited  # a Map of no items, or its second end event
            else:
                iteration = entered_in.get(inherited[0])
        else:
            iteration = inherited
        of_id[event["id"]] = iteration
        found.append(iteration)
    return found


def _details(event: dict[str, Any]) -> dict[str, Any]:
    for key, details in event.items():
        if key.endswith("EventDetails") and isinstance(details, dict):
            return details
    return {}


def error_of(event: dict[str, Any]) -> str | None:
    """The error an event names (TaskFailed, EvaluationFailed, ExecutionFailed, ...)."""
    details = _details(event)
    return str(details["error"]) if "error" in details else None


def _cause_of(event: dict[str, Any]) -> str | None:
    details = _details(event)
    return str(details["cause"]) if "cause" in details else None


def payload(text: Any) -> Any:
    """A state's input or output as the history carries it (JSON text), decoded.

    Text that is not JSON (a truncated payload) is shown as it is.
    """
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _open_step(path: list[StateStep], name: str, iteration: Iteration | None) -> StateStep:
    """The step an exit event closes: the latest unexited one of that name in the
    event's Map iteration.

    A Map or Parallel exits after the states nested in it, so it is not always
    the last step entered; and the iterations of a Map run at once, so the latest
    step of that name may be another iteration's.
    """
    for step in reversed(path):
        if step.name == name and step.exited is None and step.iteration == iteration:
            return step
    for step in reversed(path):
        if step.name == name and step.exited is None:
            return step
    return path[-1]


def _open_container(
    path: list[StateStep], kind: str, iteration: Iteration | None
) -> StateStep | None:
    """The latest unexited Map or Parallel in this Map iteration (the event's)."""
    for step in reversed(path):
        if step.type == kind and step.exited is None and step.iteration == iteration:
            return step
    for step in reversed(path):
        if step.type == kind and step.exited is None:
            return step
    return None


def read(result: Execution, states: States | None = None) -> Reading:
    """Group the history events under the state they belong to. `states`: the definition's
    states by name (diagram.graph(asl).states), which name what a Fail state raised."""
    events = result.events
    path: list[StateStep] = []
    event_steps: list[int | None] = []
    # Step Functions chains each event to the previous one of its own branch or
    # Map iteration (previousEventId): an error belongs to the state its chain
    # leads back to, which in interleaved iterations is not the last one entered.
    by_id = {event.get("id"): event for event in events if "id" in event}
    chained = bool(events) and all("previousEventId" in event for event in events)
    step_of_entry: dict[Any, StateStep] = {}
    step_of_exit: dict[Any, StateStep] = {}

    def back(event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events the chain leads back through, nearest first."""
        found: list[dict[str, Any]] = []
        previous = by_id.get(event.get("previousEventId"))
        while previous is not None and len(found) < len(by_id):
            found.append(previous)
            previous = by_id.get(previous.get("previousEventId"))
        return found

    def entered_as(event: dict[str, Any], name: str) -> StateStep | None:
        """The step of `name` that the event's chain leads back to (its own entry)."""
        if not chained:
            return None
        for previous in back(event):
            details = previous.get("stateEnteredEventDetails")
            if details is not None and details.get("name") == name:
                return step_of_entry.get(previous.get("id"))
        return None

    def owner(event: dict[str, Any]) -> StateStep:
        for previous in back(event):
            found = step_of_entry.get(previous.get("id"))
            if found is not None:
                return found
        return path[-1]

    def scope_from(event: dict[str, Any]) -> tuple[str, int] | None:
        if not chained:
            return ("after", path[-1].index) if path else None
        inside = False
        for previous in back(event):
            if not inside and previous.get("id") in step_of_exit:
                return ("after", step_of_exit[previous["id"]].index)
            if str(previous.get("type")) in _OPENS_SCOPE:
                inside = True
            elif inside and previous.get("id") in step_of_entry:
                return ("inside", step_of_entry[previous["id"]].index)
        return None

    def event_before(position: int, event: dict[str, Any]) -> dict[str, Any]:
        if chained:
            return by_id.get(event.get("previousEventId")) or {}
        return events[position - 1] if position > 0 else {}

    event_iterations = iterations_of(events)
    for position, event in enumerate(events):
        kind = str(event["type"])
        timestamp = event.get("timestamp")
        if "stateEnteredEventDetails" in event:
            details = event["stateEnteredEventDetails"]
            path.append(
                StateStep(
                    name=details["name"],
                    type=kind.removesuffix("StateEntered"),
                    entered=timestamp,
                    input=payload(details.get("input")),
                    scope_from=scope_from(event),
                    index=len(path),
                    iteration=event_iterations[position],
                )
            )
            if "id" in event:
                step_of_entry[event["id"]] = path[-1]
            event_steps.append(path[-1].index)
            continue
        if not path or kind.startswith("Execution"):
            _execution_event(path, kind, event, timestamp)
            event_steps.append(None)
            continue
        if "stateExitedEventDetails" in event:
            details = event["stateExitedEventDetails"]
            name = str(details["name"])
            current = entered_as(event, name) or _open_step(path, name, event_iterations[position])
            current.exited = timestamp
            current.output = payload(details.get("output"))
            current.assigned = {
                str(name): payload(value)
                for name, value in (details.get("assignedVariables") or {}).items()
            }
            after_error = ERROR_EVENT.search(str(event_before(position, event).get("type", "")))
            if current.errors and after_error:
                current.outcome = f"caught {current.errors[-1]}"  # by the state's Catch
            elif current.errors:
                current.outcome = f"ok after {len(current.errors)} retried error(s)"
            else:
                current.outcome = "ok"
            if "id" in event:
                step_of_exit[event["id"]] = current
            event_steps.append(current.index)
            continue
        current = owner(event)
        if kind in ("ParallelStateFailed", "MapIterationFailed", "MapStateFailed"):
            current = _branch_failed(
                path, kind, current, timestamp, event_iterations[position], states or {}
            )
        else:
            error = error_of(event)
            if error is not None:
                if kind == "EvaluationFailed":
                    named = str(_details(event).get("state") or current.name)
                    if current.name != named:
                        current = entered_as(event, named) or _open_step(
                            path, named, event_iterations[position]
                        )
                current.errors.append(error)
                current.cause = _cause_of(event)
                current.exited = timestamp
                current.outcome = f"failed: {error}"
        event_steps.append(current.index)
    # A Catch moves on to the next state: an error there was handled, not final.
    for step in path[:-1]:
        if step.outcome.startswith("failed") or step.outcome == "running":
            step.outcome = f"caught {step.errors[-1]}" if step.errors else "ok"
    return Reading(path, event_steps, event_iterations)


def _execution_event(
    path: list[StateStep], kind: str, event: dict[str, Any], timestamp: Any
) -> None:
    if not path:
        return
    current = path[-1]
    if kind in ("ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted"):
        current.exited = current.exited or timestamp
        error = error_of(event)
        stopped = {"ExecutionTimedOut": "timed out", "ExecutionAborted": "aborted"}.get(kind)
        current.outcome = f"failed: {error}" if error or not stopped else stopped
    elif kind == "ExecutionSucceeded" and current.outcome == "running":
        current.exited = timestamp
        current.outcome = "succeeded"


def _branch_failed(
    path: list[StateStep],
    kind: str,
    inner: StateStep,
    timestamp: Any,
    iteration: Iteration | None,
    states: States,
) -> StateStep:
    """A branch or iteration failed: the state it failed in, and (when the whole Parallel
    or Map fails) the Parallel or Map, which fails with the same error ("Parallel workflow
    state": a failed branch fails the Parallel). Returns the step the event belongs to.
    `iteration`: the event's (a MapIterationFailed's is the one that failed, inside the
    Map: its Map is found in any)."""
    where = None if kind == "MapIterationFailed" else iteration
    container = _open_container(path, "Map" if kind.startswith("Map") else "Parallel", where)
    if inner is not container and inner.exited is None:
        if not inner.errors:
            inner.errors.append(
                _raised(states.get(inner.name)) if inner.type == "Fail" else UNNAMED
            )
        inner.exited = timestamp
        inner.outcome = f"failed: {inner.errors[-1]}"
    if container is None or kind == "MapIterationFailed":
        return inner
    error = inner.errors[-1] if inner is not container and inner.errors else UNNAMED
    container.errors.append(error)
    container.cause = inner.cause if inner is not container else container.cause
    container.outcome = f"failed: {error}"
    return container


def _raised(state: Mapping[str, Any] | None) -> str:
    """The error a Fail state raises when its definition names it: a fixed Error ("Fail
    workflow state"), not one computed as it runs (a JSONata expression, an ErrorPath)."""
    error = (state or {}).get("Error")
    if isinstance(error, str) and error and not error.lstrip().startswith("{%"):
        return error
    return UNNAMED


def steps(result: Execution, states: States | None = None) -> list[StateStep]:
    """The states entered, in order."""
    return read(result, states).steps


def scope(path: list[StateStep], index: int) -> dict[str, Any]:
    """The variables in scope when path[index] was entered (later assignments win)."""
    chain: list[tuple[str, int]] = []
    link = path[index].scope_from
    while link is not None:
        chain.append(link)
        link = path[link[1]].scope_from
    variables: dict[str, Any] = {}
    for how, at in reversed(chain):
        if how == "after":
            variables.update(path[at].assigned)
    return variables


def iteration_label(iteration: Iteration | None) -> str:
    """How a Map iteration is named in tables: EachMessage#3."""
    return "-" if iteration is None else f"{iteration[0]}#{iteration[1]}"


def in_iteration_order(path: list[StateStep]) -> list[StateStep]:
    """The steps with each Map iteration's together, iterations by index, where the
    Map's first iteration began: the iterations of a Map run at once, and their steps
    interleave in the history."""
    blocks: dict[Iteration | int, list[StateStep]] = {}
    anchors: dict[str, int] = {}  # a Map's name -> where its iterations' steps go
    for position, step in enumerate(path):
        if step.iteration is None:
            blocks[position] = [step]
        else:
            anchors.setdefault(step.iteration[0], position)
            blocks.setdefault(step.iteration, []).append(step)

    def order(key: Iteration | int) -> tuple[int, int]:
        return (key, -1) if isinstance(key, int) else (anchors[key[0]], key[1])

    return [step for key in sorted(blocks, key=order) for step in blocks[key]]


def ended_in(result: Execution) -> str | None:
    """How the execution ended, as users see it: the last state it entered at its top
    level, or, once it succeeded on an end Task, that Task's outcome (MarkComplete:
    Processed)."""
    top = [step.name for step in steps(result) if step.iteration is None]
    return outcome(top[-1] if top else None, result.status == "SUCCEEDED")


def render(result: Execution, states: States | None = None) -> str:
    """A plain-text table like the console's 'Table view' of an execution; the states of
    a Map's iterations under an iteration column, each iteration's rows together."""
    path = steps(result, states)
    width = max([22, *(len(step.name) for step in path)])
    iterated = any(step.iteration for step in path)
    labels = {step.index: iteration_label(step.iteration) for step in path}
    column = max([9, *(len(label) for label in labels.values())]) if iterated else 0
    heading = f"{'iteration':<{column}} " if iterated else ""
    lines = [
        f"Execution {result.name}",
        f"  status: {result.status}"
        + (f"  error: {result.error}" if result.error else "")
        + (f"  ended in: {ended}" if (ended := ended_in(result)) else ""),
        "",
        f"  {'#':>2}  {heading}{'state':<{width}} {'type':<8} {'duration':>9}  outcome",
    ]
    for step in in_iteration_order(path) if iterated else path:
        duration = "" if step.duration_ms is None else f"{step.duration_ms:.0f} ms"
        where = f"{labels[step.index]:<{column}} " if iterated else ""
        lines.append(
            f"  {step.index + 1:>2}  {where}{step.name:<{width}} {step.type:<8} {duration:>9}"
            f"  {step.outcome}"
        )
    lines.append("")
    if result.cause:
        lines.append(f"  cause: {result.cause}")
    lines.append("  output: " + json.dumps(result.output, indent=2).replace("\n", "\n  "))
    return "\n".join(lines)


def to_json(result: Execution, states: States | None = None) -> dict[str, Any]:
    return {
        "executionArn": result.arn,
        "status": result.status,
        "error": result.error,
        "cause": result.cause,
        "output": result.output,
        "endedIn": ended_in(result),
        "states": [step.to_json() for step in steps(result, states)],
    }
