"""The execution as one self-contained HTML page, as the console shows it: the graph and
the selected state's detail side by side, then the states entered and the events.

The CSS and JavaScript are package files (static/), inlined into the page and allowed by
their hashes: the page's Content-Security-Policy allows nothing else, loads nothing.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from onceflow.asl import diagram
from onceflow.project import private_directory, state_directory, write_private
from onceflow.view import history, records
from onceflow.view.executions import summary
from onceflow.view.layout import subtitle
from onceflow.view.records import Record
from onceflow.view.svg import escape, svg
from onceflow.view.text import duration, iso_time
from onceflow.view.trace import Trace, trace
from onceflow.view.units import Unit, units

SHOW_DIRECTORY = state_directory() / "show"
STATIC = ("guard.js", "viewer.css", "viewer.js")
# A Map's or Parallel's nested states are states of their own: the Definition tab shows
# the state's own fields.
_NESTED = ("Branches", "ItemProcessor", "Iterator")


@cache
def static(name: str) -> str:
    """One of the page's package files (static/), as text."""
    if name not in STATIC:
        raise ValueError(f"{name} is not one of the page's files {STATIC}")
    return resources.files("onceflow.view").joinpath("static", name).read_text(encoding="utf-8")


def csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _script_json(value: Any) -> str:
    """JSON to sit inside a <script> element: no '<', '>' or '&' to end it early."""
    text = json.dumps(value, default=str)  # ASCII only: U+2028 and the like escaped too
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text


def _entry(step: history.StateStep) -> dict[str, Any]:
    return {
        "step": step.index,
        "outcome": step.outcome,
        "durationMs": None if step.duration_ms is None else round(step.duration_ms, 1),
        "errors": step.errors,
        "cause": step.cause,
        "input": step.input,
        "output": step.output,
        "entered": None if step.entered is None else iso_time(step.entered),
        "exited": None if step.exited is None else iso_time(step.exited),
        "iteration": None if step.iteration is None else history.iteration_label(step.iteration),
    }


def _definition(state: dict[str, Any]) -> dict[str, Any]:
    return {key: ("..." if key in _NESTED else value) for key, value in state.items()}


def _resource(event: dict[str, Any]) -> str:
    """The service action a Task event is about (lambda:invoke, dynamodb:putItem)."""
    for key, details in event.items():
        if key.endswith("EventDetails") and isinstance(details, dict):
            if details.get("resourceType") and details.get("resource"):
                return f"{details['resourceType']}:{details['resource']}"
            if key.startswith("lambdaFunction") and details.get("resource"):
                return str(details["resource"])
    return ""


def _since(start: datetime.datetime | None, moment: Any) -> str:
    if start is None or not isinstance(moment, datetime.datetime):
        return "-"
    return duration((moment - start).total_seconds() * 1000)


def _start(events: list[dict[str, Any]], record: Record) -> datetime.datetime | None:
    """When the execution started: its first event's time (ExecutionStarted)."""
    for event in events:
        if isinstance(event.get("timestamp"), datetime.datetime):
            moment: datetime.datetime = event["timestamp"]
            return moment
    return record.start


def _iteration_cell(path: Trace, iteration: history.Iteration | None) -> str:
    """The iteration column's cell: only a page of an execution that ran iterations has it."""
    return f"<td>{escape(history.iteration_label(iteration))}</td>" if path.iterations else ""


def _event_rows(events: list[dict[str, Any]], path: Trace, start: datetime.datetime | None) -> str:
    """The console's Events table: id, type, (iteration), step, resource, started after,
    timestamp."""
    rows = []
    for position, event in enumerate(events):
        index = path.event_steps[position] if position < len(path.event_steps) else None
        step = None if index is None else path.steps[index].name
        iteration = path.event_iterations[position] if path.event_iterations else None
        kind = str(event.get("type", ""))
        failure = bool(history.ERROR_EVENT.search(kind))
        error = history.error_of(event) if failure else None
        rows.append(
            "<tr"
            + ("" if step is None else f' data-state="{escape(step)}"')
            + _iteration_attribute(iteration)
            + (' class="failure"' if failure else "")
            + f'><td class="number">{escape(event.get("id", position + 1))}</td>'
            f'<td class="type">{escape(kind)}'
            + (f' <span class="error">{escape(error)}</span>' if error else "")
            + "</td>"
            + _iteration_cell(path, iteration)
            + f"<td>{escape(step or '-')}</td><td>{escape(_resource(event) or '-')}</td>"
            f'<td class="number">{escape(_since(start, event.get("timestamp")))}</td>'
            f"<td>{escape(iso_time(event.get('timestamp')))}</td></tr>"
        )
    return "".join(rows)


