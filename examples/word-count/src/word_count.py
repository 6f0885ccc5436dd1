"""Count the lines and words of an uploaded text file, once: a processor that onceflow calls.

onceflow claims each upload in its ledger, then invokes this function with its
processor contract (docs/processor.md in onceflow): the work item, the lock
token, the attempt and the call token. The effect, one item in the counts
table, is written with a condition on the idempotency key, so two overlapping
calls of one work item (a call that timed out and still runs beside its retry)
cannot write it twice.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
from botocore.exceptions import ClientError

s3 = boto3.client("s3")
dynamodb = boto3.client("dynamodb")
COUNTS_TABLE = os.environ["COUNTS_TABLE"]


class PermanentError(Exception):
    """onceflow dead-letters the work item at once on an error of this name: no retry helps."""


class ObjectSuperseded(Exception):
    """The key no longer holds the content its event announced (an upload without a version
    id, overwritten or deleted since): onceflow ends the work item in Superseded."""


def read(item: dict[str, Any]) -> bytes:
    """The bytes the event announced: its version, or without one the content of its ETag."""
    version = item.get("versionId")
    if version and version != "null":
        where: dict[str, Any] = {"VersionId": version}
    else:  # versioning off or suspended: the key may hold other content by now
        where = {"IfMatch": f'"{item["etag"]}"'}  # an HTTP entity tag is quoted
    try:
        return bytes(s3.get_object(Bucket=item["bucket"], Key=item["key"], **where)["Body"].read())
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        if "IfMatch" in where and code in ("PreconditionFailed", "NoSuchKey"):
            raise ObjectSuperseded(f"{item['key']} holds other content now") from exc
        if code in ("NoSuchKey", "NoSuchVersion"):
            raise PermanentError(f"{item['key']} version {version} is gone") from exc
        raise  # anything else: the row is FAILED and claimed again, up to MaxAttempts


def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
    item = event["workItem"]
    try:
        text = read(item).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PermanentError(f"{item['key']} is not UTF-8 text") from exc
    counts = {"lines": text.count("\n"), "words": len(text.split())}
    try:
        dynamodb.put_item(
            TableName=COUNTS_TABLE,
            Item={
                "pk": {"S": item["idempotencyKey"]},
                "object_key": {"S": item["key"]},
                "lines": {"N": str(counts["lines"])},
                "words": {"N": str(counts["words"])},
                "call_token": {"S": event["callToken"]},  # which call wrote it
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        # An earlier call of this work item wrote it: the effect exists once, keep it.
    return counts  # onceflow keeps it in the ledger row (as JSON, up to 4096 characters)
