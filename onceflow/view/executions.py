"""Executions, one summary row each: listed and found in the local records or, with
--stack-name, in Step Functions (ListExecutions, DescribeExecution, GetExecutionHistory),
and the definition each one ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from onceflow.asl import diagram, outcome
from onceflow.view import history, records
from onceflow.view.records import Record, RecordError

# Logical id -> the ASL file it is defined by (ASL_FILES' names).
LOGICAL_IDS = {
    "ProcessorStateMachine": "processor",
    "AuditStateMachine": "audit",
    "BatchProcessorStateMachine": "batch",
}
# The batch workflow (SqsBatchMode) has a definition of its own, generated from the
# processor's (onceflow.asl.batch_definition); the docs draw no diagram of it.
ASL_FILES = {**diagram.MACHINES, "batch": diagram.ROOT / "statemachines" / "batch.asl.json"}
OUTPUTS = {"processor": "ProcessorStateMachineArn", "audit": "AuditStateMachineArn"}
STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE")


class Stack(Protocol):
    """A stack as the viewer reads it: its clients and outputs (onceflow.ops' Targets have
    this shape; the viewer does not import the operations)."""

    local: bool

    def client(self, service: str) -> Any: ...

    def output(self, name: str) -> str: ...


class StackError(Exception):
    """A deployed stack's executions could not be read (a permission, a name gone)."""


def idempotency_key(events: list[dict[str, Any]]) -> str | None:
    """The ledger key the execution claimed: Claim's putItem parameters, Item.pk.S."""
    state = None
    for event in events:
        if "stateEnteredEventDetails" in event:
            state = event["stateEnteredEventDetails"]["name"]
        elif state == "Claim" and "taskScheduledEventDetails" in event:
            parameters = history.payload(event["taskScheduledEventDetails"].get("parameters"))
            if isinstance(parameters, dict):
                for container in ("Item", "Key"):
                    pk = parameters.get(container, {}).get("pk", {})
                    if isinstance(pk, dict) and isinstance(pk.get("S"), str):
                        return str(pk["S"])
    return None


def end_state(events: list[dict[str, Any]]) -> str | None:
    """The last state the execution entered, or, once it succeeded on an end Task
    (MarkComplete), the outcome that Task names (Processed: onceflow.asl.END_OUTCOMES)."""
    entered = [
        event["stateEnteredEventDetails"]["name"]
        for event in events
        if "stateEnteredEventDetails" in event
    ]
    succeeded = any(event.get("type") == "ExecutionSucceeded" for event in events)
    return outcome(str(entered[-1]), succeeded) if entered else None


def _duration_ms(record: Record) -> float | None:
    if record.start is None or record.stop is None:
        return None
    return (record.stop - record.start).total_seconds() * 1000


def summary(record: Record) -> dict[str, Any]:
    """One row of `onceflow executions`."""
    events = record.events
    duration = _duration_ms(record)
    # A batch (a Map over messages) claims one key per iteration: none is the execution's.
    iterations = sum(event.get("type") == "MapIterationStarted" for event in events)
    return {
        "name": record.name,
        "executionArn": record.arn,
        "stateMachine": record.logical_id or record.data.get("stateMachineArn"),
        "stack": record.stack,
        "status": record.status,
        "startDate": None if record.start is None else record.start.isoformat(),
        "stopDate": None if record.stop is None else record.stop.isoformat(),
        "durationMs": None if duration is None else round(duration, 1),
        "idempotencyKey": None if iterations else idempotency_key(events),
        "iterations": iterations,
        "endState": end_state(events),
        "error": record.data.get("error"),
    }


def newest_stack(folder: Path | None = None) -> str | None:
    """The stack of the newest local record (None: no record names one)."""
    for record in records.recent(folder, unreadable=lambda error: None):  # list_local says
        return record.stack
    return None


def list_local(
    limit: int,
    status: str | None = None,
    machine: str | None = None,
    folder: Path | None = None,
    stack: str | None = None,
) -> list[dict[str, Any]]:
    """The newest local records' rows; `stack`: only that local stack's (None: every one's)."""
    rows: list[dict[str, Any]] = []
    for record in records.recent(folder, unreadable=records.note_skipped):
        if stack is not None and record.stack != stack:
            continue
        if status and record.status != status:
            continue
        if machine and LOGICAL_IDS.get(record.logical_id or "") != machine:
            continue
        rows.append(summary(record))
        if len(rows) >= limit:
            break
    rows.sort(key=lambda row: row["startDate"] or "", reverse=True)
    return rows


