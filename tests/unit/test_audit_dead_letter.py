"""The audit dead-letters a FAILED row at MaxAttempts that has no DLQ message as the
processor does: it takes the row's lock with a write fenced on the row as read, sends
the message, then marks the row fenced on its own lock. AWS's answers are injected
with botocore Stubbers and each request is asserted exactly, in the order made.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from service.dal.ledger import Ledger, plain
from service.dal.workflow import DeadLetters, Processor, Reports, StartRefused, compact_json
from service.logic.audit import Budget, empty_counts, failed_dead_letter_message, failure_code
from service.model import LedgerRow
from service.settings import AuditSettings
from service.usecases import audit

TABLE = "ledger"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/dlq"
PROCESSOR = "arn:aws:states:us-east-1:123456789012:stateMachine:processor"
OWNER = "arn:aws:states:us-east-1:123456789012:execution:processor:third"
UNDELIVERED = (
    "DeadLetterFailed: SQS.SdkClientException: KMS refuses (dead-lettering TransientError: "
    "TransientError: S3 SlowDown reading a.png)"
)
SETTINGS = AuditSettings(
    ingest_bucket="in",
    ledger_table=TABLE,
    open_work_index="OpenWork",
    processor_arn=PROCESSOR,
    dead_letter_queue_url=QUEUE,
    report_bucket="out",
    report_prefix="reports/",
    max_attempts=3,
    recent_cutoff_seconds=0,
    retention_seconds=30 * 86400,
    stuck_margin_seconds=0,
)
RUN = audit.AuditRun(audit_id="audit-1", started_at_ms=1_800_000_000_000)
# A FAILED row as the open-work index shows it (and as a consistent read does, unchanged).
ROW = {
    "pk": {"S": "s3://in/a.png#v1"},
    "status": {"S": "FAILED"},
    "open_status": {"S": "FAILED"},
    "attempts": {"N": "3"},
    "lock_owner": {"S": OWNER},
    "updated_at": {"N": "1799999990000"},
    "expires_at": {"N": "1900000000"},
    "last_error": {"S": UNDELIVERED},
    "bucket": {"S": "in"},
    "object_key": {"S": "a.png"},
    "version_id": {"S": "v1"},
}


def _client(service: str) -> Any:
    return boto3.client(
        service,
        region_name="us-east-1",  # type: ignore[call-overload]
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


class Stubbed:
    """The audit's clients over stubbed boto3 clients."""

    def __init__(self) -> None:
        self.dynamodb, self.sfn, self.sqs = (
            _client("dynamodb"),
            _client("stepfunctions"),
            _client("sqs"),
        )
        self.clients = audit.Clients.__new__(audit.Clients)
        self.clients.ledger = Ledger(TABLE, "OpenWork", self.dynamodb)
        self.clients.processor = Processor(PROCESSOR, self.sfn)
        self.clients.dead_letters = DeadLetters(QUEUE, self.sqs)
        self.clients.reports = Reports("out", _client("s3"))
        self.stubs = [Stubber(self.dynamodb), Stubber(self.sfn), Stubber(self.sqs)]
        self.db, self.states, self.queue = self.stubs

    def __enter__(self) -> Stubbed:
        for stub in self.stubs:
            stub.activate()
        return self

    def __exit__(self, *exc: object) -> None:
        for stub in self.stubs:
            stub.assert_no_pending_responses()
            stub.deactivate()


def _consistent_read(stubbed: Stubbed, item: dict[str, Any]) -> None:
    stubbed.db.add_response(
        "batch_get_item",
        {"Responses": {TABLE: [item]}},
        {"RequestItems": {TABLE: {"Keys": [{"pk": ROW["pk"]}], "ConsistentRead": True}}},
    )


def _original_input(stubbed: Stubbed) -> dict[str, Any]:
    original = {"source": "aws.s3", "detail": {"object": {"key": "a.png"}}}
    stubbed.states.add_response(
        "describe_execution",
        {
            "executionArn": OWNER,
            "stateMachineArn": PROCESSOR,
            "status": "FAILED",
            "startDate": "2026-01-01T00:00:00Z",
            "input": json.dumps(original),
        },
        {"executionArn": OWNER},
    )
    return original


