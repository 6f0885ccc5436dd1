"""The ledger's warm throughput: AWS's on-demand default; pre-warming is an update-table away."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onceflow.local.engine import DEFAULT_TEMPLATE
from onceflow.local.template import Stack

ROOT = Path(__file__).resolve().parents[2]
PREWARMING = (
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
    "pre-warming-on-demand-capacity-mode.html"
)
# Raising an existing table's warm throughput (aws dynamodb update-table --warm-throughput).
UPDATE = (
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/update-warm-throughput.html"
)


def _ledger() -> dict[str, Any]:
    props: dict[str, Any] = Stack.from_file(DEFAULT_TEMPLATE).template["Resources"]["LedgerTable"][
        "Properties"
    ]
    return props


def test_the_ledger_is_not_prewarmed() -> None:
    # GIVEN the template (WarmThroughput was a parameter; it is now a documented step)
    ledger = _ledger()
    # THEN neither the table nor an index asks for warm throughput (AWS's default applies)
    assert "WarmThroughput" not in ledger
    assert all("WarmThroughput" not in index for index in ledger["GlobalSecondaryIndexes"])


def test_the_docs_state_the_new_table_ceiling_and_how_to_prewarm() -> None:
    for page in ("docs/design.md", "docs/operate.md", "docs/benchmarks.md"):
        text = " ".join((ROOT / page).read_text(encoding="utf-8").split())
        assert "4,000 write units" in text, page
        assert "WarmThroughput" in text or "warm throughput" in text, page
    assert PREWARMING in (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    operate = " ".join((ROOT / "docs" / "operate.md").read_text(encoding="utf-8").split())
    assert "--warm-throughput" in operate and UPDATE in operate
