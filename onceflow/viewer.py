"""A console-like execution viewer: `onceflow executions` and `onceflow show`.

Executions come from the local records (records.py) or, with --stack-name,
from Step Functions (ListExecutions, DescribeExecution, GetExecutionHistory).
`show` prints the path taken and writes one self-contained HTML page: the
state machine's graph as SVG, laid out here from the ASL (diagram.graph), the
path highlighted, and each state's input and output on click.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import json
import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from onceflow import diagram, history, records
from onceflow.files import private_directory, write_private
from onceflow.ops import OpsError, Target
from onceflow.records import Record, RecordError

SHOW_DIRECTORY = diagram.ROOT / ".onceflow" / "show"
# Logical id -> the ASL file it is defined by (diagram.MACHINES' names).
LOGICAL_IDS = {"ProcessorStateMachine": "processor", "AuditStateMachine": "audit"}
OUTPUTS = {"processor": "ProcessorStateMachineArn", "audit": "AuditStateMachineArn"}
STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE")


# ---- what an execution's history says ----------------------------------------


def _json(text: Any) -> Any:
    return history.payload(text)


def idempotency_key(events: list[dict[str, Any]]) -> str | None:
    """The ledger key the execution claimed: Claim's putItem parameters, Item.pk.S."""
    state = None
    for event in events:
        if "stateEnteredEventDetails" in event:
            state = event["stateEnteredEventDetails"]["name"]
        elif state == "Claim" and "taskScheduledEventDetails" in event:
            parameters = _json(event["taskScheduledEventDetails"].get("parameters"))
            if isinstance(parameters, dict):
                for container in ("Item", "Key"):
                    pk = parameters.get(container, {}).get("pk", {})
                    if isinstance(pk, dict) and isinstance(pk.get("S"), str):
                        return str(pk["S"])
    return None


def end_state(events: list[dict[str, Any]]) -> str | None:
    entered = [
        event["stateEnteredEventDetails"]["name"]
        for event in events
        if "stateEnteredEventDetails" in event
    ]
    return str(entered[-1]) if entered else None


def _duration_ms(record: Record) -> float | None:
    if record.start is None or record.stop is None:
        return None
    return (record.stop - record.start).total_seconds() * 1000


def summary(record: Record) -> dict[str, Any]:
    """One row of `onceflow executions`."""
    events = record.events
    duration = _duration_ms(record)
    return {
        "name": record.name,
        "executionArn": record.arn,
        "stateMachine": record.logical_id or record.data.get("stateMachineArn"),
        "status": record.status,
        "startDate": None if record.start is None else record.start.isoformat(),
        "stopDate": None if record.stop is None else record.stop.isoformat(),
        "durationMs": None if duration is None else round(duration, 1),
        "idempotencyKey": idempotency_key(events),
        "endState": end_state(events),
        "error": record.data.get("error"),
    }


def _time(value: str | None) -> str:
    if not value:
        return "-"
    moment = datetime.datetime.fromisoformat(value)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def render_table(rows: list[dict[str, Any]]) -> str:
    """The executions as a table, newest first."""
    if not rows:
        return "no executions"
    header = ("name", "status", "started (UTC)", "duration", "end state", "idempotency key")
    table = [header] + [
        (
            row["name"],
            row["status"],
            _time(row["startDate"]),
            _ms(row["durationMs"]),
            row["endState"] or "-",
            row["idempotencyKey"] or "-",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)), line[-1]])
        for line in table
    )


# ---- local and deployed sources ---------------------------------------------


