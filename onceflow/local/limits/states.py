"""Step Functions' quotas: 256 KiB of UTF-8 JSON per state's data, 25,000 history
events per STANDARD execution, five minutes per EXPRESS one (docs/local-engine.md)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from moto.stepfunctions.parser.api import HistoryEventType as Event
from moto.stepfunctions.parser.asl.component.common.assign import assign_decl
from moto.stepfunctions.parser.asl.component.common.error_name import failure_event
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType as Errors,
)
from moto.stepfunctions.parser.asl.component.program import program as sfn_program
from moto.stepfunctions.parser.asl.component.state import state as sfn_state
from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service
from moto.stepfunctions.parser.asl.eval import environment as sfn_environment
from moto.stepfunctions.parser.asl.eval.event import event_manager as sfn_event_manager
from moto.stepfunctions.parser.backend import execution_worker
from moto.stepfunctions.parser.utils import TMP_THREADS

from onceflow.local.limits.common import ORIGINAL, limit
from onceflow.local.patches import hooks
from onceflow.local.patches.fidelity.express_arn import is_express
from onceflow.local.patches.registry import lacks, takes

# Docs: "Step Functions service quotas"; "Error handling in Step Functions",
# States.DataLimitExceeded; "Avoid reaching the history quota".
STATE_SIZE_LIMIT: Final = 262_144  # bytes of UTF-8 JSON text per input, output, Assign
VARIABLES_SIZE_LIMIT: Final = 10 * 1024 * 1024  # all variables of an execution (not verified)
HISTORY_EVENT_LIMIT: Final = 25_000
HISTORY_LIMIT_CAUSE: Final = "The execution reached the maximum number of history events (25000)."
EXPRESS_DURATION_LIMIT: Final = 300.0  # seconds
_TOO_LARGE: Final = "the maximum number of bytes service limit."


# ---- 256 KiB of UTF-8 JSON text per state input, output, task parameters and Assign


def json_bytes(value: Any) -> int:
    """Bytes of the value as Step Functions holds it: compact JSON text in UTF-8 (moto
    counts ASCII-escaped JSON). A lone surrogate counts as its escape (as JavaScript's
    JSON.stringify writes it); what JSON cannot hold (an SDK call's timestamp) as its text."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return len(text.encode("utf-8", "backslashreplace"))


def within_state_quota(value: Any) -> bool:
    """AWS: 262,144 bytes of data as a UTF-8 encoded string (at most, not below)."""
    return json_bytes(value) <= STATE_SIZE_LIMIT


def _data_limit(env: Any, event: Event, failed: str, cause: str, **details: Any) -> Exception:
    """States.DataLimitExceeded, with its cause and details in f"{failed}FailedEventDetails"."""
    error = Errors.StatesStatesDataLimitExceeded
    named = {"error": error.to_name(), "cause": cause, **details}
    event_details: Any = {f"{failed}FailedEventDetails": named}
    failure = failure_event.FailureEvent(env, StatesErrorName(typ=error), event, event_details)
    return failure_event.FailureEventException(failure_event=failure)


def _before_task(
    self: Any, env: Any, resource_runtime_part: Any, raw_parameters: Any, state_credentials: Any
) -> None:
    """AWS: States.DataLimitExceeded when, after Parameters (Arguments) processing,
    the input of a state is larger than the quota; the task is not scheduled."""
    if not within_state_quota(raw_parameters):
        resource, kind = self._get_sfn_resource(), self._get_sfn_resource_type()
        # named by its resource type, as AWS names a result over the quota (recorded:
        # test_states_errors); for an input not verified
        cause = f"The state/task '{kind}' has an input with a size exceeding {_TOO_LARGE}"
        raise _data_limit(
            env, Event.TaskFailed, "task", cause, resource=resource, resourceType=kind
        )
    ORIGINAL[_before_task](self, env, resource_runtime_part, raw_parameters, state_credentials)


def _lambda_parameters(self: Any, env: Any) -> Any:
    parameters = ORIGINAL[_lambda_parameters](self, env)
    if not within_state_quota(parameters.get("Payload")):
        resource = self.resource.resource_arn
        cause = f"The state/task '{resource}' has an input with a size exceeding {_TOO_LARGE}"
        raise _data_limit(env, Event.LambdaFunctionFailed, "lambdaFunction", cause)
    return parameters


def _assign(self: Any, env: Any) -> None:
    """Assign, as moto evaluates it, with the size quotas of variables checked first:
    one state's assignments hold at most 256 KiB (AWS: "up to 256 KiB per state");
    all variables of an execution at most 10 MiB (not verified)."""
    declarations: dict[str, Any] = {}
    for binding in self.declaration_bindings:
        binding.eval(env=env)
        declarations.update(env.stack.pop())
    store = env.variable_store
    every = {**store._outer_scope, **store._inner_scope, **declarations}
    if json_bytes(declarations) > STATE_SIZE_LIMIT:
        what = "variables with a size exceeding"
    elif json_bytes(every) > VARIABLES_SIZE_LIMIT:
        what = "variables that bring the execution's variables over"
    else:
        for identifier, value in declarations.items():
            store.set(variable_identifier=identifier, variable_value=value)
        return
    state = env.states.context_object.context_object_data.get("State") or {}
    cause = f"The state/task '{state.get('Name', '')}' assigned {what} {_TOO_LARGE}"
    raise _data_limit(env, Event.TaskFailed, "execution", cause)


# ---- 25,000 history events (STANDARD), five minutes (EXPRESS) ---------------------

# Events after which moto goes on to call a service or a function: once an execution
# has ended, raising at one of them keeps the call from happening (each is added
# inside the task's own error handling).
_BEFORE_A_CALL: Final = frozenset({
    Event.TaskScheduled, Event.TaskStarted, Event.TaskSubmitted, Event.LambdaFunctionScheduled,
    Event.LambdaFunctionStarted, Event.ActivityScheduled, Event.ActivityStarted,
})  # fmt: skip
_TERMINAL: Final = frozenset({
    Event.ExecutionSucceeded, Event.ExecutionFailed, Event.ExecutionAborted,
    Event.ExecutionTimedOut,
})  # fmt: skip
_RECORD = "_onceflow_limits"


class ExecutionEnded(RuntimeError):
    """Raised where moto would go on to call a service for an execution that has ended."""


class ExecutionLimits:
    """One execution's clock and end, shared by every frame of it (through its EventManager)."""

    def __init__(self, env: Any, execution: Any) -> None:
        self.root = env
        self.execution = execution
        self.express = is_express(execution.state_machine)  # moto runs all as STANDARD
        self.lock = threading.RLock()
        self.started = time.monotonic()
        self.virtual = 0.0  # seconds slept on the engine's clock but not in real time
        self.closed = False  # set once the limit's end is in place (set_error is open till then)
        self.reason: str | None = None
        self.clock = hooks._clock(env)  # its engine's clock (a clock of its own if none)

    def remaining(self) -> float:
        return EXPRESS_DURATION_LIMIT - (time.monotonic() - self.started + self.virtual)

    def advance(self, seconds: float) -> None:
        """A sleep of seconds on the engine's clock took seconds * scale in real time
        (counted for EXPRESS executions only)."""
        self.virtual += seconds * (1.0 - self.clock.scale)

    def last_event_id(self) -> int:
        return int(self.root.event_manager._event_id_gen._next_id) - 1

    def _close(self, reason: str, event_type: Event, details: Any, end: Callable[[], None]) -> None:
        with self.lock:
            if self.closed:
                return
            self.reason = reason
            context = sfn_event_manager.EventHistoryContext(self.last_event_id())
            ORIGINAL[_add_event](self.root.event_manager, context, event_type, details)
            end()
            self.closed = True

    def close_history(self) -> None:
        """AWS: the 25,000th event, unless it is ExecutionSucceeded, is an
        ExecutionFailed with States.Runtime, and the execution ends there."""
        failure: Any = {"error": Errors.StatesRuntime.to_name(), "cause": HISTORY_LIMIT_CAUSE}
        details = {"executionFailedEventDetails": failure}
        self._close("history", Event.ExecutionFailed, details, lambda: self.root.set_error(failure))

    def close_express(self) -> None:
        """AWS: an EXPRESS execution that runs for more than five minutes fails with
        a States.Timeout error (and counts in ExecutionsTimedOut)."""
        details = {"executionTimedOutEventDetails": {"error": Errors.StatesTimeout.to_name()}}
        self._close("express", Event.ExecutionTimedOut, details, self.root.set_timed_out)


def execution_limits(env: Any) -> ExecutionLimits | None:
    return getattr(getattr(env, "event_manager", None), _RECORD, None)


def _evaluation_environment(self: Any) -> Any:
    env = ORIGINAL[_evaluation_environment](self)
    execution = self._execution_communication.execution
    setattr(env.event_manager, _RECORD, ExecutionLimits(env, execution))
    return env


def _add_event(self: Any, context: Any, event_type: Event, *args: Any, **kwargs: Any) -> int:
    record: ExecutionLimits | None = getattr(self, _RECORD, None)
    if record is None:
        return int(ORIGINAL[_add_event](self, context, event_type, *args, **kwargs))
    with record.lock:  # (closing a closed record changes nothing)
        full = self._event_id_gen._next_id >= HISTORY_EVENT_LIMIT
        if record.express and record.remaining() <= 0 and event_type not in _TERMINAL:
            record.close_express()
        elif not record.express and full and event_type != Event.ExecutionSucceeded:
            record.close_history()
        if not record.closed:
            return int(ORIGINAL[_add_event](self, context, event_type, *args, **kwargs))
    if event_type in _BEFORE_A_CALL:
        raise ExecutionEnded(f"the execution has ended ({record.reason}); {event_type} not added")
    return record.last_event_id()


def _unless_ended() -> Callable[..., None]:
    """Environment.set_error or set_timed_out, except once the execution has ended at a
    limit: that end stands; the errors its states raise on the way out do not replace it."""

    def method(self: Any, *args: Any, **kwargs: Any) -> None:
        record = execution_limits(self)
        if record is None:
            ORIGINAL[method](self, *args, **kwargs)
            return
        with record.lock:  # a limit ending the execution meanwhile: its end first
            if not record.closed:
                ORIGINAL[method](self, *args, **kwargs)

    return method


def _program_eval(self: Any, env: Any) -> None:
    """moto's Program.eval (the states on a worker thread, joined with the machine's
    TimeoutSeconds), joined also with an EXPRESS execution's five minutes on its clock."""
    record = execution_limits(env)
    if record is None or not record.express or env.is_frame():
        ORIGINAL[_program_eval](self, env)
        return
    timeout = self.timeout_seconds.timeout_seconds if self.timeout_seconds else math.inf
    env.next_state_name = self.start_at.start_at_name
    states = super(sfn_program.Program, self).eval  # moto's Program.eval runs this too
    worker = threading.Thread(target=states, args=(env,), daemon=True)
    TMP_THREADS.append(worker)
    worker.start()
    ends = time.monotonic() + timeout
    while worker.is_alive() and record.remaining() > 0 and time.monotonic() < ends:
        # sleeps on the engine's clock move the deadline closer: look again soon
        worker.join(min(record.remaining(), ends - time.monotonic(), 1.0))
    if worker.is_alive() and record.remaining() <= 0:
        record.close_express()
    elif worker.is_alive():
        env.set_timed_out()
    if record.reason == "express":  # moto answers TIMED_OUT (the end stands) without an error
        record.execution.error = Errors.StatesTimeout.to_name()


def _pause(env: Any, seconds: float, sleep: Callable[[float], None]) -> None:
    """A Wait or a retry's backoff (hooks.Stages.pause), on the engine's clock: not slept
    once the execution has ended; an EXPRESS one ends at its five minutes (sleeps of
    branches side by side add up: docs/local-engine.md, "AWS limits on the local engine")."""
    record = execution_limits(env)
    if record is None:
        sleep(seconds)
    elif not record.closed:
        left = max(record.remaining(), 0.0) if record.express else math.inf
        sleep(min(seconds, left))
        record.advance(min(seconds, left))
        if seconds >= left:
            record.close_express()


_task = state_task_service.StateTaskService
_worker = execution_worker.ExecutionWorker
_DOCS = "docs/local-engine.md (AWS limits on the local engine)"
PATCHES = (
    limit(
        "Step Functions sizes",
        "256 KiB of UTF-8 JSON per state input, output, task parameters and Assign, "
        "States.DataLimitExceeded over it (Step Functions service quotas); moto counts "
        "ASCII-escaped JSON. " + _DOCS,
        "tests/workflow/test_limits.py",
        *((m, "is_within_size_quota", within_state_quota)
          for m in (sfn_state, state_task_lambda, state_task_service)),
        (_task, "_before_eval_execution", _before_task),
        (state_task_lambda.StateTaskLambda, "_eval_parameters", _lambda_parameters),
        (assign_decl.AssignDecl, "_eval_body", _assign),
        fits=lambda: takes(_task._before_eval_execution, "self", "env",
                           "resource_runtime_part", "raw_parameters", "state_credentials"),
    ),
    limit(
        "Step Functions history and duration",
        "A STANDARD execution fails at 25,000 history events; an EXPRESS one times "
        "out at five minutes, Wait and Retry backoff included (Step Functions service "
        "quotas); moto has neither. " + _DOCS,
        "tests/workflow/test_limits.py",
        (sfn_event_manager.EventManager, "add_event", _add_event),
        (_worker, "_get_evaluation_environment", _evaluation_environment),
        (sfn_environment.Environment, "set_error", _unless_ended()),
        (sfn_environment.Environment, "set_timed_out", _unless_ended()),
        (sfn_program.Program, "eval", _program_eval),
        (hooks.Stages, "pause", staticmethod(_pause)),
        fits=lambda: [
            *takes(sfn_event_manager.EventManager.add_event, "self", "context",
                   "event_type", "event_details", "timestamp", "update_source_event_id"),
            *lacks(_worker, "self._execution_communication = exec_comm"),
        ],
    ),
)  # fmt: skip
