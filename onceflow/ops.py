"""Operations on a stack: run the audit, redrive the DLQ, inspect a key.

Each works on a Target: the local engine, or a deployed stack found by its
name (CloudFormation outputs). They use only the AWS APIs an operator's
credentials would, so the local run and the deployed run are the same code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol, TextIO

import boto3
from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import BotoCoreError, ClientError

from onceflow.engine import LocalEngine

_DESERIALIZE = TypeDeserializer()


class OpsError(Exception):
    """An operation could not run (a missing output, an unreachable stack)."""


class Target(Protocol):
    local: bool

    def client(self, service: str) -> Any: ...

    def output(self, name: str) -> str: ...


class LocalTarget:
    """The embedded engine's stack."""

    local = True

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self._outputs = engine.outputs()

    def client(self, service: str) -> Any:
        return self.engine.client(service)

    def output(self, name: str) -> str:
        if name not in self._outputs:
            raise OpsError(f"the template has no output {name}")
        return self._outputs[name]


class DeployedTarget:
    """A deployed stack: its resources come from the stack's outputs."""

    local = False

    def __init__(
        self, stack_name: str, region: str | None = None, profile: str | None = None
    ) -> None:
        self.session = boto3.session.Session(region_name=region, profile_name=profile)
        self.stack_name = stack_name
        try:
            stacks = self.session.client("cloudformation").describe_stacks(StackName=stack_name)
        except (ClientError, BotoCoreError) as exc:
            raise OpsError(f"cannot read stack {stack_name}: {exc}") from exc
        outputs = stacks["Stacks"][0].get("Outputs", [])
        self._outputs = {o["OutputKey"]: o["OutputValue"] for o in outputs}
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service)  # type: ignore[call-overload]
        return self._clients[service]

    def output(self, name: str) -> str:
        if name not in self._outputs:
            raise OpsError(f"stack {self.stack_name} has no output {name}; is it a onceflow stack?")
        return self._outputs[name]


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def wait_for_execution(
    target: Target, arn: str, timeout: float = 3600.0, progress: TextIO | None = None
) -> dict[str, Any]:
    """Poll until the execution ends; returns DescribeExecution's answer."""
    sfn = target.client("stepfunctions")
    deadline = time.monotonic() + timeout
    delay = 0.01 if target.local else 2.0
    while True:
        description: dict[str, Any] = sfn.describe_execution(executionArn=arn)
        if description["status"] != "RUNNING":
            return description
        if time.monotonic() > deadline:
            raise OpsError(f"{arn} still running after {timeout:.0f}s")
        if progress is not None and not target.local:
            progress.write(".")
            progress.flush()
        time.sleep(delay)
        delay = min(delay * 2, 0.1 if target.local else 10.0)


# ---- audit ------------------------------------------------------------------