def list_local(
    limit: int, status: str | None = None, machine: str | None = None, folder: Path | None = None
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for record in records.recent(folder):
        if status and record.status != status:
            continue
        if machine and LOGICAL_IDS.get(record.logical_id or "") != machine:
            continue
        rows.append(summary(record))
        if len(rows) >= limit:
            break
    rows.sort(key=lambda row: row["startDate"] or "", reverse=True)
    return rows


def _history(sfn: Any, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events += page["events"]
    return events


def _deployed_record(sfn: Any, arn: str, logical_id: str | None) -> Record:
    description = sfn.describe_execution(executionArn=arn)
    output = description.get("output")
    return Record(
        {
            "executionArn": arn,
            "name": description["name"],
            "stateMachineArn": description["stateMachineArn"],
            "logicalId": logical_id,
            "status": description["status"],
            "startDate": description.get("startDate"),
            "stopDate": description.get("stopDate"),
            "input": _json(description.get("input")),
            "output": _json(output) if output else None,
            "error": description.get("error"),
            "cause": description.get("cause"),
            "events": _history(sfn, arn),
        }
    )


def _aws(what: str, exc: ClientError) -> OpsError:
    return OpsError(f"{what}: {exc.response.get('Error', {}).get('Message') or exc}")


def list_deployed(
    target: Target, limit: int, status: str | None = None, machine: str = "processor"
) -> list[dict[str, Any]]:
    """ListExecutions on the stack's state machine, and each one's history for its key."""
    sfn = target.client("stepfunctions")
    machine_arn = target.output(OUTPUTS[machine])
    logical_id = {name: lid for lid, name in LOGICAL_IDS.items()}[machine]
    kwargs: dict[str, Any] = {"stateMachineArn": machine_arn}
    if status:
        kwargs["statusFilter"] = status
    rows: list[dict[str, Any]] = []
    try:
        for page in sfn.get_paginator("list_executions").paginate(**kwargs):
            for listed in page["executions"]:
                # ListExecutions has the description's fields the table needs.
                listed_record = Record(
                    {
                        **listed,
                        "logicalId": logical_id,
                        "events": _history(sfn, listed["executionArn"]),
                    }
                )
                rows.append(summary(listed_record))
                if len(rows) >= limit:
                    return rows
    except ClientError as exc:
        raise _aws(f"cannot list the executions of {machine_arn}", exc) from exc
    return rows


def find_deployed(target: Target, query: str, scan: int = 1000) -> Record:
    """An execution of the stack's state machines by ARN, name, or unique name prefix."""
    sfn = target.client("stepfunctions")
    machines = {name: target.output(output) for name, output in OUTPUTS.items()}
    by_name = {name: logical_id for logical_id, name in LOGICAL_IDS.items()}
    ids = {arn: by_name[name] for name, arn in machines.items()}

    def load(arn: str) -> Record:
        machine_arn = arn.rpartition(":")[0].replace(":execution:", ":stateMachine:", 1)
        return _deployed_record(sfn, arn, ids.get(machine_arn))

    try:
        if query.startswith("arn:"):
            return load(query)
        for machine_arn in machines.values():
            arn = machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + query
            try:
                return load(arn)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                    raise
        candidates: list[str] = []
        for machine_arn in machines.values():
            seen = 0
            for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn):
                for listed in page["executions"]:
                    seen += 1
                    if str(listed["name"]).startswith(query):
                        candidates.append(listed["executionArn"])
                if seen >= scan:
                    break
        if len(candidates) == 1:
            return load(candidates[0])
    except ClientError as exc:
        raise _aws(f"cannot read the execution {query}", exc) from exc
    if not candidates:
        raise RecordError(
            f"no execution named {query!r} among the newest {scan} of each state machine"
        )
    raise records.AmbiguousError(query, [arn.rpartition(":")[2] for arn in candidates])


def definition(record: Record, target: Target | None = None) -> dict[str, Any]:
    """The ASL the execution ran: the deployed definition, or locally the ASL file."""
    if target is not None and not target.local:
        # The definition this execution ran, not today's: a stack update may
        # have changed the state machine since.
        try:
            described = target.client("stepfunctions").describe_state_machine_for_execution(
                executionArn=record.arn
            )
        except ClientError as exc:
            raise _aws(f"cannot read the definition {record.arn} ran", exc) from exc
        asl: dict[str, Any] = json.loads(described["definition"])
        return asl
    name = LOGICAL_IDS.get(record.logical_id or "")
    if name is None:
        machine = str(record.data.get("stateMachineArn", "")).lower()
        name = next((n for n in diagram.MACHINES if n in machine.rsplit(":", 1)[-1]), None)
    if name is None:
        raise RecordError(f"{record.name}: no ASL file for state machine {record.logical_id}")
    return diagram.load_asl(diagram.MACHINES[name])


# ---- the path ---------------------------------------------------------------


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


def trace(graph: diagram.Graph, record: Record) -> Trace:
    result = record.result()
    steps = history.steps(result)
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
    return Trace(steps, entered, failed, caught, taken, ambiguous, unknown)


_ERROR_EVENT = re.compile(r"(Failed|TimedOut|Aborted)$")


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
            after_error = bool(_ERROR_EVENT.search(str(before_exit.get("type", ""))))
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


# ---- layout -----------------------------------------------------------------

_CHAR = 7.2  # px per character of 12px monospace text
_LABEL_CHAR = 6.6  # 11px
_NODE_H = 44.0
_GAP_X = 26.0
_GAP_Y = 14.0
_PAD = 16.0
_TITLE = 26.0
_LABEL_WRAP = 26
_DUMMY_W = 10.0
START = ""  # the start marker's key in a layout (no state can have an empty name)


@dataclass
class Box:
    name: str
    x: float
    y: float
    w: float
    h: float
    compound: bool = False

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


@dataclass
class Route:
    index: int  # into graph.edges; -1 for the start marker's edge
    points: list[tuple[float, float]]
    label: list[str]
    label_at: tuple[float, float] | None


@dataclass
class Layout:
    width: float
    height: float
    boxes: dict[str, Box] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)


def _wrap(text: str) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= _LABEL_WRAP:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _subtitle(state: dict[str, Any]) -> str:
    kind = str(state["Type"])
    resource = str(state.get("Resource", ""))
    if kind == "Task" and ":::" in resource:
        return f"Task: {resource.split(':::', 1)[1]}"
    return kind


