"""Benchmarks, measured side by side in one run (not tests: they report, they do not assert).

1. Local engine throughput: executions per second, happy path and duplicate path.
2. What one message does on each path, counted from its execution history, the
   local services' request log and a meter on the local DynamoDB (the write and
   read units of every request, index writes included, from the item images
   before and after it), and the log bytes it would send to CloudWatch.
3. The all-in bill of every mode, in dollars per million messages, beside the
   baseline users would pick instead (Powertools' @idempotent on SQS batches of
   10, run on the same local services), with the ratio to it.
4. The throughput ceiling of every mode: which quota binds first, at what rate.
5. The audit: keys per second, its requests per key, its cost per upload.

Everything the local engine cannot measure (durations on AWS, the sampling
X-Ray applies, prices) is a named, dated constant below with its source.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import inspect
import io
import json
import math
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, TextIO, cast

from PIL import Image

from onceflow.harness.common import TransientError
from onceflow.local.engine import ACCOUNT_ID, PROJECT_ROOT, REGION, ExecutionResult, LocalEngine
from onceflow.local.lambdas import FUNCTION_OUTPUT

# ---- prices ------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """A list price: dollars per unit, where it is published, what was read there."""

    usd: float
    unit: str
    source: str
    check: str  # what the stored copy of the source showed, or "not verified: ..."


# us-east-1 list prices, first tier, no free tier. Looked up on 2026-11-23 in
# stored copies of the pages named; "not verified" where the figure was not
# on an AWS page that could be read (the figure is then from the third-party
# summaries named in docs/benchmarks.md).
PRICES_AS_OF = "2026-11-23, us-east-1 list prices (first tier, free tiers left out)"
PRICES: dict[str, Price] = {
    "sfn_transition": Price(
        0.025 / 1000, "STANDARD state transition (retries included)",
        "https://aws.amazon.com/step-functions/pricing/",
        "read: $0.0250 per 1,000 state transitions, US East (N. Virginia); each retry is charged",
    ),
    "sfn_express_request": Price(
        1.00 / 1_000_000, "EXPRESS request",
        "https://aws.amazon.com/step-functions/pricing/",
        "read: $1.00 per million requests (the page's pricing example)",
    ),
    "sfn_express_gb_second": Price(
        0.06 / 3600, "EXPRESS GB-second (64 MB and 100 ms steps)",
        "https://aws.amazon.com/step-functions/pricing/",
        "read: $0.06000 per GB-hour for the first 1,000 GB-hours; memory "
        "= 50 MB + definition + execution data x Parallel/Map steps, in 64 MB chunks",
    ),
    "lambda_request": Price(
        0.20 / 1_000_000, "Lambda request",
        "https://aws.amazon.com/lambda/pricing/",
        "read: $0.20 per 1 million requests (AWS whitepaper 'How AWS Pricing Works', Lambda)",
    ),
    "lambda_gb_second": Price(
        0.0000166667, "Lambda GB-second, x86, 1 ms steps",
        "https://aws.amazon.com/lambda/pricing/",
        "read: $0.00001667 per GB-second (AWS whitepaper 'How AWS Pricing Works', Lambda)",
    ),
    "dynamodb_wru": Price(
        0.625 / 1_000_000, "DynamoDB on-demand write request unit (1 KB)",
        "https://aws.amazon.com/dynamodb/pricing/on-demand/",
        "not verified: the stored page has no figures; third-party summaries of the "
        "November 2024 reduction give $0.625 per million",
    ),
    "dynamodb_rru": Price(
        0.125 / 1_000_000, "DynamoDB on-demand read request unit (4 KB, strong)",
        "https://aws.amazon.com/dynamodb/pricing/on-demand/",
        "not verified: as above, $0.125 per million",
    ),
    "dynamodb_storage": Price(
        0.25, "DynamoDB Standard storage, GB-month",
        "https://aws.amazon.com/dynamodb/pricing/",
        "read: prices start from $0.25 per GB-month",
    ),
    "dynamodb_pitr": Price(
        0.20, "DynamoDB point-in-time recovery, GB-month",
        "https://aws.amazon.com/dynamodb/pricing/on-demand/",
        "not verified",
    ),
    "sqs_request": Price(
        0.40 / 1_000_000, "SQS standard request (each 64 KB chunk)",
        "https://aws.amazon.com/sqs/pricing/",
        "not verified on the AWS page: third-party summaries give $0.40 per million, 64 KB chunks",
    ),
    "pipes_request": Price(
        0.40 / 1_000_000, "EventBridge Pipes request (each 64 KB chunk, after filtering)",
        "https://aws.amazon.com/eventbridge/pricing/",
        "not verified on the AWS page: third-party summaries give $0.40 per million",
    ),
    "eventbridge_aws_event": Price(
        0.0, "EventBridge event from an AWS service (S3) on the default bus",
        "https://aws.amazon.com/eventbridge/pricing/",
        "not verified on the AWS page: third-party summaries give free",
    ),
    "logs_ingest_gb": Price(
        0.50, "CloudWatch Logs ingestion, GB (standard class; vended logs' first tier)",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "not verified on the AWS page: third-party summaries give $0.50 per GB",
    ),
    "logs_storage_gb_month": Price(
        0.03, "CloudWatch Logs storage, GB-month (compressed)",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "not verified: third-party summaries give $0.03 per GB-month; "
        "that it is charged on gzip-compressed bytes is not verified either",
    ),
    "xray_recorded": Price(
        5.00 / 1_000_000, "X-Ray trace recorded",
        "https://aws.amazon.com/xray/pricing/",
        "read: $5.00 per million traces recorded (German and Chinese copies of the page)",
    ),
    "xray_retrieved": Price(
        0.50 / 1_000_000, "X-Ray trace retrieved or scanned",
        "https://aws.amazon.com/xray/pricing/",
        "read: $0.50 per million traces retrieved or scanned",
    ),
    "s3_list_request": Price(
        0.005 / 1000, "S3 Standard LIST request",
        "https://aws.amazon.com/s3/pricing/",
        "not verified on the AWS page: third-party summaries give $0.005 per 1,000",
    ),
    "s3_put_request": Price(
        0.005 / 1000, "S3 Standard PUT request",
        "https://aws.amazon.com/s3/pricing/",
        "not verified on the AWS page: third-party summaries give $0.005 per 1,000",
    ),
    "s3_get_request": Price(
        0.0004 / 1000, "S3 Standard GET request",
        "https://aws.amazon.com/s3/pricing/",
        "not verified on the AWS page: third-party summaries give $0.0004 per 1,000",
    ),
}  # fmt: skip

# ---- quotas ------------------------------------------------------------------


@dataclass(frozen=True)
class Quota:
    """An AWS default quota a mode consumes per message."""

    name: str
    limit: float
    unit: str  # "per second" or "concurrent"
    source: str
    note: str = ""


QUOTAS: dict[str, Quota] = {
    "standard_start": Quota(
        "Step Functions STANDARD StartExecution refill", 300, "per second",
        "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html",
        "us-east-1, us-west-2, eu-west-1 (bucket 1,300); 150/s elsewhere",
    ),
    "standard_transitions": Quota(
        "Step Functions STANDARD StateTransition refill", 1500, "per second",
        "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html",
        "us-east-1, us-west-2, eu-west-1 (bucket 5,000); 500/s elsewhere; "
        "new accounts start lower",
    ),
    "express_start": Quota(
        "Step Functions EXPRESS StartExecution", 6000, "per second",
        "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html",
        "all regions (bucket 6,000); EXPRESS state transitions are unlimited",
    ),
    "lambda_concurrency": Quota(
        "Lambda concurrent executions (account, default)", 1000, "concurrent",
        "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html",
        "can be raised to tens of thousands; new accounts start lower",
    ),
    "dynamodb_partition": Quota(
        "DynamoDB write units per partition (OpenWork's busiest shard)", 1000, "per second",
        "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html",
        "the index is keyed by status and shard, 16 shards (docs/design.md)",
    ),
    "eventbridge_invocations": Quota(
        "EventBridge rule invocations", 18750, "per second",
        "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html",
        "us-east-1; past it invocations are delayed, not dropped",
    ),
    "pipes_concurrency": Quota(
        "EventBridge Pipes concurrent pipe executions (account)", 1000, "concurrent",
        "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html",
        "1,000 or 3,000 by region (which one us-east-1 has: not verified); the lower one used",
    ),
}  # fmt: skip

# ---- the model: what cannot be measured here -----------------------------------

# The seed workload (README.md, "Why"): 507,706 notifications in
# 104 h, about 117,000 uploads a day; duplicates up to 22,162 s apart.
SEED_MESSAGES_PER_DAY = 117_000
SEED_DUPLICATE_SHARE = 0.0003
SEED_LONGEST_DUPLICATE_GAP_SECONDS = 22_162
DAYS_PER_MONTH = 365.25 / 12

# Step Functions logs, per the Log levels page
# (https://docs.aws.amazon.com/step-functions/latest/dg/cloudwatch-log-level.html):
# ALL logs every event type, ERROR only these.
ERROR_EVENT_TYPES = frozenset({
    "ExecutionAborted", "ExecutionFailed", "ExecutionTimedOut", "FailStateEntered",
    "LambdaFunctionFailed", "LambdaFunctionScheduleFailed", "LambdaFunctionStartFailed",
    "LambdaFunctionTimedOut", "MapIterationAborted", "MapIterationFailed", "MapStateAborted",
    "MapStateFailed", "ParallelStateAborted", "ParallelStateFailed", "TaskFailed",
    "TaskStartFailed", "TaskStateAborted", "TaskSubmitFailed", "TaskTimedOut",
    "WaitStateAborted",
})  # fmt: skip
# Left out of a log event when IncludeExecutionData is false (the template's
# default). Which detail fields AWS counts as execution data: not verified.
EXECUTION_DATA_FIELDS = frozenset({"input", "output", "parameters", "assignedVariables"})
# CloudWatch Logs counts 26 bytes per event on top of its message (the
# PutLogEvents batch size rule); that ingestion is billed the same way: not verified.
LOG_EVENT_OVERHEAD_BYTES = 26
# What the Lambda runtime logs around every invocation (text format, X-Ray
# active), as in https://docs.aws.amazon.com/lambda/latest/dg/python-logging.html.
LAMBDA_PLATFORM_LINES = (
    "START RequestId: 8f507cfc-xmpl-4697-b07a-ac58fc914c95 Version: $LATEST",
    "END RequestId: 8f507cfc-xmpl-4697-b07a-ac58fc914c95",
    "REPORT RequestId: 8f507cfc-xmpl-4697-b07a-ac58fc914c95\tDuration: 205.74 ms\t"
    "Billed Duration: 206 ms\tMemory Size: 1024 MB\tMax Memory Used: 96 MB\t\n"
    "XRAY TraceId: 1-5e34a614-10bdxmplf1fb44f07bc535a1\tSegmentId: 07f5xmpl2d1f6f85\t"
    "Sampled: true\t",
)
# X-Ray's default sampling rule: the first request each second and 5 % of the
# rest (https://docs.aws.amazon.com/xray/latest/devguide/xray-console-sampling.html).
XRAY_RESERVOIR_PER_SECOND = 1.0
XRAY_FIXED_RATE = 0.05
# An upper bound: every recorded trace read once (the console's trace list).
XRAY_RETRIEVED_PER_RECORDED = 1.0
# EXPRESS memory, per the Step Functions pricing page's example.
EXPRESS_BASE_MEMORY_MB = 50.0
EXPRESS_MEMORY_STEP_MB = 64.0
# The baseline's idempotency expiry: covers the seed's longest duplicate gap.
BASELINE_EXPIRY_SECONDS = 22_500
BASELINE_BATCH = 10
# DynamoDB storage: 100 bytes of overhead per item (and per index item).
DYNAMODB_ITEM_OVERHEAD_BYTES = 100


@dataclass(frozen=True)
class Model:
    """Durations on AWS cannot be measured here; these assumptions apply alike.

    The work costs ``work_ms`` wherever it runs, every AWS call ``call_ms`` of
    the caller's time (the handler's for the baseline, the EXPRESS
    execution's for onceflow), every invocation ``lambda_overhead_ms``.
    """

    work_ms: float = 200.0  # the processor's own work (read, downscale, write) at 1024 MB
    call_ms: float = 10.0  # one AWS API round trip
    lambda_overhead_ms: float = 5.0  # a warm invocation's own cost
    lambda_memory_gb: float = 1.0  # ProcessorFunction MemorySize
    audit_memory_gb: float = 0.5  # AuditFunction MemorySize
    retention_days: float = 30.0  # RetentionDays: how long a ledger row is kept
    log_retention_days: float = 30.0  # the log groups' RetentionInDays
    messages_per_day: float = SEED_MESSAGES_PER_DAY
    log_compression: float = 0.15  # stored / ingested log bytes (measured; gzip)
    definition_bytes: int = 57_000  # the processor's definition (measured)
    batch_definition_bytes: int = 75_000  # the batch workflow's definition (measured)
    busiest_shard_share: float = 0.063  # of 100,000 keys (measured)

    @property
    def messages_per_second(self) -> float:
        return self.messages_per_day / 86_400


# ---- DynamoDB units, from item images --------------------------------------------


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: 1 per two significant digits, plus 1."""
    digits = str(Decimal(text).normalize()).lstrip("-").replace(".", "")
    digits = digits.split("E")[0].lstrip("0") or "0"
    return math.ceil(len(digits.rstrip("0") or "0") / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value, by the rules of DynamoDB item sizes
    (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(str(raw).encode("utf-8"))
    if kind == "N":
        return number_size(str(raw))
    if kind == "B":
        return len(raw) if isinstance(raw, bytes) else len(str(raw)) * 3 // 4
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":  # 3 bytes, plus 1 per element
        return 3 + sum(1 + value_size(item) for item in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in raw.items())
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in raw)
    if kind == "NS":
        return sum(number_size(str(n)) for n in raw)
    if kind == "BS":
        return sum(value_size({"B": b}) for b in raw)
    raise ValueError(f"not a DynamoDB attribute value: {kind}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of an item: its attribute names and values (no storage overhead)."""
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(v) for name, v in item.items())


def write_units(size: int) -> int:
    """Write request units of one write: each started KB, at least 1."""
    return max(1, math.ceil(size / 1024))


def read_units(size: int, consistent: bool = False) -> float:
    """Read request units of one read: each started 4 KB, halved when eventually consistent."""
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index: its keys and what it projects."""

    name: str
    keys: tuple[str, ...]
    projection: str  # ALL | INCLUDE | KEYS_ONLY
    attributes: tuple[str, ...] = ()  # NonKeyAttributes of INCLUDE


@dataclass(frozen=True)
class TableSpec:
    name: str
    keys: tuple[str, ...]
    indexes: tuple[IndexSpec, ...] = ()


def index_entry(
    item: Mapping[str, Any] | None, index: IndexSpec, table_keys: Iterable[str]
) -> dict[str, Any] | None:
    """The item's entry in a sparse index, or None when it lacks an index key."""
    if not item or any(k not in item for k in index.keys):
        return None
    if index.projection == "ALL":
        return dict(item)
    wanted = set(table_keys) | set(index.keys)
    if index.projection == "INCLUDE":
        wanted |= set(index.attributes)
    return {k: v for k, v in item.items() if k in wanted}


def index_write_units(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    index: IndexSpec,
    table_keys: Iterable[str],
) -> int:
    """Write units a table write costs in one index, by the rules of
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.ThroughputConsiderations.Writes:
    entering or leaving it is one write, a changed index key two, a changed
    projected attribute one, and nothing when the item is in it neither before nor after."""
    keys = tuple(table_keys)
    old, new = index_entry(before, index, keys), index_entry(after, index, keys)
    if old is None and new is None:
        return 0
    if old is None:
        return write_units(item_size(new))
    if new is None:
        return write_units(item_size(old))
    if any(old[k] != new[k] for k in index.keys):
        return write_units(item_size(old)) + write_units(item_size(new))
    return write_units(item_size(new)) if old != new else 0


def table_write_units(
    operation: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    attempted: Mapping[str, Any] | None,
    failed: bool,
) -> int:
    """Write units of one PutItem, UpdateItem or DeleteItem, by
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html:
    the larger of the item before and after; a failed conditional write is
    charged the larger of the existing item and the one it tried to write
    (a failed update's new image is taken as the existing item)."""
    if failed:
        return write_units(max(item_size(before), item_size(attempted)))
    if operation == "DeleteItem":
        return write_units(item_size(before))
    return write_units(max(item_size(before), item_size(after)))


@dataclass
class Write:
    table: str
    operation: str
    failed: bool
    table_units: int
    index_units: dict[str, int]
    after_bytes: int


@dataclass
class Read:
    table: str
    operation: str
    units: float


# moto's request handlers that read items through its backend's get_item.
_READ_HANDLERS = {"get_item": "GetItem", "batch_get_item": "BatchGetItem"}


class DynamoDBMeter:
    """Counts the write and read units of every request the local DynamoDB serves.

    moto answers ConsumedCapacity with constants; this reads the item before
    and after each write instead (the rules are in the functions above). It
    wraps the methods of the engine's DynamoDB backend while it is entered.
    """

    def __init__(self, engine: LocalEngine) -> None:
        from moto.dynamodb.models import dynamodb_backends

        self.backend = dynamodb_backends[ACCOUNT_ID][REGION]
        self.writes: list[Write] = []
        self.reads: list[Read] = []
        self.specs: dict[str, TableSpec] = {}
        client = engine.client("dynamodb")
        for name in client.list_tables()["TableNames"]:
            table = client.describe_table(TableName=name)["Table"]
            self.specs[name] = TableSpec(
                name,
                tuple(k["AttributeName"] for k in table["KeySchema"]),
                tuple(
                    IndexSpec(
                        g["IndexName"],
                        tuple(k["AttributeName"] for k in g["KeySchema"]),
                        g["Projection"]["ProjectionType"],
                        tuple(g["Projection"].get("NonKeyAttributes", ())),
                    )
                    for g in table.get("GlobalSecondaryIndexes", [])
                ),
            )
        self._saved: dict[str, tuple[bool, Any]] = {}

    def current(self, table_name: str, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The item under this key as stored now (typed JSON), or None."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = self.backend.get_table(table_name)
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = table.get_item(hash_key, range_key)
        return None if item is None else copy.deepcopy(item.to_json()["Attributes"])

    def _write(self, operation: str, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def metered(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind(*args, **kwargs).arguments
            name = arguments["table_name"]
            attempted = arguments.get("item_attrs")
            key = attempted if attempted is not None else arguments["key"]
            before = self.current(name, key)
            try:
                result = original(*args, **kwargs)
            except Exception as exc:
                if "ConditionalCheckFailed" in type(exc).__name__:
                    self.writes.append(Write(
                        name, operation, True,
                        table_write_units(operation, before, None, attempted, True),
                        {}, item_size(before),
                    ))  # fmt: skip
                raise
            after = self.current(name, key)
            spec = self.specs.get(name, TableSpec(name, ()))
            self.writes.append(Write(
                name, operation, False,
                table_write_units(operation, before, after, attempted, False),
                {i.name: index_write_units(before, after, i, spec.keys) for i in spec.indexes},
                item_size(after),
            ))  # fmt: skip
            return result

        return metered

    def _get(self, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def metered(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind(*args, **kwargs).arguments
            result = original(*args, **kwargs)
            # moto's PutItem and UpdateItem read the old item this way too;
            # only its GetItem and BatchGetItem handlers are reads a client made.
            caller = sys._getframe(1)
            if caller.f_code.co_name not in _READ_HANDLERS:
                return result
            table = arguments["table_name"]
            body = getattr(caller.f_locals.get("self"), "body", None) or {}
            request = body.get("RequestItems", {}).get(table, body)
            # Units count the whole item, whatever a projection returns; a
            # missing item costs the minimum.
            full = self.current(table, arguments["keys"])
            units = read_units(item_size(full), bool(request.get("ConsistentRead", False)))
            self.reads.append(Read(table, _READ_HANDLERS[caller.f_code.co_name], units))
            return result

        return metered

    def _query(self, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def metered(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind(*args, **kwargs).arguments
            result = original(*args, **kwargs)
            size = sum(item_size(item.to_json()["Attributes"]) for item in result[0])
            consistent = bool(arguments.get("consistent_read", False))
            self.reads.append(Read(arguments["table_name"], "Query", read_units(size, consistent)))
            return result

        return metered

    def __enter__(self) -> DynamoDBMeter:
        wrappers = {
            "put_item": self._write("PutItem", self.backend.put_item),
            "update_item": self._write("UpdateItem", self.backend.update_item),
            "delete_item": self._write("DeleteItem", self.backend.delete_item),
            "get_item": self._get(self.backend.get_item),
            "query": self._query(self.backend.query),
        }
        for name, wrapper in wrappers.items():
            self._saved[name] = (name in vars(self.backend), vars(self.backend).get(name))
            setattr(self.backend, name, wrapper)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, (had, value) in self._saved.items():
            if had:
                setattr(self.backend, name, value)
            else:
                delattr(self.backend, name)
        self._saved.clear()

    def mark(self) -> tuple[int, int]:
        return len(self.writes), len(self.reads)

    def since(self, mark: tuple[int, int]) -> tuple[list[Write], list[Read]]:
        return self.writes[mark[0] :], self.reads[mark[1] :]


# ---- logs --------------------------------------------------------------------


def _express_arn(arn: str) -> str:
    """The ARN an EXPRESS execution carries in its logs (longer than a STANDARD one)."""
    return arn.replace(":execution:", ":express:") + ":" + "0" * 8 + "-0000-0000-0000-" + "0" * 12


def log_records(
    events: Iterable[Mapping[str, Any]],
    execution_arn: str,
    level: str,
    include_execution_data: bool = False,
) -> list[str]:
    """The CloudWatch Logs events a state machine at ``level`` writes for this history."""
    records = []
    for event in events:
        if level == "ERROR" and event["type"] not in ERROR_EVENT_TYPES:
            continue
        details: dict[str, Any] = next(
            (dict(v) for k, v in event.items() if k.endswith("EventDetails")), {}
        )
        if not include_execution_data:
            details = {k: v for k, v in details.items() if k not in EXECUTION_DATA_FIELDS}
        stamp = event.get("timestamp")
        millis = int(stamp.timestamp() * 1000) if isinstance(stamp, datetime) else 0
        record = {
            "id": str(event["id"]),
            "type": event["type"],
            "details": details,
            "previous_event_id": str(event.get("previousEventId", 0)),
            "event_timestamp": str(millis),
            "execution_arn": execution_arn,
            "redrive_count": "0",
        }
        records.append(json.dumps(record, separators=(",", ":"), ensure_ascii=False))
    return records


def log_bytes(lines: Iterable[str]) -> int:
    """Ingested bytes of these log events: message bytes plus each event's overhead."""
    return sum(len(line.encode("utf-8")) + LOG_EVENT_OVERHEAD_BYTES for line in lines)


def compression_ratio(lines: list[str]) -> float:
    """Stored / ingested bytes, gzip level 6 over these log events."""
    raw = "\n".join(lines).encode("utf-8")
    return len(gzip.compress(raw, compresslevel=6)) / len(raw) if raw else 1.0


LAMBDA_PLATFORM_BYTES = log_bytes(LAMBDA_PLATFORM_LINES)


# ---- usage and the bill --------------------------------------------------------


@dataclass
class Usage:
    """What one message (or one audit day) consumes, in the units AWS bills."""

    transitions: float = 0.0
    express_requests: float = 0.0
    express_gb_seconds: float = 0.0
    lambda_requests: float = 0.0
    lambda_gb_seconds: float = 0.0
    table_wru: float = 0.0
    index_wru: float = 0.0
    rru: float = 0.0
    sqs_requests: float = 0.0
    pipe_requests: float = 0.0
    eventbridge_events: float = 0.0  # S3's, on the default bus
    sfn_log_bytes: float = 0.0
    lambda_log_bytes: float = 0.0
    log_stored_byte_months: float = 0.0
    xray_traces: float = 0.0
    stored_byte_months: float = 0.0  # DynamoDB, items and index entries with overhead
    backup_byte_months: float = 0.0  # point-in-time recovery
    s3_list_requests: float = 0.0
    s3_put_requests: float = 0.0
    s3_get_requests: float = 0.0
    audit_usd: float = 0.0

    def scaled(self, factor: float) -> Usage:
        return Usage(**{f.name: getattr(self, f.name) * factor for f in dataclasses.fields(self)})

    def plus(self, other: Usage) -> Usage:
        return Usage(
            **{
                f.name: getattr(self, f.name) + getattr(other, f.name)
                for f in dataclasses.fields(self)
            }
        )

    def minus(self, other: Usage) -> Usage:
        return self.plus(other.scaled(-1))


GB = 1024**3

# The bill's lines, each a function of the usage.
COMPONENTS: dict[str, Callable[[Usage], float]] = {
    "Step Functions transitions": lambda u: u.transitions * PRICES["sfn_transition"].usd,
    "Step Functions EXPRESS requests": lambda u: (
        u.express_requests * PRICES["sfn_express_request"].usd
    ),
    "Step Functions EXPRESS duration": lambda u: (
        u.express_gb_seconds * PRICES["sfn_express_gb_second"].usd
    ),
    "Lambda requests": lambda u: u.lambda_requests * PRICES["lambda_request"].usd,
    "Lambda duration": lambda u: u.lambda_gb_seconds * PRICES["lambda_gb_second"].usd,
    "DynamoDB writes, table": lambda u: u.table_wru * PRICES["dynamodb_wru"].usd,
    "DynamoDB writes, indexes": lambda u: u.index_wru * PRICES["dynamodb_wru"].usd,
    "DynamoDB reads": lambda u: u.rru * PRICES["dynamodb_rru"].usd,
    "SQS requests": lambda u: u.sqs_requests * PRICES["sqs_request"].usd,
    "EventBridge Pipes requests": lambda u: u.pipe_requests * PRICES["pipes_request"].usd,
    "EventBridge events (from S3)": lambda u: (
        u.eventbridge_events * PRICES["eventbridge_aws_event"].usd
    ),
    "CloudWatch Logs, state machine": lambda u: u.sfn_log_bytes / GB * PRICES["logs_ingest_gb"].usd,
    "CloudWatch Logs, Lambda": lambda u: u.lambda_log_bytes / GB * PRICES["logs_ingest_gb"].usd,
    "CloudWatch Logs storage": lambda u: (
        u.log_stored_byte_months / GB * PRICES["logs_storage_gb_month"].usd
    ),
    "X-Ray": lambda u: (
        u.xray_traces
        * (PRICES["xray_recorded"].usd + XRAY_RETRIEVED_PER_RECORDED * PRICES["xray_retrieved"].usd)
    ),
    "DynamoDB storage": lambda u: u.stored_byte_months / GB * PRICES["dynamodb_storage"].usd,
    "DynamoDB point-in-time recovery": lambda u: (
        u.backup_byte_months / GB * PRICES["dynamodb_pitr"].usd
    ),
    "S3 requests (audit)": lambda u: (
        u.s3_list_requests * PRICES["s3_list_request"].usd
        + u.s3_put_requests * PRICES["s3_put_request"].usd
        + u.s3_get_requests * PRICES["s3_get_request"].usd
    ),
    "Audit, amortised": lambda u: u.audit_usd,
}


def bill(usage: Usage) -> dict[str, float]:
    """Dollars, line by line (every line, zeros included)."""
    return {name: price(usage) for name, price in COMPONENTS.items()}


def total(lines: Mapping[str, float]) -> float:
    return sum(lines.values())


def xray_sampled_share(requests_per_second: float) -> float:
    """The share of entry requests the default sampling rule records."""
    if requests_per_second <= 0:
        return 1.0
    sampled = min(requests_per_second, XRAY_RESERVOIR_PER_SECOND) + XRAY_FIXED_RATE * max(
        requests_per_second - XRAY_RESERVOIR_PER_SECOND, 0.0
    )
    return sampled / requests_per_second


def express_billed_seconds(seconds: float) -> float:
    """EXPRESS duration, rounded up to the next 100 ms."""
    return max(1, math.ceil(round(seconds * 10, 6))) / 10


def express_billed_gb(definition_bytes: int, data_bytes: int, parallel_steps: int) -> float:
    """EXPRESS memory in 64 MB chunks: 50 MB + definition + data x Parallel or Map steps."""
    megabytes = EXPRESS_BASE_MEMORY_MB + (
        definition_bytes + data_bytes * max(1, parallel_steps)
    ) / (1024 * 1024)
    return math.ceil(megabytes / EXPRESS_MEMORY_STEP_MB) * EXPRESS_MEMORY_STEP_MB / 1024


def lambda_gb_seconds(milliseconds: float, memory_gb: float) -> float:
    """One invocation, billed in 1 ms steps."""
    return math.ceil(round(milliseconds, 6)) / 1000 * memory_gb


def months(days: float) -> float:
    return days / DAYS_PER_MONTH


# ---- what one message did, measured --------------------------------------------


@dataclass
class PathMeasure:
    """One message down one path, as counted locally."""

    path: str
    source: str  # s3 | sqs
    status: str  # the execution's, with its error when it failed
    states: list[str]
    transitions: int
    table_wru: int
    index_wru: dict[str, int]
    conditional_failures: int
    writes: int
    rru: float
    lambda_invocations: int
    integration_calls: int
    sqs_requests: dict[str, int]
    wait_seconds: float
    sfn_log_events: dict[str, list[str]]  # level -> records (STANDARD ARN)
    express_log_events: dict[str, list[str]]  # level -> records (EXPRESS ARN)
    function_log_lines: list[str]
    data_bytes: int
    parallel_steps: int
    row_bytes: int  # the ledger row it leaves, as stored (no overhead)
    new_row: bool = True  # False when it wrote none (a duplicate): nothing more is stored

    def summary(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source": self.source,
            "status": self.status,
            "states": self.states,
            "transitions": self.transitions,
            "table_wru": self.table_wru,
            "index_wru": self.index_wru,
            "writes": self.writes,
            "conditional_failures": self.conditional_failures,
            "rru": self.rru,
            "lambda_invocations": self.lambda_invocations,
            "sqs_requests": self.sqs_requests,
            "sfn_log_bytes": {lvl: log_bytes(r) for lvl, r in self.sfn_log_events.items()},
            "function_log_bytes": log_bytes(self.function_log_lines),
            "row_bytes": self.row_bytes,
            "new_row": self.new_row,
        }


@dataclass(frozen=True)
class Mode:
    name: str
    workflow: str  # STANDARD | EXPRESS | BASELINE
    source: str  # s3 | sqs | sqs-batch (the measured paths it is priced from)
    built: bool = True
    note: str = ""
    batch: int = 1  # messages per execution (the measures are per execution)


MODES: tuple[Mode, ...] = (
    Mode("STANDARD, S3 via EventBridge", "STANDARD", "s3"),
    Mode("EXPRESS, S3 via EventBridge", "EXPRESS", "s3"),
    Mode("STANDARD, SQS via pipe", "STANDARD", "sqs"),
    Mode("EXPRESS, SQS via pipe", "EXPRESS", "sqs"),
    Mode("EXPRESS batch of 10, SQS via pipe (SqsBatchMode)", "EXPRESS", "sqs-batch", batch=10),
)  # fmt: skip
BATCH_SIZE = 10
BASELINE = Mode("Powertools @idempotent, SQS batches of 10", "BASELINE", "sqs")


def message_usage(
    mode: Mode, measure: PathMeasure, level: str, model: Model, audit_usd: float
) -> Usage:
    """One message of this path in this onceflow mode, at this state machine log level.

    A batch mode's measure is one execution over ``mode.batch`` messages: its
    usage is shared among them, but for what each message pays alone (its row,
    its pipe event, the audit). Its messages run side by side (an inline Map), so
    the execution lasts about one message's chain of calls.
    """
    express = mode.workflow == "EXPRESS"
    share = 1 / mode.batch
    lambda_ms = model.work_ms + model.lambda_overhead_ms
    stored = (measure.row_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES) * measure.new_row
    records = (measure.express_log_events if express else measure.sfn_log_events)[level]
    sfn_bytes = log_bytes(records)
    function_bytes = (
        log_bytes(measure.function_log_lines) + measure.lambda_invocations * LAMBDA_PLATFORM_BYTES
    )
    usage = Usage(
        lambda_requests=measure.lambda_invocations,
        lambda_gb_seconds=measure.lambda_invocations
        * lambda_gb_seconds(lambda_ms, model.lambda_memory_gb),
        table_wru=measure.table_wru,
        index_wru=sum(measure.index_wru.values()),
        rru=measure.rru,
        sqs_requests=sum(measure.sqs_requests.values()),
        pipe_requests=1.0 if mode.source != "s3" else 0.0,
        eventbridge_events=1.0 if mode.source == "s3" else 0.0,
        sfn_log_bytes=sfn_bytes,
        lambda_log_bytes=function_bytes,
        log_stored_byte_months=(sfn_bytes + function_bytes)
        * model.log_compression
        * months(model.log_retention_days),
        xray_traces=xray_sampled_share(model.messages_per_second),
        stored_byte_months=stored * months(model.retention_days),
        backup_byte_months=stored * months(model.retention_days),
        audit_usd=audit_usd,
    )
    if express:
        seconds = (
            measure.integration_calls * share * model.call_ms / 1000
            + measure.lambda_invocations * share * lambda_ms / 1000
            + measure.wait_seconds
        )
        definition = model.batch_definition_bytes if mode.batch > 1 else model.definition_bytes
        usage.express_requests = 1.0
        usage.express_gb_seconds = express_billed_seconds(seconds) * express_billed_gb(
            definition, measure.data_bytes, measure.parallel_steps
        )
    else:
        usage.transitions = measure.transitions
    if mode.batch == 1:
        return usage
    shared = usage.scaled(share)
    # Each message's own: its row (row_bytes is one row's), its event through the
    # pipe (billed per event: not verified whether a batch bills once), the audit.
    shared.stored_byte_months = usage.stored_byte_months
    shared.backup_byte_months = usage.backup_byte_months
    shared.pipe_requests = usage.pipe_requests
    shared.audit_usd = usage.audit_usd
    return shared


@dataclass
class BaselineMeasure:
    """One message through Powertools' @idempotent in a batch, as counted locally."""

    path: str
    table_wru: float
    rru: float
    dynamodb_requests: float  # the handler's round trips, per message
    function_log_lines_per_message: list[str]
    function_log_lines_per_batch: list[str]
    row_bytes: int
    did_work: bool
    new_row: bool = True

    def summary(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "table_wru": self.table_wru,
            "rru": self.rru,
            "dynamodb_requests": self.dynamodb_requests,
            "function_log_bytes_per_message": log_bytes(self.function_log_lines_per_message),
            "function_log_bytes_per_batch": log_bytes(self.function_log_lines_per_batch),
            "row_bytes": self.row_bytes,
            "lambda_invocations": 1 / BASELINE_BATCH,
        }


def baseline_invocation_ms(measure: BaselineMeasure, model: Model, batch: int) -> float:
    work = model.work_ms if measure.did_work else 0.0
    return batch * (work + measure.dynamodb_requests * model.call_ms) + model.lambda_overhead_ms


def baseline_usage(measure: BaselineMeasure, model: Model, batch: int = BASELINE_BATCH) -> Usage:
    """One message through the baseline: S3 -> SQS -> Lambda (batches) -> @idempotent.

    SQS: S3 sends each notification (1 request), the event source mapping
    receives and deletes a batch (1 request each per batch of up to 64 KB).
    The idempotency rows live BASELINE_EXPIRY_SECONDS (TTL lag not priced).
    """
    function_bytes = (
        log_bytes(measure.function_log_lines_per_message)
        + (log_bytes(measure.function_log_lines_per_batch) + LAMBDA_PLATFORM_BYTES) / batch
    )
    kept_days = BASELINE_EXPIRY_SECONDS / 86_400
    stored = (
        (measure.row_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES) * measure.new_row * months(kept_days)
    )
    return Usage(
        lambda_requests=1 / batch,
        lambda_gb_seconds=lambda_gb_seconds(
            baseline_invocation_ms(measure, model, batch), model.lambda_memory_gb
        )
        / batch,
        table_wru=measure.table_wru,
        rru=measure.rru,
        sqs_requests=1 + 2 / batch,
        lambda_log_bytes=function_bytes,
        log_stored_byte_months=function_bytes
        * model.log_compression
        * months(model.log_retention_days),
        # A trace per invocation, sampled at the invocation rate.
        xray_traces=xray_sampled_share(model.messages_per_second / batch) / batch,
        stored_byte_months=stored,
        backup_byte_months=stored,
    )


# ---- ceilings ------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What one message takes from each quota."""

    standard_starts: float = 0.0
    standard_transitions: float = 0.0
    express_starts: float = 0.0
    lambda_seconds: float = 0.0  # concurrency-seconds
    hot_partition_wru: float = 0.0  # on the busiest OpenWork shard
    eventbridge_invocations: float = 0.0
    pipe_seconds: float = 0.0  # concurrency-seconds of pipe executions


_LOAD_QUOTA = {
    "standard_starts": "standard_start",
    "standard_transitions": "standard_transitions",
    "express_starts": "express_start",
    "lambda_seconds": "lambda_concurrency",
    "hot_partition_wru": "dynamodb_partition",
    "eventbridge_invocations": "eventbridge_invocations",
    "pipe_seconds": "pipes_concurrency",
}


def ceilings(load: Load) -> list[dict[str, Any]]:
    """Every quota the load touches: its messages per second, lowest first."""
    rows = []
    for name, quota_key in _LOAD_QUOTA.items():
        per_message = getattr(load, name)
        if per_message <= 0:
            continue
        quota = QUOTAS[quota_key]
        rows.append({
            "quota": quota.name,
            "limit": quota.limit,
            "unit": quota.unit,
            "per_message": per_message,
            "messages_per_second": quota.limit / per_message,
            "source": quota.source,
            "note": quota.note,
        })  # fmt: skip
    return sorted(rows, key=lambda r: r["messages_per_second"])


def mode_load(mode: Mode, measure: PathMeasure, model: Model) -> Load:
    lambda_ms = model.work_ms + model.lambda_overhead_ms
    share = 1 / mode.batch
    open_work = measure.index_wru.get("OpenWork", 0) * share
    if mode.batch > 1:
        # REQUEST_RESPONSE: a pipe execution lasts the whole synchronous run, about
        # one message's chain of calls (the batch's messages run side by side).
        pipe = (
            (
                measure.integration_calls * share * model.call_ms
                + measure.lambda_invocations * share * lambda_ms
            )
            / 1000
            * share
        )
    else:
        # FIRE_AND_FORGET: a pipe execution lasts one StartExecution call.
        pipe = model.call_ms / 1000 if mode.source == "sqs" else 0.0
    return Load(
        standard_starts=1.0 if mode.workflow == "STANDARD" else 0.0,
        standard_transitions=measure.transitions if mode.workflow == "STANDARD" else 0.0,
        express_starts=share if mode.workflow == "EXPRESS" else 0.0,
        lambda_seconds=measure.lambda_invocations * share * lambda_ms / 1000,
        hot_partition_wru=open_work * model.busiest_shard_share,
        eventbridge_invocations=1.0 if mode.source == "s3" else 0.0,
        pipe_seconds=pipe,
    )


def baseline_load(measure: BaselineMeasure, model: Model, batch: int = BASELINE_BATCH) -> Load:
    # Its rows are keyed by message: no partition takes more than one key's writes.
    return Load(lambda_seconds=baseline_invocation_ms(measure, model, batch) / 1000 / batch)


def busiest_shard_share(keys: Iterable[str]) -> float:
    """The share of keys the busiest OpenWork shard takes (first hex digit of MD5)."""
    import hashlib

    # The shard as functions/service/logic/open_work.py and the ASL's $hash derive it.
    counts = Counter(
        hashlib.md5(k.encode("utf-8", "surrogatepass")).hexdigest()[0]  # noqa: S324
        for k in keys
    )
    return max(counts.values()) / sum(counts.values())


# ---- local measurements --------------------------------------------------------


def _image(rng: random.Random) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (rng.randint(32, 96), rng.randint(32, 96)), (90, 30, 160)).save(
        out, format="PNG"
    )
    return out.getvalue()


def s3_event(bucket: str, key: str, version: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"bench-{version}",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-22T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "bucket": {"name": bucket},
            "object": {"key": key, "version-id": version, "size": 1, "sequencer": "00A"},
        },
    }


def _sample(name: str) -> Any:
    return json.loads((PROJECT_ROOT / "events" / name).read_text(encoding="utf-8"))


def _sample_s3_event(engine: LocalEngine, key: str, body: bytes) -> dict[str, Any]:
    """events/s3-object-created.json (etag, size, sequencer as S3 sends them), uploaded."""
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    put = s3.put_object(Bucket=bucket, Key=key, Body=body)
    event: dict[str, Any] = copy.deepcopy(_sample("s3-object-created.json"))
    event["id"] = str(uuid.uuid4())
    event["detail"]["bucket"]["name"] = bucket
    event["resources"] = [f"arn:aws:s3:::{bucket}"]
    event["detail"]["object"].update(
        key=key, size=len(body), etag=put["ETag"].strip('"'), **{"version-id": put["VersionId"]}
    )
    return event


def _requests(engine: LocalEngine, since: int) -> Counter[str]:
    snapshot = engine.state.requests.snapshot()[since:]
    return Counter(f"{r.service}:{r.operation}" for r in snapshot)


def _transitions(result: ExecutionResult) -> int:
    """States entered plus Task retries: what Step Functions bills as transitions."""
    entered = len(result.states_entered)
    scheduled = Counter(
        e.get("previousEventId") for e in result.events if e["type"] == "TaskScheduled"
    )
    tasks = sum(1 for e in result.events if e["type"] == "TaskStateEntered")
    return entered + max(sum(scheduled.values()) - tasks, 0)


def _data_bytes(result: ExecutionResult) -> int:
    """The largest state input or output of the execution (its data size)."""
    sizes = [0]
    for event in result.events:
        for key, details in event.items():
            if key.endswith("EventDetails") and isinstance(details, dict):
                for field_name in ("input", "output"):
                    if isinstance(details.get(field_name), str):
                        sizes.append(len(details[field_name].encode("utf-8")))
    return max(sizes)


# The local pipe pump asks for the queue's URL; a pipe knows its queue.
_NOT_BILLED_SQS = {"GetQueueUrl"}


class _FunctionLog(io.StringIO):
    """The functions' log: what each path writes is read off its position."""


@contextmanager
def _function_log_level(level: str) -> Iterator[None]:
    """The bundled functions' Logger at ``level`` (the template's), for the measurement."""
    module = sys.modules.get("service.observability")
    if module is None:
        yield
        return
    logger = module.logger
    previous = logger.log_level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _measure(
    engine: LocalEngine,
    meter: DynamoDBMeter,
    log: io.StringIO,
    path: str,
    source: str,
    run: Callable[[], ExecutionResult],
    row_key: str | None = None,
    extra_sqs: Mapping[str, int] | None = None,
) -> tuple[PathMeasure, ExecutionResult]:
    since = len(engine.state.requests.snapshot())
    invocations = len(engine.runtime.invocations)
    mark = meter.mark()
    log_start = log.tell()
    result = run()
    function_lines = _lines(log.getvalue()[log_start:])
    writes, reads = meter.since(mark)
    requests = _requests(engine, since)
    retries = sum(e["type"] == "TaskScheduled" for e in result.events) - sum(
        e["type"] == "TaskStateEntered" for e in result.events
    )
    # Full jitter: a retry waits half its interval on average (the first retry's).
    interval = float(engine.stack.parameters.get("RetryIntervalSeconds", "0"))
    sqs = Counter(
        {
            op.split(":")[1]: n
            for op, n in requests.items()
            if op.startswith("sqs:") and op.split(":")[1] not in _NOT_BILLED_SQS
        }
    )
    sqs.update(extra_sqs or {})
    ledger = engine.ref("LedgerTable")
    ledger_writes = [w for w in writes if w.table == ledger]
    index_units: Counter[str] = Counter()
    for w in ledger_writes:
        index_units.update(w.index_units)
    lambdas = len(engine.runtime.invocations) - invocations
    # Every call the execution makes but the Lambda invocations, retries included.
    calls = sum(
        e["type"] == "TaskScheduled"
        and e["taskScheduledEventDetails"].get("resourceType") != "lambda"
        for e in result.events
    )
    row = meter.current(ledger, {"pk": {"S": row_key}}) if row_key else None
    measure = PathMeasure(
        path=path,
        source=source,
        status=result.status + (f" ({result.error})" if result.error else ""),
        states=result.states_entered,
        transitions=_transitions(result),
        table_wru=sum(w.table_units for w in ledger_writes),
        index_wru={k: v for k, v in sorted(index_units.items())},
        conditional_failures=sum(w.failed for w in ledger_writes),
        writes=len(ledger_writes),
        rru=sum(r.units for r in reads if r.table == ledger),
        lambda_invocations=lambdas,
        integration_calls=calls,
        sqs_requests=dict(sorted(sqs.items())),
        wait_seconds=max(retries, 0) * interval / 2,
        sfn_log_events={
            level: log_records(result.events, result.arn, level) for level in ("ALL", "ERROR")
        },
        express_log_events={
            level: log_records(result.events, _express_arn(result.arn), level)
            for level in ("ALL", "ERROR")
        },
        function_log_lines=function_lines,
        data_bytes=_data_bytes(result),
        parallel_steps=sum(
            e["type"] in ("ParallelStateEntered", "MapStateEntered") for e in result.events
        ),
        row_bytes=item_size(row),
        new_row=any(w.operation == "PutItem" and not w.failed for w in ledger_writes),
    )
    return measure, result


def cost_model(engine: LocalEngine, meter: DynamoDBMeter, log: io.StringIO) -> dict[str, Any]:
    """One message down each path, S3 and SQS; counts from histories, requests and the meter."""
    rng = random.Random(1)
    machine = "ProcessorStateMachine"
    bucket = engine.ref("IngestBucket")
    measures: list[PathMeasure] = []

    def key_of(event: Mapping[str, Any]) -> str:
        obj = event["detail"]["object"]
        return f"s3://{bucket}/{obj['key']}#{obj['version-id']}"

    happy = _sample_s3_event(
        engine, f"uploads/{uuid.UUID(int=rng.getrandbits(128))}.png", _image(rng)
    )
    retry = _sample_s3_event(engine, "uploads/retry.png", _image(rng))
    poison = _sample_s3_event(engine, "uploads/poison.png", b"not an image")
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("ProcessorFunction")])
    failed_once: set[str] = set()

    def flaky(event: dict[str, Any], context: Any) -> Any:
        key = event["workItem"]["key"]
        if key not in failed_once:
            failed_once.add(key)
            raise TransientError("injected transient failure")
        return real(event, context)

    for path in ("happy", "duplicate"):  # the same event twice
        measures.append(_measure(
            engine, meter, log, path, "s3", lambda: engine.execute(machine, happy), key_of(happy)
        )[0])  # fmt: skip
    with engine.override_function("ProcessorFunction", flaky):
        measures.append(_measure(
            engine, meter, log, "retry", "s3", lambda: engine.execute(machine, retry), key_of(retry)
        )[0])  # fmt: skip
    measures.append(_measure(
        engine, meter, log, "dead-letter", "s3", lambda: engine.execute(machine, poison),
        key_of(poison),
    )[0])  # fmt: skip

    # The SQS source: a producer sends, the pipe receives (BatchSize 1),
    # starts the execution and deletes the message.
    sqs = engine.client("sqs")
    queue = engine.ref("SourceQueue")
    body = json.loads(_sample("sqs-business-message.json")[0]["body"])

    def through_pipe() -> ExecutionResult:
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))
        return engine.wait(engine.pump_pipes(limit=1)[0])

    sqs_happy, delivered = _measure(engine, meter, log, "happy", "sqs", through_pipe)
    message_key = str(delivered.output["idempotencyKey"])
    ledger = engine.ref("LedgerTable")
    sqs_happy.row_bytes = item_size(meter.current(ledger, {"pk": {"S": message_key}}))
    measures.append(sqs_happy)
    # A redelivery of the same message: the pipe receives and deletes it again.
    redelivery = {op: n for op, n in sqs_happy.sqs_requests.items() if op in REDELIVERY_REQUESTS}
    records = delivered.input
    measures.append(_measure(
        engine, meter, log, "duplicate", "sqs", lambda: engine.execute(machine, records),
        message_key, extra_sqs=redelivery,
    )[0])  # fmt: skip

    # The compression of state machine logs, over many executions' events.
    sample: list[str] = []
    for n in range(10):
        event = _sample_s3_event(engine, f"uploads/sample-{n}.png", _image(rng))
        result = engine.execute(machine, event)
        sample += log_records(result.events, _express_arn(result.arn), "ALL")
    definition = engine.state_machine_definition(machine)[0]
    return {
        "measures": measures,
        "log_compression": compression_ratio(sample),
        "definition_bytes": len(definition.encode("utf-8")),
    }


# What a redelivered message costs the pipe again (the engine's pipe deletes a batch
# with one DeleteMessageBatch: which call AWS's makes is not verified).
REDELIVERY_REQUESTS = ("ReceiveMessage", "DeleteMessage", "DeleteMessageBatch")

# The batch mode's stack: SqsBatchMode needs the EXPRESS limits (the template's rule).
BATCH_PARAMETERS = {
    "SqsSource": "create",
    "SqsBatchMode": "true",
    "SqsBatchSize": str(BATCH_SIZE),
    "RetryMaxAttempts": "1",
    "ProcessorTimeoutSeconds": "40",
    "AuditRecentCutoffHours": "0",
}


def batch_cost_model(engine: LocalEngine, meter: DynamoDBMeter, log: io.StringIO) -> dict[str, Any]:
    """One batch of BATCH_SIZE new messages through the pipe, then the same batch again.

    Measured per execution; message_usage shares it among the batch's messages.
    """
    sqs = engine.client("sqs")
    queue = engine.ref("SourceQueue")
    machine = "BatchProcessorStateMachine"
    template = json.loads(_sample("sqs-business-message.json")[0]["body"])
    arns: list[str] = []

    def through_pipe() -> ExecutionResult:
        for n in range(BATCH_SIZE):
            body = {**template, "orderId": f"batch-{n}-{uuid.uuid4()}"}
            sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))
        arns[:] = engine.pump_pipes(limit=1)
        return engine.wait(arns[0])

    happy, delivered = _measure(engine, meter, log, "happy", "sqs-batch", through_pipe)
    if len(delivered.input) != BATCH_SIZE:
        raise RuntimeError(f"the pipe handed the batch workflow {len(delivered.input)} messages")
    ledger = engine.ref("LedgerTable")
    keys = [str(item.get("idempotencyKey")) for item in _row_keys(engine, delivered)]
    happy.row_bytes = max(item_size(meter.current(ledger, {"pk": {"S": k}})) for k in keys)
    # The same batch delivered again: the pipe receives and deletes it again.
    redelivery = {op: n for op, n in happy.sqs_requests.items() if op in REDELIVERY_REQUESTS}
    records = delivered.input
    duplicate, _ = _measure(
        engine, meter, log, "duplicate", "sqs-batch", lambda: engine.execute(machine, records),
        extra_sqs=redelivery,
    )  # fmt: skip
    definition = engine.state_machine_definition(machine)[0]
    return {"measures": [happy, duplicate], "definition_bytes": len(definition.encode("utf-8"))}


