"""DLQ messages the audit sends hold only what SQS accepts, in the processor's own form."""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from onceflow.ops.redrive import _attributes
from service.dal.workflow import DeadLetters

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/dlq"


def test_a_key_with_characters_sqs_refuses_travels_url_encoded_and_redrive_reads_it_back() -> None:
    # GIVEN a key holding a control character (S3 keys may) and a message naming it
    key = "s3://bucket/a\x01b c#v1"
    sqs = boto3.client("sqs", region_name="us-east-1")
    dead_letters = DeadLetters(URL, client=sqs)
    expected = {
        "QueueUrl": URL,
        "MessageBody": '{"event":null}',  # compact, as the audit sends it
        "MessageAttributes": {
            "ERROR_CODE": {"DataType": "String", "StringValue": "LockExpired"},
            "ERROR_MESSAGE": {"DataType": "String", "StringValue": "lock of a\ufffdb expired"},
            "RETRY_ATTEMPTS": {"DataType": "Number", "StringValue": "3"},
            "IDEMPOTENCY_KEY": {
                "DataType": "String.urlencoded",
                "StringValue": "s3%3A%2F%2Fbucket%2Fa%01b%20c%23v1",
            },
        },
    }
    # WHEN the audit sends it
    with Stubber(sqs) as stub:
        stub.add_response("send_message", {"MessageId": "m-1"}, expected)
        dead_letters.send(
            {"event": None},
            {
                "ERROR_CODE": "LockExpired",
                "ERROR_MESSAGE": "lock of a\x01b expired",
                "RETRY_ATTEMPTS": "3",
                "IDEMPOTENCY_KEY": key,
            },
        )
        # THEN the request is exactly the one above (the Stubber checks every parameter)
        stub.assert_no_pending_responses()
    # AND redrive reads the key back as it was
    message = {"MessageAttributes": expected["MessageAttributes"]}
    assert _attributes(message)["IDEMPOTENCY_KEY"] == key


def test_plain_keys_travel_as_they_are() -> None:
    message = {
        "MessageAttributes": {"IDEMPOTENCY_KEY": {"DataType": "String", "StringValue": "a%20b"}}
    }
    assert _attributes(message)["IDEMPOTENCY_KEY"] == "a%20b"  # not decoded: it was not encoded
