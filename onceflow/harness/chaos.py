"""The chaos harness: a seeded fault-injection run, the audit, then an exactly-once check.

Jepsen-style: record what happened (every delivery, every injected fault),
then check invariants over the end state: S3's request log (effects), the
ledger, the DLQ. The run is repeatable for a seed.
"""

from __future__ import annotations

import io
import json
import random
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TextIO

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
    processed_twice,
    render_during,
    s3_event,
    small_png,
)
from onceflow.local import patches
from onceflow.local.engine import ExecutionResult, LocalEngine
from onceflow.local.target import LocalTarget
from onceflow.view.units import per_message, units

# The fault kinds an object can get (at most one each), besides duplicates.
FAULT_KINDS = (
    "lost",
    "poison",
    "transient",
    "claim_throttle",
    "complete_throttle",
    "lock_expiry",
    "crash_after_effect",
)
AUDIT_KEYS = (
    "scanned",
    "missing_resubmitted",
    "failed_resubmitted",
    "stuck_released",
    "dead_lettered_skipped",
)
CONCURRENT_GAP = 0.1  # seconds: a duplicate closer than this runs alongside the first


@dataclass
class ChaosConfig:
    objects: int = 2000
    seed: int = 11
    concurrency: int = 8
    # The seed measured about 0.03 % of keys duplicated; raised so they are plentiful.
    duplicate_rate: float = 0.05
    triple_share: float = 0.25
    # True: S3 delivers the ingest bucket's Inventory report before each audit, which then
    # walks the report (SelectWindow, AuditInventory) instead of listing the bucket.
    inventory: bool = False
    # Audits started while the deliveries run, spread over them (0: none; the audits
    # after the deliveries run all the same).
    audit_during: int = 0
    rates: dict[str, float] = field(
        default_factory=lambda: {
            "lost": 0.01,
            "poison": 0.01,
            "transient": 0.03,
            "claim_throttle": 0.01,
            "complete_throttle": 0.01,
            "lock_expiry": 0.005,
            "crash_after_effect": 0.005,
        }
    )


@dataclass
class Delivery:
    obj: DemoObject
    copy: int
    at: float  # virtual seconds after the first delivery of its object


def duplicate_gap(rng: random.Random) -> float:
    """A gap between two deliveries of one event, as the seed measured them.

    62 ms to 22,162 s (about six hours), most within 15 s; a fifth of them
    under 100 ms, so that both deliveries are in flight at once.
    """
    draw = rng.random()
    if draw < 0.2:
        return rng.uniform(0.062, CONCURRENT_GAP)
    if draw < 0.8:
        return rng.uniform(CONCURRENT_GAP, 15.0)
    return float(10 ** rng.uniform(1.176, 4.346))  # 15 s .. 22,162 s, log-uniform


class Injector:
    """Every fault, keyed by object key; counts what actually fired."""

    def __init__(self, engine: LocalEngine, faults: dict[str, str]) -> None:
        self.engine = engine
        self.faults = faults  # object key -> fault kind
        self.fired: Counter[str] = Counter()
        self._done: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._real = engine.runtime.load(
            engine.runtime.functions[engine.function_name("ProcessorFunction")]
        )
        self.events: dict[str, dict[str, Any]] = {}
        self.crashed: list[str] = []  # idempotency keys whose worker died

    def once(self, key: str, kind: str) -> bool:
        """True the first time (key, kind) asks: each fault fires once per object."""
        with self._lock:
            if self.faults.get(key) != kind or (key, kind) in self._done:
                return False
            self._done.add((key, kind))
            self.fired[kind] += 1
            return True

    # -- DynamoDB throttling, at the service (what Step Functions sees) --------

    def dynamodb(self, service: str, operation: str, body: str) -> Any:
        if service != "dynamodb" or operation not in ("PutItem", "UpdateItem"):
            return None
        try:
            request = json.loads(body)
        except ValueError:
            return None
        pk = (request.get("Item") or request.get("Key") or {}).get("pk", {}).get("S", "")
        key = pk.split("/", 3)[-1].rsplit("#", 1)[0] if pk.startswith("s3://") else ""
        if not key:
            return None
        if operation == "PutItem" and self.once(key, "claim_throttle"):
            return patches.dynamodb_error(
                "ProvisionedThroughputExceededException", "injected: Claim throttled"
            )
        completing = ":processed" in str(request.get("ExpressionAttributeValues", {}))
        if operation == "UpdateItem" and completing and self.once(key, "complete_throttle"):
            return patches.dynamodb_error(
                "ProvisionedThroughputExceededException", "injected: MarkComplete throttled"
            )
        return None

    # -- the processor -------------------------------------------------------

    def processor(self, event: dict[str, Any], context: Any) -> Any:
        key = str(event["workItem"].get("key", ""))
        if self.once(key, "transient"):
            raise TransientError(f"injected: S3 SlowDown reading {key}")
        if self.once(key, "lock_expiry"):
            # This worker stalls past its lock: the lock expires, a redelivery
            # takes the work over and finishes it, then this worker wakes up.
            self._expire_lock(event["workItem"]["idempotencyKey"])
            for arn in self.engine.put_event(self.events[key]):
                self.engine.wait(arn)
            return self._real(event, context)
        if self.once(key, "crash_after_effect"):
            # The side effect happens, then the worker dies before MarkComplete:
            # the execution is aborted and its row stays PROCESSING under a lock.
            output = self._real(event, context)
            self.crashed.append(str(event["workItem"]["idempotencyKey"]))
            self.engine.client("stepfunctions").stop_execution(
                executionArn=str(event["lockToken"]),
                error="CrashAfterEffect",
                cause=f"injected: the worker died after writing the output of {key}",
            )
            return output
        return self._real(event, context)

    def expire_crashed_locks(self) -> None:
        """An hour passes: the dead workers' locks expire, past the sweep's margin."""
        for pk in self.crashed:
            self._expire_lock(pk, seconds_ago=3600)

    def _expire_lock(self, pk: str, seconds_ago: int = 1) -> None:
        self.engine.client("dynamodb").update_item(
            TableName=self.engine.ref("LedgerTable"),
            Key={"pk": {"S": pk}},
            UpdateExpression="SET lock_expires_at = :past",
            ExpressionAttributeValues={":past": {"N": str(int(time.time()) - seconds_ago)}},
        )


