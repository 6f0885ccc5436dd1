"""Benchmarks, measured side by side in one run (not tests: they report, they do not assert).

1. Local engine throughput: executions per second, happy path and duplicate path.
2. What one message does on each path, counted from its execution history, the
   local services' request log and a meter on the local DynamoDB (the write and
   read units of every request, index writes included, from the item images
   before and after it; again with the execution's ARN in EXPRESS form), and the
   log bytes it would send to CloudWatch.
3. The bill of every mode as a user deploys it, in dollars per million messages,
   beside the baseline users would pick instead (Powertools' @idempotent on SQS
   batches, run on the same local services): the batches that form at the seed's
   rate, the fixed monthly costs counted from the template, the audit.
4. The throughput ceiling of every mode: which quota binds first, at what rate.
5. The audit: keys per second, its requests per key, its cost as the bucket ages.

Everything the local engine cannot measure (durations on AWS, the sampling
X-Ray applies, prices) is a named constant, here or in pricing.py with its source.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
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
from urllib.parse import quote

from PIL import Image

from bench.pricing import (
    AUDIT_AGES,
    DAYS_PER_MONTH,
    INVENTORY_REPORTS_KEPT_DAYS,
    INVENTORY_ROW_GZIP_BYTES,
    PRICES,
    PRICES_AS_OF,
    QUOTAS,
    SEED_DUPLICATE_SHARE,
    SEED_MESSAGES_PER_DAY,
    SEED_MESSAGES_PER_SECOND,
    SELECT_GB_SECONDS_PER_ROW,
    SELECT_ROWS_PER_CPU_SECOND,
    VOLUMES,
    AuditUnits,
    Deployment,
    MetricSource,
    MonthlyItem,
    amortised,
    audit_day,
    emf_metrics,
    inventory_break_even_keys,
    inventory_row_usd_per_day,
    mean_batch,
    monthly_items,
    months,
    read_deployment,
    runs_per_month,
)
from onceflow.asl import outcome
from onceflow.harness.common import TransientError
from onceflow.local.engine import ACCOUNT_ID, PROJECT_ROOT, REGION, ExecutionResult, LocalEngine
from onceflow.local.lambdas import FUNCTION_OUTPUT
from onceflow.local.patches.hooks import RecordedRequest
from onceflow.local.patches.registry import Installed, Installer, Patch, gone, install_all, takes
from onceflow.local.template import load_template

# ---- the model: what cannot be measured here -----------------------------------

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
# Traces read per trace recorded. Retrieving or scanning a trace ($0.50 per million,
# xray/pricing) is a console or API call an operator makes; nothing the stack (or the
# baseline) deploys makes one, so the bill as shipped has none. Every trace read once
# would add $0.50 per million recorded on both sides (more on the baseline's, which
# records a trace per message where a batch records one per execution).
XRAY_RETRIEVED_PER_RECORDED = 0.0
# EXPRESS memory, per the Step Functions pricing page's example.
EXPRESS_BASE_MEMORY_MB = 50.0
EXPRESS_MEMORY_STEP_MB = 64.0
# The baseline's idempotency expiry: covers the seed's longest duplicate gap.
BASELINE_EXPIRY_SECONDS = 22_500
BASELINE_BATCH = 10
# DynamoDB storage: 100 bytes of overhead per item (and per index item).
DYNAMODB_ITEM_OVERHEAD_BYTES = 100
# S3 server access logs (the ingest and output buckets log to AccessLogBucket): one
# space-delimited record a request, newline-delimited, in the fields of AWS's format
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/LogFormat.html). Logging and
# delivery are free; the log files are stored as any object ("any log files that the
# system delivers to you accrue the usual charges for storage", ServerLogs.html). The
# fields below the bucket, the operation and the key are filled like the page's example
# with what a Lambda function's request carries (an assumed-role requester, the SDK's
# user agent): their exact lengths are not verified.
ACCESS_LOG_FIELDS = {
    "owner": "79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be",
    "time": "[06/Feb/2019:00:00:38 +0000]",
    "ip": "192.0.2.3",
    "requester": "arn:aws:sts::123456789012:assumed-role/onceflow-ProcessorFunctionRole-"
    "1A2B3C4D5E6F/onceflow-ProcessorFunction-1A2B3C4D5E6F",
    "request_id": "3E57427F3EXAMPLE",
    "user_agent": "Boto3/1.35.0 md/Botocore#1.35.0 ua/2.0 os/linux#5.10.227 md/arch#x86_64 "
    "lang/python#3.13.0 md/pyimpl#CPython exec-env/AWS_Lambda_python3.13 "
    "cfg/retry-mode#legacy Botocore/1.35.0",
    "version_id": "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
    "host_id": "s9lzHYrFp76ZVxRcpX9+5cjAnEH2ROuNkd2BHfIa6UkFVdtjf5mKR3/eTPFvsiP/XV/VLi31234=",
}
# ReceiveMessage calls per message a pipe with a batching window gathers (execution_usage).
RECEIVES_PER_MESSAGE_GATHERED = 1.0
# Pollers sharing a queue's arrivals, for the bill beside the as-shipped one: Lambda's SQS
# event source mapping starts with five (AWS Compute Blog, "Understanding how AWS Lambda
# scales with Amazon SQS standard queues"), and a pipe "reads up to five batches" when
# messages are available (eb-pipes-sqs.html, Scaling and processing); how a low rate's
# arrivals spread over them is not documented (not verified), so the all-in keeps one
# poller gathering every arrival.
PIPE_POLLERS_SHARING = 5


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
    access_log_days: float = 91.0  # AccessLogBucket keeps a log file (access_log_days)
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
    # The item before, after and as attempted, kept when one holds an execution ARN:
    # what the write costs when that ARN is an EXPRESS one is worked out from them.
    images: tuple[Any, Any, Any] | None = None


# A STANDARD execution's ARN, as the engine gives it (an EXPRESS one is already AWS's form).
_EXECUTION_ARN = re.compile(
    r"arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:execution:[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+"
)


def _holds_arn(*items: Any) -> bool:
    return any(item and _EXECUTION_ARN.search(json.dumps(item)) for item in items)


def express_image(value: Any) -> Any:
    """An item (typed JSON) with every execution ARN in its strings in EXPRESS form."""
    if isinstance(value, str):
        return _EXECUTION_ARN.sub(lambda m: _express_arn(m.group(0)), value)
    if isinstance(value, list):
        return [express_image(v) for v in value]
    if isinstance(value, dict):
        return {k: express_image(v) for k, v in value.items()}
    return value


def express_write_units(write: Write, spec: TableSpec) -> tuple[int, dict[str, int]]:
    """Table and index write units of this write had its execution been EXPRESS (its
    ARN, in the lock owner and the claims, longer): the same rules on rewritten images."""
    if write.images is None:
        return write.table_units, dict(write.index_units)
    before, after, attempted = (express_image(i) for i in write.images)
    table = table_write_units(write.operation, before, after, attempted, write.failed)
    if write.failed:
        return table, {}
    return table, {i.name: index_write_units(before, after, i, spec.keys) for i in spec.indexes}


@dataclass
class Read:
    table: str
    operation: str
    units: float


# moto's request handlers that read items through its backend's get_item.
_READ_HANDLERS = {"get_item": "GetItem", "batch_get_item": "BatchGetItem"}


def _meter_fits() -> list[str]:
    """What the meter reads of moto's DynamoDB: the backend's parameters, and the
    handlers whose frames tell a client's read from moto's own."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler

    return [
        *takes(DynamoDBBackend.put_item, "self", "table_name", "item_attrs"),
        *takes(DynamoDBBackend.update_item, "self", "table_name", "key"),
        *takes(DynamoDBBackend.delete_item, "self", "table_name", "key"),
        *takes(DynamoDBBackend.get_item, "self", "table_name", "keys"),
        *takes(DynamoDBBackend.query, "self", "table_name"),
        *([] if "consistent_read" in inspect.signature(DynamoDBBackend.query).parameters
          else ["DynamoDBBackend.query no longer takes consistent_read"]),
        *gone(DynamoHandler, *_READ_HANDLERS),
    ]  # fmt: skip


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
        self._installed: Installed | None = None

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
                        (before, None, attempted) if _holds_arn(before, attempted) else None,
                    ))  # fmt: skip
                raise
            after = self.current(name, key)
            spec = self.specs.get(name, TableSpec(name, ()))
            self.writes.append(Write(
                name, operation, False,
                table_write_units(operation, before, after, attempted, False),
                {i.name: index_write_units(before, after, i, spec.keys) for i in spec.indexes},
                item_size(after),
                (before, after, attempted) if _holds_arn(before, after, attempted) else None,
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

    def _install(self, installer: Installer) -> None:
        backend = self.backend
        installer.replace(backend, "put_item", self._write("PutItem", backend.put_item))
        installer.replace(backend, "update_item", self._write("UpdateItem", backend.update_item))
        installer.replace(backend, "delete_item", self._write("DeleteItem", backend.delete_item))
        installer.replace(backend, "get_item", self._get(backend.get_item))
        installer.replace(backend, "query", self._query(backend.query))

    def __enter__(self) -> DynamoDBMeter:
        # Through the engine's patch registry: its fits check stops the bench when
        # moto moved what the meter reads, instead of counting wrong units.
        patch = Patch(
            name="DynamoDB meter",
            kind="meter",
            why="The bench's write and read units, from the item before and after each "
            "request (moto answers ConsumedCapacity with constants).",
            test="tests/unit/test_bench.py::test_a_small_bench_reports_every_table",
            install=self._install,
            fits=_meter_fits,
        )
        self._installed = install_all((patch,))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed is not None:
            self._installed.installer.undo()
            self._installed = None

    def mark(self) -> tuple[int, int]:
        return len(self.writes), len(self.reads)

    def since(self, mark: tuple[int, int]) -> tuple[list[Write], list[Read]]:
        return self.writes[mark[0] :], self.reads[mark[1] :]


# ---- logs --------------------------------------------------------------------


def _express_arn(arn: str) -> str:
    """The ARN an EXPRESS execution carries in its logs (longer than a STANDARD one); the
    engine gives an EXPRESS execution that form already."""
    if ":express:" in arn:
        return arn
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


def access_log_record(request: RecordedRequest) -> str:
    """The server access log record S3 writes for one request (LogFormat.html's fields)."""
    operation = re.sub(r"(?<!^)(?=[A-Z])", " ", request.operation).split()
    method = {"Get": "GET", "List": "GET", "Head": "HEAD", "Delete": "DELETE"}.get(
        operation[0], "PUT"
    )
    target = "OBJECT" if request.key else "BUCKET"
    key = quote(request.key, safe="/") if request.key else "-"
    uri = f"/{request.bucket}/{key}" if request.key else f"/{request.bucket}"
    f = ACCESS_LOG_FIELDS
    return " ".join((
        f["owner"], request.bucket, f["time"], f["ip"], f["requester"], f["request_id"],
        f"REST.{method}.{target}", key, f'"{method} {uri} HTTP/1.1"', str(request.status), "-",
        "1476", "30629", "57", "20", '"-"', f'"{f["user_agent"]}"', f["version_id"], f["host_id"],
        "SigV4", "TLS_AES_128_GCM_SHA256", "AuthHeader",
        f"{request.bucket}.s3.{REGION}.amazonaws.com", "TLSv1.3", "-", "-", REGION,
    ))  # fmt: skip


def access_log_bytes(requests: Iterable[RecordedRequest], logged: Iterable[str]) -> int:
    """Bytes of the access log records of these requests to buckets that log (a record
    and its newline each)."""
    buckets = set(logged)
    return sum(
        len(access_log_record(r).encode("utf-8")) + 1
        for r in requests
        if r.service == "s3" and r.bucket in buckets
    )


def logged_buckets(engine: LocalEngine) -> set[str]:
    """The stack's buckets with server access logging on (their LoggingConfiguration)."""
    return {
        engine.ref(logical_id)
        for logical_id, resource in engine.stack.template["Resources"].items()
        if resource.get("Type") == "AWS::S3::Bucket"
        and "LoggingConfiguration" in resource.get("Properties", {})
        and engine.stack.resource_enabled(logical_id)
    }


def access_log_days(resources: Mapping[str, Any]) -> float:
    """How long AccessLogBucket keeps a log file: its expiration, plus the noncurrent
    days a versioned bucket keeps the expired version (a delete marker hides it first)."""
    bucket = resources["AccessLogBucket"]["Properties"]
    days = 0.0
    for rule in bucket.get("LifecycleConfiguration", {}).get("Rules", []):
        if rule.get("Status") == "Enabled" and "ExpirationInDays" in rule:
            days = float(rule["ExpirationInDays"])
            if bucket.get("VersioningConfiguration", {}).get("Status") == "Enabled":
                noncurrent = rule.get("NoncurrentVersionExpiration", {})
                days += float(noncurrent.get("NoncurrentDays", 0))
    if not days:
        raise ValueError("AccessLogBucket has no expiration: its logs would be kept forever")
    return days


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
    map_children: float = 0.0  # Distributed Map child workflows: a transition each
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
    inventory_objects: float = 0.0  # objects listed in S3 Inventory reports
    access_log_byte_months: float = 0.0  # S3 server access logs, stored
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
    "Step Functions Distributed Map children": lambda u: (
        u.map_children * PRICES["sfn_map_child"].usd
    ),
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
        u.eventbridge_events * PRICES["eventbridge_s3_event"].usd
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
    "S3 Inventory (audit)": lambda u: u.inventory_objects * PRICES["s3_inventory_object"].usd,
    "S3 server access logs (storage)": lambda u: (
        u.access_log_byte_months / GB * PRICES["s3_storage_gb_month"].usd
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


# ---- what one message did, measured --------------------------------------------


@dataclass
class PathMeasure:
    """One message down one path, as counted locally."""

    path: str
    source: str  # s3 | sqs | events (custom events) | s3-batch | sqs-batch
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
    messages: int = 1  # the messages the execution handled (a batch's size)
    # The same writes and row with the execution's ARN in EXPRESS form (None: as above).
    table_wru_express: int | None = None
    index_wru_express: dict[str, int] | None = None
    row_bytes_express: int | None = None
    # S3 server access log records of its requests to the buckets that log (the upload too)
    access_log_bytes: int = 0

    def units(self, express: bool) -> tuple[int, dict[str, int], int]:
        """Table units, index units and row bytes, in the ARN form of the workflow type."""
        if express and self.table_wru_express is not None:
            return (
                self.table_wru_express,
                self.index_wru_express if self.index_wru_express is not None else self.index_wru,
                self.row_bytes_express if self.row_bytes_express is not None else self.row_bytes,
            )
        return self.table_wru, self.index_wru, self.row_bytes

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
            "messages": self.messages,
            "table_wru_express": self.units(True)[0],
            "index_wru_express": self.units(True)[1],
            "row_bytes_express": self.units(True)[2],
            "access_log_bytes": self.access_log_bytes,
        }


@dataclass(frozen=True)
class Mode:
    name: str
    workflow: str  # STANDARD | EXPRESS | BASELINE
    source: str  # s3 | sqs | s3-batch | sqs-batch (the measured paths it is priced from)
    built: bool = True
    note: str = ""
    batch: int = 1  # messages per execution at most (the measures are per execution)
    # The template parameters a user deploys this mode with (the defaults otherwise):
    # what its fixed monthly costs, batch size and batching window are read from.
    parameters: tuple[tuple[str, str], ...] = ()


# EXPRESS runs at most five minutes: the template's ExpressFitsInFiveMinutes rule
# refuses the default timeout, so this is the least a user must change (the Process
# task's retries follow WorkflowType by themselves: the template's ProcessRetries).
EXPRESS_LIMITS = (("ProcessorTimeoutSeconds", "40"),)
BATCH_SIZE = 10
MODES: tuple[Mode, ...] = (
    Mode("STANDARD, S3 via EventBridge", "STANDARD", "s3"),
    Mode("EXPRESS, S3 via EventBridge", "EXPRESS", "s3",
         parameters=(("WorkflowType", "EXPRESS"), *EXPRESS_LIMITS)),
    Mode("STANDARD, SQS via pipe", "STANDARD", "sqs", parameters=(("SqsSource", "create"),)),
    Mode("EXPRESS, SQS via pipe", "EXPRESS", "sqs",
         parameters=(("WorkflowType", "EXPRESS"), ("SqsSource", "create"), *EXPRESS_LIMITS)),
    # P12 item 2: SqsBatchMode alone; the S3 events go through the stack's source queue.
    Mode("EXPRESS batch workflow, S3 through the source queue (SqsBatchMode)", "EXPRESS",
         "s3-batch", batch=BATCH_SIZE, parameters=(("SqsBatchMode", "true"), *EXPRESS_LIMITS)),
    Mode("EXPRESS batch workflow, SQS via pipe (SqsBatchMode)", "EXPRESS", "sqs-batch",
         batch=BATCH_SIZE,
         parameters=(("SqsSource", "create"), ("SqsBatchMode", "true"), *EXPRESS_LIMITS)),
)  # fmt: skip
BASELINE = Mode("Powertools @idempotent, SQS batches of up to 10", "BASELINE", "sqs")
S3_BATCH_MODE = MODES[-2]


def _from_s3(mode: Mode) -> bool:
    """The mode's messages are S3's events: EventBridge carries each, and the audit's
    S3 walk is what finds the lost ones."""
    return mode.source in ("s3", "s3-batch")


def execution_usage(
    mode: Mode, measure: PathMeasure, level: str, model: Model, executions_per_second: float
) -> Usage:
    """One execution of this path (``measure.messages`` messages) in this onceflow mode,
    at this state machine log level, without the audit.

    A batch's messages run side by side (an inline Map), so the execution lasts about
    one message's chain of calls. Each message pays its own row and its own event
    (through the pipe, per event: whether a batch is billed once is not verified).
    """
    express = mode.workflow == "EXPRESS"
    n = measure.messages
    lambda_ms = model.work_ms + model.lambda_overhead_ms
    table_wru, index_wru, row_bytes = measure.units(express)
    stored = (row_bytes + DYNAMODB_ITEM_OVERHEAD_BYTES) * measure.new_row * n
    records = (measure.express_log_events if express else measure.sfn_log_events)[level]
    sfn_bytes = log_bytes(records)
    sqs_requests = float(sum(measure.sqs_requests.values()))
    if mode.batch > 1:
        # The local pipe takes a batch with one ReceiveMessage. On AWS the pipe "continues
        # to poll messages from the Amazon SQS standard queue until" the batching window
        # expires or the batch is full (eb-pipes-sqs.html), and a long poll returns "as
        # soon as" a message is available (best-practices-using-appropriate-polling-mode
        # .html): far below a poller's rate, a receive a message gathered. (At rates where
        # several messages wait for one receive this over-counts: not verified.)
        receives = measure.sqs_requests.get("ReceiveMessage", 0)
        sqs_requests += max(receives, RECEIVES_PER_MESSAGE_GATHERED * n) - receives
    function_bytes = (
        log_bytes(measure.function_log_lines) + measure.lambda_invocations * LAMBDA_PLATFORM_BYTES
    )
    usage = Usage(
        lambda_requests=measure.lambda_invocations,
        lambda_gb_seconds=measure.lambda_invocations
        * lambda_gb_seconds(lambda_ms, model.lambda_memory_gb),
        table_wru=table_wru,
        index_wru=sum(index_wru.values()),
        rru=measure.rru,
        sqs_requests=sqs_requests,
        pipe_requests=float(n) if mode.source != "s3" else 0.0,
        eventbridge_events=float(n) if _from_s3(mode) else 0.0,
        sfn_log_bytes=sfn_bytes,
        lambda_log_bytes=function_bytes,
        log_stored_byte_months=(sfn_bytes + function_bytes)
        * model.log_compression
        * months(model.log_retention_days),
        xray_traces=xray_sampled_share(executions_per_second),
        stored_byte_months=stored * months(model.retention_days),
        backup_byte_months=stored * months(model.retention_days),
        access_log_byte_months=measure.access_log_bytes * months(model.access_log_days),
    )
    if express:
        seconds = (
            measure.integration_calls / n * model.call_ms / 1000
            + measure.lambda_invocations / n * lambda_ms / 1000
            + measure.wait_seconds
        )
        definition = model.batch_definition_bytes if mode.batch > 1 else model.definition_bytes
        usage.express_requests = 1.0
        usage.express_gb_seconds = express_billed_seconds(seconds) * express_billed_gb(
            definition, measure.data_bytes, measure.parallel_steps
        )
    else:
        usage.transitions = measure.transitions
    return usage


def _non_negative(usage: Usage) -> Usage:
    return Usage(**{f.name: max(getattr(usage, f.name), 0.0) for f in dataclasses.fields(usage)})


def message_usage(
    mode: Mode,
    measure: PathMeasure,
    level: str,
    model: Model,
    audit_usd: float,
    single: PathMeasure | None = None,
    batch: float | None = None,
) -> Usage:
    """One message of this path in this onceflow mode, at this state machine log level.

    The measure is one execution over ``measure.messages`` messages, shared among
    them. Given ``single`` (the same path measured on a batch of one) and ``batch``
    (the mean batch that forms), the execution is priced at that size instead: the
    two measures tell what an execution costs whatever it holds and what each message
    adds, and a batch of b pays the first once and the second b times.
    """
    if single is None or batch is None or measure.messages == single.messages:
        size = float(measure.messages)
        usage = execution_usage(mode, measure, level, model, model.messages_per_second / size)
        per_message = usage.scaled(1 / size)
    else:
        rate = model.messages_per_second / batch
        small = execution_usage(mode, single, level, model, rate)
        large = execution_usage(mode, measure, level, model, rate)
        each = large.minus(small).scaled(1 / (measure.messages - single.messages))
        once = small.minus(each.scaled(single.messages))
        per_message = _non_negative(once.scaled(1 / batch).plus(each))
    per_message.audit_usd = audit_usd
    return per_message


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


def baseline_invocation_ms(measure: BaselineMeasure, model: Model, batch: float) -> float:
    work = model.work_ms if measure.did_work else 0.0
    return batch * (work + measure.dynamodb_requests * model.call_ms) + model.lambda_overhead_ms


def baseline_usage(measure: BaselineMeasure, model: Model, batch: float = BASELINE_BATCH) -> Usage:
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
    express_sync_seconds: float = 0.0  # concurrency-seconds of synchronous EXPRESS executions
    lambda_seconds: float = 0.0  # concurrency-seconds
    hot_partition_wru: float = 0.0  # on the busiest OpenWork shard
    eventbridge_invocations: float = 0.0
    pipe_seconds: float = 0.0  # concurrency-seconds of pipe executions


_LOAD_QUOTA = {
    "standard_starts": "standard_start",
    "standard_transitions": "standard_transitions",
    "express_starts": "express_start",
    "express_sync_seconds": "express_sync",
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
    synchronous = 0.0
    if mode.batch > 1:
        # REQUEST_RESPONSE: a pipe execution lasts the whole synchronous run, about
        # one message's chain of calls (the batch's messages run side by side), and
        # holds one synchronous EXPRESS execution (StartSyncExecution) as long.
        pipe = (
            (
                measure.integration_calls * share * model.call_ms
                + measure.lambda_invocations * share * lambda_ms
            )
            / 1000
            * share
        )
        synchronous = pipe
    else:
        # FIRE_AND_FORGET: a pipe execution lasts one StartExecution call.
        pipe = model.call_ms / 1000 if mode.source == "sqs" else 0.0
    return Load(
        standard_starts=1.0 if mode.workflow == "STANDARD" else 0.0,
        standard_transitions=measure.transitions if mode.workflow == "STANDARD" else 0.0,
        express_starts=share if mode.workflow == "EXPRESS" and mode.batch == 1 else 0.0,
        express_sync_seconds=synchronous,
        lambda_seconds=measure.lambda_invocations * share * lambda_ms / 1000,
        hot_partition_wru=open_work * model.busiest_shard_share,
        eventbridge_invocations=1.0 if _from_s3(mode) else 0.0,
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


def template_log_level(engine: LocalEngine, function: str = "ProcessorFunction") -> str:
    """The level the function's Logger runs at as deployed: POWERTOOLS_LOG_LEVEL in its
    Environment, else in the Globals' (SAM merges them), else Powertools' INFO. Read from
    the template, not from the engine's functions, whose environment function_log_level
    overrides (the bench's engines run their functions at WARNING between measurements)."""
    template = engine.stack.template

    def variables(properties: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict(properties.get("Environment", {}).get("Variables", {}))

    own = variables(template["Resources"][function].get("Properties", {}))
    common = variables(template.get("Globals", {}).get("Function", {}))
    level = own.get("POWERTOOLS_LOG_LEVEL", common.get("POWERTOOLS_LOG_LEVEL", "INFO"))
    if not isinstance(level, str):
        raise ValueError(f"{function}: POWERTOOLS_LOG_LEVEL is not a literal level: {level!r}")
    return level


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
    uploads: Iterable[tuple[str, str]] = (),
) -> tuple[PathMeasure, ExecutionResult]:
    """One path, run and counted; ``uploads`` are the (bucket, key) of the objects it
    processes that were uploaded before it ran (their PUT is in the bucket's access log)."""
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
    interval = float(engine.stack.setting("RetryIntervalSeconds"))
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
    spec = meter.specs.get(ledger, TableSpec(ledger, ()))
    express = [express_write_units(w, spec) for w in ledger_writes]
    express_index: Counter[str] = Counter()
    for _, units in express:
        express_index.update(units)
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
        table_wru_express=sum(t for t, _ in express),
        index_wru_express={k: v for k, v in sorted(express_index.items())},
        row_bytes_express=item_size(express_image(row)),
        access_log_bytes=access_log_bytes(
            [
                *(RecordedRequest("s3", "PutObject", 200, bucket=b, key=k) for b, k in uploads),
                *engine.state.requests.snapshot()[since:],
            ],
            logged_buckets(engine),
        ),
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

    def upload(event: Mapping[str, Any]) -> list[tuple[str, str]]:
        return [(bucket, str(event["detail"]["object"]["key"]))]

    for path in ("happy", "duplicate"):  # the same event twice (one upload)
        measures.append(_measure(
            engine, meter, log, path, "s3", lambda: engine.execute(machine, happy), key_of(happy),
            uploads=upload(happy) if path == "happy" else (),
        )[0])  # fmt: skip
    with engine.override_function("ProcessorFunction", flaky):
        measures.append(_measure(
            engine, meter, log, "retry", "s3", lambda: engine.execute(machine, retry),
            key_of(retry), uploads=upload(retry),
        )[0])  # fmt: skip
    measures.append(_measure(
        engine, meter, log, "dead-letter", "s3", lambda: engine.execute(machine, poison),
        key_of(poison), uploads=upload(poison),
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
    sqs_row = meter.current(ledger, {"pk": {"S": message_key}})
    sqs_happy.row_bytes = item_size(sqs_row)
    sqs_happy.row_bytes_express = item_size(express_image(sqs_row))
    measures.append(sqs_happy)
    # A redelivery of the same message: the pipe receives and deletes it again.
    redelivery = {op: n for op, n in sqs_happy.sqs_requests.items() if op in REDELIVERY_REQUESTS}
    records = delivered.input
    measures.append(_measure(
        engine, meter, log, "duplicate", "sqs", lambda: engine.execute(machine, records),
        message_key, extra_sqs=redelivery,
    )[0])  # fmt: skip

    # Custom events on the default bus (CustomEventSource): the rule starts the
    # processor with the event as EventBridge delivers it; then the same event again.
    custom: dict[str, Any] = copy.deepcopy(_sample("eventbridge-custom-event.json"))
    custom["id"] = str(uuid.UUID(int=rng.getrandbits(128)))
    events_happy, custom_result = _measure(
        engine, meter, log, "happy", "events", lambda: engine.execute(machine, custom)
    )
    custom_key = str(custom_result.output["idempotencyKey"])
    custom_row = meter.current(ledger, {"pk": {"S": custom_key}})
    events_happy.row_bytes = item_size(custom_row)
    events_happy.row_bytes_express = item_size(express_image(custom_row))
    measures.append(events_happy)
    measures.append(_measure(
        engine, meter, log, "duplicate", "events", lambda: engine.execute(machine, custom),
        custom_key,
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
    "ProcessorTimeoutSeconds": "40",
    "AuditRecentCutoffHours": "0",
}


def batch_cost_model(engine: LocalEngine, meter: DynamoDBMeter, log: io.StringIO) -> dict[str, Any]:
    """A batch of one message through the pipe, one of BATCH_SIZE, then that batch again;
    from each source: SQS business messages, and S3's events, which the stack's rule
    sends to the same queue in the batch mode (EventBridge's SendMessage counted).

    Measured per execution: two sizes tell what an execution costs whatever it
    holds and what each message adds, so batch_message_usage can price the batches
    that actually form.
    """
    sqs = engine.client("sqs")
    queue = engine.ref("SourceQueue")
    machine = "BatchProcessorStateMachine"
    template = json.loads(_sample("sqs-business-message.json")[0]["body"])
    ledger = engine.ref("LedgerTable")
    rng = random.Random(3)

    def send_orders(size: int) -> None:
        for n in range(size):
            body = {**template, "orderId": f"batch-{n}-{uuid.uuid4()}"}
            sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))

    def upload_objects(size: int) -> None:
        for _ in range(size):
            key = f"uploads/{uuid.UUID(int=rng.getrandbits(128))}.png"
            if engine.put_event(_sample_s3_event(engine, key, _image(rng))):
                raise RuntimeError("the rule started an execution: its target is not the queue")

    def batch_of(
        size: int, path: str, source: str, send: Callable[[int], None]
    ) -> tuple[PathMeasure, ExecutionResult]:
        def through_pipe() -> ExecutionResult:
            send(size)
            return engine.wait(engine.pump_pipes(limit=1)[0])

        measure, delivered = _measure(engine, meter, log, path, source, through_pipe)
        if len(delivered.input) != size:
            raise RuntimeError(
                f"the pipe handed the batch workflow {len(delivered.input)} messages, not {size}"
            )
        measure.messages = size
        rows = [
            meter.current(ledger, {"pk": {"S": str(item["idempotencyKey"])}})
            for item in _row_keys(engine, delivered)
        ]
        measure.row_bytes = max(item_size(r) for r in rows)
        measure.row_bytes_express = max(item_size(express_image(r)) for r in rows)
        return measure, delivered

    measures: list[PathMeasure] = []
    for source, send, resend in (
        ("sqs-batch", send_orders, REDELIVERY_REQUESTS),
        # A duplicate S3 event is sent to the queue again by EventBridge.
        ("s3-batch", upload_objects, (*REDELIVERY_REQUESTS, "SendMessage")),
    ):
        single, _ = batch_of(1, "happy-1", source, send)
        happy, delivered = batch_of(BATCH_SIZE, "happy", source, send)
        # The same batch delivered again: the pipe receives and deletes it again.
        redelivery = {op: n for op, n in happy.sqs_requests.items() if op in resend}
        duplicate, _ = _measure(
            engine, meter, log, "duplicate", source,
            functools.partial(engine.execute, machine, delivered.input),
            extra_sqs=redelivery,
        )  # fmt: skip
        duplicate.messages = BATCH_SIZE
        measures += [single, happy, duplicate]
    definition = engine.state_machine_definition(machine)[0]
    return {
        "measures": measures,
        "definition_bytes": len(definition.encode("utf-8")),
    }


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
        if any(r.outcome != expected for r in results):
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
        with FUNCTION_OUTPUT.running_function(self.engine.runtime.function_log):
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
        map_children=run.batches,
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


def audit_units(fixed: AuditMeasure, walked: AuditMeasure, level: str, model: Model) -> AuditUnits:
    """What an audit run costs, split by what it grows with: its fixed part (a run over
    an empty prefix), what each object the walk reaches adds (the walk over
    ``walked.keys`` objects, all inside the window, less the fixed part, less the
    ledger check), and what checking an object against the ledger adds on top."""
    fixed_usage = audit_usage(fixed, level, model)
    added = audit_usage(walked, level, model).minus(fixed_usage)
    # A share below zero is the report line's digits (0 keys against N): noise.
    per_key = _non_negative(added).scaled(1 / max(walked.keys, 1))
    keys = max(walked.keys, 1)
    batch_gets = walked.requests.get("dynamodb:BatchGetItem", 0) / keys
    checked = Usage(
        rru=per_key.rru,
        lambda_gb_seconds=batch_gets * model.call_ms / 1000 * model.audit_memory_gb,
    )
    lists = sum(n for op, n in walked.requests.items() if op.startswith("s3:List")) / keys
    listing = Usage(
        s3_list_requests=lists,
        lambda_gb_seconds=lists * model.call_ms / 1000 * model.audit_memory_gb,
    )
    # An Inventory run reads its manifest and a CSV file or so, SelectWindow writes the
    # window's file (one invocation) and the Distributed Map reads it.
    inventory_reads = Usage(s3_get_requests=3, s3_put_requests=1, lambda_requests=1)
    return AuditUnits(
        fixed=total(bill(fixed_usage)),
        per_listed_key=total(bill(_non_negative(per_key.minus(checked)))),
        per_checked_key=total(bill(checked)),
        listing_per_key=total(bill(listing)),
        inventory_fixed=total(bill(inventory_reads)),
    )


def audit_per_message(
    units: AuditUnits, model: Model, age_days: float, recent_cutoff_hours: float
) -> dict[str, float]:
    """The daily audit spread over the day's messages, for a bucket ``age_days`` old.

    S3 modes: the walk over every object the bucket holds by then. SQS modes: only the
    fixed part (the lock sweep and the report), the bucket being another stack's concern.
    """
    day = audit_day(
        units, model.messages_per_second, age_days, model.retention_days, recent_cutoff_hours
    )
    return {
        "s3": day.per_million_uploads / 1e6,
        "s3_inventory": day.per_million_uploads_inventory / 1e6,
        "sqs": units.fixed / model.messages_per_day,
    }


def audit_as_deployed(paid: Mapping[str, float], mode: Mode, deployment: Deployment) -> float:
    """What the daily audit costs a message of this mode as the template deploys it: an
    S3 mode's walks its bucket's daily Inventory when the stack configures one
    (AuditInventory auto, the default, on the stack's own bucket), else the listing;
    an SQS mode's pays the fixed part. Before a stack's first report (a day or two) its
    audit lists: not priced here, the bill being that of a bucket ``age_days`` old."""
    if not _from_s3(mode):
        return paid["sqs"]
    return paid["s3_inventory" if deployment.audit_inventory else "s3"]


# ---- the report -----------------------------------------------------------------


def _mode_bills(
    mode: Mode,
    by: Mapping[tuple[str, str], PathMeasure],
    level: str,
    model: Model,
    audit_usd: float,
    batch: float | None,
) -> dict[str, dict[str, float]]:
    """The happy and the duplicate path's bills of one message; the happy path at the
    mean batch given (a duplicate is priced at the batch it was measured in: at the
    seed's 0.03 % the difference does not show)."""
    single = by.get((mode.source, "happy-1"))
    return {
        # The audit is paid once per upload (or message), not per delivery.
        "happy": bill(message_usage(
            mode, by[(mode.source, "happy")], level, model, audit_usd, single, batch
        )),
        "duplicate": bill(message_usage(mode, by[(mode.source, "duplicate")], level, model, 0.0)),
    }  # fmt: skip


def price_modes(
    measures: list[PathMeasure],
    baseline: list[BaselineMeasure],
    audit: dict[str, dict[str, Any]],
    model: Model,
    batches: Mapping[str, float] | None = None,
    baseline_batch: float = BASELINE_BATCH,
) -> list[dict[str, Any]]:
    """Dollars per million messages of every mode and level (usage and audit, no fixed
    monthly costs), with the baseline's; each batch mode at the mean batch ``batches``
    gives it (full batches when not given)."""
    by = {(m.source, m.path): m for m in measures}
    base = {m.path: m for m in baseline}
    base_bills = {
        "happy": bill(baseline_usage(base["happy"], model, baseline_batch)),
        "duplicate": bill(baseline_usage(base["duplicate"], model, baseline_batch)),
    }
    base_happy = total(base_bills["happy"])
    rows: list[dict[str, Any]] = []
    for level in ("ALL", "ERROR"):
        for mode in MODES:
            if not mode.built:
                rows.append({"mode": mode.name, "level": level, "built": False, "note": mode.note})
                continue
            paid = audit[level]["s3" if _from_s3(mode) else "sqs"]
            batch = (batches or {}).get(mode.name)
            bills = _mode_bills(mode, by, level, model, paid, batch)
            rows.append(_priced(mode.name, level, bills, base_happy))
        rows.append(_priced(BASELINE.name, level, base_bills, base_happy))
    return rows


@dataclass(frozen=True)
class Metered:
    """Custom metrics the functions publish (EMF), counted from their measured logs."""

    processor: int  # a processor invocation's
    audit: int  # an audit run's
    baseline: int  # a baseline invocation's


def mode_monthly(
    mode: Mode, deployment: Deployment, rate: float, metered: Metered
) -> list[MonthlyItem]:
    """A mode's fixed monthly bill at this rate (messages a second), from its template."""
    audit_runs_per_hour = sum(
        runs_per_month(expression) for _, expression in deployment.schedules
    ) / (DAYS_PER_MONTH * 24)
    outcomes = {
        "Processed": rate * (1 - SEED_DUPLICATE_SHARE),
        "Duplicate": rate * SEED_DUPLICATE_SHARE,
    }
    measured = [
        MetricSource("ProcessorFunction (EMF)", metered.processor, rate * 3600),
        MetricSource("AuditFunction (EMF)", metered.audit, audit_runs_per_hour),
    ]
    return monthly_items(deployment, outcomes, measured, batch_mode=mode.batch > 1)


def baseline_monthly(rate: float, batch: float, metered: Metered) -> list[MonthlyItem]:
    """The baseline's fixed monthly bill: the DLQ alarm its users would have, and its
    function's EMF metrics (sent with every invocation)."""
    return [
        MonthlyItem("alarm", "its queue's DLQ", 1, PRICES["cloudwatch_alarm_metric"].usd),
        *monthly_items(
            Deployment({}, [], [], [], [], 1, 0.0, "OFF", "OFF"), {},
            [MetricSource("baseline function (EMF)", metered.baseline, rate / batch * 3600)],
        ),
    ]  # fmt: skip


def _seed_mix(bills: Mapping[str, Mapping[str, float]]) -> float:
    happy, duplicate = total(bills["happy"]), total(bills["duplicate"])
    return (1 - SEED_DUPLICATE_SHARE) * happy + SEED_DUPLICATE_SHARE * duplicate


def bill_as_shipped(
    measures: list[PathMeasure],
    baseline: list[BaselineMeasure],
    units: AuditUnits,
    model: Model,
    deployments: Mapping[str, Deployment],
    metered: Metered,
    age_days: float = DAYS_PER_MONTH,
) -> list[dict[str, Any]]:
    """Every mode's all-in dollars a message as a user deploys it, with the baseline's.

    At each volume (a multiple of the seed's rate): the batches that form with the
    template's batch size and batching window, the usage at the template's log level,
    the fixed monthly costs counted from the template and spread over the month's
    messages, and the daily audit of a bucket ``age_days`` old. Beside it, what the
    flattering assumptions give (full batches, no fixed costs), and the bill if S3's
    events are free after all.
    """
    by = {(m.source, m.path): m for m in measures}
    base = {m.path: m for m in baseline}
    rows: list[dict[str, Any]] = []
    base_totals: dict[float, float] = {}
    base_fixed: dict[float, float] = {}
    base_flattering = 0.0
    for volume in VOLUMES:
        rate = SEED_MESSAGES_PER_SECOND * volume
        at = dataclasses.replace(model, messages_per_day=rate * 86_400)
        # The baseline has no batching window either (Lambda's default is none).
        batch = mean_batch(rate, 0.0, BASELINE_BATCH)
        bills = {p: bill(baseline_usage(base[p], at, batch)) for p in ("happy", "duplicate")}
        fixed_items = baseline_monthly(rate, batch, metered)
        fixed = amortised(sum(i.usd for i in fixed_items), rate)
        base_totals[volume] = _seed_mix(bills) + fixed
        base_fixed[volume] = fixed
        if volume == 1.0:
            full = {
                p: bill(baseline_usage(base[p], at, BASELINE_BATCH)) for p in ("happy", "duplicate")
            }
            base_flattering = _seed_mix(full)
            rows.append({
                "mode": BASELINE.name, "level": "-", "baseline": True, "batch": batch,
                "window_seconds": 0.0, "max_batch": BASELINE_BATCH,
                "variable": _seed_mix(bills) * 1e6, "fixed": fixed * 1e6, "audit": 0.0,
                "total": base_totals[volume] * 1e6, "s3_events_free_total": None,
                "components": {k: v * 1e6 for k, v in bills["happy"].items()},
                "fixed_items": [dataclasses.asdict(i) for i in fixed_items],
                "fixed_usd_per_month": sum(i.usd for i in fixed_items),
                "flattering": {"batch": BASELINE_BATCH, "total": base_flattering * 1e6},
            })  # fmt: skip
    baseline_row = rows[0]
    for mode in MODES:
        deployment = deployments[mode.name]
        level = deployment.batch_log_level if mode.batch > 1 else deployment.processor_log_level
        cutoff = float(deployment.parameters.get("AuditRecentCutoffHours", "12"))
        volumes: dict[str, Any] = {}
        for volume in VOLUMES:
            rate = SEED_MESSAGES_PER_SECOND * volume
            at = dataclasses.replace(model, messages_per_day=rate * 86_400)
            batch = (
                mean_batch(rate, deployment.pipe_window_seconds, deployment.pipe_batch_size)
                if mode.batch > 1
                else 1.0
            )
            paid = audit_per_message(units, at, age_days, cutoff)
            audit_usd = audit_as_deployed(paid, mode, deployment)
            bills = _mode_bills(mode, by, level, at, audit_usd, batch)
            fixed_items = mode_monthly(mode, deployment, rate, metered)
            fixed = amortised(sum(i.usd for i in fixed_items), rate)
            variable = _seed_mix(bills) - audit_usd * (1 - SEED_DUPLICATE_SHARE)
            audit_part = audit_usd * (1 - SEED_DUPLICATE_SHARE)
            all_in = variable + fixed + audit_part
            s3_events = bills["happy"]["EventBridge events (from S3)"]
            volumes[str(volume)] = {
                "messages_per_second": rate, "batch": batch,
                "variable": variable * 1e6, "fixed": fixed * 1e6, "audit": audit_part * 1e6,
                "total": all_in * 1e6, "ratio_to_baseline": all_in / base_totals[volume],
                "s3_events_free_total": (all_in - s3_events) * 1e6 if _from_s3(mode) else None,
                "components": {k: v * 1e6 for k, v in bills["happy"].items()},
                "fixed_items": [dataclasses.asdict(i) for i in fixed_items],
                "fixed_usd_per_month": sum(i.usd for i in fixed_items),
            }  # fmt: skip
        seed = volumes["1.0"]
        at = dataclasses.replace(model, messages_per_day=SEED_MESSAGES_PER_DAY)
        paid = audit_per_message(units, at, age_days, cutoff)
        split = None
        if mode.batch > 1:
            # The same at the batches that form when the pipe's pollers share the arrivals:
            # each opens a batch with its first message and gathers its share for the window.
            shared = mean_batch(
                SEED_MESSAGES_PER_SECOND / PIPE_POLLERS_SHARING,
                deployment.pipe_window_seconds,
                deployment.pipe_batch_size,
            )
            split_bills = _mode_bills(
                mode, by, level, at, audit_as_deployed(paid, mode, deployment), shared
            )
            split_total = _seed_mix(split_bills) + seed["fixed"] / 1e6  # the audit is in them
            split = {
                "pollers": PIPE_POLLERS_SHARING, "batch": shared, "total": split_total * 1e6,
                "ratio_to_baseline": split_total / base_totals[1.0],
            }  # fmt: skip
        full = _mode_bills(
            mode, by, level, at, audit_as_deployed(paid, mode, deployment), float(mode.batch)
        )
        flattering = _seed_mix(full)
        rows.append({
            "mode": mode.name, "level": level, "baseline": False,
            "window_seconds": deployment.pipe_window_seconds if mode.batch > 1 else None,
            "max_batch": deployment.pipe_batch_size if mode.batch > 1 else 1,
            **{k: seed[k] for k in ("batch", "variable", "fixed", "audit", "total",
                                    "ratio_to_baseline", "s3_events_free_total", "components",
                                    "fixed_items", "fixed_usd_per_month")},
            "volumes": volumes,
            "pollers_split": split,
            "flattering": {
                "batch": mode.batch, "total": flattering * 1e6,
                "ratio_to_baseline": flattering / base_flattering,
            },
        })  # fmt: skip
    baseline_row["volumes"] = {
        str(v): {"total": base_totals[v] * 1e6, "fixed": base_fixed[v] * 1e6} for v in VOLUMES
    }
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


def standard_floor_targets(paths: Iterable[Mapping[str, Any]]) -> dict[str, bool | None]:
    """P12 item 3: STANDARD's happy and duplicate paths at most 3 transitions from every
    source (the processor's paths, which STANDARD runs; the batch workflow is EXPRESS)."""
    by = {(p["source"], p["path"]): p for p in paths}
    targets: dict[str, bool | None] = {}
    for source in ("s3", "sqs", "events"):  # S3's, SQS messages, custom events
        for path in ("happy", "duplicate"):
            measured = by.get((source, path))
            targets[f"STANDARD {path} path from {source} at most 3 transitions (P12 item 3)"] = (
                None if measured is None else measured["transitions"] <= 3
            )
    return targets


def mode_deployment(template: Path, mode: Mode) -> Deployment:
    """What a user deploying this mode gets: the template with the mode's parameters
    (those the template still has) and its defaults for the rest."""
    names = set(load_template(template).get("Parameters", {}))
    return read_deployment(template, {k: v for k, v in mode.parameters if k in names})


def audit_by_age(units: AuditUnits, model: Model, recent_cutoff_hours: float) -> dict[str, Any]:
    """The daily audit's dollars per million uploads for a bucket 1 month, 1 year and
    3 years old at this rate, by listing and with a daily S3 Inventory."""
    ages = {}
    for name, days in AUDIT_AGES.items():
        day = audit_day(
            units, model.messages_per_second, days, model.retention_days, recent_cutoff_hours
        )
        ages[name] = dataclasses.asdict(day)
    return {"ages": ages, "break_even_keys": inventory_break_even_keys(units)}


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
        template_level = template_log_level(engine)
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
            access_log_days=access_log_days(resources),
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
    model = dataclasses.replace(model, batch_definition_bytes=batched["definition_bytes"])
    measures: list[PathMeasure] = [*measured["measures"], *batched["measures"]]
    by = {(m.source, m.path): m for m in measures}
    # Each mode as a user deploys it: the template's defaults and the parameters the
    # mode needs, read from the template (its alarms, dashboard, metric filters,
    # schedule, the pipe's batch size and batching window, the log levels).
    template = PROJECT_ROOT / "template.yaml"
    deployments = {m.name: mode_deployment(template, m) for m in MODES}
    configured = {
        m.name: (d.batch_log_level if m.batch > 1 else d.processor_log_level)
        for m, d in ((m, deployments[m.name]) for m in MODES)
    }
    metered = Metered(
        processor=len(emf_metrics(by[("s3", "happy")].function_log_lines)),
        audit=len(emf_metrics(walked_run.function_log_lines)),
        baseline=len(emf_metrics(
            line for b in baseline_measures for line in b.function_log_lines_per_batch
        )),
    )  # fmt: skip
    level_of_audit = deployments[MODES[0].name].processor_log_level
    units = {level: audit_units(fixed_run, walked_run, level, model) for level in ("ALL", "ERROR")}
    cutoff = float(deployments[MODES[0].name].parameters.get("AuditRecentCutoffHours", "12"))
    audit = {
        level: audit_per_message(units[level], model, DAYS_PER_MONTH, cutoff)
        for level in ("ALL", "ERROR")
    }
    formed = {
        m.name: mean_batch(
            model.messages_per_second,
            deployments[m.name].pipe_window_seconds,
            deployments[m.name].pipe_batch_size,
        )
        for m in MODES
        if m.batch > 1
    }
    baseline_formed = mean_batch(model.messages_per_second, 0.0, BASELINE_BATCH)
    modes = price_modes(measures, baseline_measures, audit, model, formed, baseline_formed)
    shipped = bill_as_shipped(
        measures, baseline_measures, units[level_of_audit], model, deployments, metered
    )
    ages = audit_by_age(units[level_of_audit], model, cutoff)
    ceiling_rows = mode_ceilings(measures, baseline_measures, model)
    happy, duplicate = by[("s3", "happy")], by[("s3", "duplicate")]
    batch_duplicate = by[("sqs-batch", "duplicate")]
    express_ceilings = [
        row["binding"] for row in ceiling_rows if row["built"] and row["mode"].startswith("EXPRESS")
    ]
    allowed = ("Lambda concurrent", "StartExecution", "StartSyncExecution")
    as_shipped = {row["mode"]: row for row in shipped}
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
        "EXPRESS batch SQS at most 1.3x Powertools as shipped, all-in (P12 item 2)": (
            as_shipped[MODES[-1].name]["ratio_to_baseline"] <= 1.3
        ),
        "EXPRESS batch S3 at most 1.3x Powertools as shipped, all-in (P12 item 2)": (
            as_shipped[S3_BATCH_MODE.name]["ratio_to_baseline"] <= 1.3
        ),
        "no EXPRESS ceiling under 5,000 messages/s but Lambda concurrency and StartExecution": all(
            b["messages_per_second"] >= 5000 or any(a in b["quota"] for a in allowed)
            for b in express_ceilings
        ),
        **standard_floor_targets([m.summary() for m in measures]),
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
        "as_shipped": shipped,
        "volumes": list(VOLUMES),
        "seed": {
            "messages_per_second": SEED_MESSAGES_PER_SECOND,
            "messages_per_day": SEED_MESSAGES_PER_DAY,
            "duplicate_share": SEED_DUPLICATE_SHARE,
        },
        "metered": dataclasses.asdict(metered),
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
            "units": dataclasses.asdict(units[level_of_audit]),
            "level": level_of_audit,
            "recent_cutoff_hours": cutoff,
            "by_age": ages["ages"],
            "inventory_break_even_keys": ages["break_even_keys"],
            "usd_per_million_uploads": {lvl: audit[lvl]["s3"] * 1e6 for lvl in audit},
            "usd_per_million_sqs_messages": {lvl: audit[lvl]["sqs"] * 1e6 for lvl in audit},
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


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _batch(row: Mapping[str, Any]) -> str:
    if row["max_batch"] == 1:
        return "1"
    window = row["window_seconds"]
    return f"{row['batch']:.2f} of {row['max_batch']} (window {window:g} s)"


def recommendations(report: Mapping[str, Any], source: str | None = None) -> dict[str, str]:
    """The cheapest mode all-in at each volume (of those reading ``source``: s3 or sqs)."""
    sources = {m.name: m.source.split("-")[0] for m in MODES}
    modes = [
        r
        for r in report["as_shipped"]
        if not r["baseline"] and (source is None or sources.get(r["mode"]) == source)
    ]
    best = {}
    for volume in report["volumes"]:
        row = min(modes, key=lambda r: r["volumes"][str(volume)]["total"])
        best[str(volume)] = row["mode"]
    return best


# What each workflow type shows an operator, for the README's table.
SEES = {
    "STANDARD": "every execution in the console (90 days)",
    "EXPRESS": "executions only through their CloudWatch logs (successful ones at level ALL)",
}
# What a batch mode gives up besides: the wait for a batch, and EXPRESS's five minutes.
BATCH_GIVES_UP = (
    "; a message waits up to the batching window; EXPRESS limits (one Process retry, "
    "ProcessorTimeoutSeconds at most 40)"
)


def gives_up(mode: Mode, level: str) -> str:
    """The README's "what you see, what you give up" of one mode at its log level."""
    sees = SEES[mode.workflow]
    if mode.workflow == "EXPRESS" and level != "ALL":
        sees += f"; it ships at {level}, which logs failures only"
    return sees + (BATCH_GIVES_UP if mode.batch > 1 else "")


def _picks(best: Mapping[str, str], per_day: list[float]) -> str:
    """'at every volume shown, X' or 'at N a day X; at M a day Y'."""
    if len(set(best.values())) == 1:
        return f"{next(iter(best.values()))}, at every volume shown"
    return "; ".join(
        f"at {d:,.0f} a day {mode}" for mode, d in zip(best.values(), per_day, strict=True)
    )


def render_readme_bill(report: Mapping[str, Any]) -> list[str]:
    """The README's table: every mode's all-in bill at three volumes, and what to pick."""
    seed = report["seed"]
    volumes = [str(v) for v in report["volumes"]]
    per_day = [float(v) * seed["messages_per_day"] for v in volumes]
    modes = {m.name: m for m in MODES}
    lines = [
        "| mode | what you see, what you give up | batch at the seed's rate | "
        + " | ".join(f"$/M at {d:,.0f} a day" for d in per_day)
        + " | x Powertools at the seed's rate |",
        "|---|---|---|" + "---|" * len(volumes) + "---|",
    ]
    for r in report["as_shipped"]:
        sees = "-" if r["baseline"] else gives_up(modes[r["mode"]], r["level"])
        ratio = "1.00x" if r["baseline"] else _x(r["ratio_to_baseline"])
        lines.append(
            f"| {r['mode']} | {sees} | {_batch(r)} | "
            + " | ".join(_usd(r["volumes"][v]["total"]) for v in volumes)
            + f" | {ratio} |"
        )
    ages = report["audit"]["by_age"]
    aged = ", ".join(
        f"${_usd(day['per_million_uploads_inventory'])}/M at {name}" for name, day in ages.items()
    )
    split = [
        f"{_x(r['pollers_split']['ratio_to_baseline'])} from "
        f"{'S3' if _from_s3(modes[r['mode']]) else 'SQS'}"
        for r in report["as_shipped"]
        if r.get("pollers_split")
    ]
    lines += [
        "",
        "All-in: usage, the fixed monthly costs (alarms, custom metrics, schedule; the "
        "dashboard only with Observability full) spread over the month's messages, and the "
        "daily audit of a 1-month-old bucket as the defaults deploy it: from its S3 Inventory "
        "(AuditInventory auto, a daily report on the stack's own bucket; until the first "
        "report, a day or two, it lists), whose cost per upload grows with the bucket by the "
        f"report's price and storage ({aged}; docs/benchmarks.md, section 6). The batch "
        "workflow's batches are those one poller gathers in the 10 s window; if the pipe's "
        f"arrivals are shared by {PIPE_POLLERS_SHARING} pollers, as Lambda's are (not "
        f"verified for Pipes), it costs {' and '.join(split)} x Powertools.",
        "",
    ]
    for source, label in (("s3", "From S3"), ("sqs", "From SQS")):
        lines.append(
            f"- {label}, the cheapest all-in: {_picks(recommendations(report, source), per_day)}."
        )
    lines.append(
        "- STANDARD stays the default: the design card asks to see every execution in the "
        "console, and only STANDARD keeps them there."
    )
    return lines


def _split(split: Mapping[str, Any] | None) -> str:
    if not split:
        return "-"
    return f"{split['batch']:.2f}, {_usd(split['total'])} ({_x(split['ratio_to_baseline'])})"


def render_as_shipped(report: Mapping[str, Any]) -> list[str]:
    """Section 3: every mode's all-in bill as a user deploys it, with the baseline's."""
    seed = report["seed"]
    rows = report["as_shipped"]
    base = next(r for r in rows if r["baseline"])
    lines = ["", "## 3. The bill as shipped: all-in $/M, and the ratio to the baseline", ""]
    lines += [
        f"At the seed's rate ({seed['messages_per_second']:.3f} messages/s, "
        f"{seed['messages_per_day']:,.0f} a day, {seed['duplicate_share']:.2%} duplicates), "
        "each mode with the template's defaults (and the parameters the mode needs): the "
        "batches that form with the pipe's batch size and batching window, the template's "
        "log level, the fixed monthly costs counted from the template (section 3b) spread "
        "over the month's messages, and the daily audit of a bucket 1 month old (section 6 "
        "for 1 and 3 years). The baseline the same way: no batching window (Lambda's "
        "default), a DLQ alarm and its function's metrics. Beside it: the volume at 10x "
        "less and 10x more, what full batches and no fixed costs would give (not what "
        "ships), the bill if S3's events are free on EventBridge (not verified either "
        "way; the all-in charges them at $1.00/M), and the batch workflow's bill if the "
        f"pipe's arrivals are shared by {PIPE_POLLERS_SHARING} pollers, as by the five "
        "Lambda's SQS event source mapping starts with (how many pollers a pipe runs is "
        "not documented: not verified; the all-in assumes one gathering every arrival, "
        "the larger batches). A pipe with a batching window takes a ReceiveMessage for "
        "each message it gathers (it polls until the window closes; a long poll returns "
        "as soon as a message is there), one DeleteMessageBatch a batch.",
        "",
        "| mode | log level | batch | usage | fixed | audit | **all-in** | **x baseline** "
        "| all-in at 0.1x volume (x) | at 10x volume (x) | full batches, no fixed (x) "
        f"| S3 events free | {PIPE_POLLERS_SHARING} pollers sharing: batch, all-in (x) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["baseline"]:
            continue
        v = r["volumes"]
        low, high = v[str(report["volumes"][0])], v[str(report["volumes"][-1])]
        free = r["s3_events_free_total"]
        lines.append(
            f"| {r['mode']} | {r['level']} | {_batch(r)} | {_usd(r['variable'])} | "
            f"{_usd(r['fixed'])} | {_usd(r['audit'])} | **{_usd(r['total'])}** | "
            f"**{_x(r['ratio_to_baseline'])}** | {_usd(low['total'])} "
            f"({_x(low['ratio_to_baseline'])}) | {_usd(high['total'])} "
            f"({_x(high['ratio_to_baseline'])}) | {_usd(r['flattering']['total'])} "
            f"({_x(r['flattering']['ratio_to_baseline'])}) | "
            f"{'-' if free is None else _usd(free)} | {_split(r.get('pollers_split'))} |"
        )
    bv = base["volumes"]
    lines.append(
        f"| {base['mode']} | - | {_batch(base)} | {_usd(base['variable'])} | "
        f"{_usd(base['fixed'])} | 0 | **{_usd(base['total'])}** | **1.00x** | "
        f"{_usd(bv[str(report['volumes'][0])]['total'])} | "
        f"{_usd(bv[str(report['volumes'][-1])]['total'])} | "
        f"{_usd(base['flattering']['total'])} (batches of {base['flattering']['batch']}) | - "
        "| - |"
    )
    per_day = [float(v) * seed["messages_per_day"] for v in report["volumes"]]
    lines += [
        "",
        f"The cheapest all-in: {_picks(recommendations(report), per_day)}.",
        "",
        "### 3b. Fixed monthly costs, counted from template.yaml",
        "",
        "Every alarm (billed per metric it reads: a metric math alarm's every metric), "
        "dashboard, schedule and custom metric the template deploys with the mode's "
        "parameters; a custom metric is billed for the hours it is sent in (metric filters "
        "on the state machine's log: the Succeed states' only at ALL; the functions' EMF "
        "metrics, counted from their measured logs, with every invocation or audit run).",
        "",
        "| mode | alarms (alarm metrics) | dashboards | custom metrics (metric-months) "
        "| schedules | $/month | $/M at 0.1x | at 1x | at 10x |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in [*[r for r in rows if not r["baseline"]], base]:
        items = r["fixed_items"]
        alarms = [i for i in items if i["item"] == "alarm"]
        metrics = [i for i in items if i["item"] == "custom metric"]
        per_volume = [r["volumes"][str(v)]["fixed"] for v in report["volumes"]]
        lines.append(
            f"| {r['mode']} | {len(alarms)} ({sum(i['units'] for i in alarms):g}) | "
            f"{sum(1 for i in items if i['item'] == 'dashboard')} | "
            f"{sum(i['units'] for i in metrics):.2f} | "
            f"{sum(1 for i in items if i['item'] == 'schedule')} | "
            f"{r['fixed_usd_per_month']:.2f} | " + " | ".join(_usd(f) for f in per_volume) + " |"
        )
    return lines


def render_audit_by_age(a: Mapping[str, Any]) -> list[str]:
    """The audit's dollars per million uploads as the bucket ages, with and without Inventory."""
    units = a["units"]
    per_row = inventory_row_usd_per_day()
    kept = (
        INVENTORY_REPORTS_KEPT_DAYS
        * INVENTORY_ROW_GZIP_BYTES
        / 1024**3
        * PRICES["s3_storage_gb_month"].usd
        / DAYS_PER_MONTH
    )
    lines = [
        "",
        "A daily audit reads the ledger only for the uploads older than the "
        f"{a['recent_cutoff_hours']:g}-hour cutoff that the last successful run did not "
        "judge: its watermark less a day's margin, about two days of uploads, not the whole "
        "RetentionDays window. What it walks depends on where the objects come from. "
        "Measured above, per run: fixed "
        f"${units['fixed']:.6f}; per object listed ${units['per_listed_key'] * 1e6:.4f} "
        "per million (its Distributed Map child's transition and EXPRESS request, its "
        "Lambda invocation share, the LIST requests "
        f"${units['listing_per_key'] * 1e6:.4f} per million of it); per object checked "
        f"${units['per_checked_key'] * 1e6:.4f} per million on top. By listing "
        "(AuditInventory none, or an ExistingBucketName before you add its inventory) every "
        "object the bucket holds is listed and reaches a child every day: that part grows "
        "with the bucket's age. With a daily S3 Inventory (AuditInventory auto, the "
        "default, or Daily), SelectWindow streams the report and only the window's "
        "rows reach a child; what still grows with the bucket is the report's price, "
        "$0.0025 per million objects listed, the streaming "
        f"(${SELECT_GB_SECONDS_PER_ROW * PRICES['lambda_gb_second'].usd * 1e6:.5f} per "
        f"million rows at {SELECT_ROWS_PER_CPU_SECOND:,} rows a CPU second, measured on the "
        "development VM, not on Lambda), and the reports the output bucket keeps "
        f"({INVENTORY_REPORTS_KEPT_DAYS} daily reports, ExpireInventoryReports, each listing "
        f"every object in about {INVENTORY_ROW_GZIP_BYTES:.0f} gzip'd bytes: "
        f"${kept * 1e6:.4f} per million objects a day at S3 Standard's $0.023 per GB-month, "
        f"not verified): ${per_row * 1e6:.4f} per million objects a day.",
        "",
        "| bucket age | objects in the bucket | objects checked | $/day listing | $/M uploads "
        "| $/day with Inventory | $/M uploads with Inventory |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, day in a["by_age"].items():
        lines.append(
            f"| {name} | {day['listed_keys']:,.0f} | {day['checked_keys']:,.0f} | "
            f"{day['usd']:.2f} | {_usd(day['per_million_uploads'])} | "
            f"{day['usd_inventory']:.2f} | {_usd(day['per_million_uploads_inventory'])} |"
        )
    lines += [
        "",
        f"Inventory pays above {a['inventory_break_even_keys']:,.0f} objects (its run's reads "
        "and SelectWindow's invocation against what listing an object costs): from the "
        "first day at the seed's rate, which is why the default, AuditInventory auto, "
        "configures a daily Inventory on the stack's own bucket (its first report arrives "
        "within 48 hours; until then, a day or two for a fresh stack, and whenever the "
        "newest report is over 2 days old, the audit lists). As shipped the bill's audit "
        "is therefore the Inventory column. With it "
        "the audit's cost per upload grows with the bucket only by the report's price, "
        "its streaming and its storage (the table's last column). An SQS message pays only "
        f"the fixed part (the lock sweep and the report): "
        f"${_usd(a['usd_per_million_sqs_messages'][a['level']])}/M.",
    ]
    return lines


def render_audit(a: Mapping[str, Any]) -> list[str]:
    """Section 6: the local audit run, and its cost as the bucket ages."""
    lines = ["", "## 6. The audit", ""]
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
    lines += render_audit_by_age(a)
    return lines


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
        "| SFN log bytes ALL / ERROR | Lambda log bytes | row bytes | EXPRESS: WRU, index, row |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report["paths"]:
        index = ", ".join(f"{k} {v}" for k, v in p["index_wru"].items() if v) or "0"
        sqs = ", ".join(f"{k} {v}" for k, v in p["sqs_requests"].items()) or "0"
        lines.append(
            f"| {p['source']} | {p['path']} | "
            f"{outcome(p['states'][-1], p['status'] == 'SUCCEEDED')}, {p['status']} | "
            f"{p['transitions']} | {p['table_wru']} | {index} | "
            f"{p['conditional_failures']} | {p['rru']:g} | {p['lambda_invocations']} | {sqs} | "
            f"{p['sfn_log_bytes']['ALL']} / {p['sfn_log_bytes']['ERROR']} | "
            f"{p['function_log_bytes']} | {p['row_bytes']} | "
            f"{p['table_wru_express']}, {sum(p['index_wru_express'].values())}, "
            f"{p['row_bytes_express']} |"
        )
    for b in report["baseline_paths"]:
        lines.append(
            f"| baseline | {b['path']} | - | - | {b['table_wru']:g} | 0 | - | {b['rru']:g} | "
            f"{b['lambda_invocations']:g} | modelled | - | "
            f"{b['function_log_bytes_per_message']} + {b['function_log_bytes_per_batch']}/batch | "
            f"{b['row_bytes']} | - |"
        )
    lines += [
        "",
        "The batch workflow's rows are per execution (`messages` in results.json: 1 for "
        "happy-1, 10 for happy and duplicate). EXPRESS: the same writes with the "
        "execution's ARN in EXPRESS form (`...:express:machine:name:id`, 35 bytes longer "
        "in the lock owner and the claims), which the EXPRESS modes are billed.",
    ]
    lines += render_as_shipped(report)
    lines += ["", "## 4. Usage and audit by log level (no fixed costs), and the ratio", ""]
    lines += [
        "Configured state machine log levels: "
        + ", ".join(f"{m} {lv}" for m, lv in report["configured_log_levels"].items())
        + f" (the template's defaults: StateMachineLogLevel, Observability). Seed mix: "
        f"{SEED_DUPLICATE_SHARE:.2%} duplicates. Batches as they form at the seed's rate "
        "(section 3). Ratio: happy path against the baseline's happy path, at the same "
        "level (the baseline has no state machine logs). The audit: a 1-month-old bucket, "
        "listed (AuditInventory none; as shipped, sections 2 and 5, an S3 mode's audit "
        "reads its Inventory).",
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
    shipped = report["as_shipped"]
    lines += ["", "## 5. The happy path's bill by component, $/M, as shipped", ""]
    lines += [
        "At the seed's rate, each mode at its template log level and with the batches "
        "that form; the fixed monthly costs and the audit (1-month-old bucket) at the end.",
        "",
        "| component | " + " | ".join(r["mode"] for r in shipped) + " |",
        "|---|" + "---|" * len(shipped),
    ]
    for component in COMPONENTS:
        if component == "Audit, amortised":
            continue
        values = [r["components"][component] for r in shipped]
        lines.append(f"| {component} | " + " | ".join(_usd(v) for v in values) + " |")
    for label, key in (("Fixed monthly costs, amortised", "fixed"), ("Audit", "audit")):
        lines.append(f"| {label} | " + " | ".join(_usd(r[key]) for r in shipped) + " |")
    lines.append("| **all-in** | " + " | ".join(f"**{_usd(r['total'])}**" for r in shipped) + " |")
    lines += render_audit(report["audit"])
    lines += ["", "## 7. Throughput ceilings: which quota binds first", ""]
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
    lines += ["", "## 8. The duplicate path", ""]
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
    lines += ["", README_HEADING, ""]
    lines += render_readme_bill(report)
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


# The section of a run the README carries, between its markers (tests/unit/test_bench.py).
README_HEADING = "## The bill per mode (the README's table)"
README_START = "<!-- bench-bill:start (from bench/results.md, by onceflow bench) -->"
README_END = "<!-- bench-bill:end -->"


def readme_section(results_md: str) -> str:
    """The README's table out of a run's markdown."""
    _, rest = results_md.split(README_HEADING, 1)
    return rest.split("\n## ", 1)[0].strip()


def embed_readme(results_md: str, readme: Path) -> None:
    """Put a run's bill table into the README between its markers."""
    text = readme.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        raise ValueError(f"{readme} has no {README_START} ... {README_END} markers")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    body = readme_section(results_md)
    readme.write_text(f"{head}{README_START}\n{body}\n{README_END}{tail}", encoding="utf-8")


# Where docs/benchmarks.md shows the stored run (tests/unit/test_docs.py checks the copy).
PAGE_START = "<!-- bench:start (a copy of bench/results.md, its headings one level down) -->"
PAGE_END = "<!-- bench:end -->"


def embed(results_md: str, page: Path) -> None:
    """Put a run into the docs page between its markers, each heading one level down, and
    its bill table into the project's README (the page's ../README.md) when it has markers."""
    text = page.read_text(encoding="utf-8")
    if PAGE_START not in text or PAGE_END not in text:
        raise ValueError(f"{page} has no {PAGE_START!s} ... {PAGE_END} markers")
    head, rest = text.split(PAGE_START, 1)
    _, tail = rest.split(PAGE_END, 1)
    body = re.sub(r"^(#+) ", r"#\1 ", results_md.strip(), flags=re.MULTILINE)
    page.write_text(f"{head}{PAGE_START}\n{body}\n{PAGE_END}{tail}", encoding="utf-8")
    # The project's README carries the run's bill table: kept with the page.
    readme = page.parent.parent / "README.md"
    if readme.is_file() and README_START in readme.read_text(encoding="utf-8"):
        embed_readme(results_md, readme)


def write(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "results.json"
    md_path = directory / "results.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render(report) + "\n", encoding="utf-8")
    return json_path, md_path
