"""Objects the audit reads that it cannot use: one bad object must not stop every later audit.

Each test puts the bad object (or row) into the engine's S3 or DynamoDB as an
operator, a lifecycle rule or a partial write would leave it, runs the audit state
machine, and asserts the named end state, the work found (the ledger), and what
says so (the report in S3, the metric, the log).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    AUDIT,
    MACHINE,
    age_object,
    audit_engine,
    dlq_messages,
    idempotency_key,
    ledger_row,
    run_audit,
    upload,
)

WATERMARK = "reports/audit/watermark.json"
DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


def lost_upload(engine: LocalEngine, key: str, days: float) -> str:
    """An upload whose event never arrived, ``days`` old."""
    version = upload(engine, key)
    age_object(engine, key, days=days)
    return idempotency_key(engine, key, version)


def put_output(engine: LocalEngine, key: str, body: bytes) -> None:
    engine.client("s3").put_object(Bucket=engine.ref("OutputBucket"), Key=key, Body=body)


def stored_watermark(engine: LocalEngine) -> dict[str, Any]:
    s3 = engine.client("s3")
    body = s3.get_object(Bucket=engine.ref("OutputBucket"), Key=WATERMARK)["Body"].read()
    value = json.loads(body)
    assert isinstance(value, dict)
    return value


def stored_report(engine: LocalEngine) -> dict[str, Any]:
    """The day's report as the audit wrote it to the output bucket."""
    key = f"reports/audit/{datetime.now(UTC).date().isoformat()}.json"
    s3 = engine.client("s3")
    value = json.loads(s3.get_object(Bucket=engine.ref("OutputBucket"), Key=key)["Body"].read())
    assert isinstance(value, dict)
    return value


def metrics(log: io.StringIO) -> dict[str, list[float]]:
    """The EMF metrics the audit function emitted, by name."""
    found: dict[str, list[float]] = {}
    for line in log.getvalue().splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        for directive in record.get("_aws", {}).get("CloudWatchMetrics", []):
            for metric in directive["Metrics"]:
                value = record[metric["Name"]]
                found.setdefault(metric["Name"], []).extend(
                    value if isinstance(value, list) else [value]
                )
    return found


def warnings(log: io.StringIO, message: str) -> list[dict[str, Any]]:
    out = []
    for line in log.getvalue().splitlines():
        line = line.strip()
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("level") == "WARNING" and record.get("message") == message:
                out.append(record)
    return out


# ---- the watermark ------------------------------------------------------------------

FUTURE_MS = now_ms() + 30 * DAY_MS
CORRUPT_WATERMARKS = {
    "not JSON": b"{versionedUntil: 17",
    "not UTF-8": b'{"versionedUntil": \xff\xfe}',
    "empty": b"",
    "a JSON array": b"[1700000000000, 1700000000000]",
    "wrong types": b'{"versionedUntil": "1700000000000", "unversionedUntil": null}',
    "a number too large for a time": b'{"versionedUntil": 1e400, "unversionedUntil": 1e400}',
    "negative": b'{"versionedUntil": -5, "unversionedUntil": -5}',
    "no fields": b"{}",
    "in the future": json.dumps(
        {"versionedUntil": FUTURE_MS, "unversionedUntil": FUTURE_MS}
    ).encode(),
}


@pytest.mark.parametrize("body", CORRUPT_WATERMARKS.values(), ids=CORRUPT_WATERMARKS.keys())
def test_an_unreadable_watermark_is_absent_said_loudly_and_overwritten(body: bytes) -> None:
    log = io.StringIO()
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0"}, function_log=log, time_scale=0.0
    ) as engine:
        # GIVEN a lost upload two days old, and a watermark the audit cannot use
        pk = lost_upload(engine, "lost.png", days=2)
        put_output(engine, WATERMARK, body)
        # WHEN the audit runs
        result = engine.execute(AUDIT, {})
        engine.wait_for_running(MACHINE)
        # THEN it judged the whole window as if there were no watermark: the upload is found
        row = ledger_row(engine, pk)
        assert row is not None and row["status"] == "PROCESSED"
        report = stored_report(engine)
        assert report["missing_resubmitted"] == 1 and report["resubmitted_sample"] == [pk]
        # AND it says so: the report names the reason, a metric counts it, a warning logs it,
        # and the run ends in a named failure after its report (AuditFailedAlarm)
        assert report["watermark"]["unreadable"], report["watermark"]
        assert metrics(log).get("AuditWatermarkUnreadable") == [1.0]
        assert warnings(log, "the audit's watermark cannot be read: judging the whole window")
        assert result.status == "FAILED" and result.error == "AuditWatermarkUnreadable"
        # AND the run that judged the whole window wrote a watermark of its own
        assert report["watermark"]["advanced"] is True
        mark = stored_watermark(engine)
        assert 0 < mark["versionedUntil"] <= now_ms()
        # AND the next audit reads it and succeeds
        again = run_audit(engine).output
        assert again["skipped_audited"] == 1 and again["missing_resubmitted"] == 0
        assert "unreadable" not in again["watermark"]


