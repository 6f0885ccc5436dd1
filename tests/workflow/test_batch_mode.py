"""The SQS batch mode: the pipe runs the EXPRESS batch workflow synchronously on a batch
and deletes only the messages whose outcome is in the ledger.

EventBridge Pipes reads a Step Functions target's partial failure from its output,
``{"batchItemFailures": [{"itemIdentifier": <messageId>}]}``, and keeps those messages
in the queue (eb-pipes-batching-concurrency.html, eb-pipes-sqs.html); a failed
execution keeps the whole batch (eb-pipes-error-troubleshooting.html). Every failure
here is injected for real: a processor that raises, a result over Step Functions'
256 KiB (States.DataLimitExceeded, which a Catch on States.ALL takes, as AWS recorded
it: LocalStack's test_states_errors snapshot), a ledger row held by another execution's
lock.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto.sqs.models import sqs_backends

from onceflow.harness.bench import ERROR_EVENT_TYPES, log_records
from onceflow.local.engine import ACCOUNT_ID, DEFAULT_TEMPLATE, REGION, EngineError, LocalEngine
from tests.helpers import (
    FUNCTION,
    TransientError,
    dlq_messages,
    expire_lock,
    invocations,
    ledger_row,
    output_effects,
)

TEMPLATE: Path = DEFAULT_TEMPLATE
BATCH = "BatchProcessorStateMachine"
# EXPRESS: the template's rule bounds the retries and the processor timeout.
PARAMETERS = {
    "SqsSource": "create",
    "SqsBatchMode": "true",
    "RetryMaxAttempts": "1",
    "ProcessorTimeoutSeconds": "40",
    "IdempotencyKeyPath": "orderId",
}


@pytest.fixture
def batch_engine() -> Iterator[LocalEngine]:
    with LocalEngine(TEMPLATE, PARAMETERS, function_log=io.StringIO(), time_scale=0.0) as local:
        local.state.requests.clear()
        yield local


def send(engine: LocalEngine, order: str, **fields: Any) -> str:
    """An order message on the source queue; its messageId."""
    response = engine.client("sqs").send_message(
        QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps({"orderId": order, **fields})
    )
    return str(response["MessageId"])


def queued(engine: LocalEngine, logical_id: str = "SourceQueue") -> dict[str, str]:
    """Every message in a queue, visible or not: messageId -> orderId (or the raw body).

    Read from the local SQS itself: a ReceiveMessage would count as a receive, and
    enough of them would move the message to the queue's DLQ (maxReceiveCount).
    """
    name = engine.get_att(logical_id, "QueueName")
    queue = sqs_backends[ACCOUNT_ID][REGION].get_queue(name)
    seen: dict[str, str] = {}
    for message in list(queue._messages):
        try:
            seen[message.id] = json.loads(message.body)["orderId"]
        except (ValueError, KeyError, TypeError):
            seen[message.id] = message.body
    return seen


def outcomes(engine: LocalEngine, arn: str) -> dict[str, dict[str, Any]]:
    """Each message's outcome in one batch execution, by messageId (the Map's output)."""
    result = engine.wait(arn)
    [exited] = [
        e["stateExitedEventDetails"]
        for e in result.events
        if e["type"] == "MapStateExited" and e["stateExitedEventDetails"]["name"] == "EachMessage"
    ]
    return {o["messageId"]: o for o in json.loads(exited["output"])}


def row(engine: LocalEngine, order: str) -> dict[str, Any]:
    found = ledger_row(engine, f"sqs:{order}")
    assert found is not None, f"no ledger row for {order}"
    return found


def requests(engine: LocalEngine, service: str, since: int = 0) -> list[tuple[str, int]]:
    """(operation, HTTP status) of the calls made to a service, after the first `since`."""
    log = engine.state.requests.snapshot()[since:]
    return [(r.operation, r.status) for r in log if r.service == service]


def bundled(engine: LocalEngine) -> Callable[[Any, Any], Any]:
    runtime = engine.runtime
    return runtime.load(runtime.functions[engine.function_name(FUNCTION)])


# ---- partial failure ------------------------------------------------------------


def test_partial_failure_keeps_exactly_the_failed_messages(batch_engine: LocalEngine) -> None:
    # GIVEN six orders in the queue, and a processor that fails two of them every time
    ids = {send(batch_engine, f"order-{n}"): f"order-{n}" for n in range(6)}
    failing = {"order-1", "order-4"}
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["workItem"]["payload"]["orderId"] in failing:
            raise TransientError("the warehouse is down")
        return real(payload, context)

    # WHEN the pipe runs the batch workflow on them
    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    result = batch_engine.wait(arn)
    # THEN the workflow names exactly the failed messages, and only they stay in the queue
    failed_ids = {m for m, order in ids.items() if order in failing}
    assert result.status == "SUCCEEDED"
    assert {f["itemIdentifier"] for f in result.output["batchItemFailures"]} == failed_ids
    assert len(result.output["batchItemFailures"]) == 2
    assert queued(batch_engine) == {m: ids[m] for m in failed_ids}
    by_message = outcomes(batch_engine, arn)
    assert {m: o["outcome"] for m, o in by_message.items() if o["retry"]} == dict.fromkeys(
        failed_ids, "Failed"
    )
    # AND every deleted message's outcome is in the ledger; the failed ones are open work
    for order in ids.values():
        expected = "FAILED" if order in failing else "PROCESSED"
        assert row(batch_engine, order)["status"] == expected
    assert output_effects(batch_engine) == 4
    # WHEN they come back with the processor healthy
    [again] = batch_engine.pump_pipes()
    # THEN they are reclaimed and done, and the queue is empty
    assert batch_engine.wait(again).output == {"batchItemFailures": []}
    assert {o["outcome"] for o in outcomes(batch_engine, again).values()} == {"Processed"}
    assert queued(batch_engine) == {}
    assert all(row(batch_engine, o)["status"] == "PROCESSED" for o in ids.values())
    assert output_effects(batch_engine) == 6


def test_the_pipe_deletes_a_batchs_settled_messages_with_one_request(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN five orders in the queue, and a processor that fails one of them
    ids = {send(batch_engine, f"order-{n}"): f"order-{n}" for n in range(5)}
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["workItem"]["payload"]["orderId"] == "order-3":
            raise TransientError("the warehouse is down")
        return real(payload, context)

    before = len(batch_engine.state.requests.snapshot())
    # WHEN the pipe runs the batch workflow on them
    with batch_engine.override_function(FUNCTION, handler):
        batch_engine.pump_pipes()
    # THEN the four settled messages go in one DeleteMessageBatch, the failed one is
    # made visible again, and nothing is deleted one by one
    sqs_calls = [op for op, _ in requests(batch_engine, "sqs", since=before)]
    assert sqs_calls.count("DeleteMessageBatch") == 1
    assert "DeleteMessage" not in sqs_calls
    assert queued(batch_engine) == {m: o for m, o in ids.items() if o == "order-3"}


def test_a_batchs_failures_are_logged_at_level_error_under_the_processors_names(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN three orders, and a processor that fails one of them
    ids = {send(batch_engine, f"order-{n}"): f"order-{n}" for n in range(3)}
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["workItem"]["payload"]["orderId"] == "order-2":
            raise TransientError("the warehouse is down")
        return real(payload, context)

    # WHEN the pipe runs the batch workflow on them
    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    result = batch_engine.wait(arn)
    # THEN the batch succeeds and names the failed message only
    failed = next(m for m, o in ids.items() if o == "order-2")
    assert result.status == "SUCCEEDED"
    assert result.output == {"batchItemFailures": [{"itemIdentifier": failed}]}
    assert outcomes(batch_engine, arn)[failed]["error"] == "TransientError"
    # AND what the workflow logs at level ERROR (SqsBatchLogLevel's default) is the
    # processor's Fail state "Failed", entered once: what FailedMetricFilter counts
    errors = [json.loads(line) for line in log_records(result.events, arn, "ERROR")]
    entered = [r["details"]["name"] for r in errors if r["type"] == "FailStateEntered"]
    assert entered == ["Failed"]
    # AND the two processed messages log nothing at that level
    assert {r["type"] for r in errors} <= ERROR_EVENT_TYPES
    assert not [r for r in errors if r["details"].get("name") == "Processed"]


def test_dead_lettered_and_invalid_messages_are_settled_and_deleted(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an order the processor refuses for good, a message that is not JSON, and a good one
    real = bundled(batch_engine)
    permanent = type("PermanentError", (Exception,), {})

    def handler(payload: Any, context: Any) -> Any:
        if payload["workItem"]["payload"]["orderId"] == "poison":
            raise permanent("the order is malformed")
        return real(payload, context)

    send(batch_engine, "poison")
    send(batch_engine, "fine")
    batch_engine.client("sqs").send_message(
        QueueUrl=batch_engine.ref("SourceQueue"), MessageBody="not json {"
    )
    # WHEN the batch runs
    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    # THEN the poison order is dead-lettered, the unreadable message is an InvalidEvent,
    # both with their DLQ message sent, and all three are deleted
    assert sorted(o["outcome"] for o in outcomes(batch_engine, arn).values()) == [
        "DeadLettered",
        "InvalidEvent",
        "Processed",
    ]
    assert batch_engine.wait(arn).output == {"batchItemFailures": []}
    assert queued(batch_engine) == {}
    assert len(dlq_messages(batch_engine)) == 2
    assert "dead_lettered_at" in row(batch_engine, "poison")


# ---- a crash mid-batch --------------------------------------------------------


def test_an_answer_over_256_kib_mid_batch_fails_that_message_alone_and_repeats_no_effect(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN five orders, and a processor that, on one of them, does the work and then
    # answers more than Step Functions takes (256 KiB): States.DataLimitExceeded, which
    # the Process state's Catch on States.ALL takes, as AWS recorded it
    orders = [f"crash-{n}" for n in range(5)]
    ids = {send(batch_engine, order): order for order in orders}
    real = bundled(batch_engine)
    oversized: list[str] = []

    def handler(payload: Any, context: Any) -> Any:
        result = real(payload, context)
        order = payload["workItem"]["payload"]["orderId"]
        if order == "crash-2" and not oversized:
            oversized.append(order)
            return {**result, "padding": "x" * 300_000}
        return result

    # WHEN the pipe runs the batch
    with batch_engine.override_function(FUNCTION, handler):
        [first] = batch_engine.pump_pipes()
        # THEN the batch succeeded: four orders processed, the oversized one failed and
        # kept in the queue for a retry (its row FAILED, its effect written once)
        assert batch_engine.wait(first).status == "SUCCEEDED"
        by_message = outcomes(batch_engine, first)
        assert {ids[m]: (o["outcome"], o["retry"]) for m, o in by_message.items()} == {
            **{o: ("Processed", False) for o in orders if o != "crash-2"},
            "crash-2": ("Failed", True),
        }
        assert queued(batch_engine) == {m: o for m, o in ids.items() if o == "crash-2"}
        assert row(batch_engine, "crash-2")["status"] == "FAILED"
        assert output_effects(batch_engine) == 5
        # WHEN it comes back
        [second] = batch_engine.pump_pipes()
    # THEN it is reclaimed and completed; nothing is left, nothing was done twice
    assert [o["outcome"] for o in outcomes(batch_engine, second).values()] == ["Processed"]
    assert queued(batch_engine) == {}
    assert queued(batch_engine, "SourceDeadLetterQueue") == {}
    assert all(row(batch_engine, o)["status"] == "PROCESSED" for o in orders)
    assert output_effects(batch_engine) == 5


# ---- duplicates -----------------------------------------------------------------


def test_a_duplicate_costs_one_refused_write_and_a_read_and_no_processor_call(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an order already processed
    send(batch_engine, "order-dup")
    batch_engine.pump_pipes()
    assert row(batch_engine, "order-dup")["status"] == "PROCESSED"
    calls = invocations(batch_engine)
    before = len(batch_engine.state.requests.snapshot())
    # WHEN the producer sends it again
    resent = send(batch_engine, "order-dup")
    [arn] = batch_engine.pump_pipes()
    # THEN it is a settled duplicate: deleted, after one refused claim and a read of the
    # row (PROCESSED: no reclaim is tried, P8 item 5); the processor is not called
    assert outcomes(batch_engine, arn)[resent]["outcome"] == "Duplicate"
    assert outcomes(batch_engine, arn)[resent]["retry"] is False
    assert queued(batch_engine) == {}
    assert invocations(batch_engine) == calls
    assert requests(batch_engine, "dynamodb", since=before) == [
        ("PutItem", 400),
        ("GetItem", 200),
    ]
    assert output_effects(batch_engine) == 1


def test_a_message_held_by_another_live_lock_stays_in_the_queue(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an order whose row another execution holds (a live lock, an hour left)
    now = int(time.time())
    batch_engine.client("dynamodb").put_item(
        TableName=batch_engine.ref("LedgerTable"),
        Item={
            "pk": {"S": "sqs:order-held"},
            "status": {"S": "PROCESSING"},
            "lock_owner": {"S": "arn:aws:states:us-east-1:123456789012:express:other:x:y#0"},
            "lock_expires_at": {"N": str(now + 3600)},
            "attempts": {"N": "1"},
            "expires_at": {"N": str(now + 86400)},
        },
    )
    message = send(batch_engine, "order-held")
    # WHEN its message arrives
    [arn] = batch_engine.pump_pipes()
    # THEN it is a duplicate that is not settled: it stays, and nothing was processed;
    # the row read back is not settled, so a reclaim was tried (and refused)
    assert ("UpdateItem", 400) in requests(batch_engine, "dynamodb")
    outcome = outcomes(batch_engine, arn)[message]
    assert (outcome["outcome"], outcome["retry"], outcome["ledgerStatus"]) == (
        "Duplicate",
        True,
        "PROCESSING",
    )
    assert batch_engine.wait(arn).output == {"batchItemFailures": [{"itemIdentifier": message}]}
    assert queued(batch_engine) == {message: "order-held"}
    assert invocations(batch_engine) == 0
    # WHEN that other execution dies (its lock expires) and the message comes back
    expire_lock(batch_engine, "sqs:order-held")
    batch_engine.pump_pipes()
    # THEN this copy does the work
    assert queued(batch_engine) == {}
    assert row(batch_engine, "order-held")["status"] == "PROCESSED"
    assert output_effects(batch_engine) == 1


# ---- lock owners -------------------------------------------------------------


def test_messages_of_one_batch_get_their_own_lock_owner_and_call_token(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN three orders and a processor that records what it is given
    orders = ["own-a", "own-b", "own-c"]
    for order in orders:
        send(batch_engine, order)
    seen: list[dict[str, Any]] = []
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        seen.append(payload)
        return real(payload, context)

    # WHEN one batch processes them
    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    # THEN each message's lock token is the execution and its index, all different,
    # and it is the lock owner its row was written with
    tokens = sorted(p["lockToken"] for p in seen)
    assert tokens == [f"{arn}#{n}" for n in range(3)]
    assert len({p["callToken"] for p in seen}) == 3
    assert all(p["callToken"].startswith(p["lockToken"] + "#") for p in seen)
    owners = sorted(row(batch_engine, o)["lock_owner"] for o in orders)
    assert owners == tokens


# ---- the largest batch fits -------------------------------------------------------


def test_a_full_batch_of_the_largest_messages_fits_the_execution_input(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN ten messages as large as the created queue takes, each made of characters
    # JSON escapes (a quote doubles when the pipe writes the body into its record)
    sqs = batch_engine.client("sqs")
    url = batch_engine.ref("SourceQueue")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    largest = int(attributes["Attributes"]["MaximumMessageSize"])
    for n in range(10):
        head = json.dumps({"orderId": f"big-{n}", "notes": ""})[:-2]
        filler = '\\"' * ((largest - len(head) - 2) // 2)
        body = head + filler + '"}'
        assert largest - 2 <= len(body.encode()) <= largest
        sqs.send_message(QueueUrl=url, MessageBody=body)
    # WHEN the pipe hands them over as one batch
    [arn] = batch_engine.pump_pipes()
    result = batch_engine.wait(arn)
    # THEN the execution took them all (its input is under 256 KiB) and did them all
    assert result.status == "SUCCEEDED", result.cause
    assert len(json.dumps(result.input).encode()) <= 262_144
    assert len(result.input) == 10
    assert {o["outcome"] for o in outcomes(batch_engine, arn).values()} == {"Processed"}
    # AND one byte more is refused by the queue, before any pipe sees it
    with pytest.raises(Exception, match=r"MessageTooLong|InvalidParameterValue"):
        sqs.send_message(QueueUrl=url, MessageBody="x" * (largest + 1))


# ---- the pipe's reading of the answer ----------------------------------------------

ANSWER = "answer-machine"


@pytest.fixture
def answering(batch_engine: LocalEngine) -> Callable[[Any], set[str]]:
    """A synchronous target's answer, as the pipe reads it: the messageIds it keeps.

    An EXPRESS state machine that outputs whatever it is told to, or fails when told
    to; the pipe's rules (_sync_failures) read its real execution.
    """
    sfn = batch_engine.client("stepfunctions")
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Choose",
        "States": {
            "Choose": {
                "Type": "Choice",
                "Choices": [{"Condition": "{% $states.input.fail = true %}", "Next": "Crash"}],
                "Default": "Answer",
            },
            "Answer": {"Type": "Pass", "Output": "{% $states.input.answer %}", "End": True},
            "Crash": {"Type": "Fail", "Error": "Crashed"},
        },
    }
    arn = sfn.create_state_machine(
        name=ANSWER,
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/answer",
        type="EXPRESS",
    )["stateMachineArn"]
    messages = [{"MessageId": "m1"}, {"MessageId": "m2"}]

    def read(answer: Any) -> set[str]:
        execution_input = {"fail": True} if answer == "crash" else {"answer": answer}
        started = batch_engine.start_execution(arn, execution_input)
        return batch_engine._sync_failures(started, messages)

    return read


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        pytest.param(None, set(), id="null-response"),
        pytest.param({}, set(), id="empty-response"),
        pytest.param({"batchItemFailures": []}, set(), id="empty-list"),
        pytest.param({"batchItemFailures": None}, set(), id="null-list"),
        pytest.param({"batchItemFailures": [{"itemIdentifier": "m2"}]}, {"m2"}, id="one"),
        pytest.param({"batchItemFailures": [{"itemIdentifier": None}]}, {"m1", "m2"}, id="null-id"),
        pytest.param({"batchItemFailures": [{"itemIdentifier": ""}]}, {"m1", "m2"}, id="empty-id"),
        pytest.param({"batchItemFailures": [{"id": "m1"}]}, {"m1", "m2"}, id="bad-key-name"),
        pytest.param(
            {"batchItemFailures": [{"itemIdentifier": "m9"}]}, {"m1", "m2"}, id="unknown-id"
        ),
        pytest.param("crash", {"m1", "m2"}, id="failed-execution"),
    ],
)
def test_the_pipe_reads_the_answer_as_eventbridge_pipes_does(
    answering: Callable[[Any], set[str]], answer: Any, kept: set[str]
) -> None:
    assert answering(answer) == kept


def test_a_request_response_pipe_cannot_target_a_standard_workflow() -> None:
    # GIVEN the default stack (STANDARD processor, FIRE_AND_FORGET pipe) made synchronous
    parameters = {"SqsSource": "create"}
    with LocalEngine(TEMPLATE, parameters, function_log=io.StringIO()) as engine:
        [pipe] = engine.pipes.values()
        pipe["TargetParameters"]["StepFunctionStateMachineParameters"]["InvocationType"] = (
            "REQUEST_RESPONSE"
        )
        send(engine, "order-1")
        # WHEN the pipe runs, THEN it is refused (AWS stops such a pipe), and nothing is lost
        with pytest.raises(EngineError, match="REQUEST_RESPONSE needs an EXPRESS"):
            engine.pump_pipes()
        assert list(queued(engine).values()) == ["order-1"]


def test_batch_claims_keep_their_rows_out_of_the_open_work_index(
    batch_engine: LocalEngine,
) -> None:
    """The queue brings back a message whose work failed or stalled: the audit's lock
    sweep is not needed for it, and neither is the OpenWork index (2 write units a
    message: the batch mode's largest cost over the baseline after the Lambda)."""
    # GIVEN a batch in which one message fails
    sent = {send(batch_engine, f"order-{n}"): f"order-{n}" for n in range(3)}
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["workItem"]["payload"]["orderId"] == "order-2":
            raise TransientError("the warehouse is down")
        return real(payload, context)

    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    assert len(batch_engine.wait(arn).output["batchItemFailures"]) == 1
    # THEN no row, done or failed, is in the open-work index
    for order in sent.values():
        assert "open_status" not in row(batch_engine, order), order
    assert row(batch_engine, "order-2")["status"] == "FAILED"
    index = batch_engine.client("dynamodb").scan(
        TableName=batch_engine.ref("LedgerTable"), IndexName="OpenWork"
    )
    assert index["Count"] == 0
    # AND the failed message still comes back and is done
    [again] = batch_engine.pump_pipes()
    assert batch_engine.wait(again).output == {"batchItemFailures": []}
    assert row(batch_engine, "order-2")["status"] == "PROCESSED"
