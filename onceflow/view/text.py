"""The viewer in a terminal: the executions table and an execution's path, as text."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.asl import diagram
from onceflow.view import history
from onceflow.view.executions import summary
from onceflow.view.records import Record
from onceflow.view.units import units


def iso_time(value: str | datetime.datetime | None) -> str:
    """A moment in ISO 8601, UTC, to the millisecond: 2026-01-02T03:04:05.123Z."""
    if not value:
        return "-"
    moment = (
        value if isinstance(value, datetime.datetime) else datetime.datetime.fromisoformat(value)
    )
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def duration(value: float | None) -> str:
    """Milliseconds as the console shows a duration: 85 ms, 12.3 s."""
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def render_table(rows: list[dict[str, Any]]) -> str:
    """The executions as a table, newest first."""
    if not rows:
        return "no executions"
    header = (
        "name", "stack", "status", "started (UTC)", "duration", "end state", "idempotency key",
    )  # fmt: skip
    table = [header] + [
        (
            row["name"],
            row.get("stack") or "-",
            row["status"],
            iso_time(row["startDate"]),
            duration(row["durationMs"]),
            row["endState"] or "-",
            row["idempotencyKey"]
            or (f"({row['iterations']} iterations)" if row.get("iterations") else "-"),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)), line[-1]])
        for line in table
    )


def terminal(record: Record, asl: dict[str, Any] | None = None) -> str:
    """The path taken, as `onceflow execute` prints it, with the execution's facts;
    `asl`, the definition it ran, names what its Fail states raised."""
    row = summary(record)
    states = diagram.graph(asl).states if asl is not None else None
    lines = history.render(record.result(), states).split("\n")
    result = record.result()
    ran = [unit for unit in units(result) if unit.iteration is not None]
    facts = [
        f"  state machine: {row['stateMachine'] or '-'}",
        f"  started: {iso_time(row['startDate'])}  duration: {duration(row['durationMs'])}",
    ]
    if not ran:
        facts.append(f"  idempotency key: {row['idempotencyKey'] or '-'}")
        return "\n".join([lines[0], *facts, *lines[1:]])
    # A batch: each iteration is a message, with its own outcome and key.
    width = max(len(history.iteration_label(unit.iteration)) for unit in ran) + 1
    ends = max(len(unit.end_state) for unit in ran)
    facts.append(f"  iterations: {len(ran)}")
    facts += [
        f"    {history.iteration_label(unit.iteration) + ':':<{width}} "
        f"{unit.end_state:<{ends}}  {unit.key or '-'}"
        for unit in ran
    ]
    return "\n".join([lines[0], *facts, *lines[1:]])
