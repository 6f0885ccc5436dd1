"""The audit dead-letters a FAILED row at MaxAttempts that has no DLQ message:
the message first, then a write fenced on the row as read. AWS's answers are
injected with botocore Stubbers and each request is asserted exactly.
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
from service.dal.workflow import DeadLetters, Processor, Reports, compact_json
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


FENCED_UPDATE = {
    "TableName": TABLE,
    "Key": {"pk": ROW["pk"]},
    "UpdateExpression": (
        "SET dead_lettered_at = :now_ms, updated_at = :now_ms, "
        "dead_lettered_by = :by REMOVE open_status"
    ),
    "ConditionExpression": (
        "#status = :failed AND attribute_not_exists(dead_lettered_at) "
        "AND updated_at = :seen_updated_at AND lock_owner = :seen_lock_owner"
    ),
    "ExpressionAttributeNames": {"#status": "status"},
    "ExpressionAttributeValues": {
        ":failed": {"S": "FAILED"},
        ":now_ms": ANY,
        ":by": {"S": "audit-1"},
        ":seen_updated_at": ROW["updated_at"],
        ":seen_lock_owner": ROW["lock_owner"],
    },
}


def _budget() -> Budget:
    return Budget(per_second=1000, deadline=time.monotonic() + 60)


def _row() -> LedgerRow:
    return LedgerRow.of(plain(ROW))


def test_the_message_is_sent_then_the_row_is_dead_lettered_fenced_on_what_was_read() -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        # GIVEN the row unchanged since the index showed it, and its lock owner's input
        _consistent_read(stubbed, ROW)
        original = _original_input(stubbed)
        # THEN one SendMessage in the processor's shape, and only then the fenced write
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
                        "EXECUTION_ARN": OWNER,
                        "IDEMPOTENCY_KEY": "s3://in/a.png#v1",
                    }.items()
                },
            },
        )
        stubbed.db.add_response("update_item", {}, FENCED_UPDATE)
        # WHEN the sweep meets the row
        audit._retry_failed(_row(), RUN, SETTINGS, stubbed.clients, counts, [], _budget())
    assert counts["failed_dead_lettered"] == 1 and counts["failed_resubmitted"] == 0


def test_a_row_changed_after_the_message_was_sent_is_not_overwritten() -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        # GIVEN a redrive that resets the row between the message and the write
        _consistent_read(stubbed, ROW)
        _original_input(stubbed)
        stubbed.queue.add_response("send_message", {"MessageId": "m-1"})
        stubbed.db.add_client_error(
            "update_item", "ConditionalCheckFailedException", expected_params=FENCED_UPDATE
        )
        # WHEN the sweep dead-letters it
        audit._retry_failed(_row(), RUN, SETTINGS, stubbed.clients, counts, [], _budget())
    # THEN the reset stands (the fence refused the write) and nothing counts as dead-lettered
    assert counts["failed_dead_lettered"] == 0


@pytest.mark.parametrize(
    "changed",
    [
        {"updated_at": {"N": "1799999999999"}},  # written since (a redrive's reset)
        {"status": {"S": "PROCESSING"}},  # reclaimed
        {"dead_lettered_at": {"N": "1799999999999"}},  # dead-lettered by a retried page
    ],
)
def test_a_row_the_index_shows_stale_gets_no_message(changed: dict[str, Any]) -> None:
    counts = empty_counts()
    with Stubbed() as stubbed:
        # GIVEN a consistent read that shows the row changed since the index was read
        _consistent_read(stubbed, {**ROW, **changed})
        # WHEN the sweep meets the index's copy, THEN it sends nothing and writes nothing
        audit._retry_failed(_row(), RUN, SETTINGS, stubbed.clients, counts, [], _budget())
    assert counts["failed_dead_lettered"] == 0


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
