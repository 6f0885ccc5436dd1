"""Every change the local engine makes to moto, in one place, each with the reason.

moto runs the ASL for real, but a few of its corners would make a local run lie
(see DESIGN.md section 6). Each patch below closes one of them. ``apply()`` is
idempotent and ``check_moto_internals()`` fails loudly when a moto upgrade moves
or renames what a patch relies on; tests/unit/test_patches.py runs it.
"""

from __future__ import annotations

import collections
import contextvars
import copy
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

import botocore
import botocore.context
import botocore.signers
import botocore.useragent
import moto.backend_index as backend_index
from moto import backends as moto_backends
from moto import settings as moto_settings
from moto.awslambda import models as lambda_models
from moto.core import base_backend, botocore_stubber
from moto.core import config as moto_config
from moto.core import exceptions as moto_core_exceptions
from moto.core import request as moto_request
from moto.core import responses as moto_responses
from moto.core import utils as moto_core_utils
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.models import botocore_stubber as moto_botocore_stubber
from moto.dynamodb import comparisons as ddb_comparisons
from moto.dynamodb.parsing import ast_nodes as ddb_ast_nodes
from moto.dynamodb.parsing import expressions as ddb_expressions
from moto.dynamodb.parsing import validators as ddb_validators
from moto.moto_api import recorder as moto_recorder
from moto.stepfunctions import exceptions as sfn_exceptions
from moto.stepfunctions import models as sfn_models
from moto.stepfunctions.parser import models as sfn_parser_models
from moto.stepfunctions.parser import quotas as sfn_quotas
from moto.stepfunctions.parser.api import EvaluationFailedEventDetails, HistoryEventType
from moto.stepfunctions.parser.asl.component import component as asl_component
from moto.stepfunctions.parser.asl.component import eval_component
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
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
from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.common.timeouts import timeout as sfn_timeout
from moto.stepfunctions.parser.asl.component.intrinsic import (
    jsonata as intrinsic_jsonata,
)
from moto.stepfunctions.parser.asl.component.state import state as sfn_state
from moto.stepfunctions.parser.asl.component.state.exec import execute_state
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import (
    branches_decl,
    state_parallel,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    state_task_lambda as sfn_task_lambda,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import (
    wait_function,
)
from moto.stepfunctions.parser.asl.eval import environment as eval_environment
from moto.stepfunctions.parser.asl.eval import program_state, variable_store
from moto.stepfunctions.parser.asl.eval import states as eval_states
from moto.stepfunctions.parser.asl.eval.event import event_manager
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.asl.utils import boto_client as moto_boto_client
from moto.stepfunctions.parser.asl.utils import encoding as sfn_encoding
from moto.stepfunctions.parser.asl.utils import json_path
from moto.stepfunctions.parser.backend import execution_worker

from onceflow import jsonata_node

MOTO_VERSION = "5.2.5"

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
# JSONata: moto leaves its evaluator unset (it expects a JVM). Every expression
# is evaluated by jsonata 2.0.6 in node, the library and version Step Functions
# runs, with the functions Step Functions adds ($hash, $uuid, $random with a
# seed, $partition, $range, $parse) and without $eval (onceflow/jsonata_node.py).
# --------------------------------------------------------------------------

UNSUPPORTED_RESULT = "returned an unsupported result type"


def eval_jsonata(expression: str, bindings: dict[str, Any] | None = None) -> Any:
    """Evaluate one expression with the reference library (moto's hook expects a JVM).

    With bindings, the expression is one from a definition: compiled once and
    cached. Without, it is moto's composed text (its fallback path), which
    embeds the data: never cached. Undefined is None here, as moto's hook
    returns it (moto then asks $exists to tell it from null).
    """
    try:
        result = jsonata_node.evaluate(expression, bindings, cache=bindings is not None)
    except jsonata_node.JsonataError as exc:  # moto turns this into States.QueryEvaluationError
        raise moto_jsonata.JSONataException(exc.code or "UNKNOWN", str(exc)) from exc
    except jsonata_node.UnsupportedResult as exc:
        raise moto_jsonata.JSONataException(
            "UNKNOWN", f"The JSONata expression '{expression}' {UNSUPPORTED_RESULT}."
        ) from exc
    return None if result is jsonata_node.UNDEFINED else result


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


# Fault injection (the chaos harness): each injector sees (service, operation,
# request body) and may answer in the service's place, with an error response
# (status, headers, body) as the service would send it.
FaultInjector = Callable[[str, str, str], tuple[int, dict[str, str], str] | None]
FAULTS: list[FaultInjector] = []


def dynamodb_error(code: str, message: str) -> tuple[int, dict[str, str], str]:
    """A DynamoDB error response (JSON protocol), e.g. ProvisionedThroughputExceededException."""
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message})
    headers = {
        "x-amzn-ErrorType": code,
        "x-amzn-RequestId": str(uuid.uuid4()),  # as every DynamoDB response has
        "Content-Type": "application/x-amz-json-1.0",
    }
    return 400, headers, body


def _injected(service: str, request: Any) -> tuple[int, dict[str, str], str] | None:
    if not FAULTS:
        return None
    operation, _, _ = _describe(request, service)
    body = request.body
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    for injector in list(FAULTS):
        response = injector(service, operation, text)
        if response is not None:
            return response
    return None


# moto finds the handler of a request by matching its URL against every
# service's pattern (about a hundred) and then the service's own URLs, for every
# request. The answer depends only on the URL (and the URL settings): it is
# looked up once per URL, then moto's own steps run as written below.
_ROUTES: dict[tuple[Any, ...], tuple[tuple[str, ...], Any]] = {}
_ROUTES_KEPT = 4096
_HTTP_EXCEPTION: Any = vars(moto_core_exceptions)["HTTPException"]  # what moto catches
# moto's process_request as this replaces it (checked in check_moto_internals).
_PROCESS_REQUEST_SHA256 = "f79a1a778c7e755f0c7f234cdab9e36312ed2b16d7051baf06b04872f79dd5b2"


