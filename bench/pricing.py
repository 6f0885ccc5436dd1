"""The bench's price list and the arithmetic of a bill as shipped: no engine, no measurement.

Prices and quotas are dated constants, each beside the page it was read on. The
rest turns what a deployment is (the template with its defaults) and what the
workload is (the seed's rate) into dollars: the batches that form at a rate
with a batching window, the fixed monthly costs counted from the template
(alarms, dashboards, custom metrics, schedules), and the audit's cost as a
function of the bucket's age, with and without S3 Inventory.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
import re
import string
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onceflow.local.template import NO_VALUE, Stack

# ---- prices ------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """A list price: dollars per unit, where it is published, what was read there."""

    usd: float
    unit: str
    source: str
    check: str  # what the stored copy of the source showed, or "not verified: ..."


# us-east-1 list prices, first tier, no free tier. Looked up (the `search` tool's
# stored copies of the pages named) on 2026-11-23 and, for the monthly and the
# EventBridge lines, 2026-11-27; "not verified" where the figure was not on an AWS
# page that could be read (the figure is then from the third-party summaries
# named in docs/benchmarks.md).
PRICES_AS_OF = "2026-11-27, us-east-1 list prices (first tier, free tiers left out)"
PRICES: dict[str, Price] = {
    "sfn_transition": Price(
        0.025 / 1000, "STANDARD state transition (retries included)",
        "https://aws.amazon.com/step-functions/pricing/",
        "read: $0.0250 per 1,000 state transitions, US East (N. Virginia); each retry is charged",
    ),
    "sfn_map_child": Price(
        0.025 / 1000, "Distributed Map child workflow started (one state transition each)",
        "https://docs.aws.amazon.com/step-functions/latest/dg/concepts-transitions.html",
        "read: in Distributed mode you are charged one state transition for each child "
        "workflow execution the Distributed Map state starts (the page's Korean and "
        "Japanese copies)",
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
        "not verified: the stored page defines the unit (1 KB a write) but shows no "
        "figure; third-party summaries of the November 2024 reduction give $0.625 per million",
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
    "eventbridge_s3_event": Price(
        1.00 / 1_000_000, "EventBridge event from S3 on the default bus ('AWS opt-in data event')",
        "https://aws.amazon.com/eventbridge/pricing/",
        "read: the page names S3's data plane events 'AWS opt-in data events' and makes "
        "only 'AWS management events' free; not verified: the opt-in price, taken as the "
        "$1.00 per million of custom events (third-party summaries still call AWS events "
        "free: the bill is shown both ways)",
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
    "cloudwatch_alarm_metric": Price(
        0.10, "CloudWatch alarm metric, standard resolution, month",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "read: alarms are billed per 'alarm metric' (the free tier: 10 alarm metrics of "
        "standard-resolution alarms); not verified: the $0.10 a month (third-party summaries)",
    ),
    "cloudwatch_dashboard": Price(
        3.00, "CloudWatch dashboard, month",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "read: the free tier is 3 dashboards of up to 50 metrics; not verified: the $3.00 "
        "a dashboard-month (third-party summaries)",
    ),
    "cloudwatch_custom_metric": Price(
        0.30, "CloudWatch custom metric, month (first 10,000; prorated by the hour)",
        "https://aws.amazon.com/cloudwatch/pricing/",
        "not verified: third-party summaries give $0.30 a metric-month, prorated by the "
        "hours in which the metric is sent",
    ),
    "scheduler_invocation": Price(
        1.00 / 1_000_000, "EventBridge Scheduler invocation (after 14 million a month free)",
        "https://aws.amazon.com/eventbridge/pricing/",
        "not verified: third-party summaries give $1.00 per million after 14 million free",
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
    "s3_storage_gb_month": Price(
        0.023, "S3 Standard storage, GB-month (first 50 TB)",
        "https://aws.amazon.com/s3/pricing/",
        "not verified on the AWS page: third-party summaries give $0.023 per GB-month",
    ),
    "s3_inventory_object": Price(
        0.0025 / 1_000_000, "S3 Inventory, object listed in a report",
        "https://aws.amazon.com/s3/pricing/",
        "not verified on the AWS page: billed per million objects listed (infracost's "
        "'Objects listed' meter); third-party summaries give $0.0025 per million",
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
    "express_sync": Quota(
        "Step Functions Synchronous Express concurrent executions (StartSyncExecution)",
        1000, "concurrent",
        "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html",
        "1,000 to 3,700 by region, the lower used (the guide's quota table, as archived in "
        "github.com/awsdocs/aws-step-functions-developer-guide limits-overview.md); "
        "StartSyncExecution is not under the 6,000/s StartExecution refill",
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

# ---- the workload ---------------------------------------------------------------

# The seed (README.md, "Why"): 507,706 notifications in 104 hours; duplicates up
# to 22,162 s apart.
SEED_NOTIFICATIONS = 507_706
SEED_HOURS = 104
SEED_MESSAGES_PER_SECOND = SEED_NOTIFICATIONS / (SEED_HOURS * 3600)
SEED_MESSAGES_PER_DAY = SEED_MESSAGES_PER_SECOND * 86_400
SEED_DUPLICATE_SHARE = 0.0003
SEED_LONGEST_DUPLICATE_GAP_SECONDS = 22_162
DAYS_PER_MONTH = 365.25 / 12
SECONDS_PER_MONTH = DAYS_PER_MONTH * 86_400
# The volumes the bill is shown at, as multiples of the seed's rate.
VOLUMES = (0.1, 1.0, 10.0)
# The bucket ages the audit is priced at, in days.
AUDIT_AGES = {"1 month": DAYS_PER_MONTH, "1 year": 365.25, "3 years": 3 * 365.25}
# What a daily audit judges against the ledger: the uploads since the last successful
# run's reach (its watermark), less a margin (functions/service/logic/audit.py,
# WATERMARK_MARGIN_SECONDS), not the whole RetentionDays window. The template's
# AuditSchedule runs it daily.
AUDIT_INTERVAL_DAYS = 1.0
AUDIT_WATERMARK_MARGIN_DAYS = 1.0
# SelectWindow streams an inventory report's rows in one Lambda call, keeping only the
# window's: rows of CPU a second, measured on the development VM (not on Lambda) by
# tests/unit/test_audit_select.py. Lambda gives a function CPU in proportion to its
# memory, a whole vCPU at 1,769 MB (configuration-memory.html): a row bills its CPU time
# times 1,769 MB whatever the memory below that.
SELECT_ROWS_PER_CPU_SECOND = 1_000_000
SELECT_GB_SECONDS_PER_ROW = 1769 / 1024 / SELECT_ROWS_PER_CPU_SECOND
# Each daily report lists every object, and the output bucket keeps the reports this many
# days (template.yaml, OutputBucket's ExpireInventoryReports, for a daily report:
# AuditInventory auto): an object's row is stored that many times over at any moment.
# (Whether S3 keeps a report a little longer, its expiry rounded to midnight UTC: not
# verified.)
INVENTORY_REPORTS_KEPT_DAYS = 3


def inventory_row_gzip_bytes(rows: int = 2_000) -> float:
    """A report row's gzip'd bytes, measured on synthetic rows of the template's columns
    (Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag) as
    S3 writes a CSV report (every field quoted; onceflow/local/inventory.py): a stack's
    bucket name, keys of a date prefix and a UUID, 32-character version ids and MD5 ETags,
    random as S3's are, so that they compress as little as real ones."""
    rng = random.Random(2026)
    alphabet = string.ascii_letters + string.digits + "._"
    text = io.StringIO(newline="")
    writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for _ in range(rows):
        day = rng.randint(1, 28)
        writer.writerow([
            "onceflow-ingestbucket-1q2w3e4r5t6y",
            f"uploads/2026/11/{day:02d}/{uuid.UUID(int=rng.getrandbits(128))}.jpg",
            "".join(rng.choice(alphabet) for _ in range(32)),
            "true", "false", str(rng.randint(50_000, 5_000_000)),
            f"2026-11-{day:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
            f"{rng.randint(0, 59):02d}.000Z",
            f"{rng.getrandbits(128):032x}",
        ])  # fmt: skip
    return len(gzip.compress(text.getvalue().encode("utf-8"), mtime=0)) / rows