@dataclass
class _Vertex:
    key: str
    w: float
    h: float
    rank: int
    real: bool
    label: list[str] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    row_top: float = 0.0  # the rank's band: edges run straight down through it
    row_bottom: float = 0.0


def _start_states(state: dict[str, Any]) -> list[str]:
    nested = state.get("ItemProcessor") or state.get("Iterator")
    if nested:
        return [str(nested["StartAt"])]
    return [str(branch["StartAt"]) for branch in state.get("Branches", [])]


_Scope = tuple[float, float, dict[str, tuple[float, float]], list[Route]]


def _layout_scope(
    graph: diagram.Graph,
    names: list[str],
    roots: list[str],
    sizes: dict[str, tuple[float, float]],
    extra: list[tuple[int, str, str, str]],
) -> _Scope:
    """Sugiyama-style layered layout of one scope (positions relative to the scope).

    Returns width, height, each state's top-left corner, and the edge routes.
    Layers are ranked twice as fine as the states: the odd ranks hold the edges'
    labels and bends, so that labels get room of their own.
    """
    members = set(names)
    edges = [
        (i, e.source, e.target, e.label)
        for i, e in enumerate(graph.edges)
        if e.source in members and e.target in members
    ] + extra
    successors: dict[str, list[tuple[int, str]]] = {n: [] for n in names}
    for index, source, target, _ in edges:
        successors[source].append((index, target))
    # Back edges (loops) by a depth-first walk from the scope's start states.
    back: set[int] = set()
    state_of: dict[str, int] = {}  # 1 on the stack, 2 done
    order: list[str] = []

    def visit(node: str) -> None:
        state_of[node] = 1
        order.append(node)
        for index, target in successors[node]:
            mark = state_of.get(target)
            if mark == 1:
                back.add(index)
            elif mark is None:
                visit(target)
        state_of[node] = 2

    for root in [*roots, *names]:
        if root in members and root not in state_of:
            visit(root)
    # Longest-path layers over the forward edges, in topological order.
    forward = [(i, s, t, label) for i, s, t, label in edges if i not in back]
    indegree = {n: 0 for n in names}
    for _, _, target, _ in forward:
        indegree[target] += 1
    layer = {n: 0 for n in names}
    ready = [n for n in order if indegree[n] == 0]
    while ready:
        node = ready.pop(0)
        for index, target in successors[node]:
            if index in back:
                continue
            layer[target] = max(layer[target], layer[node] + 1)
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    vertices: dict[str, _Vertex] = {
        n: _Vertex(n, sizes[n][0], sizes[n][1], 2 * layer[n], True) for n in order
    }
    chains: list[tuple[int, bool, list[str], list[str]]] = []
    links: list[tuple[str, str]] = []
    for index, source, target, label in edges:
        reverse = index in back
        upper, lower = (target, source) if reverse else (source, target)
        if upper == lower:
            continue  # a state that moves to itself: not in the ASL we draw
        chain = [upper]
        text = _wrap(label) if label else []
        for rank in range(vertices[upper].rank + 1, vertices[lower].rank):
            key = f"~{index}~{rank}"
            first = rank == vertices[upper].rank + 1
            lines = text if first else []
            width = max((len(line) for line in lines), default=0) * _LABEL_CHAR + 10
            height = 15.0 * len(lines) + 4 if lines else 18.0
            vertices[key] = _Vertex(key, max(width, _DUMMY_W), height, rank, False, lines)
            chain.append(key)
        chain.append(lower)
        links += list(pairwise(chain))
        chains.append((index, reverse, chain, text))
    ranks: list[list[str]] = [[] for _ in range(max(v.rank for v in vertices.values()) + 1)]
    for key, vertex in vertices.items():
        ranks[vertex.rank].append(key)
    up: dict[str, list[str]] = {k: [] for k in vertices}
    down: dict[str, list[str]] = {k: [] for k in vertices}
    for a, b in links:
        down[a].append(b)
        up[b].append(a)
    _order_ranks(ranks, up, down)
    _place(ranks, vertices, up, down)

    # Rows: y from the rank heights.
    # The gap under a rank grows with how far its edges go sideways, so that
    # a wide fan-out does not flatten into horizontal lines.
    def centre(key: str) -> float:
        return vertices[key].x + vertices[key].w / 2

    y = 0.0
    for row in ranks:
        height = max((vertices[k].h for k in row), default=0.0)
        for key in row:
            vertex = vertices[key]
            vertex.y = y + (height - vertex.h) / 2
            vertex.row_top, vertex.row_bottom = y, y + height
        spread = max((abs(centre(k) - centre(b)) for k in row for b in down[k]), default=0.0)
        y += height + min(max(_GAP_Y, spread * 0.12), 64.0)
    width = max((v.x + v.w for v in vertices.values()), default=0.0)
    height = max((v.row_bottom for v in vertices.values()), default=0.0)
    routes = _routes(chains, vertices)
    positions = {n: (vertices[n].x, vertices[n].y) for n in names if n in vertices}
    return width, height, positions, routes


