"""The chaos run through the SQS source: the pipe one message at a time, or the batch mode.

Units of work are uploads announced by classic S3 notifications on the source queue
(or, ``s3_events``, by S3's EventBridge events, which the batch mode's rule sends to
the queue) and business messages (orders, keyed by ``orderId``). The queue's own faults are
played as AWS plays them: a message the batch workflow leaves unsettled comes back on
the next pass of the pipe, one visibility timeout later (locks age by that much), and
after SourceQueueMaxReceiveCount receives it moves to the source DLQ. Faults are
injected through the engine's mechanisms: a processor that raises, a DynamoDB or SQS
request answered with the service's error. Then time moves past every lock, the
audits run, and each unit of work is judged on its own (per message, not per batch).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TextIO

from moto.s3.models import s3_backends

from onceflow import ops
from onceflow.harness.common import (
    AuditsDuring,
    DemoObject,
    Progress,
    TransientError,
    drain,
    during_record,
    effects_by_idempotency_key,
    execution_span,
    render_during,
    s3_event,
    s3_notification,
    small_png,
)
from onceflow.local import executions, patches
from onceflow.local.engine import ACCOUNT_ID, ExecutionResult, LocalEngine
from onceflow.local.target import LocalTarget

FAULT_KINDS = (
    "lost",
    "poison",
    "transient",
    "claim_throttle",
    "complete_throttle",
    "dlq_refused",
    "ledger_unavailable",
    "last_attempt_death",
    "large_non_ascii",
    "delayed_notification",
    "receives_spent",
    "last_mark_unavailable",
    "invalid_undelivered",
)
# Only an upload can be lost or late (the audit walks the bucket) or poison (not an
# image); the faults of the queue's own paths hit business messages, whose only ways
# back are the queue and the audit's sweep.
OBJECT_FAULTS = frozenset({"lost", "poison", "delayed_notification"})
MESSAGE_FAULTS = frozenset(
    {
        "dlq_refused",
        "ledger_unavailable",
        "last_attempt_death",
        "large_non_ascii",
        "receives_spent",
        "last_mark_unavailable",
        "invalid_undelivered",
    }
)
# Units whose row an execution leaves PROCESSING under its lock when it ends.
LEFT_PROCESSING = frozenset({"last_attempt_death", "ledger_unavailable", "last_mark_unavailable"})
# Units the processor refuses every time until the operator's fix (before the redrive).
REFUSED_UNTIL_FIXED = frozenset({"dlq_refused", "last_mark_unavailable"})
DEFAULT_RATES = {
    "lost": 0.01,
    "poison": 0.01,
    "transient": 0.03,
    "claim_throttle": 0.01,
    "complete_throttle": 0.01,
    "dlq_refused": 0.01,
    "ledger_unavailable": 0.01,
    "last_attempt_death": 0.01,
    "large_non_ascii": 0.01,
    "delayed_notification": 0.01,
    "receives_spent": 0.01,
    "last_mark_unavailable": 0.01,
    "invalid_undelivered": 0.01,
}
INVARIANTS = (
    "every audit runs to its report",
    "no unit of work left outside a named end state",
    "at most one DLQ message per unit of work",
    "exactly one effect per unit of work not dead-lettered",
    "no effect for poison",
    "no DLQ message for processed work",
    "a second audit resubmits nothing",
    "the operator's redrive leaves only poison dead-lettered, the source DLQ empty",
    "the work runs once unless a fault after its effect forced a rerun",
)
RESUBMITTED = ("missing_resubmitted", "failed_resubmitted", "stuck_released")
AUDIT_KEYS = (
    "scanned",
    "missing_resubmitted",
    "failed_resubmitted",
    "stuck_released",
    "stuck_dead_lettered",
    "failed_dead_lettered",
    "dead_lettered_skipped",
    "resubmit_errors",
)
# How late a delayed notification arrives (a stopped pipe, a backlog): past the audit's wait.
LATE_NOTIFICATION_SECONDS = 2 * 86_400
NON_ASCII = "Crème brûlée, déjà vu à Zürich 🍮🎉 ¿qué? 😀 "


@dataclass
class QueueChaosConfig:
    units: int = 200
    seed: int = 11
    batch: bool = False
    # False: the uploads go to an existing bucket without versioning (ExistingBucketName),
    # keyed by their notification's sequencer, and by ETag and time when the audit finds them.
    versioned: bool = True
    # True (with batch): uploads are announced by S3's EventBridge events, which the
    # stack's rule sends to the source queue (SqsBatchMode's path for S3), not by
    # classic notifications sent to the queue.
    s3_events: bool = False
    # True: WorkflowType EXPRESS (the single-message processor, the audit's resubmissions).
    express: bool = False
    # True: S3 delivers the ingest bucket's Inventory report before every audit, which then
    # walks the report (SelectWindow, AuditInventory) instead of listing the bucket.
    inventory: bool = False
    concurrency: int = 8
    duplicate_rate: float = 0.05
    rates: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RATES))
    # After the audits, the operator fixes what refused the dlq_refused units and redrives
    # as operate.md says: the source DLQ back through the pipe, then the processor's DLQ.
    redrive: bool = True
    # Audits started while the deliveries run, spread over them (0: none; the audits
    # after the deliveries run all the same).
    audit_during: int = 0


@dataclass
class Unit:
    """One unit of work: what the queue carries for it and what was done to it."""

    pk: str
    body: str  # the message body (every copy the same)
    kind: str  # "object", "message" or "invalid" (no key can be made of it)
    processable: bool
    fault: str | None = None
    copies: int = 1  # sent together
    waves: int = 1  # sent one after another, each after the last one's execution ended
    event: dict[str, Any] | None = None  # an EventBridge event the rule sends to the queue


UNVERSIONED_BUCKET = "chaos-unversioned-uploads"


def queue_parameters(batch: bool, versioned: bool = True, express: bool = False) -> dict[str, str]:
    """The template parameters of the run: the created source queue, orders keyed by orderId;
    ``express``: the processor EXPRESS too (WorkflowType), which the audit resubmits into."""
    parameters = {
        "AuditRecentCutoffHours": "0",  # the audit judges uploads seconds old
        "SqsSource": "create",
        "IdempotencyKeyPath": "orderId",
    }
    if not versioned:
        parameters["ExistingBucketName"] = UNVERSIONED_BUCKET
    if batch:
        # The batch workflow is EXPRESS: the template's ExpressFitsInFiveMinutes rule
        # (its Process task retries once by itself: ProcessRetries).
        parameters |= {"SqsBatchMode": "true", "ProcessorTimeoutSeconds": "40"}
    if express:
        # The same rule. The audit resubmits a message's row from its original_event
        # (DescribeExecution serves no EXPRESS execution), and redrive finds an earlier
        # start by the row's claims.
        parameters |= {"WorkflowType": "EXPRESS", "ProcessorTimeoutSeconds": "40"}
    return parameters


def large_non_ascii_body(order_id: str, limit: int) -> str:
    """An order whose note of accented text and emoji fills it to ``limit`` bytes of UTF-8
    (within 3: a character is not cut)."""
    head = json.dumps({"orderId": order_id, "note": ""}, ensure_ascii=False)
    room = limit - len(head.encode())
    text = NON_ASCII * (room // len(NON_ASCII.encode()) + 1)
    note = text.encode()[:room].decode("utf-8", "ignore")
    return json.dumps({"orderId": order_id, "note": note}, ensure_ascii=False)


class QueueInjector:
    """The faults, by idempotency key; counts what fired."""

    def __init__(self, engine: LocalEngine, units: dict[str, Unit], batch: bool) -> None:
        self.engine = engine
        self.units = units
        self.batch = batch
        self.max_attempts = int(engine.stack.setting("MaxAttempts"))
        self.dead_letter_queue = engine.ref("DeadLetterQueue")
        self.fired: Counter[str] = Counter()
        self._done: set[tuple[str, str]] = set()
        self._owners: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        # The faults that fire once per unit (``once``, ``first_owner``) and the DLQ's
        # refusals fire only while the deliveries run (the DLQ's key policy is fixed before
        # the audits). A fault whose moment never came then (a last attempt whose batch ran
        # out of time first) would otherwise fire in an audit's resubmission or the
        # redrive's execution, and the audit after it would rightly find the work it left:
        # "a second audit resubmits nothing" holds only for faults of the deliveries.
        self.delivering = True
        # The operator's fix, before the redrive: the warehouse takes the dlq_refused units.
        self.fixed = False
        # Processor calls that did the work (returned), by idempotency key.
        self.completed: Counter[str] = Counter()
        # The same calls in the order they returned: (idempotency key, the execution that
        # made it), the executions a death ended (_die), and the calls whose MarkComplete
        # a ledger outage refused: (idempotency key, execution).
        self.calls: list[tuple[str, str]] = []
        self.died: set[str] = set()
        self.unrecorded: set[tuple[str, str]] = set()
        # What an InvalidEvent's DLQ message is known by: its SQS message's body.
        self.by_body = {u.body: u.pk for u in units.values() if u.kind == "invalid"}
        self._real = engine.runtime.load(
            engine.runtime.functions[engine.function_name("ProcessorFunction")]
        )

    def _fault(self, pk: str) -> str | None:
        unit = self.units.get(pk)
        return unit.fault if unit is not None else None

    def once(self, pk: str, kind: str) -> bool:
        """True the first time (pk, kind) asks: such a fault fires once per unit."""
        with self._lock:
            if not self.delivering or self._fault(pk) != kind or (pk, kind) in self._done:
                return False
            self._done.add((pk, kind))
            self.fired[kind] += 1
            return True

    def first_owner(self, pk: str, kind: str, owner: str) -> bool:
        """True for every request of the first execution (lock owner) that asks: such a
        fault lasts past that execution's retries, and only that execution sees it."""
        with self._lock:
            if self._fault(pk) != kind or (not self.delivering and (pk, kind) not in self._owners):
                return False
            first = self._owners.setdefault((pk, kind), owner)
            if first == owner and (pk, kind) not in self._done:
                self._done.add((pk, kind))
                self.fired[kind] += 1
            return first == owner

    # -- the services, answering in DynamoDB's or SQS's place -------------------

    def service(self, service: str, operation: str, body: str) -> Any:
        if (service, operation) not in {
            ("dynamodb", "PutItem"),
            ("dynamodb", "UpdateItem"),
            ("sqs", "SendMessage"),
        }:
            return None
        try:
            request = json.loads(body)
        except ValueError:
            return None
        if service == "sqs":
            return self._dead_letter_send(request)
        pk = (request.get("Item") or request.get("Key") or {}).get("pk", {}).get("S", "")
        if operation == "PutItem" and self.once(pk, "claim_throttle"):
            return patches.dynamodb_error(
                "ProvisionedThroughputExceededException", "injected: Claim throttled"
            )
        values = request.get("ExpressionAttributeValues") or {}
        owner = str(values.get(":owner", {}).get("S", ""))
        # MarkFailed on the way to the DLQ (the last attempt): last_error, the row kept
        # PROCESSING (no :failed), fenced on the owner
        marking = {":last_error", ":owner"} <= set(values) and ":failed" not in values
        if (
            operation == "UpdateItem"
            and marking
            and self.first_owner(pk, "last_mark_unavailable", owner)
        ):
            return patches.dynamodb_error(
                "ProvisionedThroughputExceededException",
                "injected: MarkFailed on the last attempt throttled past its retries",
            )
        if operation != "UpdateItem" or ":processed" not in values:
            return None
        if self.once(pk, "complete_throttle"):
            return patches.dynamodb_error(
                "ProvisionedThroughputExceededException", "injected: MarkComplete throttled"
            )
        if self.first_owner(pk, "ledger_unavailable", owner):
            with self._lock:
                self.unrecorded.add((pk, owner.split("#", 1)[0]))
            return patches.dynamodb_error(
                "ProvisionedThroughputExceededException",
                "injected: MarkComplete throttled past its retries",
            )
        return None

    def _dead_letter_send(self, request: dict[str, Any]) -> Any:
        if not self.delivering or request.get("QueueUrl") != self.dead_letter_queue:
            return None
        attributes = request.get("MessageAttributes") or {}
        pk = str(attributes.get("IDEMPOTENCY_KEY", {}).get("StringValue", ""))
        owner = str(attributes.get("EXECUTION_ARN", {}).get("StringValue", ""))
        if not pk:  # an InvalidEvent: no key, known by the message body it carries
            pk = self.by_body.get(dead_letter_body(request.get("MessageBody")), "")
            kind = "invalid_undelivered"
        else:
            kind = "dlq_refused"
        if self.first_owner(pk, kind, owner):
            return patches.sqs_error(
                "KmsAccessDenied", "injected: the DLQ's KMS key policy refuses SendMessage"
            )
        return None

    # -- the processor ----------------------------------------------------------

    def processor(self, event: dict[str, Any], context: Any) -> Any:
        pk = str(event["workItem"].get("idempotencyKey", ""))
        attempt = int(event.get("attempt") or 1)
        fault = self._fault(pk)
        if self.once(pk, "transient"):
            raise TransientError(f"injected: a dependency timed out on {pk}")
        if fault in REFUSED_UNTIL_FIXED and not self.fixed:
            raise TransientError(f"injected: the warehouse refuses {pk}, every time")
        # A first attempt that fails fails only while the deliveries run, as every other
        # fault (``delivering``): a redrive's execution can run attempt 1 too (the row's
        # attempts reset by `redrive`, or a message never claimed that `redrive --queue
        # source` starts directly), and failing it there leaves a FAILED row the audit
        # after the redrive rightly resubmits (--source s3 --batch, seed 265).
        if fault == "receives_spent" and self.batch and attempt == 1 and self.delivering:
            # Its first attempt fails (the task's own retry too) and the message stays; then
            # the queue spends the rest of its receives on a pipe that cannot run it
            # (QueueRun.spend_receives).
            self.once(pk, "receives_spent")
            raise TransientError(f"injected: the first attempt at {pk} fails")
        if fault == "large_non_ascii" and attempt == 1 and self.delivering:
            raise TransientError(f"injected: the first attempt at {pk} fails")
        if fault == "last_attempt_death":
            if attempt < self.max_attempts and not self.fixed:
                raise TransientError(f"injected: attempt {attempt} at {pk} fails")
            output = self._run(event, context)
            if self.once(pk, "last_attempt_death"):
                return self._die(event, output)
            return output
        return self._run(event, context)

    def _run(self, event: dict[str, Any], context: Any) -> Any:
        """The real processor; a call that returns is counted: the unit's work was done."""
        output = self._real(event, context)
        pk = str(event["workItem"].get("idempotencyKey", ""))
        with self._lock:
            self.completed[pk] += 1
            self.calls.append((pk, str(event["lockToken"]).split("#", 1)[0]))
        return output

    def runs(self) -> Counter[str]:
        """The calls that did the work, by idempotency key, but for a call a fault after its
        effect forced to run again: one whose execution then died before it could record
        it, or whose record a ledger outage refused (MarkComplete past its retries), and a
        later call ran. A death's is the dying message's own call, and any other message's
        of its batch that was in flight when the batch ran out of time (a Lambda call runs
        to its end when its execution ends: its effect is made and nothing records it; the
        redelivery runs it again, the sink keeps one effect). Nothing else is forgiven,
        whatever the unit's fault."""
        by_key: dict[str, list[str]] = {}
        for pk, execution in self.calls:
            by_key.setdefault(pk, []).append(execution)
        return Counter(
            {
                pk: 1
                + sum(e not in self.died and (pk, e) not in self.unrecorded for e in made[:-1])
                for pk, made in by_key.items()
            }
        )

    def _die(self, event: dict[str, Any], output: Any) -> Any:
        """The effect happened; then the execution that made it dies, its lock left to
        expire: a batch's (its lock token names the message: ``<execution>#<index>``) or a
        single-message processor's, which a batch-mode run's audit starts too."""
        execution = str(event["lockToken"]).split("#", 1)[0]
        with self._lock:
            self.died.add(execution)
        if "#" in str(event["lockToken"]):
            # An EXPRESS execution cannot be stopped: the whole batch runs out of its five
            # minutes instead (ExecutionTimedOut), once the other messages of the batch
            # have their outcome in the ledger (so that their own faults fire), as a last
            # call that hung would. (A result over 256 KiB would not do: AWS's States.ALL
            # catches States.DataLimitExceeded, and the message is dead-lettered alone.)
            self._others_settle(str(event["lockToken"]))
            self.engine.run_out_of_time(execution)
            return output
        if execution.split(":")[5] == "express":
            # StopExecution "is not supported by EXPRESS state machines" (AWS API reference,
            # API_StopExecution): an EXPRESS execution ends at its five minutes instead.
            self.engine.run_out_of_time(execution)
            return output
        self.engine.client("stepfunctions").stop_execution(
            executionArn=execution,
            error="WorkerDied",
            cause="injected: the worker died on the last attempt, after its effect",
        )
        return output

    def _others_settle(self, lock_token: str, timeout: float = 30.0) -> None:
        """Wait until no other message of this batch execution holds a PROCESSING row
        (but those that die alike, and wait alike, and those a ledger outage leaves so)."""
        execution = lock_token.split("#", 1)[0]
        dynamodb = self.engine.client("dynamodb")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            held = [
                item
                for page in dynamodb.get_paginator("scan").paginate(
                    TableName=self.engine.ref("LedgerTable"), ConsistentRead=True
                )
                for item in page["Items"]
                if item.get("status", {}).get("S") == "PROCESSING"
                and item.get("lock_owner", {}).get("S", "").startswith(execution + "#")
                # dying alike, or left PROCESSING by a ledger outage (LedgerUnavailable)
                and self._fault(item["pk"]["S"]) not in LEFT_PROCESSING
            ]
            if not held:
                time.sleep(0.2)  # their last write (a DLQ send after MarkFailed) lands
                return
            time.sleep(0.05)
        raise TimeoutError(f"the other messages of {execution} never settled")


