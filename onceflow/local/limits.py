"""AWS's quotas, enforced by the local engine where and as AWS enforces them.

moto is kinder than AWS: it never ends an execution at 25,000 history events,
counts a state's size as ASCII-escaped JSON, lets an EXPRESS execution run past
five minutes, lets a handler run past its function's Timeout, and takes DynamoDB
numbers, SQS bodies and EventBridge entries that AWS refuses. A local run that
passes only because of that would fail on AWS. Each check below names the AWS
behaviour it reproduces; docs/local-engine.md ("AWS limits on the local engine") lists them
with the pages they come from.

``install(engine)`` puts them in place for an engine (the process-wide moto
patches once, for the first engine) and ``uninstall(engine)`` takes them away
(the moto patches when the last engine stops). Both are idempotent.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError
from moto.core.exceptions import AWSError
from moto.dynamodb import responses as dynamodb_responses
from moto.dynamodb.exceptions import ItemSizeTooLarge, MockValidationException
from moto.dynamodb.models import dynamo_type as ddb_dynamo_type
from moto.events import models as events_models
from moto.events.exceptions import ValidationException as EventsValidationException
from moto.sqs import exceptions as sqs_exceptions
from moto.sqs import models as sqs_models
from moto.sqs.constants import MAXIMUM_MESSAGE_LENGTH as SQS_BATCH_LIMIT
from moto.sqs.exceptions import BatchRequestTooLong, InvalidParameterValue, SQSException
from moto.stepfunctions.parser.api import (
    ExecutionFailedEventDetails,
    ExecutionStatus,
    ExecutionTimedOutEventDetails,
    HistoryEventType,
    LambdaFunctionFailedEventDetails,
    StateMachineType,
    TaskFailedEventDetails,
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
    lambda_eval_utils,
)
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

from onceflow.local.lambdas import FUNCTION_OUTPUT, Invocation, LambdaContext, error_payload
from onceflow.local.patches import hooks
from onceflow.local.patches.registry import Installer, Patch, gone, takes

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# Step Functions (docs: "Step Functions service quotas"; "Error handling in Step
# Functions", States.DataLimitExceeded; "Avoid reaching the history quota").
STATE_SIZE_LIMIT: Final = 262_144  # bytes of UTF-8 JSON text per input, output, Assign
VARIABLES_SIZE_LIMIT: Final = 10 * 1024 * 1024  # all variables of an execution (not verified)
HISTORY_EVENT_LIMIT: Final = 25_000
HISTORY_LIMIT_CAUSE: Final = "The execution reached the maximum number of history events (25000)."
EXPRESS_DURATION_LIMIT: Final = 300.0  # seconds
# Lambda (docs: "Troubleshoot invocation issues in Lambda", Sandbox.Timedout).
LAMBDA_TIMEOUT_ERROR: Final = "Sandbox.Timedout"
# DynamoDB (docs: "DynamoDB item sizes and formats"; "Supported data types").
DYNAMODB_ITEM_LIMIT: Final = 400 * 1024
DYNAMODB_NUMBER_DIGITS: Final = 38
# EventBridge (API reference, PutEvents: "the total entry size must be less than 1MB").
EVENTBRIDGE_ENTRIES_LIMIT: Final = 1024 * 1024
EVENTBRIDGE_TOO_LARGE: Final = "Total size of the entries in the request is over the limit."

# ---------------------------------------------------------------------------
# Installing and removing
# ---------------------------------------------------------------------------

_LOCK = threading.Lock()
_ENGINES: list[LocalEngine] = []


def install(engine: LocalEngine) -> None:
    """Enforce the limits for this engine (their moto patches are in the registry,
    PATCHES below, put in place by patches.install() with the others)."""
    with _LOCK:
        if any(e is engine for e in _ENGINES):
            return
        _ENGINES.append(engine)
    engine.runtime.invoke = TimedInvoke(engine)  # type: ignore[method-assign]
    engine.put_custom_event = _sized_custom_events(engine.put_custom_event)  # type: ignore[method-assign]


def uninstall(engine: LocalEngine) -> None:
    """Stop enforcing them for this engine (patches.uninstall() takes the moto patches)."""
    with _LOCK:
        if not any(e is engine for e in _ENGINES):
            return
        _ENGINES[:] = [e for e in _ENGINES if e is not engine]
        vars(engine.runtime).pop("invoke", None)
        vars(engine).pop("put_custom_event", None)


def installed() -> bool:
    return bool(_ENGINES)


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


_LAMBDA_CALLS = ("execute_lambda_function_integration", "exec_lambda_function")


def _install_lambda_callers(installer: Installer) -> None:
    for name in _LAMBDA_CALLS:
        _ORIGINAL[name] = installer.replace(lambda_eval_utils, name, _calling(name))


def _install_services(installer: Installer) -> None:
    installer.replace(ddb_dynamo_type.LimitedSizeDict, "__setitem__", _limited_setitem)
    _ORIGINAL["dynamodb_call"] = installer.replace(
        dynamodb_responses.DynamoHandler, "call_action", _checked_dynamodb_call
    )
    _ORIGINAL["send_message"] = installer.replace(
        sqs_models.SQSBackend, "send_message", _send_message
    )
    _ORIGINAL["send_message_batch"] = installer.replace(
        sqs_models.SQSBackend, "send_message_batch", _send_message_batch
    )
    _ORIGINAL["put_events"] = installer.replace(
        events_models.EventsBackend, "put_events", _put_events
    )


def _services_fit() -> list[str]:
    return [
        *gone(ddb_dynamo_type.LimitedSizeDict, "__setitem__"),
        *takes(dynamodb_responses.DynamoHandler.call_action, "self"),
        *takes(sqs_models.SQSBackend.send_message, "self", "queue_name", "message_body"),
        *takes(sqs_models.SQSBackend.send_message_batch, "self", "queue_name", "entries"),
        *takes(events_models.EventsBackend.put_events, "self", "events"),
    ]


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
        event_details = EventDetails(  # type: ignore[typeddict-item]
            lambdaFunctionFailedEventDetails=LambdaFunctionFailedEventDetails(  # type: ignore[typeddict-item]
                error=error.to_name(), cause=cause
            )
        )
    elif details:
        event_details = EventDetails(  # type: ignore[typeddict-item]
            taskFailedEventDetails=TaskFailedEventDetails(  # type: ignore[typeddict-item]
                error=error.to_name(), cause=cause, **details
            )
        )
    else:
        event_details = EventDetails(  # type: ignore[typeddict-item]
            executionFailedEventDetails=ExecutionFailedEventDetails(  # type: ignore[typeddict-item]
                error=error.to_name(), cause=cause
            )
        )
    return FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=StatesErrorName(typ=error),
            event_type=event_type,
            event_details=event_details,
        )
    )


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


# ---------------------------------------------------------------------------
# Lambda: each function's Timeout
# ---------------------------------------------------------------------------

_CALLER = threading.local()


def _calling(name: str) -> Callable[..., Any]:
    """moto's Lambda call from a Task, noting which execution frame waits for it."""

    def call(env: Any, *args: Any, **kwargs: Any) -> Any:
        _CALLER.env = env
        try:
            return _ORIGINAL[name](env, *args, **kwargs)
        finally:
            _CALLER.env = None

    call.__name__ = name
    return call