def _crossings(ranks: list[list[str]], down: dict[str, list[str]]) -> int:
    total = 0
    for upper, lower in pairwise(ranks):
        where = {key: i for i, key in enumerate(lower)}
        segments = [(i, where[b]) for i, a in enumerate(upper) for b in down[a] if b in where]
        for n, (a1, b1) in enumerate(segments):
            for a2, b2 in segments[n + 1 :]:
                if (a1 - a2) * (b1 - b2) < 0:
                    total += 1
    return total


def _order_ranks(
    ranks: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]]
) -> None:
    """Barycentric sweeps down and up; keeps the order with the fewest crossings."""
    best = [list(row) for row in ranks]
    best_crossings = _crossings(ranks, down)
    for sweep in range(8):
        downward = sweep % 2 == 0
        sequence = range(1, len(ranks)) if downward else range(len(ranks) - 2, -1, -1)
        for r in sequence:
            neighbour_rank = ranks[r - 1] if downward else ranks[r + 1]
            where = {key: i for i, key in enumerate(neighbour_rank)}
            row = ranks[r]

            neighbours = up if downward else down

            def centre(
                key: str,
                row: list[str] = row,
                where: dict[str, int] = where,
                neighbours: dict[str, list[str]] = neighbours,
            ) -> float:
                near = [where[k] for k in neighbours[key] if k in where]
                return sum(near) / len(near) if near else float(row.index(key))

            ranks[r] = sorted(row, key=centre)
        crossings = _crossings(ranks, down)
        if crossings < best_crossings:
            best, best_crossings = [list(row) for row in ranks], crossings
    ranks[:] = best


def _place(
    ranks: list[list[str]],
    vertices: dict[str, _Vertex],
    up: dict[str, list[str]],
    down: dict[str, list[str]],
) -> None:
    """x: each vertex near the mean of its neighbours, rows kept apart by _GAP_X."""

    def pack(row: list[str], wanted: dict[str, float]) -> None:
        # Centres as wanted, then pushed apart: right to left-bounded, then back.
        centre = {k: wanted[k] for k in row}
        for a, b in pairwise(row):
            least = centre[a] + (vertices[a].w + vertices[b].w) / 2 + _GAP_X
            centre[b] = max(centre[b], least)
        for a, b in reversed(list(pairwise(row))):
            most = centre[b] - (vertices[a].w + vertices[b].w) / 2 - _GAP_X
            if centre[a] > most:
                centre[a] = most
        for key in row:
            vertices[key].x = centre[key] - vertices[key].w / 2

    for row in ranks:
        pack(row, {k: 0.0 for k in row})
    for sweep in range(12):
        downward = sweep % 2 == 0
        sequence = ranks[1:] if downward else list(reversed(ranks[:-1]))
        for row in sequence:
            wanted = {}
            for key in row:
                near = (up if downward else down)[key]
                centres = [vertices[k].x + vertices[k].w / 2 for k in near]
                current = vertices[key].x + vertices[key].w / 2
                wanted[key] = sum(centres) / len(centres) if centres else current
            pack(row, wanted)
    left = min((v.x for v in vertices.values()), default=0.0)
    for vertex in vertices.values():
        vertex.x -= left


def _routes(
    chains: list[tuple[int, bool, list[str], list[str]]], vertices: dict[str, _Vertex]
) -> list[Route]:
    # Where edges attach: spread along a state's bottom and top, in the order
    # of where they go, so that they do not all meet in one point.
    bottom: dict[str, list[tuple[float, int]]] = {}
    top: dict[str, list[tuple[float, int]]] = {}
    for n, (_, _, chain, _) in enumerate(chains):
        first, second = vertices[chain[0]], vertices[chain[1]]
        last, before = vertices[chain[-1]], vertices[chain[-2]]
        bottom.setdefault(first.key, []).append((second.x + second.w / 2, n))
        top.setdefault(last.key, []).append((before.x + before.w / 2, n))
    ports: dict[tuple[str, int], float] = {}
    for side, attached in (("bottom", bottom), ("top", top)):
        for key, items in attached.items():
            vertex = vertices[key]
            items.sort()
            for i, (_, n) in enumerate(items):
                ports[(side + key, n)] = vertex.x + vertex.w * (i + 1) / (len(items) + 1)
    routes: list[Route] = []
    for n, (index, reverse, chain, text) in enumerate(chains):
        first, last = vertices[chain[0]], vertices[chain[-1]]
        out, into = ports[("bottom" + first.key, n)], ports[("top" + last.key, n)]
        points = [(out, first.y + first.h), (out, first.row_bottom)]
        label_at = None
        for key in chain[1:-1]:
            v = vertices[key]
            centre = v.x + v.w / 2
            points += [(centre, v.row_top), (centre, v.row_bottom)]
            if v.label:
                label_at = (centre, v.y + v.h / 2)
        points += [(into, last.row_top), (into, last.y)]
        points = [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]
        if reverse:
            points.reverse()
        routes.append(Route(index, points, text, label_at))
    return routes


