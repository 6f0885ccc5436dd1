"""`onceflow redrive`: move DLQ messages back into processing, or restart the executions
that could not dead-letter (--undelivered): a deliberate second chance."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from onceflow.ops.target import OpsError, Target, error_code, wait_for_execution


@dataclass
class Redriven:
    """What redrive did with one DLQ message."""

    message_id: str
    idempotency_key: str | None
    # resubmitted | would resubmit | kept | deleted (already processed) | left (its
    # work was redriven earlier in the same run) | too late (an unversioned upload's
    # event older than the audit's wait: the audit has resubmitted the upload itself)
    action: str
    detail: str = ""
    execution_arn: str | None = None
    outcome: str | None = None  # locally: how the resubmitted execution ended
    failed_execution: str | None = None  # --undelivered: the execution that could not dead-letter

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass
class RedriveReport:
    queue_url: str  # the queue read; with undelivered, the processor state machine
    dry_run: bool
    messages: list[Redriven] = field(default_factory=list)
    undelivered: bool = False

    def count(self, action: str) -> int:
        return sum(m.action == action for m in self.messages)

    def as_dict(self) -> dict[str, Any]:
        counts: dict[str, Any] = {
            "resubmitted": self.count("resubmitted"),
            "would_resubmit": self.count("would resubmit"),
            "kept": self.count("kept"),
        }
        if self.undelivered:
            head: dict[str, Any] = {"state_machine": self.queue_url, "undelivered": True}
            counts["already_restarted"] = self.count("already restarted")
        else:
            head = {"queue": self.queue_url}
            counts["left"] = self.count("left")
            counts["deleted_already_processed"] = self.count("deleted")
            counts["too_late"] = self.count("too late")
        return {
            **head,
            "dry_run": self.dry_run,
            **counts,
            "messages": [m.as_dict() for m in self.messages],
        }


def _attributes(message: Mapping[str, Any]) -> dict[str, str]:
    """A DLQ message's attributes as text; a String.urlencoded one (a key holding characters
    SQS refuses) decoded back to the key itself."""
    return {
        name: (
            unquote(str(value.get("StringValue", "")), errors="surrogatepass")
            if value.get("DataType") == "String.urlencoded"
            else str(value.get("StringValue", ""))
        )
        for name, value in message.get("MessageAttributes", {}).items()
    }


# What no UTF-8 text can hold (a lone surrogate), and U+FFFE, U+FFFF, which the processor's
# SendToDLQ also escapes: written as JSON escapes, which read back as the same string.
_UNSAFE = re.compile("[\ud800-\udfff\ufffe\uffff]")


def execution_text(execution_input: Any) -> str:
    """The input to start the processor with, as EventBridge and the pipe send it: compact
    JSON, UTF-8 characters as they are. ``json.dumps`` defaults write "é" as six bytes and an
    emoji as twelve, and add spaces: an event of 110 KB of "é" that the processor accepted
    once would come back as 330 KB, over StartExecution's 256 KiB (in UTF-8 bytes)."""
    text = json.dumps(execution_input, ensure_ascii=False, separators=(",", ":"))
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _original_input(target: Target, body: Any, attributes: Mapping[str, str]) -> Any:
    """What to start the processor with again: the original event, recovered if need be.

    A DLQ message's body has the event, or (when it was too large to copy)
    only an excerpt; then the execution named by EXECUTION_ARN has it whole.
    A work item for an S3 object is the last resort (a message's or an
    event's payload is not in the DLQ message).
    """
    if isinstance(body, dict) and body.get("event") is not None:
        return body["event"]
    execution = attributes.get("EXECUTION_ARN")
    if execution:
        try:
            text = target.client("stepfunctions").describe_execution(executionArn=execution)
            if text.get("input"):
                return json.loads(text["input"])
        except ClientError as exc:
            if error_code(exc) not in ("ExecutionDoesNotExist", "InvalidArn"):
                raise
    work_item = body.get("workItem") if isinstance(body, dict) else None
    if isinstance(work_item, dict) and work_item.get("bucket") and work_item.get("key"):
        return {"workItem": {**work_item, "source": "redrive"}}
    return None


# The claims a redrive keeps on a row (the newest); every Reclaim appends one, so
# without a bound a key redriven again and again outgrows DynamoDB's 400 KB item.
KEPT_CLAIMS = 10
_RESET_TRIES = 3


def _seen(name: str, item: Mapping[str, Any], values: dict[str, Any]) -> str:
    """A condition that the attribute still holds what was read (or is still absent)."""
    if name not in item:
        return f"attribute_not_exists({name})"
    values[f":seen_{name}"] = item[name]
    return f"{name} = :seen_{name}"


def open_status(status: str, key: str) -> str:
    """The sharded OpenWork index key of a row, as the state machine writes it (and the
    audit's functions/service/logic/open_work.py defines it; onceflow does not import the
    deployed code, and a test holds the two together)."""
    digest = hashlib.md5(key.encode("utf-8", "surrogatepass")).hexdigest()  # noqa: S324
    return f"{status}#{digest[0]}"


