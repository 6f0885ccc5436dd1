"""An adversarial review of P11 (issue 25): work lost, stuck or doubled in the SQS batch
mode, the audit's sweep and the S3-through-queue path. Two tests failed before their fix:
a DLQ refusing the sweep's dead letter stopped the whole sweep, and an existing source
queue whose messages make a batch too large went unreported by the doctor. The others
add what the suite did not try, and held. Every failure is injected for real (a
processor that raises, a DLQ that refuses SendMessage, a throttled ledger write or
start, a lock that expires, an execution that runs out of time).
"""

from __future__ import annotations

import copy
import io
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.sqs.models import sqs_backends

from onceflow import ops
from onceflow.local import executions
from onceflow.local.engine import ACCOUNT_ID, REGION, LocalEngine
from onceflow.local.target import LocalTarget
from onceflow.local.wiring import LocalStack
from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    Gate,
    TransientError,
    attributes,
    audit_engine,
    dlq_messages,
    expire_lock,
    idempotency_key,
    invocations,
    ledger_row,
    ledger_rows,
    load_event,
    out_of_time,
    output_effects,
    run_audit,
    s3_event,
    upload,
)
from tests.hostile import corpus
from tests.workflow.test_audit_dead_letter import always, dlq_refusing
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes, queued
from tests.workflow.test_failure_paths import failing, throttled


def _order(order: str) -> list[dict[str, Any]]:
    """events/sqs-business-message.json (the pipe's array) carrying another order."""
    event: list[dict[str, Any]] = copy.deepcopy(load_event("sqs-business-message.json"))
    event[0]["messageId"] = f"message-{order}"
    event[0]["body"] = json.dumps({"orderId": order})
    return event


# ---- the sweep goes on when one row's DLQ message cannot be sent -----------------------


def test_a_dlq_that_refuses_the_sweeps_dead_letter_does_not_stop_the_sweep() -> None:
    """A dead letter the DLQ refuses (a KMS key policy mistake) is the sweep's
    DeadLetterFailed: the row stays open work for the next audit, and the rows after it
    are still swept. It stopped the whole sweep, every day the DLQ refused, so a
    message that only needed resubmitting was never retried (issue 25, item 4's
    "the sweep goes on")."""
    with audit_engine(SqsSource="create", IdempotencyKeyPath="orderId") as engine:
        # GIVEN an order stuck at MaxAttempts: two failures, then its third run's
        # MarkComplete throttled past its retries (LedgerUnavailable), its lock expired
        spent = _order("order-spent")
        with engine.override_function(FUNCTION, always(TransientError)):
            for _ in range(2):
                assert engine.execute(MACHINE, spent).outcome == "Failed"
        with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
            assert engine.execute(MACHINE, spent).error == "LedgerUnavailable"
        stuck = ledger_row(engine, "sqs:order-spent") or {}
        assert (stuck["status"], stuck["attempts"]) == ("PROCESSING", "3")
        expire_lock(engine, "sqs:order-spent")
        # AND an order that failed once, which only the sweep retries (the pipe consumed it)
        with engine.override_function(FUNCTION, always(TransientError)):
            assert engine.execute(MACHINE, _order("order-retry")).outcome == "Failed"
        assert (ledger_row(engine, "sqs:order-retry") or {})["status"] == "FAILED"
        # WHEN the audit runs while the DLQ refuses every message
        with dlq_refusing(engine):
            result = engine.execute(AUDIT, {})
            engine.wait_for_running(MACHINE)
        # THEN the audit reports, the order that needed a retry is done, and the row it
        # could not dead-letter is left as it was, open work with no DLQ message
        assert result.status == "SUCCEEDED", (result.error, result.cause)
        report = result.output
        assert report["failed_resubmitted"] == 1
        assert (ledger_row(engine, "sqs:order-retry") or {})["status"] == "PROCESSED"
        assert report["stuck_dead_lettered"] == 0 and report["resubmit_errors"] == 1
        left = ledger_row(engine, "sqs:order-spent") or {}
        assert left["status"] == "PROCESSING" and "dead_lettered_at" not in left
        assert left["lock_owner"] == stuck["lock_owner"]
        assert left["open_status"].startswith("PROCESSING#")
        assert dlq_messages(engine) == []
        # AND once the DLQ takes messages again, the next audit dead-letters it: one message
        again = engine.execute(AUDIT, {})
        assert again.status == "SUCCEEDED", (again.error, again.cause)
        assert again.output["stuck_dead_lettered"] == 1
        [dead] = dlq_messages(engine)
        assert attributes(dead)["IDEMPOTENCY_KEY"] == "sqs:order-spent"
        assert attributes(dead)["EXECUTION_ARN"] == stuck["lock_owner"]
        assert "dead_lettered_at" in (ledger_row(engine, "sqs:order-spent") or {})


