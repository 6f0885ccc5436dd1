"""The engine's own instruments inside moto: its clock, its request log and
faults, handlers run in-process, and a signal when an execution ends.

All of it belongs to one engine (an ``EngineState``): two engines in one
process keep their own clock, log, faults, functions and executions. A call is
the engine's whose work it is: the engine's clients set it, a handler the engine
runs sets it, and a state of an execution finds it by its state machine.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from moto.awslambda import models as lambda_models
from moto.core import botocore_stubber
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_map import state_map
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import state_parallel
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    state_task_activitiy,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    state_task_lambda as sfn_task_lambda,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function
from moto.stepfunctions.parser.backend import execution_worker

from onceflow.local.patches.registry import Installer, Patch, gone, takes

# --------------------------------------------------------------------------
# One engine's state, and which engine a call is for
# --------------------------------------------------------------------------


class Clock:
    """The time scale; 1.0 sleeps as AWS would, 0.0 never sleeps."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.slept: list[float] = []  # requested (unscaled) sleeps, for tests

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if seconds > 0 and self.scale > 0:
            time.sleep(seconds * self.scale)


@dataclass(frozen=True)
class RecordedRequest:
    """One request a client made to an emulated service, after it answered."""

    service: str
    operation: str
    status: int
    bucket: str = ""
    key: str = ""


@dataclass
class RequestLog:
    """What the local services were asked, for effect counting and cost models."""

    enabled: bool = True
    requests: list[RecordedRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: RecordedRequest) -> None:
        if self.enabled:
            with self._lock:
                self.requests.append(request)

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self.requests)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()


class ExecutionSignals:
    """One threading.Event per execution ARN, set when its worker ends."""

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, arn: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(arn, threading.Event())

    def finished(self, arn: str) -> None:
        self.event(arn).set()

    def clear(self) -> None:
        with self._lock:
            self._events.clear()


# Fault injection (the chaos harness): each injector sees (service, operation,
# request body) and may answer in the service's place, with an error response
# (status, headers, body) as the service would send it.
FaultInjector = Callable[[str, str, str], tuple[int, dict[str, str], str] | None]
InProcessInvoker = Callable[[Any], tuple[str, bool, str]]


@dataclass(eq=False)
class EngineState:
    """What one engine keeps inside the patches."""

    name: str
    clock: Clock = field(default_factory=Clock)
    requests: RequestLog = field(default_factory=RequestLog)
    faults: list[FaultInjector] = field(default_factory=list)
    finished: ExecutionSignals = field(default_factory=ExecutionSignals)
    invokers: dict[str, InProcessInvoker] = field(default_factory=dict)  # by function name
    machines: set[str] = field(default_factory=set)  # names of its state machines


CURRENT: contextvars.ContextVar[EngineState | None] = contextvars.ContextVar(
    "onceflow_engine", default=None
)
_RUNNING: list[EngineState] = []
_RUNNING_LOCK = threading.Lock()


def register(state: EngineState) -> None:
    with _RUNNING_LOCK:
        if not any(s is state for s in _RUNNING):
            _RUNNING.append(state)


def unregister(state: EngineState) -> None:
    with _RUNNING_LOCK:
        _RUNNING[:] = [s for s in _RUNNING if s is not state]


def current() -> EngineState | None:
    """The engine this call is for; with none set, the engine started last."""
    state = CURRENT.get()
    if state is not None:
        return state
    with _RUNNING_LOCK:
        return _RUNNING[-1] if _RUNNING else None


@contextmanager
def working_for(state: EngineState | None) -> Iterator[None]:
    """Make the calls of this thread (and its context) the work of state's engine."""
    token = CURRENT.set(state)
    try:
        yield
    finally:
        CURRENT.reset(token)


def on_behalf_of(state: EngineState, client: Any) -> Any:
    """client, its calls the work of state's engine wherever they are made."""
    make_api_call = client._make_api_call

    def engine_call(operation_name: str, api_params: Any) -> Any:
        if operation_name == "CreateStateMachine":  # its executions' calls are this engine's
            state.machines.add(str(api_params.get("name", "")))
        with working_for(state):
            return make_api_call(operation_name, api_params)

    client._make_api_call = engine_call
    return client


