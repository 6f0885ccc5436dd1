"""Benchmarks, measured side by side in one run (not tests: they report, they do not assert).

1. Local engine throughput: executions per second, happy path and duplicate path.
2. Per-message cost model: transitions, DynamoDB reads and writes, Lambda
   invocations and SQS messages per path, counted from execution histories and
   the local services' request log; dollars per million messages.
3. The baseline users would pick instead: Powertools' @idempotent with
   DynamoDB in a plain Lambda handler, on the same local services.
4. The audit: keys per second, requests and transitions per 1000 keys.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from PIL import Image

from onceflow import patches
from onceflow.engine import ExecutionResult, LocalEngine

# List prices, us-east-1, as published on aws.amazon.com/<service>/pricing and
# read on 2026-11-22 (DynamoDB on-demand after the November 2024 reduction).
PRICES_AS_OF = "2026-11-22, us-east-1"
STANDARD_PER_TRANSITION = 0.025 / 1000
EXPRESS_PER_REQUEST = 1.00 / 1_000_000
EXPRESS_PER_GB_SECOND = 0.00001667  # first tier; billed in 64 MB chunks and 100 ms
EXPRESS_MEMORY_GB = 64 / 1024  # the minimum chunk: these executions carry a few KB
LAMBDA_PER_REQUEST = 0.20 / 1_000_000
LAMBDA_PER_GB_SECOND = 0.0000166667  # x86
DYNAMODB_PER_WRITE = 0.625 / 1_000_000  # on-demand WRU; a failed conditional write costs one too
DYNAMODB_PER_READ = 0.125 / 1_000_000  # on-demand RRU (eventually consistent: half)
SQS_PER_REQUEST = 0.40 / 1_000_000

# Durations on AWS cannot be measured here; these are the model's assumptions,
# applied alike: the work costs WORK_MS wherever it runs, every AWS call costs
# CALL_MS of the caller's time (the handler's for the baseline, the EXPRESS
# execution's for onceflow), every invocation LAMBDA_OVERHEAD_MS.
WORK_MS = 200.0  # the processor's own work (read, downscale, write) at 1024 MB
CALL_MS = 10.0  # one AWS API round trip (an integration call, a DynamoDB request)
LAMBDA_OVERHEAD_MS = 5.0  # a warm invocation's own cost
LAMBDA_MEMORY_GB = 1.0

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"}
READS = {"GetItem", "BatchGetItem", "Query", "Scan"}


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


@dataclass
class PathCost:
    """What one message costs on one path."""

    path: str
    transitions: int
    dynamodb_writes: int
    dynamodb_reads: int
    lambda_invocations: int
    sqs_messages: int
    integration_calls: int
    lambda_ms: float = WORK_MS + LAMBDA_OVERHEAD_MS  # modelled, per invocation
    wait_seconds: float = 0.0  # retry backoff an EXPRESS execution is billed for

    def dollars(self, mode: str) -> float:
        common = (
            self.dynamodb_writes * DYNAMODB_PER_WRITE
            + self.dynamodb_reads * DYNAMODB_PER_READ
            + self.sqs_messages * SQS_PER_REQUEST
            + self.lambda_invocations
            * (LAMBDA_PER_REQUEST + self.lambda_ms / 1000 * LAMBDA_MEMORY_GB * LAMBDA_PER_GB_SECOND)
        )
        if mode == "STANDARD":
            return common + self.transitions * STANDARD_PER_TRANSITION
        if mode == "EXPRESS":
            seconds = (
                self.integration_calls * CALL_MS / 1000
                + self.lambda_invocations * self.lambda_ms / 1000
                + self.wait_seconds
            )
            billed = math.ceil(seconds * 10) / 10  # 100 ms increments
            return common + EXPRESS_PER_REQUEST + billed * EXPRESS_MEMORY_GB * EXPRESS_PER_GB_SECOND
        if mode == "LAMBDA":  # the baseline: no state machine at all
            return common
        raise ValueError(mode)


def _requests(since: int) -> Counter[str]:
    return Counter(f"{r.service}:{r.operation}" for r in patches.REQUEST_LOG.snapshot()[since:])


def _transitions(result: ExecutionResult) -> int:
    """States entered plus Task retries: what Step Functions bills as transitions."""
    entered = len(result.states_entered)
    scheduled = Counter(
        e.get("previousEventId") for e in result.events if e["type"] == "TaskScheduled"
    )
    tasks = sum(1 for e in result.events if e["type"] == "TaskStateEntered")
    return entered + max(sum(scheduled.values()) - tasks, 0)


def _path_cost(engine: LocalEngine, path: str, run: Callable[[], ExecutionResult]) -> PathCost:
    since = len(patches.REQUEST_LOG.snapshot())
    invocations = len(engine.runtime.invocations)
    result = run()
    retries = sum(e["type"] == "TaskScheduled" for e in result.events) - sum(
        e["type"] == "TaskStateEntered" for e in result.events
    )
    # Full jitter: a retry waits half the interval on average (the first retry's).
    interval = float(engine.stack.parameters.get("RetryIntervalSeconds", "0"))
    requests = _requests(since)
    dynamodb = {op.split(":")[1]: n for op, n in requests.items() if op.startswith("dynamodb:")}
    sqs = sum(n for op, n in requests.items() if op.startswith("sqs:"))
    lambdas = len(engine.runtime.invocations) - invocations
    writes = sum(n for op, n in dynamodb.items() if op in WRITES)
    reads = sum(n for op, n in dynamodb.items() if op in READS)
    return PathCost(
        path=path,
        transitions=_transitions(result),
        dynamodb_writes=writes,
        dynamodb_reads=reads,
        lambda_invocations=lambdas,
        sqs_messages=sqs,
        integration_calls=writes + reads + sqs + lambdas,
        wait_seconds=max(retries, 0) * interval / 2,
    )


class TransientError(Exception):
    """Injected on the retry path; the state machine retries it by this name."""


def cost_model(engine: LocalEngine) -> list[PathCost]:
    """One message down each path; counts from its history and the request log."""
    rng = random.Random(1)
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")

    def fresh(key: str, body: bytes | None = None) -> dict[str, Any]:
        version = s3.put_object(Bucket=bucket, Key=key, Body=body or _image(rng))["VersionId"]
        return s3_event(bucket, key, version)

    happy = fresh("cost/happy.png")
    retry = fresh("cost/retry.png")
    poison = fresh("cost/poison.png", b"not an image")
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("ProcessorFunction")])
    failed_once: set[str] = set()

    def flaky(event: dict[str, Any], context: Any) -> Any:
        key = event["workItem"]["key"]
        if key not in failed_once:
            failed_once.add(key)
            raise TransientError("injected transient failure")
        return real(event, context)

    costs = [
        _path_cost(engine, "happy", lambda: engine.execute("ProcessorStateMachine", happy)),
        _path_cost(engine, "duplicate", lambda: engine.execute("ProcessorStateMachine", happy)),
    ]
    with engine.override_function("ProcessorFunction", flaky):
        costs.append(
            _path_cost(engine, "retry", lambda: engine.execute("ProcessorStateMachine", retry))
        )
    costs.append(
        _path_cost(engine, "dead-letter", lambda: engine.execute("ProcessorStateMachine", poison))
    )
    return costs


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


class PowertoolsBaseline:
    """The same work behind Powertools' @idempotent, on the same local DynamoDB and S3."""

    def __init__(self, engine: LocalEngine) -> None:
        from aws_lambda_powertools.utilities.idempotency import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent,
        )

        self.engine = engine
        dynamodb = engine.client("dynamodb")
        s3 = engine.client("s3")
        table = "bench-powertools-idempotency"
        dynamodb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=dynamodb)
        config = IdempotencyConfig(
            event_key_jmespath='[detail.bucket.name, detail.object.key, detail.object."version-id"]'
        )
        output_bucket = engine.ref("OutputBucket")

        @idempotent(persistence_store=persistence, config=config)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            obj = event["detail"]["object"]
            bucket = event["detail"]["bucket"]["name"]
            body = s3.get_object(Bucket=bucket, Key=obj["key"], VersionId=obj["version-id"])[
                "Body"
            ].read()
            with Image.open(io.BytesIO(body)) as image:
                image.thumbnail((1024, 1024))
                out = io.BytesIO()
                image.save(out, format="WEBP")
            key = f"baseline/{obj['version-id']}.webp"
            s3.put_object(Bucket=output_bucket, Key=key, Body=out.getvalue())
            return {"output": key}

        self.handler = handler

    class Context:
        function_name = "baseline"
        memory_limit_in_mb = 1024
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:baseline"
        aws_request_id = "bench"

        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 60_000

    def run(self, events: list[Any]) -> tuple[list[PathCost], dict[str, float]]:
        """Each event once (happy), then again (duplicate): the cost per path and the rates."""
        costs: list[PathCost] = []
        rates: dict[str, float] = {}
        steal_before, run_started = cpu_steal(), time.perf_counter()
        for path in ("happy", "duplicate"):
            since = len(patches.REQUEST_LOG.snapshot())
            started = time.perf_counter()
            for event in events:
                self.handler(event, self.Context())
            elapsed = time.perf_counter() - started
            requests = _requests(since)
            writes = sum(n for op, n in requests.items() if op.split(":")[1] in WRITES)
            reads = sum(n for op, n in requests.items() if op.split(":")[1] in READS)
            calls = (writes + reads) / len(events)
            # The handler's own DynamoDB round trips are Lambda time; a duplicate
            # stops at the idempotency check, before the work.
            work = WORK_MS if path == "happy" else 0.0
            costs.append(PathCost(
                path, 0, writes // len(events), reads // len(events), 1, 0, 0,
                lambda_ms=work + LAMBDA_OVERHEAD_MS + calls * CALL_MS,
            ))  # fmt: skip
            rates[path] = len(events) / elapsed
        steal_after = cpu_steal()
        if steal_before is not None and steal_after is not None:
            rates["steal_cores"] = (steal_after - steal_before) / (
                time.perf_counter() - run_started
            )
        return costs, rates


