"""The 256 KiB execution input limit, counted as AWS counts it at every entry.

Step Functions takes "256 KiB of data as a UTF-8 encoded string" per execution
input (Step Functions service quotas). The engine hands its input over as
compact JSON in UTF-8: an "é" is two bytes, an emoji four, never the six or
twelve of json.dumps's ASCII escaping. Each entry (StartExecution through the
engine, an EventBridge rule, the pipe, a redrive) is tested with text just under and just
over the limit; over it, the start is refused as AWS refuses it and the entry's
own dead-letter path takes the event.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow import ops
from onceflow.local.engine import LocalEngine
from onceflow.local.target import LocalTarget
from tests.helpers import attributes, dlq_messages, ledger_rows, load_event
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes

LIMIT = 262_144
ROLE = "arn:aws:iam::123456789012:role/input-probe"
ECHO = {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": True}}}


def _compact(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _padded(template: dict[str, Any], char: str, size: int) -> dict[str, Any]:
    """template with its "text" filled with char (and ASCII) to exactly `size` bytes."""
    empty = _compact({**template, "text": ""})
    count, rest = divmod(size - empty, len(char.encode()))
    value = {**template, "text": char * count + "a" * rest}
    assert _compact(value) == size
    return value


@pytest.mark.parametrize("char", ["é", "😀"])
def test_start_execution_counts_utf8_bytes_of_compact_json(engine: LocalEngine, char: str) -> None:
    # GIVEN an input of exactly 256 KiB of compact UTF-8 JSON (three to six times
    # that as ASCII-escaped JSON), and one a byte longer
    arn = engine.client("stepfunctions").create_state_machine(
        name="echo", definition=json.dumps(ECHO), roleArn=ROLE
    )["stateMachineArn"]
    fits = _padded({}, char, LIMIT)
    over = _padded({}, char, LIMIT + 1)
    # WHEN each is started
    result = engine.execute(arn, fits)
    # THEN the first runs; the second is refused before anything starts
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output == fits
    with pytest.raises(ClientError) as refused:
        engine.start_execution(arn, over)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert f"{LIMIT + 1} bytes" in refused.value.response["Error"]["Message"]


def _ingress_dead_letters(engine: LocalEngine) -> list[dict[str, Any]]:
    response = engine.client("sqs").receive_message(
        QueueUrl=engine.ref("IngressDeadLetterQueue"),
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=0,
    )
    return list(response.get("Messages", []))


@pytest.mark.parametrize("char", ["é", "😀"])
def test_an_eventbridge_event_at_the_limit_starts_and_one_byte_more_is_dead_lettered(
    engine: LocalEngine, char: str
) -> None:
    # GIVEN custom events of exactly 256 KiB and one byte more, in accented or emoji text
    envelope = load_event("eventbridge-custom-event.json")

    def event(size: int) -> dict[str, Any]:
        detail = {"appointmentId": f"limit-{size}", "notes": ""}
        empty = _compact({**envelope, "detail": detail})
        count, rest = divmod(size - empty, len(char.encode()))
        whole = {**envelope, "detail": {**detail, "notes": char * count + "a" * rest}}
        assert _compact(whole) == size
        return whole

    # WHEN the rule delivers each
    [started] = engine.put_event(event(LIMIT))
    # THEN the first starts the processor, which judges it itself (over what it
    # accepts, so InvalidEvent: not the ingress DLQ's business)
    assert engine.wait(started).outcome == "InvalidEvent"
    assert _ingress_dead_letters(engine) == []
    # AND the second is refused by Step Functions and lands in the ingress DLQ intact
    over = event(LIMIT + 1)
    assert engine.put_event(over) == []
    [message] = _ingress_dead_letters(engine)
    assert attributes(message)["ERROR_CODE"] == "ValidationException"
    assert json.loads(message["Body"]) == over
    # in UTF-8, as the rule's SQS targets get an event: not three to six times its size in
    # JSON's ASCII escapes, which could pass SQS's own size limit where the event does not
    assert char in message["Body"]


@pytest.fixture
def sqs_engine() -> Iterator[LocalEngine]:
    """The stack with a created source queue (orders keyed by orderId), taking 1 MiB."""
    parameters = {"SqsSource": "create", "IdempotencyKeyPath": "orderId"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local:
        local.client("sqs").set_queue_attributes(
            QueueUrl=local.ref("SourceQueue"), Attributes={"MaximumMessageSize": "1048576"}
        )
        yield local


def _queued(engine: LocalEngine, logical_id: str) -> list[dict[str, Any]]:
    response = engine.client("sqs").receive_message(
        QueueUrl=engine.ref(logical_id), MaxNumberOfMessages=10, VisibilityTimeout=0
    )
    return list(response.get("Messages", []))


def test_the_pipe_starts_a_batch_of_accented_messages_aws_accepts() -> None:
    # GIVEN batch mode, and ten orders of 5,600 "é" each: 11 KB apiece in UTF-8 (as
    # large as its queue takes), about 117 KB for the batch (AWS takes it), 340 KB as
    # ASCII-escaped JSON
    with LocalEngine(parameters=BATCH_PARAMETERS, function_log=io.StringIO()) as engine:
        sqs = engine.client("sqs")
        url = engine.ref("SourceQueue")
        for n in range(10):
            order = {"orderId": f"accented-{n}", "notes": "é" * 5_600}
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps(order, ensure_ascii=False))
        # WHEN the pipe hands them over
        [arn] = engine.pump_pipes()
        # THEN the batch started as one execution, nothing went to the source DLQ,
        # and every order was processed
        assert len(engine.wait(arn).input) == 10
        assert {o["outcome"] for o in outcomes(engine, arn).values()} == {"Processed"}
        assert _queued(engine, "SourceDeadLetterQueue") == []
        assert _queued(engine, "SourceQueue") == []


def test_the_pipe_refuses_an_emoji_message_over_the_limit_into_the_source_dlq(
    sqs_engine: LocalEngine,
) -> None:
    # GIVEN one order of 62,000 emoji (248 KB in UTF-8: its record fits) and one of
    # 66,000 (264 KB: no record of it fits)
    sqs = sqs_engine.client("sqs")
    url = sqs_engine.ref("SourceQueue")
    body = json.dumps({"orderId": "emoji-fits", "notes": "😀" * 62_000}, ensure_ascii=False)
    sqs.send_message(QueueUrl=url, MessageBody=body)
    # WHEN the pipe runs
    [started] = sqs_engine.pump_pipes()
    # THEN the first starts; the processor judges it itself (over what it accepts:
    # InvalidEvent, to the processor's DLQ, never the source DLQ)
    assert sqs_engine.wait(started).outcome == "InvalidEvent"
    assert _queued(sqs_engine, "SourceDeadLetterQueue") == []
    # WHEN the second arrives
    body = json.dumps({"orderId": "emoji-over", "notes": "😀" * 66_000}, ensure_ascii=False)
    sqs.send_message(QueueUrl=url, MessageBody=body)
    # THEN Step Functions refuses it: after the queue's redrive it is in the source
    # DLQ, intact, and no row was written for it
    assert sqs_engine.pump_pipes() == []
    [dead] = _queued(sqs_engine, "SourceDeadLetterQueue")
    assert json.loads(dead["Body"])["orderId"] == "emoji-over"
    assert ledger_rows(sqs_engine) == []


def test_redrive_restarts_an_accented_event_aws_accepts(engine: LocalEngine) -> None:
    # GIVEN an event of 100,000 "é" (200 KB in UTF-8, 600 KB as ASCII-escaped JSON):
    # over what the processor accepts, so it ends InvalidEvent with its DLQ message
    event = {"detail": {"notes": "é" * 100_000}, "source": "elsewhere"}
    first = engine.execute("ProcessorStateMachine", event)
    assert first.outcome == "InvalidEvent"
    assert len(dlq_messages(engine)) == 1
    # WHEN it is redriven, InvalidEvent messages asked for (the DLQ body holds an
    # excerpt; the input comes from the history)
    report = ops.redrive(LocalTarget(engine), include_invalid=True)
    # THEN Step Functions takes the restart, as it took the first start
    (moved,) = report.messages
    assert moved.action == "resubmitted", moved
    assert engine.wait(str(moved.execution_arn)).input == event


@pytest.mark.parametrize("refused", ["\uffff", "\ud800"])
def test_a_dead_lettered_event_holding_a_character_sqs_refuses_is_not_lost(
    engine: LocalEngine, refused: str
) -> None:
    # A character SQS refuses in a body (U+FFFF; SendMessage API reference: #x9 | #xA | #xD |
    # #x20 to #xD7FF | #xE000 to #xFFFD | ...) sent raw would fail the send: the event lost.
    # GIVEN an event a rule must dead-letter (over 256 KiB) that holds one (or a lone surrogate)
    envelope = load_event("eventbridge-custom-event.json")
    over = {**envelope, "detail": {"appointmentId": "odd", "notes": refused + "a" * LIMIT}}
    # WHEN it is put THEN it is dead-lettered, whole, not lost
    assert engine.put_event(over) == []
    [message] = _ingress_dead_letters(engine)
    assert attributes(message)["ERROR_CODE"] == "ValidationException"
    assert json.loads(message["Body"]) == over
