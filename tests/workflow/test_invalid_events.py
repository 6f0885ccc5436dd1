"""Bad input ends in the named InvalidEvent failure, in the DLQ, with no ledger row.

Each stack is the module's, shared by its tests (an engine start each was nine tenths of
this file's time): none writes a row or calls the processor (each test asserts so on the
shared stack, where any earlier test's would show), and each starts with an empty DLQ."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    MACHINE,
    attributes,
    dlq_messages,
    drain_dlq,
    invocations,
    ledger_rows,
    load_event,
)

INVALID_PATH = [
    "Claim",
    "UnreadableEvent",
    "DescribeInvalidEvent",
    "SendToDLQ",
    "DeadLetterReason",
    "InvalidEvent",
]
# An SQS message takes the same path: Claim's rules read the pipe's array too.
UNREADABLE_PATH = INVALID_PATH

Make = Callable[[LocalEngine], Any]


@pytest.fixture(scope="module")
def _default_stack() -> Iterator[LocalEngine]:
    with LocalEngine(function_log=io.StringIO()) as local:
        yield local


@pytest.fixture
def engine(_default_stack: LocalEngine) -> LocalEngine:
    """The module's default stack, its DLQ empty."""
    drain_dlq(_default_stack)
    return _default_stack


def _s3(change: Callable[[dict[str, Any]], None] | None = None) -> Make:
    """events/s3-object-created.json for the local stack's bucket, then changed."""

    def make(engine: LocalEngine) -> Any:
        event = copy.deepcopy(load_event("s3-object-created.json"))
        event["detail"]["bucket"]["name"] = engine.ref("IngestBucket")
        if change:
            change(event)
        return event

    return make


def _sqs(body: Any, drop_body: bool = False) -> Make:
    def make(engine: LocalEngine) -> Any:
        record = copy.deepcopy(json.loads(load_event_text("sqs-business-message.json")))
        if drop_body:
            del record[0]["body"]
        else:
            text = body if isinstance(body, str) else json.dumps(body)
            record[0]["body"] = text.replace("INGEST", engine.ref("IngestBucket"))
        return record

    return make


def load_event_text(name: str) -> str:
    from tests.helpers import EVENTS

    return (EVENTS / name).read_text(encoding="utf-8")


def _notification(key: str, bucket: str = "INGEST", **object_fields: Any) -> dict[str, Any]:
    body = json.loads(json.loads(load_event_text("sqs-s3-notification.json"))[0]["body"])
    body["Records"][0]["s3"]["bucket"]["name"] = bucket
    body["Records"][0]["s3"]["object"].update({"key": key, **object_fields})
    return body


