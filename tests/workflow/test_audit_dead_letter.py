"""The audit dead-letters work the processor could not: FAILED rows at MaxAttempts that
have no DLQ message (their SendMessage failed past its retries: DeadLetterFailed).

The DLQ's refusal is injected for real (SQS answering SendMessage with an error
through the engine's state.faults); each test asserts the report, the row, the DLQ
message and what redrive can do with it afterwards.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from onceflow import ops
from onceflow.local import patches
from onceflow.local.engine import LocalEngine
from onceflow.local.target import LocalTarget
from tests.helpers import (
    FUNCTION,
    MACHINE,
    PermanentError,
    TransientError,
    attributes,
    audit_engine,
    dlq_messages,
    expire_lock,
    idempotency_key,
    ledger_row,
    load_event,
    output_effects,
    run_audit,
    s3_event,
    upload,
)
from tests.workflow.test_failure_paths import failing

# What DynamoDB answers a role without the permission (not retried by the SDK).
DENIED = patches.dynamodb_error(
    "AccessDeniedException",
    "User: arn:aws:sts::123456789012:assumed-role/audit is not authorized to perform: "
    "dynamodb:UpdateItem",
)


def _dlq_refuses(service: str, operation: str, body: str) -> Any:
    """SQS refusing SendMessage as it does when the queue's KMS key refuses the sender."""
    if service != "sqs" or operation != "SendMessage":
        return None
    headers = {
        "x-amzn-RequestId": str(uuid.uuid4()),
        "x-amzn-query-error": "KMS.AccessDeniedException;Sender",
        "Content-Type": "application/x-amz-json-1.0",
    }
    error = {"__type": "com.amazonaws.sqs#KmsAccessDenied", "message": "injected: KMS refuses"}
    return 400, headers, json.dumps(error)


@contextmanager
def dlq_refusing(engine: LocalEngine) -> Iterator[None]:
    engine.state.faults.append(_dlq_refuses)
    try:
        yield
    finally:
        engine.state.faults.remove(_dlq_refuses)


def always(error: type[Exception]) -> Any:
    def handler(event: dict[str, Any], context: Any) -> Any:
        raise error(f"injected {error.__name__}")

    return handler


def processor_executions(engine: LocalEngine) -> int:
    sfn = engine.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=engine.ref(MACHINE))
    return sum(len(page["executions"]) for page in pages)


@pytest.fixture
def audited() -> Iterator[LocalEngine]:
    with audit_engine() as local:
        local.state.requests.clear()
        yield local


def test_a_failed_row_at_max_attempts_that_could_not_be_dead_lettered_is_by_the_audit(
    audited: LocalEngine,
) -> None:
    # GIVEN an object that failed MaxAttempts (3) times, the last time with the DLQ refusing
    version = upload(audited, "undelivered.png")
    pk = idempotency_key(audited, "undelivered.png", version)
    event = s3_event(audited, "undelivered.png", version)
    with audited.override_function(FUNCTION, always(TransientError)):
        for _ in range(2):
            assert audited.execute(MACHINE, event).outcome == "Failed"
        with dlq_refusing(audited):
            last = audited.execute(MACHINE, event)
    assert last.error == "DeadLetterFailed"
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "FAILED" and row["attempts"] == "3"
    assert row["open_status"].startswith("FAILED") and "dead_lettered_at" not in row
    assert row["last_error"].startswith("DeadLetterFailed: ")
    assert dlq_messages(audited) == []
    started = processor_executions(audited)
    # WHEN the audit runs (the DLQ takes messages again)
    report = run_audit(audited).output
    # THEN it dead-lettered the work: one message, in the processor's shape, then the row
    (message,) = dlq_messages(audited)
    assert report["failed_dead_lettered"] == 1 and report["failed_resubmitted"] == 0
    attrs = attributes(message)
    assert attrs["ERROR_CODE"] == "TransientError"  # what failed, not the DLQ's refusal
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert attrs["RETRY_ATTEMPTS"] == "3" and attrs["IDEMPOTENCY_KEY"] == pk
    assert attrs["EXECUTION_ARN"] == last.arn and attrs["ERROR_MESSAGE"] == row["last_error"]
    body = json.loads(message["Body"])
    assert body["event"] == event and body["workItem"]["key"] == "undelivered.png"
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    assert "open_status" not in row
    assert processor_executions(audited) == started  # dead-lettered, not resubmitted
    # AND a second audit finds nothing more to do
    again = run_audit(audited).output
    assert again["failed_dead_lettered"] == 0 and len(dlq_messages(audited)) == 1
    # AND redrive, which could not see it before, brings it back once the processor works
    (moved,) = ops.redrive(LocalTarget(audited)).messages
    assert moved.idempotency_key == pk and moved.outcome == "SUCCEEDED (PROCESSED)"
    assert output_effects(audited) == 1 and dlq_messages(audited) == []