INVENTORY_ROW_GZIP_BYTES = inventory_row_gzip_bytes()


def inventory_row_usd_per_day() -> float:
    """What an object in the bucket costs a day with a daily Inventory: its row's price, its
    streaming by SelectWindow, and its rows in the reports kept (S3 Standard storage)."""
    stored_gb = INVENTORY_REPORTS_KEPT_DAYS * INVENTORY_ROW_GZIP_BYTES / 1024**3
    return (
        PRICES["s3_inventory_object"].usd
        + SELECT_GB_SECONDS_PER_ROW * PRICES["lambda_gb_second"].usd
        + stored_gb * PRICES["s3_storage_gb_month"].usd / DAYS_PER_MONTH
    )


def months(days: float) -> float:
    return days / DAYS_PER_MONTH


# ---- batches --------------------------------------------------------------------


def poisson_pmf(k: int, mean: float) -> float:
    return math.exp(-mean + k * math.log(mean) - math.lgamma(k + 1)) if mean > 0 else float(k == 0)


def mean_batch(rate_per_second: float, window_seconds: float, max_batch: int) -> float:
    """The mean batch a poller hands over: its first message, and those that arrive
    within the batching window, up to the batch size.

    With a window W the first message opens the batch and the arrivals in W (Poisson
    at the rate) join it: E[min(B, 1 + N)], N ~ Poisson(rate x W). Without a window
    (W = 0, the default of Pipes and of Lambda's SQS event source mapping) a batch
    holds what one receive finds, which at a rate far below the pollers' throughput is
    one message. Several pollers sharing the arrivals make batches smaller still; this
    is the model's most generous reading.
    """
    if max_batch < 1:
        raise ValueError("a batch holds at least one message")
    mean = rate_per_second * max(window_seconds, 0.0)
    below = sum((1 + k) * poisson_pmf(k, mean) for k in range(max_batch - 1))
    full = 1.0 - sum(poisson_pmf(k, mean) for k in range(max_batch - 1))
    return below + max_batch * max(full, 0.0)


