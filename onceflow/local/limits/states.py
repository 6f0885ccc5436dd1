"""Step Functions' quotas: 256 KiB of UTF-8 JSON per state's data, 25,000 history
events per STANDARD execution, five minutes per EXPRESS one."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from moto.core.exceptions import AWSError
from moto.stepfunctions.parser.api import (
    ExecutionFailedEventDetails,
    ExecutionStatus,
    ExecutionTimedOutEventDetails,
    HistoryEventType,
    StateMachineType,
)
from moto.stepfunctions.parser.asl.component import eval_component
from moto.stepfunctions.parser.asl.component.common.assign import assign_decl
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.program import program as sfn_program
from moto.stepfunctions.parser.asl.component.state import state as sfn_state
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    state_task_lambda as sfn_task_lambda,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function
from moto.stepfunctions.parser.asl.eval import environment as sfn_environment
from moto.stepfunctions.parser.asl.eval.event import event_manager as sfn_event_manager
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.backend import execution as sfn_execution
from moto.stepfunctions.parser.backend import execution_worker
from moto.stepfunctions.parser.models import stepfunctions_parser_backends
from moto.stepfunctions.parser.utils import TMP_THREADS

from onceflow.local.patches import hooks
from onceflow.local.patches.registry import Installer, Patch, gone, takes

# Docs: "Step Functions service quotas"; "Error handling in Step Functions",
# States.DataLimitExceeded; "Avoid reaching the history quota".
STATE_SIZE_LIMIT: Final = 262_144  # bytes of UTF-8 JSON text per input, output, Assign
VARIABLES_SIZE_LIMIT: Final = 10 * 1024 * 1024  # all variables of an execution (not verified)
HISTORY_EVENT_LIMIT: Final = 25_000
HISTORY_LIMIT_CAUSE: Final = "The execution reached the maximum number of history events (25000)."
EXPRESS_DURATION_LIMIT: Final = 300.0  # seconds
_ORIGINAL: dict[str, Any] = {}


def _install_sizes(installer: Installer) -> None:
    for module in (sfn_state, sfn_task_lambda, state_task_service):
        installer.replace(module, "is_within_size_quota", within_state_quota)
    _ORIGINAL["before_task"] = installer.replace(
        state_task_service.StateTaskService, "_before_eval_execution", _before_task
    )
    _ORIGINAL["lambda_parameters"] = installer.replace(
        sfn_task_lambda.StateTaskLambda, "_eval_parameters", _lambda_parameters
    )
    _ORIGINAL["assign"] = installer.replace(assign_decl.AssignDecl, "_eval_body", _assign)


def _sizes_fit() -> list[str]:
    return [
        *[f"{m.__name__}.is_within_size_quota is gone" for m in (sfn_state, sfn_task_lambda,
          state_task_service) if "is_within_size_quota" not in vars(m)],
        *takes(state_task_service.StateTaskService._before_eval_execution, "self", "env",
               "resource_runtime_part", "raw_parameters", "state_credentials"),
        *gone(sfn_task_lambda.StateTaskLambda, "_eval_parameters"),
        *gone(assign_decl.AssignDecl, "_eval_body"),
    ]  # fmt: skip


def _install_history(installer: Installer) -> None:
    _ORIGINAL["add_event"] = installer.replace(
        sfn_event_manager.EventManager, "add_event", _add_event
    )
    _ORIGINAL["environment"] = installer.replace(
        execution_worker.ExecutionWorker, "_get_evaluation_environment", _evaluation_environment
    )
    _ORIGINAL["set_error"] = installer.replace(sfn_environment.Environment, "set_error", _set_error)
    _ORIGINAL["set_timed_out"] = installer.replace(
        sfn_environment.Environment, "set_timed_out", _set_timed_out
    )
    _ORIGINAL["program_eval"] = installer.replace(sfn_program.Program, "eval", _program_eval)
    _ORIGINAL["wait"] = installer.replace(
        wait_function.WaitFunction, "_wait_interval", _wait_interval
    )
    _ORIGINAL["retrier"] = installer.replace(retrier_decl.RetrierDecl, "_eval_body", _retrier)
    installer.replace(retrier_decl, "time", _RetryTime(retrier_decl.time))  # type: ignore[attr-defined]
    _ORIGINAL["reflect"] = installer.replace(
        sfn_execution.BaseExecutionWorkerCommunication,
        "_reflect_execution_status",
        _reflect_execution_status,
    )


def _history_fits() -> list[str]:
    return [
        *takes(sfn_event_manager.EventManager.add_event, "self", "context", "event_type",
               "event_details", "timestamp", "update_source_event_id"),
        *gone(execution_worker.ExecutionWorker, "_get_evaluation_environment"),
        *gone(sfn_environment.Environment, "set_error", "set_timed_out"),
        *gone(sfn_program.Program, "eval"),
        *gone(wait_function.WaitFunction, "_wait_interval"),
        *gone(retrier_decl.RetrierDecl, "_eval_body"),
        *gone(sfn_execution.BaseExecutionWorkerCommunication, "_reflect_execution_status"),
        *([] if hasattr(retrier_decl, "time") else ["moto's retrier no longer imports time"]),
    ]  # fmt: skip


# ---------------------------------------------------------------------------
# Step Functions: 256 KiB of UTF-8 JSON text per state input, output and Assign
# ---------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    # What moto's encoder does with what JSON cannot hold (timestamps from SDK calls).
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    return str(value)


def json_bytes(value: Any) -> int:
    """Bytes of the value as Step Functions holds it: compact JSON text in UTF-8.

    moto counts ASCII-escaped JSON: "é" is six bytes there, two on AWS. A lone
    surrogate is escaped in JSON text (as JavaScript's JSON.stringify does), so it
    counts as its six characters instead of breaking the encoding.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    return len(text.encode("utf-8", "backslashreplace"))


def within_state_quota(value: Any) -> bool:
    """AWS: 262,144 bytes of data as a UTF-8 encoded string (at most, not below)."""
    return json_bytes(value) <= STATE_SIZE_LIMIT


def _data_limit(env: Any, event_type: HistoryEventType, cause: str, **details: Any) -> Exception:
    error = StatesErrorNameType.StatesStatesDataLimitExceeded
    if event_type == HistoryEventType.LambdaFunctionFailed:
        key = "lambdaFunctionFailedEventDetails"
    else:
        key = "taskFailedEventDetails" if details else "executionFailedEventDetails"
    # EventDetails and its members are TypedDicts: plain dicts.
    event_details: Any = {key: {"error": error.to_name(), "cause": cause, **details}}
    failure = FailureEvent(env, StatesErrorName(typ=error), event_type, event_details)
    return FailureEventException(failure_event=failure)


def _before_task(
    self: Any, env: Any, resource_runtime_part: Any, raw_parameters: Any, state_credentials: Any
) -> None:
    """AWS: States.DataLimitExceeded when, after Parameters (Arguments) processing,
    the input of a state is larger than the quota; the task is not scheduled."""
    if not within_state_quota(raw_parameters):
        raise _data_limit(
            env,
            HistoryEventType.TaskFailed,
            f"The state/task '{self._get_sfn_resource()}' has an input with a size exceeding "
            "the maximum number of bytes service limit.",
            resource=self._get_sfn_resource(),
            resourceType=self._get_sfn_resource_type(),
        )
    _ORIGINAL["before_task"](self, env, resource_runtime_part, raw_parameters, state_credentials)


def _lambda_parameters(self: Any, env: Any) -> Any:
    parameters = _ORIGINAL["lambda_parameters"](self, env)
    if not within_state_quota(parameters.get("Payload")):
        raise _data_limit(
            env,
            HistoryEventType.LambdaFunctionFailed,
            f"The state/task '{self.resource.resource_arn}' has an input with a size "
            "exceeding the maximum number of bytes service limit.",
        )
    return parameters


def _state_name(env: Any) -> str:
    state = env.states.context_object.context_object_data.get("State") or {}
    return str(state.get("Name", ""))


def _assign(self: Any, env: Any) -> None:
    """Assign, as moto evaluates it, with the size quotas of variables checked first:
    one state's assignments hold at most 256 KiB (AWS: "up to 256 KiB per state");
    all variables of an execution at most 10 MiB (not verified)."""
    declarations: dict[str, Any] = {}
    for binding in self.declaration_bindings:
        binding.eval(env=env)
        declarations.update(env.stack.pop())
    if json_bytes(declarations) > STATE_SIZE_LIMIT:
        raise _data_limit(
            env,
            HistoryEventType.TaskFailed,
            f"The state/task '{_state_name(env)}' assigned variables with a size exceeding "
            "the maximum number of bytes service limit.",
        )
    store = env.variable_store
    every = {**store._outer_scope, **store._inner_scope, **declarations}
    if json_bytes(every) > VARIABLES_SIZE_LIMIT:
        raise _data_limit(
            env,
            HistoryEventType.TaskFailed,
            f"The state/task '{_state_name(env)}' assigned variables that bring the "
            "execution's variables over the maximum number of bytes service limit.",
        )
    for identifier, value in declarations.items():
        store.set(variable_identifier=identifier, variable_value=value)


# ---------------------------------------------------------------------------
# Step Functions: 25,000 history events (STANDARD), five minutes (EXPRESS)
# ---------------------------------------------------------------------------

# Events after which moto goes on to call a service or a function: once an
# execution has ended, raising at one of them keeps the call from happening
# (each is added inside the task's own error handling).
_BEFORE_A_CALL: Final = frozenset(
    {
        HistoryEventType.TaskScheduled,
        HistoryEventType.TaskStarted,
        HistoryEventType.TaskSubmitted,
        HistoryEventType.LambdaFunctionScheduled,
        HistoryEventType.LambdaFunctionStarted,
        HistoryEventType.ActivityScheduled,
        HistoryEventType.ActivityStarted,
    }
)
_RECORD = "_onceflow_limits"


class ExecutionEnded(RuntimeError):
    """Raised where moto would go on to call a service for an execution that has ended."""


class ExecutionLimits:
    """One execution's clock and end, shared by every frame of it (through its EventManager)."""

    def __init__(self, env: Any, express: bool) -> None:
        self.root = env
        self.express = express
        self.lock = threading.RLock()
        self.started = time.monotonic()
        self.virtual = 0.0  # seconds slept on the engine's clock but not in real time
        self.closed = False
        self.closing: int | None = None  # the thread ending the execution
        self.reason: str | None = None
        engine = hooks.for_env(env)  # its engine's clock (a clock of its own if none)
        self.clock = engine.clock if engine is not None else hooks.Clock()

    def elapsed(self) -> float:
        return time.monotonic() - self.started + self.virtual

    def remaining(self) -> float:
        return EXPRESS_DURATION_LIMIT - self.elapsed()

    def advance(self, seconds: float) -> None:
        """A sleep of `seconds` on the engine's clock took seconds * scale in real time.

        Sleeps in branches that run side by side (Parallel, Map) add up here where
        on AWS they overlap: below time scale 1 such an EXPRESS execution reaches
        its five minutes early. (The processor's one Parallel has one branch.)
        """
        self.virtual += seconds * (1.0 - self.clock.scale)

    def last_event_id(self) -> int:
        return int(self.root.event_manager._event_id_gen._next_id) - 1

    def _close(
        self, event_type: HistoryEventType, details: EventDetails, end: Callable[[], None]
    ) -> None:
        with self.lock:
            if self.closed:
                return
            self.closing = threading.get_ident()
            try:
                context = sfn_event_manager.EventHistoryContext(self.last_event_id())
                _ORIGINAL["add_event"](
                    self.root.event_manager,
                    context=context,
                    event_type=event_type,
                    event_details=details,
                )
                end()
                self.closed = True
            finally:
                self.closing = None

    def close_history(self) -> None:
        """AWS: the 25,000th event, unless it is ExecutionSucceeded, is an
        ExecutionFailed with States.Runtime, and the execution ends there."""
        failure = ExecutionFailedEventDetails(  # type: ignore[typeddict-item]
            error=StatesErrorNameType.StatesRuntime.to_name(), cause=HISTORY_LIMIT_CAUSE
        )
        self.reason = "history"
        self._close(
            HistoryEventType.ExecutionFailed,
            EventDetails(executionFailedEventDetails=failure),  # type: ignore[typeddict-item]
            lambda: self.root.set_error(failure),
        )

    def close_express(self) -> None:
        """AWS: an EXPRESS execution that runs for more than five minutes fails with
        a States.Timeout error (and counts in ExecutionsTimedOut)."""
        self.reason = "express"
        self._close(
            HistoryEventType.ExecutionTimedOut,
            EventDetails(  # type: ignore[typeddict-item]
                executionTimedOutEventDetails=ExecutionTimedOutEventDetails(  # type: ignore[typeddict-item]
                    error=StatesErrorNameType.StatesTimeout.to_name()
                )
            ),
            self.root.set_timed_out,
        )


def execution_limits(env: Any) -> ExecutionLimits | None:
    manager = getattr(env, "event_manager", None)
    return vars(manager).get(_RECORD) if manager is not None else None  # type: ignore[no-any-return]


def _workflow_type(details: Any) -> str:
    """The machine's type as created. moto runs every execution as STANDARD
    (its StateMachine.sm_type is always "STANDARD"); the type asked for is kept
    in StateMachine.type."""
    machine = details.state_machine_details
    aws = details.aws_execution_details
    try:
        backend = stepfunctions_parser_backends[aws.account][aws.region]
        return str(backend.describe_state_machine(machine.arn).type)
    except (AWSError, KeyError):
        return str(machine.typ)


def _evaluation_environment(self: Any) -> Any:
    env = _ORIGINAL["environment"](self)
    express = _workflow_type(self._evaluation_details) == StateMachineType.EXPRESS
    vars(env.event_manager)[_RECORD] = ExecutionLimits(env, express)
    return env


_TERMINAL: Final = frozenset(
    {
        HistoryEventType.ExecutionSucceeded,
        HistoryEventType.ExecutionFailed,
        HistoryEventType.ExecutionAborted,
        HistoryEventType.ExecutionTimedOut,
    }
)


def _add_event(
    self: Any,
    context: Any,
    event_type: HistoryEventType,
    event_details: Any = None,
    timestamp: Any = None,
    update_source_event_id: bool = True,
) -> int:
    record: ExecutionLimits | None = vars(self).get(_RECORD)
    if record is None:
        return _ORIGINAL["add_event"](  # type: ignore[no-any-return]
            self, context, event_type, event_details, timestamp, update_source_event_id
        )
    with record.lock:
        if not record.closed:
            if record.express:
                if record.remaining() <= 0 and event_type not in _TERMINAL:
                    record.close_express()
            elif (
                self._event_id_gen._next_id >= HISTORY_EVENT_LIMIT
                and event_type != HistoryEventType.ExecutionSucceeded
            ):
                record.close_history()
        if not record.closed:
            return _ORIGINAL["add_event"](  # type: ignore[no-any-return]
                self, context, event_type, event_details, timestamp, update_source_event_id
            )
    if event_type in _BEFORE_A_CALL:
        raise ExecutionEnded(f"the execution has ended ({record.reason}); {event_type} not added")
    return record.last_event_id()


def _set_error(self: Any, error: Any) -> None:
    # Once the execution has ended at a limit, that end stands: the errors its
    # states raise on the way out do not replace it.
    record = execution_limits(self)
    if record is not None and record.closed and record.closing != threading.get_ident():
        return
    _ORIGINAL["set_error"](self, error)


def _set_timed_out(self: Any) -> None:
    record = execution_limits(self)
    if record is not None and record.closed and record.closing != threading.get_ident():
        return
    _ORIGINAL["set_timed_out"](self)


def _program_eval(self: Any, env: Any) -> None:
    """moto's Program.eval (the states run on a worker thread, joined with the
    machine's TimeoutSeconds), joined also with an EXPRESS execution's five
    minutes on the engine's clock."""
    record = execution_limits(env)
    if record is None or not record.express or env.is_frame():
        _ORIGINAL["program_eval"](self, env)
        return
    timeout = self.timeout_seconds.timeout_seconds if self.timeout_seconds else None
    env.next_state_name = self.start_at.start_at_name
    worker = threading.Thread(
        target=eval_component.EvalComponent.eval, args=(self, env), daemon=True
    )
    TMP_THREADS.append(worker)
    worker.start()
    started = time.monotonic()
    while worker.is_alive():
        left = record.remaining()
        if left <= 0:
            record.close_express()
            return
        if timeout is not None:
            own = timeout - (time.monotonic() - started)
            if own <= 0:
                env.set_timed_out()
                return
            left = min(left, own)
        # Sleeps on the engine's clock move the deadline closer: look again soon.
        worker.join(min(left, 1.0))


def _wait_interval(self: Any, env: Any, wait_seconds: Any) -> None:
    record = execution_limits(env)
    if record is None or not record.express:
        _ORIGINAL["wait"](self, env, wait_seconds)
        return
    left = record.remaining()
    if wait_seconds < left:
        _ORIGINAL["wait"](self, env, wait_seconds)
        record.advance(wait_seconds)
        return
    _ORIGINAL["wait"](self, env, max(left, 0.0))
    record.advance(max(left, 0.0))
    record.close_express()


_RETRYING = threading.local()


def _retrier(self: Any, env: Any) -> None:
    _RETRYING.env = env
    try:
        _ORIGINAL["retrier"](self, env)
    finally:
        _RETRYING.env = None


class _RetryTime:
    """Stands in for moto's retrier's `time`: a retry's backoff counts on the
    execution's clock, stops at an EXPRESS execution's five minutes, and is not
    slept at all once the execution has ended."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __getattr__(self, name: str) -> Any:
        return getattr(self.previous, name)

    def sleep(self, seconds: float) -> None:
        record = execution_limits(getattr(_RETRYING, "env", None))
        if record is None:
            self.previous.sleep(seconds)
            return
        if record.closed:
            return
        if record.express and seconds >= record.remaining():
            left = max(record.remaining(), 0.0)
            self.previous.sleep(left)
            record.advance(left)
            record.close_express()
            return
        self.previous.sleep(seconds)
        if record.express:
            record.advance(seconds)


def _reflect_execution_status(self: Any) -> None:
    _ORIGINAL["reflect"](self)
    execution = self.execution
    record = execution_limits(execution.exec_worker.env)
    if record is not None and record.reason == "express":
        execution.exec_status = ExecutionStatus.TIMED_OUT
        execution.error = StatesErrorNameType.StatesTimeout.to_name()


_DOCS = "docs/local-engine.md (AWS limits on the local engine)"
PATCHES = (
    Patch(
        name="Step Functions sizes",
        kind="limit",
        why="256 KiB of UTF-8 JSON per state input, output, task parameters and Assign, "
        "States.DataLimitExceeded over it (Step Functions service quotas); moto counts "
        "ASCII-escaped JSON. " + _DOCS,
        test="tests/workflow/test_limits.py",
        install=_install_sizes,
        fits=_sizes_fit,
    ),
    Patch(
        name="Step Functions history and duration",
        kind="limit",
        why="A STANDARD execution fails at 25,000 history events; an EXPRESS one times "
        "out at five minutes, Wait and Retry backoff included (Step Functions service "
        "quotas); moto has neither. " + _DOCS,
        test="tests/workflow/test_limits.py",
        install=_install_history,
        fits=_history_fits,
    ),
)
