"""Executions: started, waited for and described as the Step Functions API does."""

from __future__ import annotations

import datetime
import json
import re
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moto.core.exceptions import AWSError
from moto.stepfunctions.parser.models import stepfunctions_parser_backends

from onceflow.asl import outcome
from onceflow.local import limits
from onceflow.local.errors import EngineError, ExecutionTimeout
from onceflow.local.provisioning import ACCOUNT_ID, REGION

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

_EXECUTION_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class ExecutionResult:
    """A finished execution: what the console shows for it."""

    arn: str
    name: str
    status: str
    input: Any
    output: Any
    error: str | None
    cause: str | None
    events: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

    @property
    def states_entered(self) -> list[str]:
        entered = (e.get("stateEnteredEventDetails") for e in self.events)
        return [details["name"] for details in entered if details]

    @property
    def outcome(self) -> str | None:
        """How the execution ended, as users see it: the last state it entered, or the
        outcome of the end Task it succeeded on (MarkComplete: Processed)."""
        entered = self.states_entered
        return outcome(entered[-1] if entered else None, self.status == "SUCCEEDED")

    def event_types(self) -> list[str]:
        return [str(e["type"]) for e in self.events]


def execution_name(prefix: str) -> str:
    """A unique, valid execution name (moto names unnamed executions 'None')."""
    clean = _EXECUTION_NAME.sub("-", prefix)[:40].strip("-") or "run"
    return f"{clean}-{uuid.uuid4().hex[:20]}"


def _backend() -> Any:
    return stepfunctions_parser_backends[ACCOUNT_ID][REGION]


def start(
    engine: LocalEngine,
    state_machine: str,
    execution_input: Any,
    name: str | None = None,
    *,
    name_prefix: str | None = None,
) -> str:
    """Start an execution; its ARN. Named by the caller, else from name_prefix (else the
    machine's name)."""
    arn = engine.state_machine_arn(state_machine)
    # What EventBridge and Pipes send and Step Functions counts (256 KiB "as a
    # UTF-8 encoded string"): compact JSON, an "é" two bytes, not "\u00e9".
    text = json.dumps(execution_input, ensure_ascii=False, separators=(",", ":"))
    prefix = name_prefix or state_machine.rsplit(":", 1)[-1]
    response = engine.client("stepfunctions").start_execution(
        stateMachineArn=arn, name=name or execution_name(prefix), input=text
    )
    return str(response["executionArn"])


def describe(engine: LocalEngine, execution_arn: str) -> dict[str, Any]:
    """DescribeExecution's answer (name, status, input and output as JSON text, error, cause)
    from the backend, for an EXPRESS execution too (AWS refuses those: InvalidArn, patches/
    fidelity/executions.py); an ARN the backend does not know gets AWS's error the usual way."""
    try:
        described = _backend().describe_execution(execution_arn).to_describe_output()
    except AWSError:
        return dict(engine.client("stepfunctions").describe_execution(executionArn=execution_arn))
    described["status"] = str(getattr(described["status"], "value", described["status"]))
    keys = ("name", "status", "input", "output", "error", "cause")
    return {key: described[key] for key in keys if described.get(key) is not None}


def wait(engine: LocalEngine, execution_arn: str, timeout: float = 120.0) -> ExecutionResult:
    """Wait for an execution's end; what it ended with."""
    deadline = time.monotonic() + timeout
    finished = engine.state.finished.event(execution_arn)
    while True:  # woken by its end (at once if it has ended); the timeout bounds a missed signal
        signalled = finished.wait(min(0.5, max(deadline - time.monotonic(), 0.001)))
        description = describe(engine, execution_arn)
        if description["status"] != "RUNNING":
            if not signalled and finished.wait(1.0):
                # Ended between the wait and the read: moto sets the status before the rest.
                description = describe(engine, execution_arn)
            break
        if time.monotonic() > deadline:
            raise ExecutionTimeout(f"{execution_arn} still running after {timeout}s")

    output = description.get("output")
    return ExecutionResult(
        arn=execution_arn,
        name=description["name"],
        status=description["status"],
        input=json.loads(description.get("input") or "null"),
        output=json.loads(output) if output else None,
        error=description.get("error"),
        cause=description.get("cause"),
        events=history(execution_arn),
    )


