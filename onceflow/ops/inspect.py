"""`onceflow inspect`: a key's ledger row and the executions that touched it."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import ClientError

from onceflow.ops.target import Target, error_code

_DESERIALIZE = TypeDeserializer()


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as plain JSON-able Python (whole numbers as int)."""

    def number(value: Any) -> Any:
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else float(value)
        if isinstance(value, list):
            return [number(v) for v in value]
        return value

    return {name: number(_DESERIALIZE.deserialize(value)) for name, value in item.items()}


def _iso(moment: Any) -> str:
    """A boto3 time (a datetime) in ISO 8601; "" when there is none."""
    return moment.isoformat() if isinstance(moment, datetime.datetime) else ""


# A claim of the SQS batch mode: the batch execution and the message's index in its
# batch (onceflow/asl/batch_definition.py gives each message that lock owner).
_BATCH_CLAIM = re.compile(r"^(?P<execution>arn:[^#]+)#(?P<index>[0-9]+)$")


_AFTER_THE_MAP = frozenset(
    {"MapStateSucceeded", "MapStateFailed", "MapStateAborted", "MapStateExited"}
)


def _history(sfn: Any, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events += page["events"]
    return events


def _path(events: list[dict[str, Any]], index: int | None = None) -> list[str]:
    """The states an execution entered; for a message of a batch (``index``), those of its
    own Map iteration: the events whose previousEventId chain leads back to that
    iteration's MapIterationStarted."""
    if index is None:
        return [
            e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
        ]
    by_id = {e["id"]: e for e in events}
    iteration: dict[int, int | None] = {}

    def iteration_of(event_id: int) -> int | None:
        trail: list[int] = []
        found: int | None = None
        while event_id in by_id and event_id not in iteration:
            event = by_id[event_id]
            trail.append(event_id)
            if event["type"] == "MapIterationStarted":
                found = int(event["mapIterationStartedEventDetails"]["index"])
                break
            if event["type"] in _AFTER_THE_MAP:
                break  # a state after the Map (Respond): no iteration's
            event_id = int(event.get("previousEventId", 0))
        else:
            found = iteration.get(event_id)
        for seen in trail:
            iteration[seen] = found
        return found

    return [
        e["stateEnteredEventDetails"]["name"]
        for e in events
        if "stateEnteredEventDetails" in e and iteration_of(e["id"]) == index
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
    unlisted: str | None = None
    try:
        pages = paginator.paginate(stateMachineArn=target.output("ProcessorStateMachineArn"))
        for page in pages:
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
    except ClientError as exc:
        # ListExecutions refuses an EXPRESS processor (WorkflowType EXPRESS) with
        # StateMachineTypeNotSupported, on AWS as locally: its executions are in its logs.
        if error_code(exc) != "StateMachineTypeNotSupported":
            raise
        unlisted = "an EXPRESS processor's executions are not listed: see its logs"
    executions: list[dict[str, Any]] = []
    for owner, role in touched.items():
        batch = _BATCH_CLAIM.match(owner)
        arn = batch["execution"] if batch else owner
        index = int(batch["index"]) if batch else None
        found: dict[str, Any] = {"executionArn": arn, "role": role}
        if batch:
            found.update(lockOwner=owner, message=index)
        try:
            described = sfn.describe_execution(executionArn=arn)
            events = _history(sfn, arn)
        except ClientError as exc:
            # DescribeExecution and GetExecutionHistory refuse EXPRESS executions
            # (InvalidArn; the batch workflow is one): its history is in the state
            # machine's log group.
            # (a claim's ARN exists: InvalidArn is AWS's answer for an EXPRESS one)
            express = batch is not None or error_code(exc) == "InvalidArn"
            record = target.express_record(arn) if express else None
            if record is None:
                found["status"] = error_code(exc)
                if batch:
                    found["note"] = "an EXPRESS batch execution: see its logs (onceflow executions)"
                elif express:
                    found["note"] = "an EXPRESS execution: see its logs"
                executions.append(found)
                continue
            described, events = record, list(record.get("events", []))
        found.update(
            status=described["status"],
            startDate=_iso(described.get("startDate")),
            path=_path(events, index),
        )
        executions.append(found)
    executions.sort(key=lambda e: str(e.get("startDate", "")))
    return {
        "idempotencyKey": key,
        "row": row,
        "executions": executions,
        "executions_scanned": scanned,
        **({"note": unlisted} if unlisted else {}),
    }