def _route(clean_url: str) -> tuple[tuple[str, ...], Any]:
    """(the services whose pattern matches, in moto's order, up to the one that
    handles the URL; that service's handler or None), as moto's loops find them."""
    key = (clean_url, *(os.environ.get(name) for name in _URL_SETTINGS))
    route = _ROUTES.get(key)
    if route is not None:
        return route
    services: list[str] = []
    handler = None
    for service, pattern in backend_index.backend_url_patterns:
        if not pattern.match(clean_url):
            continue
        services.append(service)
        backend_dict = moto_backends.get_backend(service)  # type: ignore[call-overload]
        if isinstance(backend_dict, base_backend.BackendDict):
            if "us-east-1" in backend_dict[DEFAULT_ACCOUNT_ID]:
                backend = backend_dict[DEFAULT_ACCOUNT_ID]["us-east-1"]
            else:
                backend = backend_dict[DEFAULT_ACCOUNT_ID]["aws"]
        else:
            backend = backend_dict["global"]
        handler = next(
            (method for url, method in backend.urls.items() if re.compile(url).match(clean_url)),
            None,
        )
        if handler is not None:
            break
    route = (tuple(services), handler)
    if len(_ROUTES) < _ROUTES_KEPT:
        _ROUTES[key] = route
    return route


def _routed_process_request(self: Any, request: Any) -> Any:
    """BotocoreStubber.process_request, with the route looked up once per URL."""
    parsed_url, _ = moto_core_utils.get_equivalent_url_in_aws_domain(request.url)
    clean_url = f"{parsed_url.scheme}://{parsed_url.netloc}{parsed_url.path}"
    if moto_config.passthrough_url(clean_url):
        return None
    services, handler = _route(clean_url)
    for service in services:
        if moto_config.passthrough_service(service):
            return None
        if not moto_config.service_whitelisted(service):
            raise moto_core_exceptions.ServiceNotWhitelisted(service)
    if handler is not None:
        normalized_request = moto_request.normalize_request(request)
        try:
            moto_recorder._record_request(normalized_request)
            status, headers, body = handler(
                normalized_request, normalized_request.raw_url, normalized_request.headers
            )
        except _HTTP_EXCEPTION as e:
            status = e.code
            headers = e.get_headers()
            body = e.get_body()
        return status, headers, body
    if re.compile(r"https?://.+\.amazonaws.com/.*").match(clean_url):
        return 404, {}, "Not yet implemented"
    return None


def _serialised_process_request(self: Any, request: Any) -> Any:
    match = _LOCKED_SERVICE.match(urlsplit(request.url).netloc)
    if match is None:
        return _routed_process_request(self, request)
    service = match.group(1)
    with BACKEND_LOCK:
        response = _injected(service, request) or _routed_process_request(self, request)
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
# execution (about 50 ms, most of an execution's time). The parsed program is
# shared by every execution of the definition, as moto itself shares one
# program between the concurrent iterations of a Map: a component keeps
# nothing of an evaluation (that lives in the Environment, and a component's
# per-evaluation values in env.heap under its heap_key).
# --------------------------------------------------------------------------

_PARSED: dict[str, Any] = {}
_PARSED_LOCK = threading.Lock()
# --------------------------------------------------------------------------
# Finished executions signal their end, so a caller waiting for one wakes at
# once instead of polling DescribeExecution (which was half of each
# execution's wall time locally).
# --------------------------------------------------------------------------


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


FINISHED = ExecutionSignals()
_original_execution_logic = execution_worker.ExecutionWorker._execution_logic


def _signalling_execution_logic(self: Any) -> None:
    try:
        _original_execution_logic(self)  # type: ignore[no-untyped-call]
    finally:
        FINISHED.finished(str(self._evaluation_details.execution_details.arn))


# --------------------------------------------------------------------------
# moto's task integrations build a new boto3 client for every call (about a
# sixth of an execution's time). Clients are thread-safe once built; build
# each (region, service) once, under a lock (boto3's default session is not).
# --------------------------------------------------------------------------

_original_boto_client_for = moto_boto_client.boto_client_for
_CLIENTS: dict[tuple[str, str, bool], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _cached_boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
    # moto's own version ignores state_credentials (checked in check_moto_internals).
    # moto picks the endpoint (the in-process stubber or a server) when it builds one.
    key = (region, service, bool(moto_botocore_stubber.enabled))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = _original_boto_client_for(region, service)
    return client


def _install_cached_clients() -> list[str]:
    """Point every moto module that imported boto_client_for at the cached one."""
    import sys

    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_factory,  # noqa: F401 - imports every integration module
    )

    patched = []
    for name, module in list(sys.modules.items()):
        if getattr(module, "boto_client_for", None) is _original_boto_client_for:
            module.boto_client_for = _cached_boto_client_for  # type: ignore[attr-defined]
            patched.append(name)
    return patched


_original_entrypoint = execution_worker.ExecutionWorker._get_evaluation_entrypoint


def _fix_heap_keys(program: Any) -> None:
    """Give every component of a parsed program its heap_key now.

    moto draws a component's heap_key on first use without a lock; two
    executions using a shared component for the first time at once could
    each keep a different key, and one would lose what it stored under the
    other (a Retry's attempt count).
    """
    seen: set[int] = set()
    pending = [program]
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            pending.extend(value)
        elif isinstance(value, asl_component.Component):  # States holds the states, say
            if isinstance(value, eval_component.EvalComponent):
                _ = value.heap_key
            pending.extend(vars(value).values())


def _cached_entrypoint(self: Any) -> Any:
    definition = self._evaluation_details.state_machine_details.definition
    with _PARSED_LOCK:
        program = _PARSED.get(definition)
        if program is None:
            program = _original_entrypoint(self)
            _fix_heap_keys(program)
            _PARSED[definition] = program
    return program


# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# moto lists a response class's methods with inspect.getmembers on every
# request, to check the action exists; the list never changes.
# --------------------------------------------------------------------------

_original_method_names_from_class = moto_core_utils.method_names_from_class


@functools.cache
def _cached_method_names(clazz: type) -> frozenset[str]:
    return frozenset(_original_method_names_from_class(clazz))


# --------------------------------------------------------------------------
# moto rebuilds a backend's table of URL patterns on every request, and for S3
# first reloads its urls module, so that MOTO_S3_CUSTOM_ENDPOINTS takes effect
# at once. The table depends only on the backend's class and two environment
# variables (checked in check_moto_internals): build it once for each.
# --------------------------------------------------------------------------