def _plan(config: ChaosConfig, rng: random.Random, keys: list[str]) -> dict[str, str]:
    """Which object gets which fault: round(rate x objects) of each, at least one."""
    faults: dict[str, str] = {}
    free = list(keys)
    rng.shuffle(free)
    for kind in FAULT_KINDS:
        rate = config.rates.get(kind, 0.0)
        if rate <= 0:
            continue
        count = max(1, round(rate * len(keys)))
        for key in free[:count]:
            faults[key] = kind
        free = free[count:]
    return faults


def run_chaos(config: ChaosConfig, progress: TextIO | None = None) -> dict[str, Any]:
    if not 1 <= config.objects <= 10_000:
        raise ValueError("objects must be between 1 and 10000")
    if config.audit_during < 0:
        raise ValueError("--audit-during: a number of audits, 0 or more")
    rng = random.Random(config.seed)
    # WARNING: thousands of executions' INFO lines would pile up in memory, and
    # the measured figures are the engine's, not the logger's.
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0"},
        function_log=io.StringIO(),
        function_log_level="WARNING",
    ) as engine:
        bucket = engine.ref("IngestBucket")
        s3 = engine.client("s3")
        keys = [f"chaos/object-{n:05d}.png" for n in range(config.objects)]
        faults = _plan(config, rng, keys)
        objects: dict[str, DemoObject] = {}
        sizes: dict[str, int] = {}
        uploads = Progress(len(keys), "uploading ", progress)
        for key in keys:
            poison = faults.get(key) == "poison"
            body = rng.randbytes(64) if poison else small_png(rng)
            version = s3.put_object(Bucket=bucket, Key=key, Body=body)["VersionId"]
            objects[key] = DemoObject(key, version, processable=not poison)
            sizes[key] = len(body)
            uploads.advance()

        injector = Injector(engine, faults)
        injector.fired["poison"] = sum(not o.processable for o in objects.values())
        deliveries: list[Delivery] = []
        gaps: list[float] = []
        for index, key in enumerate(keys):
            obj = objects[key]
            injector.events[key] = s3_event(
                bucket, key, sizes[key], version_id=obj.version_id, copy=99
            )
            if faults.get(key) == "lost":
                injector.fired["lost"] += 1
                continue
            start = index * 0.02  # virtual: 50 uploads a second
            copies = 1
            if rng.random() < config.duplicate_rate:
                copies = 3 if rng.random() < config.triple_share else 2
            obj.deliveries = copies
            deliveries.append(Delivery(obj, 1, start))
            for n in range(2, copies + 1):
                gap = duplicate_gap(rng)
                gaps.append(gap)
                obj.concurrent_duplicate |= gap < CONCURRENT_GAP
                deliveries.append(Delivery(obj, n, start + gap))
        # Virtual time, compressed: the order is kept, the waiting is not.
        # Deliveries closer than CONCURRENT_GAP run at the same moment.
        deliveries.sort(key=lambda d: d.at)

        engine.state.requests.clear()
        results: list[tuple[Delivery, ExecutionResult]] = []
        results_lock = threading.Lock()
        bar = Progress(len(deliveries), "delivering", progress)
        target = LocalTarget(engine)
        during = AuditsDuring(
            config.audit_during,
            len(deliveries),
            lambda n: _audit(engine, target, config.inventory, name=f"chaos-during-{n}"),
        )

        def deliver(delivery: Delivery) -> None:
            obj = delivery.obj
            event = s3_event(
                bucket, obj.key, sizes[obj.key], version_id=obj.version_id, copy=delivery.copy
            )
            span = None
            for arn in engine.put_event(event):
                result = engine.wait(arn, timeout=600)
                span = execution_span(result)
                with results_lock:
                    results.append((delivery, result))
            bar.advance()
            during.advance(span=span)

        engine.state.faults.append(injector.dynamodb)
        try:
            with (
                engine.override_function("ProcessorFunction", injector.processor),
                ThreadPoolExecutor(max_workers=config.concurrency) as pool,
            ):
                list(pool.map(deliver, deliveries))
                audits_during = during.finish()
                engine.wait_for_running("ProcessorStateMachine")
        finally:
            engine.state.faults.remove(injector.dynamodb)

        injector.expire_crashed_locks()
        if progress is not None:
            progress.write("auditing  the bucket against the ledger\n")
        audit = _audit(engine, target, config.inventory)
        again = _audit(engine, target, config.inventory)
        report = _check(engine, bucket, objects, faults, audit, again, audits_during)
        # Per message: a batch execution counts each of its messages, once.
        ran = [unit for _, result in results for unit in units(result)]
        outcomes = Counter(unit.end_state for unit in per_message(ran))
        # Every execution of the processor, the deliveries' and those the audits and the
        # injected takeovers started: one of them at most processes an object.
        delivered = {result.arn for _, result in results}
        started = [
            engine.wait(arn, timeout=600) for arn in _processor_runs(engine) if arn not in delivered
        ]
        everything = ran + [unit for result in started for unit in units(result)]
        report["violations"] += [
            {"invariant": "one message processes an object", "key": key, "detail": ""}
            for key in processed_twice(everything)
        ]

    report.update(
        {
            "seed": config.seed,
            "deliveries": len(deliveries),
            "duplicate_deliveries": sum(d.copy > 1 for d in deliveries),
            "duplicate_gap_seconds": {
                "min": round(min(gaps), 3) if gaps else None,
                "median": round(statistics.median(gaps), 3) if gaps else None,
                "max": round(max(gaps), 1) if gaps else None,
                "planned_under_100ms": sum(g < CONCURRENT_GAP for g in gaps),
            },
            "faults_injected": {
                "duplicate_delivery": sum(d.copy > 1 for d in deliveries),
                **{kind: injector.fired[kind] for kind in FAULT_KINDS},
            },
            "executions": dict(sorted(outcomes.items())),
        }
    )
    return report


