"""Lambda's Timeout: a handler past its function's Timeout answers Sandbox.Timedout."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from onceflow.local.lambdas import Invocation, LambdaContext, error_payload
from onceflow.local.patches import hooks

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# Docs: "Troubleshoot invocation issues in Lambda", Sandbox.Timedout.
LAMBDA_TIMEOUT_ERROR: Final = "Sandbox.Timedout"


@dataclass(frozen=True)
class TimedInvocation(Invocation):
    """An invocation record, with what the Lambda sandbox's limits made of it (its
    effects happened, as on AWS; docs/local-engine.md, "AWS limits on the local engine")."""

    timed_out: bool = False  # the caller got Sandbox.Timedout (the handler ran past Timeout)
    finished_after_timeout: bool = False  # it returned later: on AWS the sandbox stops
    caller_gone: bool = False  # it returned after its Task (or execution) had ended


class TimedInvoke:
    """InProcessRuntime.invoke, with the function's Timeout enforced: the handler runs on
    a thread of its own, the caller waits at most the Timeout (real seconds at every time
    scale: a handler runs at real speed) and then gets Lambda's timed-out answer."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine

    def _log(self, line: str) -> None:
        (self.engine.function_log or sys.stderr).write(line + "\n")

    def _record(self, invocation: TimedInvocation, replacing: Invocation | None = None) -> None:
        """Record invocation, in the place of the record it replaces (if still there)."""
        invocations = self.engine.runtime.invocations
        with self.engine.runtime._lock:
            if replacing is not None and replacing in invocations:
                invocations[invocations.index(replacing)] = invocation
            else:
                invocations.append(invocation)

    def __call__(self, name: str, event: Any) -> tuple[Any, str | None]:
        runtime = self.engine.runtime
        spec = runtime.functions[name]
        handler = runtime.overrides.get(name) or runtime.load(spec)
        context = LambdaContext(spec.name, spec.arn, spec.memory, spec.timeout)
        request_id, caller = context.aws_request_id, hooks._ENV.get()  # the Task's frame, if any
        started = time.perf_counter()
        answer: Future[tuple[Any, str | None, float]] = Future()  # payload, error type, end

        def run() -> None:
            result: tuple[Any, str | None]
            try:
                with runtime.running(spec):
                    result = (handler(event, context), None)
            except Exception as exc:  # reported to the caller as Lambda does
                payload = error_payload(exc, context, spec.code_uri, runtime.layer_paths(spec))
                result = (payload, type(exc).__name__)
            except BaseException as exc:  # handed to the caller's thread, as invoke raised it
                answer.set_exception(exc)
                return
            answer.set_result((*result, time.perf_counter()))

        def late(_: Future[Any]) -> None:
            seconds = time.perf_counter() - started
            ran_on = replace(timed_out, duration_ms=seconds * 1000, finished_after_timeout=True)
            self._record(ran_on, replacing=timed_out)
            self._log(
                f"onceflow: WARNING {spec.name} request {request_id} ran on after its "
                f"Timeout of {spec.timeout:g} s and returned after {seconds:.2f} s: on "
                "AWS the sandbox stops at the Timeout, so what it did after that "
                "happened locally only"
            )

        threading.Thread(target=run, name=f"lambda:{spec.name}", daemon=True).start()
        try:
            payload, error_type, ended = answer.result(timeout=spec.timeout)
        except TimeoutError:
            message = (
                f"RequestId: {request_id} Error: Task timed out after {spec.timeout:.2f} seconds"
            )
            timed_out = TimedInvocation(
                name, request_id, LAMBDA_TIMEOUT_ERROR, spec.timeout * 1000, timed_out=True
            )
            self._record(timed_out)
            self._log(f"{request_id} {message}")
            answer.add_done_callback(late)  # now, if it returned since
            error = {"errorMessage": message, "errorType": LAMBDA_TIMEOUT_ERROR}
            return error, LAMBDA_TIMEOUT_ERROR
        gone = caller is not None and not caller.is_running()
        duration = (ended - started) * 1000
        self._record(TimedInvocation(name, request_id, error_type, duration, caller_gone=gone))
        if gone:
            self._log(
                f"onceflow: WARNING {spec.name} request {request_id} returned after the Task "
                "that called it had ended (its TimeoutSeconds passed or the execution "
                "ended): its effects happened, as on AWS, and its result went nowhere"
            )
        return payload, error_type