@dataclass(frozen=True)
class TimedInvocation(Invocation):
    """An invocation record, with what the Lambda sandbox's limits made of it.

    timed_out: the caller got Sandbox.Timedout (the handler ran past Timeout).
    finished_after_timeout: the handler went on and returned after its Timeout.
        On AWS the sandbox stops at the Timeout; locally a Python thread cannot
        be stopped, so what it did after the Timeout happened here only.
    caller_gone: it returned after the Task that called it had ended (its
        TimeoutSeconds passed, or the execution ended). Its effects happened, as
        on AWS, where the function runs on; its result went nowhere.
    """

    timed_out: bool = False
    finished_after_timeout: bool = False
    caller_gone: bool = False


class _Call:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.payload: Any = None
        self.error_type: str | None = None
        self.raised: BaseException | None = None
        self.finished = False
        self.timed_out = False
        self.ended_at = 0.0


class TimedInvoke:
    """InProcessRuntime.invoke, with the function's Timeout enforced.

    The handler runs on a thread of its own; the caller waits at most the
    function's Timeout and then gets what Lambda returns for a timed-out
    invocation. The Timeout counts real seconds at every time scale: a handler
    runs at real speed, only the engine's own waits are scaled.
    """

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine

    def _log(self, line: str) -> None:
        log = self.engine.function_log or sys.stderr
        log.write(line + "\n")

    def _record(self, invocation: TimedInvocation, replace: str | None = None) -> None:
        runtime = self.engine.runtime
        with runtime._lock:
            if replace is not None:
                for index, existing in enumerate(runtime.invocations):
                    if existing.request_id == replace:
                        runtime.invocations[index] = invocation
                        return
            runtime.invocations.append(invocation)

    def __call__(self, name: str, event: Any) -> tuple[Any, str | None]:
        runtime = self.engine.runtime
        spec = runtime.functions[name]
        handler = runtime.overrides.get(name) or runtime.load(spec)
        context = LambdaContext(spec.name, spec.arn, spec.memory, spec.timeout)
        caller = getattr(_CALLER, "env", None)
        call = _Call()
        started = time.perf_counter()

        def run() -> None:
            payload: Any = None
            error_type: str | None = None
            raised: BaseException | None = None
            try:
                with runtime.around(), FUNCTION_OUTPUT.running_function():
                    payload = handler(event, context)
            except Exception as exc:  # reported to the caller as Lambda does
                error_type = type(exc).__name__
                payload = error_payload(exc, context)
            except BaseException as exc:  # handed to the caller's thread, as invoke raised it
                raised = exc
            with call.lock:
                call.payload, call.error_type, call.raised = payload, error_type, raised
                call.finished = True
                call.ended_at = time.perf_counter()
                late = call.timed_out
            call.done.set()
            if late:
                self._finished_late(spec.name, context, started, call)

        threading.Thread(target=run, name=f"lambda:{spec.name}", daemon=True).start()
        call.done.wait(spec.timeout)
        with call.lock:
            if not call.finished:
                call.timed_out = True
        if call.timed_out:
            message = (
                f"RequestId: {context.aws_request_id} Error: Task timed out after "
                f"{spec.timeout:.2f} seconds"
            )
            self._record(
                TimedInvocation(
                    name, context.aws_request_id, LAMBDA_TIMEOUT_ERROR, spec.timeout * 1000, True
                )
            )
            self._log(f"{context.aws_request_id} {message}")
            return {
                "errorMessage": message,
                "errorType": LAMBDA_TIMEOUT_ERROR,
            }, LAMBDA_TIMEOUT_ERROR
        if call.raised is not None:
            raise call.raised
        gone = caller is not None and not caller.is_running()
        self._record(
            TimedInvocation(
                name,
                context.aws_request_id,
                call.error_type,
                (call.ended_at - started) * 1000,
                caller_gone=gone,
            )
        )
        if gone:
            self._log(
                f"onceflow: WARNING {spec.name} request {context.aws_request_id} returned after "
                "the Task that called it had ended (its TimeoutSeconds passed or the execution "
                "ended): its effects happened, as on AWS, and its result went nowhere"
            )
        return call.payload, call.error_type

    def _finished_late(
        self, function: str, context: LambdaContext, started: float, call: _Call
    ) -> None:
        duration = (call.ended_at - started) * 1000
        self._record(
            TimedInvocation(
                function,
                context.aws_request_id,
                LAMBDA_TIMEOUT_ERROR,
                duration,
                timed_out=True,
                finished_after_timeout=True,
            ),
            replace=context.aws_request_id,
        )
        self._log(
            f"onceflow: WARNING {function} request {context.aws_request_id} ran on after its "
            f"Timeout of {context.timeout_seconds:g} s and returned after {duration / 1000:.2f} s: "
            "on AWS the sandbox stops at the Timeout, so what it did after that happened "
            "locally only"
        )


