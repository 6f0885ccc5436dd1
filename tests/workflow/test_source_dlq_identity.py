"""A message keyed by its SQS messageId (IdempotencyKeyPath empty) keeps its identity when
`onceflow redrive --queue source` moves it back from the source queue's DLQ.

SendMessage gives every message it sends a new MessageId, so a moved-back message keyed
by ``sqs:<messageId>`` was new work, processed a second time. Redrive now sends it with
the ONCEFLOW_MESSAGE_ID attribute (the first messageId it had; kept on a second move),
and Claim keys by that attribute when present. Every failure here is injected for real:
MarkComplete throttled past its retries (a ledger outage after the work was done), and
a start whose response the pipe never gets.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow import ops
from onceflow.harness.chaos_queue import large_non_ascii_body
from onceflow.local import executions
from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.target import LocalTarget
from onceflow.ops.redrive import ORIGINAL_ID
from tests.helpers import (
    FUNCTION,
    MACHINE,
    TransientError,
    attributes,
    dlq_messages,
    expire_lock,
    invocations,
    ledger_row,
    ledger_rows,
    load_event,
    output_effects,
    run_audit,
)
from tests.workflow.test_audit_dead_letter import always
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes, queued
from tests.workflow.test_failure_paths import failing, throttled
from tests.workflow.test_p11_review import _ORDERS as ORDERS
from tests.workflow.test_p11_review import _orders_queue

SOURCE_DLQ = "SourceDeadLetterQueue"


def _engine(**parameters: str) -> LocalEngine:
    return LocalEngine(
        DEFAULT_TEMPLATE,
        {"AuditRecentCutoffHours": "0", **parameters},
        function_log=io.StringIO(),
        time_scale=0.0,
    )


@pytest.fixture
def batch_engine() -> Iterator[LocalEngine]:
    # the batch mode, and no IdempotencyKeyPath: a message is keyed by its messageId
    with _engine(**{**BATCH_PARAMETERS, "IdempotencyKeyPath": ""}) as engine:
        yield engine


@pytest.fixture
def single_engine() -> Iterator[LocalEngine]:
    with _engine(SqsSource="create", IdempotencyKeyPath="") as engine:
        yield engine


def _send(engine: LocalEngine, order: str) -> str:
    return str(
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps({"orderId": order})
        )["MessageId"]
    )


def _exhaust_receives(engine: LocalEngine) -> None:
    """Deliver until the queue's redrive policy moves what stays to its DLQ."""
    policy = engine.client("sqs").get_queue_attributes(
        QueueUrl=engine.ref("SourceQueue"), AttributeNames=["RedrivePolicy"]
    )["Attributes"]["RedrivePolicy"]
    for _ in range(int(json.loads(policy)["maxReceiveCount"]) + 1):
        engine.pump_pipes()


def _source_dlq_attributes(engine: LocalEngine) -> list[dict[str, Any]]:
    sqs = engine.client("sqs")
    return [
        m.get("MessageAttributes", {})
        for m in sqs.receive_message(
            QueueUrl=engine.ref(SOURCE_DLQ),
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=0,
        ).get("Messages", [])
    ]


