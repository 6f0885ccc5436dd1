"""Keys are never rounded, and Claim's rules refuse what its row or the DLQ message could not hold.

Before, such inputs were accepted by the rules and failed inside the PutItem (no
row, no DLQ message: an SQS message already deleted by the pipe was lost), or
collapsed two orders into one key (the second dropped as a Duplicate).
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    MACHINE,
    attributes,
    dlq_messages,
    drain_dlq,
    ledger_rows,
    load_event,
    upload,
)

PROCESSED_SQS = ["Claim", "Process", "MarkComplete"]
STRING_ADVICE = "send the key as a string"


def sqs_message(body: Any) -> list[dict[str, Any]]:
    """events/sqs-business-message.json with another body (a JSON text, or raw text)."""
    record = copy.deepcopy(load_event("sqs-business-message.json"))
    record[0]["body"] = body if isinstance(body, str) else json.dumps(body)
    return list(record)


def custom_event(detail: dict[str, Any]) -> dict[str, Any]:
    event = copy.deepcopy(load_event("eventbridge-custom-event.json"))
    event["detail"] = detail
    return dict(event)


KEYED = {"IdempotencyKeyPath": "orderId", "CustomEventKeyPath": "orderId"}
_STACKS = count()


@pytest.fixture
def keyed() -> Iterator[LocalEngine]:
    """SQS messages keyed by orderId; custom events keyed by detail.orderId. A stack name
    of its own: while the module's stack (`refusing`) runs, moto keeps what an earlier
    test's stack made, and a second stack of one name would find it."""
    with LocalEngine(
        parameters=KEYED, function_log=io.StringIO(), stack_name=f"keyed-{next(_STACKS)}"
    ) as local:
        yield local


@pytest.fixture(scope="module")
def _refusing_stack() -> Iterator[LocalEngine]:
    with LocalEngine(parameters=KEYED, function_log=io.StringIO(), stack_name="refusing") as local:
        yield local


@pytest.fixture
def refusing(_refusing_stack: LocalEngine) -> LocalEngine:
    """The keyed stack, shared by the tests of inputs it refuses (an engine start each was
    most of their time): none writes a row (each asserts so, where an earlier test's row
    would show too), and each starts with an empty DLQ (each asserts its one message)."""
    drain_dlq(_refusing_stack)
    return _refusing_stack


def assert_invalid(engine: LocalEngine, result: Any, message: str) -> None:
    """InvalidEvent, the reason named, no ledger row, exactly one DLQ message."""
    assert result.status == "FAILED"
    assert result.error == "InvalidEvent", (result.error, result.cause)
    assert message in (result.cause or "")
    assert ledger_rows(engine) == []
    (dead,) = dlq_messages(engine)
    assert attributes(dead)["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"
    assert message in attributes(dead)["ERROR_MESSAGE"]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda order: sqs_message({"orderId": order}), id="sqs"),
        pytest.param(lambda order: custom_event({"orderId": order}), id="custom-event"),
    ],
)
def test_two_orders_that_differ_past_15_digits_are_two_units_of_work(
    keyed: LocalEngine, make: Callable[[Any], Any]
) -> None:
    # GIVEN two orders whose ids differ only in the 16th digit, sent as strings
    orders = ["1234567890123456", "1234567890123457"]
    # WHEN both are delivered
    results = [keyed.execute(MACHINE, make(order)) for order in orders]
    # THEN both are processed, under their own keys
    assert [r.output["status"] for r in results] == ["PROCESSED", "PROCESSED"]
    keys = sorted(row["pk"] for row in ledger_rows(keyed))
    assert [k.rsplit(":", 1)[-1] for k in keys] == orders
    assert all(row["status"] == "PROCESSED" for row in ledger_rows(keyed))


def test_a_whole_number_key_of_fifteen_digits_is_kept(keyed: LocalEngine) -> None:
    result = keyed.execute(MACHINE, sqs_message({"orderId": 999999999999999}))
    assert result.output["status"] == "PROCESSED"
    assert [row["pk"] for row in ledger_rows(keyed)] == ["sqs:999999999999999"]


def test_a_payload_holding_a_lone_surrogate_is_recorded_as_json(keyed: LocalEngine) -> None:
    # GIVEN a message whose key is fine but whose payload holds a lone surrogate (JSON allows
    # "\ud800"; UTF-8 cannot encode it)
    body = '{"orderId": "o-lone", "note": "a\\ud800b"}'
    # WHEN it is processed by the bundled processor
    result = keyed.execute(MACHINE, sqs_message(body))
    # THEN it is processed once, and the record is JSON that reads back as the payload
    assert result.output["status"] == "PROCESSED", (result.error, result.cause)
    output = result.output["result"]["output"].removeprefix("s3://").split("/", 1)
    record = keyed.client("s3").get_object(Bucket=output[0], Key=output[1])["Body"].read()
    assert json.loads(record) == {"orderId": "o-lone", "note": "a\ud800b"}