def _row_keys(engine: LocalEngine, result: ExecutionResult) -> list[dict[str, Any]]:
    """The ledger rows a batch execution's messages claimed (by their lock owner)."""
    rows = engine.client("dynamodb").scan(TableName=engine.ref("LedgerTable"))["Items"]
    owned = [r for r in rows if r.get("lock_owner", {}).get("S", "").startswith(result.arn + "#")]
    return [{"idempotencyKey": r["pk"]["S"]} for r in owned]


def _events(engine: LocalEngine, prefix: str, messages: int, rng: random.Random) -> list[Any]:
    """Upload `messages` new images; their Object Created events."""
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    events = []
    for n in range(messages):
        key = f"{prefix}/{n:05d}.png"
        version = s3.put_object(Bucket=bucket, Key=key, Body=_image(rng))["VersionId"]
        events.append(s3_event(bucket, key, version))
    return events


def cpu_steal() -> float | None:
    """Seconds of CPU time the hypervisor has given to other guests (Linux), or None.

    On a shared VM a busy neighbour shows here; a Python process of many
    threads, handing the GIL back and forth, slows down far more than its
    share of the stolen time.
    """
    try:
        fields = Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()
    except OSError:
        return None
    if fields[0] != "cpu" or len(fields) < 9:
        return None
    return int(fields[8]) / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def throughput(engine: LocalEngine, events: list[Any], concurrency: int) -> dict[str, float]:
    """Executions per second over new objects (happy), then the same again (duplicate),
    and the CPU steal meanwhile, in cores (stolen CPU seconds per second)."""
    rates: dict[str, float] = {}
    steal_before, run_started = cpu_steal(), time.perf_counter()
    for path in ("happy", "duplicate"):
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda e: engine.execute("ProcessorStateMachine", e), events))
        elapsed = time.perf_counter() - started
        expected = "Processed" if path == "happy" else "Duplicate"
        if any(r.states_entered[-1] != expected for r in results):
            raise RuntimeError(f"the {path} run did not take the {path} path")
        rates[path] = len(events) / elapsed
    steal_after = cpu_steal()
    if steal_before is not None and steal_after is not None:
        rates["steal_cores"] = (steal_after - steal_before) / (time.perf_counter() - run_started)
    return rates