_original_urls: Callable[[Any], dict[str, Any]] = vars(base_backend.BaseBackend)["urls"].fget
_URL_SETTINGS = ("MOTO_S3_CUSTOM_ENDPOINTS", "MOTO_ENABLE_ISO_REGIONS")
_URLS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _cached_urls(self: Any) -> dict[str, Any]:
    key = (type(self), *(os.environ.get(name) for name in _URL_SETTINGS))
    urls = _URLS.get(key)
    if urls is None:
        urls = _URLS[key] = _original_urls(self)
    return dict(urls)


# --------------------------------------------------------------------------
# moto parses a JSONPath for every use: the ResultPath it gives every state
# (JSONata states too: "$") and every JSONPath it reads. jsonpath-ng builds a
# whole parser for each, about a millisecond; the parsed path is only read.
# --------------------------------------------------------------------------

_original_result_path_parse = vars(result_path)["parse"]
_original_json_path_parse = vars(json_path)["parse"]


# --------------------------------------------------------------------------
# moto's DynamoDB parses an UpdateExpression twice per UpdateItem (to check the
# names and values it uses, then to apply it); the parsed tree is only read
# (the validator rewrites a deep copy of it). Parse each expression text once.
# --------------------------------------------------------------------------

_UPDATE_EXPRESSION_PARSER: Any = vars(ddb_expressions)["UpdateExpressionParser"]
_original_update_expression_make = vars(_UPDATE_EXPRESSION_PARSER)["make"].__func__
_UPDATE_EXPRESSIONS: dict[str, Any] = {}  # text: parsed tree, read only
_UPDATE_EXPRESSIONS_KEPT = 4096
_UPDATE_EXPRESSIONS_LOCK = threading.Lock()


def _cached_update_expression_make(cls: type, expression: str) -> Any:
    tree = _UPDATE_EXPRESSIONS.get(expression)
    if tree is None:
        tree = _original_update_expression_make(cls, expression)
        with _UPDATE_EXPRESSIONS_LOCK:
            if len(_UPDATE_EXPRESSIONS) < _UPDATE_EXPRESSIONS_KEPT:
                tree = _UPDATE_EXPRESSIONS.setdefault(expression, tree)
    return tree


# --------------------------------------------------------------------------
# moto's DynamoDB also lexes every ConditionExpression anew, some forty regex
# matches for the ledger's. The tokens depend on the text alone (names and
# values are looked up after) and are read only: each text is lexed once and
# every parse gets its own queue of them.
# --------------------------------------------------------------------------

_CONDITION_PARSER: Any = ddb_comparisons.ConditionExpressionParser
_original_lex_condition = _CONDITION_PARSER._lex_condition_expression
_CONDITION_TOKENS: dict[str, tuple[Any, ...]] = {}  # text: its tokens, read only
_CONDITION_TOKENS_KEPT = 4096
_CONDITION_TOKENS_LOCK = threading.Lock()
# The whole parser, as the cache relies on its lexer reading only the text and
# on nothing after it changing a token.
_CONDITION_PARSER_SHA256 = "ba0de03156fea746536d0ec3986b7509749b4145d2919c7db2b128c2f4eabdd7"


def _cached_lex_condition(self: Any) -> collections.deque[Any]:
    text = self.condition_expression
    tokens = _CONDITION_TOKENS.get(text)
    if tokens is None:
        tokens = tuple(_original_lex_condition(self))  # a text that does not lex raises here
        with _CONDITION_TOKENS_LOCK:
            if len(_CONDITION_TOKENS) < _CONDITION_TOKENS_KEPT:
                tokens = _CONDITION_TOKENS.setdefault(text, tokens)
    return collections.deque(tokens)  # the parse pops its queue empty


# --------------------------------------------------------------------------
# moto's DynamoDB validator deep-copies the parsed UpdateExpression (cached
# above) for every UpdateItem and walks the copy ten times, once per check.
# Two costs are not the checks': copy.deepcopy's bookkeeping, and each walk
# asking its checker, at every node, which node classes it handles (a fresh
# dict of bound methods each time). The copy below rebuilds a plain tree
# (nodes holding only type, children and parent; leaves text or numbers; every
# node reached once, from its parent) and hands anything else to
# copy.deepcopy; the walk asks once per walk and otherwise follows moto's
# traverse_node_recursively step by step.
# --------------------------------------------------------------------------

_AST_NODE_KEYS = frozenset({"type", "children", "parent"})
_AST_LEAVES = frozenset({str, int})
_NO_PARENT = object()  # a node without the attribute
_AST_NODE: Any = vars(ddb_ast_nodes)["Node"]
_TRAVERSER: Any = vars(ddb_ast_nodes)["DepthFirstTraverser"]
_original_traverse = _TRAVERSER.traverse
_original_traverse_node = _TRAVERSER.traverse_node_recursively
_original_pre_processing = _TRAVERSER.pre_processing_of_child
_TRAVERSE_SHA256 = "a579b32b081a36c21bc576d78db7531edfa6c700301aee107f3776ea801e5d1b"


def _walk_sources() -> list[Any]:
    """What _traverse follows or relies on: moto's walk, its default hook, and the
    map of every checker (whose keys must be constants)."""
    checkers = sorted(
        (
            value
            for value in vars(ddb_validators).values()
            if isinstance(value, type) and issubclass(value, _TRAVERSER) and value is not _TRAVERSER
        ),
        key=lambda checker: checker.__name__,
    )
    return [
        _original_traverse,
        _original_traverse_node,
        _original_pre_processing,
        _TRAVERSER.nodes_to_be_processed,
        _TRAVERSER.process,
        *(vars(checker)["_processing_map"] for checker in checkers),
    ]


class _NotPlain(Exception):
    """The tree has something copy.deepcopy must handle."""


def _copy_plain_tree(root: Any) -> Any:
    node_type = _AST_NODE
    seen: set[int] = set()

    def copy_node(node: Any, parent: Any) -> Any:
        state = vars(node)
        if state.keys() != _AST_NODE_KEYS or id(node) in seen:
            raise _NotPlain
        seen.add(id(node))
        new = object.__new__(type(node))
        children = state["children"]
        copied: list[Any] | None = None if children is None else []
        new.__dict__.update(type=state["type"], children=copied, parent=parent)
        if children is not None:
            if type(children) is not list:
                raise _NotPlain
            for child in children:
                if isinstance(child, node_type):
                    if vars(child).get("parent", _NO_PARENT) is not node:
                        raise _NotPlain
                    copied.append(copy_node(child, new))  # type: ignore[union-attr]
                elif type(child) in _AST_LEAVES:
                    copied.append(child)  # type: ignore[union-attr]
                else:
                    raise _NotPlain
        return new

    return copy_node(root, None)