def _label_width(name: str, state: dict[str, Any]) -> float:
    return max(len(name) * _CHAR, len(_subtitle(state)) * (_CHAR - 1)) + 28


def layout(graph: diagram.Graph, start_marker: bool = True) -> Layout:
    """Every state a box, every transition a route; Map and Parallel boxes hold theirs."""
    sizes: dict[str, tuple[float, float]] = {}
    nested: dict[str, _Scope] = {}

    def measure(name: str) -> None:
        state = graph.states[name]
        if name not in graph.children:
            sizes[name] = (max(_label_width(name, state), 120.0), _NODE_H)
            return
        inner = graph.children[name]
        for child in inner:
            measure(child)
        nested[name] = _layout_scope(graph, inner, _start_states(state), sizes, [])
        width, height = nested[name][0], nested[name][1]
        sizes[name] = (
            max(width + 2 * _PAD, _label_width(name, state)),
            height + 2 * _PAD + _TITLE,
        )

    for name in graph.top:
        measure(name)
    names = list(graph.top)
    extra: list[tuple[int, str, str, str]] = []
    if start_marker:
        names.insert(0, START)
        sizes[START] = (64.0, 26.0)
        extra.append((-1, START, graph.start, ""))
    scope = _layout_scope(graph, names, [names[0]], sizes, extra)
    result = Layout(scope[0] + 2 * _PAD, scope[1] + 2 * _PAD)

    def place(part: _Scope, dx: float, dy: float) -> None:
        _, _, positions, routes = part
        for name, (x, y) in positions.items():
            w, h = sizes[name]
            result.boxes[name] = Box(name, x + dx, y + dy, w, h, name in graph.children)
            if name in nested:
                inner_width = nested[name][0]
                place(nested[name], x + dx + (w - inner_width) / 2, y + dy + _TITLE + _PAD)
        for route in routes:
            points = [(px + dx, py + dy) for px, py in route.points]
            at = route.label_at
            moved = None if at is None else (at[0] + dx, at[1] + dy)
            result.routes.append(Route(route.index, points, route.label, moved))

    place(scope, _PAD, _PAD)
    return result


# ---- the page -----------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _number(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _path_d(points: list[tuple[float, float]]) -> str:
    x0, y0 = points[0]
    parts = [f"M{_number(x0)},{_number(y0)}"]
    for x1, y1 in points[1:]:
        if abs(x1 - x0) < 0.5:
            parts.append(f"L{_number(x1)},{_number(y1)}")
        else:
            half = (y1 - y0) / 2
            parts.append(
                f"C{_number(x0)},{_number(y0 + half)} {_number(x1)},{_number(y1 - half)} "
                f"{_number(x1)},{_number(y1)}"
            )
        x0, y0 = x1, y1
    return " ".join(parts)


