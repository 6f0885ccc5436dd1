"""One redrive run against a stubbed SQS: when it stops, and what it puts back."""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.stub import Stubber

from onceflow import ops

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/dlq"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:processor:first"


class StubbedTarget:
    """A deployed stack's outputs, and its SQS client stubbed."""

    local = False

    def __init__(self) -> None:
        self.sqs = boto3.client(
            "sqs",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def client(self, service: str) -> Any:
        assert service in ("sqs", "stepfunctions"), f"a dry run needs no {service}"
        return self.sqs if service == "sqs" else None

    def output(self, name: str) -> str:
        return {
            "DeadLetterQueueUrl": URL,
            "ProcessorStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:p",
        }[name]


def _message(handle: str) -> dict[str, Any]:
    return {
        "MessageId": "m-1",
        "ReceiptHandle": handle,
        "Body": json.dumps({"event": {"source": "elsewhere"}, "workItem": None}),
        "MessageAttributes": {
            "ERROR_CODE": {"DataType": "String", "StringValue": "InvalidEvent"},
            "EXECUTION_ARN": {"DataType": "String", "StringValue": EXECUTION},
        },
    }


def test_a_run_stops_when_a_receive_brings_only_messages_it_has_seen_and_restores_them() -> None:
    target = StubbedTarget()
    receive = {
        "QueueUrl": URL,
        "MaxNumberOfMessages": 10,
        "MessageAttributeNames": ["All"],
        "VisibilityTimeout": 300,
        "WaitTimeSeconds": 0,
    }
    with Stubber(target.sqs) as stub:
        # GIVEN a queue that hands the same message out twice (its hiding ran out)
        stub.add_response("receive_message", {"Messages": [_message("h-1")]}, receive)
        stub.add_response("receive_message", {"Messages": [_message("h-2")]}, receive)
        # THEN the run stops there, and both receipts are made visible again
        for handle in ("h-1", "h-2"):
            stub.add_response(
                "change_message_visibility",
                {},
                {"QueueUrl": URL, "ReceiptHandle": handle, "VisibilityTimeout": 0},
            )
        # WHEN a dry run reads the queue
        report = ops.redrive(target, dry_run=True)
        stub.assert_no_pending_responses()
    assert [(m.message_id, m.action) for m in report.messages] == [("m-1", "would resubmit")]


def test_the_summary_says_what_a_message_left_in_the_dlq_is() -> None:
    # GIVEN a run that moved one message, whose work failed again and dead-lettered anew
    from onceflow.cli.stack_commands import redrive_summary

    data = {"resubmitted": 1, "kept": 0, "left": 1, "deleted_already_processed": 0, "too_late": 0}
    # WHEN its summary line is written
    line = redrive_summary(data, dry_run=False, undelivered=False)
    # THEN the message left behind is named for what it is, not as "moved earlier"
    assert line.startswith("redrive: moved 1 message(s) back into processing")
    assert "1 left for a later run (message(s) for work this run already moved: its new " in line
    assert "moved earlier" not in line