# ---- fixed monthly costs, counted from the template --------------------------------


@dataclass(frozen=True)
class MonthlyItem:
    """One fixed line of the monthly bill: a resource, how many units, what they cost."""

    item: str  # "alarm", "dashboard", "custom metric", "schedule"
    source: str  # the logical id (or the function a measured metric comes from)
    units: float  # alarm metrics, dashboards, metric-months, invocations
    usd: float
    note: str = ""


@dataclass(frozen=True)
class Deployment:
    """What a mode deploys, read from the template bound to its parameters."""

    parameters: Mapping[str, str]
    alarms: list[tuple[str, int]]  # (logical id, alarm metrics)
    dashboards: list[str]
    metric_filters: list[tuple[str, str, tuple[str, ...]]]  # (id, event type, state names)
    schedules: list[tuple[str, str]]  # (id, expression)
    pipe_batch_size: int
    pipe_window_seconds: float
    processor_log_level: str
    batch_log_level: str
    # The audit reads a daily S3 Inventory (the condition HasAuditInventory: AuditInventory
    # auto on the stack's own bucket, Daily or Weekly); False: it lists the bucket.
    audit_inventory: bool = False


def _alarm_metrics(properties: Mapping[str, Any]) -> int:
    """Alarm metrics one alarm is billed for: each metric it reads (a metric math
    alarm's every MetricStat; an expression alone reads none), or its one metric."""
    metrics = properties.get("Metrics")
    if not metrics:
        return 1
    return sum(1 for m in metrics if isinstance(m, Mapping) and "MetricStat" in m)