def summarise(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Per path: the median round (the figure reported) and the best, with every round."""
    summary: dict[str, Any] = {}
    for path in ("happy", "duplicate"):
        samples = [r[path] for r in rounds]
        summary[path] = statistics.median_low(samples)  # a round's own figure
        summary[f"{path}_best"] = max(samples)
        summary[f"{path}_rounds"] = samples
    if all("steal_cores" in r for r in rounds):
        summary["steal_cores_rounds"] = [r["steal_cores"] for r in rounds]
    return summary


def _sqs_records(events: list[Any]) -> list[dict[str, Any]]:
    """The S3 notifications of these uploads as SQS hands them to Lambda (S3 -> SQS)."""
    records = []
    for event in events:
        obj = event["detail"]["object"]
        notification = {"Records": [{
            "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": REGION,
            "eventTime": event["time"], "eventName": "ObjectCreated:Put",
            "s3": {
                "s3SchemaVersion": "1.0",
                "bucket": {"name": event["detail"]["bucket"]["name"],
                           "arn": f"arn:aws:s3:::{event['detail']['bucket']['name']}"},
                "object": {"key": obj["key"], "size": obj.get("size", 0),
                           "eTag": obj.get("etag", ""), "versionId": obj["version-id"],
                           "sequencer": obj.get("sequencer", "")},
            },
        }]}  # fmt: skip
        records.append({
            "messageId": str(uuid.uuid4()),
            "receiptHandle": "AQEB" + uuid.uuid4().hex,
            "body": json.dumps(notification),
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763719200000"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:baseline-uploads",
            "awsRegion": REGION,
        })  # fmt: skip
    return records


class PowertoolsBaseline:
    """The same work behind Powertools' @idempotent, on the same local DynamoDB and S3.

    As a Powertools user would deploy it: S3 notifications to an SQS queue, a
    Lambda function receiving batches of 10 through BatchProcessor, each
    record idempotent (idempotent_function) with an expiry that covers the
    seed's longest duplicate gap, and a Logger and metrics like the bundled
    processor's: one line per message, one EMF line per invocation.
    """

    FUNCTION_NAME = "onceflow-baseline-ProcessorFunction-AbCdEf123456"
    TABLE = "bench-powertools-idempotency"

    def __init__(self, engine: LocalEngine) -> None:
        from aws_lambda_powertools import Logger
        from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
        from aws_lambda_powertools.utilities.batch import (
            BatchProcessor,
            EventType,
            process_partial_response,
        )
        from aws_lambda_powertools.utilities.idempotency import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent_function,
        )

        self.engine = engine
        dynamodb = engine.client("dynamodb")
        s3 = engine.client("s3")
        dynamodb.create_table(
            TableName=self.TABLE,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        persistence = DynamoDBPersistenceLayer(table_name=self.TABLE, boto3_client=dynamodb)
        config = IdempotencyConfig(
            event_key_jmespath=(
                "powertools_json(body).Records[0].s3.[bucket.name, object.key, object.versionId]"
            ),
            expires_after_seconds=BASELINE_EXPIRY_SECONDS,
        )
        output_bucket = engine.ref("OutputBucket")
        # Its output goes where the functions' does: the engine's function log.
        self.logger = Logger(service="baseline", stream=cast(IO[str], FUNCTION_OUTPUT))
        metrics = EphemeralMetrics(namespace="baseline", service="baseline")
        processor = BatchProcessor(event_type=EventType.SQS)
        logger = self.logger

        def work(record: Any) -> dict[str, Any]:
            obj = json.loads(record.body)["Records"][0]["s3"]
            body = s3.get_object(
                Bucket=obj["bucket"]["name"], Key=obj["object"]["key"],
                VersionId=obj["object"]["versionId"],
            )["Body"].read()  # fmt: skip
            with Image.open(io.BytesIO(body)) as image:
                image.thumbnail((1024, 1024))
                out = io.BytesIO()
                image.save(out, format="WEBP")
            key = f"baseline/{obj['object']['versionId']}.webp"
            s3.put_object(Bucket=output_bucket, Key=key, Body=out.getvalue())
            metrics.add_metric(name="OutputWritten", unit=MetricUnit.Count, value=1)
            logger.info("processed", extra={"output": f"s3://{output_bucket}/{key}"})
            return {"output": key}

        record_handler = idempotent_function(
            work,
            data_keyword_argument="record",
            persistence_store=persistence,
            config=config,
            key_prefix=f"{self.FUNCTION_NAME}.app.record_handler",
        )

        @logger.inject_lambda_context(clear_state=True)
        @metrics.log_metrics
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            config.register_lambda_context(context)
            return dict(
                process_partial_response(
                    event=event,
                    record_handler=record_handler,
                    processor=processor,
                    context=context,
                )
            )

        self.handler = handler

    class Context:
        function_name = "onceflow-baseline-ProcessorFunction-AbCdEf123456"
        memory_limit_in_mb = 1024
        invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:"
            "onceflow-baseline-ProcessorFunction-AbCdEf123456"
        )
        aws_request_id = "8f507cfc-xmpl-4697-b07a-ac58fc914c95"

        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 60_000

    def invoke(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """One invocation, its output in the function log as in Lambda."""
        with FUNCTION_OUTPUT.running_function():
            result: dict[str, Any] = self.handler({"Records": records}, self.Context())
        if result.get("batchItemFailures"):
            raise RuntimeError(f"the baseline failed records: {result['batchItemFailures']}")
        return result

    def run(self, events: list[Any]) -> dict[str, float]:
        """Each event once (happy), then again (duplicate), in batches: messages per second."""
        rates: dict[str, float] = {}
        steal_before, run_started = cpu_steal(), time.perf_counter()
        records = _sqs_records(events)
        for path in ("happy", "duplicate"):
            started = time.perf_counter()
            for start in range(0, len(records), BASELINE_BATCH):
                # A duplicate comes as a new SQS message: S3 notified twice.
                batch = records[start : start + BASELINE_BATCH]
                if path == "duplicate":
                    batch = [{**r, "messageId": str(uuid.uuid4())} for r in batch]
                self.invoke(batch)
            rates[path] = len(events) / (time.perf_counter() - started)
        steal_after = cpu_steal()
        if steal_before is not None and steal_after is not None:
            rates["steal_cores"] = (steal_after - steal_before) / (
                time.perf_counter() - run_started
            )
        return rates

    def measure(
        self, events: list[Any], meter: DynamoDBMeter, log: io.StringIO
    ) -> list[BaselineMeasure]:
        """A batch down the happy path, then the same uploads again: counted per message."""
        measures: list[BaselineMeasure] = []
        records = _sqs_records(events)
        previous = self.logger.log_level
        self.logger.setLevel("INFO")  # as the processor logs, deployed
        try:
            for path in ("happy", "duplicate"):
                batch = [{**r, "messageId": str(uuid.uuid4())} for r in records]
                since = len(self.engine.state.requests.snapshot())
                mark = meter.mark()
                start = log.tell()
                self.invoke(batch)
                lines = _lines(log.getvalue()[start:])
                writes, reads = meter.since(mark)
                writes = [w for w in writes if w.table == self.TABLE]
                requests = _requests(self.engine, since)
                per_message = [line for line in lines if '"message":"processed"' in line]
                per_batch = [line for line in lines if line not in per_message]
                rows = [w.after_bytes for w in writes if not w.failed]
                n = len(batch)
                measures.append(BaselineMeasure(
                    path=path,
                    table_wru=sum(w.table_units for w in writes) / n,
                    rru=sum(r.units for r in reads if r.table == self.TABLE) / n,
                    dynamodb_requests=sum(
                        c for op, c in requests.items() if op.startswith("dynamodb:")
                    ) / n,
                    function_log_lines_per_message=per_message[: len(per_message) // n],
                    function_log_lines_per_batch=per_batch,
                    row_bytes=max(rows) if rows else measures[0].row_bytes,
                    did_work=path == "happy",
                    new_row=bool(rows),
                ))  # fmt: skip
        finally:
            self.logger.setLevel(previous)
        return measures


@dataclass
class AuditMeasure:
    keys: int
    seconds: float
    scanned: int
    transitions: int  # the parent's (STANDARD); the batches are EXPRESS children
    batches: int
    history_events: int
    lambda_invocations: int
    requests: dict[str, int]
    rru: float
    sfn_log_events: dict[str, list[str]]
    function_log_lines: list[str]


def _audit_run(
    engine: LocalEngine, meter: DynamoDBMeter, log: io.StringIO, prefix: str, keys: int
) -> AuditMeasure:
    since = len(engine.state.requests.snapshot())
    invocations = len(engine.runtime.invocations)
    mark = meter.mark()
    log_start = log.tell()
    started = time.perf_counter()
    result = engine.execute("AuditStateMachine", {"prefix": prefix}, timeout=3600)
    elapsed = time.perf_counter() - started
    _, reads = meter.since(mark)
    output = result.output if isinstance(result.output, dict) else json.loads(result.output or "{}")
    return AuditMeasure(
        keys=keys,
        seconds=elapsed,
        scanned=int(output.get("scanned", 0)),
        transitions=_transitions(result),
        batches=int(output.get("batches", 0)),
        history_events=len(result.events),
        lambda_invocations=len(engine.runtime.invocations) - invocations,
        requests=dict(sorted(_requests(engine, since).items())),
        rru=sum(r.units for r in reads),
        sfn_log_events={
            lvl: log_records(result.events, result.arn, lvl) for lvl in ("ALL", "ERROR")
        },
        function_log_lines=_lines(log.getvalue()[log_start:]),
    )


AUDIT_DEFINITION_BYTES = 13_300  # statemachines/audit.asl.json, about
AUDIT_BATCH_BYTES = 200_000  # the ItemBatcher's MaxInputBytesPerBatch


def audit_usage(run: AuditMeasure, level: str, model: Model) -> Usage:
    """What one audit run consumes: a STANDARD parent (traced, logged at ``level``) whose
    Distributed Map runs one EXPRESS child per batch, each one Lambda invocation long."""
    requests = sum(run.requests.values())
    milliseconds = run.lambda_invocations * model.lambda_overhead_ms + requests * model.call_ms
    sfn = log_bytes(run.sfn_log_events[level])
    function = log_bytes(run.function_log_lines) + run.lambda_invocations * LAMBDA_PLATFORM_BYTES
    # A child lasts about its batch's share of the Lambda time; its data is the batch
    # (up to MaxInputBytesPerBatch, 200,000 bytes) on a small definition.
    child_seconds = milliseconds / 1000 / max(run.lambda_invocations, 1)
    child_gb = express_billed_gb(AUDIT_DEFINITION_BYTES, AUDIT_BATCH_BYTES, 1)
    return Usage(
        transitions=run.transitions,
        express_requests=run.batches,
        express_gb_seconds=run.batches * express_billed_seconds(child_seconds) * child_gb,
        lambda_requests=run.lambda_invocations,
        lambda_gb_seconds=milliseconds / 1000 * model.audit_memory_gb,
        rru=run.rru,
        sqs_requests=sum(n for op, n in run.requests.items() if op.startswith("sqs:")),
        sfn_log_bytes=sfn,
        lambda_log_bytes=function,
        log_stored_byte_months=(sfn + function)
        * model.log_compression
        * months(model.log_retention_days),
        xray_traces=1.0,
        s3_list_requests=sum(n for op, n in run.requests.items() if op.startswith("s3:List")),
        s3_put_requests=sum(n for op, n in run.requests.items() if op == "s3:PutObject"),
        s3_get_requests=sum(n for op, n in run.requests.items() if op == "s3:GetObject"),
    )


def audit_per_message(
    fixed: AuditMeasure, walked: AuditMeasure, level: str, model: Model
) -> dict[str, Any]:
    """The daily audit spread over the day's messages.

    S3 modes: the run's fixed part plus, per key, what the walk over
    ``walked.keys`` added; a day's run walks RetentionDays of uploads (the
    retention window; today's audit lists every version ever, so without a
    lifecycle rule it grows past this). SQS modes: only the fixed part (the
    lock sweep and the report), the bucket being another stack's concern.
    """
    fixed_usage = audit_usage(fixed, level, model)
    added = audit_usage(walked, level, model).minus(fixed_usage)
    # A share below zero is the report line's digits (0 keys against N): noise.
    added = Usage(**{f.name: max(getattr(added, f.name), 0.0) for f in dataclasses.fields(added)})
    per_key = added.scaled(1 / max(walked.keys, 1))
    keys_per_day = model.messages_per_day * model.retention_days
    day_s3 = fixed_usage.plus(per_key.scaled(keys_per_day))
    return {
        "keys_per_day": keys_per_day,
        "s3": total(bill(day_s3)) / model.messages_per_day,
        "sqs": total(bill(fixed_usage)) / model.messages_per_day,
        "bill_per_day_s3": bill(day_s3),
    }


# ---- the report -----------------------------------------------------------------


def price_modes(
    measures: list[PathMeasure],
    baseline: list[BaselineMeasure],
    audit: dict[str, dict[str, Any]],
    model: Model,
) -> list[dict[str, Any]]:
    """All-in dollars per million messages of every mode and level, with the baseline's."""
    by = {(m.source, m.path): m for m in measures}
    base = {m.path: m for m in baseline}
    base_bills = {path: bill(baseline_usage(m, model)) for path, m in base.items()}
    base_happy = total(base_bills["happy"])
    rows: list[dict[str, Any]] = []
    for level in ("ALL", "ERROR"):
        for mode in MODES:
            if not mode.built:
                rows.append({"mode": mode.name, "level": level, "built": False, "note": mode.note})
                continue
            # The audit is paid once per upload (or message), not per delivery.
            paid = audit[level]["s3" if mode.source == "s3" else "sqs"]
            audit_usd = {"happy": paid, "duplicate": 0.0}
            bills = {
                path: bill(
                    message_usage(mode, by[(mode.source, path)], level, model, audit_usd[path])
                )
                for path in ("happy", "duplicate")
            }
            rows.append(_priced(mode.name, level, bills, base_happy))
        rows.append(_priced(BASELINE.name, level, base_bills, base_happy))
    return rows