def audit_bench(engine: LocalEngine, keys: int) -> dict[str, Any]:
    """Keys per second and the cost per 1000 keys of an audit over processed objects."""
    s3 = engine.client("s3")
    dynamodb = engine.client("dynamodb")
    bucket = engine.ref("IngestBucket")
    table = engine.ref("LedgerTable")
    puts = []
    for n in range(keys):
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
    since = len(patches.REQUEST_LOG.snapshot())
    invocations = len(engine.runtime.invocations)
    started = time.perf_counter()
    result = engine.execute("AuditStateMachine", {"prefixes": ["audit/"]}, timeout=3600)
    elapsed = time.perf_counter() - started
    requests = _requests(since)
    per_1000 = 1000 / keys
    return {
        "keys": keys,
        "keys_per_second": keys / elapsed,
        "scanned": result.output["scanned"],
        "transitions_per_1000_keys": _transitions(result) * per_1000,
        "lambda_invocations_per_1000_keys": (len(engine.runtime.invocations) - invocations)
        * per_1000,
        "requests_per_1000_keys": {
            op: round(n * per_1000, 2) for op, n in sorted(requests.items())
        },
    }


def run_bench(
    messages: int = 200, audit_keys: int = 5000, concurrency: int = 8,
    progress: TextIO | None = None, rounds: int = 3, warmup: int = 16,
) -> dict[str, Any]:  # fmt: skip
    if min(messages, audit_keys, concurrency, rounds) < 1 or warmup < 0:
        raise ValueError("the bench needs at least one of each size (and no negative warm-up)")

    def say(text: str) -> None:
        if progress is not None:
            progress.write(text + "\n")
            progress.flush()

    # WARNING: thousands of executions' INFO lines would pile up in memory, and
    # the measured figures are the engine's, not the logger's.
    with LocalEngine(
        parameters={"AuditRecentCutoffHours": "0"},
        function_log=io.StringIO(),
        function_log_level="WARNING",
    ) as engine:
        rng = random.Random(2)
        baseline_runner = PowertoolsBaseline(engine)
        if warmup:  # first runs parse, compile and import: not what a steady stream costs
            say(f"bench: warm-up, {warmup} messages per path, not counted")
            throughput(engine, _events(engine, "warmup", warmup, rng), concurrency)
            baseline_runner.run(_events(engine, "warmup-baseline", warmup, rng))
        engine_rounds, baseline_rounds = [], []
        baseline_costs: list[PathCost] = []
        for n in range(1, rounds + 1):
            # Side by side: each round runs both, so a slow spell of the machine
            # slows both alike; the median round is reported.
            say(f"bench: throughput round {n}/{rounds}, {messages} messages per path, "
                f"{concurrency} at a time, and the Powertools baseline")  # fmt: skip
            engine_rounds.append(throughput(engine, _events(engine, f"round{n}", messages, rng),
                                            concurrency))  # fmt: skip
            baseline_costs, round_rates = baseline_runner.run(
                _events(engine, f"round{n}-baseline", messages, rng)
            )
            baseline_rounds.append(round_rates)
        rates = summarise(engine_rounds)
        baseline_rates = summarise(baseline_rounds)
        say("bench: cost model, one message down each path")
        costs = cost_model(engine)
        say(f"bench: the audit over {audit_keys} keys")
        audit = audit_bench(engine, audit_keys)

    by_path = {c.path: c for c in costs}
    base = {c.path: c for c in baseline_costs}

    def mix(costs_by_path: dict[str, PathCost], mode: str, duplicate_share: float) -> float:
        happy = costs_by_path["happy"].dollars(mode)
        duplicate = costs_by_path["duplicate"].dollars(mode)
        return ((1 - duplicate_share) * happy + duplicate_share * duplicate) * 1_000_000

    mixes = {}
    for label, share in (("seed (0.03% duplicates)", 0.0003), ("5% duplicates", 0.05)):
        mixes[label] = {
            "onceflow STANDARD": mix(by_path, "STANDARD", share),
            "onceflow EXPRESS": mix(by_path, "EXPRESS", share),
            "Powertools @idempotent": mix(base, "LAMBDA", share),
        }
        mixes[label]["EXPRESS / Powertools"] = (
            mixes[label]["onceflow EXPRESS"] / mixes[label]["Powertools @idempotent"]
        )
    happy, duplicate = by_path["happy"], by_path["duplicate"]
    targets = {
        "happy path at most 6 transitions": happy.transitions <= 6,
        "happy path at most 2 writes": happy.dynamodb_writes <= 2,
        "duplicate path at most 4 transitions": duplicate.transitions <= 4,
        "duplicate path at most 2 conditional writes": duplicate.dynamodb_writes <= 2,
        "duplicate path runs no Lambda": duplicate.lambda_invocations == 0,
        "local happy path at least 40 executions/s": rates["happy"] >= 40,
        "EXPRESS at most 1.5x Powertools": all(
            m["EXPRESS / Powertools"] <= 1.5 for m in mixes.values()
        ),
    }
    return {
        "prices_as_of": PRICES_AS_OF,
        "assumptions_ms": {
            "work": WORK_MS,
            "api_call": CALL_MS,
            "lambda_overhead": LAMBDA_OVERHEAD_MS,
        },
        "throughput_per_second": {
            "onceflow local engine": rates,
            "Powertools handler, in-process": baseline_rates,
        },
        "paths": [
            {**c.__dict__, "usd_per_million_standard": c.dollars("STANDARD") * 1e6,
             "usd_per_million_express": c.dollars("EXPRESS") * 1e6}
            for c in costs
        ],
        "baseline_paths": [
            {**c.__dict__, "usd_per_million": c.dollars("LAMBDA") * 1e6}
            for c in baseline_costs
        ],
        "usd_per_million_messages": mixes,
        "audit": audit,
        "targets": targets,
    }  # fmt: skip


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
    lines += ["", "## 2. Per-message cost by path", ""]
    lines += [
        "| path | transitions | DynamoDB writes | reads | Lambda | SQS "
        "| $/M STANDARD | $/M EXPRESS |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in report["paths"]:
        lines.append(
            f"| {p['path']} | {p['transitions']} | {p['dynamodb_writes']} | "
            f"{p['dynamodb_reads']} | {p['lambda_invocations']} | {p['sqs_messages']} | "
            f"{p['usd_per_million_standard']:.2f} | {p['usd_per_million_express']:.2f} |"
        )
    lines += ["", "## 3. Against Powertools @idempotent (dollars per million messages)", ""]
    lines += [
        "| workload | onceflow STANDARD | onceflow EXPRESS | Powertools | EXPRESS / Powertools |",
        "|---|---|---|---|---|",
    ]
    for label, m in report["usd_per_million_messages"].items():
        lines.append(
            f"| {label} | {m['onceflow STANDARD']:.2f} | {m['onceflow EXPRESS']:.2f} | "
            f"{m['Powertools @idempotent']:.2f} | {m['EXPRESS / Powertools']:.2f}x |"
        )
    a = report["audit"]
    lines += ["", "## 4. The audit", ""]
    lines += [
        "| keys | keys/s | transitions per 1000 keys | Lambda per 1000 keys "
        "| requests per 1000 keys |",
        "|---|---|---|---|---|",
    ]
    requests = ", ".join(f"{k} {v}" for k, v in a["requests_per_1000_keys"].items())
    lines.append(
        f"| {a['keys']} | {a['keys_per_second']:.0f} | {a['transitions_per_1000_keys']:.1f} | "
        f"{a['lambda_invocations_per_1000_keys']:.1f} | {requests} |"
    )
    lines += ["", "## Targets", ""]
    lines += [f"- {'met' if ok else 'NOT met'}: {name}" for name, ok in report["targets"].items()]
    lines += ["", f"Prices: {report['prices_as_of']} list prices; durations modelled: "
              f"{report['assumptions_ms']} (ms)."]  # fmt: skip
    return "\n".join(lines)


def write(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "results.json"
    md_path = directory / "results.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render(report) + "\n", encoding="utf-8")
    return json_path, md_path