def _history(sfn: Any, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events += page["events"]
    return events


def _deployed_record(sfn: Any, arn: str, logical_id: str | None) -> Record:
    description = sfn.describe_execution(executionArn=arn)
    output = description.get("output")
    return Record(
        {
            "executionArn": arn,
            "name": description["name"],
            "stateMachineArn": description["stateMachineArn"],
            "logicalId": logical_id,
            "status": description["status"],
            "startDate": description.get("startDate"),
            "stopDate": description.get("stopDate"),
            "input": history.payload(description.get("input")),
            "output": history.payload(output) if output else None,
            "error": description.get("error"),
            "cause": description.get("cause"),
            "events": _history(sfn, arn),
        }
    )


def _aws(what: str, exc: ClientError) -> StackError:
    return StackError(f"{what}: {exc.response.get('Error', {}).get('Message') or exc}")


def list_deployed(
    target: Stack, limit: int, status: str | None = None, machine: str = "processor"
) -> list[dict[str, Any]]:
    """ListExecutions on the stack's state machine, and each one's history for its key."""
    sfn = target.client("stepfunctions")
    machine_arn = target.output(OUTPUTS[machine])
    logical_id = {name: lid for lid, name in LOGICAL_IDS.items()}[machine]
    kwargs: dict[str, Any] = {"stateMachineArn": machine_arn}
    if status:
        kwargs["statusFilter"] = status
    rows: list[dict[str, Any]] = []
    try:
        for page in sfn.get_paginator("list_executions").paginate(**kwargs):
            for listed in page["executions"]:
                # ListExecutions has the description's fields the table needs.
                listed_record = Record(
                    {
                        **listed,
                        "logicalId": logical_id,
                        "events": _history(sfn, listed["executionArn"]),
                    }
                )
                rows.append(summary(listed_record))
                if len(rows) >= limit:
                    return rows
    except ClientError as exc:
        error = _aws(f"cannot list the executions of {machine_arn}", exc)
        if exc.response.get("Error", {}).get("Code") == "StateMachineTypeNotSupported":
            # An EXPRESS machine (WorkflowType EXPRESS): AWS lists no executions of it.
            error = StackError(f"{error}: it is EXPRESS, its executions are in its logs")
        raise error from exc
    return rows


# Step Functions keeps no history of an EXPRESS execution: DescribeExecution refuses one
# (InvalidArn), ListExecutions an EXPRESS machine (StateMachineTypeNotSupported), both
# recorded in LocalStack's test_sfn_api_express snapshot. Its log group has it.
EXPRESS_NOTE = "Step Functions keeps no history of EXPRESS executions: see the log group"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def find_deployed(target: Stack, query: str, scan: int = 1000) -> Record:
    """An execution of the stack's state machines by ARN, name, or unique name prefix.

    An EXPRESS machine's executions can be neither described nor listed: one asked for
    by its ARN is refused saying so, and a name is looked for among the other machines'.
    """
    sfn = target.client("stepfunctions")
    machines = {name: target.output(output) for name, output in OUTPUTS.items()}
    by_name = {name: logical_id for logical_id, name in LOGICAL_IDS.items()}
    ids = {arn: by_name[name] for name, arn in machines.items()}
    unlisted: list[str] = []  # the machines ListExecutions refused (EXPRESS)

    def load(arn: str) -> Record:
        machine_arn = records.arn_parts(arn)[0]
        return _deployed_record(sfn, arn, ids.get(machine_arn))

    try:
        if query.startswith("arn:"):
            if query.split(":")[5:6] == ["express"]:
                raise StackError(f"{query} is an EXPRESS execution: {EXPRESS_NOTE}")
            return load(query)
        for machine_arn in machines.values():
            arn = machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + query
            try:
                return load(arn)
            except ClientError as exc:
                # InvalidArn: what an EXPRESS machine may answer for this form (not verified).
                if _code(exc) not in ("ExecutionDoesNotExist", "InvalidArn"):
                    raise
        candidates: list[str] = []
        for name, machine_arn in machines.items():
            seen = 0
            try:
                for page in sfn.get_paginator("list_executions").paginate(
                    stateMachineArn=machine_arn
                ):
                    for listed in page["executions"]:
                        seen += 1
                        if str(listed["name"]).startswith(query):
                            candidates.append(listed["executionArn"])
                    if seen >= scan:
                        break
            except ClientError as exc:
                if _code(exc) != "StateMachineTypeNotSupported":
                    raise
                unlisted.append(name)
        if len(candidates) == 1:
            return load(candidates[0])
    except ClientError as exc:
        raise _aws(f"cannot read the execution {query}", exc) from exc
    if not candidates:
        searched = f"no execution named {query!r} among the newest {scan} of each state machine"
        if unlisted:
            searched += f" (the {' and '.join(unlisted)} is EXPRESS: {EXPRESS_NOTE})"
        raise RecordError(searched)
    raise records.AmbiguousError(query, [records.arn_parts(arn)[1] for arn in candidates])


def definition(record: Record, target: Stack | None = None) -> dict[str, Any]:
    """The ASL the execution ran: the deployed definition, or locally the one its record kept."""
    if target is not None and not target.local:
        # The definition this execution ran, not today's: a stack update may
        # have changed the state machine since.
        try:
            described = target.client("stepfunctions").describe_state_machine_for_execution(
                executionArn=record.arn
            )
        except ClientError as exc:
            raise _aws(f"cannot read the definition {record.arn} ran", exc) from exc
        asl: dict[str, Any] = json.loads(described["definition"])
        return asl
    kept = record.data.get("definition")
    if isinstance(kept, str) and kept:
        return records.kept_definition(kept, record.folder)
    # A record from before records kept their definition: today's ASL file.
    name = LOGICAL_IDS.get(record.logical_id or "")
    if name is None:
        # "batch" first: a batch machine's name holds "processor" too.
        machine = str(record.data.get("stateMachineArn", "")).lower().rsplit(":", 1)[-1]
        name = next((n for n in sorted(ASL_FILES) if n in machine), None)
    if name is None:
        raise RecordError(f"{record.name}: no ASL file for state machine {record.logical_id}")
    return diagram.load_asl(ASL_FILES[name])