def test_a_row_the_audit_took_and_could_neither_send_nor_give_back_is_the_next_audits(
    audited: LocalEngine,
) -> None:
    """docs/audit.md, "The sweep dead-letters under its own lock": should the give-back
    fail too, the row stays PROCESSING under the audit's lock, and once that has expired
    the next sweep finds it stuck. Both failures injected for real: the DLQ refusing
    SendMessage (its KMS key), the ledger refusing the give-back (the audit's role lost
    dynamodb:UpdateItem). The give-back fails the same way when throttled past the SDK's
    retries (one `except` for both); AccessDenied is not retried, so this test does not wait
    out ten adaptive retries (about 25 s of backoff)."""
    # GIVEN an object that failed MaxAttempts times, its last DLQ send refused
    version = upload(audited, "taken.png")
    pk = idempotency_key(audited, "taken.png", version)
    event = s3_event(audited, "taken.png", version)
    with audited.override_function(FUNCTION, always(TransientError)):
        for _ in range(2):
            audited.execute(MACHINE, event)
        with dlq_refusing(audited):
            assert audited.execute(MACHINE, event).error == "DeadLetterFailed"
    # WHEN the audit takes the row to dead-letter it, the DLQ still refuses, and the ledger
    # refuses the give-back
    with (
        dlq_refusing(audited),
        failing(audited, "dynamodb", "UpdateItem", DENIED, when="#status = :status"),
    ):
        first = run_audit(audited).output
    # THEN nothing was sent and nothing says dead-lettered: the row is PROCESSING under the
    # audit's own lock, still open work, and the audit says it could not finish it
    assert dlq_messages(audited) == []
    held = ledger_row(audited, pk) or {}
    assert held["status"] == "PROCESSING" and "dead_lettered_at" not in held
    assert held["open_status"].startswith("PROCESSING")
    assert held["lock_owner"] != "" and ":execution:" not in held["lock_owner"]
    assert first["resubmit_errors"] >= 1 and first["failed_dead_lettered"] == 0
    # AND a batch-mode delivery, or an audit, cannot take it while that lock lives
    assert run_audit(audited).output["stuck_dead_lettered"] == 0
    assert dlq_messages(audited) == []
    # WHEN that lock has expired (the audit's invocation died long ago) and the next audit runs
    expire_lock(audited, pk)
    report = run_audit(audited).output
    # THEN it is dead-lettered once, as stuck work at MaxAttempts, and found no more
    assert report["stuck_dead_lettered"] == 1
    [message] = dlq_messages(audited)
    assert attributes(message)["IDEMPOTENCY_KEY"] == pk
    assert attributes(message)["ERROR_CODE"] == "LockExpired"
    assert "dead_lettered_at" in (ledger_row(audited, pk) or {})
    assert run_audit(audited).output["stuck_dead_lettered"] == 0
    assert len(dlq_messages(audited)) == 1 and output_effects(audited) == 0


def test_a_message_that_failed_permanently_and_could_not_be_dead_lettered() -> None:
    # GIVEN an SQS message the processor rejects permanently, with the DLQ refusing
    with audit_engine(SqsSource="create", IdempotencyKeyPath="orderId") as engine:
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceQueue"),
            MessageBody=json.dumps({"orderId": "o-dlq", "n": 1}),
        )
        with engine.override_function(FUNCTION, always(PermanentError)), dlq_refusing(engine):
            (arn,) = engine.pump_pipes()
            undelivered = engine.wait(arn)
        assert undelivered.error == "DeadLetterFailed"
        # AND its row at MaxAttempts (written directly: the row a redeploy that lowered
        # MaxAttempts, or a later attempt, leaves)
        engine.client("dynamodb").update_item(
            TableName=engine.ref("LedgerTable"),
            Key={"pk": {"S": "sqs:o-dlq"}},
            UpdateExpression="SET attempts = :n",
            ExpressionAttributeValues={":n": {"N": "3"}},
        )
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN the message goes to the DLQ with the pipe's original input (the row keeps
        # no payload) and says the failure was permanent
        (message,) = dlq_messages(engine)
        assert report["failed_dead_lettered"] == 1
        attrs = attributes(message)
        assert attrs["ERROR_CODE"] == "PermanentError"
        assert attrs["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
        assert attrs["IDEMPOTENCY_KEY"] == "sqs:o-dlq" and attrs["EXECUTION_ARN"] == arn
        body = json.loads(message["Body"])
        assert body["workItem"] is None
        assert json.loads(body["event"][0]["body"]) == {"orderId": "o-dlq", "n": 1}
        row = ledger_row(engine, "sqs:o-dlq")
        assert row is not None and "dead_lettered_at" in row and "open_status" not in row


def test_a_failed_row_below_max_attempts_is_still_resubmitted(audited: LocalEngine) -> None:
    # GIVEN an object that failed once and could not be dead-lettered (a permanent
    # error on the first attempt, the DLQ refusing)
    version = upload(audited, "below.png", b"not an image")
    pk = idempotency_key(audited, "below.png", version)
    with dlq_refusing(audited):
        first = audited.execute(MACHINE, s3_event(audited, "below.png", version))
    assert first.error == "DeadLetterFailed"
    row = ledger_row(audited, pk)
    assert row is not None and row["attempts"] == "1" and "dead_lettered_at" not in row
    # WHEN the audit runs
    report = run_audit(audited).output
    # THEN it was resubmitted as before (not dead-lettered by the audit), and the rerun,
    # still poison, dead-lettered itself with one message
    assert report["failed_dead_lettered"] == 0 and report["failed_resubmitted"] == 1
    (message,) = dlq_messages(audited)
    assert attributes(message)["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    assert attributes(message)["EXECUTION_ARN"] != first.arn
    row = ledger_row(audited, pk)
    assert row is not None and row["attempts"] == "2" and "dead_lettered_at" in row


def test_an_invalid_event_that_could_not_be_dead_lettered_leaves_no_row_for_the_audit(
    audited: LocalEngine,
) -> None:
    # GIVEN an invalid event whose dead letter could not be sent: it has no row
    with dlq_refusing(audited):
        failed = audited.execute(MACHINE, load_event("invalid-unknown-shape.json"))
    assert failed.error == "DeadLetterFailed"
    # WHEN the audit runs, THEN it has nothing to find: redrive --undelivered is the way back
    report = run_audit(audited).output
    assert report["failed_dead_lettered"] == 0 and dlq_messages(audited) == []
    (restarted,) = ops.redrive_undelivered(LocalTarget(audited)).messages
    assert restarted.outcome == "FAILED (InvalidEvent)" and len(dlq_messages(audited)) == 1