def _processor_runs(engine: LocalEngine) -> list[str]:
    """Every execution of the processor the run started (none is still running)."""
    from onceflow.local import executions

    return [e["executionArn"] for e in executions.listed(engine, "ProcessorStateMachine")]


def _audit(
    engine: LocalEngine, target: LocalTarget, inventory: bool, name: str | None = None
) -> dict[str, Any]:
    """One audit; with ``inventory``, from the report S3 delivers just before it."""
    if inventory:
        engine.deliver_inventory()
    report = ops.run_audit(target, name=name)
    if inventory and report.get("source") != "inventory":
        raise RuntimeError(f"the audit walked the {report.get('source')}, not the inventory")
    return report


def _check(
    engine: LocalEngine,
    bucket: str,
    objects: dict[str, DemoObject],
    faults: dict[str, str],
    audit: dict[str, Any],
    again: dict[str, Any],
    audits_during: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The invariants, over S3's request log, the ledger and the DLQ; ``audits_during``:
    the records of the audits run while the deliveries ran (AuditsDuring)."""
    effects = effects_by_idempotency_key(engine, engine.ref("OutputBucket"))
    dlq = drain(engine, engine.ref("DeadLetterQueue"))
    dlq_keys = Counter(
        m.get("MessageAttributes", {}).get("IDEMPOTENCY_KEY", {}).get("StringValue") for m in dlq
    )
    rows: dict[str, dict[str, Any]] = {}
    dynamodb = engine.client("dynamodb")
    for page in dynamodb.get_paginator("scan").paginate(TableName=engine.ref("LedgerTable")):
        for item in page["Items"]:
            rows[item["pk"]["S"]] = {k: next(iter(v.values())) for k, v in item.items()}

    violations: list[dict[str, str]] = []
    histogram: Counter[int] = Counter()
    poison_keys = {o.idempotency_key(bucket) for o in objects.values() if not o.processable}
    for obj in objects.values():
        pk = obj.idempotency_key(bucket)
        count = effects.get(pk, 0)
        histogram[count] += 1
        row = rows.get(pk, {})
        if obj.processable and count != 1:
            violations.append({"invariant": "one effect per processable object", "key": pk,
                               "detail": f"{count} effects"})  # fmt: skip
        if obj.processable and row.get("status") != "PROCESSED":
            violations.append({"invariant": "processable work ends PROCESSED", "key": pk,
                               "detail": f"row {row.get('status')}"})  # fmt: skip
        if not obj.processable and count:
            violations.append({"invariant": "no effect for poison", "key": pk,
                               "detail": f"{count} effects"})  # fmt: skip
        if not obj.processable and (
            dlq_keys[pk] != 1 or row.get("status") != "FAILED" or "dead_lettered_at" not in row
        ):
            violations.append({"invariant": "poison: one DLQ message and a FAILED row",
                               "key": pk, "detail": f"{dlq_keys[pk]} messages, row "
                               f"{row.get('status')}"})  # fmt: skip
        if row.get("status") == "PROCESSED" and dlq_keys[pk]:
            violations.append({"invariant": "no DLQ message for processed work", "key": pk,
                               "detail": f"{dlq_keys[pk]} messages"})  # fmt: skip
    for pk, n in dlq_keys.items():
        if pk not in poison_keys:
            violations.append({"invariant": "DLQ messages only for poison", "key": str(pk),
                               "detail": f"{n} messages"})  # fmt: skip
    for pk, row in rows.items():
        if row.get("status") == "PROCESSING":
            violations.append({"invariant": "no row left PROCESSING", "key": pk, "detail": ""})
    for record in audits_during or []:
        if "error" in record:
            violations.append({"invariant": "every audit runs to its report",
                               "key": f"audit during {record['number']}",
                               "detail": record["error"]})  # fmt: skip
    resubmitted_again = (
        again["missing_resubmitted"] + again["failed_resubmitted"] + again["stuck_released"]
    )
    if resubmitted_again:
        violations.append({"invariant": "a second audit finds nothing", "key": "",
                           "detail": f"{resubmitted_again} resubmitted"})  # fmt: skip
    output_bucket = engine.ref("OutputBucket")
    blocked = sum(
        1
        for r in engine.state.requests.snapshot()
        if r.service == "s3" and r.operation == "PutObject" and r.bucket == output_bucket
        and r.status == 412
    )  # fmt: skip
    return {
        "objects": len(objects),
        "second_effects_blocked_by_the_sink": blocked,
        "poison_objects": sum(not o.processable for o in objects.values()),
        "effects_histogram": {str(n): c for n, c in sorted(histogram.items())},
        "dead_letter_messages": len(dlq),
        "audits_during": [during_record(r, AUDIT_KEYS) for r in audits_during or []],
        "audit": {k: audit.get(k, 0) for k in AUDIT_KEYS},
        "second_audit_resubmitted": resubmitted_again,
        "violations": violations,
        "faulted_objects": len(faults),
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        "",
        "onceflow chaos: report",
        f"  seed {report['seed']}, objects {report['objects']} "
        f"({report['poison_objects']} poison), deliveries {report['deliveries']}",
        "  faults injected   "
        + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in report["faults_injected"].items()),
        "  duplicate gaps    "
        + ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in report["duplicate_gap_seconds"].items()
        ),
        "  executions        " + ", ".join(f"{k} {v}" for k, v in report["executions"].items()),
        *render_during(report.get("audits_during", [])),
        "  audit             " + ", ".join(f"{k} {v}" for k, v in report["audit"].items()),
        f"  second audit      {report['second_audit_resubmitted']} resubmitted",
        "  effects per object "
        + ", ".join(f"{n}: {c}" for n, c in report["effects_histogram"].items()),
        f"  DLQ messages      {report['dead_letter_messages']}",
        "",
    ]
    if report["violations"]:
        lines.append(f"VIOLATIONS ({len(report['violations'])}):")
        lines += [f"  - {v['invariant']}: {v['key']} {v['detail']}" for v in report["violations"]]
    else:
        lines.append("invariants: all hold (exactly once)")
    return "\n".join(lines)
