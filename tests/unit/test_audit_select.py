"""SelectWindow (P12 item 5): an inventory report's rows are cut to the audit's window before
any batch starts, and the rows it leaves out are counted as the batches would count them.

The report is a gzip CSV behind a fake S3 client; the window file is what the fake keeps.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from service.dal.bucket import Inventory
from service.dal.workflow import Reports
from service.logic.audit import Watermark, add_counts, age_verdict, inventory_item
from service.logic.key_filter import KeyFilter
from service.settings import AuditSettings
from service.usecases import audit

DAY = 86_400.0
NOW = 1_800_000_000.0
COLUMNS = ["Bucket", "Key", "VersionId", "IsLatest", "IsDeleteMarker", "Size",
           "LastModifiedDate", "ETag"]  # fmt: skip
SETTINGS = AuditSettings(
    ingest_bucket="in",
    ledger_table="ledger",
    open_work_index="OpenWork",
    processor_arn="arn:aws:states:us-east-1:123456789012:stateMachine:processor",
    dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
    report_bucket="out",
    report_prefix="reports/audit/",
    max_attempts=3,
    recent_cutoff_seconds=12 * 3600,
    retention_seconds=30 * DAY,
    stuck_margin_seconds=0,
    inventory_prefix="inventory/",
)


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def iso(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def row(key: str, age_days: float, *, version: str = "v1", deleted: bool = False,
        bucket: str = "in") -> list[str]:  # fmt: skip
    return [bucket, key, version, "true", "true" if deleted else "false", "3",
            iso(NOW - age_days * DAY), "etag"]  # fmt: skip


class FakeS3:
    """A manifest, its one data file, and what the audit writes."""

    def __init__(self, rows: list[list[str]]) -> None:
        text = io.StringIO()
        csv.writer(text, quoting=csv.QUOTE_ALL).writerows(rows)
        self.data = gzip.compress(text.getvalue().encode())
        files = [{"key": "data/1.csv.gz", "size": len(self.data), "MD5checksum": md5(self.data)}]
        self.manifest = json.dumps({
            "sourceBucket": "in", "fileSchema": ", ".join(COLUMNS), "files": files,
            "destinationBucket": "arn:aws:s3:::out",
        }).encode()  # fmt: skip
        self.written: dict[str, bytes] = {}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        if Key.endswith("manifest.checksum"):
            return {"Body": io.BytesIO(md5(self.manifest).encode())}
        body = self.manifest if Key.endswith("manifest.json") else self.data
        return {"Body": io.BytesIO(body)}

    def put_object(self, Bucket: str, Key: str, Body: bytes, **_: Any) -> dict[str, Any]:
        self.written[Key] = Body
        return {}


def clients(s3: FakeS3) -> audit.Clients:
    made = audit.Clients.__new__(audit.Clients)
    made.inventory = Inventory("out", "inventory/", client=s3)
    made.reports = Reports("out", s3)
    return made


def expected(rows: list[list[str]], settings: AuditSettings, mark: Watermark) -> tuple[Any, Any]:
    """What the batches would count and judge, row by row, the slow way."""
    window = audit._window(audit.AuditRun("a", NOW * 1000), settings, mark)
    counts, kept = add_counts(), []
    for values in rows:
        obj = inventory_item(dict(zip(COLUMNS, values, strict=True)), settings.ingest_bucket)
        if obj is None or not settings.key_filter.matches(obj.key):
            continue
        verdict = age_verdict(obj, window)
        if verdict is None:
            kept.append(values)
        else:
            counts["scanned"] += 1
            counts[verdict] += 1
    return counts, kept


ROWS = [
    row("old.png", 40), row("just-old.png", 30 + 1 / DAY), row("just-kept.png", 30 - 1 / DAY),
    row("behind.png", 5), row("at-the-margin.png", 2 + 1 / DAY), row("inside.png", 2 - 1 / DAY),
    row("recent.png", 0.2), row("deleted.png", 40, deleted=True), row("other.png", 40, bucket="x"),
    row("keep/me.png", 40), row("keep/me-too.png", 1),
    row("no-version.png", 25, version=""), row("no-version-new.png", 1.9, version=""),
]  # fmt: skip


@pytest.mark.parametrize("until_days", [None, 1.0, 10.0, 40.0])
@pytest.mark.parametrize("prefix", ["", "keep/"])
def test_the_window_keeps_and_counts_what_the_batches_would(
    until_days: float | None, prefix: str
) -> None:
    # GIVEN an inventory report with rows either side of every bound, and a watermark
    settings = SETTINGS
    if prefix:
        from dataclasses import replace

        settings = replace(SETTINGS, key_filter=KeyFilter(prefix=prefix))
    mark = Watermark() if until_days is None else Watermark(
        round((NOW - until_days * DAY) * 1000), round((NOW - until_days * DAY) * 1000))  # fmt: skip
    s3 = FakeS3(ROWS)
    # WHEN SelectWindow runs
    window = audit.select_window(
        settings, clients(s3), audit.AuditRun("a", NOW * 1000), "inventory/m/manifest.json", mark
    )
    # THEN it kept and counted exactly what a batch judging every row would
    counts, kept = expected(ROWS, settings, mark)
    assert window.counts == counts and window.rows == len(kept)
    if kept:
        assert window.file == {"bucket": "out", "key": "reports/audit-runs/a/window.csv"}
        written = list(csv.reader(io.StringIO(s3.written[window.file["key"]].decode())))
        assert written == [COLUMNS, *kept]
    else:
        assert window.file is None and s3.written == {}


def test_a_report_too_large_for_one_call_fails_it() -> None:
    s3 = FakeS3(ROWS * 2000)
    with pytest.raises(audit.PermanentError, match="too large"):
        audit.select_window(
            SETTINGS, clients(s3), audit.AuditRun("a", NOW * 1000), "m/manifest.json",
            Watermark(), remaining_seconds=2 * audit._TIMEOUT_MARGIN_SECONDS - 1,
        )  # fmt: skip


def test_rows_behind_the_watermark_are_counted_and_timed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rows behind the watermark are counted, none kept; and how fast one call streams them
    (printed: the rate pricing.SELECT_ROWS_PER_CPU_SECOND was set from)."""
    rows = [row(f"k/{n:08d}.png", 5) for n in range(50_000)]
    s3 = FakeS3(rows)
    mark = Watermark(round((NOW - DAY) * 1000), round((NOW - DAY) * 1000))
    started = time.process_time()
    window = audit.select_window(
        SETTINGS, clients(s3), audit.AuditRun("a", NOW * 1000), "m/manifest.json", mark
    )
    seconds = time.process_time() - started
    assert window.counts["skipped_audited"] == 50_000 and window.file is None
    with capsys.disabled():
        print(f"\nSelectWindow: {50_000 / seconds:,.0f} rows/s of CPU")