def history(execution_arn: str) -> list[dict[str, Any]]:
    """An execution's history events as GetExecutionHistory gives them (types as text,
    timestamps as datetimes), from the backend: AWS refuses GetExecutionHistory for an
    EXPRESS execution (InvalidArn), whose history is in its machine's log group there."""
    events = _backend().get_execution_history(execution_arn)["events"]
    # Enum types become their text, as they would on the wire.
    found: list[dict[str, Any]] = json.loads(json.dumps(list(events), default=str))
    for event in found:
        moment = event.get("timestamp")
        if isinstance(moment, str):
            event["timestamp"] = datetime.datetime.fromisoformat(moment.replace("Z", "+00:00"))
    return found


def _aware(moment: datetime.datetime) -> datetime.datetime:
    """A datetime as botocore parses one (aware; moto keeps some naive, in UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def listed(
    engine: LocalEngine, state_machine: str, status: str | None = None
) -> list[dict[str, Any]]:
    """A state machine's executions, newest first, as ListExecutions gives a STANDARD
    machine's, from moto's record: AWS refuses ListExecutions for an EXPRESS machine
    (StateMachineTypeNotSupported), and so does the engine's patched API (the backend's
    list_executions pages by 100)."""
    state_machine_arn = engine.state_machine_arn(state_machine)
    found = [
        {
            "executionArn": e.execution_arn,
            "name": e.name,
            "status": str(getattr(e.status, "value", e.status)),
            "startDate": _aware(e.start_date),
            "stateMachineArn": state_machine_arn,
            **({"stopDate": _aware(e.stop_date)} if e.stop_date is not None else {}),
        }
        for e in _backend().describe_state_machine(state_machine_arn).executions
    ]
    found = [e for e in found if status is None or e["status"] == status]
    return sorted(found, key=lambda e: e["startDate"], reverse=True)


def run_out_of_time(execution_arn: str) -> None:
    """Spend a running EXPRESS execution's five minutes on its clock: its next history
    event ends it in ExecutionTimedOut (States.Timeout), as AWS ends one at five minutes.
    For chaos: StopExecution is STANDARD only."""
    execution = _backend().describe_execution(execution_arn)
    record = limits.execution_limits(execution.exec_worker.env)
    if record is None or not record.express:
        raise EngineError(f"{execution_arn} is not a running EXPRESS execution")
    record.advance(max(record.remaining(), 0.0) / max(1.0 - record.clock.scale, 1e-9))


# How long an engine's stop waits for the executions it stopped (a call in flight runs to its
# end: a Lambda handler up to its Timeout); then it stops all the same.
END_WAIT_SECONDS = 10.0


def end_running(engine: LocalEngine, timeout: float = END_WAIT_SECONDS) -> list[str]:
    """Stop every execution of the engine's state machines still running (ABORTED, as
    StopExecution ends one), and wait for each to end; the ARNs stopped.

    Every engine of a stack name names its resources alike (the DLQ's URL), and a running
    execution's calls go to the running engine whose state machine has its name
    (patches/hooks.py, for_machine): an execution left running when its engine stopped
    went on in the next engine, its DLQ message counted there. It ends with its engine."""
    backend = _backend()
    stopped: list[str] = []
    for machine in list(backend.state_machines):
        if machine.name not in engine.state.machines:
            continue
        for execution in list(machine.executions):
            if str(getattr(execution.status, "value", execution.status)) != "RUNNING":
                continue
            # (its worker makes its environment on its own thread: a stop before that
            # fails; a second at most, as StopExecution waits: fidelity/api_answers.py)
            settled = time.monotonic() + 1.0
            while (worker := execution.exec_worker) is not None and worker.env is None:
                if time.monotonic() > settled:
                    break
                time.sleep(0.002)
            if worker is None or worker.env is None:
                continue
            execution.stop(
                stop_date=datetime.datetime.now(datetime.UTC),
                error="EngineStopped",
                cause="the local engine stopped while this execution ran",
            )
            stopped.append(str(execution.execution_arn))
    deadline = time.monotonic() + timeout
    for arn in stopped:
        engine.state.finished.event(arn).wait(max(deadline - time.monotonic(), 0.0))
    return stopped


def wait_for_running(
    engine: LocalEngine, state_machine: str, timeout: float = 600.0, ignore: Collection[str] = ()
) -> list[str]:
    """Wait until no execution of the state machine but those in ignore is RUNNING (those
    another one started); the ARNs waited for."""
    deadline = time.monotonic() + timeout
    waited: list[str] = []
    while True:
        found = listed(engine, state_machine, "RUNNING")
        running = [e["executionArn"] for e in found if e["executionArn"] not in ignore]
        if not running:
            return waited
        for execution in running:
            waited.append(execution)
            wait(engine, execution, max(deadline - time.monotonic(), 0.1))