def _validator_deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    root = memo is None and isinstance(value, _AST_NODE)
    if root and vars(value).get("parent", _NO_PARENT) is None:
        try:
            return _copy_plain_tree(value)
        except _NotPlain:
            pass  # copy.deepcopy copies whatever else the tree holds
    return copy.deepcopy(value, memo)


def _traverse(self: Any, node: Any) -> Any:
    cls = type(self)
    if (
        cls.traverse_node_recursively is not _original_traverse_node
        or cls.nodes_to_be_processed is not _TRAVERSER.nodes_to_be_processed
    ):
        return _original_traverse(self, node)
    kinds = self.nodes_to_be_processed()  # the keys of a map moto's checkers build from constants
    pre = self.pre_processing_of_child
    if cls.pre_processing_of_child is _original_pre_processing:
        pre = None  # moto's default does nothing
    process = self.process
    processed: dict[type, bool] = {}  # isinstance(node, kinds) by node class, asked once

    def visit(node: Any, child_id: int = -1) -> Any:
        if _is_ast_node(node):
            parent_node = node.parent
            if node.children is not None:
                for i, child_node in enumerate(node.children):
                    if pre is not None:
                        pre(node, i)
                    visit(child_node, i)
            is_kind = processed.get(type(node))
            if is_kind is None:
                is_kind = processed[type(node)] = isinstance(node, kinds)
            if is_kind:
                node = process(node)
                node.parent = parent_node
                if parent_node:
                    parent_node.children[child_id] = node
        return node

    return visit(node)


# isinstance against moto's node classes goes through ABCMeta.__instancecheck__
# (they are abc classes, though nothing registers virtual subclasses): asked
# once per class. Keyed by type(value), which is the class isinstance sees for
# anything that does not fake its __class__ (nothing in moto's trees does).
_AST_NODE_CLASSES: dict[type, bool] = {}
_AST_DESCENDED: dict[type, bool] = {}
_AST_DESCEND_INTO: tuple[type, ...] = (
    vars(ddb_ast_nodes)["Expression"],
    vars(ddb_ast_nodes)["UpdateExpressionFunction"],
)
_original_find_clauses = _AST_NODE.find_clauses
_FIND_CLAUSES_SHA256 = "b77be7ac447d7617ea68e818e2bceb652a8a14257001715c64b36b3244a04c55"


def _is_ast_node(value: Any) -> bool:
    known = _AST_NODE_CLASSES.get(type(value))
    if known is None:
        known = _AST_NODE_CLASSES[type(value)] = isinstance(value, _AST_NODE)
    return known


def _find_clauses(self: Any, clause_types: Any) -> list[Any]:
    """moto's Node.find_clauses, with its two isinstance checks asked once per class."""
    clauses = []
    for child in self.children or []:
        if type(child) in clause_types:
            clauses.append(child)
            continue
        descend = _AST_DESCENDED.get(type(child))
        if descend is None:
            descend = _AST_DESCENDED[type(child)] = isinstance(child, _AST_DESCEND_INTO)
        if descend:
            clauses.extend(child.find_clauses(clause_types))
    return clauses


# --------------------------------------------------------------------------
# moto's interpreter deep-copies every state's input, result and stack, with
# copy.deepcopy and its bookkeeping. These are JSON values: the modules below
# copy plain dicts, lists, text and numbers directly, and hand anything else
# (and any copy given a memo) to copy.deepcopy. The one difference: an object
# that appears twice in a value is copied twice (JSON has no shared parts).
# --------------------------------------------------------------------------

_JSON_ATOMS = frozenset({str, int, float, bool, type(None)})
# The interpreter copies its program state every time it looks at it.
_FLAT_PROGRAM_STATES = frozenset({program_state.ProgramRunning, program_state.ProgramEnded})


def _copy_json(value: Any) -> Any:
    kind = type(value)
    if kind in _JSON_ATOMS:
        return value
    if kind is dict:
        return {
            (k if type(k) in _JSON_ATOMS else copy.deepcopy(k)): _copy_json(v)
            for k, v in value.items()
        }
    if kind is list:
        return [_copy_json(v) for v in value]
    if kind in _FLAT_PROGRAM_STATES and all(type(v) in _JSON_ATOMS for v in vars(value).values()):
        clone = object.__new__(kind)  # what deepcopy makes of an object holding only text
        vars(clone).update(vars(value))
        return clone
    return copy.deepcopy(value)


def _json_deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    return copy.deepcopy(value, memo) if memo is not None else _copy_json(value)


class _JsonCopyModule:
    """The copy module as the interpreter's modules see it: deepcopy as above."""

    deepcopy = staticmethod(_json_deepcopy)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


_JSON_COPY_MODULES = (
    execute_state,
    eval_states,
    eval_environment,
    event_manager,
    state_task_service,
    state_parallel,
    result_path,
    string_expression,
)


# --------------------------------------------------------------------------
# moto runs the work of every Task, Map and Parallel state on a new thread and
# waits up to its TimeoutSeconds for it. With no TimeoutSeconds the wait is
# moto's default, 99999999 seconds (three years), and ends with the work: the
# work runs on the execution's own thread, in a fresh context as a new
# thread's (context variables do not leak from one state's work to the next;
# thread-local values would), and the rest exactly as moto's steps below. Any
# other timeout (a number, a JSONata or path one, a heartbeat's) keeps moto's.
# --------------------------------------------------------------------------

_original_evaluate_with_timeout = execute_state.ExecutionState._evaluate_with_timeout
# moto's _evaluate_with_timeout as this follows it (checked in check_moto_internals).
_EVALUATE_WITH_TIMEOUT_SHA256 = "c56deda08a42e98d3958bfb2ab95de74c7ec7a515085614a80e1ea4948722485"


