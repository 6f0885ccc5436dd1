"""The `onceflow` command line: demo, invoke (sam local invoke), execute (the console),
and the operations audit, redrive and inspect (local engine, or --stack-name).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from onceflow import diagram, ops, server
from onceflow import view as viewer
from onceflow.demo import DemoConfig, demo_parameters, run_demo
from onceflow.engine import EngineError, ExecutionResult, LocalEngine
from onceflow.jsonata_node import WorkerError
from onceflow.samples import WrongEvent, prepare_event
from onceflow.template import TemplateError, TemplateNotFound, find_template, project_directory
from onceflow.view import history, records


def _parameters(pairs: list[str]) -> dict[str, str]:
    parameters = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--parameter-overrides takes NAME=VALUE, not {pair!r}")
        parameters[name] = value
    return parameters


def _load_event(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"cannot read event file {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path} is not JSON: {exc}") from None
    except RecursionError:
        raise SystemExit(
            f"{path} nests deeper than this tool reads (about 1,000 levels); "
            "the processor's JSONata could not evaluate it either"
        ) from None


def cmd_demo(args: argparse.Namespace) -> int:
    config = DemoConfig(
        objects=args.objects,
        corrupt=args.corrupt,
        seed=args.seed,
        concurrency=args.concurrency,
        source=args.source,
    )
    report = run_demo(config, progress=sys.stderr, record=not args.no_record)
    if args.json:
        print(json.dumps(report.data, indent=2))
    else:
        print(report.render())
    return 0 if report.data["exactly_once"] else 1


def cmd_chaos(args: argparse.Namespace) -> int:
    from onceflow import chaos

    config = chaos.ChaosConfig(
        objects=args.objects,
        seed=args.seed,
        concurrency=args.concurrency,
        duplicate_rate=args.duplicate_rate,
    )
    for kind in chaos.FAULT_KINDS:
        rate = getattr(args, f"{kind}_rate")
        if rate is not None:
            config.rates[kind] = rate
    try:
        report = chaos.run_chaos(config, progress=sys.stderr)
    except ValueError as exc:
        raise SystemExit(f"onceflow chaos: {exc}") from None
    print(json.dumps(report, indent=2) if args.json else chaos.render(report))
    return 1 if report["violations"] else 0


def cmd_bench(args: argparse.Namespace) -> int:
    from onceflow import bench

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
    return 0


def _template(args: argparse.Namespace) -> Path:
    """The local stack's template: --template, else the nearest template.yaml upward."""
    if args.template is not None:
        given = Path(args.template)
        if not given.is_file():
            raise TemplateNotFound(f"--template {given}: no such file")
        return given.resolve()
    return find_template()


# What a command run without `onceflow up` says, once, before it runs.
FRESH_STACK = (
    "local: this command runs on a fresh, empty local stack, gone when it ends; "
    "`onceflow up` (in another terminal) keeps one for the commands after it"
)


def _fresh_stack_note(template: Path) -> None:
    if template.parent != Path.cwd().resolve():
        print(f"local: using {template}", file=sys.stderr)  # found above, or --template
    print(FRESH_STACK, file=sys.stderr)


def _engine(args: argparse.Namespace) -> contextlib.AbstractContextManager[LocalEngine]:
    """The engine a command runs on: the running `onceflow up` engine, or its own."""
    parameters = _parameters(args.parameter_overrides)
    template = _template(args)
    if args.verbose and server.shared_engine() is not None:
        print(
            "local: function logs stay with the running engine (onceflow up); "
            "use --no-server -v to see them",
            file=sys.stderr,
        )

    def fresh() -> LocalEngine:
        _fresh_stack_note(template)
        return LocalEngine(
            template,
            parameters,
            function_log=sys.stderr if args.verbose else io.StringIO(),
            function_log_level="DEBUG" if args.verbose else None,
        )

    return server.engine_for(parameters, fresh, template)


def cmd_up(args: argparse.Namespace) -> int:
    template = _template(args)
    if template.parent != Path.cwd().resolve():
        print(f"local: using {template}", file=sys.stderr)
    return server.serve(
        template,
        _parameters(args.parameter_overrides),
        args.port,
        args.time_scale,
    )