def _priced(
    name: str, level: str, bills: Mapping[str, Mapping[str, float]], base_happy: float
) -> dict[str, Any]:
    happy, duplicate = total(bills["happy"]), total(bills["duplicate"])
    seed = (1 - SEED_DUPLICATE_SHARE) * happy + SEED_DUPLICATE_SHARE * duplicate
    return {
        "mode": name,
        "level": level,
        "built": True,
        "usd_per_million": {
            "happy": happy * 1e6,
            "duplicate": duplicate * 1e6,
            "seed_mix": seed * 1e6,
        },
        "ratio_to_baseline": happy / base_happy,
        "components_per_million": {
            path: {k: v * 1e6 for k, v in lines.items()} for path, lines in bills.items()
        },
    }


def mode_ceilings(
    measures: list[PathMeasure], baseline: list[BaselineMeasure], model: Model
) -> list[dict[str, Any]]:
    by = {(m.source, m.path): m for m in measures}
    rows: list[dict[str, Any]] = []
    for mode in MODES:
        if not mode.built:
            rows.append({"mode": mode.name, "built": False, "note": mode.note, "quotas": []})
            continue
        quotas = ceilings(mode_load(mode, by[(mode.source, "happy")], model))
        rows.append({"mode": mode.name, "built": True, "quotas": quotas, "binding": quotas[0]})
    base = next(m for m in baseline if m.path == "happy")
    quotas = ceilings(baseline_load(base, model))
    rows.append({"mode": BASELINE.name, "built": True, "quotas": quotas, "binding": quotas[0]})
    return rows