_FILTER_TYPE = re.compile(r'\$\.type\s*=\s*"([A-Za-z]+)"')
_FILTER_NAME = re.compile(r'\$\.details\.name\s*=\s*"([A-Za-z]+)"')


def read_deployment(template: Path, parameters: Mapping[str, str] | None = None) -> Deployment:
    """The monthly-billed resources a stack of this template creates with these parameters
    (its defaults for the rest): conditions resolved as CloudFormation resolves them."""
    stack = Stack.from_file(template, parameters)
    resources: dict[str, Any] = stack.template["Resources"]
    alarms, dashboards, filters, schedules = [], [], [], []
    for logical_id, resource in resources.items():
        if not stack.resource_enabled(logical_id):
            continue
        kind = resource.get("Type")
        properties = resource.get("Properties", {})
        if kind == "AWS::CloudWatch::Alarm":
            alarms.append((logical_id, _alarm_metrics(properties)))
        elif kind == "AWS::CloudWatch::Dashboard":
            dashboards.append(logical_id)
        elif kind == "AWS::Logs::MetricFilter":
            pattern = str(properties.get("FilterPattern", ""))
            kind_match = _FILTER_TYPE.search(pattern)
            filters.append((
                logical_id, kind_match.group(1) if kind_match else "",
                tuple(_FILTER_NAME.findall(pattern)),
            ))  # fmt: skip
        elif kind == "AWS::Scheduler::Schedule":
            schedules.append((logical_id, str(stack.resolve(properties["ScheduleExpression"]))))
        elif kind == "AWS::Serverless::StateMachine":
            for name, event in properties.get("Events", {}).items():
                if event.get("Type") in ("ScheduleV2", "Schedule"):
                    event_properties = event.get("Properties", {})
                    state = str(stack.resolve(event_properties.get("State", "ENABLED")))
                    if state == "ENABLED" and stack.resolve(event_properties.get("Enabled", True)):
                        expression = stack.resolve(event_properties["ScheduleExpression"])
                        schedules.append((f"{logical_id}.{name}", str(expression)))
    pipe = resources.get("SourcePipe")
    batch_size, window = 1, 0.0
    if pipe is not None and stack.resource_enabled("SourcePipe"):
        sqs = pipe["Properties"].get("SourceParameters", {}).get("SqsQueueParameters", {})
        # Absent (or AWS::NoValue): a batch of 10 and no window, the defaults of Lambda's
        # SQS event source mapping (services-sqs-parameters.html); Pipes': not verified.
        size = stack.resolve(sqs.get("BatchSize", 10))
        batch_size = 10 if size is NO_VALUE else int(size)
        resolved = stack.resolve(sqs.get("MaximumBatchingWindowInSeconds", 0))
        window = 0.0 if resolved in (None, "") or resolved is NO_VALUE else float(resolved)
    return Deployment(
        parameters=dict(stack.parameters),
        alarms=alarms,
        dashboards=dashboards,
        metric_filters=filters,
        schedules=schedules,
        pipe_batch_size=batch_size,
        pipe_window_seconds=window,
        processor_log_level=_log_level(stack, "ProcessorStateMachine"),
        batch_log_level=_log_level(stack, "BatchProcessorStateMachine"),
        # (a template without the condition, as older ones, lists)
        audit_inventory="HasAuditInventory" in stack.template.get("Conditions", {})
        and stack.condition("HasAuditInventory"),
    )


