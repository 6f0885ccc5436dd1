"""Executions: started, waited for and described as the Step Functions API does."""

from __future__ import annotations

import datetime
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from moto import settings as moto_settings
from moto.core.exceptions import AWSError
from moto.stepfunctions.parser.models import stepfunctions_parser_backends

from onceflow.asl import outcome
from onceflow.local import limits
from onceflow.local.errors import EngineError, ExecutionTimeout
from onceflow.local.provisioning import ACCOUNT_ID, REGION

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

_EXECUTION_NAME = re.compile(r"[^A-Za-z0-9_-]")
_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT_ID}:stateMachine:"


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
    # The history is read when first asked for (it is most of what waiting for
    # an execution would cost): while the engine that ran it is still up.
    load_events: Callable[[], list[dict[str, Any]]] | None = field(
        default=None, repr=False, compare=False
    )
    _events: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @property
    def events(self) -> list[dict[str, Any]]:
        if self._events is None:
            self._events = self.load_events() if self.load_events is not None else []
        return self._events

    @property
    def states_entered(self) -> list[str]:
        return [
            e["stateEnteredEventDetails"]["name"]
            for e in self.events
            if "stateEnteredEventDetails" in e
        ]

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
    name_prefix: str | None = None,
) -> str:
    """Start an execution; its ARN.

    The name is the caller's, or else one of the engine's making (from
    name_prefix, else the machine's name). With the engine's, the local
    Step Functions backend is asked directly: through botocore and moto's
    HTTP layer, the same start cost about a tenth of an execution's CPU.
    Anything the backend refuses (a machine it does not know, input over
    the limit) is asked again the usual way, so the error is the one AWS
    gives; a caller's name, or moto checking IAM, goes the usual way too.
    """
    arn = engine.state_machine_arn(state_machine)
    # What EventBridge and Pipes send and Step Functions counts (256 KiB "as a
    # UTF-8 encoded string"): compact JSON, an "é" two bytes, not "\u00e9".
    text = json.dumps(execution_input, ensure_ascii=False, separators=(",", ":"))
    prefix = name_prefix or state_machine.rsplit(":", 1)[-1]
    if (
        name is None
        and arn.startswith(_MACHINE_ARN)
        and not math.isfinite(moto_settings.INITIAL_NO_AUTH_ACTION_COUNT)
    ):
        try:
            return str(_backend().start_execution(arn, execution_name(prefix), text).execution_arn)
        except AWSError:  # refused before anything started: the client call raises it
            pass
    response = engine.client("stepfunctions").start_execution(
        stateMachineArn=arn, name=name or execution_name(prefix), input=text
    )
    return str(response["executionArn"])


def describe(engine: LocalEngine, execution_arn: str) -> dict[str, Any]:
    """DescribeExecution's answer, read from the local Step Functions backend.

    The engine asking its own in-process service through botocore and
    moto's HTTP layer cost about 1.6 ms of CPU per execution, a
    twentieth of one. The answer is the backend's own description (input
    and output as JSON text, as AWS gives them). An ARN the backend does
    not know goes the usual way, for the usual error.
    """
    try:
        execution = _backend().describe_execution(execution_arn)
    except AWSError:  # not found, a bad ARN: the client call raises it as AWS would
        return dict(engine.client("stepfunctions").describe_execution(executionArn=execution_arn))
    # The parser backend keeps its own Execution objects (they describe themselves).
    described = execution.to_describe_output()
    status = described["status"]
    described = {**described, "status": status.value if isinstance(status, Enum) else str(status)}
    keys = ("name", "status", "input", "output", "error", "cause")
    return {key: described[key] for key in keys if described.get(key) is not None}


def wait(engine: LocalEngine, execution_arn: str, timeout: float = 120.0) -> ExecutionResult:
    """Wait for an execution's end; what it ended with."""
    deadline = time.monotonic() + timeout
    finished = engine.state.finished.event(execution_arn)
    while True:
        # Woken by the execution's end (at once if it has ended); the
        # timeout only bounds a missed signal.
        signalled = finished.wait(min(0.5, max(deadline - time.monotonic(), 0.001)))
        description = describe(engine, execution_arn)
        if description["status"] != "RUNNING":
            if not signalled and finished.wait(1.0):
                # Ended between the wait and the read: moto sets the
                # status before the output, error and cause.
                description = describe(engine, execution_arn)
            break
        if time.monotonic() > deadline:
            raise ExecutionTimeout(f"{execution_arn} still running after {timeout}s")

    def events() -> list[dict[str, Any]]:
        if engine._mock is None:
            raise EngineError("the engine has stopped: read the history while it runs")
        return history(execution_arn)

    output = description.get("output")
    return ExecutionResult(
        arn=execution_arn,
        name=description["name"],
        status=description["status"],
        input=json.loads(description.get("input") or "null"),
        output=json.loads(output) if output else None,
        error=description.get("error"),
        cause=description.get("cause"),
        load_events=events,
    )


def history(execution_arn: str) -> list[dict[str, Any]]:
    """An execution's history events as GetExecutionHistory gives them (types as text,
    timestamps as datetimes), read from the engine's own record: AWS refuses
    GetExecutionHistory for an EXPRESS execution (InvalidArn), whose history is in its
    state machine's log group there."""
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


def listed(state_machine_arn: str, status: str | None = None) -> list[dict[str, Any]]:
    """A state machine's executions (executionArn, name, status, startDate, stopDate once
    ended; newest first),
    as ListExecutions gives a STANDARD machine's, from the engine's own record: AWS
    refuses ListExecutions for an EXPRESS machine (StateMachineTypeNotSupported)."""
    machine = _backend().describe_state_machine(state_machine_arn)
    found = []
    for execution in machine.executions:
        state = getattr(execution.status, "value", execution.status)
        if status is None or state == status:
            found.append(
                {
                    "executionArn": execution.execution_arn,
                    "name": execution.name,
                    "status": str(state),
                    "startDate": _aware(execution.start_date),
                    "stateMachineArn": state_machine_arn,
                }
            )
            if execution.stop_date is not None:
                found[-1]["stopDate"] = _aware(execution.stop_date)
    return sorted(found, key=lambda e: e["startDate"], reverse=True)


def run_out_of_time(execution_arn: str) -> None:
    """Spend a running EXPRESS execution's five minutes on its clock, as a call that
    ran that long would: its next history event ends it in ExecutionTimedOut
    (States.Timeout), as AWS ends an EXPRESS execution at five minutes. For chaos:
    an EXPRESS execution cannot be stopped (StopExecution is STANDARD only)."""
    execution = _backend().describe_execution(execution_arn)
    record = limits.execution_limits(execution.exec_worker.env)
    if record is None or not record.express:
        raise EngineError(f"{execution_arn} is not a running EXPRESS execution")
    record.advance(max(record.remaining(), 0.0) / max(1.0 - record.clock.scale, 1e-9))


def wait_for_running(
    engine: LocalEngine, state_machine: str, timeout: float = 600.0, ignore: Collection[str] = ()
) -> list[str]:
    """Wait until no execution of the state machine is RUNNING (those another one started).

    Executions in ``ignore`` are not waited for. Returns the ARNs waited for.
    """
    arn = engine.state_machine_arn(state_machine)
    deadline = time.monotonic() + timeout
    waited: list[str] = []
    while True:
        running = [
            e["executionArn"] for e in listed(arn, "RUNNING") if e["executionArn"] not in ignore
        ]
        if not running:
            return waited
        for execution in running:
            waited.append(execution)
            wait(engine, execution, max(deadline - time.monotonic(), 0.1))