# ---- S3 through the queue: an upload whose batch died on its last attempt ---------------


def test_an_upload_whose_batch_died_on_its_last_attempt_is_dead_lettered_by_the_sweep() -> None:
    """The S3 cheap path (SqsBatchMode alone): the row's lock owner is a batch message
    (``<execution>#<index>``), which DescribeExecution cannot name; with no copy of the
    event on the row (an object's row keeps none) the sweep still sends one DLQ message,
    with the work item, once the queue no longer brings the message back."""
    parameters = {"SqsBatchMode": "true", "ProcessorTimeoutSeconds": "40"}
    with audit_engine(**parameters) as engine:
        # GIVEN an upload that failed twice, then died with its whole batch on attempt 3
        version = upload(engine, "uploads/dies.png")
        pk = idempotency_key(engine, "uploads/dies.png", version)
        real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])

        def handler(payload: Any, context: Any) -> Any:
            if payload["attempt"] < 3:
                raise TransientError("the image service is down")
            return out_of_time(engine, payload, real(payload, context))

        with engine.override_function(FUNCTION, handler):
            assert (
                engine.put_s3_event(engine.ref("IngestBucket"), "uploads/dies.png", version) == []
            )
            for _ in range(3):
                engine.pump_pipes()
        stuck = ledger_row(engine, pk) or {}
        assert (stuck["status"], stuck["attempts"]) == ("PROCESSING", "3")
        assert "#" in stuck["lock_owner"]
        # AND its message is gone (its 14 days ran out), its lock long expired
        engine.client("sqs").purge_queue(QueueUrl=engine.ref("SourceQueue"))
        expire_lock(engine, pk)
        # WHEN the audit runs
        report = run_audit(engine).output
        # THEN the sweep dead-lettered it: one DLQ message naming the object, the row marked
        assert report["stuck_dead_lettered"] == 1 and report["resubmit_errors"] == 0
        [dead] = dlq_messages(engine)
        assert attributes(dead)["IDEMPOTENCY_KEY"] == pk
        assert attributes(dead)["ERROR_CODE"] == "LockExpired"
        assert json.loads(dead["Body"])["workItem"]["key"] == "uploads/dies.png"
        done = ledger_row(engine, pk) or {}
        assert "dead_lettered_at" in done and "open_status" not in done
        # AND a second audit does nothing more
        again = run_audit(engine).output
        assert again["stuck_dead_lettered"] == 0 and again["missing_resubmitted"] == 0
        assert len(dlq_messages(engine)) == 1


# ---- the same upload through both paths at once (62 ms apart) --------------------------