# ---------------------------------------------------------------------------
# DynamoDB: item size (AWS's formula) and numbers
# ---------------------------------------------------------------------------


def _number_size(text: str) -> int:
    """AWS: "(1 byte per two significant digits) + (1 byte)", leading and trailing
    zeroes trimmed (the docs call it approximate)."""
    try:
        number = decimal.Decimal(text)
    except (decimal.InvalidOperation, ValueError, TypeError):
        return len(str(text))
    digits = "".join(map(str, number.as_tuple().digits)).strip("0") if number.is_finite() else ""
    return (len(digits) + 1) // 2 + 1


def _binary_size(value: Any) -> int:
    if isinstance(value, bytes | bytearray):
        return len(value)
    try:
        return len(base64.b64decode(str(value), validate=False))
    except (binascii.Error, ValueError):
        return len(str(value))


def _utf8(text: Any) -> int:
    return len(str(text).encode("utf-8", "surrogatepass"))


def attribute_size(value: Any) -> int:
    """Bytes of one attribute value, as "DynamoDB item sizes and formats" counts them."""
    kind, data = (value.type, value.value) if hasattr(value, "type") else next(iter(value.items()))
    if kind == "S":
        return _utf8(data)
    if kind == "N":
        return _number_size(str(data))
    if kind == "B":
        return _binary_size(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(v) for v in data)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in data)
    if kind == "BS":
        return sum(_binary_size(v) for v in data)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + _utf8(k) + attribute_size(v) for k, v in data.items())
    return _utf8(data)


