"""The audit of a bucket of more than two batches: its ItemBatcher's MaxItemsPerBatch is
1000 (statemachines/src/audit.asl.yaml), so three batches need more than 2,000 objects.

Apart from tests/workflow/test_audit.py (same concern, the audit state machine on the
local engine) only because these three tests put 2,500 objects each: in a file of their
own, pytest-xdist's --dist loadfile can run them beside test_audit.py's other tests.
"""

from __future__ import annotations

import json
import time
from typing import Any

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    PermanentError,
    attributes,
    audit_engine,
    dlq_messages,
    ledger_row,
    run_audit,
    with_constants,
)
from tests.workflow.test_audit import always, history_size


def _bucket_with_rows(engine: LocalEngine, count: int, lost_every: int = 0) -> list[str]:
    """``count`` objects, each with a PROCESSED row except every ``lost_every``-th
    (its event lost). Returns the lost objects' idempotency keys."""
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    table = engine.ref("LedgerTable")
    dynamodb = engine.client("dynamodb")
    missing: list[str] = []
    rows = []
    for n in range(count):
        key = f"{'ab'[n % 2]}/{n:05d}.png"
        version = s3.put_object(Bucket=bucket, Key=key, Body=b"x")["VersionId"]
        pk = f"s3://{bucket}/{key}#{version}"
        if lost_every and n % lost_every == 7:
            missing.append(pk)
            continue
        item = {
            "pk": {"S": pk},
            "status": {"S": "PROCESSED"},
            "attempts": {"N": "1"},
            "expires_at": {"N": "99999999999"},
        }
        rows.append({"PutRequest": {"Item": item}})
    for start in range(0, len(rows), 25):
        dynamodb.batch_write_item(RequestItems={table: rows[start : start + 25]})
    return missing


def test_a_2500_key_bucket_is_audited_in_batches_with_the_history_of_a_small_one() -> None:
    with audit_engine() as engine:
        with engine.override_function(FUNCTION, always(PermanentError)):
            small = run_audit(engine)
        missing = _bucket_with_rows(engine, 2500, lost_every=500)
        batches: list[int] = []
        with (
            engine.override_function("AuditFunction", recording_batches(engine, batches)),
            engine.override_function(FUNCTION, always(PermanentError)),
        ):
            large = run_audit(engine)
        report = large.output
        assert report["scanned"] == 2500 and report["ok"] == 2495
        assert report["missing_resubmitted"] == 5
        assert sorted(report["resubmitted_sample"]) == sorted(missing)
        # Three batches of at most 1000 (three EXPRESS children), each one invocation.
        assert sorted(batches) == [500, 1000, 1000] and report["batches"] == 3
        # The audit's own history does not grow with the bucket.
        assert history_size(engine, large.arn) == history_size(engine, small.arn)
        # The five resubmissions ran (the injected processor dead-letters them): one DLQ
        # message each, named by its key (a message of another test's execution, left
        # running when its engine stopped, was once counted here: test_processor.py,
        # test_an_execution_running_when_its_engine_stops_ends_there_not_in_the_next_engine).
        dead = sorted(attributes(m).get("IDEMPOTENCY_KEY", "(none)") for m in dlq_messages(engine))
        assert dead == sorted(missing)


def recording_batches(engine: LocalEngine, sizes: list[int]) -> Any:
    """The real audit function, recording the size of every batch it is given."""
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])

    def handler(event: dict[str, Any], context: Any) -> Any:
        if event.get("action") == "batch":
            sizes.append(len(event["items"]))
        return real(event, context)

    return handler


def failing_batches(engine: LocalEngine, poison: set[str]) -> Any:
    """The real audit function, except that a batch holding a poison key raises."""
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])

    def handler(event: dict[str, Any], context: Any) -> Any:
        keys = {item.get("Key") for item in event.get("items") or []}
        if event.get("action") == "batch" and keys & poison:
            raise RuntimeError("injected: this batch cannot be audited")
        return real(event, context)

    return handler


