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

from bench.run import ERROR_EVENT_TYPES, log_records
from onceflow import ops
from onceflow.local import ingress
from onceflow.local.engine import ACCOUNT_ID, DEFAULT_TEMPLATE, REGION, EngineError, LocalEngine
from onceflow.local.target import LocalTarget
from service.logic.open_work import open_status
from tests.helpers import (
    FUNCTION,
    MACHINE,
    TransientError,
    attributes,
    audit_engine,
    dlq_messages,
    expire_lock,
    idempotency_key,
    invocations,
    ledger_row,
    out_of_time,
    output_effects,
    run_audit,
    s3_event,
    upload,
    with_constants,
)
from tests.workflow.test_failure_paths import KMS_DENIED, failing, sqs_error, throttled

TEMPLATE: Path = DEFAULT_TEMPLATE
BATCH = "BatchProcessorStateMachine"
# EXPRESS: the template's rule bounds the retries and the processor timeout.
PARAMETERS = {
    "SqsSource": "create",
    "SqsBatchMode": "true",
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
        [crashed] = [o for m, o in by_message.items() if ids[m] == "crash-2"]
        assert crashed["error"] == "States.DataLimitExceeded"  # the code, as the row has it
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
    to; the pipe's rules (ingress.sync_failures) read its real execution.
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
        return ingress.sync_failures(batch_engine, started, messages)

    return read


# Each answer and the messageIds the pipe keeps for it. One stack reads them all (they
# were a test each, each starting an engine to run one execution): a wrong reading of any
# is reported with the others, by its name.
ANSWERS: list[tuple[str, Any, set[str]]] = [
    ("null-response", None, set()),
    ("empty-response", {}, set()),
    ("empty-list", {"batchItemFailures": []}, set()),
    ("null-list", {"batchItemFailures": None}, set()),
    ("one", {"batchItemFailures": [{"itemIdentifier": "m2"}]}, {"m2"}),
    ("null-id", {"batchItemFailures": [{"itemIdentifier": None}]}, {"m1", "m2"}),
    ("empty-id", {"batchItemFailures": [{"itemIdentifier": ""}]}, {"m1", "m2"}),
    ("bad-key-name", {"batchItemFailures": [{"id": "m1"}]}, {"m1", "m2"}),
    ("unknown-id", {"batchItemFailures": [{"itemIdentifier": "m9"}]}, {"m1", "m2"}),
    ("failed-execution", "crash", {"m1", "m2"}),
]


def test_the_pipe_reads_the_answer_as_eventbridge_pipes_does(
    answering: Callable[[Any], set[str]],
) -> None:
    read = {name: answering(answer) for name, answer, _ in ANSWERS}
    assert read == {name: kept for name, _, kept in ANSWERS}


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


def test_batch_claims_put_their_rows_in_the_open_work_index_as_the_processor_does(
    batch_engine: LocalEngine,
) -> None:
    """The queue does not always bring a message back (its receive budget, its 14 days,
    a pipe stopped for good): the audit's sweep finds batch work through the OpenWork
    index, written as the processor writes it (P11)."""
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
    # THEN the failed row is open work under its shard, and the done ones left the index
    assert row(batch_engine, "order-2")["status"] == "FAILED"
    assert row(batch_engine, "order-2")["open_status"] == open_status("FAILED", "sqs:order-2")
    index = batch_engine.client("dynamodb").scan(
        TableName=batch_engine.ref("LedgerTable"), IndexName="OpenWork"
    )
    assert [item["pk"]["S"] for item in index["Items"]] == ["sqs:order-2"]
    for order in sent.values():
        if order != "order-2":
            assert "open_status" not in row(batch_engine, order), order
    # AND the failed message still comes back and is done, leaving the index
    [again] = batch_engine.pump_pipes()
    assert batch_engine.wait(again).output == {"batchItemFailures": []}
    assert row(batch_engine, "order-2")["status"] == "PROCESSED"
    assert "open_status" not in row(batch_engine, "order-2")


def test_a_crashed_batch_leaves_its_claims_in_the_open_work_index(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN a message whose batch execution dies after its Claim (its call runs past the
    # batch's five minutes: ExecutionTimedOut, which no Catch takes)
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        return out_of_time(batch_engine, payload, real(payload, context))

    send(batch_engine, "order-crash")
    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    assert batch_engine.wait(arn).status == "TIMED_OUT"
    # THEN its row is PROCESSING and in the index, where the sweep looks for expired locks
    claimed = row(batch_engine, "order-crash")
    assert claimed["status"] == "PROCESSING"
    assert claimed["open_status"] == open_status("PROCESSING", "sqs:order-crash")


def test_a_claims_lock_expires_before_its_message_can_come_back(
    batch_engine: LocalEngine,
) -> None:
    """A message whose batch died comes back after the queue's visibility timeout; its
    lock must have expired by then, or each attempt would cost more than one receive of
    the budget the template's rule counts (SourceQueueCoversMaxAttempts)."""
    # GIVEN a message whose claim is written (LockTimeoutSeconds is 900 by default)
    send(batch_engine, "order-lock")
    assert len(batch_engine.pump_pipes()) == 1
    claimed = row(batch_engine, "order-lock")
    lock = int(claimed["lock_expires_at"]) - int(claimed["created_at"]) // 1000
    visibility = batch_engine.client("sqs").get_queue_attributes(
        QueueUrl=batch_engine.ref("SourceQueue"), AttributeNames=["VisibilityTimeout"]
    )["Attributes"]["VisibilityTimeout"]
    # THEN the lock is capped by what a batch execution can last (five minutes, then the
    # last Process call's timeout, and a minute), below the visibility timeout
    assert lock <= 300 + (40 + 10) + 60 + 1
    assert lock < int(visibility)


# ---- a row at MaxAttempts is dead-lettered by its next delivery (P11) -----------------


def _fail_always(engine: LocalEngine, order: str) -> Callable[[Any, Any], Any]:
    real = bundled(engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["workItem"]["payload"]["orderId"] == order:
            raise TransientError("the warehouse is down")
        return real(payload, context)

    return handler


def _only_outcome(engine: LocalEngine, arn: str) -> tuple[str, bool]:
    [outcome] = outcomes(engine, arn).values()
    return outcome["outcome"], outcome["retry"]


def test_a_row_whose_last_dlq_send_failed_is_dead_lettered_by_the_next_delivery(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an order that fails every time, and on its last attempt (3, MaxAttempts) a
    # DLQ that refuses SendMessage (a KMS key policy mistake)
    message = send(batch_engine, "order-kms")
    with batch_engine.override_function(FUNCTION, _fail_always(batch_engine, "order-kms")):
        for _ in range(2):
            [arn] = batch_engine.pump_pipes()
            assert _only_outcome(batch_engine, arn) == ("Failed", True)
        with failing(batch_engine, "sqs", "SendMessage", KMS_DENIED):
            [last] = batch_engine.pump_pipes()
    assert _only_outcome(batch_engine, last) == ("DeadLetterFailed", True)
    stuck = row(batch_engine, "order-kms")
    assert (stuck["status"], stuck["attempts"], "dead_lettered_at" in stuck) == (
        "FAILED",
        "3",
        False,
    )
    assert dlq_messages(batch_engine) == []
    calls = invocations(batch_engine)
    # WHEN the message comes back with the DLQ working again
    [arn] = batch_engine.pump_pipes()
    # THEN the row at MaxAttempts is taken (a conditional write), its DLQ message sent,
    # and only then marked dead-lettered: the message is settled and deleted
    assert _only_outcome(batch_engine, arn) == ("DeadLettered", False)
    entered = batch_engine.wait(arn).states_entered
    assert entered[entered.index("Reclaim") :][:5] == [
        "Reclaim",
        "AtMaxAttempts",
        "TakeOverAtMaxAttempts",
        "SendToDLQ",
        "DeadLetterReason",
    ]
    assert "MarkDeadLettered" in entered
    assert invocations(batch_engine) == calls  # the processor is not called again
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["IDEMPOTENCY_KEY"] == "sqs:order-kms"
    assert attributes(dead)["ERROR_CODE"] == "TransientError"
    assert attributes(dead)["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert attributes(dead)["RETRY_ATTEMPTS"] == "3"
    assert json.loads(dead["Body"])["event"][0]["messageId"] == message
    done = row(batch_engine, "order-kms")
    assert done["status"] == "FAILED" and "dead_lettered_at" in done
    assert "open_status" not in done
    assert queued(batch_engine) == {}
    assert queued(batch_engine, "SourceDeadLetterQueue") == {}
    # AND a later copy of the same order is a settled duplicate: no second DLQ message
    send(batch_engine, "order-kms")
    [again] = batch_engine.pump_pipes()
    assert _only_outcome(batch_engine, again) == ("Duplicate", False)
    assert len(dlq_messages(batch_engine)) == 1


def test_a_batch_that_dies_on_the_last_attempt_is_dead_lettered_once_its_lock_expires(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an order that fails twice, then on its last attempt kills its whole batch
    # execution (its call runs past the batch's five minutes: ExecutionTimedOut)
    send(batch_engine, "order-dies")
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["attempt"] < 3:
            raise TransientError("the warehouse is down")
        return out_of_time(batch_engine, payload, real(payload, context))

    with batch_engine.override_function(FUNCTION, handler):
        for _ in range(3):
            [arn] = batch_engine.pump_pipes()
    assert batch_engine.wait(arn).status == "TIMED_OUT"
    stuck = row(batch_engine, "order-dies")
    assert (stuck["status"], stuck["attempts"]) == ("PROCESSING", "3")
    # WHEN its lock expires and the message comes back
    expire_lock(batch_engine, "sqs:order-dies")
    [arn] = batch_engine.pump_pipes()
    # THEN the row is dead-lettered as the audit would (LockExpired), with one DLQ message
    assert _only_outcome(batch_engine, arn) == ("DeadLettered", False)
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["ERROR_CODE"] == "LockExpired"
    assert attributes(dead)["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert (
        "expired with the work unfinished, after 3 attempt(s)" in attributes(dead)["ERROR_MESSAGE"]
    )
    assert "dead_lettered_at" in row(batch_engine, "order-dies")
    assert queued(batch_engine) == {}


def test_an_invalid_message_whose_batch_then_fails_as_a_whole_has_one_dlq_message(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN a batch of an invalid message (a body that is no JSON: IdempotencyKeyPath reads
    # the key from it) and an order whose call, once the invalid message is dead-lettered,
    # runs past the batch's five minutes: the whole execution times out
    sqs = batch_engine.client("sqs")
    sqs.send_message(QueueUrl=batch_engine.ref("SourceQueue"), MessageBody="not json")
    send(batch_engine, "order-slow")
    real = bundled(batch_engine)
    deadline = time.monotonic() + 30

    def handler(payload: Any, context: Any) -> Any:
        while not dlq_messages(batch_engine) and time.monotonic() < deadline:
            time.sleep(0.05)  # the invalid message's DLQ message is sent first
        return out_of_time(batch_engine, payload, real(payload, context))

    with batch_engine.override_function(FUNCTION, handler):
        [arn] = batch_engine.pump_pipes()
    assert batch_engine.wait(arn).status == "TIMED_OUT"
    assert len(dlq_messages(batch_engine)) == 1
    # WHEN the pipe hands the batch over again (it kept every message of the failed batch)
    expire_lock(batch_engine, "sqs:order-slow")
    batch_engine.pump_pipes()
    # THEN the order is done once, and the invalid message has still one DLQ message
    assert row(batch_engine, "order-slow")["status"] == "PROCESSED"
    assert output_effects(batch_engine) == 1
    assert queued(batch_engine) == {}
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"


def test_an_invalid_message_deletes_itself_once_its_dlq_message_is_sent(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an invalid message (a body that is no JSON) in a batch
    batch_engine.client("sqs").send_message(
        QueueUrl=batch_engine.ref("SourceQueue"), MessageBody="not json"
    )
    # WHEN the pipe hands it over
    [arn] = batch_engine.pump_pipes()
    # THEN its DLQ message is sent, and only then the execution deletes it from the
    # source queue itself (a later failure of the whole batch cannot bring it back)
    result = batch_engine.wait(arn)
    entered = result.states_entered
    assert entered[entered.index("SendToDLQ") :][:5] == [
        "SendToDLQ",
        "DeadLetterReason",
        "DeleteInvalidMessage",
        "LogInvalidEvent",
        "InvalidEvent",
    ]
    tasks = [e["type"] for e in result.events if e["type"].startswith("Task")]
    assert tasks.count("TaskFailed") == 0
    assert _only_outcome(batch_engine, arn) == ("InvalidEvent", False)
    assert queued(batch_engine) == {}
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"


def test_an_invalid_message_whose_delete_fails_is_left_for_the_pipe(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an invalid message, and a source queue that refuses every DeleteMessage
    batch_engine.client("sqs").send_message(
        QueueUrl=batch_engine.ref("SourceQueue"), MessageBody="not json"
    )
    refused = sqs_error("AccessDenied", "Access to the resource is denied.")
    # WHEN the pipe hands it over
    with failing(batch_engine, "sqs", "DeleteMessage", refused):
        [arn] = batch_engine.pump_pipes()
    # THEN the refused delete is caught: the message still ends InvalidEvent, settled,
    # with one DLQ message, and the pipe deletes it as before (DeleteMessageBatch)
    result = batch_engine.wait(arn)
    assert result.status == "SUCCEEDED"
    entered = result.states_entered
    assert entered[entered.index("DeleteInvalidMessage") :][:3] == [
        "DeleteInvalidMessage",
        "LogInvalidEvent",
        "InvalidEvent",
    ]
    assert [
        e
        for e in result.events
        if e["type"] == "TaskFailed"
        and "Access to the resource is denied" in e["taskFailedEventDetails"]["cause"]
    ]
    assert _only_outcome(batch_engine, arn) == ("InvalidEvent", False)
    assert queued(batch_engine) == {}
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"


def test_a_row_at_max_attempts_under_a_live_lock_is_not_taken_over(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN a row at MaxAttempts that another execution still holds (an hour left)
    now = int(time.time())
    batch_engine.client("dynamodb").put_item(
        TableName=batch_engine.ref("LedgerTable"),
        Item={
            "pk": {"S": "sqs:order-busy"},
            "status": {"S": "PROCESSING"},
            "lock_owner": {"S": "arn:aws:states:us-east-1:123456789012:express:other:x:y#0"},
            "lock_expires_at": {"N": str(now + 3600)},
            "attempts": {"N": "3"},
            "expires_at": {"N": str(now + 86400)},
        },
    )
    message = send(batch_engine, "order-busy")
    # WHEN its message arrives
    [arn] = batch_engine.pump_pipes()
    # THEN the takeover is refused: the message stays, nothing is dead-lettered
    assert _only_outcome(batch_engine, arn) == ("Duplicate", True)
    assert "TakeOverAtMaxAttempts" in batch_engine.wait(arn).states_entered
    assert queued(batch_engine) == {message: "order-busy"}
    assert dlq_messages(batch_engine) == []
    assert row(batch_engine, "order-busy")["status"] == "PROCESSING"


@pytest.fixture
def one_attempt_engine() -> Iterator[LocalEngine]:
    # MaxAttempts is a constant (3): a user who wants 1 changes template.yaml's Mappings
    engine = LocalEngine(TEMPLATE, PARAMETERS, function_log=io.StringIO(), time_scale=0.0)
    with with_constants(engine, MaxAttempts="1") as local:
        yield local


def test_a_ledger_outage_after_the_only_attempt_ends_in_one_dead_letter(
    one_attempt_engine: LocalEngine,
) -> None:
    engine = one_attempt_engine
    # GIVEN MaxAttempts 1, and MarkComplete throttled past its retries after the work is done
    message = send(engine, "order-once")
    with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        [arn] = engine.pump_pipes()
    # THEN LedgerUnavailable keeps the message and sends nothing: the queue carries the work
    assert _only_outcome(engine, arn) == ("LedgerUnavailable", True)
    assert dlq_messages(engine) == []
    assert queued(engine) == {message: "order-once"}
    assert row(engine, "order-once")["status"] == "PROCESSING"
    assert output_effects(engine) == 1
    # WHEN the lock expires and the message comes back
    expire_lock(engine, "sqs:order-once")
    [arn] = engine.pump_pipes()
    # THEN the row at MaxAttempts is dead-lettered: one DLQ message, the queue empty
    assert _only_outcome(engine, arn) == ("DeadLettered", False)
    [dead] = dlq_messages(engine)
    assert attributes(dead)["ERROR_CODE"] == "LockExpired"
    assert "dead_lettered_at" in row(engine, "order-once")
    assert queued(engine) == {}
    assert output_effects(engine) == 1


def test_ledger_unavailable_keeps_the_message_and_sends_no_dlq_message(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN MarkComplete throttled past its retries after the work is done (attempt 1 of 3)
    message = send(batch_engine, "order-outage")
    with failing(batch_engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
        [arn] = batch_engine.pump_pipes()
    # THEN the message stays (the queue, not a DLQ message, carries the work), logged
    # under the processor's name
    assert _only_outcome(batch_engine, arn) == ("LedgerUnavailable", True)
    entered = batch_engine.wait(arn).states_entered
    assert "SendToDLQ" not in entered and "LedgerUnavailable" in entered
    assert dlq_messages(batch_engine) == []
    assert queued(batch_engine) == {message: "order-outage"}
    # WHEN the ledger is back, the lock expires and the message comes back
    expire_lock(batch_engine, "sqs:order-outage")
    [again] = batch_engine.pump_pipes()
    # THEN the work is recorded done (the sink's conditional write keeps one effect), and
    # no DLQ message is left for finished work: the DLQ alarm does not fire
    assert _only_outcome(batch_engine, again) == ("Processed", False)
    assert row(batch_engine, "order-outage")["status"] == "PROCESSED"
    assert dlq_messages(batch_engine) == []
    assert queued(batch_engine) == {}
    assert output_effects(batch_engine) == 1


# ---- onceflow inspect on a batch claim (P11 item 12) ----------------------------------


def test_inspect_reports_a_batch_claim_as_its_message_in_the_batch_execution(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN two orders processed in one batch
    send(batch_engine, "order-a")
    send(batch_engine, "order-b")
    [arn] = batch_engine.pump_pipes()
    owner = row(batch_engine, "order-b")["lock_owner"]
    index = int(owner.rsplit("#", 1)[1])
    # WHEN one of them is inspected
    found = ops.inspect_key(LocalTarget(batch_engine), "sqs:order-b")
    # THEN its claim is the batch execution, found and SUCCEEDED (not ExecutionDoesNotExist),
    # with that message's own path through the iteration
    [claimed] = [e for e in found["executions"] if e["role"] == "claimed"]
    assert claimed["executionArn"] == arn
    assert claimed["lockOwner"] == owner
    assert claimed["message"] == index
    assert claimed["status"] == "SUCCEEDED"
    assert claimed["startDate"]  # from the engine's record: DescribeExecution refuses it
    assert claimed["path"] == [
        "TakeMessage",
        "Claim",
        "Process",
        "MarkComplete",
        "Processed",
    ]


# ---- onceflow redrive --queue source (P11) ---------------------------------------------


def _hold(engine: LocalEngine, order: str, attempts: int) -> None:
    """A row another execution holds under a live lock (an hour left)."""
    now = int(time.time())
    engine.client("dynamodb").put_item(
        TableName=engine.ref("LedgerTable"),
        Item={
            "pk": {"S": f"sqs:{order}"},
            "status": {"S": "PROCESSING"},
            "lock_owner": {"S": "arn:aws:states:us-east-1:123456789012:execution:other:x"},
            "lock_expires_at": {"N": str(now + 3600)},
            "attempts": {"N": str(attempts)},
            "expires_at": {"N": str(now + 86400)},
        },
    )


def _exhaust_receives(engine: LocalEngine) -> None:
    """Deliver until the queue's redrive policy moves what stays to its DLQ."""
    receives = int(
        json.loads(
            engine.client("sqs").get_queue_attributes(
                QueueUrl=engine.ref("SourceQueue"), AttributeNames=["RedrivePolicy"]
            )["Attributes"]["RedrivePolicy"]
        )["maxReceiveCount"]
    )
    for _ in range(receives + 1):
        engine.pump_pipes()


def test_redrive_moves_the_source_dlqs_messages_back_through_the_pipe(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN two orders whose rows other executions held past the queue's receive budget:
    # one below MaxAttempts, one at it; both messages are now in the source queue's DLQ
    _hold(batch_engine, "order-late", attempts=1)
    _hold(batch_engine, "order-spent", attempts=3)
    send(batch_engine, "order-late")
    send(batch_engine, "order-spent")
    _exhaust_receives(batch_engine)
    assert queued(batch_engine) == {}
    assert sorted(queued(batch_engine, "SourceDeadLetterQueue").values()) == [
        "order-late",
        "order-spent",
    ]
    # WHEN those executions died long ago, and the operator redrives the source DLQ
    expire_lock(batch_engine, "sqs:order-late")
    expire_lock(batch_engine, "sqs:order-spent")
    report = ops.redrive(LocalTarget(batch_engine), queue="source")
    # THEN both are moved back to the source queue (the DLQ empty), and the pipe
    # delivers them: the one below MaxAttempts is done, the one at it dead-lettered (one
    # DLQ message, for `redrive --queue processor` to give a deliberate second chance)
    assert report.count("resubmitted") == 2
    assert queued(batch_engine, "SourceDeadLetterQueue") == {}
    assert sorted(queued(batch_engine).values()) == ["order-late", "order-spent"]
    batch_engine.pump_pipes()
    assert row(batch_engine, "order-late")["status"] == "PROCESSED"
    spent = row(batch_engine, "order-spent")
    assert spent["status"] == "FAILED" and "dead_lettered_at" in spent
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["IDEMPOTENCY_KEY"] == "sqs:order-spent"
    # AND nothing loops: the source queue and its DLQ are empty, a second redrive moves nothing
    assert queued(batch_engine) == {}
    assert ops.redrive(LocalTarget(batch_engine), queue="source").messages == []
    assert output_effects(batch_engine) == 1


def test_redrive_source_dry_run_moves_nothing(batch_engine: LocalEngine) -> None:
    _hold(batch_engine, "order-dry", attempts=1)
    send(batch_engine, "order-dry")
    _exhaust_receives(batch_engine)
    report = ops.redrive(LocalTarget(batch_engine), queue="source", dry_run=True)
    assert [m.action for m in report.messages] == ["would resubmit"]
    assert list(queued(batch_engine, "SourceDeadLetterQueue").values()) == ["order-dry"]
    assert queued(batch_engine) == {}


# ---- the single-message processor: the same row, a deliberate difference ---------------


def test_the_single_message_processor_leaves_a_row_at_max_attempts_to_the_audit() -> None:
    """docs/design.md, "The SQS batch mode": a delivery to the single-message processor is
    consumed whatever it ends in (EventBridge's target, a FIRE_AND_FORGET pipe), and its
    rows are found by the audit's sweep, which dead-letters a row at MaxAttempts; its
    duplicate path stays Claim, Reclaim, Duplicate (one refused write, no more)."""
    with audit_engine() as engine:
        # GIVEN an upload that failed MaxAttempts (3) times, the last with the DLQ refusing
        version = upload(engine, "spent.png")
        pk = idempotency_key(engine, "spent.png", version)
        event = s3_event(engine, "spent.png", version)
        with engine.override_function(FUNCTION, _raise(TransientError)):
            for _ in range(2):
                engine.execute(MACHINE, event)
            with failing(engine, "sqs", "SendMessage", KMS_DENIED):
                assert engine.execute(MACHINE, event).error == "DeadLetterFailed"
        # WHEN its event is delivered again
        again = engine.execute(MACHINE, event)
        # THEN it is a duplicate, as the card's duplicate path, and the row stays open work
        assert again.states_entered == ["Claim", "Reclaim", "Duplicate"]
        assert dlq_messages(engine) == []
        assert (ledger_row(engine, pk) or {})["open_status"] == open_status("FAILED", pk)
        # AND the audit's sweep dead-letters it: one DLQ message
        assert run_audit(engine).output["failed_dead_lettered"] == 1
        [dead] = dlq_messages(engine)
        assert attributes(dead)["IDEMPOTENCY_KEY"] == pk


def _raise(error: type[Exception]) -> Callable[[Any, Any], Any]:
    def handler(payload: Any, context: Any) -> Any:
        raise error("injected")

    return handler


def test_the_audit_dead_letters_batch_work_the_queue_no_longer_brings_back(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN an order that failed twice, then died with its whole batch on the last attempt
    send(batch_engine, "order-gone")
    real = bundled(batch_engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["attempt"] < 3:
            raise TransientError("the warehouse is down")
        return out_of_time(batch_engine, payload, real(payload, context))

    with batch_engine.override_function(FUNCTION, handler):
        for _ in range(3):
            batch_engine.pump_pipes()
    assert row(batch_engine, "order-gone")["status"] == "PROCESSING"
    # AND its message is gone from the queue (its 14 days ran out; SQS deletes it)
    batch_engine.client("sqs").purge_queue(QueueUrl=batch_engine.ref("SourceQueue"))
    assert queued(batch_engine) == {}
    # WHEN its lock has expired and the audit runs
    expire_lock(batch_engine, "sqs:order-gone")
    report = run_audit(batch_engine).output
    # THEN the sweep found it through OpenWork and dead-lettered it: one DLQ message
    assert report["stuck_dead_lettered"] == 1
    [dead] = dlq_messages(batch_engine)
    assert attributes(dead)["IDEMPOTENCY_KEY"] == "sqs:order-gone"
    assert attributes(dead)["ERROR_CODE"] == "LockExpired"
    assert "dead_lettered_at" in row(batch_engine, "order-gone")