def item_size(attributes: Mapping[str, Any]) -> int:
    return sum(_utf8(name) + attribute_size(value) for name, value in attributes.items())


def _limited_setitem(self: Any, key: str, value: Any) -> None:
    """moto's item-size check with AWS's arithmetic: at most 400 KB (409,600 bytes);
    numbers by significant digits, lists and maps with their overhead. moto's
    stopped at 405,000 of its own count and counted a replaced attribute twice."""
    others = sum(_utf8(k) + attribute_size(v) for k, v in self.items() if k != key)
    if others + _utf8(key) + attribute_size(value) > DYNAMODB_ITEM_LIMIT:
        raise ItemSizeTooLarge
    dict.__setitem__(self, key, value)


_NUMBER_OVERFLOW: Final = (
    "Number overflow. Attempting to store a number with magnitude larger than supported range"
)
_NUMBER_UNDERFLOW: Final = (
    "Number underflow. Attempting to store a number with magnitude smaller than supported range"
)
_NUMBER_DIGITS: Final = "Attempting to store more than 38 significant digits in a Number"


def number_problem(text: str) -> str | None:
    """What DynamoDB says of a number it cannot store: more than 38 significant
    digits, or a magnitude outside 1E-130 .. 9.99...E+125 (zero is fine)."""
    try:
        number = decimal.Decimal(text)
    except (decimal.InvalidOperation, ValueError, TypeError):
        return None  # not a number at all: moto answers that itself
    if not number.is_finite() or number.is_zero():
        return None
    digits = "".join(map(str, number.as_tuple().digits)).strip("0")
    if len(digits) > DYNAMODB_NUMBER_DIGITS:
        return _NUMBER_DIGITS
    if number.adjusted() > 125:
        return _NUMBER_OVERFLOW
    if number.adjusted() < -130:
        return _NUMBER_UNDERFLOW
    return None


def _numbers_in(value: Any) -> Any:
    """Every number of every AttributeValue in a request (N and NS members)."""
    if isinstance(value, dict):
        if len(value) == 1:
            kind, data = next(iter(value.items()))
            if kind == "N" and isinstance(data, str):
                yield data
                return
            if kind == "NS" and isinstance(data, list):
                yield from (n for n in data if isinstance(n, str))
                return
        for member in value.values():
            yield from _numbers_in(member)
    elif isinstance(value, list):
        for member in value:
            yield from _numbers_in(member)


def _checked_dynamodb_call(self: Any) -> Any:
    """DynamoDB validates every number of every AttributeValue in a request before
    anything else; moto checked only the top level of PutItem, through a float."""
    for number in _numbers_in(getattr(self, "params", None) or {}):
        problem = number_problem(number)
        if problem is not None:
            raise MockValidationException(problem)
    return _ORIGINAL["dynamodb_call"](self)


# ---------------------------------------------------------------------------
# SQS: message size in bytes (body and attributes), valid characters
# ---------------------------------------------------------------------------

_SQS_ALLOWED: Final = "#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]"
_SQS_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _invalid_character(text: str) -> str | None:
    found = _SQS_INVALID.search(text)
    return None if found is None else f"#x{ord(found.group()):X}"


def _attribute_value_bytes(value: Mapping[str, Any]) -> int:
    if "StringValue" in value:
        return _utf8(value["StringValue"])
    if "BinaryValue" in value:
        return _binary_size(value["BinaryValue"])
    return 0


def sqs_message_size(body: str, attributes: Mapping[str, Any] | None) -> int:
    """SQS counts the body's bytes and every part of every message attribute
    (name, data type, value) against the queue's MaximumMessageSize."""
    size = _utf8(body)
    for name, value in (attributes or {}).items():
        size += _utf8(name) + _utf8(value.get("DataType", "")) + _attribute_value_bytes(value)
    return size


def _check_sqs_message(queue: Any, body: str, attributes: Mapping[str, Any] | None) -> None:
    bad = _invalid_character(body)
    if bad is not None:
        raise SQSException(
            "InvalidMessageContents",
            f"Invalid binary character '{bad}' was found in the message body, the set of "
            f"allowed characters is {_SQS_ALLOWED}.",
        )
    for name, value in (attributes or {}).items():
        text = value.get("StringValue")
        bad = _invalid_character(text) if isinstance(text, str) else None
        if bad is not None:  # the wording for attributes is not verified
            raise SQSException(
                "InvalidMessageContents",
                f"Invalid binary character '{bad}' was found in the value of message "
                f"attribute '{name}', the set of allowed characters is {_SQS_ALLOWED}.",
            )
    size = sqs_message_size(body, attributes)
    limit = int(queue.maximum_message_size)
    if size > limit:
        raise InvalidParameterValue(
            "One or more parameters are invalid. Reason: "
            f"Message must be shorter than {limit} bytes."
        )