LOCK_UNTIL = 1_800_000_900
# The take: fenced on the row as the index showed it; the row becomes the audit's.
TAKE = {
    "TableName": TABLE,
    "Key": {"pk": ROW["pk"]},
    "UpdateExpression": (
        "SET #status = :processing, open_status = :open, lock_owner = :me, "
        "lock_expires_at = :lock_expires_at, updated_at = :now_ms"
    ),
    "ConditionExpression": (
        "#status = :failed AND updated_at = :seen_updated_at "
        "AND lock_owner = :seen_lock_owner AND attribute_not_exists(dead_lettered_at)"
    ),
    "ExpressionAttributeNames": {"#status": "status"},
    "ExpressionAttributeValues": {
        ":processing": {"S": "PROCESSING"},
        ":open": {"S": "PROCESSING#e"},
        ":me": {"S": "audit-1"},
        ":lock_expires_at": {"N": str(LOCK_UNTIL)},
        ":now_ms": ANY,
        ":failed": {"S": "FAILED"},
        ":seen_updated_at": ROW["updated_at"],
        ":seen_lock_owner": ROW["lock_owner"],
    },
}
# The mark: fenced on the audit's own lock.
MARK = {
    "TableName": TABLE,
    "Key": {"pk": ROW["pk"]},
    "UpdateExpression": (
        "SET #status = :failed, last_error = :error, updated_at = :now_ms, "
        "dead_lettered_at = :now_ms, dead_lettered_by = :me REMOVE open_status"
    ),
    "ConditionExpression": "lock_owner = :me AND #status = :processing",
    "ExpressionAttributeNames": {"#status": "status"},
    "ExpressionAttributeValues": {
        ":failed": {"S": "FAILED"},
        ":processing": {"S": "PROCESSING"},
        ":me": {"S": "audit-1"},
        ":error": {"S": UNDELIVERED},
        ":now_ms": ANY,
    },
}


def _budget() -> Budget:
    return Budget(per_second=1000, deadline=time.monotonic() + 60)


def _row() -> LedgerRow:
    return LedgerRow.of(plain(ROW))


def _sweep(stubbed: Stubbed, counts: dict[str, int]) -> audit._Sweep:
    return audit._Sweep(
        RUN, SETTINGS, stubbed.clients, counts, [], _budget(), lock_until=LOCK_UNTIL
    )


def _calls(stubbed: Stubbed) -> list[str]:
    """The operations the audit asks AWS for, across its clients, in the order asked."""
    asked: list[str] = []
    for client in (stubbed.dynamodb, stubbed.sfn, stubbed.sqs):
        client.meta.events.register(
            "before-parameter-build.*.*",
            lambda model, **_: asked.append(model.name),
            unique_id="order",
        )
    return asked


def test_the_row_is_taken_then_the_message_sent_then_the_row_marked() -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        asked = _calls(stubbed)
        # GIVEN the row as the index showed it, unchanged, and its lock owner's input
        original = _original_input(stubbed)
        stubbed.db.add_response("update_item", {}, TAKE)
        # THEN one SendMessage in the processor's shape, and only then the fenced mark
        stubbed.queue.add_response(
            "send_message",
            {"MessageId": "m-1"},
            {
                "QueueUrl": QUEUE,
                "MessageBody": compact_json(
                    {
                        "event": original,
                        "workItem": {
                            "source": "audit",
                            "idempotencyKey": "s3://in/a.png#v1",
                            "bucket": "in",
                            "key": "a.png",
                            "versionId": "v1",
                        },
                    }
                ),
                "MessageAttributes": {
                    name: {
                        "DataType": "Number" if name == "RETRY_ATTEMPTS" else "String",
                        "StringValue": value,
                    }
                    for name, value in {
                        "ERROR_CODE": "TransientError",
                        "ERROR_MESSAGE": UNDELIVERED,
                        "EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts",
                        "RETRY_ATTEMPTS": "3",
                        "STATE_MACHINE_ARN": PROCESSOR,
                        # The execution whose work it was, not the audit that took the row.
                        "EXECUTION_ARN": OWNER,
                        "IDEMPOTENCY_KEY": "s3://in/a.png#v1",
                    }.items()
                },
            },
        )
        stubbed.db.add_response("update_item", {}, MARK)
        # WHEN the sweep meets the row
        audit._retry_failed(_row(), _sweep(stubbed, counts))
    # AND the input is read before the take (once taken, the row names the audit)
    assert asked == ["DescribeExecution", "UpdateItem", "SendMessage", "UpdateItem"]
    assert counts["failed_dead_lettered"] == 1 and counts["failed_resubmitted"] == 0


