"""The engine's own instruments inside moto, each engine's own (docs/local-engine.md,
"The engine's patches": engine hooks)."""

from __future__ import annotations

import contextvars
import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from botocore import client, endpoint
from botocore.awsrequest import AWSResponse
from botocore.endpoint import convert_to_response_dict
from botocore.parsers import create_parser
from moto.awslambda import models as lambda_models
from moto.core import botocore_stubber
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_map import state_map
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import state_parallel
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    state_task_activitiy,
    state_task_lambda,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function
from moto.stepfunctions.parser.backend import execution_worker

from onceflow.local.patches.registry import Installer, Patch, emits, gone, lacks, takes


@dataclass
class Clock:
    """The time scale; 1.0 sleeps as AWS would, 0.0 never sleeps."""

    scale: float = 1.0
    slept: list[float] = field(default_factory=list)  # requested (unscaled) sleeps, for tests

    def sleep(self, seconds: float, sleep: Callable[[float], Any] = time.sleep) -> None:
        self.slept.append(seconds)
        if seconds > 0 and self.scale > 0:
            sleep(seconds * self.scale)


@dataclass(frozen=True)
class RecordedRequest:
    """One request a client made to an emulated service, after it answered."""

    service: str
    operation: str
    status: int
    bucket: str = ""
    key: str = ""


class RequestLog(list[RecordedRequest]):
    """What the local services were asked (effect counts, cost models); append,
    clear and copy are each one atomic list operation."""

    def snapshot(self) -> list[RecordedRequest]:
        return list(self)


class ExecutionSignals(dict[str, threading.Event]):
    """One threading.Event per execution ARN, set when its worker ends."""

    def event(self, arn: str) -> threading.Event:
        return self.setdefault(arn, threading.Event())  # dict.setdefault is atomic


# Fault injection (the chaos harness): an injector sees (service, operation, request
# body) and may answer in the service's place with its error (status, headers, body).
Response = tuple[int, dict[str, str], str]
FaultInjector = Callable[[str, str, str], Response | None]
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
# The running engines, oldest first: changed only under patches' lock (install/uninstall).
RUNNING: list[EngineState] = []


def current() -> EngineState | None:
    """The engine this call is for; with none set, the engine started last."""
    return CURRENT.get() or next(iter(RUNNING[-1:]), None)  # one slice: no lock needed


# The execution frame (moto's Environment) whose state's work this thread does.
_ENV: contextvars.ContextVar[Any] = contextvars.ContextVar("onceflow_env", default=None)


@contextmanager
def setting(var: contextvars.ContextVar[Any], value: Any) -> Iterator[None]:
    """var is value for this thread (and its context) meanwhile."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def working_for(state: EngineState | None) -> AbstractContextManager[None]:
    """Make the calls of this thread (and its context) the work of state's engine."""
    return setting(CURRENT, state)


def on_behalf_of(
    state: EngineState, client: Any, also: Callable[[], AbstractContextManager[None]]
) -> Any:
    """client, its calls the work of state's engine wherever they are made, each within
    also() (the identity they are made as)."""
    make_api_call = client._make_api_call

    def engine_call(operation_name: str, api_params: Any) -> Any:
        if operation_name == "CreateStateMachine":  # its executions' calls are this engine's
            state.machines.add(str(api_params.get("name", "")))
        with working_for(state), also():
            return make_api_call(operation_name, api_params)

    client._make_api_call = engine_call
    return client


def for_machine(arn: str) -> EngineState | None:
    """The running engine whose state machine (or execution or map run of it) arn names."""
    parts = arn.split(":")
    name = parts[6].split("/", 1)[0] if len(parts) > 6 else ""
    return next((s for s in RUNNING[::-1] if name in s.machines), None)


def for_env(env: Any) -> EngineState | None:
    """The engine running the execution env belongs to."""
    try:
        arn = env.states.context_object.context_object_data["StateMachine"]["Id"]
    except (AttributeError, KeyError, TypeError):
        return current()
    return for_machine(str(arn)) or current()


def _clock(env: Any) -> Clock:
    """The clock of the engine running env (the retrier's: the one its work is for)."""
    state = for_env(env)
    return state.clock if state is not None else Clock()