def machine_name(arn: str) -> str:
    """The state machine's name in a state machine, execution or map run ARN."""
    parts = arn.split(":")
    return parts[6].split("/", 1)[0] if len(parts) > 6 else ""


def for_machine(arn: str) -> EngineState | None:
    """The running engine whose state machine (or execution of it) arn names."""
    name = machine_name(arn)
    with _RUNNING_LOCK:
        for state in reversed(_RUNNING):
            if name in state.machines:
                return state
    return None


def for_env(env: Any) -> EngineState | None:
    """The engine running the execution env belongs to."""
    try:
        arn = env.states.context_object.context_object_data["StateMachine"]["Id"]
    except (AttributeError, KeyError, TypeError):
        return current()
    return for_machine(str(arn)) or current()


# --------------------------------------------------------------------------
# Time scale: Retry backoff and Wait states sleep on their engine's clock, the
# ASL untouched.
# --------------------------------------------------------------------------


class _ScaledTimeModule:
    """Stands in for the ``time`` module inside moto's retrier."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        state = current()
        (state.clock if state is not None else Clock()).sleep(seconds)


def _scaled_wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
    state = for_env(env)
    clock = state.clock if state is not None else Clock()
    clock.slept.append(wait_seconds)
    scaled = wait_seconds * clock.scale
    if scaled > 0:
        env.program_state_event.wait(scaled)


def _for_its_machine(original: Any) -> Any:
    """A state's work (and a retrier's wait) as the work of its execution's engine:
    a task runs on a thread of its own, and Map and Parallel branches on theirs."""

    def evaluate(component: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
        with working_for(for_env(env)), Stages.machine_role(env):
            return original(component, env, *args, **kwargs)

    return evaluate


_STATE_CLASSES = (
    state_task_service.StateTaskService,
    sfn_task_lambda.StateTaskLambda,
    state_task_activitiy.StateTaskActivity,
    state_map.StateMap,
    state_parallel.StateParallel,
)


def _install_clock(installer: Installer) -> None:
    installer.replace(retrier_decl, "time", _ScaledTimeModule())
    installer.replace(wait_function.WaitFunction, "_wait_interval", _scaled_wait_interval)
    installer.replace(
        retrier_decl.RetrierDecl,
        "_eval_body",
        _for_its_machine(retrier_decl.RetrierDecl._eval_body),
    )
    for state_class in _STATE_CLASSES:
        installer.replace(
            state_class, "_eval_execution", _for_its_machine(state_class._eval_execution)
        )


def _clock_fits() -> list[str]:
    import inspect

    problems = []
    if "time.sleep(interval_seconds)" not in inspect.getsource(retrier_decl):
        problems.append("moto's retrier no longer sleeps through time.sleep")
    if "program_state_event.wait" not in inspect.getsource(
        wait_function.WaitFunction._wait_interval
    ):
        problems.append("moto's Wait no longer waits on program_state_event")
    if list(inspect.signature(retrier_decl.RetrierDecl._eval_body).parameters) != ["self", "env"]:
        problems.append("moto's RetrierDecl._eval_body no longer takes (self, env)")
    for state_class in _STATE_CLASSES:
        if "_eval_execution" not in vars(state_class):
            problems.append(f"{state_class.__name__}._eval_execution is gone")
    return problems


# --------------------------------------------------------------------------
# The request log and injected faults: every request into the DynamoDB, S3 and
# SQS backends is recorded in its engine's log, after its engine's faults had
# their chance to answer instead.
# --------------------------------------------------------------------------

LOGGED_SERVICE = re.compile(r"^(?:[^/]*\.)?(dynamodb|sqs|s3)[.-]")


def describe(request: Any, service: str) -> tuple[str, str, str]:
    """(operation, bucket, key) of a request, as far as reports need them."""
    headers = request.headers
    target = headers.get("X-Amz-Target") or headers.get("x-amz-target")
    if target:
        if isinstance(target, bytes):
            target = target.decode()
        return target.rsplit(".", 1)[-1], "", ""
    if service != "s3":
        return "Unknown", "", ""
    parts = urlsplit(request.url)
    host_bucket = parts.netloc.split(".s3", 1)[0] if ".s3" in parts.netloc else ""
    path = parts.path.lstrip("/")
    if host_bucket:
        bucket, key = host_bucket, path
    else:
        bucket, _, key = path.partition("/")
    query = parts.query
    method = request.method
    if not key:
        operation = {"GET": "ListObjects", "PUT": "CreateBucket"}.get(method, method)
    elif method == "PUT" and not query:
        operation = "PutObject"
    elif method == "GET" and not query.startswith(("tagging", "acl", "uploads")):
        operation = "GetObject"
    else:
        operation = f"{method}?{query.split('=', 1)[0]}"
    return operation, bucket, unquote(key)


def dynamodb_error(code: str, message: str) -> tuple[int, dict[str, str], str]:
    """A DynamoDB error response (JSON protocol), e.g. ProvisionedThroughputExceededException."""
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message})
    headers = {
        "x-amzn-ErrorType": code,
        "x-amzn-RequestId": str(uuid.uuid4()),  # as every DynamoDB response has
        "Content-Type": "application/x-amz-json-1.0",
    }
    return 400, headers, body


def sqs_error(code: str, message: str) -> tuple[int, dict[str, str], str]:
    """An SQS error response (JSON protocol), e.g. KmsAccessDenied on SendMessage."""
    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": message})
    headers = {
        "x-amzn-query-error": f"{code};Sender",
        "x-amzn-RequestId": str(uuid.uuid4()),
        "Content-Type": "application/x-amz-json-1.0",
    }
    return 400, headers, body


def _injected(
    state: EngineState, service: str, request: Any
) -> tuple[int, dict[str, str], str] | None:
    if not state.faults:
        return None
    operation, _, _ = describe(request, service)
    body = request.body
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    for injector in list(state.faults):
        response = injector(service, operation, text)
        if response is not None:
            return response
    return None


def _faults_and_log(request: Any, answer: Callable[[], Any]) -> Any:
    match = LOGGED_SERVICE.match(urlsplit(request.url).netloc)
    state = current() if match is not None else None
    if match is None or state is None:
        return answer()
    service = match.group(1)
    response = _injected(state, service, request) or answer()
    if response is not None:
        operation, bucket, key = describe(request, service)
        state.requests.add(RecordedRequest(service, operation, response[0], bucket, key))
    return response


def _pass(request: Any, answer: Callable[[], Any]) -> Any:
    return answer()


@contextmanager
def _as_no_role(env: Any) -> Iterator[None]:
    yield


class Stages:
    """The request-level concerns around moto's answer to one request, in ORDER
    (outermost first), each ``stage(request, answer)`` calling ``answer()`` to go on:

    - ``iam``: a call made as a role is checked; a denied one never reaches moto
      (onceflow/local/iam.py puts it in place);
    - ``serialise``: DynamoDB, S3 and SQS requests are served one at a time (the
      fidelity patch "atomic single-item writes");
    - ``faults_and_log``: an injected fault answers instead of moto; what was
      answered goes to the engine's request log.

    botocore's own ``before-send`` event cannot hold them: botocore calls every
    handler of it and moto's handler answers whatever an earlier one returned, so
    no handler there can answer in moto's place or hold a lock around its work.
    They live in one replacement of moto's process_request instead, the order
    this list, each stage a slot the registry fills and empties.

    ``machine_role`` is the IAM slot of a state's work: each task, Map and Parallel
    state (already wrapped to work for its engine) runs as its machine's role.
    """

    machine_role = staticmethod(_as_no_role)
    iam = staticmethod(_pass)
    serialise = staticmethod(_pass)
    faults_and_log = staticmethod(_faults_and_log)


ORDER = ("iam", "serialise", "faults_and_log")


def _through_stages(original: Any) -> Any:
    def process_request(stubber: Any, request: Any) -> Any:
        answer = functools.partial(original, stubber, request)
        for name in reversed(ORDER):
            answer = functools.partial(getattr(Stages, name), request, answer)
        return answer()

    return process_request


def _install_stages(installer: Installer) -> None:
    stubber = botocore_stubber.BotocoreStubber
    installer.replace(stubber, "process_request", _through_stages(stubber.process_request))


def stubber_fits() -> list[str]:
    return takes(botocore_stubber.BotocoreStubber.process_request, "self", "request")


# --------------------------------------------------------------------------
# Lambda: run the template's handler in-process instead of in Docker.
# --------------------------------------------------------------------------


def _in_process(original: Any) -> Any:
    def invoke_lambda(function: Any, event: Any = None) -> tuple[str, bool, str]:
        name = function.function_name
        state = current()
        invoker = state.invokers.get(name) if state is not None else None
        if invoker is None:
            with _RUNNING_LOCK:
                found = [s.invokers[name] for s in reversed(_RUNNING) if name in s.invokers]
            invoker = found[0] if found else None
        if invoker is None:
            return original(function, event)  # type: ignore[no-any-return]
        return invoker(event)

    return invoke_lambda


def _install_lambda(installer: Installer) -> None:
    function = lambda_models.LambdaFunction
    installer.replace(function, "_invoke_lambda", _in_process(function._invoke_lambda))


# --------------------------------------------------------------------------
# Finished executions signal their end, so a caller waiting for one wakes at
# once instead of polling DescribeExecution (which was half of each
# execution's wall time locally).
# --------------------------------------------------------------------------


def _signalling(original: Any) -> Any:
    def execution_logic(worker: Any) -> None:
        arn = str(worker._evaluation_details.execution_details.arn)
        state = for_machine(arn)
        try:
            with working_for(state):
                original(worker)
        finally:
            if state is not None:
                state.finished.finished(arn)

    return execution_logic


def _install_signals(installer: Installer) -> None:
    worker = execution_worker.ExecutionWorker
    installer.replace(worker, "_execution_logic", _signalling(worker._execution_logic))


def _signals_fits() -> list[str]:
    import inspect

    logic = inspect.getsource(execution_worker.ExecutionWorker._execution_logic)
    if "self._execution_communication.terminated()" not in logic:
        return ["moto's execution worker no longer ends with terminated()"]
    return []


PATCHES = (
    Patch(
        name="time scale",
        kind="hook",
        why="Retry backoff and Wait states sleep on the engine's clock (time_scale), so a "
        "test need not wait out a 30-second backoff; the ASL is untouched.",
        test="tests/unit/test_patches.py::test_time_scale_zero_never_sleeps",
        install=_install_clock,
        fits=_clock_fits,
    ),
    Patch(
        name="request stages",
        kind="hook",
        why="One place for the request-level concerns (Stages, in ORDER: IAM, one request "
        "at a time, faults, then the request log behind the effect counts and the "
        "bench's bill).",
        test="tests/unit/test_patch_layer.py::test_two_engines_keep_their_own_clock_log_and_faults",
        install=_install_stages,
        fits=stubber_fits,
    ),
    Patch(
        name="handlers in-process",
        kind="hook",
        why="Lambda runs the template's handler (CodeUri + Handler); the engine runs it "
        "in-process instead of in Docker.",
        test="tests/workflow/test_processor.py",
        install=_install_lambda,
        fits=lambda: gone(lambda_models.LambdaFunction, "_invoke_lambda"),
    ),
    Patch(
        name="execution end signals",
        kind="hook",
        why="An execution's end wakes whoever waits for it, instead of polling.",
        test="tests/unit/test_patch_layer.py::test_two_engines_keep_their_own_clock_log_and_faults",
        install=_install_signals,
        fits=_signals_fits,
    ),
)
