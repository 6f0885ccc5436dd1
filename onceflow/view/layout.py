"""The graph's layout: a box for every state (Map and Parallel boxes hold theirs) and a
route for every transition, placed by a layered (Sugiyama-style) layout of each scope."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from onceflow.asl import diagram

_CHAR = 7.2  # px per character of 12px monospace text
LABEL_CHAR = 6.6  # 11px
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


def subtitle(state: dict[str, Any]) -> str:
    """What a state is, under its name: its type, and a Task's service action."""
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
            width = max((len(line) for line in lines), default=0) * LABEL_CHAR + 10
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
    return max(len(name) * _CHAR, len(subtitle(state)) * (_CHAR - 1)) + 28


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
