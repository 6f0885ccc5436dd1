"""Every change the local engine makes to moto, in one place, each with the reason.

moto runs the ASL for real, but a few of its corners would make a local run lie
(see DESIGN.md section 6). Each patch below closes one of them. ``apply()`` is
idempotent and ``check_moto_internals()`` fails loudly when a moto upgrade moves
or renames what a patch relies on; tests/unit/test_patches.py runs it.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import jsonata
from moto.awslambda import models as lambda_models
from moto.core import botocore_stubber
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.intrinsic import (
    jsonata as intrinsic_jsonata,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import (
    wait_function,
)
from moto.stepfunctions.parser.asl.eval import states as eval_states
from moto.stepfunctions.parser.asl.eval import variable_store
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.backend import execution_worker

MOTO_VERSION = "5.2.5"
JSONATA_PYTHON_VERSION = "0.7.1"

# --------------------------------------------------------------------------
# Time scale: Retry backoff and Wait states sleep scaled, the ASL untouched.
# --------------------------------------------------------------------------


class _Clock:
    """Holds the time scale; 1.0 sleeps as AWS would, 0.0 never sleeps."""

    def __init__(self) -> None:
        self.scale = 1.0
        self.slept: list[float] = []  # requested (unscaled) sleeps, for tests

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if seconds > 0 and self.scale > 0:
            time.sleep(seconds * self.scale)


CLOCK = _Clock()


class _ScaledTimeModule:
    """Stands in for the ``time`` module inside moto's retrier."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        CLOCK.sleep(seconds)


_original_wait_interval = wait_function.WaitFunction._wait_interval


def _scaled_wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
    CLOCK.slept.append(wait_seconds)
    scaled = wait_seconds * CLOCK.scale
    if scaled > 0:
        env.program_state_event.wait(scaled)


# --------------------------------------------------------------------------
# JSONata: moto leaves its evaluator unset (it expects a JVM); plug in
# jsonata-python, with real $hash and $uuid in place of moto's text stubs.
# --------------------------------------------------------------------------

_HASH_ALGORITHMS = {
    "MD5": "md5",
    "SHA-1": "sha1",
    "SHA-256": "sha256",
    "SHA-384": "sha384",
    "SHA-512": "sha512",
}


def jsonata_hash(value: Any, algorithm: str = "SHA-256") -> str:
    """AWS's ``$hash(value, algorithm)``: the hex digest of a string."""
    if not isinstance(value, str):
        raise ValueError("$hash: the value to hash must be a string")
    try:
        name = _HASH_ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"$hash: algorithm must be one of {', '.join(_HASH_ALGORITHMS)}") from None
    return hashlib.new(name, value.encode("utf-8")).hexdigest()


def jsonata_uuid() -> str:
    return str(uuid.uuid4())


def eval_jsonata(expression: str) -> Any:
    """Evaluate one composed expression the way moto's JVM bridge would."""
    try:
        compiled = jsonata.Jsonata(expression)
        compiled.register_lambda("hash", jsonata_hash)
        compiled.register_lambda("uuid", jsonata_uuid)
        return compiled.evaluate(None)
    except Exception as exc:  # moto turns this into States.QueryEvaluationError
        raise moto_jsonata.JSONataException("UNKNOWN", str(exc)) from exc


moto_encode_jsonata_variable_declarations = moto_jsonata.encode_jsonata_variable_declarations


def encode_jsonata_variable_declarations(bindings: dict[str, Any]) -> str:
    """moto writes string values as ``"{value}"`` unescaped; JSON-encode them."""
    parts = []
    for reference, value in bindings.items():
        literal = json.dumps(value, separators=(",", ":"), default=str)
        parts.append(f"{reference}:={literal};")
    return "".join(parts)


# --------------------------------------------------------------------------
# Atomic single-item writes: moto's backends are not thread-safe, so two
# concurrent conditional PutItems on one key can both win. Serialise every
# request into the DynamoDB, S3 and SQS backends; record each for reports.
# --------------------------------------------------------------------------

BACKEND_LOCK = threading.RLock()
_LOCKED_SERVICE = re.compile(r"^(?:[^/]*\.)?(dynamodb|sqs|s3)[.-]")


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


REQUEST_LOG = RequestLog()


def _describe(request: Any, service: str) -> tuple[str, str, str]:
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


_original_process_request = botocore_stubber.BotocoreStubber.process_request


def _serialised_process_request(self: Any, request: Any) -> Any:
    match = _LOCKED_SERVICE.match(urlsplit(request.url).netloc)
    if match is None:
        return _original_process_request(self, request)
    service = match.group(1)
    with BACKEND_LOCK:
        response = _original_process_request(self, request)
    if response is not None:
        operation, bucket, key = _describe(request, service)
        REQUEST_LOG.add(RecordedRequest(service, operation, response[0], bucket, key))
    return response