def _set(path: list[str], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        node = event
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


def _drop(path: list[str]) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        node = event
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        for c in changes:
            c(event)

    return change


CASES = [
    pytest.param(
        lambda e: load_event("invalid-unknown-shape.json"),
        "unknown event shape",
        id="unknown-shape",
    ),
    pytest.param(lambda e: "just text", "the event is not a JSON object", id="not-an-object"),
    pytest.param(
        _s3(_drop(["detail", "object", "key"])), "detail.object.key is missing", id="s3-no-key"
    ),
    pytest.param(
        _s3(_drop(["detail", "bucket", "name"])), "detail.bucket.name is missing", id="s3-no-bucket"
    ),
    pytest.param(
        _s3(
            _both(
                _drop(["detail", "object", "version-id"]), _drop(["detail", "object", "sequencer"])
            )
        ),
        "neither version-id nor sequencer",
        id="s3-no-version-or-sequencer",
    ),
    pytest.param(
        _s3(_set(["detail-type"], "Object Deleted")),
        "unsupported S3 event detail-type: Object Deleted",
        id="s3-wrong-detail-type",
    ),
    pytest.param(
        _s3(_set(["detail", "bucket", "name"], "someone-elses-bucket")),
        "the bucket someone-elses-bucket is not the ingest bucket of this stack",
        id="s3-foreign-bucket",
    ),
    pytest.param(
        _s3(_set(["detail", "object", "key"], "k" * 1025)),
        "the object key is 1025 bytes; S3 allows at most 1024",
        id="s3-key-too-long",
    ),
    pytest.param(
        # 342 three-byte characters, URL-encoded: 1026 bytes once decoded.
        _s3(_set(["detail", "object", "key"], "%E2%98%95" * 342)),
        "the object key is 1026 bytes; S3 allows at most 1024",
        id="s3-key-too-long-in-utf8",
    ),
    pytest.param(
        _s3(_set(["detail", "object", "key"], "uploads/100%zz.png")),
        "detail.object.key is not a valid URL-encoded key",
        id="s3-malformed-escape",
    ),
    pytest.param(
        _s3(_set(["detail", "object", "key"], "uploads/%C3%28.png")),
        "detail.object.key is not a valid URL-encoded key",
        id="s3-escape-not-utf8",
    ),
    pytest.param(
        lambda e: {"workItem": {"key": "a.png", "versionId": "v"}},
        "workItem.bucket is missing",
        id="item-no-bucket",
    ),
    pytest.param(
        lambda e: {"workItem": {"bucket": e.ref("IngestBucket"), "versionId": "v"}},
        "workItem.key is missing",
        id="item-no-key",
    ),
    pytest.param(
        lambda e: {"workItem": {"bucket": e.ref("IngestBucket"), "key": "k"}},
        "workItem needs an idempotencyKey, a versionId or a sequencer",
        id="item-no-identity",
    ),
    pytest.param(
        lambda e: {"workItem": {"bucket": "other", "key": "k", "versionId": "v"}},
        "the bucket other is not the ingest bucket of this stack",
        id="item-foreign-bucket",
    ),
    pytest.param(
        lambda e: {**load_event("eventbridge-custom-event.json"), "detail": {"n": "x" * 140_000}},
        "bytes in UTF-8; the processor accepts at most 122880",
        id="event-too-large",
    ),
]


@pytest.mark.parametrize(("make", "message"), CASES)
def test_invalid_event_is_dead_lettered_with_a_named_failure(
    engine: LocalEngine, make: Make, message: str
) -> None:
    event = make(engine)
    result = engine.execute(MACHINE, event)
    _assert_invalid(engine, result, message, event)
    assert result.states_entered == INVALID_PATH


UNREADABLE = [
    pytest.param(lambda e: [1], "the array holds no SQS message", id="array-not-sqs"),
    pytest.param(
        lambda e: _sqs({"a": 1})(e) * 2,
        "the pipe delivered 2 messages in one batch; the processor takes one (BatchSize 1)",
        id="sqs-batch-of-two",
    ),
    pytest.param(_sqs("", drop_body=True), "the SQS message has no body", id="sqs-no-body"),
    pytest.param(
        _sqs('{"orderId": "o-1",'), "the SQS message could not be read", id="sqs-broken-json"
    ),
    pytest.param(
        _sqs(_notification("uploads/a.png", bucket="someone-elses-bucket")),
        "the bucket someone-elses-bucket is not the ingest bucket of this stack",
        id="sqs-s3-foreign-bucket",
    ),
    pytest.param(
        _sqs(_notification("uploads/%zz.png")),
        "s3.object.key is not a valid URL-encoded key",
        id="sqs-s3-malformed-escape",
    ),
    pytest.param(
        _sqs(_notification("k" * 1025)),
        "the object key is 1025 bytes; S3 allows at most 1024",
        id="sqs-s3-key-too-long",
    ),
    pytest.param(
        _sqs(_notification("uploads/a.png", versionId=None, sequencer=None)),
        "s3.object has neither versionId nor sequencer",
        id="sqs-s3-no-identity",
    ),
]


@pytest.mark.parametrize(("make", "message"), UNREADABLE)
def test_unreadable_message_is_dead_lettered_with_a_named_failure(
    engine: LocalEngine, make: Make, message: str
) -> None:
    event = make(engine)
    result = engine.execute(MACHINE, event)
    _assert_invalid(engine, result, message, event)
    assert result.states_entered == UNREADABLE_PATH


@pytest.fixture(scope="module")
def _keyed_stack() -> Iterator[LocalEngine]:
    parameters = {"IdempotencyKeyPath": "orderId"}
    # (a stack name of its own: the default stack still runs, in the same moto)
    with LocalEngine(
        parameters=parameters, function_log=io.StringIO(), stack_name="keyed"
    ) as local:
        yield local


@pytest.fixture
def keyed_engine(_keyed_stack: LocalEngine) -> LocalEngine:
    """The stack with IdempotencyKeyPath set (SQS messages are keyed by orderId), its DLQ
    empty."""
    drain_dlq(_keyed_stack)
    return _keyed_stack


KEYED = [
    pytest.param(
        "orderId=o-1&giftCards=1",
        "the SQS message body is not JSON, and IdempotencyKeyPath reads the key from a JSON body",
        id="body-not-json",
    ),
    pytest.param(
        {"customer": "c-1"}, "IdempotencyKeyPath yields nothing in the message body", id="no-key"
    ),
    pytest.param(
        {"orderId": {"id": 1}},
        "IdempotencyKeyPath yields object, not a string or a number",
        id="key-is-object",
    ),
    pytest.param({"orderId": "x" * 1025}, "the idempotency key is 1025 bytes", id="key-too-long"),
]


@pytest.mark.parametrize(("body", "message"), KEYED)
def test_message_without_a_usable_key_is_dead_lettered(
    keyed_engine: LocalEngine, body: Any, message: str
) -> None:
    event = _sqs(body)(keyed_engine)
    result = keyed_engine.execute(MACHINE, event)
    _assert_invalid(keyed_engine, result, message, event)
    assert result.states_entered == UNREADABLE_PATH


def _assert_invalid(engine: LocalEngine, result: Any, message: str, event: Any) -> None:
    assert result.status == "FAILED"
    assert result.error == "InvalidEvent"
    assert result.cause is not None and message in result.cause
    assert invocations(engine) == 0
    assert ledger_rows(engine) == []  # no PROCESSING row, no row at all
    messages = dlq_messages(engine)
    assert len(messages) == 1
    attrs = attributes(messages[0])
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"
    assert attrs["ERROR_CODE"] == "InvalidEvent"
    assert message in attrs["ERROR_MESSAGE"]
    assert attrs["RETRY_ATTEMPTS"] == "0"
    assert attrs["EXECUTION_ARN"] == result.arn
    assert "IDEMPOTENCY_KEY" not in attrs  # there is no key to name
    body = json.loads(messages[0]["Body"])
    if len(json.dumps(event, ensure_ascii=False).encode()) > 122880:
        assert body["event"] is None and body["eventBytes"] > 122880
        assert json.dumps(event, separators=(",", ":")).startswith(body["eventExcerpt"])
    else:
        assert body == {"event": event, "workItem": None}
