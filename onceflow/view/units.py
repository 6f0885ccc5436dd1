"""The units of work an execution ran, as the reports count them: the execution itself,
or each iteration of its Map (a batch execution of SqsBatchMode: one per message),
each with the state it ended in and the idempotency key it claimed.

The demo and chaos count deliveries, duplicates and outcomes through this, so a batch
of ten messages counts as ten, not one, and a message a batch kept in the queue and the
pipe delivered again counts once, with the outcome of its last delivery.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onceflow.asl import outcome
from onceflow.view import history
from onceflow.view.executions import idempotency_key

# States whose entry ends the work of the branch they are in.
_TERMINAL = ("Succeed", "Fail")
# Statuses of an execution that ended before its work did.
_CUT_SHORT = ("FAILED", "TIMED_OUT", "ABORTED")


@dataclass(frozen=True)
class Unit:
    """One unit of work: where it ran, where it ended, and the key it claimed."""

    iteration: history.Iteration | None  # None: the execution itself
    # What it worked on: the SQS messageId of its item when its execution's input is the
    # pipe's array of SQS records; otherwise the execution's ARN (and iteration).
    message: str
    end_state: str
    key: str | None
    # Its work ended: it entered a Succeed or Fail state, or its iteration (its
    # execution) succeeded; not when its execution was cut short before it ended.
    ended: bool


def units(result: history.Execution) -> list[Unit]:
    """The execution's units: one per iteration of a Map at its top level, when it ran
    any; otherwise the execution itself."""
    reading = history.read(result)
    top_maps = {s.name for s in reading.steps if s.type == "Map" and s.iteration is None}
    runs = {
        iteration: steps
        for iteration, steps in sorted(reading.iterations().items())
        if iteration[0] in top_maps
    }
    if not runs:
        names = [step.name for step in reading.steps]
        ended = result.status == "SUCCEEDED" or any(s.type in _TERMINAL for s in reading.steps)
        end = result.status if result.status == "ABORTED" or not names else names[-1]
        # An execution that succeeded on an end Task (MarkComplete) is named by its outcome.
        end = outcome(end, result.status == "SUCCEEDED") or end
        message = _message(result, 0) or result.arn
        return [Unit(None, message, end, idempotency_key(result.events), ended)]
    how = history.iteration_ends(result.events, reading.event_iterations)
    found = []
    for iteration, steps in runs.items():
        # Where the unit's work ended: the first Succeed or Fail state it entered. In
        # the batch definition a processor's Fail state runs in a Parallel whose Catch
        # then ends the iteration (in a Succeed state of its own): the Fail state is
        # the outcome.
        terminal = next((step.name for step in steps if step.type in _TERMINAL), None)
        how_it_ended = how.get(iteration)
        if terminal is None and how_it_ended != "Succeeded" and result.status in _CUT_SHORT:
            end = result.status
        else:
            end = terminal or steps[-1].name
        events = [
            event
            for event, where in zip(result.events, reading.event_iterations, strict=True)
            if where == iteration
        ]
        ended = terminal is not None or how_it_ended == "Succeeded"
        message = _message(result, iteration[1]) if len(top_maps) == 1 else ""
        message = message or f"{result.arn}#{iteration[0]}#{iteration[1]}"
        found.append(Unit(iteration, message, end, idempotency_key(events), ended))
    return found


def _message(result: history.Execution, index: int) -> str:
    """The messageId of item `index` of the execution's input, when the input is the
    array of SQS records EventBridge Pipes sends (an array even for one message:
    eb-pipes-batching-concurrency.html; each record as eb-pipes-sqs.html shows it).
    A Map over that array runs item i as iteration i."""
    records = result.input
    if isinstance(records, list) and index < len(records):
        record = records[index]
        if isinstance(record, dict) and isinstance(record.get("messageId"), str):
            return str(record["messageId"])
    return result.arn if index == 0 and not isinstance(records, list) else ""


def per_message(ran: Iterable[Unit]) -> list[Unit]:
    """Each message's unit of its last delivery (units in the order they ran), in the
    order first delivered: a message a batch kept in the queue (not settled) comes
    back, and its last delivery says how it ended."""
    last: dict[str, Unit] = {}
    for unit in ran:
        last[unit.message] = unit
    return list(last.values())
