"""Failures past every retry end in a named state, and nothing says dead-lettered unless it was.

Each test injects the failure for real: a DLQ send refused by SQS, a ledger
write throttled or refused by DynamoDB, a processor that raises Lambda's own
error names, a processor call that overlaps its retry.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest

from onceflow.local import patches
from onceflow.local.engine import ACCOUNT_ID, REGION, LocalEngine
from service.logic.open_work import open_status
from tests.helpers import (
    FUNCTION,
    MACHINE,
    attributes,
    dlq_messages,
    expire_lock,
    idempotency_key,
    invocations,
    ledger_row,
    load_event,
    output_effects,
    run_audit,
    s3_event,
    upload,
)

HAPPY_PATH = ["Claim", "Process", "MarkComplete"]

Response = tuple[int, dict[str, str], str]


def sqs_error(code: str, message: str) -> Response:
    """An SQS error response in the JSON protocol, as SQS answers SendMessage."""
    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": message})
    headers = {
        "x-amzn-query-error": f"{code};Sender",
        "x-amzn-RequestId": str(uuid.uuid4()),
        "Content-Type": "application/x-amz-json-1.0",
    }
    return 400, headers, body


@contextmanager
def failing(
    engine: LocalEngine, service: str, operation: str, response: Response, when: str = ""
) -> Iterator[None]:
    """Every matching request (its body containing ``when``) is answered with ``response``."""

    def injector(svc: str, op: str, body: str) -> Response | None:
        if svc == service and op == operation and when in body:
            return response
        return None

    engine.state.faults.append(injector)
    try:
        yield
    finally:
        engine.state.faults.remove(injector)


KMS_DENIED = sqs_error("KmsAccessDenied", "The ciphertext refers to a customer master key ...")


def test_a_dlq_send_that_fails_never_marks_the_row_dead_lettered(engine: LocalEngine) -> None:
    # GIVEN a poison object (not an image: the processor raises PermanentError)
    # and a DLQ that refuses every message (a KMS key policy mistake)
    version = upload(engine, "poison/a.jpg", b"not an image")
    event = s3_event(engine, "poison/a.jpg", version)
    pk = idempotency_key(engine, "poison/a.jpg", version)
    # WHEN the event is processed
    with failing(engine, "sqs", "SendMessage", KMS_DENIED):
        result = engine.execute(MACHINE, event)
    # THEN the execution ends in its own named state, and the row is open work, not dead-lettered
    assert result.status == "FAILED"
    assert result.error == "DeadLetterFailed"
    assert result.states_entered[-3:] == [
        "CannotDeadLetter",
        "ReleaseUndelivered",
        "DeadLetterFailed",
    ]
    assert "customer master key" in (result.cause or "")  # SQS's own words, kept
    assert "PermanentError" in (result.cause or "")
    row = ledger_row(engine, pk)
    assert row is not None
    assert row["status"] == "FAILED"
    assert "dead_lettered_at" not in row
    assert row["open_status"] == open_status("FAILED", pk)  # the audit's open-work index finds it
    assert row["last_error"].startswith("DeadLetterFailed: ")
    assert dlq_messages(engine) == []
    # AND once the DLQ works again, the next delivery dead-letters it: one message, then the mark
    again = engine.execute(MACHINE, event)
    assert again.states_entered[-2:] == ["MarkDeadLettered", "DeadLettered"]
    messages = dlq_messages(engine)
    assert len(messages) == 1
    assert attributes(messages[0])["IDEMPOTENCY_KEY"] == pk
    assert "dead_lettered_at" in (ledger_row(engine, pk) or {})


def test_an_invalid_event_whose_dlq_send_fails_ends_dead_letter_failed_with_its_input_kept(
    engine: LocalEngine,
) -> None:
    # GIVEN an event no key can be derived from, and a DLQ that refuses messages
    event = load_event("invalid-unknown-shape.json")
    # WHEN it is processed
    with failing(engine, "sqs", "SendMessage", KMS_DENIED):
        result = engine.execute(MACHINE, event)
    # THEN it ends DeadLetterFailed (not a bare failure inside SendToDLQ), and the
    # execution keeps its input for `onceflow redrive --undelivered`
    assert result.status == "FAILED"
    assert result.error == "DeadLetterFailed"
    assert result.states_entered == [
        "Claim",
        "UnreadableEvent",
        "DescribeInvalidEvent",
        "SendToDLQ",
        "CannotDeadLetter",
        "DeadLetterFailed",
    ]
    assert "unknown event shape" in (result.cause or "")
    described = engine.client("stepfunctions").describe_execution(executionArn=result.arn)
    assert json.loads(described["input"]) == event
    assert dlq_messages(engine) == []


def throttled() -> Response:
    return patches.dynamodb_error("ProvisionedThroughputExceededException", "Throughput exceeded")


def test_a_claim_throttled_past_its_retries_sends_the_message_to_the_dlq(
    engine: LocalEngine,
) -> None:
    # GIVEN an SQS message (no other copy exists once the pipe deletes it) and a ledger
    # that throttles every claim
    event = load_event("sqs-business-message.json")
    # WHEN it is processed
    with failing(engine, "dynamodb", "PutItem", throttled()):
        result = engine.execute(MACHINE, event)
    # THEN it ends LedgerUnavailable with the message in the DLQ, naming what failed
    assert result.status == "FAILED"
    assert result.error == "LedgerUnavailable"
    assert result.states_entered == [
        "Claim",
        "SendToDLQ",
        "DeadLetterReason",
        "LedgerUnavailable",
    ]
    assert invocations(engine) == 0
    (message,) = dlq_messages(engine)
    attrs = attributes(message)
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "LedgerUnavailable"
    assert attrs["ERROR_CODE"] == "DynamoDB.ProvisionedThroughputExceededException"
    assert attrs["ERROR_MESSAGE"].startswith("Claim failed: ")
    assert json.loads(message["Body"])["event"] == event
    # the claim was retried before giving up (each throttled PutItem is logged)
    puts = [
        r
        for r in engine.state.requests.snapshot()
        if r.service == "dynamodb" and r.operation == "PutItem"
    ]
    assert len(puts) == 5  # the first call and four retries


def test_a_mark_complete_refused_past_its_retries_ends_in_a_named_state(
    engine: LocalEngine,
) -> None:
    # GIVEN an object, and a ledger that refuses the write that records completion
    version = upload(engine, "uploads/refused.png")
    event = s3_event(engine, "uploads/refused.png", version)
    pk = idempotency_key(engine, "uploads/refused.png", version)
    refused = patches.dynamodb_error("ValidationException", "Item size has exceeded the maximum")
    # WHEN it is processed
    with failing(engine, "dynamodb", "UpdateItem", refused, when="completed_at"):
        result = engine.execute(MACHINE, event)
    # THEN the effect happened once and the execution ends LedgerUnavailable, naming what
    # failed; the row it holds carries the work (PROCESSING, in the open-work index, for
    # the audit's sweep once its lock expires), so no DLQ message is sent: one would stay
    # there for work the sweep then finishes (P11 item 3)
    assert result.error == "LedgerUnavailable"
    assert result.states_entered[-2:] == ["MarkComplete", "LedgerUnavailable"]
    assert (result.cause or "").startswith("MarkComplete (after the work was done) failed: ")
    assert output_effects(engine) == 1
    assert dlq_messages(engine) == []
    row = ledger_row(engine, pk) or {}
    assert row["status"] == "PROCESSING"
    assert row["open_status"] == open_status("PROCESSING", pk)


def test_a_ledger_outage_after_the_work_is_finished_by_the_sweep_with_no_dlq_message(
    engine: LocalEngine,
) -> None:
    # GIVEN an SQS message whose MarkComplete is throttled past its retries (the pipe has
    # deleted the message: the ledger row is the only copy of the work)
    event = load_event("sqs-business-message.json")
    with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        result = engine.execute(MACHINE, event)
    assert result.error == "LedgerUnavailable"
    (pk,) = [i["pk"]["S"] for i in engine.client("dynamodb").scan(
        TableName=engine.ref("LedgerTable"))["Items"]]  # fmt: skip
    # WHEN its lock expires and the audit's sweep runs
    expire_lock(engine, pk)
    run_audit(engine)
    # THEN the sweep resubmitted it and it ended PROCESSED; no DLQ message was ever sent
    assert (ledger_row(engine, pk) or {})["status"] == "PROCESSED"
    assert dlq_messages(engine) == []
    processor = engine.function_name(FUNCTION)
    calls = [i for i in engine.runtime.invocations if i.function == processor]
    assert len(calls) == 2  # the first call, and the sweep's resubmission


def bundled(engine: LocalEngine) -> Callable[[Any, Any], Any]:
    """The template's own processor handler, to call after an injected failure."""
    runtime = engine.runtime
    return runtime.load(runtime.functions[engine.function_name(FUNCTION)])


