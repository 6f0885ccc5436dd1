"""The commands that run the local engine: demo, chaos, bench, up, execute, invoke.

The command line loads this module (and moto with it) only to run one of them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from botocore.exceptions import ClientError

from onceflow.asl import diagram
from onceflow.cli.session import (
    Session,
    demo_template,
    json_value,
    load_event,
    parse_parameters,
    template_of,
)
from onceflow.harness import chaos, chaos_queue
from onceflow.harness.common import demo_parameters
from onceflow.harness.demo import DemoConfig, run_demo
from onceflow.local import server
from onceflow.local.samples import prepare_event, upload_file
from onceflow.project import default_project, template_or_bundled
from onceflow.view import history


def cmd_demo(args: argparse.Namespace, session: Session) -> int:
    own = demo_template(demo_parameters(args.source))
    if own is not None:
        print(
            f"local: the demo runs onceflow's own app ({own}) on a fresh stack, not this "
            f"project's template ({template_or_bundled()}): its images and its verdict are "
            "for onceflow's image processor",
            file=sys.stderr,
        )
    config = DemoConfig(
        objects=args.objects,
        corrupt=args.corrupt,
        seed=args.seed,
        concurrency=args.concurrency,
        source=args.source,
        template=own,
    )
    report = run_demo(
        config,
        progress=sys.stderr,
        record=not args.no_record,
        shared=session.shared if own is None else None,
        stack=session.stack,
    )
    if args.json:
        print(json.dumps(report.data, indent=2))
    else:
        print(report.render())
    return 0 if report.data["exactly_once"] else 1


def cmd_chaos(args: argparse.Namespace, session: Session) -> int:
    # --source s3 --batch: S3's events through the source queue (SqsBatchMode), a queue run.
    if args.source == "sqs" or args.batch:
        return _queue_chaos(args)
    for flag in ("unversioned", "express"):
        if getattr(args, flag):
            raise SystemExit(
                f"onceflow chaos: --{flag} is a mode of the source queue: add --source sqs "
                "or --batch"
            )
    config = chaos.ChaosConfig(
        objects=args.objects,
        seed=args.seed,
        concurrency=args.concurrency,
        duplicate_rate=args.duplicate_rate,
        inventory=args.inventory,
        audit_during=args.audit_during,
    )
    config.rates.update(_rates(args, chaos.FAULT_KINDS, chaos_queue.FAULT_KINDS, "s3"))
    try:
        report = chaos.run_chaos(config, progress=sys.stderr)
    except ValueError as exc:
        raise SystemExit(f"onceflow chaos: {exc}") from None
    print(json.dumps(report, indent=2) if args.json else chaos.render(report))
    return 1 if report["violations"] else 0


def _queue_chaos(args: argparse.Namespace) -> int:
    config = chaos_queue.QueueChaosConfig(
        units=args.objects,
        seed=args.seed,
        batch=args.batch,
        versioned=not args.unversioned,
        s3_events=args.source == "s3",
        concurrency=args.concurrency,
        duplicate_rate=args.duplicate_rate,
        redrive=not args.no_redrive,
        express=args.express,
        inventory=args.inventory,
        audit_during=args.audit_during,
    )
    source = "sqs" if args.source == "sqs" else "s3 --batch"
    config.rates.update(_rates(args, chaos_queue.FAULT_KINDS, chaos.FAULT_KINDS, source))
    try:
        report = chaos_queue.run_queue_chaos(config, progress=sys.stderr)
    except ValueError as exc:
        raise SystemExit(f"onceflow chaos: {exc}") from None
    print(json.dumps(report, indent=2) if args.json else chaos_queue.render(report))
    return 1 if report["violations"] else 0


def _rates(
    args: argparse.Namespace, kinds: tuple[str, ...], others: tuple[str, ...], source: str
) -> dict[str, float]:
    """The rate flags given; a fault the source has not is refused before anything runs."""
    for kind in set(others) - set(kinds):
        if getattr(args, f"{kind}_rate") is not None:
            flag = f"--{kind.replace('_', '-')}-rate"
            raise SystemExit(f"onceflow chaos: {flag} is not a fault of --source {source}")
    return {k: rate for k in kinds if (rate := getattr(args, f"{k}_rate")) is not None}


def _bench() -> ModuleType:
    """The benchmark of the clone this command runs from: bench/ beside the onceflow package
    (an editable install, `make setup`'s), which the wheel does not ship."""
    clone = Path(__file__).resolve().parents[2]
    if not (clone / "bench" / "run.py").is_file():
        raise SystemExit(
            "onceflow bench: the benchmark is not part of the installed package; run it in a "
            "clone of the repository (git clone, then make setup; docs/benchmarks.md)"
        )
    if str(clone) not in sys.path:
        sys.path.insert(0, str(clone))
    return importlib.import_module("bench.run")


def cmd_bench(args: argparse.Namespace, session: Session) -> int:
    bench = _bench()
    for name in ("messages", "rounds", "concurrency", "audit_keys"):
        if getattr(args, name) < 1:
            raise SystemExit(f"onceflow bench: --{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        raise SystemExit("onceflow bench: --warmup must not be negative")
    report = bench.run_bench(
        args.messages, args.audit_keys, args.concurrency, sys.stderr, args.rounds, args.warmup
    )
    json_path, md_path = bench.write(report, Path(args.out))
    print(bench.render(report))
    print(f"\nwritten: {json_path}, {md_path}", file=sys.stderr)
    # The project's own run is the one its benchmarks page shows.
    project = default_project()
    page = project / "docs" / "benchmarks.md"
    if md_path.resolve() == (project / "bench" / "results.md").resolve() and page.is_file():
        bench.embed(md_path.read_text(encoding="utf-8"), page)
        print(f"written: {page} (the run between its bench markers)", file=sys.stderr)
    return 0


def cmd_up(args: argparse.Namespace, session: Session) -> int:
    template = template_of(args)
    if template.parent != Path.cwd().resolve():
        print(f"local: using {template}", file=sys.stderr)
    return server.serve(
        template,
        parse_parameters(args.parameter_overrides),
        args.port,
        args.time_scale,
        command=session.main,
    )


def cmd_execute(args: argparse.Namespace, session: Session) -> int:
    if args.key is not None and args.upload is None:
        raise SystemExit("onceflow execute: --key names the object of --upload FILE")
    if args.key is not None:  # S3 User Guide, object-keys.html: at most 1,024 bytes in UTF-8
        size = len(args.key.encode("utf-8", "surrogatepass"))
        if size == 0:
            raise SystemExit(
                "onceflow execute: --key is empty; S3 keys are 1 to 1024 bytes in UTF-8"
            )
        if size > 1024:
            raise SystemExit(
                f"onceflow execute: --key is {size} bytes in UTF-8; S3 keys are 1 to 1024 bytes"
            )
    event = load_event(args.event) if args.upload is None else None
    with session.engine(args) as engine:
        arn = engine.state_machine_arn(args.state_machine)  # fail early on a wrong name
        if args.upload is not None:
            event, notes = upload_file(engine, Path(args.upload), args.key, args.state_machine)
        else:
            event, notes = prepare_event(
                engine, event, fixtures=not args.no_fixtures, target=args.state_machine
            )
        for note in notes:
            print(f"local: {note}", file=sys.stderr)
        try:
            result = engine.execute(arn, event, name=args.name or run_name(args.state_machine))
        except ClientError as exc:
            # Refused before it started (an input over 256 KiB, a name in use): nothing ran.
            raise SystemExit(
                f"onceflow execute: Step Functions refused the execution: {exc}"
            ) from None
        # The definition it ran: what its Fail states raise, which no event may name.
        asl = engine.client("stepfunctions").describe_state_machine(stateMachineArn=arn)
        states = diagram.graph(json.loads(asl["definition"])).states
        if args.json:
            print(json.dumps(history.to_json(result, states), indent=2, default=json_value))
        else:
            print(history.render(result, states))
        if not args.no_record:
            session.record(engine, [result])
    return 0 if result.status == "SUCCEEDED" else 1


def run_name(state_machine: str) -> str:
    """An execution name for `execute`: the machine, briefly, then what tells runs apart
    (the time, then a nonce), so that a few first characters name one in `show`."""
    short = state_machine.rsplit(":", 1)[-1].removesuffix("StateMachine").lower() or "run"
    short = re.sub(r"[^a-z0-9-]", "-", short)[:40]
    return f"{short}-{time.strftime('%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"


def cmd_invoke(args: argparse.Namespace, session: Session) -> int:
    event = load_event(args.event)
    with session.engine(args) as engine:
        engine.function_name(args.function)  # fail early on a wrong name
        event, notes = prepare_event(
            engine, event, fixtures=not args.no_fixtures, target=args.function
        )
        for note in notes:
            print(f"local: {note}", file=sys.stderr)
        payload, error = engine.invoke(args.function, event)
    print(json.dumps(payload, indent=2))
    return 1 if error else 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Session], int]] = {
    "demo": cmd_demo,
    "chaos": cmd_chaos,
    "bench": cmd_bench,
    "up": cmd_up,
    "execute": cmd_execute,
    "invoke": cmd_invoke,
}
