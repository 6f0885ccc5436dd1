"""Local execution records: what `onceflow executions` and `onceflow show` read locally.

The local engine lives as long as one command, so the commands that run
executions (`demo`, `execute`) save each finished one here before the engine
stops: its description and its history, one JSON file per execution under
.onceflow/executions/ (git-ignored), named after the execution. A later
execution of the same name replaces the record.

Each file's modification time is set to the execution's start, so that the
newest executions are found without reading every record.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from onceflow.project import private_directory, state_directory, write_private
from onceflow.view.history import Execution

DIRECTORY = state_directory() / "executions"
# ONCEFLOW_RECORDS moves them (tests use a temporary directory).
ENVIRONMENT = "ONCEFLOW_RECORDS"
# The newest records kept; older ones are removed after each save.
KEEP = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class RecordError(Exception):
    """No record, or more than one, for what was asked."""


class UnreadableRecord(RecordError):
    """A file among the records that is no record: not JSON, or not an execution's."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def directory() -> Path:
    configured = os.environ.get(ENVIRONMENT)
    return Path(configured) if configured else DIRECTORY


def file_name(execution_name: str, state_machine_arn: str | None = None) -> str:
    """A file name for an execution name: other characters become '_', plus a short hash
    when any did (so that two names never share a file), and one of the state machine
    when given (two state machines may each run an execution of one name)."""
    safe = _UNSAFE.sub("_", execution_name).lstrip(".") or "_"
    if safe != execution_name:
        safe += "." + hashlib.sha256(execution_name.encode()).hexdigest()[:8]
    if state_machine_arn:
        safe += "@" + hashlib.sha256(state_machine_arn.encode()).hexdigest()[:8]
    return safe + ".json"