def _send_message(self: Any, queue_name: str, message_body: str, *args: Any, **kwargs: Any) -> Any:
    if message_body is None:  # SQS's own answer (moto's size check met None and crashed)
        raise sqs_exceptions.MissingParameter("MessageBody")
    attributes = kwargs.get("message_attributes", args[0] if args else None)
    _check_sqs_message(self.get_queue(queue_name), message_body, attributes)
    return _ORIGINAL["send_message"](self, queue_name, message_body, *args, **kwargs)


def _send_message_batch(self: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
    queue = self.get_queue(queue_name)
    total = 0
    for entry in entries.values():
        _check_sqs_message(queue, entry["MessageBody"], entry.get("MessageAttributes"))
        total += sqs_message_size(entry["MessageBody"], entry.get("MessageAttributes"))
    if total > SQS_BATCH_LIMIT:
        raise BatchRequestTooLong(total)
    return _ORIGINAL["send_message_batch"](self, queue_name, entries)


# ---------------------------------------------------------------------------
# EventBridge: PutEvents entry size
# ---------------------------------------------------------------------------


def put_events_entry_size(entry: Mapping[str, Any]) -> int:
    """EventBridge's "Calculating PutEvents event entry size": Time 14 bytes if
    given; Source, DetailType, Detail and each of Resources in UTF-8 bytes."""
    size = 14 if entry.get("Time") is not None else 0
    for name in ("Source", "DetailType", "Detail"):
        if entry.get(name) is not None:
            size += _utf8(entry[name])
    return size + sum(_utf8(r) for r in entry.get("Resources") or [] if r is not None)


def _put_events(self: Any, events: list[dict[str, Any]]) -> Any:
    if sum(put_events_entry_size(e) for e in events) >= EVENTBRIDGE_ENTRIES_LIMIT:
        raise EventsValidationException(EVENTBRIDGE_TOO_LARGE)
    return _ORIGINAL["put_events"](self, events)


def _sized_custom_events(put_custom_event: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """The engine's PutEvents of one custom event, refused as PutEvents refuses it.

    The Detail is sized as the compact JSON text a client sends for the object.
    """

    def checked(source: str, detail_type: str, detail: Any) -> list[str]:
        entry = {
            "Source": source,
            "DetailType": detail_type,
            "Detail": json.dumps(detail, ensure_ascii=False, separators=(",", ":")),
        }
        if put_events_entry_size(entry) >= EVENTBRIDGE_ENTRIES_LIMIT:
            response: Any = {
                "Error": {"Code": "ValidationException", "Message": EVENTBRIDGE_TOO_LARGE},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            raise ClientError(response, "PutEvents")
        return put_custom_event(source, detail_type, detail)

    return checked


__all__ = [
    "DYNAMODB_ITEM_LIMIT",
    "EVENTBRIDGE_ENTRIES_LIMIT",
    "EXPRESS_DURATION_LIMIT",
    "HISTORY_EVENT_LIMIT",
    "STATE_SIZE_LIMIT",
    "ExecutionEnded",
    "ExecutionLimits",
    "TimedInvocation",
    "TimedInvoke",
    "attribute_size",
    "execution_limits",
    "install",
    "installed",
    "item_size",
    "json_bytes",
    "number_problem",
    "put_events_entry_size",
    "sqs_message_size",
    "uninstall",
    "within_state_quota",
]


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
    Patch(
        name="Lambda timeout callers",
        kind="limit",
        why="A handler past its function's Timeout answers Sandbox.Timedout to the task "
        "that waits for it (Troubleshoot invocation issues in Lambda). " + _DOCS,
        test="tests/workflow/test_limits.py",
        install=_install_lambda_callers,
        fits=lambda: gone(lambda_eval_utils, *_LAMBDA_CALLS),
    ),
    Patch(
        name="DynamoDB, SQS and EventBridge sizes",
        kind="limit",
        why="DynamoDB's 400 KB item and 38-digit numbers, SQS's 256 KiB bodies and "
        "characters, EventBridge's 1 MB PutEvents, refused as AWS refuses them. " + _DOCS,
        test="tests/workflow/test_limits.py",
        install=_install_services,
        fits=_services_fit,
    ),
)
