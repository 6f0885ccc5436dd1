"""`onceflow redrive`: move DLQ messages back into processing, or restart the executions
that could not dead-letter (--undelivered): a deliberate second chance."""

from __future__ import annotations

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
    # work was redriven earlier in the same run)
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


def _second_chance(target: Target, key: str, message_id: str) -> str:
    """Reset a dead-lettered row so that Reclaim takes it: attempts 0, recorded in the row.

    The row is read first, then written on condition that it is still what was
    read (FAILED, the same ``updated_at`` and ``lock_owner``), so that the reset
    can trim ``claims`` to the newest KEPT_CLAIMS (``claims_dropped`` counts the
    rest) without losing a claim appended meanwhile. Returns "reset", "absent"
    (no row: Claim will create one), the status of a row that must not be reset
    (PROCESSED, or PROCESSING under a lock), or "changing" when it kept changing.
    """
    dynamodb = target.client("dynamodb")
    table = target.output("LedgerTableName")
    for _ in range(_RESET_TRIES):
        item = dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get(
            "Item"
        )
        if item is None:
            return "absent"
        status = str(item["status"]["S"])
        if status != "FAILED":
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
        condition = " AND ".join(
            [
                "#status = :failed",
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


def _execution_exists(sfn: Any, arn: str) -> bool:
    try:
        sfn.describe_execution(executionArn=arn)
    except ClientError as exc:
        if error_code(exc) in ("ExecutionDoesNotExist", "InvalidArn"):
            return False
        raise
    return True


# Queues redrive reads: the template output of each, and whether its message
# bodies are the processor's DLQ shape or the original event (EventBridge's).
QUEUES = {
    "processor": ("DeadLetterQueueUrl", False),
    "ingress": ("IngressDeadLetterQueueUrl", True),
}


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
    never reached the processor, started as they are.
    """
    if queue not in QUEUES:
        raise OpsError(f"no queue {queue!r}; choose from {', '.join(QUEUES)}")
    output, raw = QUEUES[queue]
    sqs = target.client("sqs")
    sfn = target.client("stepfunctions")
    url = target.output(output)
    processor = target.output("ProcessorStateMachineArn")
    report = RedriveReport(url, dry_run)
    kept_handles: list[str] = []
    seen: set[str] = set()
    memory = _RunMemory()
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
                outcome = _redrive_one(
                    target, sqs, sfn, url, processor, message, dry_run, raw, memory
                )
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


def _wait_for_outcomes(target: Target, report: RedriveReport, wait: bool | None) -> None:
    """Locally (or when asked), wait for the executions started and note how each ended."""
    if not (target.local if wait is None else wait) or report.dry_run:
        return
    for item in report.messages:
        if item.execution_arn and item.action == "resubmitted":
            ended = wait_for_execution(target, item.execution_arn)
            item.outcome = ended["status"] + (f" ({ended['error']})" if ended.get("error") else "")


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
        # EXPRESS state machines have no ListExecutions: their failures are in the logs only.
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
) -> Redriven:
    message_id = message["MessageId"]
    attributes = _attributes(message)
    key = attributes.get("IDEMPOTENCY_KEY")
    origin = attributes.get("EXECUTION_ARN")
    try:
        body = json.loads(message.get("Body", ""))
    except json.JSONDecodeError:
        return Redriven(message_id, key, "kept", "the body is not JSON: not a onceflow DLQ message")
    execution_input = body if raw else _original_input(target, body, attributes)
    if execution_input is None:
        return Redriven(message_id, key, "kept", "the original event is no longer available")
    if memory.moved(key, origin, execution_input):
        return Redriven(
            message_id,
            key,
            "left",
            "its work was redriven earlier in this run (this is how that ended); "
            "left in the DLQ for a later run",
        )
    name = f"redrive-{message_id}"[:80]
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
        if state == "PROCESSED":
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return Redriven(message_id, key, "deleted", "already processed; the message was stale")
        if state == "PROCESSING":
            return Redriven(message_id, key, "kept", "being processed under a live lock")
        if state == "changing":
            return Redriven(message_id, key, "kept", "its row kept changing while being reset")
    try:
        # Step Functions counts 256 KiB of the input as sent, in UTF-8: compact,
        # unescaped JSON, as the original delivery sent it (an "é" is 2 bytes, not 6).
        text = json.dumps(execution_input, ensure_ascii=False, separators=(",", ":"))
        arn = sfn.start_execution(stateMachineArn=processor, name=name, input=text)["executionArn"]
    except ClientError as exc:
        if key:
            _undo_second_chance(target, key, message_id)
        return Redriven(message_id, key, "kept", f"the start was refused: {exc}")
    detail = "resubmitted; the row's attempts were reset" if key else "resubmitted"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return Redriven(message_id, key, "resubmitted", detail, execution_arn=arn)
