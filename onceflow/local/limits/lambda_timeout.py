"""Lambda's Timeout: a handler past its function's Timeout answers Sandbox.Timedout."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    lambda_eval_utils,
)

from onceflow.local.lambdas import FUNCTION_OUTPUT, Invocation, LambdaContext, error_payload
from onceflow.local.patches.registry import Installer, Patch, gone

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# Docs: "Troubleshoot invocation issues in Lambda", Sandbox.Timedout.
LAMBDA_TIMEOUT_ERROR: Final = "Sandbox.Timedout"
_ORIGINAL: dict[str, Any] = {}


_LAMBDA_CALLS = ("execute_lambda_function_integration", "exec_lambda_function")


def _install_lambda_callers(installer: Installer) -> None:
    for name in _LAMBDA_CALLS:
        _ORIGINAL[name] = installer.replace(lambda_eval_utils, name, _calling(name))


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


PATCHES = (
    Patch(
        name="Lambda timeout callers",
        kind="limit",
        why="A handler past its function's Timeout answers Sandbox.Timedout to the task "
        "that waits for it (Troubleshoot invocation issues in Lambda). "
        "docs/local-engine.md (AWS limits on the local engine)",
        test="tests/workflow/test_limits.py",
        install=_install_lambda_callers,
        fits=lambda: gone(lambda_eval_utils, *_LAMBDA_CALLS),
    ),
)