def svg(graph: diagram.Graph, path: Trace) -> str:
    """The state machine as SVG: the path's states and transitions marked by class."""
    drawn = layout(graph)
    entered = set(path.entered)
    out = [
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{_number(drawn.width)}" '
        f'height="{_number(drawn.height)}" viewBox="0 0 {_number(drawn.width)} '
        f'{_number(drawn.height)}" role="img" aria-label="state machine graph">',
        "<defs>",
        *(
            f'<marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" '
            f'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" class="{marker}"/></marker>'
            for marker in ("arrow", "arrow-taken")
        ),
        "</defs>",
    ]

    def node(box: Box) -> str:
        state = graph.states[box.name]
        kind = str(state["Type"])
        classes = ["node", kind.lower()]
        if box.compound:
            classes.append("compound")
        if box.name in entered:
            classes.append("entered")
        if box.name in path.failed:
            classes.append("failed")
        elif box.name in path.caught:
            classes.append("caught")
        radius = box.h / 2 if kind in ("Succeed", "Fail") and not box.compound else 6
        title = [f"{box.name} ({_subtitle(state)})"]
        if state.get("Comment"):
            title.append(str(state["Comment"]))
        head = (
            f'<g class="{" ".join(classes)}" data-state="{_e(box.name)}" data-type="{_e(kind)}" '
            f'data-entered="{"true" if box.name in entered else "false"}" tabindex="0" '
            f'role="button"><title>{_e(chr(10).join(title))}</title>'
            f'<rect x="{_number(box.x)}" y="{_number(box.y)}" width="{_number(box.w)}" '
            f'height="{_number(box.h)}" rx="{_number(radius)}"/>'
        )
        if box.compound:
            text = (
                f'<text class="name" x="{_number(box.x + 10)}" y="{_number(box.y + 17)}">'
                f'{_e(box.name)}<tspan class="kind"> {_e(kind)}</tspan></text>'
            )
        else:
            text = (
                f'<text class="name" x="{_number(box.cx)}" y="{_number(box.y + 19)}" '
                f'text-anchor="middle">{_e(box.name)}</text>'
                f'<text class="kind" x="{_number(box.cx)}" y="{_number(box.y + 35)}" '
                f'text-anchor="middle">{_e(_subtitle(state))}</text>'
            )
        return head + text + "</g>"

    compounds = [box for box in drawn.boxes.values() if box.compound]
    out += [node(box) for box in compounds]
    for route in drawn.routes:
        if route.index < 0:
            source, target, kind = "", graph.start, "start"
            taken = bool(path.entered)
        else:
            edge = graph.edges[route.index]
            source, target, kind = edge.source, edge.target, edge.kind
            taken = route.index in path.taken
        marker = "arrow-taken" if taken else "arrow"
        classes = f"edge {kind}" + (" taken" if taken else "")
        if route.index in path.ambiguous:
            classes += " ambiguous"
        label = ""
        if route.label and route.label_at is not None:
            x, y = route.label_at
            height = 15.0 * len(route.label)
            width = max(len(line) for line in route.label) * _LABEL_CHAR + 8
            label = (
                f'<rect class="label-bg" x="{_number(x - width / 2)}" '
                f'y="{_number(y - height / 2)}" width="{_number(width)}" '
                f'height="{_number(height)}" rx="3"/>'
            ) + "".join(
                f'<text class="label" x="{_number(x)}" '
                f'y="{_number(y - height / 2 + 11.5 + 15 * i)}" text-anchor="middle">'
                f"{_e(line)}</text>"
                for i, line in enumerate(route.label)
            )
        edge_label = graph.edges[route.index].label if route.index >= 0 else ""
        title = f"{source or 'start'} -> {target}" + (f": {edge_label}" if edge_label else "")
        if route.index in path.ambiguous:
            title += " (one of these rules matched; the history does not say which)"
        out.append(
            f'<g class="{classes}" data-source="{_e(source)}" data-target="{_e(target)}">'
            f"<title>{_e(title)}</title>"
            f'<path d="{_path_d(route.points)}" marker-end="url(#{marker})"/>{label}</g>'
        )
    start = drawn.boxes.get(START)
    if start is not None:
        out.append(
            f'<g class="start-marker"><rect x="{_number(start.x)}" y="{_number(start.y)}" '
            f'width="{_number(start.w)}" height="{_number(start.h)}" rx="{_number(start.h / 2)}"/>'
            f'<text x="{_number(start.cx)}" y="{_number(start.y + 17)}" '
            f'text-anchor="middle">Start</text></g>'
        )
    out += [node(box) for box in drawn.boxes.values() if not box.compound and box.name != START]
    out.append("</svg>")
    return "\n".join(out)


_STYLE = """
:root { color-scheme: light; --ink: #16191f; --muted: #5f6b7a; --line: #8d99a8;
  --entered: #d1f2d4; --entered-line: #1d8102; --failed: #fde2e0; --failed-line: #d13212;
  --caught: #fff1d6; --caught-line: #c77700; --panel: #f7f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--ink); }
header { padding: 14px 20px; border-bottom: 1px solid #d5dbe1; background: #fff; }
header h1 { font-size: 18px; margin: 0 0 6px; word-break: break-all; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; vertical-align: middle; background: #e9ebed; }
.status.SUCCEEDED { background: var(--entered); color: var(--entered-line); }
.status.FAILED, .status.TIMED_OUT, .status.ABORTED { background: var(--failed);
  color: var(--failed-line); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-all; }
.warning { color: var(--caught-line); }
main { display: flex; align-items: flex-start; gap: 0; }
#canvas { flex: 1 1 auto; overflow: auto; padding: 12px; min-width: 0; }
aside#panel { flex: 0 0 440px; max-width: 45vw; position: sticky; top: 0; max-height: 100vh;
  overflow: auto; padding: 14px 16px; background: var(--panel); border-left: 1px solid #d5dbe1; }
aside#panel h2 { font-size: 16px; margin: 0; word-break: break-all; }
aside#panel h3 { font-size: 13px; margin: 14px 0 4px; }
aside#panel h4 { font-size: 12px; margin: 10px 0 2px; color: var(--muted);
  text-transform: uppercase; }
aside#panel .type { color: var(--muted); margin: 2px 0 8px; }
.not-entered { color: var(--muted); font-style: italic; }
.error { color: var(--failed-line); font-weight: 600; }
pre { background: #fff; border: 1px solid #e1e4e8; border-radius: 4px; padding: 8px; margin: 0;
  font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre-wrap;
  word-break: break-all; max-height: 360px; overflow: auto; }
svg { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; }
.node rect { fill: #fff; stroke: var(--line); stroke-width: 1.2; }
.node.compound rect { fill: #f4f6f8; stroke-dasharray: 5 3; }
.node .name { font-weight: 600; fill: var(--ink); }
.node .kind { fill: var(--muted); font-size: 11px; }
.node { cursor: pointer; outline: none; }
.node.entered rect { fill: var(--entered); stroke: var(--entered-line); stroke-width: 2; }
.node.compound.entered rect { fill: #eef9ef; }
.node.caught rect { fill: var(--caught); stroke: var(--caught-line); stroke-width: 2; }
.node.failed rect { fill: var(--failed); stroke: var(--failed-line); stroke-width: 2.5; }
.node.selected rect, .node:focus rect { stroke: #0972d3; stroke-width: 3; }
.edge path { fill: none; stroke: var(--line); stroke-width: 1.2; }
.edge.catch path { stroke-dasharray: 5 4; }
.edge.taken path { stroke: var(--entered-line); stroke-width: 2.6; }
.edge.taken.ambiguous path { stroke-width: 1.8; stroke-dasharray: 2 3; }
.edge .label { fill: var(--muted); font-size: 11px; }
.edge.taken .label { fill: var(--entered-line); }
.edge .label-bg { fill: #fff; opacity: 0.92; }
marker .arrow { fill: var(--line); } marker .arrow-taken { fill: var(--entered-line); }
.start-marker rect { fill: #16191f; } .start-marker text { fill: #fff; font-size: 11px; }
table.path { border-collapse: collapse; margin: 4px 20px 20px; font-size: 13px; }
table.path th, table.path td { text-align: left; padding: 3px 10px;
  border-bottom: 1px solid #e9ebed; }
table.path tr[data-state] { cursor: pointer; }
table.path tr[data-state]:hover { background: #f2f8fd; }
h2.section { font-size: 15px; margin: 16px 20px 4px; }
"""