def test_a_failed_batch_is_tolerated_reported_and_the_sweep_still_runs() -> None:
    with with_constants(audit_engine(), AuditToleratedFailurePercentage="50") as engine:
        # Lost: a/00340, a/01006, a/01672 (in the first batch, a/00000..a/01998),
        # a/02338 and b/00007, b/00673, b/01339, b/02005 (in the others).
        missing = _bucket_with_rows(engine, 2500, lost_every=333)
        stuck = "sqs:stuck-1"
        _stuck_row(engine, stuck)
        with (
            engine.override_function("AuditFunction", failing_batches(engine, {"a/00000.png"})),
            engine.override_function(FUNCTION, always(PermanentError)),
        ):
            result = run_audit(engine)
        report = result.output
        # Three batches (1000, 1000, 500); the one holding a/00000.png failed.
        assert report["failed_batches"] == 1 and report["unaudited_objects"] == 1000
        assert report["scanned"] == 1500
        assert len(missing) == 8 and report["missing_resubmitted"] == 5
        unaudited = {pk for pk in missing if pk.split("/", 3)[3] < "a/02000"}
        assert set(report["resubmitted_sample"]) == set(missing) - unaudited | {stuck}
        assert report["stuck_released"] == 1
        # The failed batch is in the Map Run's exported FAILED results, with its error.
        s3 = engine.client("s3")
        runs = s3.list_objects_v2(
            Bucket=engine.ref("OutputBucket"), Prefix=f"reports/audit-runs/{result.name}/"
        )
        names = sorted(o["Key"].rsplit("/", 1)[-1] for o in runs.get("Contents", []))
        assert "manifest.json" in names and any(n.startswith("FAILED") for n in names)


def test_too_many_failed_batches_fail_the_run_after_the_sweep_and_the_report() -> None:
    with audit_engine() as engine:  # AuditToleratedFailurePercentage, a constant: 10
        _bucket_with_rows(engine, 2500)
        stuck = "sqs:stuck-2"
        _stuck_row(engine, stuck)
        with (
            engine.override_function("AuditFunction", failing_batches(engine, {"a/00000.png"})),
            engine.override_function(FUNCTION, always(PermanentError)),
        ):
            result = engine.execute(AUDIT, {})
        engine.wait_for_running(MACHINE)
        assert result.status == "FAILED"
        assert result.error == "AuditWalkFailed"
        assert result.cause is not None
        assert "States.ExceedToleratedFailureThreshold" in result.cause
        assert result.states_entered[-4:] == [
            "MoreLocks",
            "Report",
            "ObjectsAudited",
            "ObjectsNotAudited",
        ]
        # The sweep ran: the stuck lock was released and its work resubmitted.
        row = ledger_row(engine, stuck)
        assert row is not None and row["status"] != "PROCESSING"
        report_key = f"reports/audit/{time.strftime('%Y-%m-%d', time.gmtime())}.json"
        stored = json.loads(
            engine.client("s3")
            .get_object(Bucket=engine.ref("OutputBucket"), Key=report_key)["Body"]
            .read()
        )
        assert stored["error"].startswith("States.ExceedToleratedFailureThreshold")
        assert stored["stuck_released"] == 1
        # What the batches that ran did is in the report: the Map Run's exported results.
        assert stored["batches"] == 3 and stored["failed_batches"] == 1
        assert stored["scanned"] == 1500 and stored["ok"] == 1500
        assert stored["unaudited_objects"] == 1000


def _stuck_row(engine: LocalEngine, pk: str) -> None:
    """A PROCESSING row of an SQS message whose lock expired an hour ago, with a work item
    the audit can resubmit from (its execution input)."""
    arn = engine.start_execution(
        MACHINE, [{"messageId": pk, "body": "{}", "attributes": {}}], name_prefix="stuck"
    )
    engine.wait_for_running(MACHINE)
    engine.client("dynamodb").put_item(
        TableName=engine.ref("LedgerTable"),
        Item={
            "pk": {"S": pk},
            "status": {"S": "PROCESSING"},
            "open_status": {"S": "PROCESSING#0"},
            "lock_owner": {"S": arn},
            "lock_expires_at": {"N": str(int(time.time()) - 3600)},
            "attempts": {"N": "1"},
            "expires_at": {"N": "99999999999"},
        },
    )