def _json_safe(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(f"cannot record a {type(value).__name__} in an execution record")


def _date(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str) and value:
        return datetime.datetime.fromisoformat(value)
    return None


@dataclass
class Record:
    """One execution as recorded: DescribeExecution's fields plus the history events."""

    data: dict[str, Any]
    # The folder it was read from: its kept definition lies beside it there.
    folder: Path | None = None

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def arn(self) -> str:
        return str(self.data["executionArn"])

    @property
    def status(self) -> str:
        return str(self.data["status"])

    @property
    def logical_id(self) -> str | None:
        value = self.data.get("logicalId")
        return None if value is None else str(value)

    @property
    def stack(self) -> str | None:
        """The local stack it ran on (None: recorded before records named their stack)."""
        value = self.data.get("stack")
        return None if value is None else str(value)

    @property
    def start(self) -> datetime.datetime | None:
        return _date(self.data.get("startDate"))

    @property
    def stop(self) -> datetime.datetime | None:
        return _date(self.data.get("stopDate"))

    @property
    def events(self) -> list[dict[str, Any]]:
        """The history, with timestamps as datetimes again (as boto3 returns them)."""
        events: list[dict[str, Any]] = []
        for event in self.data.get("events", []):
            event = dict(event)
            event["timestamp"] = _date(event.get("timestamp"))
            events.append(event)
        return events

    def result(self) -> RecordedExecution:
        return RecordedExecution(
            arn=self.arn,
            name=self.name,
            status=self.status,
            input=self.data.get("input"),
            output=self.data.get("output"),
            error=self.data.get("error"),
            cause=self.data.get("cause"),
            events=self.events,
        )


@dataclass(frozen=True)
class RecordedExecution:
    """A recorded execution as the viewer reads one (a history.Execution)."""

    arn: str
    name: str
    status: str
    input: Any
    output: Any
    error: str | None
    cause: str | None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def states_entered(self) -> list[str]:
        return [
            e["stateEnteredEventDetails"]["name"]
            for e in self.events
            if "stateEnteredEventDetails" in e
        ]


class ExecutionSource(Protocol):
    """What runs the executions to record (the local engine has this shape)."""

    def client(self, service: str) -> Any: ...

    def wait(self, execution_arn: str) -> Execution:
        """The finished execution (its history is read while the source is up)."""
        ...

    def state_machines(self) -> dict[str, str]:
        """ARN -> logical id of the state machines whose executions are recorded."""
        ...

    def list_executions(self, state_machine: str) -> list[dict[str, Any]]:
        """ListExecutions' entries for the state machine, EXPRESS ones included (which
        AWS lists in the machine's log group only): the engine's own record."""
        ...


def arn_parts(execution_arn: str) -> tuple[str, str]:
    """(state machine ARN, execution name) of an execution's ARN, in either form:
    arn:aws:states:REGION:ACCOUNT:execution:MACHINE:NAME (STANDARD) or
    ...:express:MACHINE:NAME:ID (EXPRESS, as AWS gives it)."""
    parts = execution_arn.split(":")
    if len(parts) < 8 or parts[5] not in ("execution", "express"):
        raise RecordError(f"{execution_arn} is not an execution's ARN")
    return ":".join([*parts[:5], "stateMachine", parts[6]]), parts[7]


def _state_machine_arn(execution_arn: str) -> str:
    return arn_parts(execution_arn)[0]


def describe(
    result: Execution,
    listed: dict[str, Any] | None,
    logical_ids: dict[str, str],
    stack: str | None = None,
    definition: str | None = None,
) -> dict[str, Any]:
    """A record of a finished execution (its history is read now: the engine must be up).

    `definition`: the name under which the definition it ran is kept (keep_definition)."""
    events = result.events
    listed = listed or {}
    machine = str(listed.get("stateMachineArn") or _state_machine_arn(result.arn))
    start = listed.get("startDate") or (events[0]["timestamp"] if events else None)
    stop = listed.get("stopDate") or (events[-1]["timestamp"] if events else None)
    return {
        "executionArn": result.arn,
        "name": result.name,
        "stateMachineArn": machine,
        "logicalId": logical_ids.get(machine),
        "stack": stack,
        "definition": definition,
        "status": result.status,
        "startDate": start,
        "stopDate": stop,
        "input": result.input,
        "output": result.output,
        "error": result.error,
        "cause": result.cause,
        "events": events,
    }


def write(data: dict[str, Any], into: Path | None = None) -> Path:
    """Write one record; its file's mtime becomes the execution's start."""
    folder = private_directory(into or directory())
    path = folder / file_name(str(data["name"]), data.get("stateMachineArn"))
    # A record holds the execution's input and history (message bodies): 0600.
    write_private(path, json.dumps(data, default=_json_safe, separators=(",", ":")))
    start = _date(data.get("startDate"))
    if start is not None:
        stamp = start.timestamp()
        os.utime(path, (stamp, stamp))
    return path


DEFINITIONS = "definitions"


def keep_definition(described: dict[str, Any], into: Path | None = None) -> str:
    """Keep a state machine's definition beside the records, once per content; its name.

    `show` draws the definition an execution ran, which need not be any file near
    where it is typed (a nested onceflow's ASL lives beside the nested template).
    """
    text = str(described["definition"])
    name = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    folder = private_directory((into or directory()) / DEFINITIONS)
    path = folder / f"{name}.json"
    if not path.is_file():
        write_private(path, text)
    return name


def kept_definition(name: str, folder: Path | None = None) -> dict[str, Any]:
    """A definition kept by keep_definition."""
    path = (folder or directory()) / DEFINITIONS / f"{name}.json"
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordError(f"cannot read the definition the execution ran, {path}: {exc}") from exc
    if not isinstance(definition, dict):
        raise RecordError(f"{path} is not a state machine definition")
    return definition


def save_all(
    engine: ExecutionSource,
    known: Iterable[Execution] = (),
    into: Path | None = None,
    since: float | None = None,
    stack: str | None = None,
) -> list[Path]:
    """Record every finished execution of the engine's state machines.

    `known`: results the caller has already read (their histories are reused,
    not read again). `since`: only executions started from then on (epoch
    seconds). `stack`: the name of the local stack they ran on (project.stack_label).
    Call it before the engine stops.
    """
    sfn = engine.client("stepfunctions")
    by_arn = {result.arn: result for result in known}
    logical_ids = engine.state_machines()
    written: list[Path] = []
    for machine in logical_ids:
        kept = keep_definition(sfn.describe_state_machine(stateMachineArn=machine), into)
        for listed in engine.list_executions(machine):
            if listed["status"] == "RUNNING":
                continue
            # startDate is moto's, read from this process's clock to the microsecond: an
            # execution the command started is never earlier than `since`, and one a command
            # before it started always is (a second's slack counted those as this one's)
            if since is not None and listed["startDate"].timestamp() < since:
                continue
            result = by_arn.get(listed["executionArn"])
            if result is None:
                result = engine.wait(listed["executionArn"])
            written.append(write(describe(result, listed, logical_ids, stack, kept), into))
    prune(into)
    return written


def _files(folder: Path) -> list[tuple[float, Path]]:
    """Record files, newest first."""
    if not folder.is_dir():
        return []
    found = [
        (entry.stat().st_mtime, Path(entry.path))
        for entry in os.scandir(folder)
        if entry.name.endswith(".json") and entry.is_file()
    ]
    found.sort(key=lambda item: (item[0], item[1].name), reverse=True)
    return found


def prune(into: Path | None = None, keep: int = KEEP) -> int:
    """Remove all but the newest `keep` records; returns how many went."""
    old = _files(into or directory())[keep:]
    for _, path in old:
        path.unlink(missing_ok=True)
    return len(old)


def read(path: Path) -> Record:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read the execution record {path}: {exc}") from exc
    if not isinstance(data, dict) or "executionArn" not in data:
        raise RecordError(f"{path} is not an execution record")
    return Record(data, path.parent)


def note_skipped(error: UnreadableRecord) -> None:
    """What a listing says of a file among the records that it passes over."""
    print(f"local: skipped {error.path}: {error.reason}", file=sys.stderr)


def recent(
    folder: Path | None = None, unreadable: Callable[[UnreadableRecord], None] | None = None
) -> Iterator[Record]:
    """Records, newest first (read one at a time: stop when you have enough).

    A file removed since it was listed (pruned by another command) is passed over. One
    that is no record is handed to `unreadable` and passed over, and left as it is
    (None: it raises, as find does for a record asked for by name).
    """
    for _, path in _files(folder or directory()):
        try:
            found = read(path)
        except RecordError as exc:
            if not path.exists():
                continue
            if unreadable is None:
                raise
            reason = str(exc.__cause__) if exc.__cause__ is not None else "not an execution record"
            unreadable(UnreadableRecord(path, reason))
            continue
        yield found


def find(query: str, folder: Path | None = None) -> Record:
    """The record of an execution named by its name, its ARN, or a unique name prefix."""
    folder = folder or directory()
    if query.startswith("arn:"):
        name = arn_parts(query)[1]
        stem = _UNSAFE.sub("_", name)
        for _, path in _files(folder):
            if path.name.startswith(stem):
                record = read(path)
                if record.arn == query:
                    return record
        raise RecordError(f"no recorded execution {query}")
    prefix = _UNSAFE.sub("_", query)
    matches = [path for _, path in _files(folder) if path.name.startswith(prefix)]
    records = [record for record in map(read, matches) if record.name.startswith(query)]
    exact_name = [record for record in records if record.name == query]
    if len(exact_name) == 1:
        return exact_name[0]
    if len(exact_name) > 1:
        raise AmbiguousError(
            query,
            [f"{record.name} ({record.data.get('stateMachineArn')})" for record in exact_name],
        )
    if len(records) == 1:
        return records[0]
    if not records:
        raise RecordError(
            f"no recorded execution named {query!r} in {folder} "
            "(run `onceflow executions` to list them)"
        )
    raise AmbiguousError(query, [record.name for record in records])


class AmbiguousError(RecordError):
    """A name prefix that more than one execution has."""

    def __init__(self, query: str, candidates: list[str]) -> None:
        self.candidates = candidates
        shown = "\n  ".join(candidates[:20])
        more = f"\n  ... and {len(candidates) - 20} more" if len(candidates) > 20 else ""
        super().__init__(
            f"{query!r} is the start of {len(candidates)} executions' names:\n  {shown}{more}"
        )