def test_a_good_watermark_emits_no_unreadable_metric() -> None:
    log = io.StringIO()
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0"}, function_log=log, time_scale=0.0
    ) as engine:
        lost_upload(engine, "lost.png", days=2)
        run_audit(engine)
        assert metrics(log).get("AuditWatermarkUnreadable") == [0.0]
        assert not warnings(log, "the audit's watermark cannot be read: judging the whole window")


# ---- the inventory report's folder ----------------------------------------------------


def copy_report_to(engine: LocalEngine, manifest_key: str, folder_name: str) -> None:
    """The report's manifest.json and manifest.checksum again, under another folder name."""
    s3 = engine.client("s3")
    out = engine.ref("OutputBucket")
    parent = manifest_key.rsplit("/", 2)[0]
    for name in ("manifest.json", "manifest.checksum"):
        body = s3.get_object(Bucket=out, Key=manifest_key.replace("manifest.json", name))
        put_output(engine, f"{parent}/{folder_name}/{name}", body["Body"].read())


@pytest.mark.parametrize(
    "folder_name", ["2026-13-45T99-99Z", "2999-01-01T00-00Z"], ids=["no such date", "future"]
)
def test_a_report_folder_that_names_no_past_time_is_passed_over(folder_name: str) -> None:
    log = io.StringIO()
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0", "AuditInventory": "Daily"},
        function_log=log,
        time_scale=0.0,
    ) as engine:
        # GIVEN an earlier report of the bucket when it was empty, copied to a complete
        # report folder whose name is not a time S3 could have delivered it at (it sorts
        # after today's)
        empty = engine.deliver_inventory(when=datetime.now(UTC) - timedelta(hours=3))
        copy_report_to(engine, empty, folder_name)
        # AND a lost upload, and today's report, which has it
        pk = lost_upload(engine, "lost.png", days=2)
        engine.deliver_inventory()
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN it reads today's report (not the copy: its empty rows would have moved the
        # watermark past the upload unseen), passes over the other and says so
        assert report["source"] == "inventory", report["source_reason"]
        assert report["resubmitted_sample"] == [pk]
        assert ledger_row(engine, pk) is not None
        assert warnings(log, "an inventory report folder names no past time: passed over")
        assert abs(report["watermark"]["versionedUntil"] - now_ms()) < 120_000


# ---- ledger rows the sweep meets ------------------------------------------------------


def put_row(engine: LocalEngine, item: dict[str, Any]) -> None:
    engine.client("dynamodb").put_item(TableName=engine.ref("LedgerTable"), Item=item)


def stuck_row(engine: LocalEngine, key: str) -> str:
    """An upload whose execution died holding its claim an hour ago: its row PROCESSING in
    the open-work index under an expired lock, as the processor leaves it."""
    version = upload(engine, key)
    pk = idempotency_key(engine, key, version)
    shard = hashlib.md5(pk.encode()).hexdigest()[0]
    now = int(time.time())
    owner = "arn:aws:states:us-east-1:123456789012:execution:ProcessorStateMachine:died"
    put_row(
        engine,
        {
            "pk": {"S": pk},
            "status": {"S": "PROCESSING"},
            "open_status": {"S": f"PROCESSING#{shard}"},
            "lock_owner": {"S": owner},
            "lock_expires_at": {"N": str(now - 3600)},
            "attempts": {"N": "1"},
            "claims": {"L": [{"S": owner}]},
            "created_at": {"N": str((now - 7200) * 1000)},
            "updated_at": {"N": str((now - 7200) * 1000)},
            "expires_at": {"N": str(now + 30 * 86400)},
            "source": {"S": "aws.s3"},
            "bucket": {"S": engine.ref("IngestBucket")},
            "object_key": {"S": key},
            "version_id": {"S": version},
        },
    )
    return pk


