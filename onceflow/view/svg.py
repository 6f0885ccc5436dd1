"""The state machine as SVG: the laid-out graph, the path's states and transitions marked
by class (entered, caught, failed, taken), each state a focusable button."""

from __future__ import annotations

import html
from typing import Any

from onceflow.asl import diagram
from onceflow.view.layout import LABEL_CHAR, START, Box, layout, subtitle
from onceflow.view.trace import Trace


def escape(text: Any) -> str:
    """Text for HTML and SVG, attribute values included."""
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
    # The last error each state had (a state entered more than once: its last one).
    errors = {step.name: step.errors[-1] for step in path.steps if step.errors}
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
        title = [f"{box.name} ({subtitle(state)})"]
        error = errors.get(box.name)
        if error is not None:
            title.append(("failed: " if box.name in path.failed else "caught: ") + error)
        if state.get("Comment"):
            title.append(str(state["Comment"]))
        head = (
            f'<g class="{" ".join(classes)}" data-state="{escape(box.name)}" '
            f'data-type="{escape(kind)}" '
            f'data-entered="{"true" if box.name in entered else "false"}"'
            + ("" if error is None else f' data-error="{escape(error)}"')
            + f' tabindex="0" role="button"><title>{escape(chr(10).join(title))}</title>'
            f'<rect x="{_number(box.x)}" y="{_number(box.y)}" width="{_number(box.w)}" '
            f'height="{_number(box.h)}" rx="{_number(radius)}"/>'
        )
        if box.compound:
            text = (
                f'<text class="name" x="{_number(box.x + 10)}" y="{_number(box.y + 17)}">'
                f'{escape(box.name)}<tspan class="kind"> {escape(kind)}</tspan></text>'
            )
        else:
            text = (
                f'<text class="name" x="{_number(box.cx)}" y="{_number(box.y + 19)}" '
                f'text-anchor="middle">{escape(box.name)}</text>'
                f'<text class="kind" x="{_number(box.cx)}" y="{_number(box.y + 35)}" '
                f'text-anchor="middle">{escape(subtitle(state))}</text>'
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
            width = max(len(line) for line in route.label) * LABEL_CHAR + 8
            label = (
                f'<rect class="label-bg" x="{_number(x - width / 2)}" '
                f'y="{_number(y - height / 2)}" width="{_number(width)}" '
                f'height="{_number(height)}" rx="3"/>'
            ) + "".join(
                f'<text class="label" x="{_number(x)}" '
                f'y="{_number(y - height / 2 + 11.5 + 15 * i)}" text-anchor="middle">'
                f"{escape(line)}</text>"
                for i, line in enumerate(route.label)
            )
        edge_label = graph.edges[route.index].label if route.index >= 0 else ""
        title = f"{source or 'start'} -> {target}" + (f": {edge_label}" if edge_label else "")
        if route.index in path.ambiguous:
            title += " (one of these rules matched; the history does not say which)"
        out.append(
            f'<g class="{classes}" data-source="{escape(source)}" data-target="{escape(target)}" '
            f'data-edge="{route.index}">'
            f"<title>{escape(title)}</title>"
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