def test_a_batch_message_moved_back_after_a_ledger_outage_keeps_its_key(
    batch_engine: LocalEngine,
) -> None:
    engine = batch_engine
    # GIVEN an order processed once, whose MarkComplete was throttled past its retries
    message = _send(engine, "order-outage")
    key = f"sqs:{message}"
    with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        [arn] = engine.pump_pipes()
    [outcome] = outcomes(engine, arn).values()
    assert (outcome["outcome"], outcome["retry"]) == ("LedgerUnavailable", True)
    assert invocations(engine) == 1 and output_effects(engine) == 1
    # AND its message handed back (a Duplicate under the live lock) until the queue's
    # redrive policy moved it to the source DLQ
    _exhaust_receives(engine)
    assert queued(engine) == {} and list(queued(engine, SOURCE_DLQ).values()) == ["order-outage"]
    # WHEN the operator moves it back (SendMessage: a new messageId)
    report = ops.redrive(LocalTarget(engine), queue="source")
    assert report.count("resubmitted") == 1
    [moved] = queued(engine)
    assert moved != message
    [arn] = engine.pump_pipes()
    # THEN it is the same unit of work: a Duplicate under the live lock, kept in the queue,
    # the processor not called again, no second row
    [outcome] = outcomes(engine, arn).values()
    assert (outcome["outcome"], outcome["retry"]) == ("Duplicate", True)
    assert invocations(engine) == 1 and output_effects(engine) == 1
    assert [r["pk"] for r in ledger_rows(engine)] == [key]
    # AND once the dead execution's lock expires, its redelivery completes the one row
    expire_lock(engine, key)
    [arn] = engine.pump_pipes()
    [outcome] = outcomes(engine, arn).values()
    assert (outcome["outcome"], outcome["retry"]) == ("Processed", False)
    done = ledger_row(engine, key) or {}
    assert done["status"] == "PROCESSED" and done["message_id"] == message  # its first claim
    assert [r["pk"] for r in ledger_rows(engine)] == [key]
    assert output_effects(engine) == 1
    assert queued(engine) == {} and queued(engine, SOURCE_DLQ) == {}
    assert dlq_messages(engine) == []


def test_a_message_moved_twice_keeps_its_first_id(batch_engine: LocalEngine) -> None:
    engine = batch_engine
    # GIVEN an order processed once under a lock that has not expired (its MarkComplete
    # throttled), moved back from the source DLQ once and dead-lettered there again
    message = _send(engine, "order-twice")
    with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        engine.pump_pipes()
    _exhaust_receives(engine)
    ops.redrive(LocalTarget(engine), queue="source")
    _exhaust_receives(engine)
    [held] = _source_dlq_attributes(engine)
    assert held[ORIGINAL_ID] == {"StringValue": message, "DataType": "String"}
    # WHEN it is moved back a second time and its lock has expired
    ops.redrive(LocalTarget(engine), queue="source")
    expire_lock(engine, f"sqs:{message}")
    engine.pump_pipes()
    # THEN the attribute still names the first messageId: one row, one effect
    assert [r["pk"] for r in ledger_rows(engine)] == [f"sqs:{message}"]
    assert (ledger_row(engine, f"sqs:{message}") or {})["status"] == "PROCESSED"
    assert invocations(engine) == 2 and output_effects(engine) == 1  # the reclaim's call
    assert queued(engine) == {} and queued(engine, SOURCE_DLQ) == {}


def _spend_receives(engine: LocalEngine) -> None:
    """The pipe cannot run what the queue holds (at its maximum concurrency, throttled) while
    SQS counts every receive (eb-pipes-error-troubleshooting.html): receives that run
    nothing, until the queue's redrive policy moves the messages to its DLQ."""
    sqs, url = engine.client("sqs"), engine.ref("SourceQueue")
    for _ in range(20):
        if not queued(engine):
            return
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    raise AssertionError("the source queue never moved its messages to its DLQ")