def test_an_upload_through_the_queue_while_the_direct_path_holds_it_has_one_effect() -> None:
    """The S3 cheap path: an upload's event comes through the queue while the direct path
    (the audit's resubmission, or the rule before a switch to the batch mode) is still
    processing it. The batch message must neither run it again nor be deleted before
    the row is settled: it stays (a Duplicate the queue brings back), then is settled."""
    parameters = {"SqsBatchMode": "true", "ProcessorTimeoutSeconds": "40"}
    with audit_engine(**parameters) as engine:
        version = upload(engine, "uploads/both.png")
        pk = idempotency_key(engine, "uploads/both.png", version)
        gate = Gate()
        real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])

        def slow(payload: Any, context: Any) -> Any:
            gate.hold()
            return real(payload, context)

        # GIVEN the direct path's execution, mid-processing under its lock
        with engine.override_function(FUNCTION, slow), ThreadPoolExecutor(1) as pool:
            direct = pool.submit(
                engine.execute, MACHINE, s3_event(engine, "uploads/both.png", version)
            )
            gate.wait_entered()
            # WHEN the same upload's event comes through the queue meanwhile
            bucket = engine.ref("IngestBucket")
            assert engine.put_s3_event(bucket, "uploads/both.png", version) == []
            [during] = engine.pump_pipes()
            gate.release.set()
            assert direct.result().outcome == "Processed"
        # THEN the batch did not run it, and kept its message (the row was not settled)
        [outcome] = outcomes(engine, during).values()
        assert (outcome["outcome"], outcome["retry"]) == ("Duplicate", True)
        assert len(queued(engine)) == 1
        # AND the message's next delivery is a settled duplicate: deleted, one effect
        [after] = engine.pump_pipes()
        [outcome] = outcomes(engine, after).values()
        assert (outcome["outcome"], outcome["retry"]) == ("Duplicate", False)
        assert queued(engine) == {}
        assert output_effects(engine) == 1 and invocations(engine) == 1
        row = ledger_row(engine, pk) or {}
        assert (row["status"], row["attempts"]) == ("PROCESSED", "1")
        assert dlq_messages(engine) == []


# ---- a batch where messages are hostile -------------------------------------------------


def _hostile_bodies(bucket: str, limit: int) -> list[str]:
    """Message bodies made of the hostile corpus (tests/hostile.py), spread over its
    classes: an SQS message's body as it is, any other input as its JSON text (as
    EventBridge would put an event into the queue)."""
    bodies: list[str] = []
    for hostile in corpus(bucket):
        event = hostile.event
        if isinstance(event, list) and len(event) == 1 and isinstance(event[0], dict):
            body = event[0].get("body")
        else:
            body = event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)
        if isinstance(body, str):
            bodies.append(body)
    step = max(1, len(bodies) // limit)
    return bodies[::step][:limit]


def test_hostile_messages_in_a_batch_end_alone_and_their_neighbours_are_processed() -> None:
    """The single-message processor's hostile corpus, as bodies of batch messages, nine to
    a batch with one order: no body fails the batch as a whole (which would keep every
    neighbour in the queue and spend its receives), each ends in a named outcome, and
    the order is processed."""
    parameters = {
        "SqsBatchMode": "true",
        "ProcessorTimeoutSeconds": "40",
        "IdempotencyKeyPath": "orderId",
        "CustomEventSource": "com.example.orders",
    }
    with audit_engine(**parameters) as engine:
        sqs = engine.client("sqs")
        url = engine.ref("SourceQueue")
        largest = int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])[
                "Attributes"
            ]["MaximumMessageSize"]
        )
        hostile = [
            body
            for body in _hostile_bodies(engine.ref("IngestBucket"), 120)
            if 0 < len(body.encode("utf-8", "surrogatepass")) <= largest
            and not re.search("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]", body)
        ]
        assert len(hostile) >= 80
        named = {"Processed", "Duplicate", "Ignored", "Superseded", "InvalidEvent"}
        named |= {"DeadLettered", "Failed"}
        for start in range(0, len(hostile), 9):
            # GIVEN nine hostile bodies and one order in the queue
            for body in hostile[start : start + 9]:
                sqs.send_message(QueueUrl=url, MessageBody=body)
            order = sqs.send_message(
                QueueUrl=url, MessageBody=json.dumps({"orderId": f"neighbour-{start}"})
            )["MessageId"]
            # WHEN the pipe hands them over as one batch
            [arn] = engine.pump_pipes(limit=1)
            # THEN the batch answered, each message with a named outcome, the order done
            result = engine.wait(arn)
            assert result.status == "SUCCEEDED", (start, result.error, result.cause)
            ended = outcomes(engine, arn)
            assert len(ended) == len(hostile[start : start + 9]) + 1
            assert {o["outcome"] for o in ended.values()} <= named, ended
            assert ended[order]["outcome"] == "Processed"
            # AND only messages whose outcome is not settled stay, for the next delivery
            kept = {m for m, o in ended.items() if o["retry"] is not False}
            assert set(queued(engine)) == kept
            _empty(engine)