# ---- refused: these share the module's stack (`refusing`)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda order: sqs_message({"orderId": order}), id="sqs"),
        pytest.param(lambda order: custom_event({"orderId": order}), id="custom-event"),
    ],
)
@pytest.mark.parametrize("order", [1234567890123456, 1234567890123457, 12.5, -(10**15)])
def test_a_number_that_a_key_cannot_keep_exactly_is_refused(
    refusing: LocalEngine, make: Callable[[Any], Any], order: float
) -> None:
    # GIVEN an order id that JSONata's $string would round (16 digits) or that is not whole
    # WHEN it is delivered as a JSON number
    result = refusing.execute(MACHINE, make(order))
    # THEN it is refused, with the advice to send it as a string, and nothing is dropped silently
    assert_invalid(refusing, result, STRING_ADVICE)


def test_an_infinite_number_in_a_message_body_is_refused(refusing: LocalEngine) -> None:
    # GIVEN a body whose key overflows a double (1e400 parses as Infinity)
    result = refusing.execute(MACHINE, sqs_message('{"orderId": 1e400}'))
    # THEN it is an InvalidEvent, not an error inside a state
    assert_invalid(refusing, result, STRING_ADVICE)


def s3(engine: LocalEngine, **object_fields: Any) -> dict[str, Any]:
    event = copy.deepcopy(load_event("s3-object-created.json"))
    event["detail"]["bucket"]["name"] = engine.ref("IngestBucket")
    event["detail"]["object"].update(object_fields)
    return dict(event)


def direct(engine: LocalEngine, **fields: Any) -> dict[str, Any]:
    item = {"bucket": engine.ref("IngestBucket"), "key": "uploads/a.png", "versionId": "v1"}
    return {"workItem": {**item, **fields}}


LONE = "\ud800"

REFUSED_BY_CLAIM_BEFORE = [
    pytest.param(lambda e: s3(e, **{"version-id": "v" * 3000}), "2048", id="version-id-3000"),
    pytest.param(
        lambda e: s3(e, **{"version-id": "null", "sequencer": "0" * 3000}), "2048", id="seq-3000"
    ),
    pytest.param(
        lambda e: s3(e, key="k" * 1000, **{"version-id": "v" * 1100}),
        "2048",
        id="composed-key-over-2048-bytes",
    ),
    pytest.param(
        lambda e: direct(e, idempotencyKey=""), "the idempotency key is empty", id="empty"
    ),
    pytest.param(lambda e: s3(e, size=1e300), "object size", id="size-1e300"),
    pytest.param(lambda e: s3(e, size=1e-200), "object size", id="size-1e-200"),
    pytest.param(lambda e: s3(e, size=-1), "object size", id="size-negative"),
    pytest.param(lambda e: s3(e, key=f"uploads/{LONE}.png"), "not valid Unicode", id="s3-key-lone"),
    pytest.param(lambda e: direct(e, key=f"a{LONE}"), "not valid Unicode", id="item-key-lone"),
    pytest.param(lambda e: s3(e, etag=f"x{LONE}"), "etag is not valid Unicode", id="etag-lone"),
    pytest.param(
        lambda e: {**custom_event({"orderId": "o-1"}), "id": f"id-{LONE}"},
        "eventId is not valid Unicode",
        id="event-id-lone",
    ),
    pytest.param(
        lambda e: custom_event({"orderId": f"o-{LONE}"}), "not valid Unicode", id="event-key-lone"
    ),
    pytest.param(
        lambda e: sqs_message('{"orderId": "o-\\ud800"}'), "not valid Unicode", id="sqs-key-lone"
    ),
    pytest.param(
        lambda e: custom_event({"orderId": ""}), "yields an empty string", id="event-key-empty"
    ),
]


@pytest.mark.parametrize(("make", "message"), REFUSED_BY_CLAIM_BEFORE)
def test_what_claim_would_refuse_is_an_invalid_event(
    refusing: LocalEngine, make: Callable[[LocalEngine], Any], message: str
) -> None:
    # GIVEN an input Claim (DynamoDB: 2048-byte keys, number range, valid UTF-8) would refuse
    upload(refusing, "uploads/a.png")
    # WHEN it is delivered
    result = refusing.execute(MACHINE, make(refusing))
    # THEN Claim's rules refuse it by name: InvalidEvent, one DLQ message, no row
    assert_invalid(refusing, result, message)


def test_a_key_path_written_from_the_body_itself_keys_as_the_bare_path() -> None:
    # GIVEN a key path written as JSONPath users write it, from the body itself ($.)
    parameters = {"SqsSource": "create", "IdempotencyKeyPath": "$.orderId"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as local:
        # WHEN an order is delivered
        result = local.execute(MACHINE, sqs_message({"orderId": "o-7"}))
        # THEN it is keyed by its orderId, as `orderId` would key it
        assert result.outcome == "Processed", (result.error, result.cause)
        assert [row["pk"] for row in ledger_rows(local)] == ["sqs:o-7"]