_GUARD = """
(function () {
  "use strict";
  var errors = [];
  var root = document.documentElement;
  function note(message) {
    errors.push(String(message));
    root.setAttribute("data-errors", JSON.stringify(errors));
  }
  root.setAttribute("data-errors", "[]");
  window.addEventListener("error", function (event) {
    note(event.message || "failed to load " + String(event.target && event.target.nodeName));
  }, true);
  window.addEventListener("unhandledrejection", function (event) {
    note("unhandled rejection: " + String(event.reason));
  });
  document.addEventListener("securitypolicyviolation", function (event) {
    note("content security policy: " + event.violatedDirective + " " + event.blockedURI);
  });
  var original = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
})();
"""

_SCRIPT = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("execution-data").textContent);
  var panel = document.getElementById("panel");
  var body = document.body;

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function pretty(value) {
    return value === undefined ? "null" : JSON.stringify(value, null, 2);
  }
  function nodeOf(name) {
    var nodes = document.querySelectorAll(".node[data-state]");
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].getAttribute("data-state") === name) { return nodes[i]; }
    }
    return null;
  }
  function known(name) {
    return Object.prototype.hasOwnProperty.call(data.states, name);
  }
  function select(name) {
    if (!known(name)) { return; }
    var state = data.states[name];
    document.querySelectorAll(".node.selected").forEach(function (node) {
      node.classList.remove("selected");
    });
    var node = nodeOf(name);
    if (node) { node.classList.add("selected"); }
    panel.replaceChildren();
    panel.setAttribute("data-state", name);
    panel.appendChild(element("h2", "", name));
    panel.appendChild(element("p", "type", state.subtitle));
    if (!state.entries.length) {
      panel.appendChild(element("p", "not-entered", "not entered"));
    }
    state.entries.forEach(function (entry, index) {
      var section = element("section", "entry");
      if (state.entries.length > 1) {
        var count = state.entries.length;
        section.appendChild(element("h3", "", "Entered " + (index + 1) + " of " + count));
      }
      var timing = entry.durationMs === null ? "" : " (" + entry.durationMs + " ms)";
      section.appendChild(element("p", "outcome", entry.outcome + timing));
      if (entry.errors.length) {
        section.appendChild(element("p", "error", "Error: " + entry.errors.join(", ")));
      }
      if (entry.cause) {
        section.appendChild(element("h4", "", "Cause"));
        section.appendChild(element("pre", "cause", entry.cause));
      }
      section.appendChild(element("h4", "", "Input"));
      section.appendChild(element("pre", "json input", pretty(entry.input)));
      section.appendChild(element("h4", "", "Output"));
      section.appendChild(element("pre", "json output", pretty(entry.output)));
      panel.appendChild(section);
    });
    body.setAttribute("data-selected", name);
  }
  document.querySelectorAll("[data-state]").forEach(function (node) {
    if (node === panel) { return; }
    node.addEventListener("click", function () { select(node.getAttribute("data-state")); });
    node.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        select(node.getAttribute("data-state"));
      }
    });
  });
  var wanted = /^#state=(.+)$/.exec(window.location.hash);
  var failed = document.querySelector(".node.failed");
  var first = null;
  if (wanted) {
    try { first = decodeURIComponent(wanted[1]); } catch (e) { first = null; }
  }
  if (!first || !known(first)) {
    first = failed ? failed.getAttribute("data-state") : data.path[data.path.length - 1];
  }
  if (first) { select(first); }
  body.setAttribute("data-highlighted-count",
    String(document.querySelectorAll('.node[data-entered="true"]').length));
  body.setAttribute("data-taken-count", String(document.querySelectorAll(".edge.taken").length));
  var nodes = document.querySelectorAll(".node[data-state]");
  body.setAttribute("data-node-count", String(nodes.length));
  body.setAttribute("data-ready", "true");
})();
"""


def _csp_hash(text: str) -> str:
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
        "outcome": step.outcome,
        "durationMs": None if step.duration_ms is None else round(step.duration_ms, 1),
        "errors": step.errors,
        "cause": step.cause,
        "input": step.input,
        "output": step.output,
        "entered": None if step.entered is None else step.entered.isoformat(),
        "exited": None if step.exited is None else step.exited.isoformat(),
    }


def page(record: Record, asl: dict[str, Any]) -> str:
    """The execution as one self-contained HTML page (inline CSS, JS and SVG)."""
    graph = diagram.graph(asl)
    path = trace(graph, record)
    row = summary(record)
    states: dict[str, Any] = {
        name: {
            "type": state["Type"],
            "subtitle": _subtitle(state),
            "entries": [_entry(step) for step in path.steps if step.name == name],
        }
        for name, state in graph.states.items()
    }
    data = {"execution": row, "path": [step.name for step in path.steps], "states": states}
    facts = [
        ("Status", f'<span class="status {_e(record.status)}">{_e(record.status)}</span>'),
        ("State machine", _e(row["stateMachine"] or "-")),
        ("Started", _e(_time(row["startDate"]))),
        ("Stopped", _e(_time(row["stopDate"]))),
        ("Duration", _e(_ms(row["durationMs"]))),
        ("Idempotency key", _e(row["idempotencyKey"] or "-")),
        ("End state", _e(row["endState"] or "-")),
    ]
    if record.data.get("error"):
        facts.append(("Error", f'<span class="error">{_e(record.data["error"])}</span>'))
    if record.data.get("cause"):
        facts.append(("Cause", _e(record.data["cause"])))
    facts.append(("ARN", _e(record.arn)))
    if path.unknown:
        facts.append(
            (
                "Warning",
                '<span class="warning">states the ASL does not have (it changed since?): '
                + _e(", ".join(path.unknown))
                + "</span>",
            )
        )
    rows = "".join(
        f'<tr data-state="{_e(step.name)}"><td>{number}</td><td>{_e(step.name)}</td>'
        f"<td>{_e(step.type)}</td><td>{_e(_ms(step.duration_ms))}</td><td>{_e(step.outcome)}</td></tr>"
        for number, step in enumerate(path.steps, start=1)
    )
    csp = (
        "default-src 'none'; img-src data:; "
        f"style-src {_csp_hash(_STYLE)}; script-src {_csp_hash(_GUARD)} {_csp_hash(_SCRIPT)}"
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(record.name)}: {_e(record.status)} - onceflow</title>
<script>{_GUARD}</script>
<style>{_STYLE}</style>
</head>
<body data-execution="{_e(record.name)}" data-status="{_e(record.status)}">
<header>
<h1>{_e(record.name)}</h1>
<dl class="facts">{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)}</dl>
</header>
<main>
<div id="canvas">
{svg(graph, path)}
</div>
<aside id="panel" aria-live="polite">
<p class="not-entered">Select a state to see its input and output.</p></aside>
</main>
<h2 class="section">Path ({len(path.steps)} states entered)</h2>
<table class="path">
<thead><tr><th>#</th><th>state</th><th>type</th><th>duration</th><th>outcome</th></tr></thead>
<tbody>{rows}</tbody>
</table>
<script type="application/json" id="execution-data">{_script_json(data)}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""


def terminal(record: Record) -> str:
    """The path taken, as `onceflow execute` prints it, with the execution's facts."""
    row = summary(record)
    lines = history.render(record.result()).split("\n")
    facts = [
        f"  state machine: {row['stateMachine'] or '-'}",
        f"  started: {_time(row['startDate'])}  duration: {_ms(row['durationMs'])}",
        f"  idempotency key: {row['idempotencyKey'] or '-'}",
    ]
    return "\n".join([lines[0], *facts, *lines[1:]])


def html_path(record: Record, folder: Path | None = None) -> Path:
    name = records.file_name(record.name, record.data.get("stateMachineArn"))
    return (folder or SHOW_DIRECTORY) / (name.removesuffix(".json") + ".html")


def write_page(record: Record, asl: dict[str, Any], destination: Path) -> Path:
    """The page holds the execution's input and history (message bodies): 0600."""
    private_directory(destination.parent)
    return write_private(destination, page(record, asl))