def test_a_message_with_no_room_for_the_attribute_is_started_under_its_first_id(
    batch_engine: LocalEngine,
) -> None:
    engine = batch_engine
    # GIVEN an order sent with SQS's maximum of 10 message attributes, in the source DLQ
    # after a ledger outage (processed once, row open)
    full = {f"a{n}": {"DataType": "String", "StringValue": str(n)} for n in range(10)}
    message = engine.client("sqs").send_message(
        QueueUrl=engine.ref("SourceQueue"),
        MessageBody=json.dumps({"orderId": "order-full"}),
        MessageAttributes=full,
    )["MessageId"]
    with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        engine.pump_pipes()
    _exhaust_receives(engine)
    # WHEN redrive moves it back: ONCEFLOW_MESSAGE_ID would be an 11th attribute, which SQS
    # refuses ("Each message can have up to 10 attributes", sqs-message-metadata.html)
    report = ops.redrive(LocalTarget(engine), queue="source")
    # THEN it is not kept in the DLQ to expire there: the processor is started with the
    # message as the pipe hands it, under its first id, so it is the same unit of work
    # (a Duplicate of the row the outage left, under its live lock)
    [moved] = report.messages
    assert moved.action == "resubmitted", moved.detail
    assert "exceeds the allowed maximum" in moved.detail
    assert queued(engine, SOURCE_DLQ) == {} and queued(engine) == {}
    assert moved.outcome == "SUCCEEDED (DUPLICATE: the work did not run again)"
    assert [r["pk"] for r in ledger_rows(engine)] == [f"sqs:{message}"]
    assert invocations(engine) == 1
    # AND once the dead execution's lock expires, the audit's sweep finishes the one row
    expire_lock(engine, f"sqs:{message}")
    assert run_audit(engine).output["stuck_released"] == 1
    assert (ledger_row(engine, f"sqs:{message}") or {})["status"] == "PROCESSED"
    assert output_effects(engine) == 1 and dlq_messages(engine) == []


def test_a_message_the_queue_took_at_its_largest_comes_back_from_the_source_dlq() -> None:
    """SQS counts every part of a message attribute (name, type, value) in the message's
    size (MessageAttributeValue, SQS API reference): a message the producer sent at the
    queue's MaximumMessageSize has no room for ONCEFLOW_MESSAGE_ID when it is moved back."""
    with _engine(**BATCH_PARAMETERS) as engine:  # keyed by the body's orderId
        sqs, url = engine.client("sqs"), engine.ref("SourceQueue")
        most = int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])[
                "Attributes"
            ]["MaximumMessageSize"]
        )
        # GIVEN an order of the queue's largest size, never run: the pipe could not take it
        # (throttled) while its receives ran out, so the queue moved it to its DLQ
        body = large_non_ascii_body("order-largest", most)
        assert most - 3 <= len(body.encode()) <= most
        sqs.send_message(QueueUrl=url, MessageBody=body)
        _spend_receives(engine)
        assert list(queued(engine, SOURCE_DLQ).values()) == ["order-largest"]
        assert ledger_rows(engine) == []  # no row: no audit can find it
        # WHEN the operator redrives the source DLQ
        report = ops.redrive(LocalTarget(engine), queue="source")
        for arn in engine.pump_pipes():
            engine.wait(arn)
        # THEN its work is done once, and nothing is left in either queue
        [moved] = report.messages
        assert moved.action == "resubmitted", moved.detail
        assert queued(engine, SOURCE_DLQ) == {} and queued(engine) == {}
        assert [(r["pk"], r["status"]) for r in ledger_rows(engine)] == [
            ("sqs:order-largest", "PROCESSED")
        ]
        assert invocations(engine) == 1 and output_effects(engine) == 1
        assert dlq_messages(engine) == []


def _response_lost(monkeypatch: pytest.MonkeyPatch, engine: LocalEngine) -> None:
    """The processor's executions start, but the pipe never gets StartExecution's answer
    (a timeout: the pipe counts a failed invocation and the message stays)."""
    start = executions.start

    def lost(eng: LocalEngine, target: str, *args: Any, **kwargs: Any) -> str:
        arn = start(eng, target, *args, **kwargs)
        eng.wait(arn)
        error = {"Error": {"Code": "ServiceUnavailable", "Message": "timed out"}}
        raise ClientError(error, "StartExecution")  # type: ignore[arg-type]

    monkeypatch.setattr(executions, "start", lost)


