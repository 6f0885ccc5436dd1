"""One model of the work item and the ledger row: every other writer uses its names.

service/model.py names the ledger's statuses and attributes. The state
machines are JSON and keep their own literals, the template declares the
table's keys, and onceflow's operator tools do not import the deployed code:
these tests hold each of them to the model, so none can drift from it.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from samtranslator.yaml_helper import yaml_parse

from service.handlers.audit import ACTIONS
from service.model import (
    OPEN_STATUSES,
    WORK_ITEM_COPIES,
    WRITTEN_BY_AUDIT,
    WRITTEN_BY_REDRIVE,
    WRITTEN_BY_STATE_MACHINES,
    Attribute,
    LedgerRow,
    Status,
    WorkItem,
)

ROOT = Path(__file__).resolve().parents[2]
MACHINES = ("processor", "batch", "audit")
# What the state machines send DynamoDB in these fields names attributes.
_EXPRESSIONS = (
    "UpdateExpression",
    "ConditionExpression",
    "ProjectionExpression",
    "KeyConditionExpression",
    "FilterExpression",
)
# An attribute in an expression: a name that is neither a :value, a #name nor a function.
_NAME = re.compile(r"(?<![:#\w])([a-z_][a-z0-9_]*)\b(?!\s*\()")
_JSONATA_TEXT = re.compile(r"'((?:[^'\\]|\\.)*)'")
# A text a DynamoDB expression field's JSONata can answer: a condition, an update, a
# projection. Claim's ConditionExpression also holds the rules' reasons (English text
# that an event's refusal raises, never sent to DynamoDB): they have none of these.
_DYNAMODB_TEXT = re.compile(r"attribute_(?:not_)?exists|\b(?:SET|REMOVE|ADD)\b|[<>=]")
_TYPED = re.compile(r"""['"]S['"]\s*:\s*['"]([A-Z][A-Z_]*)['"]""")  # {'S': 'FAILED'}
_OPEN_PREFIX = re.compile(r"'([A-Z][A-Z_]*)#'\s*&")  # 'FAILED#' & <the shard>


def _definition(name: str) -> dict[str, Any]:
    """A state machine's definition, DefinitionSubstitutions left in place."""
    for path in sorted((ROOT / "statemachines").glob(f"{name}.asl.*")):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            # An unquoted ${Name} stands for a number: any number parses.
            definition: dict[str, Any] = json.loads(re.sub(r'(?<!")\$\{\w+\}(?!")', "0", text))
            return definition
        if path.suffix in (".yaml", ".yml"):
            loaded: dict[str, Any] = yaml.safe_load(text)
            return loaded
    raise AssertionError(f"statemachines/ holds no definition of {name}")


def _states(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        yield name, state
        nested = [state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", [])]
        for machine in nested:
            if machine:
                yield from _states(machine["States"])


def _ledger_tasks(machine: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(state name, arguments) of every DynamoDB task of a state machine."""
    for name, state in _states(_definition(machine)["States"]):
        if str(state.get("Resource", "")).startswith("arn:aws:states:::dynamodb:"):
            yield name, state.get("Arguments") or state.get("Parameters") or {}


def _texts(value: Any) -> list[str]:
    """An expression field as DynamoDB gets it: the text, or every text a JSONata
    expression can choose from."""
    if not isinstance(value, str):
        return []
    if value.lstrip().startswith("{%"):
        return [t for t in _JSONATA_TEXT.findall(value) if _DYNAMODB_TEXT.search(t)]
    return [value]


def _written(machine: str) -> tuple[set[str], set[str], set[str]]:
    """(attribute names, statuses, open-work statuses) a state machine's ledger tasks use."""
    names: set[str] = set()
    statuses: set[str] = set()
    open_statuses: set[str] = set()
    for _, arguments in _ledger_tasks(machine):
        for field in _EXPRESSIONS:
            for text in _texts(arguments.get(field)):
                names |= set(_NAME.findall(text))
        names |= set((arguments.get("ExpressionAttributeNames") or {}).values())
        key = arguments.get("Key")
        names |= set(key) if isinstance(key, dict) else set()
        item = arguments.get("Item")
        if isinstance(item, str):
            # JSONata: the keys whose value is a typed attribute ({'S': ...}, perhaps behind a
            # condition), not the types' S, N, L nor the keys of the work item's projection
            typed = r"'([a-z][a-z0-9_]*)'\s*:[^,{}]*?\{'[SNLBM]'\s*:"
            names |= set(re.findall(typed, item))
        elif isinstance(item, dict):
            names |= set(item)
        text = json.dumps(arguments)
        statuses |= set(_TYPED.findall(text))
        open_statuses |= set(_OPEN_PREFIX.findall(text))
    return names, statuses, open_statuses


def test_the_state_machines_write_exactly_the_models_attributes_and_statuses() -> None:
    # GIVEN every DynamoDB task of every state machine
    written = [_written(machine) for machine in MACHINES]
    names = set().union(*(w[0] for w in written))
    statuses = set().union(*(w[1] for w in written))
    open_statuses = set().union(*(w[2] for w in written))
    # THEN they write the attributes the model says they write, no more and no fewer
    assert names == set(WRITTEN_BY_STATE_MACHINES)
    # AND the statuses are the model's, the open ones sharded in the OpenWork index
    assert statuses == set(Status)
    assert open_statuses == set(OPEN_STATUSES)


def test_claim_copies_the_work_items_fields_into_the_attributes_the_model_names() -> None:
    claims = {
        machine: arguments["Item"]
        for machine in ("processor", "batch")
        for name, arguments in _ledger_tasks(machine)
        if name == "Claim"
    }
    assert set(claims) == {"processor", "batch"}
    for machine, item in claims.items():
        # GIVEN the row Claim writes (JSONata over the work item $w)
        assert re.search(r"'pk'\s*:\s*\{'S'\s*:\s*\$w\.idempotencyKey\}", item), machine
        for attribute, field in WORK_ITEM_COPIES.items():
            # THEN each copied attribute comes from the work item field the model pairs it with
            pattern = rf"'{attribute}'\s*:[^,]*\$w\.{field}\b"
            assert re.search(pattern, item), f"{machine}: {attribute} <- {field}"


def test_the_audit_state_machine_asks_for_the_handlers_actions() -> None:
    # GIVEN the audit state machine's Lambda tasks, each naming an action
    text = json.dumps(_definition("audit"))
    asked = set(re.findall(r"'action'\s*:\s*'(\w+)'", text))
    asked |= set(re.findall(r'\\?"action\\?"\s*:\s*\\?"(\w+)\\?"', text))
    # THEN the audit function answers exactly those
    assert asked == set(ACTIONS)


def test_the_tables_keys_indexes_and_ttl_are_model_attributes() -> None:
    template = yaml_parse((ROOT / "template.yaml").read_text(encoding="utf-8"))
    table = template["Resources"]["LedgerTable"]["Properties"]
    declared = {a["AttributeName"] for a in table["AttributeDefinitions"]}
    projected = {
        name
        for index in table["GlobalSecondaryIndexes"]
        for name in index["Projection"].get("NonKeyAttributes", [])
    }
    # THEN every attribute the table declares or an index projects is the model's
    assert declared | projected <= set(Attribute)
    assert table["KeySchema"] == [{"AttributeName": Attribute.PK, "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"]["AttributeName"] == Attribute.EXPIRES_AT
    indexes = {i["IndexName"]: [k["AttributeName"] for k in i["KeySchema"]] for i in
               table["GlobalSecondaryIndexes"]}  # fmt: skip
    assert indexes == {
        "OpenWork": [Attribute.OPEN_STATUS, Attribute.LOCK_EXPIRES_AT],
        "ObjectContent": [Attribute.OBJECT_REF],
    }


def test_the_models_records_use_its_own_names() -> None:
    # A ledger row's fields are ledger attributes; what Claim copies is a work item field.
    assert {f.name for f in fields(LedgerRow)} <= set(Attribute)
    assert set(WORK_ITEM_COPIES.values()) <= set(WorkItem.__annotations__)
    assert WRITTEN_BY_AUDIT.isdisjoint(WRITTEN_BY_REDRIVE)


# ---- the Python that writes the ledger ----------------------------------------------

_TYPES = {"S", "N", "L", "M", "BOOL", "NULL", "SS", "NS"}
# A DynamoDB expression, or a piece of one (an ADD clause built apart).
_EXPRESSION = re.compile(r"^(SET|REMOVE|ADD|DELETE) |attribute_(not_)?exists\(| = :|[a-z_] :[a-z]")


def _constant(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _ledger_literals(path: Path) -> tuple[set[str], set[str]]:
    """(attribute names, statuses) a module spells out for DynamoDB: in expressions,
    as keys of typed values ({"pk": {"S": ...}}), in ExpressionAttributeNames, and
    read from typed items (item["status"]["S"], row.get("lock_owner", {}).get("S"))."""
    names: set[str] = set()
    statuses: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            texts = ["".join(_constant(v) or "\0" for v in node.values)]
        else:
            texts = [text] if (text := _constant(node)) is not None else []
        for text in texts:
            if _EXPRESSION.search(text):
                for part in text.split("\0"):
                    names |= set(_NAME.findall(part))
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                name = _constant(key)
                if name is None:
                    continue
                if (
                    isinstance(value, ast.Dict)
                    and len(value.keys) == 1
                    and _constant(value.keys[0]) in _TYPES
                ):
                    if not name.startswith(":"):
                        names.add(name)
                    typed = _constant(value.values[0])
                    if _constant(value.keys[0]) == "S" and typed and typed.isupper():
                        statuses.add(typed)
                elif name.startswith("#") and (aliased := _constant(value)) is not None:
                    names.add(aliased)
        if (
            isinstance(node, ast.Subscript)
            and _constant(node.slice) in _TYPES
            and isinstance(node.value, ast.Subscript)
            and (name := _constant(node.value.slice))
        ):
            names.add(name)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and _constant(node.args[0]) in _TYPES
        ):
            inner = node.func.value
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr == "get"
                and inner.args
                and (name := _constant(inner.args[0]))
                and not name.startswith(":")  # a value placeholder, not an attribute
            ):
                names.add(name)
    return names, statuses


def test_the_functions_and_onceflows_ledger_literals_are_the_models() -> None:
    # GIVEN every module of the functions and of onceflow (which cannot import the model)
    modules = sorted((ROOT / "functions" / "service").rglob("*.py"))
    modules += sorted((ROOT / "onceflow").rglob("*.py"))
    names: dict[str, set[str]] = {}
    statuses: dict[str, set[str]] = {}
    for path in modules:
        found, typed = _ledger_literals(path)
        where = str(path.relative_to(ROOT))
        for name in found:
            names.setdefault(name, set()).add(where)
        for status in typed:
            statuses.setdefault(status, set()).add(where)
    # THEN every attribute and status they spell out for DynamoDB is the model's
    assert {n: w for n, w in names.items() if n not in set(Attribute)} == {}
    assert {s: w for s, w in statuses.items() if s not in set(Status)} == {}
    # AND the scan sees them: what only the audit and redrive write is found
    assert set(WRITTEN_BY_AUDIT | WRITTEN_BY_REDRIVE) <= set(names)