def test_a_row_taken_over_before_the_audits_take_gets_no_message() -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        asked = _calls(stubbed)
        # GIVEN a delivery that took the row over (or a redrive that reset it) since the
        # index was read: the take is refused
        _original_input(stubbed)
        stubbed.db.add_client_error(
            "update_item", "ConditionalCheckFailedException", expected_params=TAKE
        )
        # WHEN the sweep meets the index's copy
        audit._retry_failed(_row(), _sweep(stubbed, counts))
    # THEN it sends nothing and writes nothing more: the delivery's message is the one
    assert asked == ["DescribeExecution", "UpdateItem"]
    assert counts["failed_dead_lettered"] == 0


def test_a_failed_send_gives_the_row_back_as_it_was_read_and_the_sweep_goes_on() -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        # GIVEN a take that holds and a DLQ that refuses the message (its KMS key)
        _original_input(stubbed)
        stubbed.db.add_response("update_item", {}, TAKE)
        stubbed.queue.add_client_error("send_message", "KmsAccessDenied", http_status_code=400)
        # AND the row given back, fenced on the audit's lock, as the index showed it
        stubbed.db.add_response(
            "update_item",
            {},
            {
                "TableName": TABLE,
                "Key": {"pk": ROW["pk"]},
                "UpdateExpression": (
                    "SET #status = :status, open_status = :open, updated_at = :now_ms, "
                    "lock_owner = :lock_owner REMOVE lock_expires_at"
                ),
                "ConditionExpression": "lock_owner = :me AND #status = :processing",
                "ExpressionAttributeNames": {"#status": "status"},
                "ExpressionAttributeValues": {
                    ":status": ROW["status"],
                    ":open": ROW["open_status"],
                    ":processing": {"S": "PROCESSING"},
                    ":me": {"S": "audit-1"},
                    ":now_ms": ANY,
                    ":lock_owner": ROW["lock_owner"],
                },
            },
        )
        # WHEN the sweep dead-letters the row THEN the row is not marked but given back
        # (FAILED, open, no DLQ message, for the next audit), counted for the alarm, and
        # the sweep is told to go on with the next row
        with pytest.raises(audit._Undelivered):
            audit._retry_failed(_row(), _sweep(stubbed, counts))
    assert counts["failed_dead_lettered"] == 0 and counts["resubmit_errors"] == 1


def test_a_row_the_index_shows_dead_lettered_or_expired_is_not_touched() -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        asked = _calls(stubbed)
        # GIVEN the index's copy of a row dead-lettered by now, and one expired
        dead = replace(_row(), dead_lettered_at=1_799_999_999_999)
        expired = replace(_row(), expires_at=1)
        # WHEN the sweep meets them THEN no request is made
        audit._retry_failed(dead, _sweep(stubbed, counts))
        audit._retry_failed(expired, _sweep(stubbed, counts))
    assert asked == [] and counts["failed_dead_lettered"] == 0