def _empty(engine: LocalEngine) -> None:
    """Drop what the source queue keeps, so that the next batch is only what a test sends
    (read from the local SQS itself, as ``queued`` does: a purge waits 60 s between two)."""
    name = engine.get_att("SourceQueue", "QueueName")
    sqs_backends[ACCOUNT_ID][REGION].get_queue(name)._messages.clear()


# ---- receives spent without work: the pipe cannot start its batch ---------------------


def _start_throttled(monkeypatch: pytest.MonkeyPatch, state_machine: str) -> None:
    """Step Functions refusing the pipe's start of one machine with ThrottlingException (at
    the account's StartSyncExecution quota, or the pipe's concurrency), as botocore raises
    it: the engine's fault hooks answer only DynamoDB, SQS and S3 requests."""
    start = executions.start

    def throttled_start(engine: LocalEngine, target: str, *args: Any, **kwargs: Any) -> str:
        if engine.state_machine_arn(target) == state_machine:
            error = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}
            raise ClientError(error, "StartSyncExecution")  # type: ignore[arg-type]
        return start(engine, target, *args, **kwargs)

    monkeypatch.setattr(executions, "start", throttled_start)


def test_a_message_whose_batch_the_pipe_cannot_start_comes_back_through_the_source_dlq(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AWS counts a receive when the pipe cannot invoke its target (issue 25, item 2): a
    message the pipe could never hand over spends its receive budget with no row to show
    for it. It ends in the source queue's DLQ (alarmed), and `onceflow redrive --queue
    source` brings it back through the pipe: processed once."""
    parameters = {**BATCH_PARAMETERS, "AuditRecentCutoffHours": "0"}
    with audit_engine(**parameters) as engine:
        # GIVEN an order, and Step Functions throttling every start of the batch workflow
        batch = engine.state_machine_arn("BatchProcessorStateMachine")
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps({"orderId": "order-late"})
        )
        with monkeypatch.context() as patched:
            _start_throttled(patched, batch)
            # WHEN the pipe polls until the queue's redrive policy gives up on it
            assert engine.pump_pipes() == []
        # THEN it waits in the source DLQ, with no row (nothing claimed it) and no DLQ message
        assert queued(engine) == {}
        assert list(queued(engine, "SourceDeadLetterQueue").values()) == ["order-late"]
        assert ledger_row(engine, "sqs:order-late") is None and dlq_messages(engine) == []
        # AND the audit cannot see it (no row), so the source DLQ's alarm is what shows it
        assert run_audit(engine).output["failed_resubmitted"] == 0
        # WHEN the operator redrives the source DLQ once Step Functions takes starts again
        report = ops.redrive(LocalTarget(engine), queue="source")
        assert report.count("resubmitted") == 1
        [arn] = engine.pump_pipes()
        # THEN it is processed once, and nothing is left in either queue
        [outcome] = outcomes(engine, arn).values()
        assert (outcome["outcome"], outcome["retry"]) == ("Processed", False)
        assert (ledger_row(engine, "sqs:order-late") or {})["status"] == "PROCESSED"
        assert queued(engine) == {} and queued(engine, "SourceDeadLetterQueue") == {}
        assert output_effects(engine) == 1 and dlq_messages(engine) == []


# ---- an existing source queue whose messages make a batch too large -------------------

_ORDERS = "arn:aws:sqs:us-east-1:123456789012:orders"


def _orders_engine() -> LocalEngine:
    """The batch mode on the user's own queue (SqsSource), whose largest message is SQS's
    default (256 KiB), not the size the stack gives the queue it creates."""
    parameters = {
        "SqsSource": _ORDERS,
        "SqsBatchMode": "true",
        "ProcessorTimeoutSeconds": "40",
        "IdempotencyKeyPath": "orderId",
    }
    return LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0)


def _orders_queue(engine: LocalEngine) -> tuple[str, str]:
    """The user's queue, with a DLQ after 5 receives: (its URL, its DLQ's URL)."""
    sqs = engine.client("sqs")
    dlq = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
    policy = {"deadLetterTargetArn": f"{_ORDERS}-dlq", "maxReceiveCount": "5"}
    url = sqs.create_queue(
        QueueName="orders",
        Attributes={"VisibilityTimeout": "1800", "RedrivePolicy": json.dumps(policy)},
    )["QueueUrl"]
    return url, dlq


def _waiting(engine: LocalEngine, url: str) -> str:
    attributes = engine.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    return str(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_an_existing_queue_whose_full_batch_outgrows_step_functions_input_is_cut() -> None:
    """SqsSource=<your queue's ARN> in the batch mode: the stack sizes the queue it creates
    so that a full batch fits Step Functions' 256 KiB input (template.yaml, SourceQueue's
    MaximumMessageSize), but cannot size yours. Ten orders of 30 KB each, each one well
    within what the processor takes, make a full batch over the input. The pipe gathers a
    batch only "until ... the invocation payload size quota is reached" (eb-pipes-sqs.html),
    a Step Functions target's quota being the event's total payload, 262,144 characters,
    not the batch size (eb-pipes-batching-concurrency.html): it sends fewer orders per
    execution, and every one is processed. The doctor still warns, with the size that
    keeps batches whole."""
    with _orders_engine() as engine:
        # GIVEN ten orders of 30 KB in the user's queue
        url, dlq = _orders_queue(engine)
        sqs = engine.client("sqs")
        for n in range(10):
            body = json.dumps({"orderId": f"order-{n}", "notes": "n" * 30_000})
            sqs.send_message(QueueUrl=url, MessageBody=body)
        # WHEN the pipe polls
        arns = engine.pump_pipes()
        # THEN it sends the eight that fit one input, then the other two
        inputs = [json.loads(executions.describe(engine, arn)["input"]) for arn in arns]
        assert [len(batch) for batch in inputs] == [8, 2]
        assert all(len(json.dumps(b, separators=(",", ":"))) <= 262_144 for b in inputs)
        # AND every order is processed once, none waits in either queue
        rows = {row["pk"]: row["status"] for row in ledger_rows(engine)}
        assert rows == {f"sqs:order-{n}": "PROCESSED" for n in range(10)}
        assert (_waiting(engine, url), _waiting(engine, dlq)) == ("0", "0")
        # AND the doctor warns of the queue's message size, with the size that fits
        stack = LocalStack(engine)
        [warned] = [f for f in ops.examine(stack) if f.check == "source queue message size"]
        assert warned.status == ops.WARN
        assert "MaximumMessageSize=11264" in warned.detail
        # AND once the queue takes no larger messages, the doctor is content
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "11264"})
        sizes = [f for f in ops.examine(stack) if f.check == "source queue message size"]
        assert [f.status for f in sizes] == [ops.PASS]


def test_a_message_too_large_alone_for_the_input_reaches_the_dlq_unstarted() -> None:
    """A message the pipe writes over 256 KiB by itself (a body of quotes, each escaped to
    two bytes) is a batch no cut can start: every receive fails its start, and the queue's
    redrive policy moves it to the DLQ unprocessed, with no row. The orders around it go
    through in batches of their own."""
    with _orders_engine() as engine:
        # GIVEN a small order, one whose escaped body outgrows the input, another small one
        url, dlq = _orders_queue(engine)
        sqs = engine.client("sqs")
        bodies = [
            {"orderId": "order-a", "notes": "a"},
            {"orderId": "order-big", "notes": '"' * 140_000},
            {"orderId": "order-b", "notes": "b"},
        ]
        for body in bodies:
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))
        # WHEN the pipe polls until the queue gives up on the large one
        engine.pump_pipes()
        # THEN the small ones are processed and the large one waits in the DLQ, with no row
        rows = {row["pk"]: row["status"] for row in ledger_rows(engine)}
        assert rows == {"sqs:order-a": "PROCESSED", "sqs:order-b": "PROCESSED"}
        [moved] = sqs.receive_message(QueueUrl=dlq)["Messages"]
        assert json.loads(moved["Body"])["orderId"] == "order-big"
        assert _waiting(engine, url) == "0"
