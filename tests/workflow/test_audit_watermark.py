"""The audit's watermark (P12 item 5): a run judges only what earlier successful runs did not.

Each test runs the audit state machine on the local engine and asserts the report,
the watermark it leaves in the output bucket, the ledger, and the ledger reads made.
A watermark from an earlier day is written as the audit writes it; an upload's age is
moto's clock moved back (age_object).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    AUDIT,
    MACHINE,
    age_object,
    audit_engine,
    idempotency_key,
    ledger_row,
    run_audit,
    upload,
)

WATERMARK = "reports/audit/watermark.json"
DAY_MS = 86_400_000
HOUR = 1 / 24
MARGIN_DAYS = 1  # WATERMARK_MARGIN_SECONDS


def now_ms() -> int:
    return int(time.time() * 1000)


def watermark(engine: LocalEngine) -> dict[str, Any] | None:
    s3 = engine.client("s3")
    try:
        body = s3.get_object(Bucket=engine.ref("OutputBucket"), Key=WATERMARK)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    value = json.loads(body)
    assert isinstance(value, dict)
    return value


def set_watermark(engine: LocalEngine, until_ms: int) -> None:
    """An earlier successful audit judged every upload modified up to ``until_ms``."""
    engine.client("s3").put_object(
        Bucket=engine.ref("OutputBucket"),
        Key=WATERMARK,
        Body=json.dumps({"versionedUntil": until_ms, "unversionedUntil": until_ms}).encode(),
    )


def ledger_reads(engine: LocalEngine) -> int:
    return sum(1 for r in engine.state.requests.snapshot() if r.operation == "BatchGetItem")


def lost_upload(engine: LocalEngine, key: str, days: float) -> str:
    """An upload whose event never arrived, ``days`` old."""
    version = upload(engine, key)
    age_object(engine, key, days=days)
    return idempotency_key(engine, key, version)


def test_a_successful_audit_moves_the_watermark_and_the_next_skips_what_it_judged() -> None:
    with audit_engine() as engine:
        # GIVEN a lost upload three days old, and no audit yet
        pk = lost_upload(engine, "lost.png", days=3)
        assert watermark(engine) is None
        # WHEN the audit runs
        first = run_audit(engine)
        # THEN it judged the whole retention window and resubmitted the upload
        assert first.output["missing_resubmitted"] == 1 and ledger_row(engine, pk) is not None
        # AND the watermark is the run's start (AuditRecentCutoffHours 0 here)
        started = first.output["started_at"]
        mark = watermark(engine)
        assert mark is not None and first.output["watermark"]["advanced"] is True
        assert abs(mark["versionedUntil"] / 1000 - datetime.fromisoformat(started).timestamp()) < 2
        # WHEN the next audit runs
        engine.state.requests.clear()
        second = run_audit(engine).output
        # THEN the upload is behind the watermark: skipped with no ledger read
        assert second["scanned"] == 1 and second["skipped_audited"] == 1 and second["ok"] == 0
        assert ledger_reads(engine) == 0


def test_lost_uploads_just_inside_and_just_outside_the_watermark() -> None:
    with audit_engine() as engine:
        # GIVEN an audit that judged everything up to a day ago (the margin: one more day)
        set_watermark(engine, now_ms() - DAY_MS)
        # AND two lost uploads, an hour either side of the watermark less its margin
        inside = lost_upload(engine, "inside.png", days=1 + MARGIN_DAYS - HOUR)
        outside = lost_upload(engine, "outside.png", days=1 + MARGIN_DAYS + HOUR)
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN the one inside is resubmitted and processed; the one outside, which the
        # earlier audit judged, is left alone
        assert report["missing_resubmitted"] == 1 and report["skipped_audited"] == 1
        assert report["resubmitted_sample"] == [inside]
        row = ledger_row(engine, inside)
        assert row is not None and row["status"] == "PROCESSED"
        assert ledger_row(engine, outside) is None


def test_an_audit_that_dies_mid_walk_leaves_the_watermark_and_the_next_finds_the_upload() -> None:
    with audit_engine() as engine:
        # GIVEN a watermark three days old and a lost upload two days old
        before = now_ms() - 3 * DAY_MS
        set_watermark(engine, before)
        pk = lost_upload(engine, "lost.png", days=2)
        # WHEN the audit's batch dies (the audit function raises on it, past its retries)
        real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])

        def batch_dies(event: dict[str, Any], context: Any) -> Any:
            if event.get("action") == "batch":
                raise RuntimeError("injected: the batch's Lambda died")
            return real(event, context)

        with engine.override_function("AuditFunction", batch_dies):
            failed = engine.execute(AUDIT, {})
        engine.wait_for_running(MACHINE)
        # THEN the run failed, after its report, and the watermark did not move
        assert failed.status == "FAILED" and failed.error == "AuditWalkFailed"
        mark = watermark(engine)
        assert mark is not None and mark["versionedUntil"] == before
        assert ledger_row(engine, pk) is None
        # AND the next audit finds the upload (had the watermark moved to the failed run's
        # start, a two-day-old upload would be a day behind it, margin included)
        report = run_audit(engine).output
        assert report["missing_resubmitted"] == 1 and report["resubmitted_sample"] == [pk]
        row = ledger_row(engine, pk)
        assert row is not None and row["status"] == "PROCESSED"
        assert watermark(engine)["versionedUntil"] > before  # type: ignore[index]


def test_a_resubmission_that_fails_to_start_leaves_the_watermark() -> None:
    with audit_engine() as engine:
        before = now_ms() - 3 * DAY_MS
        set_watermark(engine, before)
        pk = lost_upload(engine, "lost.png", days=2)
        real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])

        def start_fails(event: dict[str, Any], context: Any) -> Any:
            import service.dal.workflow as workflow
            from service.errors import TransientError

            original = workflow.Processor.start

            def start(self: Any, name: str, execution_input: Any, claims: Any = ()) -> bool:
                raise TransientError("injected: StartExecution throttled past the SDK's retries")

            workflow.Processor.start = start  # type: ignore[method-assign]
            try:
                return real(event, context)
            finally:
                workflow.Processor.start = original  # type: ignore[method-assign]

        # WHEN every resubmission of the walk fails to start
        with engine.override_function("AuditFunction", start_fails):
            report = run_audit(engine).output
        # THEN the run counts it, and the watermark stays: the upload was judged, not started
        assert report["resubmit_errors"] == 1 and report["watermark"]["advanced"] is False
        assert watermark(engine)["versionedUntil"] == before  # type: ignore[index]
        # AND the next audit starts it
        again = run_audit(engine).output
        assert again["missing_resubmitted"] == 1 and ledger_row(engine, pk) is not None


def test_a_run_over_one_prefix_leaves_the_watermark() -> None:
    with audit_engine() as engine:
        before = now_ms() - 3 * DAY_MS
        set_watermark(engine, before)
        lost_upload(engine, "a/lost.png", days=2)
        pk = lost_upload(engine, "b/lost.png", days=2)
        result = engine.execute(AUDIT, {"prefix": "a/"})
        engine.wait_for_running(MACHINE)
        assert result.status == "SUCCEEDED" and result.output["missing_resubmitted"] == 1
        assert result.output["watermark"]["advanced"] is False
        assert watermark(engine)["versionedUntil"] == before  # type: ignore[index]
        # b/ was not walked: the next full audit finds it
        assert run_audit(engine).output["resubmitted_sample"] == [pk]


def test_before_the_first_inventory_report_the_listing_moves_the_watermark() -> None:
    with audit_engine(AuditInventory="Daily") as engine:
        pk = lost_upload(engine, "lost.png", days=2)
        report = run_audit(engine).output
        assert report["source"] == "listing"
        assert report["source_reason"] == "no complete inventory report yet"
        assert report["missing_resubmitted"] == 1 and ledger_row(engine, pk) is not None
        assert report["watermark"]["advanced"] is True


def test_an_inventory_report_moves_the_watermark_only_to_when_s3_scanned_the_bucket() -> None:
    with audit_engine(AuditInventory="Daily") as engine:
        # GIVEN an inventory report S3 began 40 hours ago (fresh enough for Daily)...
        taken = datetime.now(UTC) - timedelta(hours=40)
        engine.deliver_inventory(when=taken)
        # ...and an upload it does not hold, lost, modified 30 hours ago
        pk = lost_upload(engine, "after-the-report.png", days=30 * HOUR)
        # WHEN the audit runs from the report
        first = run_audit(engine).output
        # THEN it did not see the upload, and the watermark is the report's time, not the run's
        assert first["source"] == "inventory" and first["scanned"] == 0
        assert first["watermark"]["advanced"] is True
        assert abs(first["watermark"]["versionedUntil"] / 1000 - taken.timestamp()) < 60
        # AND a run that lists the bucket finds the upload (behind a watermark at the
        # run's start it would be, at 30 hours old, six hours behind the margin)
        listed = engine.execute(AUDIT, {"source": "listing"})
        engine.wait_for_running(MACHINE)
        assert listed.status == "SUCCEEDED"
        assert listed.output["resubmitted_sample"] == [pk]


def age_every_object(engine: LocalEngine, days: float) -> None:
    """Every version in the ingest bucket ``days`` old (moto's clock), in one pass."""
    from moto.core.utils import utcnow
    from moto.s3.models import s3_backends

    from onceflow.local.engine import ACCOUNT_ID

    bucket = s3_backends[ACCOUNT_ID]["aws"].buckets[engine.ref("IngestBucket")]
    for key in list(bucket.keys.keys()):
        for version in bucket.keys.getlist(key):
            version.last_modified = utcnow() - timedelta(days=days)


def test_the_inventorys_window_is_selected_before_the_batches_start() -> None:
    with audit_engine(AuditInventory="Daily") as engine:
        s3 = engine.client("s3")
        bucket = engine.ref("IngestBucket")
        # GIVEN 1500 uploads a week old, which an audit three days ago judged
        for n in range(1500):
            s3.put_object(Bucket=bucket, Key=f"old/{n:05d}.png", Body=b"x")
        age_every_object(engine, days=7)
        set_watermark(engine, now_ms() - 3 * DAY_MS)
        # AND two lost uploads of the last two days, and the day's inventory report
        lost = sorted(lost_upload(engine, f"new/{n}.png", days=2) for n in range(2))
        engine.deliver_inventory()
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN every row was counted, but only the two in the window reached a batch: one
        # child, not two (the 1500 rows behind the watermark never left SelectWindow)
        assert report["source"] == "inventory"
        assert report["scanned"] == 1502 and report["skipped_audited"] == 1500
        assert report["batches"] == 1
        assert sorted(report["resubmitted_sample"]) == lost
        assert report["watermark"]["advanced"] is True
