"""A small reader of the viewer's style sheet: its rules, and the faults a hand edit brings
(unbalanced braces, an unknown at-rule, a declaration that is not `name: value`, an empty
rule). What each declaration means is for a browser to say: the Chromium test asks it."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The at-rules the sheet may use: @media only (no @import: the page loads nothing).
AT_RULES = frozenset({"media"})
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_PROPERTY = re.compile(r"^(--[a-z0-9-]+|-?[a-z]+(-[a-z]+)*)$")


@dataclass(frozen=True)
class Rule:
    selector: str  # the prelude: a selector list, or an at-rule's condition
    declarations: tuple[tuple[str, str], ...]


def _blocks(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(prelude, body) of each innermost block, and the problems found on the way."""
    blocks: list[tuple[str, str]] = []
    problems: list[str] = []
    stack: list[int] = []  # where each open block's prelude starts
    start = 0
    for at, char in enumerate(text):
        if char == "{":
            stack.append(start)
            stack.append(at)
            start = at + 1
        elif char == "}":
            if not stack:
                problems.append(f"a '}}' closes nothing at offset {at}")
                continue
            opened = stack.pop()
            prelude_start = stack.pop()
            body = text[opened + 1 : at]
            if "{" not in body:
                blocks.append((text[prelude_start:opened].strip(), body))
            start = at + 1
    if stack:
        problems.append(f"{len(stack) // 2} block(s) never closed")
    return blocks, problems


def rules(text: str) -> list[Rule]:
    """The rules with declarations, at-rules' own preludes left out."""
    blocks, _ = _blocks(_COMMENT.sub("", text))
    found = []
    for prelude, body in blocks:
        declarations = tuple(
            (name.strip(), value.strip())
            for name, _, value in (d.partition(":") for d in body.split(";") if d.strip())
        )
        found.append(Rule(prelude.split("}")[-1].strip(), declarations))
    return found


def css_problems(text: str) -> list[str]:
    """What is wrong with the sheet's form: [] when nothing is."""
    text = _COMMENT.sub("", text)
    blocks, problems = _blocks(text)
    for name in re.findall(r"@([a-zA-Z-]+)", text):
        if name.lower() not in AT_RULES:
            problems.append(f"unknown at-rule @{name}")
    for prelude, body in blocks:
        selector = prelude.split("}")[-1].strip()
        if not selector:
            problems.append(f"a block without a selector: {{{body.strip()[:40]}}}")
        parts = [d.strip() for d in body.split(";") if d.strip()]
        if not parts:
            problems.append(f"an empty rule: {selector}")
        for part in parts:
            name, colon, value = part.partition(":")
            if not colon or not value.strip():
                problems.append(f"not a declaration in {selector}: {part!r}")
            elif not _PROPERTY.match(name.strip()):
                problems.append(f"not a property name in {selector}: {name.strip()!r}")
    return problems