def _evaluate_with_timeout(self: Any, env: Any) -> None:
    timeout = self.timeout
    if (
        type(timeout) is not sfn_timeout.TimeoutSeconds
        or timeout.timeout_seconds != sfn_timeout.TimeoutSeconds.DEFAULT_TIMEOUT_SECONDS
    ):
        _original_evaluate_with_timeout(self, env)
        return
    timeout.eval(env=env)
    env.stack.pop()

    frame = env.open_frame()
    frame.states.reset(input_value=env.states.get_input())
    frame.stack = vars(execute_state)["copy"].deepcopy(env.stack)  # as moto copies it
    try:
        contextvars.Context().run(self._eval_execution, frame)
        execution_output = frame.stack[-1]
    finally:
        frame.set_ended()
        env.close_frame(frame)

    env.stack.append(execution_output)

    if not self._is_language_query_jsonpath():
        env.states.set_result(execution_output)

    if self.assign_decl:
        self.assign_decl.eval(env=env)

    if self.result_selector:
        self.result_selector.eval(env=env)

    if self.result_path:
        self.result_path.eval(env)
    else:
        res = env.stack.pop()
        env.states.reset(input_value=res)


# --------------------------------------------------------------------------
# botocore, while the local services answer: nobody checks the signature
# (moto reads only the access key from it, to know the account), and
# computing it cost about a twelfth of an execution. A request to them gets
# an Authorization header of the same form with a dummy signature. Requests
# to AWS (the mock stopped), presigned URLs and S3 (whose signer also frames
# the body and its checksum) are signed as ever. botocore
# also re-sanitises every part of its User-Agent header, character by
# character, for every request: the same parts give the same text.
# --------------------------------------------------------------------------

_original_sign = botocore.signers.RequestSigner.sign
_SIGNER_ATTRIBUTES = ("_credentials", "_region_name", "_signing_name", "_signature_version")
_DUMMY_SIGNATURE = "0" * 64


def _sign_unless_local(
    self: Any, operation_name: Any, request: Any, *args: Any, **kwargs: Any
) -> Any:
    signing_type = kwargs.get("signing_type", args[1] if len(args) > 1 else "standard")
    if (
        not moto_botocore_stubber.enabled
        or math.isfinite(moto_settings.INITIAL_NO_AUTH_ACTION_COUNT)  # moto checks IAM auth
        or signing_type != "standard"
        or self.signature_version is botocore.UNSIGNED
        or self._credentials is None
        or self._signing_name == "s3"  # its signer also frames the body (aws-chunked)
    ):
        return _original_sign(self, operation_name, request, *args, **kwargs)
    access_key = self._credentials.get_frozen_credentials().access_key
    region = (getattr(request, "context", None) or {}).get("signing", {}).get(
        "region"
    ) or self._region_name
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{time.strftime('%Y%m%d', time.gmtime())}/"
        f"{region}/{self._signing_name}/aws4_request, "
        f"SignedHeaders=host, Signature={_DUMMY_SIGNATURE}"
    )
    return None


def _context_deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """botocore deep-copies its ClientContext (a set of feature ids) for every call."""
    if type(value) is botocore.context.ClientContext and memo is None:
        return botocore.context.ClientContext(features=set(value.features))
    return copy.deepcopy(value, memo)


_original_sanitize = botocore.useragent.sanitize_user_agent_string_component
_cached_sanitize = functools.lru_cache(maxsize=1024)(_original_sanitize)


_applied = False
# --------------------------------------------------------------------------
# A JSONata expression that fails (bad input to $parse, $error(), a type
# error) is States.QueryEvaluationError on AWS, which Catch can handle. moto
# lets the raw exception escape, which ends the execution as an uncatchable
# States.Runtime (and inside a Parallel branch, as a crash of the branch).
# --------------------------------------------------------------------------

_original_jsonata_eval_body = string_expression.StringJSONata._eval_body


# Where JSONata's tokenizer ends a name: whitespace or a one-character operator
# (jsonata.js 2.0.6's, checked by tests/unit/test_jsonata_node.py). Anything
# else goes on with the name: "temp°C", "price$usd" and 'a"b"' are each one name.
_NAME_ENDS = frozenset(" \t\n\r\v!#%&()*+,-./:;<=>?@[]^{|}~")
_NAME_CHAR = "[^" + re.escape("".join(sorted(_NAME_ENDS))) + "]"
# A field step: a name that does not start as a number, a string, a quoted
# name or a variable would.
_STEP = "[^" + re.escape("".join(sorted(_NAME_ENDS)) + "0123456789\"'`$") + "]" + _NAME_CHAR + "*"
_VARIABLE = re.compile(rf"\$({_NAME_CHAR}*)((?:\.{_STEP})*)")
# Words JSONata reads as literals or operators, never as a field step.
_NOT_STEPS = frozenset({"true", "false", "null", "and", "or", "in", "function"})
# The parts of $states an expression reads: {field: {field: ...}}, where None
# is the whole value at that point.
StatesPaths = Mapping[str, "StatesPaths | None"]


def _frozen(paths: dict[str, Any]) -> StatesPaths:
    return MappingProxyType({k: None if v is None else _frozen(v) for k, v in paths.items()})


@functools.lru_cache(maxsize=4096)
def _references(expression: str) -> tuple[frozenset[str], StatesPaths | None]:
    """(variables an expression may read, the parts of $states it reads or None for all).

    A superset is harmless (a name in a string literal binds a value nobody
    reads); what is left out is undefined, so a name is only left out when
    it does not occur in the text at all. Of $states, "$states.context.Execution.Id"
    needs only that field; a path that goes on in any other way (a predicate,
    a quoted name, a function) gets the whole value where its plain steps end,
    and any use of JSONata's parent operator (%) gets all of $states. Names
    end where JSONata's tokenizer ends them.
    """
    names: set[str] = set()
    paths: dict[str, Any] | None = None if "%" in expression else {}
    for match in _VARIABLE.finditer(expression):
        name, chain = match.group(1), match.group(2)
        names.add(name)
        if name != "states" or paths is None:
            continue
        steps = chain.split(".")[1:]
        for n, step in enumerate(steps):
            if step in _NOT_STEPS:
                steps = steps[:n]
                break
        if not steps:
            paths = None  # all of $states
            continue
        node = paths
        for n, step in enumerate(steps):
            if step in node and node[step] is None:
                break  # the whole value is bound already
            if n == len(steps) - 1:
                node[step] = None
            else:
                node = node.setdefault(step, {})
    return frozenset(names), (None if paths is None else _frozen(paths))


def _pick(value: Mapping[str, Any], paths: StatesPaths) -> dict[str, Any]:
    """The parts of value the paths name (a value that is not an object: whole)."""
    picked = {}
    for step, deeper in paths.items():
        if step in value:
            part = value[step]
            picked[step] = part if deeper is None or type(part) is not dict else _pick(part, deeper)
    return picked