def run_bench(
    messages: int = 200, audit_keys: int = 100_000, concurrency: int = 8,
    progress: TextIO | None = None, rounds: int = 3, warmup: int = 16,
) -> dict[str, Any]:  # fmt: skip
    if min(messages, audit_keys, concurrency, rounds) < 1 or warmup < 0:
        raise ValueError("the bench needs at least one of each size (and no negative warm-up)")

    def say(text: str) -> None:
        if progress is not None:
            progress.write(text + "\n")
            progress.flush()

    log = _FunctionLog()
    # WARNING: thousands of executions' INFO lines would pile up in memory, and
    # the measured figures are the engine's, not the logger's. The cost model
    # raises the level to the template's while it measures the log volume.
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0", "SqsSource": "create"},
        function_log=log,
        function_log_level="WARNING",
    ) as engine:
        rng = random.Random(2)
        baseline_runner = PowertoolsBaseline(engine)
        if warmup:  # first runs parse, compile and import: not what a steady stream costs
            say(f"bench: warm-up, {warmup} messages per path, not counted")
            throughput(engine, _events(engine, "warmup", warmup, rng), concurrency)
            baseline_runner.run(_events(engine, "warmup-baseline", warmup, rng))
        engine_rounds, baseline_rounds = [], []
        for n in range(1, rounds + 1):
            # Side by side: each round runs both, so a slow spell of the machine
            # slows both alike; the median round is reported.
            say(f"bench: throughput round {n}/{rounds}, {messages} messages per path, "
                f"{concurrency} at a time, and the Powertools baseline")  # fmt: skip
            engine_rounds.append(throughput(engine, _events(engine, f"round{n}", messages, rng),
                                            concurrency))  # fmt: skip
            baseline_rounds.append(
                baseline_runner.run(_events(engine, f"round{n}-baseline", messages, rng))
            )
        rates = summarise(engine_rounds)
        baseline_rates = summarise(baseline_rounds)
        say("bench: cost model: the audit, one message down each path, the baseline")
        template_level = engine.runtime.functions[
            engine.function_name("ProcessorFunction")
        ].environment.get("POWERTOOLS_LOG_LEVEL", "INFO")
        log.seek(0, io.SEEK_END)
        with DynamoDBMeter(engine) as meter, _function_log_level(template_level):
            # The audits first, while the ledger holds no open work: what
            # they cost is the walk, not the repair of the paths below.
            say(f"bench: the audit, its fixed part (an empty prefix), then over {audit_keys} keys")
            fixed_run = _audit_run(engine, meter, log, "nothing-here/", 0)
            walked_run = audit_bench(engine, meter, log, audit_keys, say)
            measured = cost_model(engine, meter, log)
            baseline_measures = baseline_runner.measure(
                _events(engine, "cost-baseline", BASELINE_BATCH, rng), meter, log
            )
        parameters = engine.stack.parameters
        resources = engine.stack.template["Resources"]
        model = Model(
            lambda_memory_gb=engine.runtime.functions[
                engine.function_name("ProcessorFunction")
            ].memory
            / 1024,
            audit_memory_gb=engine.runtime.functions[engine.function_name("AuditFunction")].memory
            / 1024,
            retention_days=float(parameters.get("RetentionDays", "30")),
            log_retention_days=float(
                resources["ProcessorStateMachineLogGroup"]["Properties"]["RetentionInDays"]
            ),
            log_compression=measured["log_compression"],
            definition_bytes=measured["definition_bytes"],
            busiest_shard_share=busiest_shard_share(
                f"s3://{engine.ref('IngestBucket')}/uploads/{n:06d}.png#{uuid.UUID(int=n)}"
                for n in range(100_000)
            ),
        )
        configured_level = str(parameters.get("StateMachineLogLevel", "ALL"))

    say("bench: cost model of the EXPRESS batch mode, on a stack with SqsBatchMode")
    batch_log = _FunctionLog()
    with LocalEngine(
        parameters=BATCH_PARAMETERS, function_log=batch_log, function_log_level="WARNING"
    ) as batch_engine:
        batch_log.seek(0, io.SEEK_END)
        with DynamoDBMeter(batch_engine) as batch_meter, _function_log_level(template_level):
            batched = batch_cost_model(batch_engine, batch_meter, batch_log)
        batch_level = str(batch_engine.stack.parameters.get("SqsBatchLogLevel", "ALL"))
    model = dataclasses.replace(model, batch_definition_bytes=batched["definition_bytes"])
    # Each mode at the level its template parameter gives by default.
    configured = {m.name: batch_level if m.batch > 1 else configured_level for m in MODES}
    measures: list[PathMeasure] = [*measured["measures"], *batched["measures"]]
    audit = {
        level: audit_per_message(fixed_run, walked_run, level, model) for level in ("ALL", "ERROR")
    }
    modes = price_modes(measures, baseline_measures, audit, model)
    ceiling_rows = mode_ceilings(measures, baseline_measures, model)
    by = {(m.source, m.path): m for m in measures}
    happy, duplicate = by[("s3", "happy")], by[("s3", "duplicate")]
    batch_duplicate = by[("sqs-batch", "duplicate")]
    express_ceilings = [
        row["binding"] for row in ceiling_rows if row["built"] and row["mode"].startswith("EXPRESS")
    ]
    allowed = ("Lambda concurrent", "StartExecution")
    targets: dict[str, bool | None] = {
        "happy path at most 6 transitions": happy.transitions <= 6,
        "happy path at most 2 table writes": happy.writes <= 2,
        "duplicate path at most 4 transitions": duplicate.transitions <= 4,
        "duplicate path: one conditional write (P8 item 5)": duplicate.writes == 1,
        "duplicate path runs no Lambda": duplicate.lambda_invocations == 0,
        "batch mode duplicate: one conditional write a message, no Lambda (P8 item 5)": (
            batch_duplicate.writes == BATCH_SIZE and batch_duplicate.lambda_invocations == 0
        ),
        "local happy path at least 40 executions/s": rates["happy"] >= 40,
        "EXPRESS batch SQS at most 1.2x Powertools, all-in (P8 item 4)": all(
            row["ratio_to_baseline"] <= 1.2
            for row in modes
            if row["mode"] == MODES[-1].name and row["level"] == configured[row["mode"]]
        ),
        "no EXPRESS ceiling under 5,000 messages/s but Lambda concurrency and StartExecution": all(
            b["messages_per_second"] >= 5000 or any(a in b["quota"] for a in allowed)
            for b in express_ceilings
        ),
    }
    per_1000 = 1000 / walked_run.keys
    return {
        "prices_as_of": PRICES_AS_OF,
        "prices": {k: dataclasses.asdict(p) for k, p in PRICES.items()},
        "quotas": {k: dataclasses.asdict(q) for k, q in QUOTAS.items()},
        "model": {**dataclasses.asdict(model), "messages_per_second": model.messages_per_second},
        "configured_log_level": configured_level,
        "configured_log_levels": configured,
        "throughput_per_second": {
            "onceflow local engine": rates,
            "Powertools batch handler, in-process (messages)": baseline_rates,
        },
        "paths": [m.summary() for m in measures],
        "baseline_paths": [m.summary() for m in baseline_measures],
        "modes": modes,
        "ceilings": ceiling_rows,
        "audit": {
            "keys": walked_run.keys,
            "keys_per_second": walked_run.keys / walked_run.seconds,
            "seconds": walked_run.seconds,
            "scanned": walked_run.scanned,
            "batches": walked_run.batches,
            "history_events": walked_run.history_events,
            "transitions_per_1000_keys": walked_run.transitions * per_1000,
            "lambda_invocations_per_1000_keys": walked_run.lambda_invocations * per_1000,
            "requests_per_1000_keys": {
                op: round(n * per_1000, 2) for op, n in walked_run.requests.items()
            },
            "rru_per_1000_keys": walked_run.rru * per_1000,
            "fixed_run": {
                "history_events": fixed_run.history_events,
                "transitions": fixed_run.transitions,
                "lambda_invocations": fixed_run.lambda_invocations,
                "requests": fixed_run.requests,
            },
            "keys_per_day": audit["ALL"]["keys_per_day"],
            "usd_per_million_uploads": {lvl: audit[lvl]["s3"] * 1e6 for lvl in audit},
            "usd_per_million_sqs_messages": {lvl: audit[lvl]["sqs"] * 1e6 for lvl in audit},
            "bill_per_day_usd": audit["ALL"]["bill_per_day_s3"],
        },
        "targets": targets,
    }


