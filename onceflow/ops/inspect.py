"""`onceflow inspect`: a key's ledger row and the executions that touched it."""

from __future__ import annotations

import datetime
import json
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
            executions.append({"executionArn": arn, "role": role, "status": error_code(exc)})
            continue
        executions.append(
            {
                "executionArn": arn,
                "role": role,
                "status": described["status"],
                "startDate": _iso(described.get("startDate")),
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