def test_a_refused_resubmission_is_dead_lettered_under_the_audits_lock() -> None:
    counts = empty_counts()
    below_max = {**ROW, "attempts": {"N": "1"}, "last_error": {"S": "TransientError: x"}}
    refusal = "StartExecution refused the audit's resubmission: too large"
    with Stubbed() as stubbed:
        asked = _calls(stubbed)
        # GIVEN a FAILED row below MaxAttempts whose resubmission StartExecution refused,
        # read again (a stuck row was released just before)
        _consistent_read(stubbed, below_max)
        stubbed.db.add_response("update_item", {}, TAKE)
        stubbed.queue.add_response(
            "send_message",
            {"MessageId": "m-1"},
            {"QueueUrl": QUEUE, "MessageBody": ANY, "MessageAttributes": ANY},
        )
        mark = {
            **MARK,
            "ExpressionAttributeValues": {
                **MARK["ExpressionAttributeValues"],
                ":error": {"S": refusal},
            },
        }
        stubbed.db.add_response("update_item", {}, mark)
        # WHEN the sweep dead-letters it
        refused = StartRefused("n", "InvalidExecutionInput", "too large")
        audit._dead_letter_refused(_row(), {"a": 1}, refused, _sweep(stubbed, counts))
    # THEN as at MaxAttempts: a delivery's Reclaim, which needs FAILED or an expired lock,
    # is refused from the take on, so the work is never both resubmitted and dead-lettered
    assert asked == ["BatchGetItem", "UpdateItem", "SendMessage", "UpdateItem"]
    assert counts["failed_dead_lettered"] == 1


@pytest.mark.parametrize(
    ("last_error", "code", "condition"),
    [
        (UNDELIVERED, "TransientError", "MaximumRetryAttempts"),
        (
            "DeadLetterFailed: SQS.KmsAccessDenied: no (dead-lettering PermanentError: "
            "PermanentError: not an image)",
            "PermanentError",
            "PermanentError",
        ),
        # A Cause long enough that the processor's 1000 characters cut the failure off.
        (
            "DeadLetterFailed: States.TaskFailed: " + "x" * 960,
            "DeadLetterFailed",
            "MaximumRetryAttempts",
        ),
        # MaxAttempts lowered by a redeploy: an ordinary failure left at the new maximum.
        ("LockExpired: the lock of arn expired", "LockExpired", "MaximumRetryAttempts"),
        ("", "Unknown", "MaximumRetryAttempts"),
    ],
)
def test_the_message_names_the_failure_the_row_records(
    last_error: str, code: str, condition: str
) -> None:
    row = replace(_row(), last_error=last_error)
    assert failure_code(last_error) == code
    attributes = failed_dead_letter_message(row, None, PROCESSOR)["attributes"]
    assert attributes["ERROR_CODE"] == code
    assert attributes["EXHAUSTED_RETRY_CONDITION"] == condition
    assert attributes["ERROR_MESSAGE"] == (last_error or "Unknown: failed 3 time(s)")


def test_a_huge_last_error_or_event_still_makes_a_message_sqs_takes() -> None:
    # GIVEN a row whose last_error is 300 KB (an operator's edit, an older release: the
    # state machines write at most 1000 characters) and whose event is 200 KB
    row = replace(_row(), last_error="Boom: " + "x" * 300_000)
    event = {"detail": "é" * 100_000}
    # WHEN the audit builds its DLQ message
    message = failed_dead_letter_message(row, event, PROCESSOR)
    # THEN ERROR_MESSAGE is cut as the processor's SendToDLQ cuts it (1000 characters), and
    # the event travels as an excerpt with its size: the message fits SQS's 256 KiB, so the
    # row is dead-lettered instead of given back at every audit
    assert message["attributes"]["ERROR_MESSAGE"] == row.last_error[:1000]  # type: ignore[index]
    assert message["body"]["event"] is None
    assert message["body"]["eventBytes"] == len(compact_json(event).encode())
    size = len(compact_json(message["body"]).encode()) + sum(
        len(k) + len(str(v).encode()) for k, v in message["attributes"].items()
    )
    assert size < 256 * 1024