def bad_row(phase: str, **attributes: dict[str, Any]) -> dict[str, Any]:
    """A row of open work under the index's unsharded key (read before every shard), with
    the attributes given in place of the processor's."""
    now = int(time.time())
    item: dict[str, Any] = {
        "pk": {"S": f"bad-row-{phase}"},
        "status": {"S": phase},
        "open_status": {"S": phase},
        "lock_owner": {"S": "arn:aws:states:us-east-1:123456789012:execution:x:bad"},
        "lock_expires_at": {"N": str(now - 7200)},
        "attempts": {"N": "1"},
        "expires_at": {"N": str(now + 86400)},
    }
    for name, value in attributes.items():
        if value:
            item[name] = value
        else:
            item.pop(name)
    return item


BAD_ROWS = {
    "attempts not a number": bad_row("PROCESSING", attempts={"S": "three"}),
    "no status": bad_row("PROCESSING", status={}),
    "claims a number": bad_row("PROCESSING", claims={"N": "5"}),
    "expires_at not a number": bad_row("FAILED", expires_at={"S": "soon"}),
    "size a map": bad_row("FAILED", size={"M": {}}, bucket={"S": "b"}, object_key={"S": "k"}),
    "an unknown status": bad_row("PROCESSING", status={"S": "PAUSED"}),
    # Read as 1 it would be resubmitted every audit, and every Reclaim's ADD attempts would
    # fail on it (a string is no number to add to).
    "attempts a numeric string": bad_row("FAILED", attempts={"S": "1"}),
    "claimed without an owner": bad_row("PROCESSING", lock_owner={}),
}


@pytest.mark.parametrize("row", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_a_row_the_sweep_cannot_read_is_counted_and_the_sweep_goes_on(row: dict[str, Any]) -> None:
    log = io.StringIO()
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0"}, function_log=log, time_scale=0.0
    ) as engine:
        # GIVEN a row of open work the audit cannot read, read before any other...
        put_row(engine, row)
        # ...and a stuck upload after it
        pk = stuck_row(engine, "stuck.png")
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN the sweep went on past the bad row: the stuck upload was released and processed
        done = ledger_row(engine, pk)
        assert done is not None and done["status"] == "PROCESSED"
        assert report["stuck_released"] == 1
        # AND the bad row is counted where the alarm sees it, named in an error log, and
        # left as it was (nothing the audit could judge it by)
        assert report["unreadable_rows"] == 1 and report["resubmit_errors"] == 1
        assert any(
            '"the sweep cannot read a row of open work: left as it is"' in line
            and row["pk"]["S"] in line
            for line in log.getvalue().splitlines()
        )
        assert ledger_row(engine, row["pk"]["S"]) is not None


# ---- the inventory report -------------------------------------------------------------


def md5(body: bytes) -> str:
    return hashlib.md5(body, usedforsecurity=False).hexdigest()


def read_output(engine: LocalEngine, key: str) -> bytes:
    s3 = engine.client("s3")
    return bytes(s3.get_object(Bucket=engine.ref("OutputBucket"), Key=key)["Body"].read())


def first_data_file(engine: LocalEngine, manifest_key: str) -> str:
    manifest = json.loads(read_output(engine, manifest_key))
    return str(manifest["files"][0]["key"])


def rewrite_data_file(body: Any) -> Any:
    """Replace the report's first data file by what ``body`` makes of its CSV text."""

    def corrupt(engine: LocalEngine, manifest_key: str) -> None:
        key = first_data_file(engine, manifest_key)
        text = gzip.decompress(read_output(engine, key)).decode("utf-8")
        put_output(engine, key, body(text))

    return corrupt


def rewrite_manifest(change: Any, checksum: bool) -> Any:
    """Change the manifest, and write its manifest.checksum again (as S3 would) or not."""

    def corrupt(engine: LocalEngine, manifest_key: str) -> None:
        body = change(read_output(engine, manifest_key))
        put_output(engine, manifest_key, body)
        if checksum:
            put_output(engine, manifest_key.replace(".json", ".checksum"), md5(body).encode())

    return corrupt


def another_bucket(manifest: bytes) -> bytes:
    value = json.loads(manifest)
    value["sourceBucket"] = "someone-elses-bucket"
    return json.dumps(value, indent=2).encode()


def delete_data_file(engine: LocalEngine, manifest_key: str) -> None:
    out = engine.ref("OutputBucket")
    engine.client("s3").delete_object(Bucket=out, Key=first_data_file(engine, manifest_key))