def audit_bench(
    engine: LocalEngine,
    meter: DynamoDBMeter,
    log: io.StringIO,
    keys: int,
    say: Callable[[str], None] | None = None,
) -> AuditMeasure:
    """An audit over ``keys`` processed objects: its time, requests, units and logs."""
    s3 = engine.client("s3")
    dynamodb = engine.client("dynamodb")
    bucket = engine.ref("IngestBucket")
    table = engine.ref("LedgerTable")
    puts = []
    for n in range(keys):
        if say is not None and n and n % 20_000 == 0:
            say(f"bench: {n:,} of {keys:,} objects and rows in place for the audit")
        key = f"audit/{n:06d}"
        version = s3.put_object(Bucket=bucket, Key=key, Body=b"x")["VersionId"]
        puts.append(
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": f"s3://{bucket}/{key}#{version}"},
                        "status": {"S": "PROCESSED"},
                        "attempts": {"N": "1"},
                        "expires_at": {"N": str(int(time.time()) + 86400)},
                    }
                }
            }
        )
    for start in range(0, len(puts), 25):
        dynamodb.batch_write_item(RequestItems={table: puts[start : start + 25]})
    return _audit_run(engine, meter, log, "audit/", keys)


# ---- rendering -------------------------------------------------------------------


def _usd(value: float) -> str:
    return f"{value:.2f}" if abs(value) >= 0.005 or value == 0 else f"{value:.4f}"


