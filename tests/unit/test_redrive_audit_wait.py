"""Which events redrive holds back as the audit's, and what it does when it cannot tell."""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from onceflow import ops
from tests.helpers import load_event

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/ingress-dlq"
AUDIT = "arn:aws:lambda:us-east-1:123456789012:function:audit"
WHEN = datetime.datetime(2026, 11, 20, 8, 0, tzinfo=datetime.UTC)


def eventbridge(version: str | None) -> dict[str, Any]:
    event = copy.deepcopy(load_event("s3-object-created.json"))
    event["time"] = "2026-11-20T08:00:00Z"
    event["detail"]["object"].pop("version-id", None)
    if version is not None:
        event["detail"]["object"]["version-id"] = version
    return dict(event)


def notification(version: str | None, name: str = "ObjectCreated:Put") -> dict[str, Any]:
    obj: dict[str, Any] = {"key": "a.png", "eTag": "0123", "sequencer": "0062E99A88DC407460"}
    if version is not None:
        obj["versionId"] = version
    record = {
        "eventSource": "aws:s3",
        "eventName": name,
        "eventTime": "2026-11-20T08:00:00.000Z",
        "s3": {"bucket": {"name": "b"}, "object": obj},
    }
    return {"Records": [record]}


def test_an_object_created_event_without_a_version_id_is_dated() -> None:
    # EventBridge's form: no version-id, or "null" (an upload while versioning is suspended)
    assert ops.unversioned_upload_time(eventbridge(None)) == WHEN
    assert ops.unversioned_upload_time(eventbridge("null")) == WHEN
    # a classic S3 notification in a source queue's message
    assert ops.unversioned_upload_time(notification(None)) == WHEN
    assert ops.unversioned_upload_time(notification("null")) == WHEN


def test_a_versioned_upload_or_another_event_is_not() -> None:
    assert ops.unversioned_upload_time(eventbridge("3HL4kqtJlcpXroDTDmJ")) is None
    assert ops.unversioned_upload_time(notification("3HL4kqtJlcpXroDTDmJ")) is None
    assert ops.unversioned_upload_time(notification(None, "ObjectRemoved:Delete")) is None
    custom = {"source": "clinic.appointments", "detail-type": "Booked", "time": "2026-11-20"}
    assert ops.unversioned_upload_time(custom) is None
    assert ops.unversioned_upload_time("text") is None


class StubbedTarget:
    """A deployed stack whose operator may not read the audit function's configuration."""

    local = False

    def __init__(self) -> None:
        keys = {
            "region_name": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }
        self.sqs = boto3.client("sqs", **keys)  # type: ignore[call-overload]
        self.awslambda = boto3.client("lambda", **keys)  # type: ignore[call-overload]

    def client(self, service: str) -> Any:
        return {"sqs": self.sqs, "lambda": self.awslambda}.get(service)

    def output(self, name: str) -> str:
        return {
            "IngressDeadLetterQueueUrl": URL,
            "AuditFunctionArn": AUDIT,
            "ProcessorStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:p",
        }[name]


def test_an_unreadable_audit_wait_keeps_an_unversioned_event_in_its_dlq() -> None:
    target = StubbedTarget()
    message = {"MessageId": "m-1", "ReceiptHandle": "h-1", "Body": json.dumps(eventbridge(None))}
    with Stubber(target.sqs) as sqs, Stubber(target.awslambda) as awslambda:
        # GIVEN an unversioned upload's event in the ingress DLQ, and an operator whose role
        # may not call lambda:GetFunctionConfiguration
        sqs.add_response("receive_message", {"Messages": [message]})
        sqs.add_response("receive_message", {"Messages": []})
        awslambda.add_client_error(
            "get_function_configuration",
            "AccessDeniedException",
            http_status_code=403,
            expected_params={"FunctionName": AUDIT},
        )
        # THEN the message is made visible again, and nothing is started
        sqs.add_response(
            "change_message_visibility",
            {},
            {"QueueUrl": URL, "ReceiptHandle": "h-1", "VisibilityTimeout": 0},
        )
        # WHEN the ingress DLQ is redriven
        report = ops.redrive(target, queue="ingress")
        sqs.assert_no_pending_responses()
        awslambda.assert_no_pending_responses()
    (item,) = report.messages
    assert item.action == "kept"
    assert "the audit's wait cannot be read" in item.detail and "AccessDenied" in item.detail


def test_the_summary_counts_events_kept_as_too_late() -> None:
    from onceflow.cli.stack_commands import redrive_summary

    data = {"resubmitted": 0, "kept": 0, "left": 0, "deleted_already_processed": 0, "too_late": 2}
    line = redrive_summary(data, dry_run=False, undelivered=False)
    assert "2 kept as too late (uploads without a version id the audit has resubmitted" in line


def test_force_is_refused_with_undelivered() -> None:
    from onceflow.cli import main

    with pytest.raises(SystemExit) as refused:
        main(["redrive", "--undelivered", "--force"])
    assert "--force applies to DLQ messages" in str(refused.value)