def run_audit(
    target: Target,
    prefixes: list[str] | None = None,
    name: str | None = None,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Start the audit state machine, wait for it, return its report.

    Locally, also wait for the processor executions it started, so that the
    caller sees their effects.
    """
    sfn = target.client("stepfunctions")
    audit_input = {"prefixes": prefixes} if prefixes else {}
    kwargs: dict[str, Any] = {
        "stateMachineArn": target.output("AuditStateMachineArn"),
        "input": json.dumps(audit_input),
        "name": name or f"audit-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**6:06d}",
    }
    arn = sfn.start_execution(**kwargs)["executionArn"]
    if progress is not None:
        progress.write(f"audit: started {arn}\n")
    description = wait_for_execution(target, arn, progress=progress)
    if description["status"] != "SUCCEEDED":
        raise OpsError(
            f"the audit {description['status']}: {description.get('error')}: "
            f"{description.get('cause')}"
        )
    report: dict[str, Any] = json.loads(description["output"])
    if isinstance(target, LocalTarget):
        target.engine.wait_for_running("ProcessorStateMachine")
    return report


# ---- redrive ----------------------------------------------------------------


@dataclass
class Redriven:
    """What redrive did with one DLQ message."""

    message_id: str
    idempotency_key: str | None
    action: str  # resubmitted | would resubmit | kept | deleted (already processed)
    detail: str = ""
    execution_arn: str | None = None
    outcome: str | None = None  # locally: how the resubmitted execution ended

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass
class RedriveReport:
    queue_url: str
    dry_run: bool
    messages: list[Redriven] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(m.action == action for m in self.messages)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue_url,
            "dry_run": self.dry_run,
            "resubmitted": self.count("resubmitted"),
            "would_resubmit": self.count("would resubmit"),
            "kept": self.count("kept"),
            "deleted_already_processed": self.count("deleted"),
            "messages": [m.as_dict() for m in self.messages],
        }


def _attributes(message: Mapping[str, Any]) -> dict[str, str]:
    return {
        name: str(value.get("StringValue", ""))
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
            if _error_code(exc) not in ("ExecutionDoesNotExist", "InvalidArn"):
                raise
    work_item = body.get("workItem") if isinstance(body, dict) else None
    if isinstance(work_item, dict) and work_item.get("bucket") and work_item.get("key"):
        return {"workItem": {**work_item, "source": "redrive"}}
    return None


def _second_chance(target: Target, key: str, message_id: str) -> str:
    """Reset a dead-lettered row so that Reclaim takes it: attempts 0, recorded in the row.

    Returns "reset", "absent" (no row: Claim will create one), or the status
    of a row that must not be reset (PROCESSED, or PROCESSING under a lock).
    """
    dynamodb = target.client("dynamodb")
    table = target.output("LedgerTableName")
    now_ms = int(time.time() * 1000)
    try:
        dynamodb.update_item(
            TableName=table,
            Key={"pk": {"S": key}},
            UpdateExpression=(
                "SET #status = :failed, open_status = :failed, attempts = :zero, "
                "redriven_at = :now_ms, updated_at = :now_ms, redrive_message_id = :message "
                "ADD redrives :one REMOVE dead_lettered_at"
            ),
            ConditionExpression="attribute_exists(pk) AND #status = :failed",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":failed": {"S": "FAILED"},
                ":zero": {"N": "0"},
                ":one": {"N": "1"},
                ":now_ms": {"N": str(now_ms)},
                ":message": {"S": message_id},
            },
        )
        return "reset"
    except ClientError as exc:
        if _error_code(exc) != "ConditionalCheckFailedException":
            raise
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True).get(
        "Item"
    )
    return "absent" if item is None else str(item["status"]["S"])


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
        if _error_code(exc) != "ConditionalCheckFailedException":
            raise  # the row changed hands meanwhile: it is no longer ours to restore


def _execution_exists(sfn: Any, arn: str) -> bool:
    try:
        sfn.describe_execution(executionArn=arn)
    except ClientError as exc:
        if _error_code(exc) in ("ExecutionDoesNotExist", "InvalidArn"):
            return False
        raise
    return True


# Queues redrive reads: the template output of each, and whether its message
# bodies are the processor's DLQ shape or the original event (EventBridge's).
QUEUES = {
    "processor": ("DeadLetterQueueUrl", False),
    "ingress": ("IngressDeadLetterQueueUrl", True),
}


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
    try:
        while max_messages is None or len(report.messages) < max_messages:
            wanted = 10 if max_messages is None else max_messages - len(report.messages)
            batch = [m for m in _receive(sqs, url, wanted) if m["MessageId"] not in seen]
            if not batch:
                break
            for message in batch[:wanted]:
                seen.add(message["MessageId"])
                outcome = _redrive_one(target, sqs, sfn, url, processor, message, dry_run, raw)
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
    if (target.local if wait is None else wait) and not dry_run:
        for item in report.messages:
            if item.execution_arn:
                ended = wait_for_execution(target, item.execution_arn)
                item.outcome = ended["status"] + (
                    f" ({ended['error']})" if ended.get("error") else ""
                )
    return report


def _redrive_one(
    target: Target,
    sqs: Any,
    sfn: Any,
    url: str,
    processor: str,
    message: dict[str, Any],
    dry_run: bool,
    raw: bool,
) -> Redriven:
    message_id = message["MessageId"]
    attributes = _attributes(message)
    key = attributes.get("IDEMPOTENCY_KEY")
    try:
        body = json.loads(message.get("Body", ""))
    except json.JSONDecodeError:
        return Redriven(message_id, key, "kept", "the body is not JSON: not a onceflow DLQ message")
    execution_input = body if raw else _original_input(target, body, attributes)
    if execution_input is None:
        return Redriven(message_id, key, "kept", "the original event is no longer available")
    if dry_run:
        reason = attributes.get("ERROR_CODE", "?")
        return Redriven(message_id, key, "would resubmit", f"dead-lettered for {reason}")
    name = f"redrive-{message_id}"[:80]
    arn = f"{processor.replace(':stateMachine:', ':execution:')}:{name}"
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
    try:
        arn = sfn.start_execution(
            stateMachineArn=processor, name=name, input=json.dumps(execution_input)
        )["executionArn"]
    except ClientError as exc:
        if key:
            _undo_second_chance(target, key, message_id)
        return Redriven(message_id, key, "kept", f"the start was refused: {exc}")
    detail = "resubmitted; the row's attempts were reset" if key else "resubmitted"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return Redriven(message_id, key, "resubmitted", detail, execution_arn=arn)


# ---- inspect ----------------------------------------------------------------


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as plain JSON-able Python (whole numbers as int)."""

    def number(value: Any) -> Any:
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else float(value)
        if isinstance(value, list):
            return [number(v) for v in value]
        return value

    return {name: number(_DESERIALIZE.deserialize(value)) for name, value in item.items()}


def _path(sfn: Any, arn: str) -> list[str]:
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [
        e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
    ]


def inspect_key(target: Target, key: str, recent: int | None = None) -> dict[str, Any]:
    """The ledger row of a key and the executions that touched it.

    The row names every execution that claimed the key (``claims``). The
    executions a delivery discarded as duplicates wrote nothing; they are
    found by their output among the processor's recent executions (all of
    them locally, the newest ``recent`` on a deployed stack).
    """
    dynamodb = target.client("dynamodb")
    sfn = target.client("stepfunctions")
    item = dynamodb.get_item(
        TableName=target.output("LedgerTableName"), Key={"pk": {"S": key}}, ConsistentRead=True
    ).get("Item")
    row = _plain(item) if item else None
    claims = list(row.get("claims", [])) if row else []
    touched: dict[str, str] = {arn: "claimed" for arn in claims}
    limit = recent if recent is not None else (None if target.local else 100)
    scanned = 0
    paginator = sfn.get_paginator("list_executions")
    for page in paginator.paginate(stateMachineArn=target.output("ProcessorStateMachineArn")):
        for execution in page["executions"]:
            if limit is not None and scanned >= limit:
                break
            scanned += 1
            if execution["executionArn"] in touched:
                continue
            described = sfn.describe_execution(executionArn=execution["executionArn"])
            output = json.loads(described.get("output") or "null")
            if isinstance(output, dict) and output.get("idempotencyKey") == key:
                touched[execution["executionArn"]] = "discarded as a duplicate"
        else:
            continue
        break
    executions: list[dict[str, Any]] = []
    for arn, role in touched.items():
        try:
            described = sfn.describe_execution(executionArn=arn)
        except ClientError as exc:
            executions.append({"executionArn": arn, "role": role, "status": _error_code(exc)})
            continue
        executions.append(
            {
                "executionArn": arn,
                "role": role,
                "status": described["status"],
                "startDate": str(described.get("startDate", "")),
                "path": _path(sfn, arn),
            }
        )
    executions.sort(key=lambda e: str(e.get("startDate", "")))
    return {
        "idempotencyKey": key,
        "row": row,
        "executions": executions,
        "executions_scanned": scanned,
    }