def _bindings(expression: str, env: Any) -> dict[str, Any]:
    """The variables and $states the expression reads (only those: each is sent to
    node as JSON text, and $states holds the input twice, up to 256 KiB each)."""
    names, paths = _references(expression)
    store = env.variable_store
    bindings: dict[str, Any] = {}
    for scope in (store._outer_scope, store._inner_scope):  # inner shadows outer
        for name in names.intersection(scope):
            bindings[name] = scope[name]
    if "states" in names:
        states = env.states._states_data
        bindings["states"] = states if paths is None else _pick(states, paths)
    return bindings


def _refuse(env: Any, expression: str, what: str) -> NoReturn:
    """Fail the state as Step Functions does for a result it cannot use, with
    moto's own EvaluationFailed event (as its validate_jsonata_expression_output)."""
    error_name = StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError)
    failure = FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=error_name,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(  # type: ignore[typeddict-item]
                evaluationFailedEventDetails=EvaluationFailedEventDetails(
                    cause=f"The JSONata expression '{expression}' {what}.",
                    error=error_name.error_name,
                )
            ),
        )
    )
    env.event_manager.add_event(
        context=env.event_history_context,
        event_type=HistoryEventType.EvaluationFailed,
        event_details=EventDetails(  # type: ignore[typeddict-item]
            evaluationFailedEventDetails=failure.get_evaluation_failed_event_details()
        ),
    )
    raise failure


# Results of expressions with neither a variable nor a function, by text.
_CONSTANTS: dict[str, Any] = {}
_CONSTANTS_KEPT = 4096


def _compiled_eval_body(self: Any, env: Any) -> None:
    """StringJSONata._eval_body with the reference library: compile once, bind the variables.

    moto writes $states and every variable into the expression as JSONata
    text and parses the whole of it on each evaluation (the input included,
    up to 256 KiB). Step Functions compiles each expression as written and
    binds the variables; so does this, which also makes a top-level
    "$a := 1; $a" fail here as it fails on AWS. Undefined and a value JSON
    cannot hold (a function, Infinity) fail the state, as on AWS.
    """
    expression = self.expression
    constant = "$" not in expression  # no variable, no function: "60 + 10", say
    if constant and expression in _CONSTANTS:
        env.stack.append(_copy_json(_CONSTANTS[expression]))
        return
    try:
        result = jsonata_node.evaluate(expression, _bindings(expression, env))
    except jsonata_node.JsonataError as exc:  # States.QueryEvaluationError, below
        raise moto_jsonata.JSONataException(exc.code or "UNKNOWN", str(exc)) from exc
    except jsonata_node.UnsupportedResult:
        _refuse(env, expression, UNSUPPORTED_RESULT)
    if result is jsonata_node.UNDEFINED:
        _refuse(env, expression, "returned nothing (undefined)")
    if constant and len(_CONSTANTS) < _CONSTANTS_KEPT:
        _CONSTANTS[expression] = _copy_json(result)
    env.stack.append(result)


def _jsonata_eval_body(self: Any, env: Any) -> None:
    try:
        _compiled_eval_body(self, env)
    except moto_jsonata.JSONataException as exc:
        error_name = StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError)
        expression = (
            self.expression if len(self.expression) <= 200 else self.expression[:200] + "..."
        )
        failure_event = FailureEvent(
            env=env,
            error_name=error_name,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(  # type: ignore[typeddict-item]
                evaluationFailedEventDetails=EvaluationFailedEventDetails(
                    error=error_name.error_name,
                    cause=(
                        f"An error occurred while evaluating the JSONata expression "
                        f"'{expression}': {exc.details}"
                    ),
                )
            ),
        )
        raise FailureEventException(failure_event=failure_event) from exc


def _branch_error_name(error_name: str | None) -> Any:
    """The error a failed Parallel branch re-raises, by its own kind.

    moto wraps every branch error in CustomErrorName, which refuses names that
    start with "States.": a branch failing with States.TaskFailed, States.Timeout
    or States.QueryEvaluationError crashed the Parallel instead of reaching its
    Retry/Catch, as it does on AWS.
    """
    if error_name is not None and error_name.startswith("States."):
        return StatesErrorName.from_name(error_name)
    return CustomErrorName(error_name=error_name)


# --------------------------------------------------------------------------
# Step Functions refuses an execution input over 256 KiB (UTF-8); moto takes
# any size. Without this, a local run would start executions that AWS never
# starts, and the ingress paths (EventBridge's DLQ, the source queue's
# redrive) would never be exercised.
# --------------------------------------------------------------------------

EXECUTION_INPUT_LIMIT = 262144
_original_start_execution = sfn_parser_models.StepFunctionsParserBackend.start_execution


def _start_execution(self: Any, state_machine_arn: str, *args: Any, **kwargs: Any) -> Any:
    execution_input = kwargs.get("execution_input", args[1] if len(args) > 1 else None)
    size = len((execution_input or "").encode("utf-8"))
    if size > EXECUTION_INPUT_LIMIT:
        raise sfn_exceptions.ValidationException(
            "1 validation error detected: Value at 'input' failed to satisfy constraint: "
            f"Member must have length less than or equal to {EXECUTION_INPUT_LIMIT} "
            f"(the input is {size} bytes)"
        )
    execution = _original_start_execution(self, state_machine_arn, *args, **kwargs)
    _index_execution(self, execution)
    return execution


# --------------------------------------------------------------------------
# moto finds an execution (DescribeExecution, GetExecutionHistory) by scanning
# every execution of its state machine: quadratic over a long run. Each started
# execution is indexed by ARN on its backend, and found there while its state
# machine is the one moto would scan; anything else takes moto's way.
# --------------------------------------------------------------------------

_original_describe_execution = sfn_models.StepFunctionBackend.describe_execution
_INDEX_LOCK = threading.Lock()


def _index(backend: Any) -> weakref.WeakKeyDictionary[Any, dict[str, Any]]:
    """The backend's executions by state machine and ARN (held no longer than moto
    holds the machine: its classes keep every instance until the backend resets)."""
    index = vars(backend).get("_onceflow_executions")
    if index is None:
        index = vars(backend).setdefault("_onceflow_executions", weakref.WeakKeyDictionary())
    return index  # type: ignore[no-any-return]