class _ScaledTimeModule:
    """Stands in for the ``time`` module inside moto's retrier."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        env = _ENV.get()
        Stages.pause(env, seconds, _clock(env).sleep)


def _scaled_wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
    sleep = functools.partial(_clock(env).sleep, sleep=env.program_state_event.wait)
    Stages.pause(env, wait_seconds, sleep)


def _for_its_machine(original: Any) -> Any:
    """A state's work (and a retrier's wait) as its execution's engine's: a task runs on
    a thread of its own, and Map and Parallel branches on theirs."""

    def evaluate(component: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
        with working_for(for_env(env)), setting(_ENV, env), Stages.machine_role(env):
            return original(component, env, *args, **kwargs)

    return evaluate


_STATE_CLASSES = (
    state_task_service.StateTaskService,
    state_task_lambda.StateTaskLambda,
    state_task_activitiy.StateTaskActivity,
    state_map.StateMap,
    state_parallel.StateParallel,
)


def _install_clock(installer: Installer) -> None:
    installer.replace(retrier_decl, "time", _ScaledTimeModule())
    installer.replace(wait_function.WaitFunction, "_wait_interval", _scaled_wait_interval)
    _replacing(retrier_decl.RetrierDecl, "_eval_body", _for_its_machine)(installer)
    for state_class in _STATE_CLASSES:
        _replacing(state_class, "_eval_execution", _for_its_machine)(installer)


# Requests: each concern on the botocore event that fits it, met in botocore's order for
# one call (https://docs.aws.amazon.com/botocore/latest/topics/events.html; the table in
# docs/local-engine.md, "The engine's patches").

ENGINE_SERVICES = ("dynamodb", "sqs", "s3")  # whose requests are logged and may be faulted
_OBJECT = "onceflow_object"  # the request context's (bucket, key), for the log


def _json_error(prefix: str, header: str, sender: str = "") -> Callable[[str, str], Response]:
    """Error responses of a JSON-protocol service, as (status, headers, body)."""

    def error(code: str, message: str) -> Response:
        headers = {header: code + sender, "Content-Type": "application/x-amz-json-1.0"}
        headers["x-amzn-RequestId"] = str(uuid.uuid4())  # as every such response has
        return 400, headers, json.dumps({"__type": prefix + code, "message": message})

    return error


# e.g. ProvisionedThroughputExceededException; KmsAccessDenied on SendMessage
dynamodb_error = _json_error("com.amazonaws.dynamodb.v20120810#", "x-amzn-ErrorType")
sqs_error = _json_error("com.amazonaws.sqs#", "x-amzn-query-error", ";Sender")


def _http(url: str, response: tuple[int, Any, Any]) -> AWSResponse:
    status, headers, body = response  # as moto's BotocoreStubber builds its answers
    return AWSResponse(url, status, headers, botocore_stubber.MockRawResponse(body))


def answered(model: Any, url: str, response: tuple[int, Any, Any]) -> tuple[AWSResponse, Any]:
    """(http response, parsed) for a before-call handler to return: the service's answer
    as botocore would have parsed it (botocore's own Stubber answers a call there)."""
    http = _http(url, response)
    parser = create_parser(model.service_model.resolved_protocol)
    return http, parser.parse(convert_to_response_dict(http, model), model.output_shape)


def _faulted(original: Any) -> Any:
    """moto's before-send handler, an engine's injected faults answering in its place
    (no event can: docs/local-engine.md, "The engine's patches")."""

    def stub(stubber: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        _, service, operation = event_name.split(".", 2)
        state = current() if stubber.enabled and service in ENGINE_SERVICES else None
        if state is not None and state.faults:
            body = request.body
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
            for injector in list(state.faults):
                fault = injector(service, operation, text)
                if fault is not None:
                    return _http(request.url, fault)
        answer = functools.partial(original, stubber, event_name, request, **kwargs)
        return Stages.serialise(request, answer)

    return stub


def _logged(event_name: str, response_dict: Any, context: Any, **kwargs: Any) -> None:
    """response-received.{dynamodb,sqs,s3}: each attempt's answer, a fault's or moto's,
    in the log of the engine whose work the call is (none sent: nothing logged)."""
    state = current()
    if state is not None and response_dict is not None:
        _, service, operation = event_name.split(".", 2)
        bucket, key = context.get(_OBJECT, ("", ""))
        state.requests.append(
            RecordedRequest(service, operation, response_dict["status_code"], bucket, key)
        )


def _object(params: Any, context: Any, **_: Any) -> None:
    """before-parameter-build.s3: the bucket and key a call names, for the log."""
    context[_OBJECT] = (params.get("Bucket", ""), params.get("Key", ""))


def _install_log(installer: Installer) -> None:
    installer.register("before-parameter-build.s3", _object)
    for service in ENGINE_SERVICES:
        installer.register(f"response-received.{service}", _logged)


class Stages:
    """Slots other patches fill where no public hook can hold their concern:
    ``serialise`` around moto's answer to each request (the fidelity patch "atomic
    single-item writes"); ``machine_role`` around a state's work, run as its
    machine's role (onceflow/local/iam.py); ``pause``, a Wait or a retry's backoff
    of an execution (env), slept with sleep on its engine's clock (limits/states.py)."""

    @staticmethod
    def serialise(request: Any, answer: Callable[[], Any]) -> Any:
        return answer()

    @staticmethod
    def machine_role(env: Any) -> AbstractContextManager[None]:
        return nullcontext()

    @staticmethod
    def pause(env: Any, seconds: float, sleep: Callable[[float], None]) -> None:
        sleep(seconds)


def stubber_fits() -> list[str]:
    return takes(botocore_stubber.BotocoreStubber.__call__, "self", "event_name", "request")


def _in_process(original: Any) -> Any:
    """Lambda's _invoke_lambda, the template's handler run in-process, not in Docker."""

    def invoke_lambda(function: Any, event: Any = None) -> tuple[str, bool, str]:
        name = function.function_name
        for state in (CURRENT.get(), *RUNNING[::-1]):  # its engine's, else a running one's
            if state is not None and name in state.invokers:
                return state.invokers[name](event)
        return original(function, event)  # type: ignore[no-any-return]

    return invoke_lambda


def _signalling(original: Any) -> Any:
    """An execution's end wakes whoever waits for it, instead of polling DescribeExecution
    (which was half of each execution's wall time locally)."""

    def execution_logic(worker: Any) -> None:
        arn = str(worker._evaluation_details.execution_details.arn)
        state = for_machine(arn)
        try:
            with working_for(state):
                original(worker)
        finally:
            if state is not None:
                state.finished.event(arn).set()

    return execution_logic


def _replacing(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Callable[[Installer], None]:
    return lambda installer: installer.replace(owner, name, wrap(getattr(owner, name)))


_HOOKS_TEST = "tests/unit/test_hooks.py::test_each_concern_meets_a_call_in_botocores_order"
PATCHES = (
    Patch(
        name="time scale",
        kind="hook",
        why="Retry backoff and Wait states sleep on the engine's clock (time_scale), so a "
        "test need not wait out a 30-second backoff; the ASL is untouched.",
        test="tests/unit/test_patches.py::test_time_scale_zero_never_sleeps",
        install=_install_clock,
        fits=lambda: [
            *takes(retrier_decl.RetrierDecl._eval_body, "self", "env"),
            *(p for state_class in _STATE_CLASSES for p in gone(state_class, "_eval_execution")),
            *lacks(retrier_decl, "time.sleep(interval_seconds)"),  # the retrier's sleep
            *lacks(wait_function.WaitFunction, "program_state_event.wait"),  # the Wait's
        ],
    ),
    Patch(
        name="request log",
        kind="hook",
        why="Each attempt's answer to a DynamoDB, S3 or SQS call goes to its engine's log "
        "(effect counts, the bench's bill), on botocore's public response-received event.",
        test=_HOOKS_TEST,
        install=_install_log,
        fits=lambda: [
            *emits(vars(client.BaseClient)["_emit_api_params"], "before-parameter-build"),
            *emits(vars(endpoint.Endpoint)["_get_response"], "response-received"),
        ],
    ),
    Patch(
        name="injected faults",
        kind="hook",
        why="An engine's fault injectors answer a DynamoDB, S3 or SQS request in moto's "
        "place, each attempt; no public hook can (moto's before-send handler answers "
        "whatever an earlier one returned), so moto's handler is replaced.",
        test=_HOOKS_TEST,
        install=_replacing(botocore_stubber.BotocoreStubber, "__call__", _faulted),
        fits=stubber_fits,
    ),
    Patch(
        name="handlers in-process",
        kind="hook",
        why="Lambda runs the template's handler (CodeUri + Handler); the engine runs it "
        "in-process instead of in Docker.",
        test="tests/workflow/test_processor.py",
        install=_replacing(lambda_models.LambdaFunction, "_invoke_lambda", _in_process),
        fits=lambda: gone(lambda_models.LambdaFunction, "_invoke_lambda"),
    ),
    Patch(
        name="execution end signals",
        kind="hook",
        why="An execution's end wakes whoever waits for it, instead of polling.",
        test="tests/unit/test_patch_layer.py::test_two_engines_keep_their_own_clock_log_and_faults",
        install=_replacing(execution_worker.ExecutionWorker, "_execution_logic", _signalling),
        fits=lambda: lacks(
            execution_worker.ExecutionWorker._execution_logic,
            "_execution_communication.terminated()",
        ),
    ),
)