# --------------------------------------------------------------------------
# Lambda: run the template's handler in-process instead of in Docker.
# --------------------------------------------------------------------------

InProcessInvoker = Callable[[Any], tuple[str, bool, str]]
INVOKERS: dict[str, InProcessInvoker] = {}
_original_invoke_lambda = lambda_models.LambdaFunction._invoke_lambda


def _in_process_invoke_lambda(self: Any, event: Any = None) -> tuple[str, bool, str]:
    invoker = INVOKERS.get(self.function_name)
    if invoker is None:
        return _original_invoke_lambda(self, event)  # type: ignore[no-any-return]
    return invoker(event)


# --------------------------------------------------------------------------
# Parse each definition once: moto re-parses the ASL with ANTLR for every
# execution (about 50 ms, most of an execution's time). Executions get a deep
# copy of the parsed program, so none shares state with another.
# --------------------------------------------------------------------------

_PARSED: dict[str, Any] = {}
_PARSED_LOCK = threading.Lock()
_original_entrypoint = execution_worker.ExecutionWorker._get_evaluation_entrypoint


def _cached_entrypoint(self: Any) -> Any:
    definition = self._evaluation_details.state_machine_details.definition
    with _PARSED_LOCK:
        program = _PARSED.get(definition)
    if program is None:
        program = _original_entrypoint(self)
        with _PARSED_LOCK:
            _PARSED[definition] = program
    return copy.deepcopy(program)


# --------------------------------------------------------------------------


_applied = False
# What moto declared before apply() removed its stubs.
_MOTO_STUBBED_FUNCTIONS = set(getattr(intrinsic_jsonata, "_DECLARATION_BY_VARIABLE_REFERENCE", {}))


def check_moto_internals() -> None:
    """Raise when moto no longer has what these patches replace."""
    import moto

    problems = []
    if moto.__version__ != MOTO_VERSION:
        problems.append(f"moto is {moto.__version__}, patches verified on {MOTO_VERSION}")
    if "time.sleep(interval_seconds)" not in inspect.getsource(retrier_decl):
        problems.append("moto's retrier no longer sleeps through time.sleep")
    if "program_state_event.wait" not in inspect.getsource(_original_wait_interval):
        problems.append("moto's Wait no longer waits on program_state_event")
    if "_eval_jsonata(jsonata_expression)" not in inspect.getsource(
        moto_jsonata.eval_jsonata_expression
    ):
        problems.append("moto's JSONata hook _eval_jsonata moved")
    for module in (moto_jsonata, eval_states, variable_store):
        if not hasattr(module, "encode_jsonata_variable_declarations"):
            problems.append(f"{module.__name__} no longer encodes variables")
    if not {"$hash", "$uuid"} <= _MOTO_STUBBED_FUNCTIONS:
        problems.append("moto's JSONata $hash/$uuid declarations moved")
    if "process_request" not in vars(botocore_stubber.BotocoreStubber):
        problems.append("BotocoreStubber.process_request is gone")
    if "AmazonStateLanguageParser.parse" not in inspect.getsource(_original_entrypoint):
        problems.append("moto's execution worker no longer parses in _get_evaluation_entrypoint")
    if "_invoke_lambda" not in vars(lambda_models.LambdaFunction):
        problems.append("LambdaFunction._invoke_lambda is gone")
    if problems:
        raise RuntimeError(
            "onceflow's moto patches no longer fit this moto: " + "; ".join(problems)
        )


def apply() -> None:
    """Install every patch (once)."""
    global _applied
    if _applied:
        return
    check_moto_internals()
    retrier_decl.time = _ScaledTimeModule()  # type: ignore[assignment,attr-defined]
    wait_function.WaitFunction._wait_interval = _scaled_wait_interval  # type: ignore[method-assign]
    moto_jsonata._eval_jsonata = eval_jsonata
    for module in (moto_jsonata, eval_states, variable_store):
        module.encode_jsonata_variable_declarations = encode_jsonata_variable_declarations  # type: ignore[attr-defined]
    # Our evaluator provides $hash and $uuid natively; moto's declarations
    # would shadow them with functions that return a "not supported" text.
    intrinsic_jsonata._DECLARATION_BY_VARIABLE_REFERENCE.pop("$hash", None)
    intrinsic_jsonata._DECLARATION_BY_VARIABLE_REFERENCE.pop("$uuid", None)
    botocore_stubber.BotocoreStubber.process_request = _serialised_process_request  # type: ignore[method-assign]
    lambda_models.LambdaFunction._invoke_lambda = _in_process_invoke_lambda  # type: ignore[method-assign]
    execution_worker.ExecutionWorker._get_evaluation_entrypoint = _cached_entrypoint  # type: ignore[method-assign]
    _applied = True
