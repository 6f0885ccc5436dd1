"""The package layout shows the architecture, and dependencies run one way.

The import graph is read from the source with ``ast``: every ``import`` and ``from ...
import`` of every module of onceflow/, imports inside functions included (they hide a
cycle as well as they hide anything), and ``importlib.import_module`` of a constant
name. Imports under ``if TYPE_CHECKING:`` never run: they count for the package rule
(a type is a dependency too), not for cycles. docs/architecture.md draws the packages
and the allowed arrows; these tests hold the code and the page to each other.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "onceflow"
DOC = ROOT / "docs" / "architecture.md"

# Which package may import which (besides itself): the arrows of docs/architecture.md.
ALLOWED = {
    "cli": {"harness", "ops", "view", "local", "asl", "project"},
    "harness": {"ops", "view", "local", "asl", "project"},
    "view": {"asl", "project"},
    "local": {"asl", "project"},
    "ops": {"asl"},
    "asl": {"project"},
    "project": set(),
}
# Only these import moto: the emulator, and the harnesses that measure it.
MOTO_ALLOWED = {"local", "harness"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # an onceflow module, or "moto"
    line: int
    runs: bool  # False under `if TYPE_CHECKING:`


def modules() -> dict[str, Path]:
    """Every module of onceflow/, by its dotted name (a package by its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST, runs: bool = True) -> Iterator[tuple[ast.AST, bool]]:
    """Every node, and whether it runs (False inside `if TYPE_CHECKING:`)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _type_checking(child):
            for inner in child.body:
                yield inner, False
                yield from _nodes(inner, False)
            for inner in child.orelse:
                yield inner, runs
                yield from _nodes(inner, runs)
            continue
        yield child, runs
        yield from _nodes(child, runs)


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The onceflow module an imported name is: itself, else its nearest known parent."""
    if name == "moto" or name.startswith("moto."):
        return "moto"
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: dict[str, Path]) -> list[Import]:
    found: list[Import] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, runs in _nodes(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from a import b`: the module a.b when there is one, else a itself.
                targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                targets = [node.args[0].value]
            for target in targets:
                if not (target.startswith("onceflow") or target.split(".")[0] == "moto"):
                    continue
                resolved = _resolve(target, known)
                if resolved is not None and resolved != name:
                    found.append(Import(name, resolved, getattr(node, "lineno", 0), runs))
    return found


def package_of(module: str) -> str:
    """The package a module belongs to: onceflow.local.engine -> local."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "onceflow"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    return imports(modules())


def test_the_graph_sees_imports_inside_functions_and_under_type_checking() -> None:
    # GIVEN modules that import at the top, inside a function, under TYPE_CHECKING and
    # through importlib
    known = {name: Path(name) for name in ("onceflow.a", "onceflow.b", "onceflow.c")}
    sources = {
        "onceflow.a": "import importlib\nimport onceflow.b\n"
        "def f():\n    from onceflow import c\n    importlib.import_module('moto.s3')\n",
        "onceflow.b": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from onceflow.a import thing\n",
        "onceflow.c": "def g():\n    import onceflow.a\n",
    }
    original = Path.read_text
    try:
        Path.read_text = lambda self, *a, **k: sources[str(self)]  # type: ignore[method-assign]
        found = imports(known)
    finally:
        Path.read_text = original  # type: ignore[method-assign]
    # WHEN the graph is read
    edges = {(i.source, i.target, i.runs) for i in found}
    # THEN every import is in it, the one under TYPE_CHECKING marked as not running
    assert edges == {
        ("onceflow.a", "onceflow.b", True),
        ("onceflow.a", "onceflow.c", True),
        ("onceflow.a", "moto", True),
        ("onceflow.b", "onceflow.a", False),
        ("onceflow.c", "onceflow.a", True),
    }
    # AND the cycle a -> c -> a, made by imports inside functions, is found; b's is not
    running: dict[str, set[str]] = {}
    for item in found:
        if item.runs and item.target != "moto":
            running.setdefault(item.source, set()).add(item.target)
    assert cycles(running) == [["onceflow.a", "onceflow.c"]]


def test_no_import_cycle_among_onceflows_modules(graph: list[Import]) -> None:
    # GIVEN every import that runs, at the top or inside a function
    edges: dict[str, set[str]] = {}
    for item in graph:
        if item.runs and item.target != "moto":
            edges.setdefault(item.source, set()).add(item.target)
    # WHEN its cycles are looked for
    found = cycles(edges)
    # THEN there is none
    assert found == []


def test_every_import_follows_the_direction_of_the_packages(graph: list[Import]) -> None:
    # GIVEN every import between onceflow's packages, type-only ones included
    against = [
        f"{item.source}:{item.line} imports {item.target}"
        for item in graph
        if item.target != "moto"
        and package_of(item.source) != package_of(item.target)
        and package_of(item.target) not in ALLOWED.get(package_of(item.source), set())
    ]
    # THEN each goes the way an arrow of docs/architecture.md goes
    assert against == []


def test_only_the_emulator_and_the_harnesses_import_moto(graph: list[Import]) -> None:
    found = [
        f"{item.source}:{item.line}"
        for item in graph
        if item.target == "moto" and package_of(item.source) not in MOTO_ALLOWED
    ]
    assert found == []


def test_the_harnesses_import_their_shared_module_not_each_other(graph: list[Import]) -> None:
    harnesses = {
        "onceflow.harness.demo",
        "onceflow.harness.chaos",
        "onceflow.harness.chaos_queue",
    }
    between = [f"{i.source} imports {i.target}" for i in graph if {i.source, i.target} <= harnesses]
    assert between == []


def _fence(text: str, language: str) -> str:
    match = re.search(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/architecture.md has no ```{language} block"
    return match.group(1)


def documented_tree() -> set[str]:
    """The paths the page's tree names: onceflow/local/patches/, onceflow/project.py..."""
    names: set[str] = set()
    parents: list[str] = []
    for line in _fence(DOC.read_text(encoding="utf-8"), "text").splitlines():
        match = re.match(r"^((?:[│ ]   )*)(?:[├└]── )?(\S+)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4 + (1 if "── " in line else 0)
        entry = match.group(2)
        parents = parents[:depth]
        path = "/".join([*parents, entry.rstrip("/")])
        names.add(path + ("/" if entry.endswith("/") else ""))
        if entry.endswith("/"):
            parents.append(entry.rstrip("/"))
    return names


def actual_tree() -> set[str]:
    found = {"onceflow/"}
    for init in PACKAGE.rglob("__init__.py"):
        if "node_modules" not in init.parts:
            found.add(str(init.parent.relative_to(ROOT)) + "/")
    for module in PACKAGE.glob("*.py"):
        if module.name != "__init__.py":
            found.add(str(module.relative_to(ROOT)))
    return found


def test_the_documented_tree_is_the_packages() -> None:
    # GIVEN the tree docs/architecture.md draws, and the packages on disk
    documented, actual = documented_tree(), actual_tree()
    # THEN they name the same packages and top-level modules
    assert sorted(documented - actual) == [], "named in the page, not in onceflow/"
    assert sorted(actual - documented) == [], "in onceflow/, not named in the page"


def test_the_documented_arrows_are_the_rule() -> None:
    # GIVEN the page's dependency diagram
    arrows = re.findall(r"^\s*(\w+)\s*-\.?->\s*(\w+)\s*$", _fence(DOC.read_text(), "mermaid"), re.M)
    drawn: dict[str, set[str]] = {package: set() for package in ALLOWED}
    for source, target in arrows:
        drawn.setdefault(source, set()).add(target)
    # THEN its arrows are exactly the rule the imports are held to
    assert drawn == ALLOWED


def _probe(code: str) -> dict[str, object]:
    """Run Python in a fresh process from another directory; its last line is JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "events",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
            "AWS_EC2_METADATA_DISABLED": "true",
        },
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


_LOADED = (
    "loaded = sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] == 'moto'}"
    " | {m for m in sys.modules if m.startswith('onceflow.local.engine')})"
)


def test_importing_the_operations_loads_no_moto() -> None:
    # WHEN a fresh Python imports onceflow.ops
    answer = _probe(f"import json, sys\nimport onceflow.ops\n{_LOADED}\nprint(json.dumps(loaded))")
    # THEN neither moto nor the engine came with it
    assert answer == []


def test_redrive_help_on_a_deployed_stack_loads_no_moto() -> None:
    # WHEN `onceflow redrive --stack-name X --help` runs (the console script's main)
    answer = _probe(
        "import contextlib, io, json, sys\n"
        "from onceflow.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        main(['redrive', '--stack-name', 'X', '--help'])\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        f"{_LOADED}\n"
        "print(json.dumps({'code': code, 'help': 'usage: onceflow redrive' in out.getvalue(),"
        " 'loaded': loaded}))"
    )
    # THEN it printed the help, and neither moto nor the engine was imported
    assert answer == {"code": 0, "help": True, "loaded": []}


# The redrive of a deployed stack, its AWS answers stubbed (no network): the stack's
# outputs, then a DLQ with nothing in it.
_STUBBED_REDRIVE = """
import contextlib, datetime, io, json, sys
import boto3
from botocore.stub import Stubber

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/dlq"
OUTPUTS = {
    "DeadLetterQueueUrl": URL,
    "ProcessorStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:p",
}
stubs = []
real_client = boto3.session.Session.client

def client(self, service, *args, **kwargs):
    made = real_client(self, service, *args, **kwargs)
    stub = Stubber(made)
    if service == "cloudformation":
        stub.add_response(
            "describe_stacks",
            {"Stacks": [{
                "StackName": "X", "StackStatus": "CREATE_COMPLETE",
                "CreationTime": datetime.datetime(2026, 11, 24),
                "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in OUTPUTS.items()],
            }]},
            {"StackName": "X"},
        )
    elif service == "sqs":
        stub.add_response(
            "receive_message",
            {},
            {"QueueUrl": URL, "MaxNumberOfMessages": 10, "MessageAttributeNames": ["All"],
             "VisibilityTimeout": 300, "WaitTimeSeconds": 0},
        )
    stub.activate()
    stubs.append(stub)
    return made

boto3.session.Session.client = client
from onceflow.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["redrive", "--stack-name", "X", "--dry-run"])
for stub in stubs:
    stub.assert_no_pending_responses()
"""


def test_redrive_of_a_deployed_stack_runs_on_boto3_alone() -> None:
    # GIVEN a deployed stack whose AWS answers are stubbed: its outputs, an empty DLQ
    # WHEN `onceflow redrive --stack-name X --dry-run` runs in a fresh Python
    answer = _probe(
        _STUBBED_REDRIVE
        + f"{_LOADED}\n"
        + "print(json.dumps({'code': code, 'said': out.getvalue().strip(), 'loaded': loaded}))"
    )
    # THEN it read the stack and the queue, said what it would move, and never loaded
    # moto nor the engine
    assert answer["code"] == 0
    assert str(answer["said"]).startswith("redrive: would move 0 message(s)")
    assert answer["loaded"] == []