def _index_execution(backend: Any, execution: Any) -> None:
    arn = execution.execution_arn
    try:
        machine = backend._get_state_machine_for_execution(arn)
    except sfn_exceptions.ExecutionDoesNotExist:
        return  # moto would not find it either (a version's or alias's execution, say)
    if any(found is execution for found in reversed(machine.executions[-64:])):
        with _INDEX_LOCK:
            _index(backend).setdefault(machine, {})[arn] = execution


_original_name_check = sfn_models.StateMachine._handle_name_input_idempotency


def _indexed_name_check(self: Any, name: str, execution_input: str) -> Any:
    """moto's check that a new execution's name is free, which scans every
    execution of the machine: while every one of them is indexed, a name with
    no execution is free; anything else is moto's scan."""
    entries = _index(self.backend).get(self, {})
    if len(entries) == len(self.executions):  # indexed ones are among them: all are
        prefix = self.arn.rsplit(":stateMachine:", 1)[0]
        if f"{prefix}:execution:{self.name}:{name}" not in entries:
            return None
    return _original_name_check(self, name, execution_input)


def _indexed_describe_execution(self: Any, execution_arn: str) -> Any:
    self._validate_execution_arn(execution_arn)
    try:
        machine = self._get_state_machine_for_execution(execution_arn)
    except sfn_exceptions.ExecutionDoesNotExist:
        machine = None  # moto's own call below raises it
    if machine is not None:
        execution = _index(self).get(machine, {}).get(execution_arn)
        if execution is not None:  # the one moto's scan of machine.executions finds
            return execution
    return _original_describe_execution(self, execution_arn)


# What moto declared before apply() removed its stubs.
_MOTO_STUBBED_FUNCTIONS = set(getattr(intrinsic_jsonata, "_DECLARATION_BY_VARIABLE_REFERENCE", {}))


def _source_sha256(sources: list[Any]) -> str:
    return hashlib.sha256(b"".join(inspect.getsource(x).encode() for x in sources)).hexdigest()


def _pinned_sources() -> list[tuple[str, list[Any], str]]:
    """moto code a patch follows step by step (or relies on in detail), with the
    sha256 of its source when the patch was checked against it."""
    return [
        (
            "moto's ExecutionState._evaluate_with_timeout",
            [_original_evaluate_with_timeout],
            _EVALUATE_WITH_TIMEOUT_SHA256,
        ),
        (
            "moto's BotocoreStubber.process_request",
            [_original_process_request],
            _PROCESS_REQUEST_SHA256,
        ),
        ("moto's DynamoDB DepthFirstTraverser and checkers", _walk_sources(), _TRAVERSE_SHA256),
        ("moto's ConditionExpressionParser", [_CONDITION_PARSER], _CONDITION_PARSER_SHA256),
        ("moto's DynamoDB Node.find_clauses", [_original_find_clauses], _FIND_CLAUSES_SHA256),
    ]


def check_moto_internals() -> None:
    """Raise when moto no longer has what these patches replace."""
    import moto

    problems = []
    if "method_names_from_class(self.__class__)" not in inspect.getsource(
        moto_responses.BaseResponse.call_action
    ):
        problems.append("BaseResponse.call_action no longer lists methods per request")
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
    if not {"$hash", "$uuid", "$parse", "$partition", "$range"} <= _MOTO_STUBBED_FUNCTIONS:
        problems.append("moto's JSONata function declarations moved")
    if "eval_jsonata_expression(rich_jsonata_expression)" not in inspect.getsource(
        _original_jsonata_eval_body
    ):
        problems.append("StringJSONata._eval_body no longer evaluates through the hook")
    body = inspect.getsource(_original_jsonata_eval_body)
    for needed in ("env.variable_store", "env.states", "validate_jsonata_expression_output"):
        if needed not in body:
            problems.append(f"StringJSONata._eval_body no longer uses {needed}")
    if not {"_outer_scope", "_inner_scope"} <= set(
        inspect.signature(variable_store.VariableStore.__init__).parameters
    ) | set(vars(variable_store.VariableStore).get("__annotations__", {})):
        problems.append("VariableStore no longer keeps _outer_scope and _inner_scope")
    if "_states_data" not in inspect.getsource(eval_states.States):
        problems.append("States no longer keeps _states_data")
    start_parameters = list(inspect.signature(_original_start_execution).parameters)
    if start_parameters[:4] != ["self", "state_machine_arn", "name", "execution_input"]:
        problems.append("StepFunctionsParserBackend.start_execution changed its parameters")
    if "CustomErrorName(error_name=exit_error_name)" not in inspect.getsource(branches_decl):
        problems.append("Parallel branches no longer name their error with CustomErrorName")
    if "process_request" not in vars(botocore_stubber.BotocoreStubber):
        problems.append("BotocoreStubber.process_request is gone")
    client_source = inspect.getsource(_original_boto_client_for)
    if "boto3.client(" not in client_source or "state_credentials." in client_source:
        problems.append("moto's boto_client_for changed (a client per call, credentials unused)")
    logic = inspect.getsource(_original_execution_logic)
    if "self._execution_communication.terminated()" not in logic:
        problems.append("moto's execution worker no longer ends with terminated()")
    if "AmazonStateLanguageParser.parse" not in inspect.getsource(_original_entrypoint):
        problems.append("moto's execution worker no longer parses in _get_evaluation_entrypoint")
    if "_invoke_lambda" not in vars(lambda_models.LambdaFunction):
        problems.append("LambdaFunction._invoke_lambda is gone")
    from moto.stepfunctions.parser.asl.component.common.retry import max_attempts_decl

    if "heap_key" not in vars(eval_component.EvalComponent) or "env.heap" not in (
        inspect.getsource(max_attempts_decl)
    ):
        problems.append("components no longer keep per-execution values in env.heap")
    signer_init = inspect.getsource(botocore.signers.RequestSigner.__init__)
    if not all(f"self.{name} =" in signer_init for name in _SIGNER_ATTRIBUTES):
        problems.append("botocore's RequestSigner no longer keeps what the local signature uses")
    if not callable(vars(botocore.useragent).get("sanitize_user_agent_string_component")):
        problems.append("botocore's sanitize_user_agent_string_component moved")
    from moto.s3 import models as s3_models

    url_sources = (
        inspect.getsource(vars(s3_models.S3Backend)["_url_module"].fget),
        inspect.getsource(moto_settings.get_s3_custom_endpoints),
        inspect.getsource(moto_settings.enable_iso_regions),
    )
    needs = ("reload(", *_URL_SETTINGS)
    if not isinstance(vars(base_backend.BaseBackend).get("urls"), property) or not all(
        needed in source for needed, source in zip(needs, url_sources, strict=True)
    ):
        problems.append("moto's URL tables no longer depend only on the backend and two settings")
    if "parse(self.result_path_src)" not in inspect.getsource(result_path) or (
        "parse(path)" not in inspect.getsource(json_path.extract_json)
    ):
        problems.append("moto no longer parses JSONPaths through the module's parse")
    if "deepcopy(expression)" not in inspect.getsource(ddb_validators.Validator.__init__):
        problems.append("moto's DynamoDB validator no longer works on a copy of the expression")
    for module in _JSON_COPY_MODULES:
        imported = vars(module).get("copy")
        if not (imported is copy or isinstance(imported, _JsonCopyModule)) or (
            "copy.deepcopy(" not in inspect.getsource(module)
        ):
            problems.append(f"{module.__name__} no longer copies with copy.deepcopy")
    context_fields = [f.name for f in dataclasses.fields(botocore.context.ClientContext)]
    if context_fields != ["features"] or "deepcopy(current)" not in inspect.getsource(
        botocore.context.start_as_current_context
    ):
        problems.append("botocore's ClientContext is no longer a set of features, copied per call")
    describe = inspect.getsource(_original_describe_execution)
    start = inspect.getsource(_original_start_execution)
    if (
        "state_machine.executions" not in describe
        or "state_machine.executions.append(execution)" not in start
        or "execution:{}:{}" not in start
        or "for execution in self.executions:" not in inspect.getsource(_original_name_check)
    ):
        problems.append("moto no longer keeps executions in their state machine's list")
    for what, sources, pinned in _pinned_sources():
        if _source_sha256(sources) != pinned:
            problems.append(f"{what} changed: re-check the patch that follows it")
    if vars(ddb_validators).get("deepcopy") not in (copy.deepcopy, _validator_deepcopy):
        problems.append("moto's DynamoDB validators no longer copy with copy.deepcopy")
    if problems:
        raise RuntimeError(
            "onceflow's moto patches no longer fit this moto: " + "; ".join(problems)
        )