def undecodable_key(text: str) -> bytes:
    # The key as a report would hold a Latin-1 "é": %E9 is no UTF-8, S3's keys are.
    return gzip.compress(text.replace('"lost.png"', '"lost%E9.png"').encode())


UNREADABLE_REPORTS = {
    "manifest not JSON": rewrite_manifest(lambda m: m[: len(m) // 2], checksum=False),
    "manifest edited, its checksum not": rewrite_manifest(another_bucket, checksum=False),
    "manifest of another bucket": rewrite_manifest(another_bucket, checksum=True),
    "data file missing": delete_data_file,
    "data file not gzip": rewrite_data_file(lambda text: text.encode()),
    "data file truncated": rewrite_data_file(lambda text: gzip.compress(text.encode())[:-9]),
    "data file empty gzip": rewrite_data_file(lambda text: gzip.compress(b"")),
    "data file empty": rewrite_data_file(lambda text: b""),
    "data file not UTF-8": rewrite_data_file(lambda t: gzip.compress(t.encode("utf-16"))),
    "a row with a column too many": rewrite_data_file(
        lambda text: gzip.compress(text.replace("\n", ',"extra"\n', 1).encode())
    ),
    "a key that does not decode": rewrite_data_file(undecodable_key),
}


@pytest.mark.parametrize("corrupt", UNREADABLE_REPORTS.values(), ids=UNREADABLE_REPORTS.keys())
def test_a_report_that_cannot_be_read_is_listed_instead_and_said(corrupt: Any) -> None:
    log = io.StringIO()
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0", "AuditInventory": "Daily"},
        function_log=log,
        time_scale=0.0,
    ) as engine:
        # GIVEN a lost upload, today's report of it, and the report damaged
        pk = lost_upload(engine, "lost.png", days=2)
        manifest_key = engine.deliver_inventory()
        corrupt(engine, manifest_key)
        # WHEN the audit runs
        result = engine.execute(AUDIT, {})
        engine.wait_for_running(MACHINE)
        # THEN the same run lists the bucket instead: the upload is found and processed,
        # and nothing of the damaged report was judged
        row = ledger_row(engine, pk)
        assert row is not None and row["status"] == "PROCESSED"
        report = stored_report(engine)
        assert report["source"] == "listing"
        assert report["source_reason"].startswith("the inventory report could not be read")
        assert report["resubmitted_sample"] == [pk] and report["scanned"] == 1
        # AND the listing judged every object: the watermark moves
        assert report["watermark"]["advanced"] is True
        # AND the run ends in a named failure after its report (AuditFailedAlarm)
        assert result.status == "FAILED" and result.error == "AuditInventoryUnreadable"
        assert manifest_key in str(result.cause)


def test_a_batch_that_meets_a_row_it_cannot_read_judges_the_rest_and_keeps_the_watermark() -> None:
    log = io.StringIO()
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0"}, function_log=log, time_scale=0.0
    ) as engine:
        # GIVEN an upload whose row was edited by hand (attempts "three"), closed work...
        version = upload(engine, "edited.png")
        age_object(engine, "edited.png", days=2)
        edited = idempotency_key(engine, "edited.png", version)
        put_row(engine, {"pk": {"S": edited}, "status": {"S": "PROCESSED"},
                         "attempts": {"S": "three"}})  # fmt: skip
        # ...and a lost upload in the same batch
        lost = lost_upload(engine, "lost.png", days=2)
        # WHEN the audit runs
        result = engine.execute(AUDIT, {})
        engine.wait_for_running(MACHINE)
        # THEN the batch went on: the lost upload was found and processed
        assert result.status == "SUCCEEDED", (result.error, result.cause)
        report = result.output
        assert report["failed_batches"] == 0 and report["resubmitted_sample"] == [lost]
        row = ledger_row(engine, lost)
        assert row is not None and row["status"] == "PROCESSED"
        # AND the edited row is counted where the alarm sees it, logged, and left alone;
        # its object was not judged, so the watermark stays for the next audit to judge it
        assert report["unreadable_rows"] == 1 and report["resubmit_errors"] == 1
        assert "a batch cannot read a ledger row" in log.getvalue()
        assert ledger_row(engine, edited) == {
            "pk": edited, "status": "PROCESSED", "attempts": "three"
        }  # fmt: skip
        assert report["watermark"]["advanced"] is False