def _iteration_attribute(iteration: history.Iteration | None) -> str:
    """A table row's Map iteration, which the iteration picker shows or hides."""
    if iteration is None:
        return ""
    return f' data-map="{escape(iteration[0])}" data-iteration="{iteration[1]}"'


def _state_rows(path: Trace, start: datetime.datetime | None) -> str:
    rows = []
    for number, step in enumerate(path.steps, start=1):
        caught = step.errors and step.outcome.startswith("caught")
        rows.append(
            f'<tr data-state="{escape(step.name)}"'
            + _iteration_attribute(step.iteration)
            + (' class="caught"' if caught else "")
            + f'><td class="number">{number}</td>'
            + _iteration_cell(path, step.iteration)
            + f"<td>{escape(step.name)}</td>"
            f"<td>{escape(step.type)}</td>"
            f'<td class="number">{escape(_since(start, step.entered))}</td>'
            f'<td class="number">{escape(duration(step.duration_ms))}</td>'
            f"<td>{escape(step.outcome)}</td><td>{escape(step.error or '-')}</td></tr>"
        )
    return "".join(rows)


def _facts(record: Record, row: dict[str, Any], path: Trace) -> str:
    facts: list[tuple[str, str, bool]] = [
        ("State machine", escape(row["stateMachine"] or "-"), False),
        ("Started", escape(iso_time(row["startDate"])), False),
        ("Stopped", escape(iso_time(row["stopDate"])), False),
        ("Duration", escape(duration(row["durationMs"])), False),
        ("End state", escape(row["endState"] or "-"), False),
        (
            ("Iterations", escape(row["iterations"]), False)
            if row["iterations"]
            else ("Idempotency key", escape(row["idempotencyKey"] or "-"), True)
        ),
    ]
    if record.data.get("error"):
        facts.append(("Error", f'<span class="error">{escape(record.data["error"])}</span>', False))
    if record.data.get("cause"):
        facts.append(("Cause", escape(record.data["cause"]), True))
    facts.append(("ARN", escape(record.arn), True))
    if path.unknown:
        facts.append(
            (
                "Warning",
                '<span class="warning">states the ASL does not have (it changed since?): '
                + escape(", ".join(path.unknown))
                + "</span>",
                True,
            )
        )
    return "".join(
        ('<div class="wide">' if wide else "<div>")
        + f'<dt>{name}</dt><dd title="{escape(_text_of(value))}">{value}</dd></div>'
        for name, value, wide in facts
    )


def _text_of(markup: str) -> str:
    """The text of one fact's markup (a span at most), for its tooltip."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _inside(graph: diagram.Graph, name: str) -> list[str]:
    """The states nested in a Map or Parallel, at any depth."""
    found = []
    for child in graph.children.get(name, []):
        found += [child, *_inside(graph, child)]
    return found


def _option(unit: Unit | None, index: int) -> str:
    """An iteration as the picker lists it: its index, where it ended, its key's end."""
    if unit is None:
        return str(index)
    key = unit.key or ""
    return f"{index}: {unit.end_state}" + (f"  {key.rsplit('/', 1)[-1][:48]}" if key else "")


def _iterations(
    graph: diagram.Graph, path: Trace, ran: dict[history.Iteration, Unit]
) -> dict[str, Any]:
    """For each Map that ran iterations: the states inside it, and each iteration's path
    (what the page's picker shows when that iteration is picked)."""
    maps: dict[str, Any] = {}
    for item in path.iterations:
        name, index = item.iteration
        entry = maps.setdefault(name, {"inside": _inside(graph, name), "runs": {}})
        unit = ran.get(item.iteration)
        entry["runs"][str(index)] = {
            "status": item.status,
            "endState": None if unit is None else unit.end_state,
            "key": None if unit is None else unit.key,
            "entered": item.entered,
            "failed": sorted(item.failed),
            "caught": sorted(item.caught),
            "taken": sorted(item.taken),
        }
    return maps


def _pickers(path: Trace, ran: dict[history.Iteration, Unit]) -> str:
    """One picker for each Map that ran iterations: all of them, or one at a time (as
    the console shows a Map state's iterations)."""
    by_map: dict[str, list[int]] = {}
    for item in path.iterations:
        by_map.setdefault(item.iteration[0], []).append(item.iteration[1])
    bars = []
    for name, indexes in by_map.items():
        options = []
        for index in indexes:
            unit = ran.get((name, index))
            key = "" if unit is None or unit.key is None else unit.key
            options.append(
                f'<option value="{index}" title="{escape(key)}">'
                f"{escape(_option(unit, index))}</option>"
            )
        bars.append(
            f'<div class="iterations"><label>Iteration of {escape(name)} '
            f'<select class="iteration-picker" data-map="{escape(name)}">'
            f'<option value="">all {len(indexes)}</option>{"".join(options)}</select>'
            "</label></div>"
        )
    return "".join(bars)