def state_within_size_quota(value: Any) -> bool:
    """Fidelity: Step Functions holds state data as JSON text, and a JSON text has no lone
    surrogate (it is escaped, as JavaScript's JSON.stringify does). moto encodes a bare
    string state as it is, so a lone surrogate in it ended the execution with a Python
    UnicodeEncodeError (States.Runtime) where AWS carries on. The size still counts
    UTF-8 bytes against moto's limit; an escaped surrogate counts as its six characters.
    """
    text = value if isinstance(value, str) else sfn_encoding.to_json_str(value)
    size = len(text.encode("utf-8", "backslashreplace"))
    return size < sfn_quotas.MAX_STATE_SIZE_UTF8_BYTES


def apply() -> None:
    """Install every patch (once)."""
    global _applied
    if _applied:
        return
    check_moto_internals()
    retrier_decl.time = _ScaledTimeModule()  # type: ignore[assignment,attr-defined]
    wait_function.WaitFunction._wait_interval = _scaled_wait_interval  # type: ignore[method-assign]
    moto_jsonata._eval_jsonata = eval_jsonata
    for module in (sfn_state, sfn_task_lambda, state_task_service):
        module.is_within_size_quota = state_within_size_quota  # type: ignore[attr-defined]
    for module in (moto_jsonata, eval_states, variable_store):
        module.encode_jsonata_variable_declarations = encode_jsonata_variable_declarations  # type: ignore[attr-defined]
    # The evaluator has Step Functions' own functions; moto's declarations, which
    # it prepends to the text of its fallback path, would shadow them ($hash and
    # $uuid as a "not supported" text, $parse as $eval, $randomSeeded, which AWS
    # does not have).
    intrinsic_jsonata._DECLARATION_BY_VARIABLE_REFERENCE.clear()
    string_expression.StringJSONata._eval_body = _jsonata_eval_body  # type: ignore[method-assign]
    branches_decl.CustomErrorName = _branch_error_name  # type: ignore[assignment,attr-defined]
    sfn_parser_models.StepFunctionsParserBackend.start_execution = _start_execution  # type: ignore[method-assign]
    botocore_stubber.BotocoreStubber.process_request = _serialised_process_request  # type: ignore[method-assign]
    sfn_models.StepFunctionBackend.describe_execution = _indexed_describe_execution  # type: ignore[method-assign]
    sfn_models.StateMachine._handle_name_input_idempotency = _indexed_name_check  # type: ignore[method-assign]
    lambda_models.LambdaFunction._invoke_lambda = _in_process_invoke_lambda  # type: ignore[method-assign]
    execution_worker.ExecutionWorker._get_evaluation_entrypoint = _cached_entrypoint  # type: ignore[method-assign]
    execution_worker.ExecutionWorker._execution_logic = _signalling_execution_logic  # type: ignore[method-assign]
    _install_cached_clients()
    moto_responses.method_names_from_class = _cached_method_names  # type: ignore[attr-defined,assignment]
    botocore.signers.RequestSigner.sign = _sign_unless_local  # type: ignore[method-assign]
    botocore.useragent.sanitize_user_agent_string_component = _cached_sanitize
    base_backend.BaseBackend.urls = property(_cached_urls)  # type: ignore[method-assign,assignment]
    result_path.parse = functools.lru_cache(maxsize=1024)(_original_result_path_parse)  # type: ignore[attr-defined]
    json_path.parse = functools.lru_cache(maxsize=1024)(_original_json_path_parse)  # type: ignore[attr-defined]
    _UPDATE_EXPRESSION_PARSER.make = classmethod(_cached_update_expression_make)
    vars(ddb_validators)["deepcopy"] = _validator_deepcopy
    _TRAVERSER.traverse = _traverse
    _AST_NODE.find_clauses = _find_clauses
    _CONDITION_PARSER._lex_condition_expression = _cached_lex_condition
    botocore.context.deepcopy = _context_deepcopy  # type: ignore[attr-defined]
    for module in _JSON_COPY_MODULES:
        module.copy = _JsonCopyModule()  # type: ignore[attr-defined]
    execute_state.ExecutionState._evaluate_with_timeout = _evaluate_with_timeout  # type: ignore[method-assign]
    _applied = True
