"""The longest an execution of a state machine can take, read from its resolved ASL.

Every Retry waits at most its capped delay (full jitter only shortens it), a Task
with a TimeoutSeconds may use all of it on every attempt of the retrier that
retries States.Timeout, and the longest path through the states adds them up. A
Parallel state lasts as long as its longest branch, a Map as long as its
ItemProcessor's worst case for every wave of MaxConcurrency items.
EXPRESS workflows stop at five minutes: the template refuses parameters whose
worst case would not fit (its Rules), and a test holds the two together.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

EXPRESS_LIMIT_SECONDS = 300
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_JSONATA = re.compile(r"^\{%(.*)%\}$", re.S)


def _number(value: Any) -> float:
    """A number, or a JSONata expression of plain arithmetic on numbers ("{% (60 + 10) %}")."""
    if isinstance(value, int | float):
        return float(value)
    match = _JSONATA.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a number: {value!r}")

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return float(_ARITHMETIC[type(node.op)](evaluate(node.left), evaluate(node.right)))
        raise ValueError(f"not plain arithmetic: {value!r}")

    return evaluate(ast.parse(match.group(1).strip(), mode="eval").body)


def retry_delays(retrier: Mapping[str, Any]) -> float:
    """The sum of a retrier's capped delays: IntervalSeconds x BackoffRate^n, at most
    MaxDelaySeconds, for each of its MaxAttempts (Step Functions' defaults: 1 s, 3, 2.0)."""
    interval = _number(retrier.get("IntervalSeconds", 1))
    rate = _number(retrier.get("BackoffRate", 2.0))
    cap = _number(retrier["MaxDelaySeconds"]) if "MaxDelaySeconds" in retrier else float("inf")
    attempts = int(_number(retrier.get("MaxAttempts", 3)))
    return sum(min(interval * rate**n, cap) for n in range(attempts))


def state_seconds(state: Mapping[str, Any]) -> float:
    """The longest one state can take, retries included."""
    retriers = state.get("Retry", [])
    delays = sum(retry_delays(r) for r in retriers)
    if "TimeoutSeconds" not in state:
        return delays  # an API call: its answer comes in well under a second
    timeout = _number(state["TimeoutSeconds"])
    timed_out_again = sum(
        int(_number(r.get("MaxAttempts", 3)))
        for r in retriers
        if {"States.Timeout", "States.ALL"} & set(r["ErrorEquals"])
    )
    return timeout * (1 + timed_out_again) + delays


def _next_states(state: Mapping[str, Any]) -> list[str]:
    names = [state[k] for k in ("Next", "Default") if k in state]
    names += [c["Next"] for c in state.get("Choices", [])]
    names += [c["Next"] for c in state.get("Catch", [])]
    return names


def worst_case_seconds(definition: Mapping[str, Any], items: int = 1) -> float:
    """The longest path's time, from StartAt to an end (the states form no loop).

    ``items`` is the most items any Map state gets (the SQS batch workflow: the pipe's
    BatchSize); a Map runs them MaxConcurrency at a time, all at once when it is 0.
    """
    states: Mapping[str, Mapping[str, Any]] = definition["States"]

    @cache
    def longest(name: str) -> float:
        state = states[name]
        own = state_seconds(state)
        for branch in state.get("Branches", []):
            own = max(own, worst_case_seconds(branch, items))
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor is not None:
            limit = state.get("MaxConcurrency") or 0
            at_once = int(_number(limit) if str(limit).lstrip().startswith("{%") else limit)
            at_once = at_once or items
            waves = math.ceil(items / at_once)
            own = max(own, worst_case_seconds(processor, items) * waves)
        following = [longest(n) for n in _next_states(state)]
        return own + max(following, default=0.0)

    return longest(definition["StartAt"])