def render(report: dict[str, Any]) -> str:
    lines = ["## 1. Local engine throughput (executions per second)", ""]
    lines += [
        "Median of the rounds, best round in brackets; the rounds ran side by side with "
        "the Powertools baseline, after a warm-up that is not counted. After each round "
        "in brackets: the CPU steal meanwhile, in cores (other guests' use of this VM).",
        "",
        "| runner | happy path | duplicate path | rounds (happy; steal) |",
        "|---|---|---|---|",
    ]
    for name, rates in report["throughput_per_second"].items():
        steal = rates.get("steal_cores_rounds") or [None] * len(rates["happy_rounds"])
        rounds = ", ".join(
            f"{r:.1f}" + (f" ({c:.2f})" if c is not None else "")
            for r, c in zip(rates["happy_rounds"], steal, strict=True)
        )
        lines.append(
            f"| {name} | {rates['happy']:.1f} ({rates['happy_best']:.1f}) | "
            f"{rates['duplicate']:.1f} ({rates['duplicate_best']:.1f}) | {rounds} |"
        )
    lines += ["", "## 2. One message, counted by path", ""]
    lines += [
        "Table and index write units from the item images before and after each "
        "write (a failed conditional write is charged too); log bytes as CloudWatch "
        "ingests them (26 bytes an event on top), STANDARD ARNs.",
        "",
        "| source | path | ends in | transitions | table WRU | index WRU "
        "| failed conditional writes | RRU | Lambda | SQS requests "
        "| SFN log bytes ALL / ERROR | Lambda log bytes | row bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report["paths"]:
        index = ", ".join(f"{k} {v}" for k, v in p["index_wru"].items() if v) or "0"
        sqs = ", ".join(f"{k} {v}" for k, v in p["sqs_requests"].items()) or "0"
        lines.append(
            f"| {p['source']} | {p['path']} | {p['states'][-1]}, {p['status']} | "
            f"{p['transitions']} | {p['table_wru']} | {index} | "
            f"{p['conditional_failures']} | {p['rru']:g} | {p['lambda_invocations']} | {sqs} | "
            f"{p['sfn_log_bytes']['ALL']} / {p['sfn_log_bytes']['ERROR']} | "
            f"{p['function_log_bytes']} | {p['row_bytes']} |"
        )
    for b in report["baseline_paths"]:
        lines.append(
            f"| baseline | {b['path']} | - | - | {b['table_wru']:g} | 0 | - | {b['rru']:g} | "
            f"{b['lambda_invocations']:g} | modelled | - | "
            f"{b['function_log_bytes_per_message']} + {b['function_log_bytes_per_batch']}/batch | "
            f"{b['row_bytes']} |"
        )
    lines += ["", "## 3. All-in dollars per million messages, and the ratio to the baseline", ""]
    lines += [
        "Configured state machine log levels: "
        + ", ".join(f"{m} {lv}" for m, lv in report["configured_log_levels"].items())
        + f" (the template's defaults: StateMachineLogLevel, SqsBatchLogLevel). Seed mix: "
        f"{SEED_DUPLICATE_SHARE:.2%} duplicates. Ratio: happy path against the baseline's "
        "happy path at the same level (the baseline has no state machine logs).",
        "",
        "| mode | log level | happy $/M | duplicate $/M | seed mix $/M | x baseline |",
        "|---|---|---|---|---|---|",
    ]
    for m in report["modes"]:
        if not m["built"]:
            lines.append(f"| {m['mode']} | {m['level']} | {m['note']} | | | |")
            continue
        usd = m["usd_per_million"]
        lines.append(
            f"| {m['mode']} | {m['level']} | {_usd(usd['happy'])} | {_usd(usd['duplicate'])} | "
            f"{_usd(usd['seed_mix'])} | {m['ratio_to_baseline']:.2f}x |"
        )
    levels = report["configured_log_levels"]
    built = [
        m
        for m in report["modes"]
        if m["built"] and m["level"] == levels.get(m["mode"], report["configured_log_level"])
    ]
    lines += ["", "## 4. The happy path's bill by component, $/M (at each mode's level)", ""]
    lines += [
        "| component | " + " | ".join(m["mode"] for m in built) + " |",
        "|---|" + "---|" * len(built),
    ]
    for component in COMPONENTS:
        values = [m["components_per_million"]["happy"][component] for m in built]
        lines.append(f"| {component} | " + " | ".join(_usd(v) for v in values) + " |")
    lines.append(
        "| **total** | "
        + " | ".join(f"**{_usd(m['usd_per_million']['happy'])}**" for m in built)
        + " |"
    )
    lines += ["", "## 5. Throughput ceilings: which quota binds first", ""]
    lines += [
        "| mode | binds first | messages/s | next | quota sources |",
        "|---|---|---|---|---|",
    ]
    for c in report["ceilings"]:
        if not c["built"]:
            lines.append(f"| {c['mode']} | {c['note']} | | | |")
            continue
        first = c["quotas"][0]
        others = "; ".join(f"{q['quota']} {q['messages_per_second']:,.0f}" for q in c["quotas"][1:])
        sources = " ".join(sorted({q["source"] for q in c["quotas"]}))
        lines.append(
            f"| {c['mode']} | {first['quota']} ({first['limit']:,.0f} {first['unit']}, "
            f"{first['per_message']:g} a message) | {first['messages_per_second']:,.0f} | "
            f"{others} | {sources} |"
        )
    a = report["audit"]
    lines += ["", "## 6. The audit", ""]
    lines += [
        f"A local audit of {a['keys']:,} objects (one version each, every one with its "
        f"row): {a['seconds']:.1f} s, {a['keys_per_second']:,.0f} keys/s, in "
        f"{a['batches']:,} batches (EXPRESS children). The audit's own history: "
        f"{a['history_events']} events, against {a['fixed_run']['history_events']} for "
        "an empty prefix: it does not grow with the bucket.",
        "",
        "| keys | keys/s | transitions per 1000 keys | Lambda per 1000 keys "
        "| requests per 1000 keys | RRU per 1000 keys |",
        "|---|---|---|---|---|---|",
    ]
    requests = ", ".join(f"{k} {v}" for k, v in a["requests_per_1000_keys"].items())
    lines.append(
        f"| {a['keys']} | {a['keys_per_second']:.0f} | {a['transitions_per_1000_keys']:.1f} | "
        f"{a['lambda_invocations_per_1000_keys']:.1f} | {requests} | {a['rru_per_1000_keys']:.1f} |"
    )
    lines += [
        "",
        f"A daily run over the retention window walks {a['keys_per_day']:,.0f} keys at the "
        f"seed's rate: ${_usd(a['usd_per_million_uploads']['ALL'])} per million uploads "
        f"(ALL; {_usd(a['usd_per_million_uploads']['ERROR'])} at ERROR); an SQS message "
        f"pays only the sweep and report, ${_usd(a['usd_per_million_sqs_messages']['ALL'])}/M.",
    ]
    lines += ["", "## 7. The duplicate path", ""]
    dup = [p for p in report["paths"] if p["path"] == "duplicate"]
    lines += [
        "| source | states | table writes (failed conditional) | WRU | Lambda |",
        "|---|---|---|---|---|",
    ]
    for p in dup:
        lines.append(
            f"| {p['source']} | {', '.join(p['states'])} | {p['writes']} "
            f"({p['conditional_failures']}) | {p['table_wru']} | {p['lambda_invocations']} |"
        )
    lines += ["", "## Targets", ""]
    verdicts = {True: "met", False: "NOT met", None: "not measured (mode not built yet)"}
    lines += [f"- {verdicts[ok]}: {name}" for name, ok in report["targets"].items()]
    lines += [
        "",
        f"## Prices ({report['prices_as_of']})",
        "",
        "| per | $ | source | checked |",
        "|---|---|---|---|",
    ]
    for p in report["prices"].values():
        lines.append(f"| {p['unit']} | {p['usd']:.10g} | {p['source']} | {p['check']} |")
    lines += ["", "## Quotas", "", "| quota | default | source | note |", "|---|---|---|---|"]
    for q in report["quotas"].values():
        lines.append(
            f"| {q['name']} | {q['limit']:,.0f} {q['unit']} | {q['source']} | {q['note']} |"
        )
    m = report["model"]
    lines += [
        "",
        f"Model: work {m['work_ms']:g} ms, an AWS call {m['call_ms']:g} ms, an invocation "
        f"{m['lambda_overhead_ms']:g} ms on top; Lambda {m['lambda_memory_gb'] * 1024:g} MB; "
        f"rows kept {m['retention_days']:g} days; logs kept {m['log_retention_days']:g} days, "
        f"stored at {m['log_compression']:.2f} of their size (gzip, measured); "
        f"{m['messages_per_day']:,.0f} messages a day ({m['messages_per_second']:.2f}/s) for "
        f"X-Ray's sampling; EXPRESS definition {m['definition_bytes']:,} bytes; busiest "
        f"OpenWork shard {m['busiest_shard_share']:.3f} of the keys.",
    ]
    return "\n".join(lines)


# Where docs/benchmarks.md shows the stored run (tests/unit/test_docs.py checks the copy).
PAGE_START = "<!-- bench:start (a copy of bench/results.md, its headings one level down) -->"
PAGE_END = "<!-- bench:end -->"


def embed(results_md: str, page: Path) -> None:
    """Put a run into the docs page between its markers, each heading one level down."""
    text = page.read_text(encoding="utf-8")
    if PAGE_START not in text or PAGE_END not in text:
        raise ValueError(f"{page} has no {PAGE_START!s} ... {PAGE_END} markers")
    head, rest = text.split(PAGE_START, 1)
    _, tail = rest.split(PAGE_END, 1)
    body = re.sub(r"^(#+) ", r"#\1 ", results_md.strip(), flags=re.MULTILINE)
    page.write_text(f"{head}{PAGE_START}\n{body}\n{PAGE_END}{tail}", encoding="utf-8")


def write(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "results.json"
    md_path = directory / "results.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render(report) + "\n", encoding="utf-8")
    return json_path, md_path
