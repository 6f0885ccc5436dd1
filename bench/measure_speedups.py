"""Measure each speed-up's gain on the happy path, side by side (docs/local-engine.md).

Each configuration (every speed-up in place; each one left out in turn; all left out)
runs in its own process: an engine, warm-up executions, then timed happy-path
executions of the processor. The CPU time per execution (the whole process's, so
the engine's threads count and other work on a shared machine does not) is the
measure; the rounds interleave the configurations and the medians are compared.
``--measure start`` times an engine's start and stop instead (after the first),
``--measure listing`` a ListObjectVersions of 1,000 keys under a prefix of a
bucket of 10,000 (the audit's read): speed-ups that are not on the happy path.

    .venv/bin/python -m bench.measure_speedups --rounds 3 --executions 60
    .venv/bin/python -m bench.measure_speedups --measure start --executions 6
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import subprocess
import sys
import time

ALL, NONE = "(none left out)", "(all left out)"


def child(left_out: str, executions: int, measure: str = "execution") -> float:
    from onceflow.local import patches

    names = [p.name for p in patches.PATCHES if p.kind == "speedup"]
    drop = set(names) if left_out == NONE else {left_out} & set(names)
    patches.PATCHES = tuple(p for p in patches.PATCHES if p.name not in drop)

    from onceflow.local.engine import LocalEngine
    from tests.helpers import s3_event, upload

    if measure == "start":  # the first start installs the patches: not counted
        times = []
        for _ in range(executions + 1):
            started = time.process_time()
            with LocalEngine(function_log=io.StringIO(), time_scale=0.0):
                pass
            times.append((time.process_time() - started) * 1000)
        return statistics.median(times[1:])
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as engine:
        if measure == "listing":
            s3, bucket = engine.client("s3"), engine.ref("IngestBucket")
            for i in range(10_000):
                s3.put_object(Bucket=bucket, Key=f"{'batch' if i % 10 else 'other'}/{i}", Body=b"")
            started = time.process_time()
            for _ in range(executions):
                listed = s3.list_object_versions(Bucket=bucket, Prefix="other/", MaxKeys=1000)
                assert len(listed["Versions"]) == 1000
            return (time.process_time() - started) / executions * 1000
        events = [
            s3_event(engine, f"uploads/m{i}.png", upload(engine, f"uploads/m{i}.png"))
            for i in range(executions + 10)
        ]
        for event in events[:10]:  # warm-up: the first executions parse and fill caches
            assert engine.execute("ProcessorStateMachine", event).status == "SUCCEEDED"
        started = time.process_time()
        for event in events[10:]:
            assert engine.execute("ProcessorStateMachine", event).status == "SUCCEEDED"
        return (time.process_time() - started) / executions * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executions", type=int, default=60)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", help="measure only these speed-ups")
    parser.add_argument("--measure", choices=("execution", "start", "listing"), default="execution")
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.executions, args.measure)))
        return
    from onceflow.local import patches

    configs = [ALL, NONE, *(p.name for p in patches.PATCHES if p.kind == "speedup")]
    if args.only:
        configs = [ALL, *args.only]
    ms: dict[str, list[float]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for config in random.sample(configs, len(configs)):
            command = [sys.executable, "-m", "bench.measure_speedups", "--child", config]
            out = subprocess.run(  # noqa: S603 - this script, with names from PATCHES
                [*command, "--executions", str(args.executions), "--measure", args.measure],
                capture_output=True,
                text=True,
                check=True,
            )
            ms[config].append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(ms[ALL])
    print(
        f"| left out | CPU ms per {args.measure} (median of {args.rounds}) | gain of the speed-up |"
    )
    print("|---|---|---|")
    for config in sorted(configs, key=lambda c: -statistics.median(ms[c])):
        median = statistics.median(ms[config])
        print(f"| {config} | {median:.1f} | {(median / base - 1) * 100:+.1f}% |")


if __name__ == "__main__":
    main()
