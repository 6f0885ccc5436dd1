"""The commands on a stack: audit, redrive, inspect, doctor (onceflow.ops), executions and
show (onceflow.view); on the local engine, or on a deployed stack with --stack-name.

With --stack-name nothing here imports the engine or moto: boto3 alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from onceflow import ops
from onceflow import view as viewer
from onceflow.cli.session import Session, json_value
from onceflow.local.target import LocalTarget
from onceflow.view import records


@contextmanager
def _target(args: argparse.Namespace, session: Session) -> Iterator[ops.Target]:
    """The deployed stack named by --stack-name, or a local engine for this command."""
    if args.stack_name:
        yield ops.DeployedTarget(args.stack_name, args.region, args.profile)
        return
    with session.engine(args) as engine:
        yield LocalTarget(engine)
        if not args.no_record:
            session.record(engine)


def cmd_audit(args: argparse.Namespace, session: Session) -> int:
    with _target(args, session) as target:
        report = ops.run_audit(target, prefix=args.prefix, progress=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_audit(report))
    return 0


def render_audit(report: dict[str, Any]) -> str:
    lines = [f"audit {report.get('audit', '')}: {report.get('bucket', '')}"]
    width = max(len(label) for _, label in ops.AUDIT_LABELS)
    lines += [f"  {label:<{width}} {report.get(key, 0)}" for key, label in ops.AUDIT_LABELS]
    if sample := report.get("resubmitted_sample", []):
        lines.append("  resubmitted (the first keys):")
        lines += [f"    - {key}" for key in sample]
    if report.get("report"):
        lines.append(f"  report: {report['report']}")
    return "\n".join(lines)


SINCE = re.compile(r"^(\d+)([mhd])$")


def parse_since(text: str) -> datetime.datetime:
    """--since: 90m, 24h, 7d (that long ago), or an ISO 8601 time (UTC unless it says)."""
    match = SINCE.match(text)
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


def cmd_redrive(args: argparse.Namespace, session: Session) -> int:
    if not args.undelivered and args.since is not None:
        raise SystemExit("onceflow redrive: --since applies to --undelivered only")
    if args.undelivered and args.force:
        raise SystemExit("onceflow redrive: --force applies to DLQ messages, not --undelivered")
    if args.undelivered and args.queue is not None:
        raise SystemExit(
            "onceflow redrive: --undelivered reads the processor's failed executions, not a queue"
        )

    def show(item: ops.Redriven) -> None:
        what = item.failed_execution or item.idempotency_key or "(an invalid event: no key)"
        if item.action == "too late":
            what = f"message {item.message_id}"  # to find and delete once checked
        print(f"{item.action:<17} {what}  {item.detail}", file=sys.stderr)

    with _target(args, session) as target:
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
                include_invalid=args.invalid,
                force=args.force,
            )
    data = report.as_dict()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0 if data["kept"] == 0 and not data.get("too_late") else 1
    for item in report.messages:
        if item.outcome:
            print(
                f"  {item.idempotency_key or item.execution_arn or item.message_id}: {item.outcome}"
            )
    print(redrive_summary(data, args.dry_run, args.undelivered))
    return 0 if data["kept"] == 0 and not data.get("too_late") else 1


def redrive_summary(data: dict[str, Any], dry_run: bool, undelivered: bool) -> str:
    """The last line of `onceflow redrive`: what moved, and what stays in the DLQ and why."""
    moved = data["would_resubmit"] if dry_run else data["resubmitted"]
    if undelivered:
        verb = "would restart" if dry_run else "restarted"
        return (
            f"redrive: {verb} {moved} undelivered execution(s); "
            f"{data['already_restarted']} restarted by an earlier run, {data['kept']} kept"
        )
    verb = "would move" if dry_run else "moved"
    # A run moves each piece of work at most once: a message for work it already moved
    # is that work failing again, dead-lettered anew, and waits for a later run.
    left = (
        f"{data['left']} would be left for a later run (message(s) of work it would move already)"
        if dry_run
        else f"{data['left']} left for a later run (message(s) for work this run already "
        "moved: its new dead letter if it failed again)"
    )
    return (
        f"redrive: {verb} {moved} message(s) back into processing; "
        f"{data['kept']} kept in the DLQ, {left}; "
        f"{data['deleted_already_processed']} stale removed; {data['too_late']} kept as too late "
        "(uploads without a version id the audit has resubmitted: check and delete, or --force)"
    )


def cmd_doctor(args: argparse.Namespace, session: Session) -> int:
    """Exit 1 when any finding is a FAIL, 0 otherwise (a WARN included)."""
    if args.stack_name:
        findings = ops.examine(ops.DeployedTarget(args.stack_name, args.region, args.profile))
    else:
        # Here, not at the top: with --stack-name the engine's module, and moto, never load.
        from onceflow.local.samples import ensure_ingest_bucket
        from onceflow.local.wiring import LocalStack

        with session.engine(args) as engine:
            # The bucket an upload or a sample event would stand in for yours, made now.
            for note in ensure_ingest_bucket(engine):
                print(f"local: {note}", file=sys.stderr)
            findings = ops.examine(LocalStack(engine))
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding.line())
    return 1 if any(f.status == ops.FAIL for f in findings) else 0


def cmd_inspect(args: argparse.Namespace, session: Session) -> int:
    with _target(args, session) as target:
        found = ops.inspect_key(target, args.key, args.recent)
    if args.json:
        print(json.dumps(found, indent=2, default=json_value))
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
        if "message" in execution:
            print(f"             message {execution['message']} of the batch")
        if execution.get("note"):
            print(f"             {execution['note']}")
        if execution.get("path"):
            print("             " + " -> ".join(execution["path"]))
    return 0 if row else 1


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
        return json.dumps(value, default=json_value)
    return str(value)


def cmd_executions(args: argparse.Namespace, session: Session) -> int:
    if args.stack_name:
        target = ops.DeployedTarget(args.stack_name, args.region, args.profile)
        rows = viewer.list_deployed(target, args.limit, args.status, args.machine or "processor")
    else:
        # The current stack: the running `onceflow up`'s, else the newest record's.
        current = session.shared.stack if session.shared is not None else viewer.newest_stack()
        stack = None if args.all else current
        rows = viewer.list_local(args.limit, args.status, args.machine, stack=stack)
        if stack is not None and not args.json:
            where = "the running onceflow up" if session.shared is not None else "the newest"
            print(
                f"local: the executions of stack {stack} ({where}); --all lists every "
                "local stack's",
                file=sys.stderr,
            )
        if not rows and not args.json:
            print(
                f"local: no recorded executions in {records.directory()}; "
                "`onceflow demo` and `onceflow execute` record theirs",
                file=sys.stderr,
            )
    print(json.dumps(rows, indent=2) if args.json else viewer.render_table(rows))
    return 0


def _newest(session: Session) -> records.Record:
    """The current stack's newest recorded execution (the running `onceflow up`'s stack,
    else the newest record's), as `onceflow executions` lists it first."""
    stack = session.shared.stack if session.shared is not None else viewer.newest_stack()
    for record in records.recent(unreadable=records.note_skipped):
        if stack is None or record.stack == stack:
            print(f"local: the newest execution of stack {stack}: {record.name}", file=sys.stderr)
            return record
    raise records.RecordError(
        f"no recorded executions in {records.directory()}; `onceflow demo` and "
        "`onceflow execute` record theirs"
    )


def cmd_show(args: argparse.Namespace, session: Session) -> int:
    target: ops.DeployedTarget | None = None
    if args.stack_name:
        if not args.execution:
            raise records.RecordError(
                "name the execution to show: `onceflow executions --stack-name "
                f"{args.stack_name}` lists the stack's"
            )
        target = ops.DeployedTarget(args.stack_name, args.region, args.profile)
        record = viewer.find_deployed(target, args.execution)
    elif args.execution:
        record = records.find(args.execution)
    else:
        record = _newest(session)
    asl = viewer.definition(record, target)
    print(viewer.terminal(record, asl))
    destination = Path(args.html) if args.html else viewer.html_path(record)
    viewer.write_page(record, asl, destination)
    print(f"\nhtml: {destination}")
    if args.open:
        webbrowser.open(destination.resolve().as_uri())
    return 0