def cmd_execute(args: argparse.Namespace) -> int:
    event = _load_event(args.event)
    with _engine(args) as engine:
        arn = engine.state_machine_arn(args.state_machine)  # fail early on a wrong name
        event, notes = prepare_event(
            engine, event, fixtures=not args.no_fixtures, target=args.state_machine
        )
        for note in notes:
            print(f"local: {note}", file=sys.stderr)
        try:
            result = engine.execute(arn, event, name=args.name)
        except ClientError as exc:
            # Refused before it started (an input over 256 KiB, a name in use): nothing ran.
            raise SystemExit(
                f"onceflow execute: Step Functions refused the execution: {exc}"
            ) from None
        # The history is read from the engine, so render while it is up.
        if args.json:
            print(json.dumps(history.to_json(result), indent=2, default=_json_value))
        else:
            print(history.render(result))
        if not args.no_record:
            _record(engine, [result])
    return 0 if result.status == "SUCCEEDED" else 1


def _record(engine: LocalEngine, known: list[ExecutionResult]) -> None:
    """Save the engine's finished executions for `onceflow executions` and `onceflow show`."""
    # On the shared engine, only what this command ran: not all it ever ran.
    saved = records.save_all(engine, known, since=server.command_started())
    if len(saved) == 1 and len(known) == 1:
        print(f"local: recorded; see it with `onceflow show {known[0].name}`", file=sys.stderr)
    elif saved:
        print(
            f"local: {len(saved)} execution(s) recorded; list them with `onceflow executions`",
            file=sys.stderr,
        )


def cmd_invoke(args: argparse.Namespace) -> int:
    event = _load_event(args.event)
    with _engine(args) as engine:
        engine.function_name(args.function)  # fail early on a wrong name
        event, notes = prepare_event(
            engine, event, fixtures=not args.no_fixtures, target=args.function
        )
        for note in notes:
            print(f"local: {note}", file=sys.stderr)
        payload, error = engine.invoke(args.function, event)
    print(json.dumps(payload, indent=2))
    return 1 if error else 0


@contextmanager
def _target(args: argparse.Namespace) -> Iterator[ops.Target]:
    """The deployed stack named by --stack-name, or a local engine for this command."""
    if args.stack_name:
        yield ops.DeployedTarget(args.stack_name, args.region, args.profile)
        return
    with _engine(args) as engine:
        yield ops.LocalTarget(engine)
        if not args.no_record:
            _record(engine, [])


def cmd_audit(args: argparse.Namespace) -> int:
    with _target(args) as target:
        report = ops.run_audit(target, prefix=args.prefix, progress=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_audit(report))
    return 0


def render_audit(report: dict[str, Any]) -> str:
    from onceflow.demo import AUDIT_LABELS

    lines = [f"audit {report.get('audit', '')}: {report.get('bucket', '')}"]
    width = max(len(label) for _, label in AUDIT_LABELS)
    lines += [f"  {label:<{width}} {report.get(key, 0)}" for key, label in AUDIT_LABELS]
    lines += [f"    - {key}" for key in report.get("resubmitted_sample", [])]
    if report.get("report"):
        lines.append(f"  report: {report['report']}")
    return "\n".join(lines)


_SINCE = re.compile(r"^(\d+)([mhd])$")


def _since(text: str) -> datetime.datetime:
    """--since: 90m, 24h, 7d (that long ago), or an ISO 8601 time (UTC unless it says)."""
    match = _SINCE.match(text)
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        delta = datetime.timedelta(**{unit: int(match.group(1))})
        return datetime.datetime.now(datetime.UTC) - delta
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration (90m, 24h, 7d) nor an ISO 8601 time"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def cmd_redrive(args: argparse.Namespace) -> int:
    if not args.undelivered and args.since is not None:
        raise SystemExit("onceflow redrive: --since applies to --undelivered only")
    if args.undelivered and args.queue is not None:
        raise SystemExit(
            "onceflow redrive: --undelivered reads the processor's failed executions, not a queue"
        )

    def show(item: ops.Redriven) -> None:
        what = item.failed_execution or item.idempotency_key or "(an invalid event: no key)"
        print(f"{item.action:<17} {what}  {item.detail}", file=sys.stderr)

    with _target(args) as target:
        if args.undelivered:
            report = ops.redrive_undelivered(
                target, args.max, args.since, args.dry_run, progress=None if args.json else show
            )
        else:
            report = ops.redrive(
                target,
                args.max,
                args.dry_run,
                progress=None if args.json else show,
                queue=args.queue or "processor",
            )
    data = report.as_dict()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0 if data["kept"] == 0 else 1
    for item in report.messages:
        if item.outcome:
            print(
                f"  {item.idempotency_key or item.execution_arn or item.message_id}: {item.outcome}"
            )
    moved = data["would_resubmit"] if args.dry_run else data["resubmitted"]
    if args.undelivered:
        verb = "would restart" if args.dry_run else "restarted"
        print(
            f"redrive: {verb} {moved} undelivered execution(s); "
            f"{data['already_restarted']} restarted by an earlier run, {data['kept']} kept"
        )
    else:
        verb = "would move" if args.dry_run else "moved"
        print(
            f"redrive: {verb} {moved} message(s) back into processing; "
            f"{data['kept']} kept in the DLQ, {data['left']} left for a later run (their work "
            f"was moved earlier in this run), {data['deleted_already_processed']} stale removed"
        )
    return 0 if data["kept"] == 0 else 1