class QueueRun:
    """One run: the stack, its units, the deliveries and what they ended in."""

    def __init__(self, engine: LocalEngine, config: QueueChaosConfig) -> None:
        self.engine = engine
        self.config = config
        self.sqs = engine.client("sqs")
        self.queue = engine.ref("SourceQueue")
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue,
            AttributeNames=["MaximumMessageSize", "VisibilityTimeout", "RedrivePolicy"],
        )["Attributes"]
        self.max_message_bytes = int(attributes["MaximumMessageSize"])
        self.visibility_timeout = int(attributes["VisibilityTimeout"])
        self.max_receives = int(json.loads(attributes["RedrivePolicy"])["maxReceiveCount"])
        self.lock_timeout = int(engine.stack.setting("LockTimeoutSeconds"))
        self.max_attempts = int(engine.stack.setting("MaxAttempts"))
        self.by_body: dict[str, str] = {}  # message body -> pk
        self.outcomes: Counter[str] = Counter()
        self.executions = 0
        self.failed_batches = 0
        self.rounds = 0
        self.sent = 0
        self.time_passed = 0
        self.redriven: dict[str, int] | None = None  # what the operator's redrive did
        # The processor DLQ's messages as the deliveries and audits left them (before the
        # operator's redrive, which resubmits one of a unit's messages and deletes the rest)
        self.dead_letters_before_redrive: list[dict[str, Any]] | None = None
        # The audits run while the deliveries run (config.audit_during), told of each
        # delivery as it ends.
        self.during = AuditsDuring(0, 1, self.audit_during)

    # -- deliveries ---------------------------------------------------------------

    def send(self, unit: Unit) -> None:
        if unit.event is not None:
            # Through the default bus: the stack's rule sends it to the queue (a loss the
            # run did not plan would be found by the audit and hide a broken rule).
            before = self.waiting()
            if self.engine.put_event(unit.event) or self.waiting() != before + 1:
                raise RuntimeError("the rule did not send the event to the source queue")
        else:
            self.sqs.send_message(QueueUrl=self.queue, MessageBody=unit.body)
        self.sent += 1

    def waiting(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    def pump(self) -> None:
        """The pipe reads the queue until it is empty, or (batch) until what is left is
        what it keeps: each later pass is one visibility timeout later."""
        if not self.config.batch:
            while arns := self.engine.pump_pipes(limit=self.config.concurrency):
                self.rounds += 1
                for arn in arns:
                    self._record(self.engine.wait(arn, timeout=600))
            return
        for n in range(self.max_receives + 1):
            if not self.waiting():
                return
            if n:
                self.pass_time(self.visibility_timeout)
                if n == 1:
                    self.during.start_reserved()
            self.rounds += 1
            for arn in self.engine.pump_pipes():
                self._record(self.engine.wait(arn, timeout=600))

    def spend_receives(self, timeout: float = 60.0) -> int:
        """The pipe cannot run what the queue holds (at its maximum concurrency, throttled)
        while SQS counts every receive (eb-pipes-error-troubleshooting.html); after
        SourceQueueMaxReceiveCount receives the queue moves the messages to its DLQ. The
        receives the pipe spends, played as receives that run nothing; how many."""
        deadline = time.monotonic() + timeout
        receives = 0
        while self.waiting():
            if time.monotonic() > deadline:
                raise TimeoutError("the source queue never moved its messages to its DLQ")
            receives += len(
                self.sqs.receive_message(
                    QueueUrl=self.queue, MaxNumberOfMessages=10, VisibilityTimeout=0
                ).get("Messages", [])
            )
        return receives

    def operator_redrive(self) -> None:
        """What operate.md asks of an operator once the alarms fired and the cause is
        fixed: move the source DLQ's messages back through the pipe, then give the
        processor DLQ's messages their second chance (each waited for, locally)."""
        self.dead_letters_before_redrive = drain(self.engine, self.engine.ref("DeadLetterQueue"))
        target = LocalTarget(self.engine)
        source = ops.redrive(target, queue="source")
        self.pump()
        processor = ops.redrive(target)
        self.engine.wait_for_running("ProcessorStateMachine")
        # A run leaves a message whose key it moved already "for a later run" (operate.md,
        # Redrive: `left`): how a redriven execution failed again, or the second DLQ message
        # of the send-then-mark gap (design.md, "Where at most one DLQ message does not
        # hold": a batch died between a send and its mark, the next taker sent again). The
        # operator runs that later run once: it deletes a message whose work is now done and
        # gives what failed again its chance. (Without it, the gap's second message stayed
        # for processed work: `chaos --source s3 --batch --objects 205 --seed 71`.)
        later = ops.redrive(target) if processor.count("left") else None
        self.engine.wait_for_running("ProcessorStateMachine")
        last = later or processor
        # The DeadLetterFailed alarm fired too: restart the executions that could not
        # dead-letter (ListExecutions serves no EXPRESS processor: there the sweep did it).
        undelivered = None if self.config.express else ops.redrive_undelivered(target)
        self.engine.wait_for_running("ProcessorStateMachine")
        self.redriven = {
            "source_moved_back": source.count("resubmitted"),
            # of them, refused back by the queue (its largest size) and started directly
            "source_started": sum(m.execution_arn is not None for m in source.messages),
            "source_kept": len(source.messages) - source.count("resubmitted"),
            "resubmitted": processor.count("resubmitted"),
            "deleted_already_processed": processor.count("deleted"),
            # what the later run did: a gap's second message deleted, work failed again
            "later_run_deleted_processed": later.count("deleted") if later else 0,
            "later_run_resubmitted": later.count("resubmitted") if later else 0,
            "kept": last.count("kept") + last.count("left"),
            "undelivered_restarted": undelivered.count("resubmitted") if undelivered else 0,
        }

    def _record(self, result: ExecutionResult) -> None:
        self.executions += 1
        # A delivery per message the execution was handed (a batch's every message).
        self.during.advance(
            len(result.input or []) if self.config.batch else 1, span=execution_span(result)
        )
        if not self.config.batch:
            ended = result.outcome or result.status
            self.outcomes[result.status if result.status == "ABORTED" else ended] += 1
            return
        if result.status != "SUCCEEDED":
            # Every message of the batch stays in the queue: judged as such, one by one.
            self.failed_batches += 1
            self.outcomes["batch failed"] += len(result.input or [])
            return
        for event in result.events:
            details = event.get("stateExitedEventDetails") or {}
            if event["type"] == "MapStateExited" and details.get("name") == "EachMessage":
                for outcome in json.loads(details["output"]):
                    retried = " (kept in the queue)" if outcome.get("retry") else ""
                    self.outcomes[f"{outcome.get('outcome')}{retried}"] += 1

    def pass_time(self, seconds: int) -> None:
        """Time passes for the ledger's locks: every PROCESSING row's lock expiry moves
        ``seconds`` closer, but the locks of executions running now (an audit's
        resubmissions, its sweep's own locks: no batch runs meanwhile), which are taken to
        have started after the time passed: a live execution's lock moved by a visibility
        timeout (30 minutes in the batch mode) would be a lock expired under a worker that
        never ran that long. Each move is fenced on the lock as read, so a lock taken
        since is not moved."""
        self.time_passed += seconds
        dynamodb = self.engine.client("dynamodb")
        table = self.engine.ref("LedgerTable")
        held = [
            item
            for page in dynamodb.get_paginator("scan").paginate(
                TableName=table, ConsistentRead=True
            )
            for item in page["Items"]
            if item.get("status", {}).get("S") == "PROCESSING"
        ]
        # Read after the rows: an owner running now holds its lock, one that started since
        # took a lock the fence keeps from being moved.
        live = {
            e["executionArn"]
            for e in executions.listed(self.engine, "ProcessorStateMachine", "RUNNING")
        } | {e["name"] for e in executions.listed(self.engine, "AuditStateMachine", "RUNNING")}
        for item in held:
            owner = item.get("lock_owner", {}).get("S", "")
            if owner and owner.split("#", 1)[0] in live:
                continue
            expiry = item.get("lock_expires_at", {}).get("N", "0")
            fence = "#status = :processing AND lock_expires_at = :seen AND " + (
                "lock_owner = :owner" if owner else "attribute_not_exists(lock_owner)"
            )
            values = {
                ":t": {"N": str(int(expiry) - seconds)},
                ":seen": {"N": expiry},
                ":processing": {"S": "PROCESSING"},
                **({":owner": {"S": owner}} if owner else {}),
            }
            try:
                dynamodb.update_item(
                    TableName=table,
                    Key={"pk": item["pk"]},
                    UpdateExpression="SET lock_expires_at = :t",
                    ConditionExpression=fence,
                    ExpressionAttributeNames={"#status": "status"},
                    ExpressionAttributeValues=values,
                )
            except dynamodb.exceptions.ConditionalCheckFailedException:
                continue  # taken, renewed or settled since it was read: not the old lock

    def age_uploads(self, seconds: int) -> None:
        """Date every upload back (moto's clock): the audit's wait for their events is
        over, as it is when a notification waits that long in the queue. The audits'
        watermark (how far they judged the bucket, written by an audit that ran during the
        deliveries) is dated back alike: it was written that long ago too."""
        bucket = s3_backends[ACCOUNT_ID]["aws"].buckets[self.engine.ingest_bucket()]
        for key in list(bucket.keys.keys()):
            for version in bucket.keys.getlist(key):
                version.last_modified -= timedelta(seconds=seconds)
        s3 = self.engine.client("s3")
        output = self.engine.ref("OutputBucket")
        try:
            stored = json.loads(s3.get_object(Bucket=output, Key=WATERMARK)["Body"].read())
        except s3.exceptions.NoSuchKey:
            return  # no audit has judged the bucket yet
        aged = {k: max(int(v) - seconds * 1000, 0) if v else 0 for k, v in stored.items()}
        s3.put_object(Bucket=output, Key=WATERMARK, Body=json.dumps(aged).encode())

    def audit_wait(self) -> int:
        """How long the audit waits for an upload's event, as the deployed AuditFunction
        reads it (functions/service/settings.py: the longest any source holds one)."""
        environment = self.engine.runtime.functions[self.engine.ref("AuditFunction")].environment
        return int(
            max(
                float(environment.get("INGRESS_MAX_EVENT_AGE_SECONDS", 0)),
                float(environment.get("SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS", 0)),
            )
        )

    def audit_during(self, number: int) -> dict[str, Any]:
        """An audit while the deliveries run, the same as the audits after them, but time
        is not moved for it: the locks it meets are the deliveries' live ones, and those
        the queue's passes aged (pass_time leaves its own and its resubmissions')."""
        if self.config.inventory:
            self.engine.deliver_inventory()
        report = ops.run_audit(LocalTarget(self.engine), name=f"chaos-during-{number}")
        if self.config.inventory and report.get("source") != "inventory":
            raise RuntimeError(f"walked the {report.get('source')}, not the inventory report")
        return report

    def audit(self, audits: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The audit, after every lock expired; None if it did not reach its report."""
        self.pass_time(self.lock_timeout + 3600)
        if self.config.inventory:
            self.engine.deliver_inventory()  # the day's report, as S3 delivers it
        try:
            report = ops.run_audit(LocalTarget(self.engine))
        except ops.OpsError as exc:
            audits.append({"error": _short(str(exc))})
            # What it started before it failed still runs.
            self.engine.wait_for_running("ProcessorStateMachine")
            return None
        audits.append({k: report.get(k, 0) for k in AUDIT_KEYS})
        if self.config.inventory and report.get("source") != "inventory":
            audits[-1]["error"] = f"walked the {report.get('source')}, not the inventory report"
        return report


# Where the audit keeps its watermark in the output bucket (REPORT_PREFIX, WATERMARK_NAME).
WATERMARK = "reports/audit/watermark.json"


def _short(error: str) -> str:
    """A failed audit's error and the message of its cause, without the stack trace."""
    message = re.search(r'"errorMessage":\s*"((?:[^"\\]|\\.)*)"', error)
    head = error.split(": {", 1)[0]
    text = f"{head}: {message.group(1)}" if message else error
    return text if len(text) <= 400 else text[:399] + "…"


def _plan(config: QueueChaosConfig, rng: random.Random) -> dict[int, str]:
    """Which unit gets which fault: round(rate x units) of each, at least one."""
    faults: dict[int, str] = {}
    free = list(range(config.units))
    rng.shuffle(free)
    for kind in FAULT_KINDS:
        rate = config.rates.get(kind, 0.0)
        if rate <= 0:
            continue
        count = max(1, round(rate * config.units))
        for index in free[:count]:
            faults[index] = kind
        free = free[count:]
    return faults


def run_queue_chaos(config: QueueChaosConfig, progress: TextIO | None = None) -> dict[str, Any]:
    if not 1 <= config.units <= 10_000:
        raise ValueError("objects must be between 1 and 10000")
    unknown = set(config.rates) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"no such fault through SQS: {', '.join(sorted(unknown))}")
    planned = sum(max(1, round(r * config.units)) for r in config.rates.values() if r > 0)
    if planned > config.units:
        raise ValueError(f"the faults need {planned} units of work; give at least that many")
    if config.inventory and not config.versioned:
        raise ValueError("--inventory: the stack configures S3 Inventory on its own bucket only")
    if (not config.redrive or (config.express and not config.batch)) and config.rates.get(
        "invalid_undelivered", 0
    ) > 0:
        # Without a batch only the operator's redrive --undelivered ever sends it, and it
        # lists no EXPRESS execution: a known limit (operate.md, "Locally, and under
        # EXPRESS": such an event is then only in the processor's logs), not planned.
        config.rates = {**config.rates, "invalid_undelivered": 0.0}
    if config.s3_events and not config.batch:
        raise ValueError("S3's events reach the source queue only in the batch mode (--batch)")
    if config.audit_during < 0:
        raise ValueError("--audit-during: a number of audits, 0 or more")
    rng = random.Random(config.seed)
    with LocalEngine(
        parameters=queue_parameters(config.batch, config.versioned, config.express),
        function_log=io.StringIO(),
        function_log_level="WARNING",
    ) as engine:
        if not config.versioned:  # the user's bucket, made apart from the stack
            engine.client("s3").create_bucket(Bucket=UNVERSIONED_BUCKET)
        run = QueueRun(engine, config)
        units, objects = _units(engine, run, config, rng, progress)
        by_pk = {u.pk: u for u in units}
        injector = QueueInjector(engine, by_pk, config.batch)
        injector.fired["lost"] = sum(u.fault == "lost" for u in units)
        injector.fired["poison"] = sum(u.fault == "poison" for u in units)
        injector.fired["large_non_ascii"] = sum(u.fault == "large_non_ascii" for u in units)
        if not config.batch:  # (the batch mode counts its failed first attempt)
            injector.fired["receives_spent"] = sum(u.fault == "receives_spent" for u in units)

        engine.state.requests.clear()
        audits: list[dict[str, Any]] = []
        engine.state.faults.append(injector.service)
        try:
            with engine.override_function("ProcessorFunction", injector.processor):
                # Every message the deliveries send: the copies, then one a later wave.
                sends = sum(u.copies + u.waves - 1 for u in units if u.copies)
                # The batch mode: one of them (of two or more) starts with the first pass of
                # redeliveries, so that its resubmissions meet the messages the queue brings
                # back (the others start during the first pass, which hands every message).
                reserved = 1 if config.batch and config.audit_during > 1 else 0
                run.during = AuditsDuring(
                    config.audit_during, sends, run.audit_during, reserved=reserved
                )
                try:
                    _deliver(run, units, rng, progress)
                finally:
                    audits_during = run.during.finish()
                engine.wait_for_running("ProcessorStateMachine")
                injector.delivering = False
                # Two days pass: longer than the audit waits for an upload's event from
                # EventBridge (IngressMaxEventAgeSeconds, a day, for an upload without a
                # version id), shorter than an SQS source can hold one.
                run.age_uploads(LATE_NOTIFICATION_SECONDS)
                if progress is not None:
                    progress.write("auditing  two days later, every lock expired\n")
                run.audit(audits)
                late = [u for u in units if u.fault == "delayed_notification"]
                for unit in late:  # after the audit resubmitted its upload as missing
                    run.send(unit)
                injector.fired["delayed_notification"] = len(late)
                run.pump()
                # Where a source can hold an upload's event longer than two days (an SQS
                # source over an unversioned bucket), the audit waits that long before it
                # resubmits a lost upload: that much more time passes, then the audit.
                longer = run.audit_wait() - LATE_NOTIFICATION_SECONDS
                if longer > 0:
                    run.age_uploads(longer + 3600)
                    if progress is not None:
                        progress.write("auditing  past the audit's wait for a late event\n")
                    run.audit(audits)
                again = run.audit(audits)
                if config.redrive:
                    injector.fixed = True
                    for unit in units:  # what refused them is fixed: they can succeed now
                        unit.processable |= unit.fault in REFUSED_UNTIL_FIXED
                    if progress is not None:
                        progress.write("redriving the source DLQ, then the processor's DLQ\n")
                    run.operator_redrive()
                    after = run.audit(audits)
                    again = _sum_resubmitted(again, after)
        finally:
            engine.state.faults.remove(injector.service)
        run.pass_time(run.lock_timeout + 3600)
        report = _judge(
            run, units, objects, audits, again, injector.runs(), injector.died, audits_during
        )

    report.update(
        {
            "seed": config.seed,
            "faults_injected": {
                "duplicate_delivery": sum(max(u.copies - 1, 0) for u in units),
                **{kind: injector.fired[kind] for kind in FAULT_KINDS},
            },
        }
    )
    return report


def dead_letter_body(text: Any) -> str:
    """The SQS message body a processor DLQ message carries (its event, the pipe's array of
    one record); "" when it carries none."""
    try:
        event = json.loads(text).get("event")
    except (TypeError, ValueError, AttributeError):
        return ""
    record = event[0] if isinstance(event, list) and event else None
    return str(record.get("body", "")) if isinstance(record, dict) else ""


def _attribute(message: dict[str, Any], name: str) -> str:
    return str(message.get("MessageAttributes", {}).get(name, {}).get("StringValue", ""))


# The lock a taker's LockExpired DLQ message names (TakeOverAtMaxAttempts, the audit's sweep).
NAMED_LOCK = re.compile(r"^LockExpired: the lock of (\S+) expired")


def send_then_mark_twins(messages: list[dict[str, Any]], died: Collection[str] = ()) -> int:
    """How many of one unit's DLQ messages are a second message of the send-then-mark gap
    (docs/design.md, "Where at most one DLQ message does not hold": the sender died or its
    mark failed, and whoever took the row once the lock expired sent again): a LockExpired
    message whose lock, named in its ERROR_MESSAGE, is that of the execution that sent
    another of them (the audit's sweep as a taker sends with EXECUTION_ARN the lock it
    names); or, the gap followed through a taker that died (its execution in ``died``)
    before its own send, a LockExpired message sent after another of them that names that
    silent taker's lock, the first message to name it. A takeover needs a row not marked
    dead-lettered (TakeOverAtMaxAttempts' condition and the sweep's alike), so a taker's
    message after another was sent follows a mark that never landed; every such message but
    one at most is the gap's. Named in the report; any other second message is a
    violation."""
    dead = {arn.split("#", 1)[0] for arn in died}
    ordered = sorted(
        enumerate(messages),
        key=lambda item: (int(item[1].get("Attributes", {}).get("SentTimestamp", 0)), item[0]),
    )
    named: set[str] = set()
    twins = 0
    for position, (_, m) in enumerate(ordered):
        found = NAMED_LOCK.match(_attribute(m, "ERROR_MESSAGE"))
        lock = found.group(1) if found and _attribute(m, "ERROR_CODE") == "LockExpired" else ""
        another_sender = bool(lock) and any(
            o is not m and _attribute(o, "EXECUTION_ARN") == lock for o in messages
        )
        silent_taker = (
            bool(lock) and position > 0 and lock not in named and lock.split("#", 1)[0] in dead
        )
        twins += another_sender or silent_taker
        if lock:
            named.add(lock)
    return min(twins, max(len(messages) - 1, 0))


# The template's default CustomEventSource and a detail-type its rule passes.
CUSTOM_EVENT_SOURCE = "onceflow.work"


def custom_event(order: str, quantity: int) -> dict[str, Any]:
    """The configured custom event on the default bus, as EventBridge delivers it: its id
    (the key: CustomEventKeyPath is empty) the same for every copy of it."""
    return {
        "version": "0",
        "id": hashlib.sha256(order.encode()).hexdigest(),
        "detail-type": "Work",
        "source": CUSTOM_EVENT_SOURCE,
        "account": ACCOUNT_ID,
        "time": "2026-11-21T10:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"orderId": order, "quantity": quantity},
    }


def _sum_resubmitted(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The resubmissions of the audit before the operator's redrive and of the one after,
    together: neither may find anything (None: one did not reach its report)."""
    if before is None or after is None:
        return None
    return {k: int(before.get(k, 0)) + int(after.get(k, 0)) for k in RESUBMITTED}


def _units(
    engine: LocalEngine,
    run: QueueRun,
    config: QueueChaosConfig,
    rng: random.Random,
    progress: TextIO | None,
) -> tuple[list[Unit], dict[str, DemoObject]]:
    """Upload the objects and write the messages; nothing is sent yet."""
    bucket = engine.ingest_bucket()
    s3 = engine.client("s3")
    faults = _plan(config, rng)
    units: list[Unit] = []
    objects: dict[str, DemoObject] = {}
    bar = Progress(config.units, "uploading ", progress)
    for n in range(config.units):
        fault = faults.get(n)
        upload = fault in OBJECT_FAULTS or (fault not in MESSAGE_FAULTS and rng.random() < 0.5)
        if upload:
            poison = fault == "poison"
            key = f"chaos/object-{n:05d}.png"
            data = rng.randbytes(64) if poison else small_png(rng)
            put = s3.put_object(Bucket=bucket, Key=key, Body=data)
            obj = DemoObject(key, str(put.get("VersionId") or ""), processable=not poison)
            notification = s3_notification(bucket, obj, len(data))
            announced = notification["Records"][0]["s3"]["object"]
            announced["eTag"] = str(put["ETag"]).strip('"')
            if not obj.version_id:  # S3 names no version; the key is the event's sequencer
                del announced["versionId"]
                announced["sequencer"] = hashlib.sha256(key.encode()).hexdigest()[:18].upper()
            pk = f"s3://{bucket}/{key}#{obj.version_id or announced['sequencer']}"
            objects[pk] = obj
            event = None
            if config.s3_events:
                event = s3_event(
                    bucket, key, len(data), version_id=obj.version_id,
                    sequencer=str(announced["sequencer"]).upper(), etag=announced["eTag"],
                )  # fmt: skip
                # The body the rule's SQS target gets: the event itself.
                body = json.dumps(event, ensure_ascii=False)
            else:
                body = json.dumps(notification)
            unit = Unit(pk, body, "object", processable=not poison, fault=fault, event=event)
        elif fault == "invalid_undelivered":
            # A body that is no JSON, which IdempotencyKeyPath reads the key from: an
            # InvalidEvent, whose DLQ message the DLQ refuses to its first execution
            # (DeadLetterFailed); no row: one message per execution, only `redrive
            # --undelivered` starts it again
            body = f"not json: order {n:05d}"
            unit = Unit(f"invalid:{n:05d}", body, "invalid", processable=False, fault=fault)
        elif fault == "large_non_ascii" or (fault == "receives_spent" and n % 2 == 0):
            # (Every other unit whose receives are spent is as large: the queue takes it, but
            # not back with redrive's ONCEFLOW_MESSAGE_ID, which SQS counts in the size.)
            order = f"commande-{n:05d}-déjà-vu-😀"
            body = large_non_ascii_body(order, run.max_message_bytes)
            unit = Unit(f"sqs:{order}", body, "message", processable=True, fault=fault)
        elif config.s3_events and fault not in ("receives_spent",) and rng.random() < 0.5:
            # The configured custom event: the rule sends it to the queue too, keyed by its
            # id (CustomEventKeyPath empty); copies are the same event delivered again.
            order = f"work-{n:05d}"
            event = custom_event(order, rng.randint(1, 9))
            body = json.dumps(event, ensure_ascii=False)
            refused = fault in REFUSED_UNTIL_FIXED
            pk = f"event:{CUSTOM_EVENT_SOURCE}:{event['id']}"
            unit = Unit(pk, body, "message", not refused, fault, event=event)
        else:
            order = f"order-{n:05d}"
            body = json.dumps({"orderId": order, "quantity": rng.randint(1, 9)})
            # A unit the processor refuses every time can only end dead-lettered.
            refused = fault in REFUSED_UNTIL_FIXED
            unit = Unit(f"sqs:{order}", body, "message", not refused, fault)
        if fault in ("lost", "delayed_notification"):
            unit.copies = 0
        elif rng.random() < config.duplicate_rate and fault not in (
            "large_non_ascii",
            "invalid_undelivered",
        ):
            # (Not the large one: no second copy may reclaim it before the queue, or the
            # audit's sweep resubmitting its input, brings it back. Nor an invalid event:
            # no row is made of it, so each copy is dead-lettered apart.)
            unit.copies = rng.choice((2, 2, 3))
        if not config.batch and fault in {*REFUSED_UNTIL_FIXED, "last_attempt_death"}:
            # One message per execution: nothing brings a failed message back but the
            # audit, so the producer sends it again, once per attempt.
            unit.copies, unit.waves = 1, run.max_attempts
        run.by_body[body] = unit.pk
        units.append(unit)
        bar.advance()
    return units, objects


def _deliver(run: QueueRun, units: list[Unit], rng: random.Random, progress: TextIO | None) -> None:
    """Every copy into the queue, shuffled; the pipe reads them (waves one after another).
    First the units whose receives the pipe spends: sent alone, (batch) run once and
    failed, then moved to the source DLQ by receives that run nothing."""
    spent = [u for u in units if u.fault == "receives_spent" for _ in range(u.copies)]
    if spent:
        for unit in spent:
            run.send(unit)
        if run.config.batch:
            run.rounds += 1
            for arn in run.engine.pump_pipes():
                run._record(run.engine.wait(arn, timeout=600))
        run.spend_receives()
        units = [u for u in units if u.fault != "receives_spent"]
    waves = max((u.waves for u in units), default=1)
    for wave in range(waves):
        sending = [u for u in units if wave < u.waves for _ in range(u.copies if not wave else 1)]
        rng.shuffle(sending)
        bar = Progress(len(sending), f"sending {wave + 1}/{waves}", progress)
        for unit in sending:
            run.send(unit)
            bar.advance()
        run.pump()


def _retry_path(row: dict[str, Any], pending: set[str]) -> str:
    """Who brings a FAILED row that is not dead-lettered back, or "" if nobody does."""
    pk = str(row["pk"])
    if pk in pending:
        return "the queue redelivers it"
    if "open_status" in row:
        return "the audit's sweep finds it"
    if pk.startswith("s3://"):
        return "the audit's walk finds it"
    return ""


def _judge(
    run: QueueRun,
    units: list[Unit],
    objects: dict[str, DemoObject],
    audits: list[dict[str, Any]],
    again: dict[str, Any] | None,
    completed: Counter[str] | None = None,
    died: Collection[str] = (),
    audits_during: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The invariants, unit by unit, over the ledger, both DLQs, the queue and S3's log, and
    the processor calls that did the work (``completed``, by idempotency key; a call a
    death left unrecorded and a later call ran again not counted: QueueInjector.runs)."""
    engine = run.engine
    effects = effects_by_idempotency_key(engine, engine.ref("OutputBucket"))

    def by_key(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for m in messages:
            key = _attribute(m, "IDEMPOTENCY_KEY") or run.by_body.get(
                dead_letter_body(m.get("Body")), "?"
            )  # an InvalidEvent has no key: known by the body of the message it carries
            found.setdefault(key, []).append(m)
        return found

    dead_letters = by_key(drain(engine, engine.ref("DeadLetterQueue")))
    dlq = Counter({pk: len(found) for pk, found in dead_letters.items()})
    before = (
        None if run.dead_letters_before_redrive is None
        else by_key(run.dead_letters_before_redrive)
    )  # fmt: skip
    source_dlq = Counter(
        run.by_body.get(m["Body"], "?") for m in drain(engine, engine.ref("SourceDeadLetterQueue"))
    )
    pending = {run.by_body.get(m["Body"], "?") for m in drain(engine, run.queue)}
    rows: dict[str, dict[str, Any]] = {}
    dynamodb = engine.client("dynamodb")
    for page in dynamodb.get_paginator("scan").paginate(TableName=engine.ref("LedgerTable")):
        for item in page["Items"]:
            rows[item["pk"]["S"]] = {k: next(iter(v.values())) for k, v in item.items()}

    violations: list[dict[str, str]] = []

    def violated(invariant: str, unit: Unit | str, detail: str) -> None:
        key = unit if isinstance(unit, str) else unit.pk
        fault = "" if isinstance(unit, str) else (unit.fault or "")
        violations.append(
            {"invariant": invariant, "key": key, "fault": fault or "none", "detail": detail}
        )

    for number, audit in enumerate(audits, 1):
        if "error" in audit:
            violated(INVARIANTS[0], f"audit {number}", audit["error"])
    for record in audits_during or []:
        if "error" in record:
            violated(INVARIANTS[0], f"audit during {record['number']}", record["error"])
    # One upload is one unit of work, whatever it was keyed by: its event's version id or
    # sequencer, or (no version id) the audit's "#etag:" key for the same object.
    by_object = {pk.rsplit("#", 1)[0]: pk for pk in objects}
    known = {u.pk for u in units}

    def unit_of(pk: str) -> str:
        return pk if pk in known else by_object.get(pk.rsplit("#", 1)[0], pk)

    unit_rows: dict[str, list[dict[str, Any]]] = {}
    for pk, row in rows.items():
        unit_rows.setdefault(unit_of(pk), []).append(row)
    unit_effects: Counter[str] = Counter()
    for pk, n in effects.items():
        unit_effects[unit_of(pk)] += n
    unit_dlq: Counter[str] = Counter()
    unit_letters: dict[str, list[dict[str, Any]]] = {}
    for pk, found in dead_letters.items():
        unit_dlq[unit_of(str(pk))] += len(found)
        unit_letters.setdefault(unit_of(str(pk)), []).extend(found)
    unit_letters_before: dict[str, list[dict[str, Any]]] = {}
    for pk, found in (before or {}).items():
        unit_letters_before.setdefault(unit_of(str(pk)), []).extend(found)
    gap = 0  # second DLQ messages of the send-then-mark gap (named, not violations)
    # What SQS itself moved to the source DLQ, named, not violations: a unit the processor
    # never claimed (no row: the pipe never handed its message over), waiting there for the
    # operator's `redrive --queue source` (design.md; the source DLQ's alarm says so), and
    # each copy beyond the first of a unit the producer sent more than once: every copy is
    # an SQS message with its own receive count, moved on its own after maxReceiveCount
    # receives (sqs-dead-letter-queues.html; SetQueueAttributes, RedrivePolicy). Neither is
    # onceflow's dead-lettering. After the operator's redrive nothing may be left there.
    unclaimed = 0
    source_copies = 0
    unit_runs: Counter[str] = Counter()
    for pk, n in (completed or Counter()).items():
        unit_runs[unit_of(pk)] += n
    histogram: Counter[int] = Counter()
    for unit in units:
        own = unit_rows.get(unit.pk, [])
        statuses = sorted(str(r.get("status")) for r in own)
        status = "+".join(statuses) or None
        n_effects, n_dlq, n_source = unit_effects[unit.pk], unit_dlq[unit.pk], source_dlq[unit.pk]
        histogram[n_effects] += 1
        processed = "PROCESSED" in statuses
        # (an invalid event has no row anyway: judged below)
        in_source_unclaimed = not own and n_source > 0 and unit.kind != "invalid"
        unclaimed += in_source_unclaimed
        dead_lettered = (
            any("dead_lettered_at" in r for r in own)
            or (not processed and n_dlq > 0)
            or in_source_unclaimed
        )
        # the messages sent for the unit: its copies, then one a wave after the first
        sent = unit.copies + unit.waves - 1 if unit.copies else 0
        copies = n_source - 1 if 1 < n_source <= sent else 0
        source_copies += copies
        if unit.kind == "invalid":
            if own:
                violated(INVARIANTS[1], unit, "a ledger row for an event no key is made of")
        elif not own and not in_source_unclaimed:
            violated(INVARIANTS[1], unit, "no ledger row: nothing did the work or found it")
        for row in own:
            attempts = f"attempts {row.get('attempts')}/{run.max_attempts}"
            keyed = "" if row["pk"] == unit.pk else f" (row {row['pk']})"
            if row.get("status") == "PROCESSING":
                violated(INVARIANTS[1], unit, f"PROCESSING, its lock expired, {attempts}{keyed}")
            elif (
                row.get("status") == "FAILED"
                and "dead_lettered_at" not in row
                and not n_dlq
                and not _retry_path(row, pending)
            ):
                where = f"; {n_source} message(s) in the source DLQ" if n_source else ""
                detail = f"FAILED, no DLQ message, no retry path, {attempts}{where}{keyed}"
                violated(INVARIANTS[1], unit, detail)
        twins = send_then_mark_twins(unit_letters.get(unit.pk, []), died)
        if n_dlq + n_source - copies - twins > 1:
            violated(INVARIANTS[2], unit, f"{n_dlq} in the DLQ, {n_source} in the source DLQ")
        if before is not None:
            # As the deliveries and audits left them: the redrive resubmits one of a unit's
            # messages and deletes the others, so only this count shows a second one.
            earlier = unit_letters_before.get(unit.pk, [])
            twins = send_then_mark_twins(earlier, died)
            if len(earlier) - twins > 1:
                detail = f"{len(earlier)} in the DLQ before the operator's redrive"
                violated(INVARIANTS[2], unit, detail + (f", {twins} the gap's" if twins else ""))
        gap += twins
        if unit.processable and not dead_lettered and n_effects != 1:
            keys = f" under {len(own)} keys" if len(own) > 1 else ""
            violated(INVARIANTS[3], unit, f"{n_effects} effects, row {status}{keys}")
        elif unit.processable and n_effects > 1:
            # (dead-lettered work may have made its effect before it died, never two)
            violated(INVARIANTS[3], unit, f"{n_effects} effects, dead-lettered, row {status}")
        if not unit.processable and n_effects:
            violated(INVARIANTS[4], unit, f"{n_effects} effects")
        if not unit.processable and not dead_lettered:
            detail = f"work that cannot succeed is not dead-lettered: row {status}"
            violated(INVARIANTS[3], unit, detail)
        if processed and n_dlq:
            violated(INVARIANTS[5], unit, f"{n_dlq} DLQ message(s)")
        if completed is not None and unit_runs[unit.pk] > 1:
            violated(INVARIANTS[8], unit, f"{unit_runs[unit.pk]} processor calls did the work")
        if run.redriven is not None and (n_source or (unit.processable and not processed)):
            # (nor is anything left in the source DLQ, its alarm firing for nothing)
            detail = f"row {status}, {n_dlq} DLQ message(s), {n_source} in the source DLQ"
            violated(INVARIANTS[7], unit, detail)
    for pk, n in unit_dlq.items():
        if pk not in known:
            violated(INVARIANTS[2], pk, f"{n} DLQ message(s) for no unit of work")
    # Work keyed apart from its unit (done under a second key, say) is judged too.
    for pk, found_rows in unit_rows.items():
        if pk not in known:
            held_as = "+".join(sorted(str(r.get("status")) for r in found_rows))
            violated(INVARIANTS[1], pk, f"a ledger row ({held_as}) for no unit of work")
    for pk, n in unit_effects.items():
        if pk not in known and n:
            violated(INVARIANTS[3], pk, f"{n} effect(s) for no unit of work")
    resubmitted_again = sum(int(again.get(k, 0)) for k in RESUBMITTED) if again else 0
    if resubmitted_again:
        violated(INVARIANTS[6], f"audit {len(audits)}", f"{resubmitted_again} resubmitted")
    broken = Counter(v["invariant"] for v in violations)
    return {
        "source": "sqs",
        "mode": ("batch" if run.config.batch else "one message per execution")
        + (", S3's events through the queue" if run.config.s3_events else "")
        + (", the processor EXPRESS" if run.config.express else "")
        + (", the audit from S3 Inventory" if run.config.inventory else ""),
        "bucket": "versioned" if run.config.versioned else "unversioned (ExistingBucketName)",
        "units": len(units),
        "objects": len(objects),
        "messages": len(units) - len(objects),
        "custom_events": sum(u.pk.startswith("event:") for u in units),
        "poison_units": sum(not u.processable for u in units),
        "messages_sent": run.sent,
        "pipe_executions": run.executions,
        "failed_batches": run.failed_batches,
        "queue_passes": run.rounds,
        "seconds_passed": run.time_passed,
        "outcomes": dict(sorted(run.outcomes.items())),
        "audits_during": [during_record(r, AUDIT_KEYS) for r in audits_during or []],
        "audits": audits,
        "redrive": run.redriven,
        "second_audit_resubmitted": resubmitted_again,
        "effects_histogram": {str(n): c for n, c in sorted(histogram.items())},
        "dead_letter_messages": sum(dlq.values()),
        "send_then_mark_gap": gap,
        "left_in_the_source_dlq_unclaimed": unclaimed,
        "source_dlq_copies": source_copies,
        "source_dead_letter_messages": sum(source_dlq.values()),
        "left_in_the_source_queue": len(pending),
        "invariants": [{"name": name, "violations": broken[name]} for name in INVARIANTS],
        "violations": violations,
    }


def render(report: dict[str, Any]) -> str:
    """The report as plain text, one line a fact."""
    per = "message" if report["mode"].startswith("batch") else "execution"
    lines = [
        "",
        f"onceflow chaos: report (source sqs, {report['mode']}, {report['bucket']} bucket)",
        f"  seed {report['seed']}, units of work {report['units']} ({report['objects']} "
        f"uploads, {report['messages']} messages, of them {report.get('custom_events', 0)} "
        f"custom events; {report['poison_units']} poison)",
        "  faults injected   "
        + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report["faults_injected"].items()),
        f"  messages sent     {report['messages_sent']}, pipe executions "
        f"{report['pipe_executions']} ({report['failed_batches']} failed as a whole), "
        f"passes over the queue {report['queue_passes']}",
        f"  outcomes per {per}: " + ", ".join(f"{k} {v}" for k, v in report["outcomes"].items()),
    ]
    lines += render_during(report.get("audits_during", []))
    for number, audit in enumerate(report["audits"], 1):
        if "error" in audit:
            lines.append(f"  audit {number}           did not reach its report: {audit['error']}")
        else:
            lines.append(
                f"  audit {number}           "
                + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in audit.items())
            )
    if report.get("redrive") is not None:
        lines.append(
            "  operator redrive  "
            + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report["redrive"].items())
        )
    lines += [
        "  effects per unit  "
        + ", ".join(f"{n}: {c}" for n, c in report["effects_histogram"].items()),
        f"  DLQ messages      {report['dead_letter_messages']} (source DLQ "
        f"{report['source_dead_letter_messages']}, left in the source queue "
        f"{report['left_in_the_source_queue']}); second messages of the send-then-mark "
        f"gap (design.md, named, not violations) {report.get('send_then_mark_gap', 0)}",
        "  moved by SQS to the source DLQ (named, not violations): never claimed "
        f"{report.get('left_in_the_source_dlq_unclaimed', 0)}, copies beyond a unit's first "
        f"{report.get('source_dlq_copies', 0)}",
        "",
        "invariants:",
    ]
    for invariant in report["invariants"]:
        n = invariant["violations"]
        lines.append(f"  {'held' if not n else 'VIOLATED':<8} {invariant['name']}"
                     + (f" ({n})" if n else ""))  # fmt: skip
    if report["violations"]:
        lines += ["", f"VIOLATIONS ({len(report['violations'])}):"]
        lines += [
            f"  - {v['invariant']}: {v['key']} (fault: {v['fault']}): {v['detail']}"
            for v in report["violations"]
        ]
    else:
        lines.append("invariants: all hold (exactly once, nothing left unfinished)")
    return "\n".join(lines)