def page(record: Record, asl: dict[str, Any]) -> str:
    """The execution as one self-contained HTML page (inline CSS, JS and SVG)."""
    graph = diagram.graph(asl)
    path = trace(graph, record)
    row = summary(record)
    states: dict[str, Any] = {
        name: {
            "type": state["Type"],
            "subtitle": subtitle(state),
            "definition": _definition(state),
            "entries": [_entry(step) for step in path.steps if step.name == name],
        }
        for name, state in graph.states.items()
    }
    ran = {unit.iteration: unit for unit in units(record.result()) if unit.iteration}
    data = {
        "execution": row,
        "path": [step.name for step in path.steps],
        "steps": [
            {"name": step.name, "assigned": step.assigned, "scopeFrom": step.scope_from}
            for step in path.steps
        ],
        "states": states,
        "iterations": _iterations(graph, path, ran),
    }
    iteration_th = "<th>iteration</th>" if path.iterations else ""
    events = record.events
    start = _start(events, record)
    guard, style, script = (static(name) for name in STATIC)
    csp = (
        "default-src 'none'; img-src data:; "
        f"style-src {csp_hash(style)}; script-src {csp_hash(guard)} {csp_hash(script)}"
    )
    status = escape(record.status)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(record.name)}: {status} - onceflow</title>
<script>{guard}</script>
<style>{style}</style>
</head>
<body data-execution="{escape(record.name)}" data-status="{status}">
<div id="app">
<header>
<h1>{escape(record.name)} <span class="status {status}">{status}</span></h1>
<dl class="facts">{_facts(record, row, path)}</dl>
</header>
<main id="workspace">
<section id="graph-pane" aria-label="Graph">
<div class="toolbar" role="toolbar" aria-label="Graph view">
<button type="button" data-action="fit" title="Fit the path taken (f)">Fit path</button>
<button type="button" data-action="fit-all" title="Fit the whole graph (a)">Fit graph</button>
<button type="button" data-action="zoom-out" title="Zoom out (-)" aria-label="Zoom out">-</button>
<output id="zoom-level" aria-live="polite">100%</output>
<button type="button" data-action="zoom-in" title="Zoom in (+)" aria-label="Zoom in">+</button>
<button type="button" data-action="actual" title="Actual size">1:1</button>
<span class="legend"><span><span class="swatch entered"></span>entered</span>
<span><span class="swatch caught"></span>caught error</span>
<span><span class="swatch failed"></span>failed</span></span>
</div>
{_pickers(path, ran)}<div id="canvas">
{svg(graph, path)}
</div>
</section>
<aside id="panel" aria-live="polite">
<p class="not-entered">Select a state to see its input, output and variables.</p></aside>
</main>
</div>
<h2 class="section">States ({len(path.steps)} entered)</h2>
<table class="path">
<thead><tr><th>#</th>{iteration_th}<th>state</th><th>type</th><th>started after</th>
<th>duration</th><th>outcome</th><th>error</th></tr></thead>
<tbody>{_state_rows(path, start)}</tbody>
</table>
<h2 class="section">Events ({len(events)})</h2>
<table class="events">
<thead><tr><th>ID</th><th>type</th>{iteration_th}<th>step</th><th>resource</th>
<th>started after</th><th>timestamp</th></tr></thead>
<tbody>{_event_rows(events, path, start)}</tbody>
</table>
<script type="application/json" id="execution-data">{_script_json(data)}</script>
<script>{script}</script>
</body>
</html>
"""


def html_path(record: Record, folder: Path | None = None) -> Path:
    """NAME.html (a name with other characters than a file's: those replaced, plus a hash).

    Unlike a record's file, not told apart by state machine: a page is written again by
    every `show`, so two executions of one name in two machines only take turns."""
    name = records.file_name(record.name)
    return (folder or SHOW_DIRECTORY) / (name.removesuffix(".json") + ".html")


def write_page(record: Record, asl: dict[str, Any], destination: Path) -> Path:
    """The page holds the execution's input and history (message bodies): 0600."""
    private_directory(destination.parent)
    return write_private(destination, page(record, asl))