def cmd_inspect(args: argparse.Namespace) -> int:
    with _target(args) as target:
        found = ops.inspect_key(target, args.key, args.recent)
    if args.json:
        print(json.dumps(found, indent=2, default=_json_value))
        return 0 if found["row"] else 1
    row = found["row"]
    if row is None:
        print(f"{args.key}: no ledger row")
    else:
        print(f"{args.key}:")
        for name in sorted(row):
            if name not in ("pk", "claims"):
                print(f"  {name:<20} {_row_value(name, row[name])}")
    print(f"executions ({found['executions_scanned']} scanned):")
    for execution in found["executions"]:
        print(f"  {execution['status']:<10} {execution['role']:<26} {execution['executionArn']}")
        if execution.get("path"):
            print("             " + " -> ".join(execution["path"]))
    return 0 if row else 1


def _json_value(value: Any) -> Any:
    """What JSON output makes of a value JSON has no type for: times in ISO 8601."""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "replace")
    raise TypeError(f"a {type(value).__name__} in the output has no JSON form")


def _iso_from_epoch(value: float) -> str:
    """An epoch time in seconds, or in milliseconds (the ledger keeps both), in ISO 8601."""
    seconds = value / 1000 if abs(value) >= 10**11 else value  # 10**11 s is the year 5138
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _row_value(name: str, value: Any) -> str:
    """A ledger attribute as text: *_at epoch numbers as ISO 8601 (the number beside),
    lists and maps as JSON, never as Python writes them."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and name.endswith("_at"):
        try:
            return f"{_iso_from_epoch(value)}  ({value})"
        except (OverflowError, OSError, ValueError):
            return str(value)  # not a time after all
    if isinstance(value, dict | list):
        return json.dumps(value, default=_json_value)
    return str(value)


def cmd_executions(args: argparse.Namespace) -> int:
    if args.stack_name:
        target = ops.DeployedTarget(args.stack_name, args.region, args.profile)
        rows = viewer.list_deployed(target, args.limit, args.status, args.machine or "processor")
    else:
        rows = viewer.list_local(args.limit, args.status, args.machine)
        if not rows and not args.json:
            print(
                f"local: no recorded executions in {records.directory()}; "
                "`onceflow demo` and `onceflow execute` record theirs",
                file=sys.stderr,
            )
    print(json.dumps(rows, indent=2) if args.json else viewer.render_table(rows))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    target: ops.Target | None = None
    if args.stack_name:
        target = ops.DeployedTarget(args.stack_name, args.region, args.profile)
        record = viewer.find_deployed(target, args.execution)
    else:
        record = records.find(args.execution)
    asl = viewer.definition(record, target)
    print(viewer.terminal(record))
    destination = Path(args.html) if args.html else viewer.html_path(record)
    viewer.write_page(record, asl, destination)
    print(f"\nhtml: {destination}")
    if args.open:
        import webbrowser

        webbrowser.open(destination.resolve().as_uri())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onceflow",
        description="onceflow on the embedded local engine (no AWS account needed).",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser(
        "demo", help="deliver a bucket's events probably-once; check exactly-once"
    )
    demo.add_argument("--objects", type=int, default=200, help="images to upload (default 200)")
    demo.add_argument("--corrupt", type=int, default=5, help="corrupt files to add (default 5)")
    demo.add_argument("--seed", type=int, default=7, help="random seed; same seed, same run")
    demo.add_argument("--concurrency", type=int, default=8, help="executions at once (default 8)")
    demo.add_argument(
        "--source",
        choices=["s3", "sqs"],
        default="s3",
        help="deliver through the EventBridge rule (s3, default) or as S3 notifications "
        "through the source queue and the pipe (sqs)",
    )
    demo.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    demo.add_argument("--no-record", action="store_true", help=_NO_RECORD)
    demo.add_argument(
        "--no-server",
        action="store_true",
        help="run on an engine of its own even when `onceflow up` is running",
    )
    demo.set_defaults(func=cmd_demo)

    chaos_cmd = commands.add_parser(
        "chaos", help="seeded fault injection, the audit, then an exactly-once check"
    )
    chaos_cmd.add_argument("--objects", type=int, default=2000, help="1 to 10000 (default 2000)")
    chaos_cmd.add_argument(
        "--seed", type=int, default=11, help="same seed, same plan of objects and faults"
    )
    chaos_cmd.add_argument("--concurrency", type=int, default=8, help="deliveries at once")
    chaos_cmd.add_argument(
        "--duplicate-rate", type=float, default=0.05, help="share of objects delivered 2-3 times"
    )
    for kind in ("lost", "poison", "transient", "claim_throttle", "complete_throttle",
                 "lock_expiry", "crash_after_effect"):  # fmt: skip
        chaos_cmd.add_argument(
            f"--{kind.replace('_', '-')}-rate",
            type=float,
            default=None,
            help=f"share of objects with the {kind.replace('_', ' ')} fault",
        )
    chaos_cmd.add_argument("--json", action="store_true", help="the report as one JSON object")
    chaos_cmd.set_defaults(func=cmd_chaos)

    bench_cmd = commands.add_parser(
        "bench", help="benchmarks: throughput, cost per path, the Powertools baseline, the audit"
    )
    bench_cmd.add_argument("--messages", type=int, default=200, help="messages per path")
    bench_cmd.add_argument(
        "--audit-keys", type=int, default=100_000, help="objects the local audit walks"
    )
    bench_cmd.add_argument("--concurrency", type=int, default=8, help="executions at once")
    bench_cmd.add_argument(
        "--rounds", type=int, default=3, help="throughput rounds (the median is reported)"
    )
    bench_cmd.add_argument(
        "--warmup", type=int, default=16, help="messages per path run first, not counted"
    )
    bench_cmd.add_argument("--out", default="bench", help="where results.json/.md go")
    bench_cmd.set_defaults(func=cmd_bench)

    def add_engine_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "-e",
            "--event",
            required=True,
            help="event JSON file (as for sam local invoke -e), or -",
        )
        sub.add_argument(
            "-t",
            "--template",
            help="SAM template (default: template.yaml here, or in the nearest directory "
            "above that has one)",
        )
        sub.add_argument(
            "--parameter-overrides",
            nargs="*",
            default=[],
            metavar="NAME=VALUE",
            help="template parameters, as for sam",
        )
        sub.add_argument(
            "--no-fixtures",
            action="store_true",
            help="do not upload a sample object for the S3 object the event names",
        )
        sub.add_argument("-v", "--verbose", action="store_true", help="show function logs (stderr)")
        sub.add_argument(
            "--no-server",
            action="store_true",
            help="run on an engine of its own even when `onceflow up` is running",
        )

    execute = commands.add_parser(
        "execute", help="run one state machine execution, like the console"
    )
    execute.add_argument("state_machine", help="logical id, e.g. ProcessorStateMachine")
    execute.add_argument("--name", help="execution name (default: generated)")
    execute.add_argument("--json", action="store_true", help="status, output and states as JSON")
    execute.add_argument("--no-record", action="store_true", help=_NO_RECORD)
    add_engine_options(execute)
    execute.set_defaults(func=cmd_execute)

    invoke = commands.add_parser("invoke", help="invoke one function, like sam local invoke")
    invoke.add_argument("function", help="logical id, e.g. ProcessorFunction")
    add_engine_options(invoke)
    invoke.set_defaults(func=cmd_invoke)

    def add_target_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--stack-name", help="a deployed stack (default: the local engine)")
        sub.add_argument("--region", help="AWS region of the stack")
        sub.add_argument("--profile", help="AWS credentials profile")
        sub.add_argument("-t", "--template", help=argparse.SUPPRESS)
        sub.add_argument(
            "--parameter-overrides",
            nargs="*",
            default=[],
            metavar="NAME=VALUE",
            help="template parameters of the local stack",
        )
        sub.add_argument("-v", "--verbose", action="store_true", help="show function logs")
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        sub.add_argument("--no-record", action="store_true", help=_NO_RECORD)
        sub.add_argument(
            "--no-server",
            action="store_true",
            help="run on an engine of its own even when `onceflow up` is running",
        )

    audit = commands.add_parser(
        "audit", help="run the audit: resubmit lost, failed and stuck work; print the report"
    )
    audit.add_argument("--prefix", help="audit only the objects under this key prefix")
    add_target_options(audit)
    audit.set_defaults(func=cmd_audit)

    redrive = commands.add_parser(
        "redrive",
        help="move DLQ messages back into processing (a deliberate second chance); "
        "--undelivered restarts executions that could not dead-letter",
        description="Move DLQ messages back into processing, each piece of work at most once "
        "per run. With --undelivered, restart instead the processor executions that ended "
        "in DeadLetterFailed (their DLQ message could not be sent), each at most once ever.",
    )
    redrive.add_argument(
        "--max", type=int, help="move at most N messages (restart at most N executions)"
    )
    redrive.add_argument(
        "--queue",
        choices=sorted(ops.QUEUES),
        default=None,
        help="the processor's DLQ (default), or the EventBridge rules' ingress DLQ",
    )
    redrive.add_argument(
        "--undelivered",
        action="store_true",
        help="restart the processor's FAILED executions whose error is DeadLetterFailed "
        "(newest first), with their original input, under a name derived from theirs: "
        "each is restarted at most once however often this runs",
    )
    redrive.add_argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help="with --undelivered: only executions started since WHEN "
        "(90m, 24h, 7d, or an ISO 8601 time; default: all Step Functions keeps, 90 days)",
    )
    redrive.add_argument(
        "--dry-run", action="store_true", help="show what would move; change nothing"
    )
    add_target_options(redrive)
    redrive.set_defaults(func=cmd_redrive)

    inspect = commands.add_parser(
        "inspect", help="a key's ledger row and the executions that touched it"
    )
    inspect.add_argument("key", help="idempotency key, e.g. s3://bucket/key#versionId")
    inspect.add_argument(
        "--recent",
        type=int,
        help="processor executions to search for discarded duplicates "
        "(default: all locally, 100 on a deployed stack)",
    )
    add_target_options(inspect)
    inspect.set_defaults(func=cmd_inspect)
    up = commands.add_parser(
        "up", help="start a local engine that later commands share, until Ctrl-C"
    )
    up.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free)")
    up.add_argument(
        "-t",
        "--template",
        help="SAM template (default: template.yaml here, or in the nearest directory above)",
    )
    up.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="template parameters, as for sam",
    )
    up.add_argument(
        "--time-scale",
        type=float,
        default=0.0,
        help="multiplier of Wait and Retry delays (default 0: no sleeping)",
    )
    up.set_defaults(func=cmd_up)

    diagrams = commands.add_parser(
        "diagrams", help="the README's mermaid diagrams, generated from the ASL files"
    )
    mode = diagrams.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite them in README.md")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 when README.md differs from the ASL"
    )
    diagrams.set_defaults(func=cmd_diagrams)

    def add_stack_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--no-server",
            action="store_true",
            help="run on an engine of its own even when `onceflow up` is running",
        )
        sub.add_argument("--stack-name", help="a deployed stack (default: the local records)")
        sub.add_argument("--region", help="AWS region of the stack")
        sub.add_argument("--profile", help="AWS credentials profile")

    executions = commands.add_parser(
        "executions", help="recent executions: status, idempotency key, end state"
    )
    executions.add_argument("--limit", type=int, default=20, help="at most N (default 20)")
    executions.add_argument("--status", choices=viewer.STATUSES, help="only executions with it")
    executions.add_argument(
        "--machine",
        choices=sorted(viewer.OUTPUTS),
        help="only this state machine's (default: all locally, the processor's on a stack)",
    )
    executions.add_argument("--json", action="store_true", help="the rows as JSON")
    add_stack_options(executions)
    executions.set_defaults(func=cmd_executions)

    show = commands.add_parser(
        "show", help="the path an execution took: in the terminal, and as an HTML page"
    )
    show.add_argument("execution", help="execution name, ARN, or a unique start of a name")
    show.add_argument("--html", help="where the page goes (default .onceflow/show/<name>.html)")
    show.add_argument("--open", action="store_true", help="open the page in a browser")
    add_stack_options(show)
    show.set_defaults(func=cmd_show)
    return parser


_NO_RECORD = "do not record the executions for `onceflow executions` and `onceflow show`"


def cmd_diagrams(args: argparse.Namespace) -> int:
    try:
        return _diagrams(args)
    except ValueError as exc:  # a README without the generated blocks, or a bad ASL
        print(f"onceflow diagrams: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:  # run outside a checkout: no README.md, no ASL files
        print(
            f"onceflow diagrams: no {exc.filename}: it keeps the README.md of a checkout "
            "of onceflow in step with its statemachines/; run it in one",
            file=sys.stderr,
        )
        return 2


def _diagrams(args: argparse.Namespace) -> int:
    if args.check:
        stale = diagram.stale()
        for name in stale:
            print(
                f"README.md: the {name} diagram differs from its ASL; run onceflow diagrams --write"
            )
        if not stale:
            names = ", ".join(diagram.MACHINES)
            print(f"README.md: the diagrams ({names}) match their ASL files")
        return 1 if stale else 0
    if args.write:
        text = diagram.README.read_text(encoding="utf-8")
        fresh = diagram.render_readme(text)
        if fresh != text:
            diagram.README.write_text(fresh, encoding="utf-8")
        print("README.md: diagrams " + ("rewritten" if fresh != text else "already current"))
        return 0
    for name, path in diagram.MACHINES.items():
        print(f"%% {name}: {path.relative_to(diagram.ROOT)}")
        print(diagram.mermaid(diagram.load_asl(path)))
    return 0


def _forward(argv: list[str], args: argparse.Namespace) -> int | None:
    """Run the command on the `onceflow up` engine when one is up and the command uses it."""
    if args.command not in server.FORWARDED or server.shared_engine() is not None:
        return None
    if getattr(args, "stack_name", None) or getattr(args, "no_server", False):
        return None
    if getattr(args, "event", None) == "-":
        return None  # stdin stays with this process
    try:
        given = getattr(args, "template", None)
        project = project_directory(Path(given) if given else None)
    except TemplateNotFound:
        return None  # outside any project: the command says so itself
    try:
        state = server.running(project)
    except server.ServerError as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2
    if state is None:
        return None
    if args.command == "demo":
        needed = demo_parameters(args.source)
        if any(state.get("parameters", {}).get(k) != v for k, v in needed.items()):
            wanted = " ".join(f"{k}={v}" for k, v in needed.items())
            print(
                f"local: the running engine (onceflow up) lacks {wanted}, which the demo "
                "needs; the demo runs on an engine of its own (start onceflow up "
                f"--parameter-overrides {wanted} to run demos on it)",
                file=sys.stderr,
            )
            return None
    print(f"local: running on the local engine at port {state['port']}", file=sys.stderr)
    return server.forward(state, argv)


def _silence_stdout() -> None:
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return  # not a file (a test's stream): there is nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    # An event may hold text no encoding can write (a lone surrogate): print it escaped.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        forwarded = _forward(argv, args)
        return int(args.func(args)) if forwarded is None else forwarded
    except KeyboardInterrupt:
        print("onceflow: interrupted", file=sys.stderr)
        return 130  # as a shell reports a command ended by SIGINT
    except BrokenPipeError:
        # The reader went away (onceflow executions | head): nothing more to say, and
        # Python must not fail again flushing stdout at exit (Python docs, "Note on
        # SIGPIPE"): what is left goes to /dev/null.
        _silence_stdout()
        return 1
    except (EngineError, TemplateError, ops.OpsError, records.RecordError, WrongEvent) as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2
    except WorkerError as exc:  # node or jsonata missing: a set-up step not run
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as exc:  # credentials, permissions, a stack gone
        print(f"onceflow: a request failed: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the command needs is not there, or not writable
        where = f": {exc.filename}" if exc.filename else ""
        print(f"onceflow: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except RecursionError:
        # Python's recursion limit (about 1,000 nested levels) binds before JSONata's on
        # AWS (about 4,000 under node): the local engine cannot run this input.
        print("onceflow: the input nests too deeply for the local engine", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
