"""The audit's writes outside the ledger: processor executions, DLQ messages, reports."""

from __future__ import annotations

import codecs
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

import boto3
from botocore.config import Config

from service.dal.aws import EXECUTION_ALREADY_EXISTS, aws_call, error_code
from service.errors import PermanentError
from service.logic.audit import claimed_under

# StartExecution is throttled per account (a token bucket); a page resubmits
# up to 1000 keys, so let the SDK back off and retry rather than fail the page.
_RETRYING = Config(retries={"mode": "adaptive", "max_attempts": 10})
_REMEMBERED_STARTS = 20_000
_ALREADY_STARTED = frozenset({EXECUTION_ALREADY_EXISTS})
_NO_SUCH_KEY = frozenset({"NoSuchKey"})
# StartExecution refuses this input (over 256 KiB in UTF-8, or not JSON): the same input is
# refused again, whoever sends it (API_StartExecution.html: InvalidExecutionInput; the
# input's length constraint answers ValidationException).
_INPUT_REFUSED = frozenset({"InvalidExecutionInput", "ValidationException"})

# What SQS accepts in a message (XML 1.0 characters); anything else is refused.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def compact_json(value: Any) -> str:
    """JSON text as EventBridge and the pipe hand it on: compact, UTF-8 characters as they are.

    ``json.dumps`` defaults write "é" as six bytes and an emoji as twelve, and add
    spaces: an event of 110 KB of "é" that Step Functions accepted would come back
    as 330 KB, over StartExecution's 256 KiB (counted in UTF-8 bytes). Only what no
    UTF-8 text can hold (a lone surrogate) or SQS refuses (U+FFFE, U+FFFF) is
    escaped; JSON reads either form as the same string.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class StartRefused(PermanentError):
    """StartExecution refused the input itself: no retry, no later audit, starts it."""

    def __init__(self, name: str, code: str, message: str) -> None:
        super().__init__(f"starting {name}: {code}: {message}")
        self.code = code
        self.reason = message


class Processor:
    """Starts processor executions; a second start under one name is a no-op.

    STANDARD refuses a name that ran (ExecutionAlreadyExists); EXPRESS does not, it runs
    the name again (express-at-least-once-execution.html): the ledger's claims, which
    the caller hands in, are what shows that a name ran under either type.
    """

    def __init__(self, state_machine_arn: str, client: Any | None = None) -> None:
        self.arn = state_machine_arn
        self._sfn = (
            client if client is not None else boto3.client("stepfunctions", config=_RETRYING)
        )
        self._started: OrderedDict[str, None] = OrderedDict()  # names, newest last

    def start(self, name: str, execution_input: Any, claims: Iterable[str] = ()) -> bool:
        """True when this call started the execution, False when the name already ran.

        ``claims``: the row's claims (the executions that took it). A name among them
        ran and is not started again: an EXPRESS processor would run it a second time,
        costing a start and an attempt, and the audit would count the key twice.
        Raises StartRefused when Step Functions refuses the input itself.
        Step Functions answers a second start of a name that is still running,
        with the same input, as if it were the first (same ARN): so the names
        this sandbox started are remembered too.
        """
        if name in self._started or claimed_under(name, claims):
            return False
        with aws_call(f"starting {name}", expected=_ALREADY_STARTED | _INPUT_REFUSED) as call:
            self._sfn.start_execution(
                stateMachineArn=self.arn, name=name, input=compact_json(execution_input)
            )
        if call.refusal is not None and call.refused in _INPUT_REFUSED:
            error = call.refusal.response.get("Error", {})
            raise StartRefused(name, error_code(call.refusal), str(error.get("Message", "")))
        if call.refused:
            return False  # the name ran before: whatever it did stands
        self._started[name] = None
        if len(self._started) > _REMEMBERED_STARTS:
            self._started.popitem(last=False)
        return True

    def execution_input(self, execution_arn: str) -> Any:
        """The input an execution was started with; None when Step Functions no longer has it."""
        try:
            with aws_call(f"describing {execution_arn}"):
                description = self._sfn.describe_execution(executionArn=execution_arn)
        except PermanentError:
            # Gone (STANDARD keeps executions 90 days), or an EXPRESS
            # execution, which DescribeExecution does not serve.
            return None
        text = description.get("input")
        return json.loads(text) if text else None


class DeadLetters:
    def __init__(self, queue_url: str, client: Any | None = None) -> None:
        self.queue_url = queue_url
        self._sqs = client if client is not None else boto3.client("sqs")

    def send(self, body: Any, attributes: dict[str, str]) -> None:
        message_attributes: dict[str, Any] = {
            name: _attribute(name, value) for name, value in attributes.items() if value
        }
        with aws_call("sending to the DLQ"):
            self._sqs.send_message(
                QueueUrl=self.queue_url,
                MessageBody=compact_json(body),  # SQS counts UTF-8 bytes, as SendToDLQ's
                MessageAttributes=message_attributes,
            )


def _attribute(name: str, value: str) -> dict[str, str]:
    """A message attribute SQS accepts, as the processor's SendToDLQ writes it: a key with
    characters SQS refuses travels URL-encoded (String.urlencoded, decoded by redrive);
    in any other attribute such characters become U+FFFD."""
    if name == "RETRY_ATTEMPTS":
        return {"DataType": "Number", "StringValue": value}
    if not _NOT_XML.search(value):
        return {"DataType": "String", "StringValue": value}
    if name == "IDEMPOTENCY_KEY":
        # encodeURIComponent's unreserved set, as the state machine encodes it.
        encoded = quote(value, safe="-_.!~*'()", errors="surrogatepass")
        return {"DataType": "String.urlencoded", "StringValue": encoded}
    return {"DataType": "String", "StringValue": _NOT_XML.sub("\ufffd", value)}


class Reports:
    def __init__(self, bucket: str, client: Any | None = None) -> None:
        self.bucket = bucket
        self._s3 = client if client is not None else boto3.client("s3")

    def put(self, key: str, report: dict[str, Any]) -> str:
        with aws_call(f"writing the report s3://{self.bucket}/{key}"):
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=json.dumps(report, indent=2).encode(),
                ContentType="application/json",
            )
        return f"s3://{self.bucket}/{key}"

    def put_file(self, key: str, data: bytes, content_type: str) -> dict[str, str]:
        """Write a file the audit hands to a state (its window of objects); where it is."""
        with aws_call(f"writing s3://{self.bucket}/{key}"):
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        return {"bucket": self.bucket, "key": key}

    def read_bytes(self, key: str, limit: int) -> bytes | None:
        """At most ``limit`` + 1 bytes of the object at ``key`` (more than ``limit`` says it
        is larger: a 5 GB object is never read whole into the function's memory), or None
        when there is none (NoSuchKey). A refusal (AccessDenied, an archived object's
        InvalidObjectState) is a PermanentError, throttling a TransientError."""
        with aws_call(f"reading s3://{self.bucket}/{key}", expected=_NO_SUCH_KEY) as call:
            body = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                data = bytes(body.read(limit + 1))
            finally:
                body.close()
        if call.refused:
            return None
        return data

    def find_manifest(self, prefix: str) -> str | None:
        """The key of a Map Run's exported manifest.json under ``prefix``, if any."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        with aws_call(f"listing s3://{self.bucket}/{prefix}"):
            while True:
                response = self._s3.list_objects_v2(**kwargs)
                for item in response.get("Contents", []):
                    if str(item["Key"]).endswith("/manifest.json"):
                        return str(item["Key"])
                if not response.get("IsTruncated"):
                    return None
                kwargs["ContinuationToken"] = response["NextContinuationToken"]

    def map_run_entries(self, bucket: str, manifest_key: str) -> Iterator[tuple[str, Any]]:
        """What a Distributed Map's ResultWriter exported, one child at a time: its manifest,
        then every file, each read as a stream (a file holds up to thousands of children, a
        failed one with its whole input: they are never all in memory at once).

        The manifest lists the result files by status (ResultFiles: SUCCEEDED,
        FAILED, PENDING: input-output-resultwriter.html). Yields ("SUCCEEDED", the
        child's output: COMPACT) and ("FAILED" or "PENDING", the child's whole
        execution result as NONE writes it: ExecutionArn, Input, Error, Cause...,
        Input and Output as JSON text).
        """
        manifest = self._json(bucket, manifest_key)
        files = manifest.get("ResultFiles") or {}
        for status in ("SUCCEEDED", "FAILED", "PENDING"):
            for file in files.get(status) or []:
                for entry in self._entries(bucket, str(file["Key"])):
                    if status == "SUCCEEDED":
                        yield status, _parsed(entry.get("Output")) if _is_result(entry) else entry
                    else:
                        yield status, {"Status": status, **entry}

    def _entries(self, bucket: str, key: str) -> Iterator[Any]:
        """The values of one result file (a JSON array, or JSON lines), read a chunk at a time."""
        with aws_call(f"reading s3://{bucket}/{key}"):
            body = self._s3.get_object(Bucket=bucket, Key=key)["Body"]
        with aws_call(f"reading s3://{bucket}/{key}"):
            yield from json_values(body)

    def _json(self, bucket: str, key: str) -> dict[str, Any]:
        value = json.loads(self._text(bucket, key))
        if not isinstance(value, dict):
            raise PermanentError(f"s3://{bucket}/{key} is not a JSON object")
        return value

    def _text(self, bucket: str, key: str) -> str:
        with aws_call(f"reading s3://{bucket}/{key}"):
            body = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return str(body.decode("utf-8"))


_CHUNK = 1 << 18  # bytes read at a time from a result file
_DECODER = json.JSONDecoder()
_BETWEEN = frozenset(" \t\r\n,")


def json_values(body: Any, chunk: int = _CHUNK) -> Iterator[Any]:
    """The values of a JSON array, or of JSON lines, read from ``body`` (a stream with
    ``read(n)``) a chunk at a time: memory holds a chunk and a value, never the file."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    buffer = ""
    position = 0
    opened = False
    ended = False
    while True:
        # Skip what stands between values: whitespace, commas, the array's brackets.
        while position < len(buffer):
            character = buffer[position]
            if character in _BETWEEN or (character == "]" and opened):
                position += 1
            elif character == "[" and not opened:
                opened, position = True, position + 1
            else:
                break
        if position < len(buffer):
            opened = True  # JSON lines have no bracket; an array's values are past it
            try:
                value, end = _DECODER.raw_decode(buffer, position)
            except json.JSONDecodeError:
                if ended:
                    raise
            else:
                # A value that ends the buffer (a number) may go on in the next chunk.
                if end < len(buffer) or ended:
                    yield value
                    position = end
                    continue
        if ended:
            return
        data = body.read(chunk)
        buffer = buffer[position:] + decoder.decode(data or b"", final=not data)
        position = 0
        ended = not data


def _is_result(entry: Any) -> bool:
    return isinstance(entry, dict) and "ExecutionArn" in entry and "Status" in entry


def _parsed(value: Any) -> Any:
    """A child's Input or Output: JSON text in an exported result, parsed."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def batch_size(result: dict[str, Any]) -> int:
    """How many items a failed child held (its input is {BatchInput, Items})."""
    value = _parsed(result.get("Input"))
    items = value.get("Items") if isinstance(value, dict) else None
    return len(items) if isinstance(items, list) else 0