def _log_level(stack: Stack, logical_id: str) -> str:
    """A state machine's logging level as the template resolves it with these parameters
    (StateMachineLogLevel for the processor; Observability for the batch workflow)."""
    resource = stack.template["Resources"].get(logical_id, {})
    logging = resource.get("Properties", {}).get("Logging", {})
    return str(stack.resolve(logging.get("Level", "OFF")))


def runs_per_month(expression: str) -> float:
    """Runs a month of a rate(...) schedule; a cron(...) one is taken as daily (not parsed)."""
    match = re.fullmatch(r"rate\((\d+)\s+(minute|hour|day)s?\)", expression.strip())
    if not match:
        return DAYS_PER_MONTH
    every = int(match.group(1)) * {"minute": 60, "hour": 3600, "day": 86_400}[match.group(2)]
    return SECONDS_PER_MONTH / every


def metric_hours_share(events_per_hour: float) -> float:
    """The share of hours in which a metric is sent, for events arriving at random
    (Poisson) at this rate: custom metrics are billed by the hours they are sent in."""
    return 1.0 - math.exp(-max(events_per_hour, 0.0))


@dataclass(frozen=True)
class EmfMetric:
    """A metric a function publishes in Embedded Metric Format (as measured from its log)."""

    namespace: str
    name: str
    dimensions: tuple[str, ...]


def emf_metrics(lines: Iterable[str]) -> set[EmfMetric]:
    """Every distinct metric (namespace, name, dimension set) in these log lines' EMF blobs."""
    found: set[EmfMetric] = set()
    for line in lines:
        if '"_aws"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a log line that only mentions "_aws" is not an EMF blob
        for directive in record.get("_aws", {}).get("CloudWatchMetrics", []):
            for dimensions in directive.get("Dimensions") or [[]]:
                for metric in directive.get("Metrics", []):
                    found.add(EmfMetric(
                        directive.get("Namespace", ""), metric["Name"], tuple(sorted(dimensions)),
                    ))  # fmt: skip
    return found


@dataclass(frozen=True)
class MetricSource:
    """Custom metrics sent at a rate: a function's EMF metrics, or state outcomes' rates."""

    label: str
    metrics: int
    events_per_hour: float  # how often each is sent; at most once an hour counts once


def monthly_items(
    deployment: Deployment,
    outcome_rates: Mapping[str, float],
    measured: Iterable[MetricSource] = (),
    batch_mode: bool = False,
) -> list[MonthlyItem]:
    """The fixed monthly bill of a deployment.

    ``outcome_rates`` are the end states' rates a second (Processed, Duplicate, ...):
    a metric filter's metric is sent in the hours its state is logged, and only at a
    level that logs its event type (a Succeed state at ALL, a Fail state at ERROR too).
    """
    items = [
        MonthlyItem(
            "alarm",
            alarm,
            metrics,
            metrics * PRICES["cloudwatch_alarm_metric"].usd,
            f"{metrics} alarm metrics" if metrics != 1 else "",
        )
        for alarm, metrics in deployment.alarms
    ]
    items += [
        MonthlyItem("dashboard", d, 1, PRICES["cloudwatch_dashboard"].usd)
        for d in deployment.dashboards
    ]
    level = deployment.batch_log_level if batch_mode else deployment.processor_log_level
    for filter_id, event_type, names in deployment.metric_filters:
        logged = level == "ALL" or event_type in ("FailStateEntered",)
        per_second = sum(outcome_rates.get(n, 0.0) for n in names) if logged else 0.0
        share = metric_hours_share(per_second * 3600)
        items.append(MonthlyItem(
            "custom metric", filter_id, share, share * PRICES["cloudwatch_custom_metric"].usd,
            f"sent in {share:.0%} of hours at {level}",
        ))  # fmt: skip
    for source in measured:
        share = metric_hours_share(source.events_per_hour)
        units = source.metrics * share
        items.append(MonthlyItem(
            "custom metric", source.label, units, units * PRICES["cloudwatch_custom_metric"].usd,
            f"{source.metrics} metrics, sent in {share:.0%} of hours",
        ))  # fmt: skip
    for schedule, expression in deployment.schedules:
        runs = runs_per_month(expression)
        items.append(MonthlyItem(
            "schedule", schedule, runs, runs * PRICES["scheduler_invocation"].usd, expression,
        ))  # fmt: skip
    return items


