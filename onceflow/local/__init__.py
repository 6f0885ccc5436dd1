"""The emulator: template.yaml's resources on moto, its ASL and handlers run as they are.

Its modules: docs/architecture.md, "What each owns" (local/). Importing this package
imports nothing: moto loads with the engine, not before.
"""

import re
from itertools import accumulate

# The recursion limit while an engine runs (and `onceflow execute` reads an event file):
# Python's default (1,000) would give up before the processor's JSONata does (about 2,250
# levels under node: docs/ingress.md, "Deep nesting"), so the engine's Python never judges
# an input's depth first (docs/local-engine.md, "Handlers run in the engine's Python").
RECURSION_LIMIT = 20_000
# The deepest execution input the engine runs: moto deep-copies a state's input with two
# Python frames a level, so under RECURSION_LIMIT about 10,000 levels get through and deeper
# input fails in the engine's Python (States.Runtime), where Step Functions may still run it.
# StartExecution refuses deeper input at once, named (InvalidExecutionInput), and so does
# `onceflow execute`: a limit of the engine, harsher than AWS, whose own is not documented
# (docs/ingress.md, "Deep nesting"). Every input within it reaches the processor's JSONata,
# which gives up far sooner, so the ASL judges it.
INPUT_DEPTH_LIMIT = 8_000

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How many levels of arrays and objects a JSON text nests (0 for a scalar), read
    without recursion, so that any depth can be measured before it is parsed."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(_STEP[c] for c in brackets), default=0)
