"""State machine graphs read from the ASL files, and the mermaid diagrams of docs/design.md.

The graph is the one the console draws: a node per state, an edge per
transition (Next, each Choice rule and Default, each Catch), and the states of
a Map or Parallel nested inside it. Edge labels come from the ASL itself: a
Choice rule's Comment, a Catch's error names. Nothing here is drawn by hand,
so `onceflow diagrams --check` (and a test) fails when docs/design.md drifts
from the ASL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onceflow.project import default_project

ROOT = default_project()  # where a command runs (an installed package has no checkout)
MACHINES = {
    "processor": ROOT / "statemachines" / "processor.asl.json",
    "audit": ROOT / "statemachines" / "audit.asl.json",
}
README = ROOT / "docs" / "design.md"  # the page that holds the diagrams
_UNQUOTED_SUBSTITUTION = re.compile(r"(?<![\"\w])\$\{\w+\}")
_LABEL_LIMIT = 48


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str = ""
    kind: str = "next"  # next | choice | default | catch


@dataclass
class Graph:
    """States (name -> type), edges, and the states nested in each Map or Parallel."""

    start: str
    states: dict[str, dict[str, Any]] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    children: dict[str, list[str]] = field(default_factory=dict)
    top: list[str] = field(default_factory=list)


def load_asl(path: Path) -> dict[str, Any]:
    """The ASL with DefinitionSubstitutions left as placeholders.

    Unquoted `${Name}` (numbers such as retry intervals) become 0 so the text
    parses; quoted ones stay text. Neither changes the graph.
    """
    text = _UNQUOTED_SUBSTITUTION.sub("0", path.read_text(encoding="utf-8"))
    data: dict[str, Any] = json.loads(text)
    return data


def _short(text: str) -> str:
    text = " ".join(text.split())
    for stop in (": ", ". ", "; ", " ("):
        if stop in text:
            text = text.split(stop, 1)[0]
    text = text.rstrip(".")
    if len(text) > _LABEL_LIMIT:
        text = text[: _LABEL_LIMIT - 3].rstrip() + "..."
    return text


def _catch_label(errors: list[str]) -> str:
    names = [
        "any error" if error == "States.ALL" else error.rsplit(".", 1)[-1].removesuffix("Exception")
        for error in errors
    ]
    return ", ".join(names)


def graph(asl: dict[str, Any]) -> Graph:
    result = Graph(start=str(asl["StartAt"]))

    def walk(machine: dict[str, Any], parent: str | None) -> None:
        for name, state in machine["States"].items():
            if name in result.states:
                raise ValueError(f"state name {name!r} is used twice")
            result.states[name] = state
            (result.children.setdefault(parent, []) if parent else result.top).append(name)
            if state.get("Next"):
                result.edges.append(Edge(name, state["Next"]))
            for rule in state.get("Choices", []):
                label = _short(rule.get("Comment", "")) if rule.get("Comment") else "condition"
                result.edges.append(Edge(name, rule["Next"], label, "choice"))
            if state.get("Default"):
                result.edges.append(Edge(name, state["Default"], "otherwise", "default"))
            for catcher in state.get("Catch", []):
                label = _catch_label(catcher["ErrorEquals"])
                result.edges.append(Edge(name, catcher["Next"], label, "catch"))
            nested = state.get("ItemProcessor") or state.get("Iterator")
            if nested:
                walk(nested, name)
            for branch in state.get("Branches", []):
                walk(branch, name)

    walk(asl, None)
    for edge in result.edges:
        if edge.target not in result.states:
            raise ValueError(f"{edge.source} goes to {edge.target}, which is not a state")
    return result


# Words mermaid reads as syntax, and the two nodes the diagram adds itself.
_RESERVED_IDS = frozenset(
    {
        "end",
        "start",
        "done",
        "graph",
        "subgraph",
        "flowchart",
        "style",
        "class",
        "classdef",
        "click",
        "direction",
        "linkstyle",
        "default",
        "call",
        "href",
    }
)


def _ids(names: list[str]) -> dict[str, str]:
    """Mermaid node ids: the state name where mermaid can read it, else s<n>."""
    ids = {}
    for index, name in enumerate(names):
        plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) is not None
        ids[name] = name if plain and name.lower() not in _RESERVED_IDS else f"s{index}"
    return ids


def _mermaid_text(text: str) -> str:
    # Entity codes first, so the ones this adds are not escaped again.
    return (
        text.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
    )


def _node(node_id: str, name: str, state: dict[str, Any]) -> str:
    kind = state["Type"]
    label = name
    if kind == "Task":
        resource = str(state.get("Resource", ""))
        if ":::" in resource:
            label = f"{name}: {resource.split(':::', 1)[1]}"
        if state.get("Retry"):
            label += ", Retry"
    text = _mermaid_text(label)
    if kind == "Choice":
        return f'{node_id}{{"{text}"}}'
    if kind in ("Succeed", "Fail"):
        return f'{node_id}(["{text}"])'
    return f'{node_id}["{text}"]'


def mermaid(asl: dict[str, Any]) -> str:
    """A mermaid flowchart of the state machine."""
    g = graph(asl)
    ids = _ids(list(g.states))
    lines = ["flowchart TD", "    start((start)) --> " + ids[g.start]]

    def declare(names: list[str], indent: str) -> None:
        for name in names:
            state = g.states[name]
            if name in g.children:
                title = _mermaid_text(f"{name}: {state['Type']}")
                lines.append(f'{indent}subgraph {ids[name]} ["{title}"]')
                lines.append(f"{indent}    direction TB")
                declare(g.children[name], indent + "    ")
                lines.append(f"{indent}end")
            else:
                lines.append(indent + _node(ids[name], name, state))

    declare(g.top, "    ")
    for edge in g.edges:
        arrow = "-.->" if edge.kind == "catch" else "-->"
        label = f'|"{_mermaid_text(edge.label)}"|' if edge.label else ""
        lines.append(f"    {ids[edge.source]} {arrow}{label} {ids[edge.target]}")
    for name, state in g.states.items():
        if state.get("End") and not any(name in inner for inner in g.children.values()):
            lines.append(f"    {ids[name]} --> done((end))")
    return "\n".join(lines) + "\n"


def _markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- diagram:{name} (generated by `onceflow diagrams --write`; do not edit) -->",
        f"<!-- /diagram:{name} -->",
    )


def block(name: str, asl: dict[str, Any]) -> str:
    begin, end = _markers(name)
    return f"{begin}\n```mermaid\n{mermaid(asl)}```\n{end}"


def render_readme(text: str, machines: dict[str, Path] | None = None) -> str:
    """The text of docs/design.md with each generated diagram block replaced by a fresh one."""
    for name, path in (machines or MACHINES).items():
        begin, end = _markers(name)
        start = text.find(begin)
        stop = text.find(end, start)
        if start < 0 or stop < 0:
            raise ValueError(f"the document has no {begin} ... {end} block for {name}")
        text = text[:start] + block(name, load_asl(path)) + text[stop + len(end) :]
    return text


def stale(readme: Path | None = None) -> list[str]:
    """Names of the machines whose diagram in docs/design.md differs from their ASL."""
    current = (readme or README).read_text(encoding="utf-8")
    names = []
    for name, path in MACHINES.items():
        if render_readme(current, {name: path}) != current:
            names.append(name)
    return names
