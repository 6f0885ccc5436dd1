"""The audit state machine on the local engine: lost, failed and stuck work, and what it leaves.

Each test asserts the audit's report, the ledger, the DLQ, the effects in
S3's request log, and the histories of the executions involved.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from onceflow.local.engine import EngineError, LocalEngine
from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    Gate,
    TransientError,
    age_object,
    attributes,
    audit_engine,
    dlq_messages,
    expire_lock,
    idempotency_key,
    ledger_row,
    output_effects,
    run_audit,
    s3_event,
    upload,
)


@pytest.fixture
def audited() -> Iterator[LocalEngine]:
    with audit_engine() as local:
        local.state.requests.clear()
        yield local


def hang_first_call(engine: LocalEngine, gate: Gate) -> Any:
    """The real processor, except that its first call hangs until the test releases it."""
    real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])
    calls = {"n": 0}
    lock = threading.Lock()

    def handler(event: dict[str, Any], context: Any) -> Any:
        with lock:
            calls["n"] += 1
            first = calls["n"] == 1
        if first:
            gate.hold(timeout=60)
        return real(event, context)

    return handler


def always(error: type[Exception]) -> Any:
    def handler(event: dict[str, Any], context: Any) -> Any:
        raise error(f"injected {error.__name__}")

    return handler


def processor_executions(engine: LocalEngine) -> list[dict[str, Any]]:
    sfn = engine.client("stepfunctions")
    return [
        e
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=engine.ref(MACHINE)
        )
        for e in page["executions"]
    ]


def test_a_lost_event_is_found_and_processed_once(audited: LocalEngine) -> None:
    # GIVEN an upload whose event never arrived
    version = upload(audited, "lost/a.png")
    # WHEN the audit runs
    report = run_audit(audited).output
    # THEN it resubmitted the object, which was processed once, as a direct work item
    assert report["scanned"] == 1 and report["missing_resubmitted"] == 1
    pk = idempotency_key(audited, "lost/a.png", version)
    assert report["resubmitted_sample"] == [pk]
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED" and row["source"] == "audit"
    assert output_effects(audited) == 1
    (execution,) = processor_executions(audited)
    assert execution["name"].startswith("audit-")
    # AND the report is in S3 under reports/audit/<date>.json, as in the output
    bucket, key = report["report"].removeprefix("s3://").split("/", 1)
    assert key == f"reports/audit/{report['started_at'][:10]}.json"
    stored = json.loads(audited.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    assert stored["missing_resubmitted"] == 1 and stored["audit"] == report["audit"]


def test_the_audit_walks_the_bucket_with_one_distributed_map(audited: LocalEngine) -> None:
    upload(audited, "a.png")
    result = run_audit(audited)
    # The walk is one Distributed Map state, whatever the bucket's size.
    assert result.states_entered == [
        "Plan",
        "ObjectSource",
        "AuditListing",
        "SweepLocks",
        "MoreLocks",
        "Report",
        "ObjectsAudited",
        "Audited",
    ]
    audit_function = audited.function_name("AuditFunction")
    calls = [i for i in audited.runtime.invocations if i.function == audit_function]
    assert len(calls) == 4  # plan, one batch, one page of open work, report
    # (the default, AuditInventory auto, configures a daily inventory of the stack's own
    # bucket; S3 has delivered no report yet, so the audit lists, as a fresh stack does)
    assert result.output["source"] == "listing"
    assert result.output["source_reason"] == "no complete inventory report yet"


def test_two_audits_in_a_row_the_second_resubmits_nothing(audited: LocalEngine) -> None:
    for n in range(3):
        upload(audited, f"lost/{n}.png")
    first = run_audit(audited).output
    second = run_audit(audited).output
    assert first["missing_resubmitted"] == 3
    assert second["missing_resubmitted"] == 0 and second["failed_resubmitted"] == 0
    assert second["ok"] == 3 and second["stuck_released"] == 0
    assert output_effects(audited) == 3
    assert len(processor_executions(audited)) == 3


def test_a_failed_row_below_max_attempts_is_resubmitted(audited: LocalEngine) -> None:
    # GIVEN a delivery whose processing failed transiently, every retry
    version = upload(audited, "flaky.png")
    pk = idempotency_key(audited, "flaky.png", version)
    with audited.override_function(FUNCTION, always(TransientError)):
        failed = audited.execute(MACHINE, s3_event(audited, "flaky.png", version))
    assert failed.outcome == "Failed"
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "FAILED" and row["attempts"] == "1"
    # WHEN the audit runs (the processor works again)
    report = run_audit(audited).output
    # THEN the row was reclaimed and processed: attempt 2, one effect, no DLQ message
    assert report["failed_resubmitted"] == 1 and report["missing_resubmitted"] == 0
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
    assert output_effects(audited) == 1
    assert dlq_messages(audited) == []


def test_a_dead_lettered_row_at_max_attempts_is_skipped(audited: LocalEngine) -> None:
    # GIVEN work that failed MaxAttempts times and went to the DLQ
    version = upload(audited, "poison.png")
    pk = idempotency_key(audited, "poison.png", version)
    with audited.override_function(FUNCTION, always(TransientError)):
        for _ in range(3):  # MaxAttempts
            audited.execute(MACHINE, s3_event(audited, "poison.png", version))
    row = ledger_row(audited, pk)
    assert row is not None and row["attempts"] == "3" and "dead_lettered_at" in row
    assert len(dlq_messages(audited)) == 1
    before = len(processor_executions(audited))
    # WHEN the audit runs
    report = run_audit(audited).output
    # THEN it neither resubmits it nor adds a DLQ message
    assert report["dead_lettered_skipped"] == 1 and report["failed_resubmitted"] == 0
    assert len(processor_executions(audited)) == before
    assert len(dlq_messages(audited)) == 1


def test_recent_objects_are_skipped() -> None:
    # The default AuditRecentCutoffHours (12): a new object's event may be on its way.
    with LocalEngine(function_log=None, time_scale=0.0) as engine:
        version = upload(engine, "new.png")
        report = run_audit(engine).output
        assert report["skipped_recent"] == 1 and report["missing_resubmitted"] == 0
        assert ledger_row(engine, idempotency_key(engine, "new.png", version)) is None


def test_objects_older_than_retention_are_skipped(audited: LocalEngine) -> None:
    # Their rows have expired (TTL): resubmitting could process them a second time.
    version = upload(audited, "old.png")
    upload(audited, "fresh.png")
    age_object(audited, "old.png", days=31)  # RetentionDays 30
    report = run_audit(audited).output
    assert report["skipped_old"] == 1 and report["missing_resubmitted"] == 1
    assert ledger_row(audited, idempotency_key(audited, "old.png", version)) is None


def test_every_version_of_an_overwritten_object_is_its_own_work(audited: LocalEngine) -> None:
    first = upload(audited, "same.png")
    audited.execute(MACHINE, s3_event(audited, "same.png", first))
    second = upload(audited, "same.png")  # its event was lost
    report = run_audit(audited).output
    assert report["scanned"] == 2 and report["ok"] == 1 and report["missing_resubmitted"] == 1
    assert report["resubmitted_sample"] == [idempotency_key(audited, "same.png", second)]
    assert output_effects(audited) == 2


def test_an_audit_racing_a_late_original_delivery_has_one_effect(audited: LocalEngine) -> None:
    # GIVEN an object whose event is late; the audit resubmits it first
    version = upload(audited, "late.png")
    pk = idempotency_key(audited, "late.png", version)
    gate = Gate()
    real = audited.runtime.load(audited.runtime.functions[audited.function_name(FUNCTION)])

    def slow(event: dict[str, Any], context: Any) -> Any:
        gate.hold()
        return real(event, context)

    with audited.override_function(FUNCTION, slow), ThreadPoolExecutor(1) as pool:
        audit = pool.submit(run_audit, audited)
        gate.wait_entered()  # the resubmission holds the lock, mid-processing
        # WHEN the original delivery arrives now, and once more after processing
        during = audited.execute(MACHINE, s3_event(audited, "late.png", version))
        gate.release.set()
        audit.result()
    after = audited.execute(MACHINE, s3_event(audited, "late.png", version))
    # THEN both late deliveries were discarded: one effect, one claim
    assert during.outcome == "Duplicate"
    assert after.outcome == "Duplicate"
    assert output_effects(audited) == 1
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "1"


def test_a_stuck_lock_is_released_and_resubmitted(audited: LocalEngine) -> None:
    # GIVEN a worker that hangs while it holds the lock, until the lock expires
    version = upload(audited, "stuck.png")
    pk = idempotency_key(audited, "stuck.png", version)
    gate = Gate()
    hangs_first_time = hang_first_call(audited, gate)

    with audited.override_function(FUNCTION, hangs_first_time):
        stuck_arn = audited.start_execution(MACHINE, s3_event(audited, "stuck.png", version))
        gate.wait_entered()
        expire_lock(audited, pk, seconds_ago=3600)
        # WHEN the audit runs
        report = run_audit(audited, stuck_arn).output
        # THEN it released the lock (fenced) and resubmitted: a new owner processed it
        assert report["stuck_released"] == 1 and report["in_progress"] == 1
        row = ledger_row(audited, pk)
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
        assert row["lock_owner"] != stuck_arn
        assert row["released_by"] == report["audit"]
        assert row["last_error"].startswith("LockExpired")
        # AND the hung worker, when it wakes, cannot overwrite the outcome
        gate.release.set()
        woke = audited.wait(stuck_arn)
    assert woke.outcome == "LockLost"
    assert output_effects(audited) == 1
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED"


def test_a_live_lock_and_a_lock_within_the_margin_are_left_alone(audited: LocalEngine) -> None:
    gate = Gate()
    versions = {k: upload(audited, k) for k in ("live.png", "just-expired.png")}

    def hangs(event: dict[str, Any], context: Any) -> Any:
        gate.hold(timeout=60)
        raise TransientError("woke up")

    with audited.override_function(FUNCTION, hangs):
        arns = [
            audited.start_execution(MACHINE, s3_event(audited, k, v)) for k, v in versions.items()
        ]
        gate.wait_entered()
        # Both hold their locks; one lock expired 60 s ago, within the 300 s margin.
        for key in versions:
            row = None
            while row is None or row.get("status") != "PROCESSING":
                row = ledger_row(audited, idempotency_key(audited, key, versions[key]))
        expire_lock(
            audited, idempotency_key(audited, "just-expired.png", versions["just-expired.png"]), 60
        )
        report = run_audit(audited, *arns).output
        gate.release.set()
        for arn in arns:
            audited.wait(arn)
    assert report["stuck_released"] == 0 and report["in_progress"] == 2


def test_a_lock_renewed_after_the_index_was_read_is_not_released(audited: LocalEngine) -> None:
    """The fence: the release names the owner and expiry it saw, so a takeover wins."""
    from service.dal.ledger import Ledger

    version = upload(audited, "renewed.png")
    pk = idempotency_key(audited, "renewed.png", version)
    with audited.override_function(FUNCTION, always(TransientError)):
        audited.execute(MACHINE, s3_event(audited, "renewed.png", version))
    dynamodb = audited.client("dynamodb")
    table = audited.ref("LedgerTable")
    # The row as the sweep saw it in the index: PROCESSING, its lock long expired.
    dynamodb.update_item(
        TableName=table,
        Key={"pk": {"S": pk}},
        UpdateExpression="SET #s = :p, open_status = :p, lock_owner = :old, lock_expires_at = :t",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={
            ":p": {"S": "PROCESSING"},
            ":old": {"S": "arn:old-owner"},
            ":t": {"N": "1000"},
        },
    )
    ledger = Ledger(table, "OpenWork", dynamodb)
    (seen,), _ = ledger.open_rows("PROCESSING", lock_cutoff=2000, cursor=None)
    # Meanwhile a redelivery reclaims it: a new owner and a new expiry.
    redelivery = audited.execute(MACHINE, s3_event(audited, "renewed.png", version))
    assert redelivery.outcome == "Processed"
    # WHEN the sweep releases what it saw THEN nothing is written
    assert ledger.release_stuck(seen, 0, "audit-test") is False
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED" and "released_by" not in row


def test_a_stuck_lock_at_max_attempts_is_dead_lettered(audited: LocalEngine) -> None:
    version = upload(audited, "stuck-last.png")
    pk = idempotency_key(audited, "stuck-last.png", version)
    with audited.override_function(FUNCTION, always(TransientError)):
        for _ in range(2):
            audited.execute(MACHINE, s3_event(audited, "stuck-last.png", version))
    gate = Gate()

    def hangs(event: dict[str, Any], context: Any) -> Any:
        gate.hold(timeout=60)
        raise TransientError("woke up too late")

    with audited.override_function(FUNCTION, hangs):
        third = audited.start_execution(MACHINE, s3_event(audited, "stuck-last.png", version))
        gate.wait_entered()
        expire_lock(audited, pk)
        report = run_audit(audited, third).output
        gate.release.set()
        woke = audited.wait(third)
    assert report["stuck_released"] == 1 and report["stuck_dead_lettered"] == 1
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    (message,) = dlq_messages(audited)
    attrs = attributes(message)
    assert attrs["ERROR_CODE"] == "LockExpired"
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert attrs["IDEMPOTENCY_KEY"] == pk and attrs["EXECUTION_ARN"] == third
    assert json.loads(message["Body"])["event"]["detail"]["object"]["key"] == "stuck-last.png"
    assert woke.outcome == "LockLost"


def test_a_stuck_sqs_message_is_resubmitted_from_the_event_its_row_keeps() -> None:
    with audit_engine(SqsSource="create", IdempotencyKeyPath="orderId") as engine:
        gate = Gate()
        hangs_first_time = hang_first_call(engine, gate)

        sqs = engine.client("sqs")
        sqs.send_message(
            QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps({"orderId": "o-1", "n": 1})
        )
        with engine.override_function(FUNCTION, hangs_first_time):
            (stuck,) = engine.pump_pipes()
            gate.wait_entered()
            expire_lock(engine, "sqs:o-1")
            report = run_audit(engine, stuck).output
            gate.release.set()
            engine.wait(stuck)
        assert report["stuck_released"] == 1 and report["resubmit_errors"] == 0
        row = ledger_row(engine, "sqs:o-1")
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
        (record,) = json.loads(row["original_event"])
        assert json.loads(record["body"]) == {"orderId": "o-1", "n": 1}
        assert output_effects(engine) == 1


def history_size(engine: LocalEngine, arn: str) -> int:
    sfn = engine.client("stepfunctions")
    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=arn)
    return sum(len(page["events"]) for page in pages)


def test_one_audit_prefix_is_walked_alone(audited: LocalEngine) -> None:
    upload(audited, "uploads/in.png")
    upload(audited, "elsewhere/out.png")
    result = audited.execute(AUDIT, {"prefix": "uploads/"})
    audited.wait_for_running(MACHINE)
    report = result.output
    assert report["prefix"] == "uploads/" and report["source"] == "listing"
    assert report["scanned"] == 1 and report["missing_resubmitted"] == 1


def test_a_failed_sqs_message_is_retried_by_the_audit() -> None:
    # The pipe deleted the message when it started the execution: nothing redelivers it.
    with audit_engine(SqsSource="create", IdempotencyKeyPath="orderId") as engine:
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps({"orderId": "o-7"})
        )
        with engine.override_function(FUNCTION, always(TransientError)):
            (arn,) = engine.pump_pipes()
            assert engine.wait(arn).outcome == "Failed"
        row = ledger_row(engine, "sqs:o-7")
        assert row is not None and row["status"] == "FAILED"
        report = run_audit(engine).output
        assert report["failed_resubmitted"] == 1 and report["scanned"] == 0
        row = ledger_row(engine, "sqs:o-7")
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
        assert output_effects(engine) == 1


def test_a_throttled_resubmission_after_a_release_is_not_lost(audited: LocalEngine) -> None:
    """The sweep released a stuck row, then StartExecution failed: the page is retried."""
    version = upload(audited, "throttled.png")
    pk = idempotency_key(audited, "throttled.png", version)
    gate = Gate()
    hangs_first_time = hang_first_call(audited, gate)

    audit_name = audited.function_name("AuditFunction")
    real_audit = audited.runtime.load(audited.runtime.functions[audit_name])
    throttled = {"left": 1}

    def audit_with_one_throttle(event: dict[str, Any], context: Any) -> Any:
        import service.dal.workflow as workflow

        original_start = workflow.Processor.start

        def start(self: Any, name: str, execution_input: Any, claims: Any = ()) -> bool:
            if event.get("action") == "locks" and throttled["left"]:
                throttled["left"] -= 1
                raise TransientError("injected: StartExecution throttled")
            return original_start(self, name, execution_input, claims)

        workflow.Processor.start = start  # type: ignore[method-assign]
        try:
            return real_audit(event, context)
        finally:
            workflow.Processor.start = original_start  # type: ignore[method-assign]

    with audited.override_function(FUNCTION, hangs_first_time):
        stuck = audited.start_execution(MACHINE, s3_event(audited, "throttled.png", version))
        gate.wait_entered()
        expire_lock(audited, pk)
        with audited.override_function("AuditFunction", audit_with_one_throttle):
            result = run_audit(audited, stuck)
        gate.release.set()
        audited.wait(stuck)
    report = result.output
    assert throttled["left"] == 0
    # The first try released the row and failed to start; the retry found it FAILED.
    assert result.states_entered.count("SweepLocks") == 1
    assert report["failed_resubmitted"] == 1
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
    assert output_effects(audited) == 1


def test_a_batch_reads_the_versions_of_its_own_keys_only(audited: LocalEngine) -> None:
    from service.dal.bucket import Bucket

    s3 = audited.client("s3")
    name = audited.ref("IngestBucket")
    # Keys that sort just before, inside and just after the batch's range
    # "img/1.png".."img/3.png", and two versions of one key inside it.
    for key in ("img/1.pn", "img/1.pna", "img/1.png", "img/2.png", "img/3.png", "img/3.pngx"):
        s3.put_object(Bucket=name, Key=key, Body=b"x")
    s3.put_object(Bucket=name, Key="img/2.png", Body=b"y")
    found = Bucket(name, s3).versions_between("img/1.png", "img/3.png")
    assert sorted(o.key for o in found) == ["img/1.png", "img/2.png", "img/2.png", "img/3.png"]
    assert sum(o.latest for o in found) == 3  # one current version per key


def test_an_inventory_report_is_read_instead_of_the_listing() -> None:
    # (as shipped: AuditInventory auto is a daily inventory of the stack's own bucket)
    with audit_engine() as engine:
        s3 = engine.client("s3")
        bucket = engine.ref("IngestBucket")
        # GIVEN a processed upload, two whose events were lost (one with a key that
        # an inventory URL-encodes), and a lost upload whose key was deleted since
        done = upload(engine, "in/done.png")
        engine.execute(MACHINE, s3_event(engine, "in/done.png", done))
        lost = upload(engine, "in/lost one é.png")
        also_lost = upload(engine, "in/lost+two.png")
        deleted = upload(engine, "in/deleted.png")
        s3.delete_object(Bucket=bucket, Key="in/deleted.png")
        # AND the day's inventory report, then an upload it does not hold
        engine.deliver_inventory()
        upload(engine, "in/after-the-report.png")
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN it read the report: every version in it (the delete marker is no upload),
        # the deleted key's lost upload included, which no listing shows
        assert report["source"] == "inventory"
        assert report["source_reason"].startswith("the inventory report of ")
        assert report["scanned"] == 4 and report["ok"] == 1
        assert sorted(report["resubmitted_sample"]) == sorted(
            idempotency_key(engine, key, version)
            for key, version in (
                ("in/lost one é.png", lost),
                ("in/lost+two.png", also_lost),
                ("in/deleted.png", deleted),
            )
        )
        # (4 scanned: the upload after the report waits for the next one.)
        assert output_effects(engine) == 4


def test_without_a_fresh_inventory_report_the_audit_lists_the_bucket() -> None:
    from datetime import UTC, datetime, timedelta

    # GIVEN a fresh stack as shipped (AuditInventory auto): S3's first report is a day or
    # two away
    with audit_engine() as engine:
        upload(engine, "a.png")
        first = engine.execute(AUDIT, {}).output
        engine.wait_for_running(MACHINE)
        assert first["source"] == "listing"
        assert first["source_reason"] == "no complete inventory report yet"
        engine.deliver_inventory(when=datetime.now(UTC) - timedelta(days=3))
        second = run_audit(engine).output
        assert second["source"] == "listing"
        assert "too old" in second["source_reason"]
        assert first["missing_resubmitted"] == 1 and second["ok"] == 1


@pytest.mark.parametrize(
    "change",
    [
        "the grant removed",
        "the grant for another source bucket",
    ],
)
def test_s3_delivers_no_report_the_output_buckets_policy_does_not_let_it_write(
    change: str,
) -> None:
    # S3 writes an inventory report only where the destination's bucket policy lets the
    # service principal s3.amazonaws.com PutObject for that source bucket (S3 API
    # reference, PutBucketInventoryConfiguration: "You must create a bucket policy on the
    # destination bucket"; S3 user guide, "Configuring Amazon S3 Inventory").
    with audit_engine() as engine:
        policy = engine.stack.template["Resources"]["OutputBucketPolicy"]["Properties"]
        statements = policy["PolicyDocument"]["Statement"]
        (grant,) = [s for s in statements if "Fn::If" in s]
        delivery = grant["Fn::If"][1]
        assert delivery["Sid"] == "S3InventoryDelivery"
        # GIVEN the stack's output bucket policy changed
        if change == "the grant removed":
            statements.remove(grant)
        else:
            delivery["Condition"]["ArnLike"]["aws:SourceArn"] = "arn:aws:s3:::someone-else"
        # THEN no report arrives, and the engine says why
        with pytest.raises(EngineError, match="bucket policy"):
            engine.deliver_inventory()


def test_a_bucket_with_several_inventories_delivers_the_one_named() -> None:
    # S3 delivers each enabled configuration of a bucket (up to 1,000 of them: S3 API
    # reference, PutBucketInventoryConfiguration); the engine delivers one when asked.
    with audit_engine() as engine:
        s3, bucket = engine.client("s3"), engine.ref("IngestBucket")
        (audit,) = s3.list_bucket_inventory_configurations(Bucket=bucket)[
            "InventoryConfigurationList"
        ]
        # GIVEN another inventory of the bucket, listed before the audit's
        other = {**audit, "Id": "analytics", "IncludedObjectVersions": "Current"}
        s3.delete_bucket_inventory_configuration(Bucket=bucket, Id=audit["Id"])
        for configuration in (other, audit):
            s3.put_bucket_inventory_configuration(
                Bucket=bucket, Id=configuration["Id"], InventoryConfiguration=configuration
            )
        # THEN asked for a report without naming one, the engine says which there are
        with pytest.raises(EngineError, match="analytics, onceflow-audit"):
            engine.deliver_inventory()
        # AND delivers the one named, where S3 delivers it
        manifest = engine.deliver_inventory(configuration_id=audit["Id"])
        assert manifest.startswith(f"inventory/{bucket}/onceflow-audit/")


def test_with_inventory_none_the_audit_lists_and_says_why() -> None:
    with audit_engine(AuditInventory="none") as engine:
        upload(engine, "a.png")
        report = run_audit(engine).output
        assert report["source"] == "listing"
        assert report["source_reason"] == "AuditInventory is off"
        assert report["missing_resubmitted"] == 1
        # AND the bucket has no inventory configuration for S3 to deliver
        with pytest.raises(EngineError, match="no S3 Inventory configured"):
            engine.deliver_inventory()
