"""Lambda's Timeout: a handler past its function's Timeout answers Sandbox.Timedout."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

from onceflow.local.lambdas import FUNCTION_OUTPUT, Invocation, LambdaContext, error_payload
from onceflow.local.limits.common import limit

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# Docs: "Troubleshoot invocation issues in Lambda", Sandbox.Timedout.
LAMBDA_TIMEOUT_ERROR: Final = "Sandbox.Timedout"
_ORIGINAL: dict[Any, Any] = {}
_CALLER = threading.local()


def _calling(name: str) -> Callable[..., Any]:
    """moto's Lambda call from a Task, noting which execution frame waits for it."""

    def call(env: Any, *args: Any, **kwargs: Any) -> Any:
        _CALLER.env = env
        try:
            return _ORIGINAL[call](env, *args, **kwargs)
        finally:
            _CALLER.env = None

    call.__name__ = name
    return call


@dataclass(frozen=True)
class TimedInvocation(Invocation):
    """An invocation record, with what the Lambda sandbox's limits made of it.

    timed_out: the caller got Sandbox.Timedout (the handler ran past Timeout).
    finished_after_timeout: the handler returned after its Timeout; on AWS the sandbox
        stops there, so what it did after that happened here only.
    caller_gone: it returned after the Task that called it had ended (TimeoutSeconds,
        or the execution's end): its effects happened, as on AWS; its result went nowhere.
    """

    timed_out: bool = False
    finished_after_timeout: bool = False
    caller_gone: bool = False


class TimedInvoke:
    """InProcessRuntime.invoke, with the function's Timeout enforced: the handler runs on
    a thread of its own, the caller waits at most the Timeout (real seconds at every time
    scale: a handler runs at real speed) and then gets Lambda's timed-out answer."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine

    def _log(self, line: str) -> None:
        (self.engine.function_log or sys.stderr).write(line + "\n")

    def _record(self, invocation: TimedInvocation, replacing: bool = False) -> None:
        invocations = self.engine.runtime.invocations
        with self.engine.runtime._lock:
            for index, existing in enumerate(invocations):
                if replacing and existing.request_id == invocation.request_id:
                    invocations[index] = invocation
                    return
            invocations.append(invocation)

    def __call__(self, name: str, event: Any) -> tuple[Any, str | None]:
        runtime = self.engine.runtime
        spec = runtime.functions[name]
        handler = runtime.overrides.get(name) or runtime.load(spec)
        context = LambdaContext(spec.name, spec.arn, spec.memory, spec.timeout)
        request_id, caller = context.aws_request_id, getattr(_CALLER, "env", None)
        lock, done, started = threading.Lock(), threading.Event(), time.perf_counter()
        outcome: dict[str, Any] = {}  # result: (payload, error type, raised), ended, late

        def run() -> None:
            result: tuple[Any, str | None, BaseException | None]
            try:
                with runtime.around(), FUNCTION_OUTPUT.running_function():
                    result = (handler(event, context), None, None)
            except Exception as exc:  # reported to the caller as Lambda does
                result = (error_payload(exc, context, spec.code_uri), type(exc).__name__, None)
            except BaseException as exc:  # handed to the caller's thread, as invoke raised it
                result = (None, None, exc)
            with lock:
                outcome.update(result=result, ended=time.perf_counter())
                late = outcome.get("late", False)
            done.set()
            if late:
                seconds = outcome["ended"] - started
                self._record(
                    TimedInvocation(name, request_id, LAMBDA_TIMEOUT_ERROR, seconds * 1000,
                                    timed_out=True, finished_after_timeout=True),
                    replacing=True,
                )  # fmt: skip
                self._log(
                    f"onceflow: WARNING {spec.name} request {request_id} ran on after its "
                    f"Timeout of {spec.timeout:g} s and returned after {seconds:.2f} s: on "
                    "AWS the sandbox stops at the Timeout, so what it did after that "
                    "happened locally only"
                )

        threading.Thread(target=run, name=f"lambda:{spec.name}", daemon=True).start()
        done.wait(spec.timeout)
        with lock:
            late = outcome["late"] = "result" not in outcome
        if late:
            message = (
                f"RequestId: {request_id} Error: Task timed out after {spec.timeout:.2f} seconds"
            )
            self._record(TimedInvocation(name, request_id, LAMBDA_TIMEOUT_ERROR,
                                         spec.timeout * 1000, True))  # fmt: skip
            self._log(f"{request_id} {message}")
            answer = {"errorMessage": message, "errorType": LAMBDA_TIMEOUT_ERROR}
            return answer, LAMBDA_TIMEOUT_ERROR
        payload, error_type, raised = outcome["result"]
        if raised is not None:
            raise raised
        gone = caller is not None and not caller.is_running()
        duration = (outcome["ended"] - started) * 1000
        self._record(TimedInvocation(name, request_id, error_type, duration, caller_gone=gone))
        if gone:
            self._log(
                f"onceflow: WARNING {spec.name} request {request_id} returned after the Task "
                "that called it had ended (its TimeoutSeconds passed or the execution "
                "ended): its effects happened, as on AWS, and its result went nowhere"
            )
        return payload, error_type


_CALLS = ("execute_lambda_function_integration", "exec_lambda_function")
PATCHES = (
    limit(
        "Lambda timeout callers",
        "A handler past its function's Timeout answers Sandbox.Timedout to the task "
        "that waits for it (Troubleshoot invocation issues in Lambda). "
        "docs/local-engine.md (AWS limits on the local engine)",
        "tests/workflow/test_limits.py",
        _ORIGINAL,
        *((lambda_eval_utils, name, _calling(name)) for name in _CALLS),
    ),
)
