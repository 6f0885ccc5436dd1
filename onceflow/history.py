"""Turn an execution history into the console's view: states in order, outcome, timing."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from onceflow.engine import ExecutionResult


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

    @property
    def duration_ms(self) -> float | None:
        if self.entered is None or self.exited is None:
            return None
        return (self.exited - self.entered).total_seconds() * 1000

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "outcome": self.outcome,
            "errors": self.errors,
            "duration_ms": None if self.duration_ms is None else round(self.duration_ms, 1),
        }


def _error_of(event: dict[str, Any]) -> str | None:
    for key, details in event.items():
        if key.endswith("EventDetails") and isinstance(details, dict) and "error" in details:
            return str(details["error"])
    return None


def _cause_of(event: dict[str, Any]) -> str | None:
    for key, details in event.items():
        if key.endswith("EventDetails") and isinstance(details, dict) and "cause" in details:
            return str(details["cause"])
    return None


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


def _open_step(path: list[StateStep], name: str) -> StateStep:
    """The step an exit event closes: the latest unexited one of that name.

    A Map or Parallel exits after the states nested in it, so it is not always
    the last step entered.
    """
    for step in reversed(path):
        if step.name == name and step.exited is None:
            return step
    return path[-1]


def steps(result: ExecutionResult) -> list[StateStep]:
    """Group the history events under the state they belong to."""
    path: list[StateStep] = []
    # Step Functions chains each event to the previous one of its own branch or
    # Map iteration (previousEventId): an error belongs to the state its chain
    # leads back to, which in interleaved iterations is not the last one entered.
    by_id = {event.get("id"): event for event in result.events if "id" in event}
    step_of_entry: dict[Any, StateStep] = {}

    def owner(event: dict[str, Any]) -> StateStep:
        seen = 0
        previous = by_id.get(event.get("previousEventId"))
        while previous is not None and seen < len(by_id):
            found = step_of_entry.get(previous.get("id"))
            if found is not None:
                return found
            previous = by_id.get(previous.get("previousEventId"))
            seen += 1
        return path[-1]

    for event in result.events:
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
                )
            )
            if "id" in event:
                step_of_entry[event["id"]] = path[-1]
            continue
        if not path:
            continue
        current = owner(event) if kind != "ExecutionFailed" else path[-1]
        if "stateExitedEventDetails" in event:
            details = event["stateExitedEventDetails"]
            current = _open_step(path, str(details["name"]))
            current.exited = timestamp
            current.output = payload(details.get("output"))
            current.outcome = (
                f"ok after {len(current.errors)} error(s): caught/retried"
                if current.errors
                else "ok"
            )
            continue
        error = _error_of(event)
        if error is not None and kind != "ExecutionFailed":
            current.errors.append(error)
            current.cause = _cause_of(event)
            current.exited = timestamp
            current.outcome = f"failed: {error}"
        elif kind == "ExecutionFailed":
            current.exited = current.exited or timestamp
            current.outcome = f"failed: {error}"
        elif kind == "ExecutionSucceeded" and current.outcome == "running":
            current.exited = timestamp
            current.outcome = "succeeded"
    # A Catch moves on to the next state: an error there was handled, not final.
    for step in path[:-1]:
        if step.outcome.startswith("failed") or step.outcome == "running":
            step.outcome = f"caught {step.errors[-1]}" if step.errors else "ok"
    return path


def render(result: ExecutionResult) -> str:
    """A plain-text table like the console's 'Table view' of an execution."""
    lines = [
        f"Execution {result.name}",
        f"  status: {result.status}" + (f"  error: {result.error}" if result.error else ""),
        "",
        f"  {'#':>2}  {'state':<22} {'type':<8} {'duration':>9}  outcome",
    ]
    for number, step in enumerate(steps(result), start=1):
        duration = "" if step.duration_ms is None else f"{step.duration_ms:.0f} ms"
        lines.append(f"  {number:>2}  {step.name:<22} {step.type:<8} {duration:>9}  {step.outcome}")
    lines.append("")
    if result.cause:
        lines.append(f"  cause: {result.cause}")
    lines.append("  output: " + json.dumps(result.output, indent=2).replace("\n", "\n  "))
    return "\n".join(lines)


def to_json(result: ExecutionResult) -> dict[str, Any]:
    return {
        "executionArn": result.arn,
        "status": result.status,
        "error": result.error,
        "cause": result.cause,
        "output": result.output,
        "states": [step.to_json() for step in steps(result)],
    }
