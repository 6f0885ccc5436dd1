"""The `onceflow` command line: demo, invoke (sam local invoke) and execute (the console)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

from onceflow import history
from onceflow.demo import DemoConfig, run_demo
from onceflow.engine import EngineError, LocalEngine
from onceflow.samples import prepare_event
from onceflow.template import TemplateError


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


def cmd_demo(args: argparse.Namespace) -> int:
    config = DemoConfig(
        objects=args.objects,
        corrupt=args.corrupt,
        seed=args.seed,
        concurrency=args.concurrency,
        source=args.source,
    )
    report = run_demo(config, progress=sys.stderr)
    if args.json:
        print(json.dumps(report.data, indent=2))
    else:
        print(report.render())
    return 0 if report.data["exactly_once"] else 1


def _engine(args: argparse.Namespace) -> LocalEngine:
    return LocalEngine(
        Path(args.template),
        _parameters(args.parameter_overrides),
        function_log=sys.stderr if args.verbose else io.StringIO(),
        function_log_level="INFO" if args.verbose else "WARNING",
    )


def cmd_execute(args: argparse.Namespace) -> int:
    event = _load_event(args.event)
    with _engine(args) as engine:
        arn = engine.state_machine_arn(args.state_machine)  # fail early on a wrong name
        event, notes = prepare_event(engine, event, fixtures=not args.no_fixtures)
        for note in notes:
            print(f"local: {note}", file=sys.stderr)
        result = engine.execute(arn, event, name=args.name)
    if args.json:
        print(json.dumps(history.to_json(result), indent=2, default=str))
    else:
        print(history.render(result))
    return 0 if result.status == "SUCCEEDED" else 1


def cmd_invoke(args: argparse.Namespace) -> int:
    event = _load_event(args.event)
    with _engine(args) as engine:
        engine.function_name(args.function)  # fail early on a wrong name
        event, notes = prepare_event(engine, event, fixtures=not args.no_fixtures)
        for note in notes:
            print(f"local: {note}", file=sys.stderr)
        payload, error = engine.invoke(args.function, event)
    print(json.dumps(payload, indent=2))
    return 1 if error else 0


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
    demo.set_defaults(func=cmd_demo)

    def add_engine_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "-e",
            "--event",
            required=True,
            help="event JSON file (as for sam local invoke -e), or -",
        )
        sub.add_argument(
            "--template", default="template.yaml", help="SAM template (default template.yaml)"
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

    execute = commands.add_parser(
        "execute", help="run one state machine execution, like the console"
    )
    execute.add_argument("state_machine", help="logical id, e.g. ProcessorStateMachine")
    execute.add_argument("--name", help="execution name (default: generated)")
    execute.add_argument("--json", action="store_true", help="status, output and states as JSON")
    add_engine_options(execute)
    execute.set_defaults(func=cmd_execute)

    invoke = commands.add_parser("invoke", help="invoke one function, like sam local invoke")
    invoke.add_argument("function", help="logical id, e.g. ProcessorFunction")
    add_engine_options(invoke)
    invoke.set_defaults(func=cmd_invoke)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (EngineError, TemplateError) as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
