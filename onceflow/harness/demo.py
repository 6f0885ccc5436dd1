"""The demo: deliver a bucket's events "probably once" and prove each object took effect once."""

from __future__ import annotations

import io
import json
import random
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from PIL import Image

from onceflow import ops
from onceflow.harness.common import (
    DemoObject,
    Progress,
    TransientError,
    demo_parameters,
    drain,
    effects_by_idempotency_key,
    processed_twice,
    s3_event,
    s3_notification,
)
from onceflow.local.engine import ExecutionResult, LocalEngine
from onceflow.local.server import SharedEngine, engine_for
from onceflow.local.target import LocalTarget
from onceflow.ops import AUDIT_LABELS
from onceflow.project import template_or_bundled
from onceflow.view import records, units

# Passes of the pipes over the source queue: enough for a message a batch kept to come
# back and settle (its receives stay below SourceQueueMaxReceiveCount).
_PIPE_PASSES = 4


@dataclass
class DemoConfig:
    objects: int = 200
    corrupt: int = 5
    seed: int = 7
    duplicate_rate: float = 0.05
    triple_share: float = 0.3
    concurrent_share: float = 0.5
    loss_rate: float = 0.01
    transient_rate: float = 0.05
    concurrency: int = 8
    source: str = "s3"
    # The stack's template; None: the nearest template.yaml upward from here.
    template: Path | None = None


def _image_bytes(rng: random.Random) -> bytes:
    width, height = rng.randint(32, 800), rng.randint(32, 600)
    color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    image = Image.new("RGB", (width, height), color)
    out = io.BytesIO()
    image.save(out, format=rng.choice(["PNG", "JPEG"]))
    return out.getvalue()


@dataclass
class DemoReport:
    """Everything the demo observed, from the executions, the DLQ and S3's request log."""

    data: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        d = self.data
        lines = [
            "",
            "onceflow demo: report",
            f"  delivered through           {d['source']}",
            f"  objects uploaded            {d['objects']}  ({d['corrupt_objects']} corrupt)",
            f"  deliveries                  {d['deliveries']}"
            + (f"  (in {d['batch_executions']} batches)" if d["batch_executions"] else ""),
            f"  duplicate deliveries        {d['duplicate_deliveries']}"
            f"  ({d['concurrent_duplicates']} concurrent with the first)",
            f"  duplicates discarded        {d['duplicates_discarded']}",
            f"  lost deliveries             {d['lost_deliveries']}",
            f"  transient failures injected {d['transient_failures_injected']}",
            (
                "  messages by outcome         "
                if d["batch_executions"]
                else "  executions by outcome       "
            )
            + ", ".join(f"{k} {v}" for k, v in sorted(d["executions"].items())),
            f"  dead-lettered               {d['dead_lettered']}",
            "  effects per object          "
            + ", ".join(f"{k} effect(s): {v}" for k, v in sorted(d["effects_histogram"].items())),
            f"  objects with >1 effect      {d['objects_with_multiple_effects']}",
            "  processable objects, no effect     "
            f"{d['delivered_processable_objects_without_effect']}",
            f"  undelivered, found by the audit    {len(d['undelivered_objects'])}",
        ]
        lines += [f"    - {key}" for key in d["undelivered_objects"]]
        # Per message: a batch (SqsBatchMode) runs many in one execution.
        lines += [
            f"  messages without an outcome        {d['messages_without_outcome']}",
            f"  objects processed by two messages  {d['objects_processed_by_two_messages']}",
        ]
        if d["source"] == "sqs":
            lines.append(f"  messages left in the source queue  {d['messages_left_in_queue']}")
        lines.append("  audit (after the deliveries)")
        lines += [f"    {label:<36} {d['audit'].get(key, 0)}" for key, label in AUDIT_LABELS]
        lines.append(f"  a second audit resubmitted         {d['second_audit_resubmitted']}")
        lines.append("")
        lines.append("exactly once: " + ("OK" if d["exactly_once"] else "VIOLATED"))
        return "\n".join(lines)


