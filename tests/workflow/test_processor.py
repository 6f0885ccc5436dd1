"""Every path of the processor state machine on the local engine.

Each test asserts the ledger row, the DLQ, the outputs (S3's request log) and
the execution history.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote_plus

from onceflow.local.engine import LocalEngine
from service.logic.open_work import open_status
from tests.helpers import (
    FUNCTION,
    MACHINE,
    Gate,
    PermanentError,
    TransientError,
    attributes,
    dlq_messages,
    idempotency_key,
    invocations,
    ledger_row,
    ledger_rows,
    output_effects,
    s3_event,
    upload,
)

HAPPY_PATH = ["Claim", "Process", "MarkComplete"]
DUPLICATE_PATH = ["Claim", "Reclaim", "Duplicate"]


def always(error: type[Exception]) -> Any:
    def handler(event: dict[str, Any], context: Any) -> Any:
        raise error(f"injected {error.__name__} for {event['workItem']['key']}")

    return handler


def test_first_delivery_is_processed_once(engine: LocalEngine) -> None:
    # GIVEN an uploaded image and its Object Created event
    version = upload(engine, "uploads/a.png")
    # WHEN the event is delivered
    result = engine.execute(MACHINE, s3_event(engine, "uploads/a.png", version))
    # THEN the happy path ran, one output was written and the row is PROCESSED
    assert result.status == "SUCCEEDED"
    assert result.states_entered == HAPPY_PATH
    assert result.output["status"] == "PROCESSED"
    assert result.output["result"]["created"] is True
    row = ledger_row(engine, idempotency_key(engine, "uploads/a.png", version))
    assert row is not None
    assert row["status"] == "PROCESSED"
    assert row["attempts"] == "1"
    assert row["lock_owner"] == result.arn
    assert "open_status" not in row  # left the open-work index
    assert int(row["expires_at"]) - time.time() > 29 * 86400
    assert json.loads(row["result"])["output"] == result.output["result"]["output"]
    assert output_effects(engine) == 1
    assert dlq_messages(engine) == []


def test_duplicate_of_processed_key_is_discarded_in_four_states_without_lambda(
    engine: LocalEngine,
) -> None:
    version = upload(engine, "uploads/b.png")
    event = s3_event(engine, "uploads/b.png", version)
    first = engine.execute(MACHINE, event)
    before = invocations(engine)
    # WHEN the same event arrives again
    second = engine.execute(MACHINE, event)
    # THEN it is a duplicate: at most 4 states, no Lambda, still one effect
    assert second.status == "SUCCEEDED"
    assert second.states_entered == DUPLICATE_PATH
    assert second.output == {
        "status": "DUPLICATE",
        "idempotencyKey": first.output["idempotencyKey"],
    }
    assert invocations(engine) == before
    assert not [e for e in second.event_types() if e.startswith("Lambda")]
    assert output_effects(engine) == 1
    row = ledger_row(engine, first.output["idempotencyKey"])
    assert row is not None and row["lock_owner"] == first.arn and row["attempts"] == "1"


def test_duplicate_while_lock_is_live_is_discarded(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/c.png")
    event = s3_event(engine, "uploads/c.png", version)
    gate = Gate()
    real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])

    def slow(event: dict[str, Any], context: Any) -> Any:
        gate.hold()
        return real(event, context)

    with engine.override_function(FUNCTION, slow):
        first_arn = engine.start_execution(MACHINE, event)
        gate.wait_entered()
        # WHEN a duplicate arrives while the first holds a live lock
        second = engine.execute(MACHINE, event)
        row_during = ledger_row(engine, idempotency_key(engine, "uploads/c.png", version))
        gate.release.set()
        first = engine.wait(first_arn)
    # THEN the duplicate is discarded and the first completes
    assert second.states_entered == DUPLICATE_PATH
    assert row_during is not None and row_during["status"] == "PROCESSING"
    assert row_during["lock_owner"] == first_arn
    assert first.states_entered == HAPPY_PATH
    assert output_effects(engine) == 1


def test_takeover_after_lock_expiry_fences_the_stale_owner(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/d.png")
    event = s3_event(engine, "uploads/d.png", version)
    pk = idempotency_key(engine, "uploads/d.png", version)
    gate = Gate()
    calls: list[str] = []
    real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])

    def stalls_first_time(event: dict[str, Any], context: Any) -> Any:
        calls.append(event["lockToken"])
        if len(calls) == 1:
            gate.hold()
        return real(event, context)

    with engine.override_function(FUNCTION, stalls_first_time):
        stale_arn = engine.start_execution(MACHINE, event)
        gate.wait_entered()
        # WHEN the first worker's lock expires while it is still running ...
        engine.client("dynamodb").update_item(
            TableName=engine.ref("LedgerTable"),
            Key={"pk": {"S": pk}},
            UpdateExpression="SET lock_expires_at = :past",
            ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 1)}},
        )
        # ... a redelivery takes the work over and completes it
        takeover = engine.execute(MACHINE, event)
        gate.release.set()
        stale = engine.wait(stale_arn)
    # THEN the new owner completed, and the stale owner's MarkComplete was fenced off
    assert takeover.status == "SUCCEEDED"
    assert takeover.states_entered == [
        "Claim",
        "Reclaim",
        "Process",
        "MarkComplete",
    ]
    assert stale.status == "FAILED"
    assert stale.error == "LockLost"
    assert stale.states_entered[-2:] == ["MarkComplete", "LockLost"]
    row = ledger_row(engine, pk)
    assert row is not None
    assert row["status"] == "PROCESSED"
    assert row["lock_owner"] == takeover.arn
    assert row["attempts"] == "2"
    # The stale worker's own conditional S3 write found the output there: one effect.
    assert output_effects(engine) == 1
    assert stale.output is None


def test_transient_failure_then_success_is_retried_with_backoff(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/e.png")
    real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])
    failures = [TransientError("injected throttling")]

    def flaky(event: dict[str, Any], context: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(event, context)

    with engine.override_function(FUNCTION, flaky):
        result = engine.execute(MACHINE, s3_event(engine, "uploads/e.png", version))
    assert result.status == "SUCCEEDED"
    assert result.states_entered == HAPPY_PATH
    assert (
        result.event_types().count("TaskFailed")
        + result.event_types().count("LambdaFunctionFailed")
        == 1
    )
    assert invocations(engine) == 2
    assert engine.state.clock.slept, "the retry asked for a backoff"
    assert 0 <= engine.state.clock.slept[0] <= 2  # full jitter below IntervalSeconds
    row = ledger_row(engine, result.output["idempotencyKey"])
    assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "1"
    assert output_effects(engine) == 1


def test_retries_exhausted_leave_a_failed_row_that_the_next_delivery_reclaims(
    engine: LocalEngine,
) -> None:
    version = upload(engine, "uploads/f.png")
    event = s3_event(engine, "uploads/f.png", version)
    pk = idempotency_key(engine, "uploads/f.png", version)
    with engine.override_function(FUNCTION, always(TransientError)):
        failed = engine.execute(MACHINE, event)
    # THEN: FAILED, attempts counted, still open for a retry, nothing dead-lettered
    assert failed.status == "FAILED"
    assert failed.error == "TransientError"
    assert failed.states_entered == [
        "Claim",
        "Process",
        "MarkFailed",
        "ShouldDeadLetter",
        "Failed",
    ]
    assert invocations(engine) == 4  # 1 + RetryMaxAttempts
    row = ledger_row(engine, pk)
    assert row is not None
    assert row["status"] == "FAILED"
    assert row["open_status"] == open_status("FAILED", row["pk"])  # a shard of the index
    assert row["attempts"] == "1"
    assert row["last_error"].startswith("TransientError: injected TransientError")
    assert "dead_lettered_at" not in row
    assert dlq_messages(engine) == []
    # WHEN the event is delivered again with the processor healthy
    again = engine.execute(MACHINE, event)
    assert again.status == "SUCCEEDED"
    assert again.states_entered == [
        "Claim",
        "Reclaim",
        "Process",
        "MarkComplete",
    ]
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
    assert row["lock_owner"] == again.arn
    assert output_effects(engine) == 1


def test_max_attempts_dead_letters_once_and_the_row_is_never_reclaimed(
    engine: LocalEngine,
) -> None:
    version = upload(engine, "uploads/g.png")
    event = s3_event(engine, "uploads/g.png", version)
    pk = idempotency_key(engine, "uploads/g.png", version)
    with engine.override_function(FUNCTION, always(TransientError)):
        results = [engine.execute(MACHINE, event) for _ in range(3)]
        assert [r.outcome for r in results] == ["Failed", "Failed", "DeadLettered"]
        last = results[-1]
        assert last.error == "TransientError"
        row = ledger_row(engine, pk)
        assert row is not None
        assert row["status"] == "FAILED" and row["attempts"] == "3"
        assert "dead_lettered_at" in row and "open_status" not in row
        messages = dlq_messages(engine)
        assert len(messages) == 1
        attrs = attributes(messages[0])
        assert attrs == {
            "ERROR_CODE": "TransientError",
            "ERROR_MESSAGE": "TransientError: injected TransientError for uploads/g.png",
            "EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts",
            "RETRY_ATTEMPTS": "3",
            "STATE_MACHINE_ARN": engine.ref(MACHINE),
            "EXECUTION_ARN": last.arn,
            "IDEMPOTENCY_KEY": pk,
        }
        body = json.loads(messages[0]["Body"])
        assert body["event"] == event
        assert body["workItem"]["idempotencyKey"] == pk
        # WHEN the event arrives a fourth time
        before = invocations(engine)
        fourth = engine.execute(MACHINE, event)
    # THEN it is a duplicate: no Lambda, no second DLQ message
    assert fourth.states_entered == DUPLICATE_PATH
    assert invocations(engine) == before
    assert len(dlq_messages(engine)) == 1


def test_permanent_error_dead_letters_at_once_and_a_duplicate_is_discarded(
    engine: LocalEngine,
) -> None:
    # GIVEN a file that is not an image: the real processor raises PermanentError
    version = upload(engine, "uploads/h.jpg", b"definitely not a jpeg")
    event = s3_event(engine, "uploads/h.jpg", version)
    pk = idempotency_key(engine, "uploads/h.jpg", version)
    result = engine.execute(MACHINE, event)
    assert result.status == "FAILED"
    assert result.error == "PermanentError"
    assert result.states_entered == [
        "Claim",
        "Process",
        "MarkFailed",
        "ShouldDeadLetter",
        "SendToDLQ",
        "DeadLetterReason",
        "MarkDeadLettered",
        "DeadLettered",
    ]
    assert invocations(engine) == 1  # no retries for a permanent error
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    assert row["last_error"].startswith("PermanentError: not a readable image")
    messages = dlq_messages(engine)
    assert len(messages) == 1
    attrs = attributes(messages[0])
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    assert attrs["RETRY_ATTEMPTS"] == "1"
    # WHEN the poison event is delivered again
    duplicate = engine.execute(MACHINE, event)
    assert duplicate.states_entered == DUPLICATE_PATH
    assert invocations(engine) == 1
    assert len(dlq_messages(engine)) == 1
    assert output_effects(engine) == 0


def test_injected_permanent_error_is_not_retried(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/i.png")
    with engine.override_function(FUNCTION, always(PermanentError)):
        result = engine.execute(MACHINE, s3_event(engine, "uploads/i.png", version))
    assert result.outcome == "DeadLettered"
    assert invocations(engine) == 1
    assert attributes(dlq_messages(engine)[0])["ERROR_CODE"] == "PermanentError"


def test_row_past_its_ttl_counts_as_absent(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/j.png")
    pk = idempotency_key(engine, "uploads/j.png", version)
    # GIVEN a PROCESSED row whose TTL has passed but which DynamoDB has not deleted yet
    engine.client("dynamodb").put_item(
        TableName=engine.ref("LedgerTable"),
        Item={
            "pk": {"S": pk},
            "status": {"S": "PROCESSED"},
            "attempts": {"N": "1"},
            "lock_owner": {"S": "arn:old"},
            "expires_at": {"N": str(int(time.time()) - 60)},
        },
    )
    result = engine.execute(MACHINE, s3_event(engine, "uploads/j.png", version))
    assert result.states_entered == HAPPY_PATH
    row = ledger_row(engine, pk)
    assert row is not None
    assert row["lock_owner"] == result.arn and row["attempts"] == "1"
    assert int(row["expires_at"]) > time.time()


def test_twenty_concurrent_deliveries_make_one_effect(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/k.png")
    event = s3_event(engine, "uploads/k.png", version)
    start = threading.Barrier(20)

    def deliver(_: int) -> Any:
        start.wait(timeout=30)
        return engine.execute(MACHINE, event)

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(deliver, range(20)))
    outcomes = sorted(r.outcome for r in results)
    assert outcomes == ["Duplicate"] * 19 + ["Processed"]
    assert invocations(engine) == 1
    assert output_effects(engine) == 1
    assert len(ledger_rows(engine)) == 1


def test_direct_work_item_is_accepted(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/l.png")
    item = {"bucket": engine.ref("IngestBucket"), "key": "uploads/l.png", "versionId": version}
    result = engine.execute(MACHINE, {"workItem": {**item, "source": "audit"}})
    assert result.states_entered == HAPPY_PATH
    row = ledger_row(engine, idempotency_key(engine, "uploads/l.png", version))
    assert row is not None and row["source"] == "audit"


def test_keys_with_quotes_backslashes_and_unicode_survive_jsonata(engine: LocalEngine) -> None:
    key = 'uploads/we"ird\\ näme + 100%.png'
    version = upload(engine, key)
    # S3 events carry the key URL-encoded; the ledger and the processor see it decoded.
    result = engine.execute(MACHINE, s3_event(engine, quote_plus(key, safe="/"), version))
    assert result.states_entered == HAPPY_PATH
    assert result.output["idempotencyKey"] == idempotency_key(engine, key, version)
    row = ledger_row(engine, idempotency_key(engine, key, version))
    assert row is not None and row["object_key"] == key


def test_a_null_version_id_keys_on_the_sequencer(engine: LocalEngine) -> None:
    """Versioning suspended: every upload is version "null"; the sequencer tells them apart."""
    keys = []
    for sequencer in ("0055AED6DCD90281E5", "0055AED6DCD90281E6"):
        upload(engine, "suspended.png")
        event = s3_event(engine, "suspended.png", "null")
        event["detail"]["object"]["sequencer"] = sequencer
        # Without a version id the processor reads only the content the event names.
        etag = engine.client("s3").head_object(
            Bucket=engine.ref("IngestBucket"), Key="suspended.png"
        )
        event["detail"]["object"]["etag"] = etag["ETag"].strip('"')
        result = engine.execute(MACHINE, event)
        assert result.states_entered == HAPPY_PATH
        keys.append(result.output["idempotencyKey"])
    bucket = engine.ref("IngestBucket")
    assert keys == [
        f"s3://{bucket}/suspended.png#0055AED6DCD90281E5",
        f"s3://{bucket}/suspended.png#0055AED6DCD90281E6",
    ]
    assert output_effects(engine) == 2


def test_the_engine_freezes_what_it_starts_with_and_unfreezes_it_at_stop(thawed_heap: None) -> None:
    import gc
    import io
    import weakref

    assert gc.get_freeze_count() == 0  # no engine is running in this test
    with LocalEngine(function_log=io.StringIO()) as engine:
        assert gc.get_freeze_count() > 100_000  # moto's and botocore's models, the clients

        class Node:
            pass

        cycle = Node()
        cycle.self = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert alive() is None  # what the engine's work leaves behind is still collected
        key = "frozen/heap.png"
        result = engine.execute(MACHINE, s3_event(engine, key, upload(engine, key)))
        assert result.states_entered == HAPPY_PATH
        with LocalEngine(function_log=io.StringIO(), stack_name="inner"):  # inside another
            assert gc.get_freeze_count() > 100_000
        assert gc.get_freeze_count() > 100_000  # the inner one's stop left the outer's heap
    assert gc.get_freeze_count() == 0


def test_an_execution_running_when_its_engine_stops_ends_there_not_in_the_next_engine() -> None:
    """Engines of one stack name name their resources alike (the DLQ's URL), and a running
    execution's calls go to the running engine whose machine has its name: one left running
    when its engine stopped went on in the next engine. Under `make test-without-speedups`
    the last test of this file left `{"events": true}` running, and its InvalidEvent DLQ
    message was counted by the next file's first test on that worker
    (tests/workflow/test_audit_batches.py: 6 DLQ messages for 5 resubmissions)."""
    import io

    from tests.workflow.test_failure_paths import sqs_error

    entered, release, second_runs = threading.Event(), threading.Event(), threading.Event()

    def held_dlq_send(service: str, operation: str, body: str) -> Any:
        # the InvalidEvent's DLQ send, held until the test lets it go, then throttled
        if (service, operation) != ("sqs", "SendMessage"):
            return None
        entered.set()
        release.wait(30)
        return sqs_error("RequestThrottled", "injected: held, then throttled")

    def releases() -> None:  # once the next engine runs (or its stop waited 2 s for it)
        second_runs.wait(2.0)
        release.set()

    # GIVEN an execution (an event of no known shape: InvalidEvent) held in its DLQ send,
    # whose retry would send again
    first = LocalEngine(function_log=io.StringIO())
    first.start()
    try:
        first.state.faults.append(held_dlq_send)
        before = set(threading.enumerate())
        first.start_execution(MACHINE, {"events": True}, name_prefix="left-running")
        assert entered.wait(30)
        workers = set(threading.enumerate()) - before
        threading.Thread(target=releases, daemon=True).start()
    finally:
        # WHEN its engine stops while it runs, and another engine of the same stack starts
        first.stop()
    with LocalEngine(function_log=io.StringIO()) as second:
        second_runs.set()
        for worker in workers:
            worker.join(timeout=30)
        assert not any(worker.is_alive() for worker in workers)
        # THEN nothing of it reached the second engine: no DLQ message, no ledger row
        assert dlq_messages(second) == []
        assert second.client("dynamodb").scan(TableName=second.ref("LedgerTable"))["Items"] == []


def test_the_engine_starts_its_executions_and_refusals_come_as_from_aws(
    engine: LocalEngine,
) -> None:
    import pytest
    from botocore.exceptions import ClientError

    sfn = engine.client("stepfunctions")
    key = "direct/start.png"
    result = engine.execute(MACHINE, s3_event(engine, key, upload(engine, key)))
    assert result.states_entered == HAPPY_PATH
    described = sfn.describe_execution(executionArn=result.arn)
    assert json.loads(described["input"])["detail"]["object"]["key"] == key

    arn = engine.start_execution(MACHINE, {"named": True}, name="a-callers-name")
    assert arn.endswith(":a-callers-name")
    missing = "arn:aws:states:us-east-1:123456789012:stateMachine:no-such-machine"
    with pytest.raises(ClientError, match="StateMachineDoesNotExist"):
        engine.start_execution(missing, {})
    machine_arn = engine.state_machine_arn(MACHINE)
    before = len(sfn.list_executions(stateMachineArn=machine_arn)["executions"])
    with pytest.raises(ClientError, match="262144"):
        engine.start_execution(MACHINE, {"blob": "x" * 262_144})
    assert len(sfn.list_executions(stateMachineArn=machine_arn)["executions"]) == before
    arn = engine.start_execution(MACHINE, {"events": True}, name_prefix="events")
    assert ":events-" in arn