def execution_name(arn: str) -> str:
    """The name in an execution ARN of either form: ...:execution:<machine>:<name>
    (STANDARD) or ...:express:<machine>:<name>:<id> (EXPRESS: LocalStack's recording
    test_sfn_api_express.snapshot.json); the audit's service/logic/audit.py reads it alike."""
    parts = arn.split(":")
    return parts[7] if len(parts) >= 8 and parts[0] == "arn" else parts[-1]


def _claimed_as(item: Mapping[str, Any], name: str) -> str | None:
    """The claim (an execution ARN) of the row that an execution of this name made, if any."""
    for claim in item.get("claims", {}).get("L", []):
        if execution_name(str(claim.get("S", ""))) == name:
            return str(claim["S"])
    return None


def _processed(target: Target, key: str) -> bool:
    """Whether the row of ``key`` is PROCESSED (a consistent read): its work is done."""
    item = (
        target.client("dynamodb")
        .get_item(
            TableName=target.output("LedgerTableName"),
            Key={"pk": {"S": key}},
            ConsistentRead=True,
            ProjectionExpression="#status",
            ExpressionAttributeNames={"#status": "status"},
        )
        .get("Item")
    )
    return bool(item) and item.get("status", {}).get("S") == "PROCESSED"


def _second_chance(target: Target, key: str, message_id: str) -> str:
    """Reset a dead-lettered row so that Reclaim takes it: attempts 0, recorded in the row.

    A FAILED row, or a PROCESSING row whose lock has expired (no execution holds
    it: LedgerUnavailable sent its work here and left it so). The row is read
    first, then written on condition that it is still what was read (the same
    status, ``updated_at`` and ``lock_owner``; the lock still expired), so that the reset
    can trim ``claims`` to the newest KEPT_CLAIMS (``claims_dropped`` counts the
    rest) without losing a claim appended meanwhile. Returns "reset", "absent"
    (no row: Claim will create one), the status of a row that must not be reset
    (PROCESSED, or PROCESSING under a live lock), "changing" when it kept changing, or
    "claimed <ARN>" when this message's redrive execution (redrive_name) claimed the row
    already: an earlier redrive started it and stopped before deleting the message. Under
    EXPRESS that claim is the only record (DescribeExecution serves no EXPRESS execution).
    """
    dynamodb = target.client("dynamodb")
    table = target.output("LedgerTableName")
    for _ in range(_RESET_TRIES):
        item = dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get(
            "Item"
        )
        if item is None:
            return "absent"
        earlier = _claimed_as(item, redrive_name(message_id))
        if earlier is not None:
            return f"claimed {earlier}"
        status = str(item["status"]["S"])
        now = int(time.time())
        # A PROCESSING row whose lock expired is held by no execution (it died, or ended
        # in LedgerUnavailable, which dead-letters its work): it is reset like a FAILED one.
        stale = status == "PROCESSING" and int(item.get("lock_expires_at", {}).get("N", "0")) < now
        if status != "FAILED" and not stale:
            return status
        values: dict[str, Any] = {
            ":failed": {"S": "FAILED"},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":now_ms": {"N": str(int(time.time() * 1000))},
            ":message": {"S": message_id},
            ":open": {"S": open_status("FAILED", key)},
        }
        update = (
            "SET #status = :failed, open_status = :open, attempts = :zero, "
            "redriven_at = :now_ms, updated_at = :now_ms, redrive_message_id = :message"
        )
        add = "redrives :one"
        claims = item.get("claims", {}).get("L", [])
        if len(claims) > KEPT_CLAIMS:
            update += ", claims = :claims"
            add += ", claims_dropped :dropped"
            values[":claims"] = {"L": claims[-KEPT_CLAIMS:]}
            values[":dropped"] = {"N": str(len(claims) - KEPT_CLAIMS)}
        if stale:
            values[":processing"] = {"S": "PROCESSING"}
            values[":now"] = {"N": str(now)}
        condition = " AND ".join(
            [
                "#status = :processing AND lock_expires_at < :now"
                if stale
                else "#status = :failed",
                _seen("updated_at", item, values),
                _seen("lock_owner", item, values),
            ]
        )
        try:
            dynamodb.update_item(
                TableName=table,
                Key={"pk": {"S": key}},
                UpdateExpression=f"{update} ADD {add} REMOVE dead_lettered_at",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
            return "reset"
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # Written since it was read (a reclaim, another redrive): read it again.
    return "changing"


def _undo_second_chance(target: Target, key: str, message_id: str) -> None:
    """The start was refused: dead-letter the row again, so nothing but redrive reclaims it."""
    try:
        target.client("dynamodb").update_item(
            TableName=target.output("LedgerTableName"),
            Key={"pk": {"S": key}},
            UpdateExpression="SET dead_lettered_at = :now_ms REMOVE open_status",
            ConditionExpression="redrive_message_id = :message AND #status = :failed",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":now_ms": {"N": str(int(time.time() * 1000))},
                ":message": {"S": message_id},
                ":failed": {"S": "FAILED"},
            },
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise  # the row changed hands meanwhile: it is no longer ours to restore


def redrive_name(message_id: str) -> str:
    """The name redrive starts a DLQ message's execution under, the same on every run."""
    return f"redrive-{message_id}"[:80]


def _execution_exists(sfn: Any, arn: str) -> bool:
    """Whether a STANDARD execution of this ARN exists. An EXPRESS one is never found:
    DescribeExecution does not serve them (InvalidArn), and an EXPRESS machine's
    executions have ARNs of another form (...:express:<machine>:<name>:<id>), which no
    caller can build before the start; the ledger's claims stand in (_second_chance)."""
    try:
        sfn.describe_execution(executionArn=arn)
    except ClientError as exc:
        if error_code(exc) in ("ExecutionDoesNotExist", "InvalidArn"):
            return False
        raise
    return True


# ---- unversioned uploads the audit has taken over ---------------------------

NULL_VERSION = "null"
# An audit that starts while a redriven event is being claimed looks for its row in the
# ObjectContent index, which DynamoDB updates asynchronously: an event this close to the
# audit's wait is treated as past it.
AUDIT_WAIT_MARGIN_SECONDS = 3600.0
TOO_LATE = (
    "the audit resubmits uploads this old without a version id under their ETag; moving "
    "this event back could process it twice: check `onceflow inspect` and delete it "
    "(--force moves it anyway)"
)


def _moment(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _unversioned(version: Any) -> bool:
    return version is None or version == "" or version == NULL_VERSION


def unversioned_upload_time(event: Any) -> datetime.datetime | None:
    """When S3 sent an Object Created event for an upload without a version id: the
    EventBridge event's ``time``, or the earliest such record's ``eventTime`` of a classic
    S3 notification (S3 User Guide, ev-events.html; notification-content-structure.html:
    ``versionId`` "object version if bucket is versioning-enabled, otherwise null"; an
    absent one counts as null, as Claim reads it). None for any other event, and for
    an upload with a version (its event and the audit share the version's key)."""
    if not isinstance(event, dict):
        return None
    if event.get("source") == "aws.s3" and event.get("detail-type") == "Object Created":
        detail = event.get("detail")
        obj = detail.get("object") if isinstance(detail, dict) else None
        if isinstance(obj, dict) and _unversioned(obj.get("version-id")):
            return _moment(event.get("time"))
        return None
    records = event.get("Records")
    times = [
        _moment(record.get("eventTime"))
        for record in (records if isinstance(records, list) else [])
        if isinstance(record, dict)
        and record.get("eventSource") == "aws:s3"
        and str(record.get("eventName", "")).startswith("ObjectCreated:")
        and isinstance(record.get("s3"), dict)
        and _unversioned((record["s3"].get("object") or {}).get("versionId"))
    ]
    found = [t for t in times if t is not None]
    return min(found) if found else None


def audit_wait_seconds(target: Target) -> float:
    """How old an upload without a version id must be before the audit resubmits it under
    its ETag, as the deployed AuditFunction has it (functions/service/settings.py and
    logic/audit.py age_verdict: the recent cutoff, and the longest any source holds an
    event). Its environment through GetFunctionConfiguration: on AWS the deployed function's,
    locally the engine's (it creates each function with its template environment)."""
    function = target.output("AuditFunctionArn")
    configuration = target.client("lambda").get_function_configuration(FunctionName=function)
    variables = configuration.get("Environment", {}).get("Variables", {})
    scales = {
        "AUDIT_RECENT_CUTOFF_HOURS": 3600.0,
        "INGRESS_MAX_EVENT_AGE_SECONDS": 1.0,
        "SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS": 1.0,
    }
    wait = 0.0
    for name, scale in scales.items():
        raw = str(variables.get(name, "")).strip()
        try:
            wait = max(wait, float(raw or 0) * scale)
        except ValueError:
            raise OpsError(f"the audit function {function} has {name}={raw!r}") from None
    return wait


@dataclass
class _AuditWait:
    """The audit's wait, read once per run and only if an unversioned upload's event comes."""

    target: Target
    force: bool
    _seconds: float | None = None

    def verdict(self, event: Any) -> tuple[str, str] | None:
        """The action and reason to keep the event in its DLQ, or None to move it."""
        if self.force:
            return None
        sent = unversioned_upload_time(event)
        if sent is None:
            return None
        if self._seconds is None:
            try:
                self._seconds = audit_wait_seconds(self.target)
            except ClientError as exc:
                return "kept", (
                    f"an upload without a version id, and the audit's wait cannot be read "
                    f"({exc}): it may have resubmitted the upload under its ETag; "
                    "--force moves it anyway"
                )
        age = time.time() - sent.timestamp()
        if age >= self._seconds - AUDIT_WAIT_MARGIN_SECONDS:
            return "too late", f"sent {age / 86400:.1f} days ago: {TOO_LATE}"
        return None


# Queues redrive reads: the template output of each, and whether its message
# bodies are the processor's DLQ shape or the original event (EventBridge's). The
# source queue's DLQ holds the producers' messages themselves (SQS moved them there
# after SourceQueueMaxReceiveCount receives): they go back to the source queue.
QUEUES = {
    "processor": ("DeadLetterQueueUrl", False),
    "ingress": ("IngressDeadLetterQueueUrl", True),
    "source": ("SourceDeadLetterQueueUrl", True),  # found from SOURCE_QUEUE_ARN
}
SOURCE_QUEUE_ARN = "SourceQueueArn"


@dataclass
class _RunMemory:
    """What one redrive run has moved already, so that it moves each piece of work once.

    A redriven execution that fails again is dead-lettered anew, as a message
    with a new id: without this, one run would receive it and redrive it again,
    without end. Work is known by its key, or, for a message without one (an
    invalid event, an ingress event), by the execution that dead-lettered it
    and by its original input.
    """

    keys: set[str] = field(default_factory=set)
    executions: set[str] = field(default_factory=set)
    inputs: set[str] = field(default_factory=set)

    @staticmethod
    def digest(execution_input: Any) -> str:
        text = json.dumps(execution_input, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def moved(self, key: str | None, execution: str | None, execution_input: Any) -> bool:
        if execution and execution in self.executions:
            return True  # dead-lettered by an execution this run started
        if key:
            return key in self.keys
        return self.digest(execution_input) in self.inputs

    def remember(self, key: str | None, executions: list[str | None], execution_input: Any) -> None:
        if key:
            self.keys.add(key)
        self.executions.update(e for e in executions if e)
        self.inputs.add(self.digest(execution_input))


def _receive(sqs: Any, url: str, count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=max(1, min(count, 10)),
        MessageAttributeNames=["All"],
        # Hidden from other consumers while this redrive decides; made
        # visible again at the end for every message it keeps.
        VisibilityTimeout=300,
        WaitTimeSeconds=0,
    ).get("Messages", [])
    return messages


def redrive(
    target: Target,
    max_messages: int | None = None,
    dry_run: bool = False,
    progress: Callable[[Redriven], None] | None = None,
    wait: bool | None = None,
    queue: str = "processor",
    include_invalid: bool = False,
    force: bool = False,
) -> RedriveReport:
    """Move DLQ messages back into processing: a deliberate second chance.

    For each message: reset its ledger row (attempts to 0, dead_lettered_at
    removed, the redrive recorded), start the processor with the original
    event, and delete the message only once Step Functions accepted the
    start. A message whose work was processed meanwhile is deleted; one that
    cannot be resubmitted is kept. What fails again is dead-lettered again
    by the processor, as a new message.

    One run moves each piece of work once: a message for work this run has
    already moved (the same key; for a message without one, the same
    execution or input) is left in the queue for a later run, and the run
    stops when a receive brings nothing it has not seen.

    ``queue`` "ingress" reads the EventBridge rules' DLQ instead: events that
    never reached the processor, started as they are. ``queue`` "source" reads
    the source queue's DLQ: each message is sent back to the source queue as it
    is (body and attributes) and the pipe delivers it again, under the rules of
    any delivery: work done is a duplicate, work below MaxAttempts is reclaimed,
    and (SqsBatchMode) a row at MaxAttempts is dead-lettered, to the processor's
    DLQ, where this command's default queue gives it a deliberate second chance.

    A message dead-lettered as InvalidEvent is kept unless ``include_invalid``: the
    processor refused the event itself, so the same event fails the same way until the
    stack changes to accept it (a parameter, a new release); then it is asked for.

    From the ingress and source DLQs, an Object Created event of an upload without a
    version id that is older than the audit's wait is kept ("too late") unless
    ``force``: its key is the event's sequencer, and the audit, which sees none, has
    resubmitted such an upload under its ETag, so moving the event back could process it
    a second time under another key.
    """
    if queue not in QUEUES:
        raise OpsError(f"no queue {queue!r}; choose from {', '.join(QUEUES)}")
    output, raw = QUEUES[queue]
    sqs = target.client("sqs")
    sfn = target.client("stepfunctions")
    if queue == "source":
        url, back = _source_queues(target, sqs)
    else:
        url, back = target.output(output), ""
    processor = target.output("ProcessorStateMachineArn")
    report = RedriveReport(url, dry_run)
    kept_handles: list[str] = []
    seen: set[str] = set()
    memory = _RunMemory()
    audit_wait = _AuditWait(target, force)
    try:
        while max_messages is None or len(report.messages) < max_messages:
            wanted = 10 if max_messages is None else max_messages - len(report.messages)
            batch = []
            for message in _receive(sqs, url, wanted):
                if message["MessageId"] in seen:
                    # Decided on already (its hiding ran out): visible again at the end.
                    kept_handles.append(message["ReceiptHandle"])
                else:
                    batch.append(message)
            if not batch:
                break  # an empty queue, or only messages this run has seen
            for message in batch[:wanted]:
                seen.add(message["MessageId"])
                if back:
                    outcome = _move_back(
                        sqs, sfn, processor, url, back, message, dry_run, memory, audit_wait
                    )
                else:
                    outcome = _redrive_one(
                        target, sqs, sfn, url, processor, message, dry_run, raw, memory,
                        include_invalid, audit_wait,
                    )  # fmt: skip
                if outcome.action != "resubmitted" and outcome.action != "deleted":
                    kept_handles.append(message["ReceiptHandle"])
                report.messages.append(outcome)
                if progress is not None:
                    progress(outcome)
            for message in batch[wanted:]:
                kept_handles.append(message["ReceiptHandle"])
    finally:
        for handle in kept_handles:
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
    _wait_for_outcomes(target, report, wait)
    return report


def _source_queues(target: Target, sqs: Any) -> tuple[str, str]:
    """The source queue's DLQ and the queue, the stack's own or (SqsSource=<ARN>) yours:
    the DLQ is the one the queue's redrive policy names."""
    try:
        arn = target.output(SOURCE_QUEUE_ARN)
    # A missing output is an OpsError on a deployed stack and the engine's own error
    # locally (ops does not import the engine): either way, say what to do instead.
    except Exception as exc:
        raise OpsError(
            "--queue source needs a stack with a source queue (SqsSource), deployed by this "
            f"version (its output {SOURCE_QUEUE_ARN}): {exc}"
        ) from exc
    back = _queue_url(sqs, arn)
    attributes = sqs.get_queue_attributes(QueueUrl=back, AttributeNames=["RedrivePolicy"])
    policy = attributes.get("Attributes", {}).get("RedrivePolicy")
    if not policy:
        raise OpsError(f"the source queue {arn} has no DLQ (no RedrivePolicy): nothing to move")
    return _queue_url(sqs, json.loads(policy)["deadLetterTargetArn"]), back


def _queue_url(sqs: Any, arn: str) -> str:
    """arn:aws:sqs:<region>:<account>:<name> -> its URL (GetQueueUrl)."""
    *_, account, name = arn.split(":")
    return str(sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"])


def _wait_for_outcomes(target: Target, report: RedriveReport, wait: bool | None) -> None:
    """Locally (or when asked), wait for the executions started and note how each ended."""
    if not (target.local if wait is None else wait) or report.dry_run:
        return
    for item in report.messages:
        if item.execution_arn and item.action == "resubmitted":
            ended = _ended(target, item.execution_arn)
            if ended is None:
                item.outcome = "EXPRESS: see the processor's log group"
                continue
            item.outcome = ended["status"] + (f" ({ended['error']})" if ended.get("error") else "")
            if ended["status"] == "SUCCEEDED" and (what := _succeeded_as(ended.get("output"))):
                item.outcome += f" ({what})"


# What each way the processor succeeds means for the work (its output's status).
_SUCCEEDED_AS = {
    "PROCESSED": "PROCESSED",
    "DUPLICATE": "DUPLICATE: the work did not run again",
    "SUPERSEDED": "SUPERSEDED: the key holds other content now",
    "IGNORED": "IGNORED",
}


def _succeeded_as(output: Any) -> str | None:
    """The processor's own word for how a succeeded execution ended, from its output."""
    value = json.loads(output) if isinstance(output, str) else output  # Step Functions' JSON
    status = value.get("status") if isinstance(value, dict) else None
    return _SUCCEEDED_AS.get(status) if isinstance(status, str) else None


def _ended(target: Target, arn: str) -> dict[str, Any] | None:
    """How an execution ended: DescribeExecution's answer, or for an EXPRESS one (which
    DescribeExecution refuses: InvalidArn, recorded in LocalStack's test_sfn_api_express
    snapshot) the record the target keeps of it, None when it keeps none (a deployed
    stack: the processor's log group has it)."""
    parts = arn.split(":")
    if len(parts) < 8 or parts[5] != "express":
        return wait_for_execution(target, arn)
    target.wait_for_running(":".join([*parts[:5], "stateMachine", parts[6]]))
    return target.express_record(arn)


# The DLQ attribute EXHAUSTED_RETRY_CONDITION of an event the processor could not read.
INVALID_EVENT = "InvalidEvent"


# ---- undelivered: executions that could not dead-letter ---------------------

# The processor's Fail state (and error) when its DLQ message could not be sent.
DEAD_LETTER_FAILED = "DeadLetterFailed"
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def undelivered_name(execution_name: str) -> str:
    """The restart's execution name, derived from the failed execution's alone.

    Step Functions refuses a second execution of a name (for 90 days), so an
    undelivered execution is restarted at most once however often redrive runs.
    """
    digest = hashlib.sha256(execution_name.encode()).hexdigest()[:24]
    return f"undelivered-{_NAME_UNSAFE.sub('-', execution_name)[:43]}-{digest}"


def redrive_undelivered(
    target: Target,
    max_executions: int | None = None,
    since: datetime.datetime | None = None,
    dry_run: bool = False,
    progress: Callable[[Redriven], None] | None = None,
    wait: bool | None = None,
) -> RedriveReport:
    """Restart processor executions that ended in DeadLetterFailed, with their own input.

    Such an execution could not send its DLQ message: an event with no ledger
    row (an invalid event, a message whose Claim failed) is then only in the
    execution's input. The processor's FAILED executions are read newest
    first (back to ``since``), each described, and each one whose error is
    DeadLetterFailed is started again under ``undelivered_name``; at most
    ``max_executions`` of them. What fails again dead-letters as usual, or, if
    the DLQ still refuses, ends DeadLetterFailed again under its new name.
    """
    sfn = target.client("stepfunctions")
    processor = target.output("ProcessorStateMachineArn")
    executions = processor.replace(":stateMachine:", ":execution:")
    report = RedriveReport(processor, dry_run, undelivered=True)
    paginator = sfn.get_paginator("list_executions")
    pages = paginator.paginate(stateMachineArn=processor, statusFilter="FAILED")
    started: set[str] = set()
    for listed in _listed(pages):
        if max_executions is not None and len(report.messages) >= max_executions:
            break
        if since is not None and listed["startDate"] < since:
            break  # newest first: everything after this started earlier still
        if listed["executionArn"] in started:
            continue  # a restart of this run that failed already: the next run's to judge
        described = sfn.describe_execution(executionArn=listed["executionArn"])
        if described.get("error") != DEAD_LETTER_FAILED:
            continue
        item = _restart(sfn, executions, described, dry_run)
        if item.execution_arn:
            started.add(item.execution_arn)
        report.messages.append(item)
        if progress is not None:
            progress(item)
    _wait_for_outcomes(target, report, wait)
    return report


def _listed(pages: Any) -> Iterator[dict[str, Any]]:
    try:
        for page in pages:
            yield from page["executions"]
    except ClientError as exc:
        if error_code(exc) == "StateMachineTypeNotSupported":
            # ListExecutions serves no EXPRESS machine (recorded in LocalStack's
            # test_sfn_api_express snapshot): its failures are in its log group only.
            raise OpsError(
                "the processor is EXPRESS: its executions are not listed "
                f"({error_code(exc)}), so --undelivered finds none. Work with a ledger row "
                "that could not be dead-lettered is dead-lettered by the audit's sweep; "
                "DeadLetterFailed executions are named in the processor's log group"
            ) from exc
        raise OpsError(f"cannot list the processor's failed executions: {exc}") from exc


def _restart(sfn: Any, executions: str, failed: dict[str, Any], dry_run: bool) -> Redriven:
    name = undelivered_name(str(failed["name"]))
    arn = f"{executions}:{name}"
    cause = str(failed.get("cause") or "")[:300]

    def outcome(action: str, detail: str, started: str | None = None) -> Redriven:
        return Redriven(
            "", None, action, detail, execution_arn=started, failed_execution=failed["executionArn"]
        )

    if _execution_exists(sfn, arn):
        return outcome("already restarted", f"restarted earlier as {name}", arn)
    if not failed.get("input"):
        return outcome("kept", "its input is no longer available")
    if dry_run:
        return outcome("would resubmit", cause)
    try:
        # The input exactly as the failed execution had it.
        sfn.start_execution(
            stateMachineArn=failed["stateMachineArn"], name=name, input=failed["input"]
        )
    except ClientError as exc:
        if error_code(exc) == "ExecutionAlreadyExists":
            return outcome("already restarted", f"restarted meanwhile as {name}", arn)
        return outcome("kept", f"the start was refused: {exc}")
    return outcome("resubmitted", cause, arn)


# The message attribute a message moved back to the source queue carries: the messageId it
# had when it first arrived (SendMessage gives every message a new one). Claim keys a
# message by it when IdempotencyKeyPath is empty (statemachines/src/processor.asl.yaml).
ORIGINAL_ID = "ONCEFLOW_MESSAGE_ID"


def _move_back(
    sqs: Any,
    sfn: Any,
    processor: str,
    url: str,
    source: str,
    message: dict[str, Any],
    dry_run: bool,
    memory: _RunMemory,
    audit_wait: _AuditWait,
) -> Redriven:
    """A message of the source queue's DLQ, sent back to the source queue as it was (body
    and message attributes) with ONCEFLOW_MESSAGE_ID added, then deleted from the DLQ:
    never both gone, at worst both there (a copy the ledger makes a duplicate).

    A copy SQS refuses for what it holds (InvalidParameterValue: the added attribute
    takes a message the queue took at its MaximumMessageSize over it, SQS counting every
    part of an attribute in the size, or makes an 11th attribute) would leave the message
    in the DLQ until it expires, and a message that never claimed a row is found by no
    audit: the processor is started with it instead (_start_as_piped), as the pipe would
    hand over the copy, the same unit of work.

    The copy gets a new MessageId, so a message keyed by its messageId (IdempotencyKeyPath
    empty) would be new work, processed again; the attribute carries the first one, and
    Claim keys by it. SQS's own redrive (StartMessageMoveTask, the console's "Start DLQ
    redrive") gives moved messages a new messageId too ("All redriven messages are
    considered new messages with a new messageID": SQS Developer Guide,
    sqs-configure-dead-letter-queue-redrive.html) and adds no such attribute."""
    message_id = message["MessageId"]
    body = message.get("Body", "")
    # Known by its identity, not its body: two messages of one body are two units of work
    # when keyed by messageId; a copy this run moved that came back carries the first id.
    first = message.get("MessageAttributes", {}).get(ORIGINAL_ID, {}).get("StringValue")
    identity = f"sqs-message:{first if isinstance(first, str) else message_id}"
    if memory.moved(identity, None, body):
        return Redriven(message_id, None, "left", "the same message was moved earlier in this run")
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        parsed = None  # a producer's own text: the pipe's rules judge it, as on any delivery
    late = audit_wait.verdict(parsed)
    if late is not None:
        return Redriven(message_id, None, *late)
    memory.remember(identity, [], body)
    if dry_run:
        return Redriven(message_id, None, "would resubmit", "back to the source queue")
    attributes = {
        name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
        for name, value in message.get("MessageAttributes", {}).items()
    }
    # The messageId it first had, which keys it when IdempotencyKeyPath is empty: kept from
    # an earlier move, else this one (SendMessage gives the copy a new MessageId).
    attributes.setdefault(ORIGINAL_ID, {"DataType": "String", "StringValue": message_id})
    try:
        sent = sqs.send_message(QueueUrl=source, MessageBody=body, MessageAttributes=attributes)
    except ClientError as exc:
        if error_code(exc) not in _COPY_REFUSED:
            return Redriven(message_id, None, "kept", f"the source queue refused it: {exc}")
        # e.g. a message with SQS's maximum of 10 attributes of its own has no room for
        # ONCEFLOW_MESSAGE_ID ("Each message can have up to 10 attributes":
        # sqs-message-metadata.html), nor one the queue took at its largest ("All parts of
        # the message attribute, including Name, Type, and Value, are part of the message
        # size restriction": MessageAttributeValue, SQS API reference)
        return _start_as_piped(sqs, sfn, processor, url, message, attributes, exc)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return Redriven(
        message_id,
        None,
        "resubmitted",
        f"back to the source queue as {sent['MessageId']}; the pipe delivers it again",
    )


# SendMessage's refusal of what a message holds (its size, its attributes): a copy with
# ONCEFLOW_MESSAGE_ID is refused again on every run (SendMessage, SQS API reference). AWS
# answers a message too long with InvalidParameterValue, "Message must be shorter than N
# bytes" (as users quote it: datacite/lupo#104, inferablehq/inferable#306); the code of
# the 11th attribute's refusal is not verified (its text: aws/aws-sdk-js#2876).
_COPY_REFUSED = frozenset({"InvalidParameterValue", "InvalidMessageContents"})


def _start_as_piped(
    sqs: Any,
    sfn: Any,
    processor: str,
    url: str,
    message: dict[str, Any],
    attributes: dict[str, dict[str, Any]],
    refusal: ClientError,
) -> Redriven:
    """Start the processor state machine with a source DLQ message the source queue will not
    take back, as the pipe would hand over the copy redrive tried to send: a one-record
    array (the fields Claim reads, which the row's original_event keeps) with the message's
    own attributes and ONCEFLOW_MESSAGE_ID, so it keys the same row as its first delivery
    and is judged by the same rules (a producer's ONCEFLOW_MESSAGE_ID that is no String is
    an InvalidEvent either way). The processor exists in every mode and is what the audit
    resubmits such rows to. Started under redrive_name (a STANDARD processor refuses the
    name a second time; under EXPRESS a second run is a Duplicate in the ledger), then the
    message is deleted."""
    message_id = message["MessageId"]
    record = {
        "messageId": message_id,
        "eventSource": "aws:sqs",
        "body": message.get("Body", ""),
        "messageAttributes": {
            name: {
                **(
                    {"binaryValue": base64.b64encode(value["BinaryValue"]).decode()}
                    if "BinaryValue" in value
                    else {"stringValue": value.get("StringValue")}
                ),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in attributes.items()
        },
    }
    first = attributes[ORIGINAL_ID].get("StringValue", message_id)
    name = redrive_name(message_id)
    arn = f"{processor.replace(':stateMachine:', ':execution:')}:{name}"
    why = f"the source queue refused it back ({error_code(refusal)}: {refusal})"
    try:
        arn = sfn.start_execution(
            stateMachineArn=processor, name=name, input=execution_text([record])
        )["executionArn"]
    except ClientError as exc:
        if error_code(exc) != "ExecutionAlreadyExists":
            return Redriven(message_id, None, "kept", f"{why}, and the processor too: {exc}")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return Redriven(
        message_id,
        None,
        "resubmitted",
        f"{why}: the processor was started with it as the pipe hands it over, "
        f"{ORIGINAL_ID} {first}",
        execution_arn=arn,
    )


def _redrive_one(
    target: Target,
    sqs: Any,
    sfn: Any,
    url: str,
    processor: str,
    message: dict[str, Any],
    dry_run: bool,
    raw: bool,
    memory: _RunMemory,
    include_invalid: bool,
    audit_wait: _AuditWait,
) -> Redriven:
    message_id = message["MessageId"]
    attributes = _attributes(message)
    key = attributes.get("IDEMPOTENCY_KEY")
    origin = attributes.get("EXECUTION_ARN")
    if attributes.get("EXHAUSTED_RETRY_CONDITION") == INVALID_EVENT and not include_invalid:
        return Redriven(
            message_id,
            key,
            "kept",
            f"an {INVALID_EVENT}: the processor refused the event itself "
            f"({attributes.get('ERROR_MESSAGE', 'see ERROR_MESSAGE')}); run again it fails "
            "the same way. Once the stack accepts it, redrive --invalid",
        )
    try:
        body = json.loads(message.get("Body", ""))
    except json.JSONDecodeError:
        return Redriven(message_id, key, "kept", "the body is not JSON: not a onceflow DLQ message")
    execution_input = body if raw else _original_input(target, body, attributes)
    if execution_input is None:
        return Redriven(message_id, key, "kept", "the original event is no longer available")
    # The processor's DLQ is left out: its message has a row under the event's own key,
    # which the audit finds by content and does not resubmit (logic/audit.py content_row).
    late = audit_wait.verdict(execution_input) if raw else None
    if late is not None:
        return Redriven(message_id, key, *late)
    if memory.moved(key, origin, execution_input):
        if key and not dry_run and _processed(target, key):
            # Work done (by what this run started, or before): another message of it (the
            # send-then-mark gap, design.md) is stale however many of its key this run met.
            # Deleting it starts nothing, so the rule of one move per key, which keeps a run
            # from redriving work that fails again in it, does not keep it for a later run,
            # nor the DLQ's alarm firing for finished work (chaos --batch seeds 252, 281).
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return Redriven(
                message_id, key, "deleted", "already processed; another message of the same work"
            )
        if dry_run:  # nothing was started: the run would move its work once, from another
            return Redriven(
                message_id,
                key,
                "left",
                "another message of work this run would move already; it would be left in "
                "the DLQ for a later run",
            )
        return Redriven(
            message_id,
            key,
            "left",
            "its work was redriven earlier in this run (this is how that ended); "
            "left in the DLQ for a later run",
        )
    name = redrive_name(message_id)
    arn = f"{processor.replace(':stateMachine:', ':execution:')}:{name}"
    memory.remember(key, [origin, arn], execution_input)
    if dry_run:
        reason = attributes.get("ERROR_CODE", "?")
        return Redriven(message_id, key, "would resubmit", f"dead-lettered for {reason}")
    if _execution_exists(sfn, arn):
        # An earlier redrive started it and stopped before deleting the
        # message; whatever that execution did stands (it dead-letters anew
        # if it failed), so the row is not reset a second time.
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return Redriven(
            message_id, key, "resubmitted", "an earlier redrive had started it", execution_arn=arn
        )
    if key:
        state = _second_chance(target, key, message_id)
        if state.startswith("claimed "):
            # As above, found by the claim its execution made (the EXPRESS case).
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            earlier = state.removeprefix("claimed ")
            return Redriven(
                message_id, key, "resubmitted", "an earlier redrive had started it",
                execution_arn=earlier,
            )  # fmt: skip
        if state == "PROCESSED":
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return Redriven(message_id, key, "deleted", "already processed; the message was stale")
        if state == "PROCESSING":
            return Redriven(message_id, key, "kept", "being processed under a live lock")
        if state == "changing":
            return Redriven(message_id, key, "kept", "its row kept changing while being reset")
    try:
        arn = sfn.start_execution(
            stateMachineArn=processor, name=name, input=execution_text(execution_input)
        )["executionArn"]
    except ClientError as exc:
        if key:
            _undo_second_chance(target, key, message_id)
        return Redriven(message_id, key, "kept", f"the start was refused: {exc}")
    detail = "resubmitted; the row's attempts were reset" if key else "resubmitted"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return Redriven(message_id, key, "resubmitted", detail, execution_arn=arn)