def run_demo(
    config: DemoConfig,
    progress: TextIO | None = sys.stderr,
    record: bool = False,
    shared: SharedEngine | None = None,
    stack: str | None = None,
) -> DemoReport:
    """Run the demo; `record`: save its executions (records.py), as run on `stack`.

    On a fresh local engine, or inside `onceflow up` on the running one (``shared``): there
    its objects go under a prefix of their own, its audits walk only that
    prefix, and its verdict counts only its own objects, dead letters and
    resubmissions, whatever else the stack holds.
    """
    if config.source not in ("s3", "sqs"):
        raise ValueError(f"source must be s3 or sqs, not {config.source!r}")
    rng = random.Random(config.seed)
    parameters = demo_parameters(config.source)
    run_prefix = f"runs/{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**6:06d}/"
    run_prefix = run_prefix if shared is not None else ""

    def fresh() -> LocalEngine:
        template = config.template or template_or_bundled()
        return LocalEngine(template, parameters, function_log=io.StringIO())

    with engine_for(shared, parameters, fresh) as engine:
        if shared is not None and progress is not None:
            progress.write(f"running   on the local engine of onceflow up, under {run_prefix}\n")
        elif progress is not None:
            progress.write(
                "running   on a fresh, empty local stack, gone when the demo ends "
                "(`onceflow up` keeps one for the commands after it)\n"
            )
        bucket = engine.ref("IngestBucket")
        output_bucket = engine.ref("OutputBucket")
        s3 = engine.client("s3")

        objects: list[DemoObject] = []
        sizes: dict[str, int] = {}
        uploads = Progress(config.objects + config.corrupt, "uploading ", progress)
        for index in range(config.objects + config.corrupt):
            processable = index < config.objects
            if processable:
                key, body = f"{run_prefix}uploads/image-{index:05d}.img", _image_bytes(rng)
            else:
                key, body = f"{run_prefix}uploads/corrupt-{index:05d}.jpg", rng.randbytes(512)
            version = s3.put_object(Bucket=bucket, Key=key, Body=body)["VersionId"]
            objects.append(DemoObject(key, version, processable))
            sizes[key] = len(body)
            uploads.advance()

        # "Probably once": some objects lost, some delivered two or three times.
        first_wave: list[tuple[DemoObject, int]] = []
        late_wave: list[tuple[DemoObject, int]] = []
        for obj in objects:
            if rng.random() < config.loss_rate:
                continue
            copies = 1
            if rng.random() < config.duplicate_rate:
                copies = 3 if rng.random() < config.triple_share else 2
            obj.deliveries = copies
            obj.inject_transient = obj.processable and rng.random() < config.transient_rate
            first_wave.append((obj, 1))
            if copies > 1 and rng.random() < config.concurrent_share:
                # A duplicate less than 100 ms behind: both run at the same time.
                obj.concurrent_duplicate = True
                first_wave.append((obj, 2))
                late_wave += [(obj, n) for n in range(3, copies + 1)]
            else:
                late_wave += [(obj, n) for n in range(2, copies + 1)]
        rng.shuffle(late_wave)

        transient_left = {o.key for o in objects if o.inject_transient}
        transient_lock = threading.Lock()
        real_handler = engine.runtime.load(
            engine.runtime.functions[engine.function_name("ProcessorFunction")]
        )

        def flaky_processor(event: dict[str, Any], context: Any) -> Any:
            key = event["workItem"]["key"]
            with transient_lock:
                fail = key in transient_left
                transient_left.discard(key)
            if fail:
                raise TransientError(f"injected: S3 SlowDown while reading {key}")
            return real_handler(event, context)

        if shared is None:
            engine.state.requests.clear()  # the running engine's log is not the demo's to clear
        results: list[ExecutionResult] = []
        results_lock = threading.Lock()
        deliveries = Progress(len(first_wave) + len(late_wave), "delivering", progress)

        def finish(arn: str) -> None:
            result = engine.wait(arn)
            with results_lock:
                results.append(result)
            if config.source == "s3":
                deliveries.advance()  # one event, one execution

        def deliver_s3(item: tuple[DemoObject, int]) -> None:
            # Through the Object Created rule, as EventBridge delivers it.
            obj, copy_number = item
            event = s3_event(
                bucket, obj.key, sizes[obj.key], version_id=obj.version_id, copy=copy_number
            )
            for arn in engine.put_event(event):
                finish(arn)

        def deliver_wave(wave: list[tuple[DemoObject, int]]) -> None:
            if config.source == "s3":
                with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
                    list(pool.map(deliver_s3, wave))
                return
            # Into the source queue, as S3 notifies it; the pipe starts the
            # executions, which run side by side like the pipe's do.
            sqs = engine.client("sqs")
            for obj, _ in wave:
                body = json.dumps(s3_notification(bucket, obj, sizes[obj.key]))
                sqs.send_message(QueueUrl=engine.ref("SourceQueue"), MessageBody=body)
            # A batch (SqsBatchMode) leaves a message it did not settle in the queue
            # (a duplicate of work still in progress): the pipe delivers it again, on
            # AWS after the visibility timeout, here on the next pass.
            for _ in range(_PIPE_PASSES):
                arns = engine.pump_pipes()
                if not arns:
                    break
                with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
                    list(pool.map(finish, arns))
            for _ in wave:
                deliveries.advance()  # the messages are delivered, however batched

        with engine.override_function("ProcessorFunction", flaky_processor):
            deliver_wave(first_wave)
            deliver_wave(late_wave)

        # The audit finds what was never delivered, and resubmits it; a
        # second audit right after must find nothing left to do.
        if progress is not None:
            progress.write("auditing  the bucket against the ledger\n")
        target = LocalTarget(engine)
        scope = run_prefix if shared is not None else None
        audit = ops.run_audit(target, prefix=scope)
        again = ops.run_audit(target, prefix=scope)
        demo_keys = {o.idempotency_key(bucket) for o in objects}
        resubmitted_again = (
            _resubmitted_by(engine, str(again["audit"]), demo_keys) if shared is not None else 0
        )
        dead_letters = drain(engine, engine.ref("DeadLetterQueue"), demo_keys)
        # The queue is the witness that each message ended: the pipe deletes a message
        # once its outcome is in the ledger, and one it never could ends in the
        # source queue's own DLQ.
        left = (
            _left_in(engine, ("SourceQueue", "SourceDeadLetterQueue"))
            if config.source == "sqs"
            else 0
        )
        effects = effects_by_idempotency_key(engine, output_bucket)
        # Per message: a batch execution (SqsBatchMode) runs one Map iteration a message.
        per_execution = [units.units(result) for result in results]
        batches = sum(any(unit.iteration for unit in found) for found in per_execution)
        ran = [unit for found in per_execution for unit in found]
        # Each message once, as its last delivery ended (a batch may keep one for later).
        messages = units.per_message(ran)
        outcomes = Counter(unit.end_state for unit in messages)
        if record:
            saved = records.save_all(engine, results, stack=stack)
            if progress is not None:
                progress.write(f"recorded  {len(saved)} executions in {records.directory()}\n")

    effect_counts = {o.key: effects.get(o.idempotency_key(bucket), 0) for o in objects}
    delivered = [o for o in objects if o.deliveries > 0]
    multiple = sorted(k for k, n in effect_counts.items() if n > 1)
    # Judged per message too: every message delivered ended in a named end state (a
    # batch cut short brings its messages back: their next delivery ends them), and no
    # object was processed by two of its messages.
    sent = len(first_wave) + len(late_wave)
    ended = sum(unit.ended for unit in messages)
    twice = processed_twice(ran)
    # After the audit, every processable object counts, the undelivered included.
    missing = sorted(o.key for o in objects if o.processable and effect_counts[o.key] != 1)
    data = {
        "source": config.source,
        "objects": len(objects),
        "corrupt_objects": config.corrupt,
        "deliveries": sent,
        "batch_executions": batches,
        "duplicate_deliveries": sum(max(o.deliveries - 1, 0) for o in objects),
        "concurrent_duplicates": sum(o.concurrent_duplicate for o in objects),
        "duplicates_discarded": outcomes.get("Duplicate", 0),
        "lost_deliveries": sum(o.deliveries == 0 for o in objects),
        "transient_failures_injected": sum(o.inject_transient for o in delivered),
        "executions": dict(outcomes),
        "dead_lettered": len(dead_letters),
        "effects_histogram": {
            str(n): c for n, c in sorted(Counter(effect_counts.values()).items())
        },
        "objects_with_multiple_effects": len(multiple),
        "delivered_processable_objects_without_effect": len(missing),
        "undelivered_objects": sorted(o.key for o in objects if o.deliveries == 0),
        "messages_without_outcome": max(sent - ended, 0),
        "messages_left_in_queue": left,
        "objects_processed_by_two_messages": len(twice),
        "audit": {key: audit.get(key, 0) for key, _ in AUDIT_LABELS},
        # On its own stack, the report's counts (stuck work it dead-letters
        # included); on a shared one, the executions the second audit started
        # for the demo's objects (the counts would include the stack's others).
        "second_audit_resubmitted": resubmitted_again
        if shared is not None
        else again["missing_resubmitted"] + again["failed_resubmitted"] + again["stuck_released"],
        "violations": multiple + missing + twice,
    }
    data["exactly_once"] = (
        not data["violations"]
        and data["messages_without_outcome"] == 0
        and data["messages_left_in_queue"] == 0
        and data["second_audit_resubmitted"] == 0
    )
    return DemoReport(data)


def _left_in(engine: LocalEngine, queues: tuple[str, ...]) -> int:
    """Messages still in these queues, in flight included."""
    sqs = engine.client("sqs")
    counts = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
    total = 0
    for queue in queues:
        found = sqs.get_queue_attributes(QueueUrl=engine.ref(queue), AttributeNames=list(counts))
        total += sum(int(found["Attributes"].get(name, 0)) for name in counts)
    return total


def _resubmitted_by(engine: LocalEngine, audit_id: str, keys: set[str]) -> int:
    """Processor executions this audit started for these keys.

    The audit names them "audit-<audit id>-<digest>" (see the audit function).
    """
    sfn = engine.client("stepfunctions")
    prefix = f"audit-{audit_id}"[:40] + "-"
    count = 0
    paginator = sfn.get_paginator("list_executions")
    for page in paginator.paginate(stateMachineArn=engine.ref("ProcessorStateMachine")):
        for execution in page["executions"]:
            if not execution["name"].startswith(prefix):
                continue
            started = sfn.describe_execution(executionArn=execution["executionArn"])
            work_item = json.loads(started.get("input") or "{}").get("workItem") or {}
            if work_item.get("idempotencyKey") in keys:
                count += 1
    return count