HOSTILE_KEYS = {
    "a newline": "line\nbreak.png",
    # XML 1.0 cannot hold it: S3 lists it URL-encoded, as botocore asks (EncodingType=url;
    # the engine's patch "S3 listings URL-encoded when asked")
    "a control character": "ctl\x01.png",
    "DEL and a tab": "del\x7f\ttab.png",
    "1024 bytes of UTF-8": "é" * 511 + "k.",
    "spaces and plus": "a b+c%20d.png",
}


@pytest.mark.parametrize("source", ["listing", "inventory"])
def test_lost_uploads_with_hostile_keys_are_each_processed_once(source: str) -> None:
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0", "AuditInventory": "Daily"},
        function_log=io.StringIO(),
        time_scale=0.0,
    ) as engine:
        # GIVEN lost uploads whose keys S3 takes and XML, CSV or a URL could garble
        assert len(HOSTILE_KEYS["1024 bytes of UTF-8"].encode()) == 1024
        keys = {lost_upload(engine, key, days=2) for key in HOSTILE_KEYS.values()}
        if source == "inventory":
            engine.deliver_inventory()
        # WHEN the audit runs, twice
        first = run_audit(engine).output
        assert first["source"] == source, first["source_reason"]
        forget = engine.client("s3").delete_object
        forget(Bucket=engine.ref("OutputBucket"), Key=WATERMARK)
        second = run_audit(engine).output
        # THEN each upload was found once, under its own key, and processed once
        assert sorted(first["resubmitted_sample"]) == sorted(keys)
        assert second["missing_resubmitted"] == 0 and second["ok"] == len(keys)
        for pk in keys:
            row = ledger_row(engine, pk)
            assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "1"


# ---- open work outside the open-work index --------------------------------------------


def unindexed_row(engine: LocalEngine, key: str, status: str, **more: dict[str, Any]) -> str:
    """An upload's row of open work without open_status (the index's key): a row an older
    release wrote (batch-mode rows had none before P11) or an operator edited. The sweep,
    which reads only the index, never sees it."""
    version = upload(engine, key)
    age_object(engine, key, days=2)
    pk = idempotency_key(engine, key, version)
    now = int(time.time())
    owner = "arn:aws:states:us-east-1:123456789012:execution:ProcessorStateMachine:gone"
    item = {
        "pk": {"S": pk},
        "status": {"S": status},
        "lock_owner": {"S": owner},
        "attempts": {"N": "1"},
        "claims": {"L": [{"S": owner}]},
        "updated_at": {"N": str((now - 7200) * 1000)},
        "expires_at": {"N": str(now + 30 * 86400)},
        "source": {"S": "aws.s3"},
        "bucket": {"S": engine.ref("IngestBucket")},
        "object_key": {"S": key},
        "version_id": {"S": version},
        **more,
    }
    put_row(engine, item)
    return pk


UNINDEXED = {
    "PROCESSING, its lock expired": ("PROCESSING", {"lock_expires_at": {"N": "1000"}}, "PROCESSED"),
    "PROCESSING with no lock_expires_at": ("PROCESSING", {}, "PROCESSED"),
    "FAILED below MaxAttempts": ("FAILED", {}, "PROCESSED"),
    "FAILED at MaxAttempts, no DLQ message": ("FAILED", {"attempts": {"N": "3"}}, "FAILED"),
}


@pytest.mark.parametrize(("status", "more", "ends"), UNINDEXED.values(), ids=UNINDEXED.keys())
def test_open_work_outside_the_index_is_put_back_in_it_and_ends(
    status: str, more: dict[str, Any], ends: str
) -> None:
    with audit_engine() as engine:
        # GIVEN an upload whose open row is not in the open-work index
        pk = unindexed_row(engine, "legacy.png", status, **more)
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN the walk put the row back in the index, and the same run's sweep (or the
        # walk's resubmission) ended the work: processed, or dead-lettered at MaxAttempts
        row = ledger_row(engine, pk)
        assert row is not None and row["status"] == ends, row
        assert report["reindexed"] == 1
        if ends == "FAILED":
            assert "dead_lettered_at" in row and report["failed_dead_lettered"] == 1
            assert len(dlq_messages(engine)) == 1
        else:
            assert "open_status" not in row
        # AND the next audit finds nothing more to do
        forget = engine.client("s3").delete_object
        forget(Bucket=engine.ref("OutputBucket"), Key=WATERMARK)
        again = run_audit(engine).output
        assert again["reindexed"] == 0 and again["resubmit_errors"] == 0
        assert again["missing_resubmitted"] + again["failed_resubmitted"] == 0