def raising(error_type: str) -> type[Exception]:
    """An exception named like one of Lambda's errors: the engine reports the class name as
    the errorType, and Step Functions matches Retry by that name (the throttle, on AWS, comes
    from the Invoke call rather than the function; the name the Retry sees is the same)."""
    return type(error_type, (Exception,), {})


@pytest.mark.parametrize(
    "error_type",
    [
        "Sandbox.Timedout",
        "Lambda.Unknown",
        "Runtime.OutOfMemory",
        "Runtime.ExitError",
        "Lambda.TooManyRequestsException",
    ],
)
def test_lambda_timeouts_crashes_and_throttling_are_retried(
    engine: LocalEngine, error_type: str
) -> None:
    # GIVEN a processor that fails once with a Lambda error, then works
    version = upload(engine, "uploads/flaky.png")
    event = s3_event(engine, "uploads/flaky.png", version)
    calls: list[int] = []
    real = bundled(engine)

    def handler(payload: dict[str, Any], context: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise raising(error_type)("injected")
        return real(payload, context)

    # WHEN the event is processed
    with engine.override_function(FUNCTION, handler):
        result = engine.execute(MACHINE, event)
    # THEN the call is retried in the execution and the work is done once
    assert result.states_entered == HAPPY_PATH
    assert len(calls) == 2
    assert output_effects(engine) == 1


def test_throttling_is_retried_longer_than_the_transient_budget(engine: LocalEngine) -> None:
    # GIVEN a processor throttled seven times in a row (a new account's concurrency)
    version = upload(engine, "uploads/throttled.png")
    event = s3_event(engine, "uploads/throttled.png", version)
    throttle = raising("Lambda.TooManyRequestsException")
    calls: list[int] = []
    real = bundled(engine)

    def handler(payload: dict[str, Any], context: Any) -> Any:
        calls.append(1)
        if len(calls) <= 7:
            raise throttle("Rate Exceeded.")
        return real(payload, context)

    with engine.override_function(FUNCTION, handler):
        result = engine.execute(MACHINE, event)
    # THEN the eighth call goes through (RetryMaxAttempts, 3 by default, does not bound it)
    assert result.states_entered == HAPPY_PATH
    assert len(calls) == 8


def test_every_call_of_the_processor_gets_its_own_token(engine: LocalEngine) -> None:
    # GIVEN a processor whose first call fails transiently
    version = upload(engine, "uploads/tokens.png")
    event = s3_event(engine, "uploads/tokens.png", version)
    seen: list[dict[str, Any]] = []
    real = bundled(engine)

    def handler(payload: dict[str, Any], context: Any) -> Any:
        seen.append(payload)
        if len(seen) == 1:
            raise raising("TransientError")("first call fails")
        return real(payload, context)

    # WHEN the event is processed (one claim, two calls)
    with engine.override_function(FUNCTION, handler):
        result = engine.execute(MACHINE, event)
    # THEN both calls carry the same lock token and attempt, and different call tokens
    assert result.states_entered == HAPPY_PATH
    assert [p["lockToken"] for p in seen] == [result.arn, result.arn]
    assert [p["attempt"] for p in seen] == [1, 1]
    assert [p["callToken"] for p in seen] == [f"{result.arn}#1.0", f"{result.arn}#1.1"]


@pytest.fixture
def slow_engine() -> Iterator[LocalEngine]:
    """The longest processor the template allows, over the lock's 900 s floor (a constant)."""
    parameters = {"ProcessorTimeoutSeconds": "890"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as local:
        yield local


def test_the_lock_outlasts_the_worst_case_of_the_task_whatever_the_parameters_say(
    slow_engine: LocalEngine,
) -> None:
    # GIVEN ProcessorTimeoutSeconds=890 (task timeout 900) and the lock's floor of 900
    version = upload(slow_engine, "uploads/slow.png")
    before = time.time()
    # WHEN an object is claimed
    result = slow_engine.execute(MACHINE, s3_event(slow_engine, "uploads/slow.png", version))
    # THEN its lock was set past four task timeouts (the call and its three retries)
    assert result.states_entered == HAPPY_PATH
    row = ledger_row(slow_engine, idempotency_key(slow_engine, "uploads/slow.png", version))
    assert row is not None
    assert int(row["lock_expires_at"]) - before >= 900 * 4


def test_an_execution_run_again_continues_its_own_claim(engine: LocalEngine) -> None:
    # GIVEN a row claimed by an execution that is then run again with the same id
    # (EXPRESS runs asynchronous executions at least once)
    version = upload(engine, "uploads/express.png")
    event = s3_event(engine, "uploads/express.png", version)
    pk = idempotency_key(engine, "uploads/express.png", version)
    name = "express-rerun"
    machine = engine.state_machine_arn(MACHINE).rsplit(":", 1)[-1]
    arn = f"arn:aws:states:{REGION}:{ACCOUNT_ID}:execution:{machine}:{name}"
    now = int(time.time())
    engine.client("dynamodb").put_item(
        TableName=engine.ref("LedgerTable"),
        Item={
            "pk": {"S": pk},
            "status": {"S": "PROCESSING"},
            "open_status": {"S": "PROCESSING"},
            "lock_owner": {"S": arn},
            "lock_expires_at": {"N": str(now + 600)},
            "attempts": {"N": "1"},
            "expires_at": {"N": str(now + 86400)},
        },
    )
    # WHEN the re-run arrives (its first run crashed after Claim)
    result = engine.execute(MACHINE, event, name=name)
    # THEN it takes its own claim back and finishes the work, not a Duplicate
    assert result.arn == arn
    assert result.states_entered == [
        "Claim",
        "Reclaim",
        "Process",
        "MarkComplete",
    ]
    assert (ledger_row(engine, pk) or {})["status"] == "PROCESSED"
    assert output_effects(engine) == 1


def test_a_stuck_row_at_max_attempts_is_left_to_the_audit(engine: LocalEngine) -> None:
    # GIVEN a PROCESSING row whose lock expired at MaxAttempts (3)
    version = upload(engine, "uploads/stuck.png")
    pk = idempotency_key(engine, "uploads/stuck.png", version)
    now = int(time.time())
    engine.client("dynamodb").put_item(
        TableName=engine.ref("LedgerTable"),
        Item={
            "pk": {"S": pk},
            "status": {"S": "PROCESSING"},
            "lock_owner": {"S": "arn:aws:states:us-east-1:123456789012:execution:x:gone"},
            "lock_expires_at": {"N": str(now - 60)},
            "attempts": {"N": "3"},
            "claims": {"L": [{"S": "a"}, {"S": "b"}, {"S": "c"}]},
            "expires_at": {"N": str(now + 86400)},
        },
    )
    # WHEN another delivery arrives
    result = engine.execute(MACHINE, s3_event(engine, "uploads/stuck.png", version))
    # THEN it does not claim a fourth time (claims stay bounded by MaxAttempts)
    assert result.states_entered == ["Claim", "Reclaim", "Duplicate"]
    assert len((ledger_row(engine, pk) or {})["claims"]) == 3


def test_a_key_sqs_cannot_carry_is_dead_lettered_url_encoded_and_round_trips(
    engine: LocalEngine,
) -> None:
    # GIVEN a work item whose key holds characters SQS refuses in a message (XML 1.0 has
    # no U+0001 or U+FFFE), for an object that does not exist: a PermanentError
    bucket = engine.ref("IngestBucket")
    key = "odd/a\x01b\ufffe.png"
    event = {"workItem": {"bucket": bucket, "key": key, "versionId": "v1"}}
    # WHEN it is processed
    result = engine.execute(MACHINE, event)
    # THEN it is dead-lettered: the key URL-encoded in its attribute, the body exact JSON
    assert result.outcome == "DeadLettered", result.cause
    (message,) = dlq_messages(engine)
    pk = f"s3://{bucket}/{key}#v1"
    assert message["MessageAttributes"]["IDEMPOTENCY_KEY"] == {
        "DataType": "String.urlencoded",
        "StringValue": quote(pk, safe="-_.!~*'()"),
    }
    assert "\x01" not in message["Body"] and "\ufffe" not in message["Body"]
    assert json.loads(message["Body"])["workItem"]["key"] == key
    assert "\x01" not in attributes(message)["ERROR_MESSAGE"]
    assert (ledger_row(engine, pk) or {})["status"] == "FAILED"


def test_claim_and_reclaim_put_the_row_in_its_shard_of_the_open_work_index(
    engine: LocalEngine,
) -> None:
    # GIVEN a processor that reads its own row while it works (first call fails: a reclaim
    # follows on the next delivery)
    version = upload(engine, "uploads/shard.png")
    event = s3_event(engine, "uploads/shard.png", version)
    pk = idempotency_key(engine, "uploads/shard.png", version)
    seen: list[str] = []
    real = bundled(engine)

    def handler(payload: dict[str, Any], context: Any) -> Any:
        seen.append((ledger_row(engine, pk) or {}).get("open_status", ""))
        if len(seen) == 1:
            raise raising("PermanentErrorNot")("fails once, not retried in the execution")
        return real(payload, context)

    # WHEN it is claimed, fails, and is reclaimed by the next delivery
    with engine.override_function(FUNCTION, handler):
        first = engine.execute(MACHINE, event)
        second = engine.execute(MACHINE, event)
    # THEN while PROCESSING the row sat in the shard the audit's code computes for its key
    assert first.outcome == "Failed"
    assert second.states_entered[-1:] == ["MarkComplete"] and second.outcome == "Processed"
    assert seen == [open_status("PROCESSING", pk)] * 2
    assert "open_status" not in (ledger_row(engine, pk) or {})
