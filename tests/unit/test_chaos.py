"""The chaos harness: a small seeded run, and its checker on broken end states."""

from __future__ import annotations

import json
import threading
import time

import pytest

from onceflow.cli import main
from onceflow.harness.chaos import FAULT_KINDS, _check, render
from onceflow.harness.common import AuditsDuring, DemoObject, s3_event
from onceflow.local.engine import LocalEngine
from tests.helpers import load_event, png_bytes, upload

# Every fault kind is planned at least once whatever the count; at 100 objects (seed 11)
# each also fires, with 8 duplicated deliveries, 2 of them under 100 ms apart (200
# objects, twice the time, gave 9 and 1).
OBJECTS = 100


def test_a_100_object_run_injects_every_fault_and_holds_every_invariant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["chaos", "--objects", str(OBJECTS), "--seed", "11", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["violations"] == []
    assert report["objects"] == OBJECTS
    for kind in (*FAULT_KINDS, "duplicate_delivery"):
        assert report["faults_injected"][kind] >= 1, kind
    assert report["duplicate_gap_seconds"]["planned_under_100ms"] >= 1
    poison = report["faults_injected"]["poison"]
    assert report["effects_histogram"] == {"0": poison, "1": OBJECTS - poison}
    assert report["dead_letter_messages"] == poison
    # The faults show in the executions: a takeover's loser, a crash, discarded duplicates.
    assert report["executions"]["LockLost"] == report["faults_injected"]["lock_expiry"]
    crashes = report["faults_injected"]["crash_after_effect"]
    assert report["executions"]["ABORTED"] == crashes
    assert report["audit"]["stuck_released"] == crashes  # the dead workers' locks
    # The sink refused the second writes of taken-over and crashed work.
    assert report["second_effects_blocked_by_the_sink"] >= crashes
    assert report["executions"]["Duplicate"] >= 1
    assert report["audit"]["missing_resubmitted"] == report["faults_injected"]["lost"]
    assert report["second_audit_resubmitted"] == 0
    # AND the report prints as plain text, not a Python dict repr
    text = render(report)
    assert "{" not in text and "}" not in text
    assert "duplicate gaps    min 0.0" in text


def test_a_run_whose_audits_walk_an_s3_inventory_report_holds_every_invariant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The audit's inventory path (SelectWindow, AuditInventory) under the same faults: a
    # report delivered before each audit, which walks it instead of listing the bucket.
    code = main(["chaos", "--objects", "60", "--seed", "11", "--inventory", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["violations"] == []
    assert report["audit"]["missing_resubmitted"] == report["faults_injected"]["lost"] >= 1
    assert report["audit"]["stuck_released"] == report["faults_injected"]["crash_after_effect"]
    assert report["second_audit_resubmitted"] == 0


def test_audits_during_the_deliveries_resubmit_uploads_whose_events_are_still_coming(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Two audits while the deliveries run (AuditRecentCutoffHours=0: every upload is
    # judged): each finds uploads whose events have not arrived yet and resubmits them
    # as missing; the ledger makes whichever of the event and the resubmission comes
    # second a Duplicate.
    # (one delivery at a time: the deliveries go on while the first audit walks the bucket;
    # 12 objects, seed 11: it resubmits 7 of them, 1 lost)
    code = main(["chaos", "--objects", "12", "--seed", "11", "--concurrency", "1",
                 "--audit-during", "2", "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["violations"] == []
    during = report["audits_during"]
    assert [a["number"] for a in during] == [1, 2]
    for audit in during:
        # started with deliveries still to come, and deliveries ended while it ran
        assert audit["during"] is True, audit
        assert 0 < audit["deliveries_ended_at_start"] < audit["deliveries"], audit
        assert audit["deliveries_ended_at_end"] > audit["deliveries_ended_at_start"], audit
        assert audit["deliveries_ran_alongside"] >= 1, audit
    assert sum(a["missing_resubmitted"] for a in during) > report["faults_injected"]["lost"]
    assert report["effects_histogram"] == {"0": 1, "1": 11}
    assert report["second_audit_resubmitted"] == 0


def test_audits_during_start_while_the_deliveries_run_and_late_ones_say_so() -> None:
    # GIVEN three audits over eight deliveries, each audit held until a delivery after
    # its start has ended
    moved = threading.Condition()
    seen: list[tuple[int, int]] = []
    audits: AuditsDuring

    def audit(number: int) -> dict[str, int]:
        with moved:
            start = audits.done
            moved.wait_for(lambda: audits.done > start, timeout=5)
            seen.append((number, start))
        return {"scanned": number}

    audits = AuditsDuring(3, 8, audit)
    # WHEN the deliveries end one by one
    for _ in range(8):
        with moved:
            audits.advance()
            moved.notify_all()
        time.sleep(0.01)
    records = audits.finish()
    # THEN each started at its share of the deliveries (2, 4, 6 of 8), ran while later
    # ones ended, and was recorded with its report
    assert [(r["number"], r["deliveries_ended_at_start"]) for r in records] == [
        (1, 2),
        (2, 4),
        (3, 6),
    ]
    assert all(r["during"] and r["deliveries_ended_at_end"] > r["deliveries_ended_at_start"]
               for r in records)  # fmt: skip
    assert sorted(seen) == [(1, 2), (2, 4), (3, 6)]
    assert [r["report"] for r in records] == [{"scanned": 1}, {"scanned": 2}, {"scanned": 3}]

    # AND a reserved audit waits for the harness's own moment, not a share of deliveries
    reserved = AuditsDuring(2, 4, lambda n: {"scanned": n}, reserved=1)
    for _ in range(4):
        reserved.advance()
    assert [r["deliveries_ended_at_start"] for r in reserved.records] == [2]
    reserved.start_reserved()
    reserved.start_reserved()  # (only one was reserved)
    assert [r["during"] for r in reserved.finish()] == [True, True]

    # AND audits whose moment never came (fewer deliveries than expected) start after
    # them and say so; an audit that raises is recorded with its error
    def refused(number: int) -> dict[str, int]:
        raise RuntimeError("refused")

    late = AuditsDuring(2, 100, refused)
    late.advance()
    [first, second] = late.finish()
    assert (first["during"], second["during"]) == (False, False)
    assert first["error"] == "RuntimeError: refused"


def test_the_checker_names_every_broken_invariant(engine: LocalEngine) -> None:
    bucket = engine.ref("IngestBucket")
    s3 = engine.client("s3")
    twice = DemoObject("twice.png", upload(engine, "twice.png"), processable=True)
    never = DemoObject("never.png", upload(engine, "never.png"), processable=True)
    poison = DemoObject("poison.png", upload(engine, "poison.png", b"x"), processable=False)
    # A non-idempotent sink: two outputs written for one unit of work.
    for n in range(2):
        s3.put_object(
            Bucket=engine.ref("OutputBucket"),
            Key=f"processed/twice-{n}.webp",
            Body=png_bytes(),
            Metadata={"idempotency-key": twice.idempotency_key(bucket)},
        )
    # An effect for the poison object (and no DLQ message for it); a DLQ message
    # for processable work; a row left PROCESSING.
    s3.put_object(
        Bucket=engine.ref("OutputBucket"),
        Key="processed/poison.webp",
        Body=png_bytes(),
        Metadata={"idempotency-key": poison.idempotency_key(bucket)},
    )
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("DeadLetterQueue"),
        MessageBody="{}",
        MessageAttributes={
            "IDEMPOTENCY_KEY": {"DataType": "String", "StringValue": twice.idempotency_key(bucket)}
        },
    )
    engine.client("dynamodb").put_item(
        TableName=engine.ref("LedgerTable"),
        Item={"pk": {"S": never.idempotency_key(bucket)}, "status": {"S": "PROCESSING"}},
    )
    nothing = {"missing_resubmitted": 0, "failed_resubmitted": 0, "stuck_released": 0}
    # (and an audit during the deliveries that did not reach its report)
    failed = {"number": 1, "during": True, "error": "OpsError: the audit FAILED"}
    objects = {o.key: o for o in (twice, never, poison)}
    report = _check(engine, bucket, objects, {}, nothing, nothing, [failed])
    broken = {(v["invariant"], v["key"].split("/")[-1].split("#")[0]) for v in report["violations"]}
    assert broken == {
        ("one effect per processable object", "twice.png"),
        ("one effect per processable object", "never.png"),
        ("processable work ends PROCESSED", "twice.png"),
        ("processable work ends PROCESSED", "never.png"),
        ("no row left PROCESSING", "never.png"),
        ("poison: one DLQ message and a FAILED row", "poison.png"),
        ("no effect for poison", "poison.png"),
        ("DLQ messages only for poison", "twice.png"),
        ("every audit runs to its report", "audit during 1"),
    }
    assert report["effects_histogram"] == {"0": 1, "1": 1, "2": 1}


def test_the_harnesses_s3_event_has_the_sample_events_shape_and_an_id_per_copy() -> None:
    # GIVEN the sample Object Created event (events/, as S3 sends it)
    sample = load_event("s3-object-created.json")
    # WHEN the harnesses make one for a versioned and an unversioned upload
    versioned = s3_event("b", "a b+c.png", 7, version_id="v1", etag="e", copy=1)
    again = s3_event("b", "a b+c.png", 7, version_id="v1", etag="e", copy=2)
    unversioned = s3_event("b", "a b+c.png", 7, sequencer="00AB")
    # THEN each has the sample's fields, the key URL-encoded as S3 sends it
    assert versioned.keys() == sample.keys()
    assert versioned["detail"].keys() == sample["detail"].keys()
    assert versioned["detail"]["object"].keys() == sample["detail"]["object"].keys()
    assert versioned["detail"]["object"]["key"] == "a+b%2Bc.png"
    # AND a second copy of one upload's event is another event (its own id), of one upload
    assert again["id"] != versioned["id"]
    assert again["detail"] == versioned["detail"]
    # AND an unversioned upload has no version-id, and the sequencer it was given
    assert "version-id" not in unversioned["detail"]["object"]
    assert unversioned["detail"]["object"]["sequencer"] == "00AB"
