"""Measure each speed-up's gain on the happy path, side by side (docs/local-engine.md).

Each configuration (every speed-up in place; each one left out in turn; all left out)
runs in its own process: an engine, warm-up executions, then timed happy-path
executions of the processor. The CPU time per execution (the whole process's, so
the engine's threads count and other work on a shared machine does not, and its
node workers' for JSONata) is the measure; the rounds interleave the
configurations and the medians are compared.
``--measure start`` times an engine's start and stop instead (after the first),
``--measure listing`` a ListObjectVersions of 1,000 keys under a prefix of a
bucket of 10,000 (the audit's read), ``--measure large`` executions of JSONata
states reading small parts of a 200 KiB input: speed-ups that are not on the
happy path.
Speed-ups inside the engine's own code (not registered patches, UNREGISTERED) are
left out in the measuring child only, by putting the plain way back there.

    .venv/bin/python -m bench.measure_speedups --rounds 3 --executions 60
    .venv/bin/python -m bench.measure_speedups --measure start --executions 6
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ALL, NONE = "(none left out)", "(all left out)"


def _whole_bindings() -> None:
    """Every variable and all of $states bound, not only the parts an expression reads."""
    from onceflow.local.patches import fidelity

    def bindings(expression: str, env: Any) -> dict[str, Any]:
        store = env.variable_store  # the inner scope shadows the outer
        return {**store._outer_scope, **store._inner_scope, "states": env.states._states_data}

    fidelity._bindings = bindings  # type: ignore[assignment]


def _heap_not_frozen() -> None:
    import gc

    gc.freeze = lambda: None


def _loader_per_session() -> None:
    import botocore.session

    original = botocore.session.Session.register_component

    def register_component(self: Any, name: str, component: Any) -> None:
        if name != "data_loader":  # each session loads and parses the models itself
            original(self, name, component)

    botocore.session.Session.register_component = register_component  # type: ignore[method-assign]


def _pure_python_yaml() -> None:
    import yaml

    from onceflow.local import template

    loader: Any = type("_CfnLoader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", template._construct)
    template._CfnLoader = loader  # type: ignore[misc]


def _client_per_call() -> None:
    from onceflow.local.engine import LocalEngine

    original = LocalEngine.client

    def client(self: LocalEngine, service: str) -> Any:
        self._clients.pop(service, None)  # made again at each call
        return original(self, service)

    LocalEngine.client = client  # type: ignore[method-assign]


def _sources_read_each_start() -> None:
    import inspect

    from onceflow.local.patches import registry

    registry.source = inspect.getsource  # type: ignore[assignment]


UNREGISTERED: dict[str, Callable[[], None]] = {
    "JSONata given only what it reads": _whole_bindings,
    "one loader of botocore's data": _loader_per_session,
    "libyaml's parser": _pure_python_yaml,
    "the engine's clients kept": _client_per_call,
    "the heap frozen": _heap_not_frozen,
    "patched sources read once": _sources_read_each_start,
}


def _node_cpu() -> float:
    """CPU seconds the JSONata evaluator's node workers have used (Linux's /proc): work
    the engine hands to node counts too."""
    from onceflow.local import jsonata_node

    ticks, total = os.sysconf("SC_CLK_TCK"), 0.0
    for worker in list(jsonata_node.evaluator()._workers):
        stat = Path(f"/proc/{worker.process.pid}/stat").read_text(encoding="ascii")
        fields = stat.rsplit(")", 1)[1].split()  # after the name: state, ppid, ...
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def _cpu() -> float:
    return time.process_time() + _node_cpu()


def child(left_out: str, executions: int, measure: str = "execution") -> float:
    from onceflow.local import patches

    names = [p.name for p in patches.PATCHES if p.kind == "speedup"]
    drop = set(names) if left_out == NONE else {left_out} & set(names)
    patches.PATCHES = tuple(p for p in patches.PATCHES if p.name not in drop)
    for name, leave_out in UNREGISTERED.items():
        if left_out in (name, NONE):
            leave_out()

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
        if measure == "large":
            return _large_inputs(engine, executions)
        events = [
            s3_event(engine, f"uploads/m{i}.png", upload(engine, f"uploads/m{i}.png"))
            for i in range(executions + 10)
        ]
        for event in events[:10]:  # warm-up: the first executions parse and fill caches
            assert engine.execute("ProcessorStateMachine", event).status == "SUCCEEDED"
        started = _cpu()
        for event in events[10:]:
            assert engine.execute("ProcessorStateMachine", event).status == "SUCCEEDED"
        return (_cpu() - started) / executions * 1000


def _large_inputs(engine: Any, executions: int) -> float:
    """CPU ms per execution of five JSONata Pass states, each assigning two small parts
    of an input of about 200 KiB (which $states holds twice: the input and the
    context's Execution.Input)."""
    states = {
        f"Read{i}": {
            "Type": "Pass",
            "Assign": {f"read{i}": "{% $states.input.id & $states.context.State.Name %}"},
            **({"Next": f"Read{i + 1}"} if i < 4 else {"End": True}),
        }
        for i in range(5)
    }
    definition = {"QueryLanguage": "JSONata", "StartAt": "Read0", "States": states}
    arn = engine.client("stepfunctions").create_state_machine(
        name="large-inputs",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/large-inputs",
    )["stateMachineArn"]
    execution_input = {"id": "large", "rows": [{"n": n, "text": "x" * 90} for n in range(2000)]}
    for _ in range(3):  # warm-up
        assert engine.execute(arn, execution_input).status == "SUCCEEDED"
    started = _cpu()
    for _ in range(executions):
        assert engine.execute(arn, execution_input).status == "SUCCEEDED"
    return (_cpu() - started) / executions * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--executions", type=int, default=60)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", help="measure only these speed-ups")
    parser.add_argument(
        "--measure", choices=("execution", "start", "listing", "large"), default="execution"
    )
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.executions, args.measure)))
        return
    from onceflow.local import patches

    registered = [p.name for p in patches.PATCHES if p.kind == "speedup"]
    configs = [ALL, NONE, *registered, *UNREGISTERED]
    if args.only:
        configs = [ALL, *args.only]
    ms: dict[str, list[float]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for config in random.sample(configs, len(configs)):
            command = [sys.executable, "-m", "bench.measure_speedups", "--child", config]
            out = subprocess.run(  # noqa: S603 - this script, with names from PATCHES, UNREGISTERED
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
