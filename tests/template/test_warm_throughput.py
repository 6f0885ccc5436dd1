"""The ledger's WarmThroughput: off by default, or the write units a new stack takes at once."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.template import Stack, TemplateError

ROOT = Path(__file__).resolve().parents[2]
PREWARMING = (
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
    "pre-warming-on-demand-capacity-mode.html"
)


def _ledger(parameters: dict[str, str]) -> dict[str, Any]:
    stack = Stack.from_file(DEFAULT_TEMPLATE, parameters)
    props = stack.template["Resources"]["LedgerTable"]["Properties"]
    # Only what the warm throughput touches: the rest names resources not created here.
    resolved: dict[str, Any] = stack.resolve(
        {
            "WarmThroughput": props["WarmThroughput"],
            "GlobalSecondaryIndexes": props["GlobalSecondaryIndexes"],
        }
    )
    return resolved


def test_the_ledger_is_not_prewarmed_by_default() -> None:
    # GIVEN the defaults
    ledger = _ledger({})
    # THEN neither the table nor an index asks for warm throughput (AWS's default applies)
    assert "WarmThroughput" not in ledger
    assert all("WarmThroughput" not in index for index in ledger["GlobalSecondaryIndexes"])


def test_warm_throughput_prewarms_the_table_and_the_index_every_claim_writes() -> None:
    # GIVEN a stack that is to take 20,000 write units a second from its first minute
    ledger = _ledger({"WarmThroughput": "20000"})
    # THEN the table and its OpenWork index (written at every claim and completion) get it
    assert ledger["WarmThroughput"] == {"WriteUnitsPerSecond": "20000"}
    indexes = {index["IndexName"]: index for index in ledger["GlobalSecondaryIndexes"]}
    assert indexes["OpenWork"]["WarmThroughput"] == {"WriteUnitsPerSecond": "20000"}
    # AND the index of unversioned uploads only, one partition per object key, keeps AWS's
    assert "WarmThroughput" not in indexes["ObjectContent"]


def test_the_local_engine_creates_a_prewarmed_ledger() -> None:
    # GIVEN the parameter as a user passes it, WHEN the local stack is created
    with LocalEngine(parameters={"WarmThroughput": "20000"}, function_log=io.StringIO()) as engine:
        table = engine.client("dynamodb").describe_table(TableName=engine.ref("LedgerTable"))
    # THEN the ledger exists with its indexes, as CloudFormation would create it
    assert {i["IndexName"] for i in table["Table"]["GlobalSecondaryIndexes"]} == {
        "OpenWork",
        "ObjectContent",
    }


@pytest.mark.parametrize("value", ["0", "4000", "1000001", "20000.5", "on", "", "04001"])
def test_warm_throughput_refuses_what_would_not_raise_the_ledger(value: str) -> None:
    # A value at or below what a new on-demand table sustains would change nothing.
    with pytest.raises(TemplateError, match=f"parameter WarmThroughput={value!r}"):
        Stack.from_file(DEFAULT_TEMPLATE, {"WarmThroughput": value})


def test_the_docs_state_the_new_table_ceiling_and_the_parameter() -> None:
    for page in ("docs/design.md", "docs/operate.md", "docs/benchmarks.md"):
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
        assert "4,000 write units" in text, page
        assert "WarmThroughput" in text, page
    assert PREWARMING in (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