def amortised(monthly_usd: float, messages_per_second: float) -> float:
    """Dollars a message of a fixed monthly cost at this rate."""
    return monthly_usd / (messages_per_second * SECONDS_PER_MONTH)


# ---- the audit, as the bucket ages -------------------------------------------------


@dataclass(frozen=True)
class AuditUnits:
    """What one audit run costs, split by what it grows with (dollars, measured locally).

    ``fixed``: a run over no objects (the plan, the lock sweep, the report).
    ``per_listed_key``: each object the walk reaches (its share of the listing, of a
    Distributed Map child and its transition, of a Lambda invocation).
    ``per_checked_key``: each object inside the retention window and older than the
    recent cutoff, on top (its ledger read).
    ``listing_per_key``: the part of ``per_listed_key`` that is LIST requests, which an
    S3 Inventory report replaces.
    """

    fixed: float
    per_listed_key: float
    per_checked_key: float
    listing_per_key: float
    inventory_fixed: float = 0.0  # a run's reads of the manifest and its CSV files


@dataclass(frozen=True)
class AuditDay:
    age_days: float
    listed_keys: float
    checked_keys: float
    usd: float
    usd_inventory: float
    per_million_uploads: float
    per_million_uploads_inventory: float


def audit_day(
    units: AuditUnits,
    uploads_per_second: float,
    age_days: float,
    retention_days: float,
    recent_cutoff_hours: float,
    judged_days: float = AUDIT_INTERVAL_DAYS + AUDIT_WATERMARK_MARGIN_DAYS,
) -> AuditDay:
    """A daily audit of a bucket that has taken uploads at this rate for ``age_days``.

    By listing, the walk reaches every current object (the stack deletes none,
    old versions neither): each pays its share of the LIST
    requests, of a Distributed Map child and its transition, of a Lambda invocation; the
    ledger is read for those inside the window that the last successful run did not judge
    (``judged_days`` of uploads: the interval and the watermark's margin). With a daily
    Inventory, the report bills every object in it ($0.0025 per million) and SelectWindow
    streams every row (its Lambda time); only the window's rows reach a child.
    """
    per_day = uploads_per_second * 86_400
    listed = per_day * age_days
    window = max(0.0, min(age_days, retention_days) - recent_cutoff_hours / 24)
    checked = per_day * min(window, judged_days)
    usd = units.fixed + listed * units.per_listed_key + checked * units.per_checked_key
    per_row = inventory_row_usd_per_day()
    per_window_row = units.per_listed_key - units.listing_per_key + units.per_checked_key
    inventory = units.fixed + units.inventory_fixed + listed * per_row + checked * per_window_row
    return AuditDay(
        age_days, listed, checked, usd, inventory, usd / per_day * 1e6, inventory / per_day * 1e6
    )


def inventory_break_even_keys(units: AuditUnits) -> float:
    """Objects in the bucket above which a daily Inventory costs the audit less than listing:
    each object listed costs ``per_listed_key``, each in an inventory its price and its
    streaming, and the inventory run its fixed reads (the window's rows cost alike)."""
    per_row = inventory_row_usd_per_day()
    saving = units.per_listed_key - per_row
    return math.inf if saving <= 0 else units.inventory_fixed / saving


@dataclass
class ModeBill:
    """A mode's all-in dollars a message at one volume, in the parts that make it."""

    volume: float  # multiple of the seed's rate
    messages_per_second: float
    batch: float  # mean messages an execution (or an invocation) handles
    variable: float
    fixed: float
    audit: float
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return self.variable + self.fixed + self.audit