def test_a_single_mode_message_moved_back_after_it_was_processed_is_a_duplicate(
    single_engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = single_engine
    # GIVEN an order processed once whose start the pipe never saw answered, so that its
    # message stayed (each later start a Duplicate) until it moved to the source DLQ
    message = _send(engine, "order-lost")
    with monkeypatch.context() as patched:
        _response_lost(patched, engine)
        _exhaust_receives(engine)
    assert (ledger_row(engine, f"sqs:{message}") or {})["status"] == "PROCESSED"
    assert invocations(engine) == 1
    assert list(queued(engine, SOURCE_DLQ).values()) == ["order-lost"]
    # WHEN the operator moves it back and the pipe delivers it
    ops.redrive(LocalTarget(engine), queue="source")
    [arn] = engine.pump_pipes()
    # THEN it is a Duplicate of the processed row: processed once in total
    assert engine.wait(arn).outcome == "Duplicate"
    assert invocations(engine) == 1 and output_effects(engine) == 1
    assert [r["pk"] for r in ledger_rows(engine)] == [f"sqs:{message}"]
    assert queued(engine) == {} and queued(engine, SOURCE_DLQ) == {}
    assert dlq_messages(engine) == []


# ---- the attribute is a key input: Claim's rules judge it ------------------------------


def _with_attribute(value: dict[str, Any]) -> list[dict[str, Any]]:
    event: list[dict[str, Any]] = copy.deepcopy(load_event("sqs-business-message.json"))
    event[0]["messageAttributes"] = {ORIGINAL_ID: value}
    return event


@pytest.mark.parametrize(
    "value",
    [
        {"stringValue": "\ud800x", "dataType": "String"},  # a lone surrogate
        {"stringValue": "é" * 513, "dataType": "String"},  # 1,026 bytes in UTF-8
        {"stringValue": "", "dataType": "String"},
        {"binaryValue": "AAEC", "dataType": "Binary"},  # no stringValue
    ],
    ids=["lone-surrogate", "over-1024-bytes", "empty", "binary"],
)
def test_an_invalid_original_id_attribute_is_an_invalid_event(
    single_engine: LocalEngine, value: dict[str, Any]
) -> None:
    # GIVEN a message whose ONCEFLOW_MESSAGE_ID no key could be made of WHEN it is processed
    result = single_engine.execute(MACHINE, _with_attribute(value))
    # THEN Claim's rules refuse it: InvalidEvent, no row, one DLQ message naming why
    assert result.error == "InvalidEvent"
    assert ledger_rows(single_engine) == []
    [dead] = dlq_messages(single_engine)
    why = attributes(dead)["ERROR_MESSAGE"]
    assert f"the message attribute {ORIGINAL_ID} is not a String of valid Unicode" in why


def test_a_valid_original_id_attribute_names_the_row(single_engine: LocalEngine) -> None:
    # GIVEN a message moved back once WHEN it is processed THEN its row is its first id's
    result = single_engine.execute(
        MACHINE, _with_attribute({"stringValue": "first-id", "dataType": "String"})
    )
    assert result.outcome == "Processed"
    [row] = ledger_rows(single_engine)
    assert row["pk"] == "sqs:first-id"
    # the row keeps the attribute for the audit's resubmission
    assert ORIGINAL_ID in json.loads(row["original_event"])[0]["messageAttributes"]


def test_the_audit_resubmits_a_moved_message_under_its_first_id(
    single_engine: LocalEngine,
) -> None:
    engine = single_engine
    # GIVEN a moved-back message whose run failed (the pipe had consumed it: only the
    # audit's sweep retries it, from the row's original_event)
    moved = _with_attribute({"stringValue": "first-id", "dataType": "String"})
    with engine.override_function(FUNCTION, always(TransientError)):
        assert engine.execute(MACHINE, moved).outcome == "Failed"
    assert (ledger_row(engine, "sqs:first-id") or {})["status"] == "FAILED"
    # WHEN the audit runs
    report = run_audit(engine).output
    # THEN its resubmission is keyed by the same first id: the one row is done
    assert report["failed_resubmitted"] == 1
    assert [r["pk"] for r in ledger_rows(engine)] == ["sqs:first-id"]
    assert (ledger_row(engine, "sqs:first-id") or {})["status"] == "PROCESSED"
    assert output_effects(engine) == 1


# ---- a queue of your own (SqsSource=<ARN>): redrive finds its DLQ ----------------------


def test_your_own_queues_message_moved_back_by_redrive_keeps_its_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SqsSource=<your queue's ARN>, keyed by messageId: `redrive --queue source` reads the
    DLQ your queue's redrive policy names and moves its messages back with their first id,
    as for the stack's own queue; SQS's own redrive would give them new ids (the work done
    again)."""
    with _engine(SqsSource=ORDERS, IdempotencyKeyPath="") as engine:
        # GIVEN your queue with a DLQ after 5 receives, and an order processed once whose
        # start the pipe never saw answered, so its message moved to your DLQ
        sqs = engine.client("sqs")
        url, dlq = _orders_queue(engine)
        message = sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"orderId": "o-1"}))
        with monkeypatch.context() as patched:
            _response_lost(patched, engine)
            for _ in range(6):  # its redrive policy moves it after 5 receives
                engine.pump_pipes()
        key = f"sqs:{message['MessageId']}"
        assert (ledger_row(engine, key) or {})["status"] == "PROCESSED"
        waiting = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
        assert waiting["ApproximateNumberOfMessages"] == "1"
        # WHEN the operator moves it back with onceflow and the pipe delivers it
        report = ops.redrive(LocalTarget(engine), queue="source")
        assert report.count("resubmitted") == 1
        [arn] = engine.pump_pipes()
        # THEN it is a Duplicate of the processed row: processed once in total
        assert engine.wait(arn).outcome == "Duplicate"
        assert invocations(engine) == 1 and output_effects(engine) == 1
        assert [r["pk"] for r in ledger_rows(engine)] == [key]
        for queue in (url, dlq):
            left = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])
            assert left["Attributes"]["ApproximateNumberOfMessages"] == "0"


def test_redrive_of_the_source_queue_on_a_stack_without_one_is_refused_in_one_line() -> None:
    # GIVEN a stack with no source queue (SqsSource none, the default)
    with _engine() as engine:
        # WHEN the operator asks to move the source queue's DLQ back
        with pytest.raises(ops.OpsError) as refused:
            ops.redrive(LocalTarget(engine), queue="source")
        # THEN it says what it needs, and nothing was moved
        assert "--queue source needs a stack with a source queue (SqsSource)" in str(refused.value)


def test_two_messages_with_one_body_are_both_moved_back(batch_engine: LocalEngine) -> None:
    engine = batch_engine
    # GIVEN a producer that sent one body twice (keyed by messageId: two units of work),
    # both processed once under locks whose MarkComplete was throttled, and both moved
    # to the source DLQ by the queue's redrive policy
    first, second = _send(engine, "order-same"), _send(engine, "order-same")
    with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        engine.pump_pipes()
    _exhaust_receives(engine)
    assert list(queued(engine, SOURCE_DLQ).values()) == ["order-same", "order-same"]
    # WHEN the operator moves the DLQ back once
    report = ops.redrive(LocalTarget(engine), queue="source")
    # THEN both go back, each with its own identity: neither is taken for the other
    assert report.count("resubmitted") == 2, [(m.action, m.detail) for m in report.messages]
    assert queued(engine, SOURCE_DLQ) == {}
    # AND once their locks expire each completes its own row
    for message in (first, second):
        expire_lock(engine, f"sqs:{message}")
    engine.pump_pipes()
    rows = {r["pk"]: r["status"] for r in ledger_rows(engine)}
    assert rows == {f"sqs:{first}": "PROCESSED", f"sqs:{second}": "PROCESSED"}
