"""The arithmetic of onceflow.local.limits: how each AWS quota measures what it limits.

The engine-level behaviour (what fails, with which error) is in
tests/workflow/test_limits.py; these pin the sizes against the AWS docs' rules.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import types

import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.eval import environment as sfn_environment

from onceflow.local import limits
from onceflow.local.engine import LocalEngine


def test_state_size_counts_utf8_bytes_of_compact_json() -> None:
    # GIVEN 30,000 "é": 60,000 bytes of UTF-8; 180,000 as ASCII-escaped JSON
    text = "é" * 30_000
    # WHEN sized
    # THEN as Step Functions holds it: compact JSON text, UTF-8 (quotes and keys count)
    assert limits.states.json_bytes(text) == 60_002
    assert limits.states.json_bytes({"t": text, "n": [1, 2]}) == 60_000 + len('{"t":"","n":[1,2]}')
    assert len(json.dumps(text)) == 180_002  # what moto measured


def test_the_state_quota_is_at_most_262144_bytes() -> None:
    # GIVEN objects of exactly 262,144 and 262,145 bytes
    # WHEN checked  THEN the first fits (moto's "<" refused it) and the second does not
    assert limits.states.within_state_quota({"t": "x" * (262_144 - 8)})
    assert not limits.states.within_state_quota({"t": "x" * (262_144 - 7)})


def test_a_lone_surrogate_is_sized_as_its_json_escape() -> None:
    # GIVEN bare strings and objects holding a lone surrogate (state data may)
    # WHEN sized  THEN the escape's six characters count, and nothing raises
    assert limits.states.json_bytes("\ud800") == len('"\\ud800"')
    assert limits.states.within_state_quota({"k": "a\udc00b"})
    # a pair is one 4-byte character
    assert limits.states.json_bytes("a\U0001f600") == len('"a"') + 4


def test_control_characters_count_as_their_escapes() -> None:
    # GIVEN text with characters JSON escapes  WHEN sized  THEN their escapes count
    assert limits.states.json_bytes("\x01\n") == len('"\\u0001\\n"')


def test_stock_motos_own_size_checks_differ_from_aws() -> None:
    # Why the Step Functions and SQS size patches exist (moto 5.2.5): moto counts a
    # state's data as ASCII-escaped JSON and refuses exactly 262,144 bytes; it counts
    # an SQS body in characters. AWS: "256 KiB of data as a UTF-8 encoded string"
    # (Step Functions service quotas); SQS counts bytes (SendMessage API reference).
    # When a moto release counts as AWS does, this test fails: drop the patch then.
    from types import SimpleNamespace

    from moto.sqs.models import SQSBackend
    from moto.stepfunctions.parser.quotas import is_within_size_quota

    accented = {"t": "é" * 100_000}  # 200,014 bytes of UTF-8
    at_the_limit = {"t": "x" * (262_144 - 8)}  # 262,144 bytes
    assert not is_within_size_quota(accented) and not is_within_size_quota(at_the_limit)
    assert limits.states.within_state_quota(accented)
    assert limits.states.within_state_quota(at_the_limit)
    queue = SimpleNamespace(fifo_queue=False, maximum_message_size=262_144, attributes={})
    body = "é" * 200_000  # 400,000 bytes: SQS refuses it
    SQSBackend._validate_message(None, queue, body, 0)  # type: ignore[arg-type]
    assert limits.sqs.sqs_message_size(body, None) == 400_000


@pytest.mark.parametrize(
    ("number", "problem"),
    [
        ("1" * 38, None),
        ("1" * 39, "Attempting to store more than 38 significant digits in a Number"),
        ("1" + "0" * 100, None),  # trailing zeroes are trimmed: one significant digit
        ("0.000000000000000000000000000000000000001234", None),  # leading zeroes too
        ("9.9999999999999999999999999999999999999E+125", None),
        ("1E+126", limits.dynamodb._NUMBER_OVERFLOW),
        ("-1E+126", limits.dynamodb._NUMBER_OVERFLOW),
        ("1E-130", None),
        ("-1E-130", None),
        ("9E-131", limits.dynamodb._NUMBER_UNDERFLOW),
        ("0", None),
        ("0E-500", None),  # zero is not an underflow
        ("abc", None),  # not a number: DynamoDB's other message, moto's to give
    ],
)
def test_dynamodb_numbers(number: str, problem: str | None) -> None:
    # GIVEN a number as DynamoDB receives it (a string)  WHEN checked
    # THEN DynamoDB's answer: 38 significant digits, 1E-130 .. 9.99...E+125
    assert limits.dynamodb.number_problem(number) == problem


def test_dynamodb_item_size_follows_the_documented_formula() -> None:
    # GIVEN one attribute of each type
    item = {
        "s": {"S": "é"},  # 1 + 2
        "n": {"N": "12345"},  # 1 + (5 digits / 2, up) + 1
        "b": {"B": base64.b64encode(b"abc").decode()},  # 1 + 3 raw bytes
        "t": {"BOOL": True},  # 1 + 1
        "z": {"NULL": True},  # 1 + 1
        "l": {"L": [{"S": "ab"}, {"N": "1"}]},  # 1 + 3 + (1 + 2) + (1 + 2)
        "m": {"M": {"k": {"S": "v"}}},  # 1 + 3 + (1 + 1 + 1)
        "ss": {"SS": ["a", "bc"]},  # 2 + 3
        "ns": {"NS": ["100", "2"]},  # 2 + 2 + 2
    }
    # WHEN sized  THEN each as "DynamoDB item sizes and formats" counts it
    assert limits.dynamodb.item_size(item) == 3 + 5 + 4 + 2 + 2 + 10 + 7 + 5 + 6


def test_an_sqs_message_counts_body_and_attributes_in_bytes() -> None:
    # GIVEN a body of 3 "é" and two attributes  WHEN sized
    attributes = {
        "kind": {"DataType": "String", "StringValue": "ü"},
        "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
    }
    # THEN bytes of the body, and of each attribute's name, data type and value
    assert limits.sqs.sqs_message_size("ééé", attributes) == 6 + (4 + 6 + 2) + (3 + 6 + 2)


def test_a_message_with_more_than_ten_attributes_is_refused(engine: LocalEngine) -> None:
    # AWS: "Each message can have up to 10 attributes" (SQS Developer Guide,
    # sqs-message-metadata.html); live SQS answers 400 "Number of message attributes [11]
    # exceeds the allowed maximum [10]." (open-telemetry/opentelemetry-java-instrumentation
    # #13799); the code InvalidParameterValue as elasticmq and other emulators give it
    # (not verified on AWS). moto 5.2.5 took 11 and more.
    sqs = engine.client("sqs")
    url = sqs.create_queue(QueueName="many-attributes")["QueueUrl"]

    def attributes(count: int) -> dict[str, dict[str, str]]:
        return {f"a{n}": {"DataType": "String", "StringValue": "v"} for n in range(count)}

    refused = (
        "InvalidParameterValue",
        "Number of message attributes [11] exceeds the allowed maximum [10].",
    )
    # GIVEN a message with 11 attributes  WHEN it is sent, alone or in a batch
    with pytest.raises(ClientError) as alone:
        sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attributes(11))
    entries = [
        {"Id": "fits", "MessageBody": "m", "MessageAttributes": attributes(10)},
        {"Id": "over", "MessageBody": "m", "MessageAttributes": attributes(11)},
    ]
    with pytest.raises(ClientError) as batch:
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    # THEN SQS refuses it, and nothing is queued (the whole batch refused: harsher than
    # or as AWS, which may fail that entry alone; not verified)
    assert (alone.value.response["Error"]["Code"], alone.value.response["Error"]["Message"]) == (
        refused
    )
    assert batch.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "[11] exceeds the allowed maximum [10]" in batch.value.response["Error"]["Message"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    # ... and ten attributes are taken
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attributes(10))
    sqs.send_message_batch(QueueUrl=url, Entries=entries[:1])


def test_a_put_events_entry_is_sized_as_eventbridge_documents() -> None:
    # GIVEN an entry with a Time, Source, DetailType, Detail and two Resources
    entry = {
        "Time": "2026-01-01T00:00:00Z",
        "Source": "src",
        "DetailType": "tÿpe",
        "Detail": '{"a":1}',
        "Resources": ["r1", "r22"],
    }
    # WHEN sized  THEN 14 bytes for the Time, UTF-8 bytes for the rest
    assert limits.eventbridge.put_events_entry_size(entry) == 14 + 3 + 5 + 7 + 2 + 3
    assert limits.eventbridge.put_events_entry_size({"Source": "s", "DetailType": "d"}) == 2


def test_the_limits_are_undone_when_the_last_engine_stops() -> None:
    from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager

    # GIVEN two engines, one inside the other
    with LocalEngine(function_log=io.StringIO(), stack_name="outer") as outer:
        with LocalEngine(function_log=io.StringIO(), stack_name="inner") as inner:
            assert isinstance(vars(inner.runtime)["invoke"], limits.lambda_timeout.TimedInvoke)
        # WHEN the inner one stops
        # THEN the outer one keeps them
        assert EventManager.add_event is limits.states._add_event
        assert "invoke" not in vars(inner.runtime)
        assert isinstance(vars(outer.runtime)["invoke"], limits.lambda_timeout.TimedInvoke)
    # ... and when the last stops, moto is as patches.py alone leaves it
    assert EventManager.add_event is not limits.states._add_event
    assert "invoke" not in vars(outer.runtime)
    # and stopping again changes nothing
    outer.stop()
    assert "invoke" not in vars(outer.runtime)
    assert EventManager.add_event is not limits.states._add_event


def test_an_execution_ended_at_a_limit_keeps_that_end_against_a_racing_error(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an execution ending at a limit: the limit holds its lock while it sets its own
    # error, and marks the end closed only after (ExecutionLimits._close)
    set_error = sfn_environment.Environment.set_error  # the limits' guard, installed
    errors: list[str] = []
    monkeypatch.setitem(limits.common.ORIGINAL, set_error, lambda env, error: errors.append(error))
    record = limits.states.ExecutionLimits.__new__(limits.states.ExecutionLimits)
    record.lock, record.closed = threading.RLock(), False
    env = types.SimpleNamespace(event_manager=types.SimpleNamespace())
    setattr(env.event_manager, limits.states._RECORD, record)
    ending, other = threading.Event(), threading.Thread(target=set_error, args=(env, "other"))

    def close() -> None:
        with record.lock:
            set_error(env, "limit")
            ending.set()
            time.sleep(0.3)  # a state on another thread fails meanwhile
            record.closed = True

    closer = threading.Thread(target=close)
    closer.start()
    ending.wait(5)
    # WHEN a state's error is set on another thread in that instant
    other.start()
    closer.join(5)
    other.join(5)
    # THEN the limit's end stands: the other error waited for it, and was not set
    assert errors == ["limit"]
