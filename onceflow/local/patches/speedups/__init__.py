"""Speed-ups: each makes moto (or botocore) do the same thing faster.

Each is pinned (``Pin``) to the sha256 of the source it follows step by step or
relies on in detail. When a pin does not match (moto was upgraded), that
speed-up is left out with one warning line and moto's own code runs: slower,
never different. Each has a test that compares it with moto alone, and stays
only while its gain, measured side by side (bench/measure_speedups.py), is
clear: docs/local-engine.md keeps the measurements.
"""

from __future__ import annotations

import collections
import copy
import functools
import inspect
import math
import os
import re
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import botocore
import botocore.signers
import botocore.useragent
from moto import settings as moto_settings
from moto.core import base_backend
from moto.core import responses as moto_responses
from moto.core import utils as moto_core_utils
from moto.core.models import botocore_stubber as moto_botocore_stubber
from moto.dynamodb import comparisons as ddb_comparisons
from moto.dynamodb.parsing import ast_nodes as ddb_ast_nodes
from moto.dynamodb.parsing import validators as ddb_validators
from moto.s3 import models as s3_models
from moto.stepfunctions.parser import models as sfn_parser_models
from moto.stepfunctions.parser.asl.component import component as asl_component
from moto.stepfunctions.parser.asl.component import eval_component
from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.state.exec import execute_state
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import (
    state_parallel,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
)
from moto.stepfunctions.parser.asl.eval import environment as eval_environment
from moto.stepfunctions.parser.asl.eval import program_state
from moto.stepfunctions.parser.asl.eval import states as eval_states
from moto.stepfunctions.parser.asl.eval.event import event_manager
from moto.stepfunctions.parser.asl.utils import boto_client as moto_boto_client
from moto.stepfunctions.parser.backend import execution_worker

from onceflow.local.patches.registry import Installer, Patch, Pin

_URL_SETTINGS = ("MOTO_S3_CUSTOM_ENDPOINTS", "MOTO_ENABLE_ISO_REGIONS")

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
# moto validates a definition by parsing it with ANTLR at every CreateStateMachine:
# about a third of an engine's start, and the tests start some 550 engines. What a
# validation decides depends on the definition's text alone, so a text accepted once
# is accepted again without a parse; a refused one is validated (and refused) anew
# every time. Whatever validator is in place (the fidelity check of unique state
# names wraps moto's) is the one whose acceptances are kept.
# --------------------------------------------------------------------------

_original_validate_definition = sfn_parser_models.StepFunctionsParserBackend._validate_definition
_VALIDATED: set[str] = set()


def _remembering_validation(validate: Callable[..., Any]) -> Callable[[str], None]:
    def _validate_definition(definition: str) -> None:
        if definition in _VALIDATED:
            return
        validate(definition=definition)
        with _PARSED_LOCK:
            _VALIDATED.add(definition)

    return _validate_definition


# --------------------------------------------------------------------------
# moto's task integrations build a new boto3 client for every call (about a
# sixth of an execution's time). Clients are thread-safe once built; build
# each (region, service) once, under a lock (boto3's default session is not).
# --------------------------------------------------------------------------

_original_boto_client_for = moto_boto_client.boto_client_for
_CLIENTS: dict[tuple[str, str, bool], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _cached_boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
    # moto's own version ignores state_credentials (checked in _clients_fit).
    # moto picks the endpoint (the in-process stubber or a server) when it builds one.
    key = (region, service, bool(moto_botocore_stubber.enabled))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = _original_boto_client_for(region, service)
    return client


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
# variables (checked in _urls_fit): build it once for each.
# --------------------------------------------------------------------------

_original_urls: Callable[[Any], dict[str, Any]] = vars(base_backend.BaseBackend)["urls"].fget
_URLS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _cached_urls(self: Any) -> dict[str, Any]:
    key = (type(self), *(os.environ.get(name) for name in _URL_SETTINGS))
    urls = _URLS.get(key)
    if urls is None:
        urls = _URLS[key] = _original_urls(self)
    return dict(urls)


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
# moto's DynamoDB validator deep-copies the parsed UpdateExpression for every
# UpdateItem, most of it copy.deepcopy's bookkeeping. The copy below rebuilds a
# plain tree (nodes holding only type, children and parent; leaves text or
# numbers; every node reached once, from its parent) and hands anything else
# to copy.deepcopy.
# --------------------------------------------------------------------------

_AST_NODE_KEYS = frozenset({"type", "children", "parent"})
_AST_LEAVES = frozenset({str, int})
_NO_PARENT = object()  # a node without the attribute
_AST_NODE: Any = vars(ddb_ast_nodes)["Node"]


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


_original_sanitize = botocore.useragent.sanitize_user_agent_string_component
_cached_sanitize = functools.lru_cache(maxsize=1024)(_original_sanitize)


# --------------------------------------------------------------------------
# Each speed-up: how it is installed, what it relies on beyond its pins.
# --------------------------------------------------------------------------


def _install_parsed(installer: Installer) -> None:
    installer.replace(
        execution_worker.ExecutionWorker, "_get_evaluation_entrypoint", _cached_entrypoint
    )


def _parsed_fits() -> list[str]:
    from moto.stepfunctions.parser.asl.component.common.retry import max_attempts_decl

    problems = []
    if "AmazonStateLanguageParser.parse" not in inspect.getsource(_original_entrypoint):
        problems.append("moto's execution worker no longer parses in _get_evaluation_entrypoint")
    if "heap_key" not in vars(eval_component.EvalComponent) or "env.heap" not in (
        inspect.getsource(max_attempts_decl)
    ):
        problems.append("components no longer keep per-execution values in env.heap")
    return problems


def _install_validation(installer: Installer) -> None:
    backend = sfn_parser_models.StepFunctionsParserBackend
    validate = backend._validate_definition
    installer.replace(
        backend, "_validate_definition", staticmethod(_remembering_validation(validate))
    )


def _validation_fits() -> list[str]:
    backend = sfn_parser_models.StepFunctionsParserBackend
    if not isinstance(vars(backend).get("_validate_definition"), staticmethod):
        return ["moto's StepFunctionsParserBackend._validate_definition is no staticmethod"]
    if "AmazonStateLanguageParser.parse(definition)" not in inspect.getsource(
        _original_validate_definition
    ):
        return ["moto's _validate_definition no longer decides by parsing the text"]
    return []


def _install_clients(installer: Installer) -> None:
    import sys

    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_factory,  # noqa: F401 - imports every integration module
    )

    for module in list(sys.modules.values()):
        if vars(module).get("boto_client_for") is _original_boto_client_for:
            installer.replace(module, "boto_client_for", _cached_boto_client_for)


def _clients_fit() -> list[str]:
    client_source = inspect.getsource(_original_boto_client_for)
    if "boto3.client(" not in client_source or "state_credentials." in client_source:
        return ["moto's boto_client_for changed (a client per call, credentials unused)"]
    return []


def _install_method_names(installer: Installer) -> None:
    installer.replace(moto_responses, "method_names_from_class", _cached_method_names)


def _method_names_fit() -> list[str]:
    if "method_names_from_class(self.__class__)" not in inspect.getsource(
        moto_responses.BaseResponse.call_action
    ):
        return ["BaseResponse.call_action no longer lists methods per request"]
    return []


def _url_sources() -> list[Any]:
    from moto.s3 import models as s3_models

    return [
        _original_urls,
        vars(s3_models.S3Backend)["_url_module"].fget,
        moto_settings.get_s3_custom_endpoints,
        moto_settings.enable_iso_regions,
    ]


def _install_urls(installer: Installer) -> None:
    installer.replace(base_backend.BaseBackend, "urls", property(_cached_urls))


def _urls_fit() -> list[str]:
    sources = [inspect.getsource(x) for x in _url_sources()[1:]]
    needs = ("reload(", *_URL_SETTINGS)
    if not isinstance(vars(base_backend.BaseBackend).get("urls"), property) or not all(
        needed in source for needed, source in zip(needs, sources, strict=True)
    ):
        return ["moto's URL tables no longer depend only on the backend and two settings"]
    return []


def _validator_copies() -> list[str]:
    if "deepcopy(expression)" not in inspect.getsource(ddb_validators.Validator.__init__):
        return ["moto's DynamoDB validator no longer works on a copy of the expression"]
    return []


def _install_condition_lexing(installer: Installer) -> None:
    installer.replace(_CONDITION_PARSER, "_lex_condition_expression", _cached_lex_condition)


def _install_validator_copy(installer: Installer) -> None:
    installer.replace(ddb_validators, "deepcopy", _validator_deepcopy)


def _validator_copy_fits() -> list[str]:
    problems = _validator_copies()
    if vars(ddb_validators).get("deepcopy") not in (copy.deepcopy, _validator_deepcopy):
        problems.append("moto's DynamoDB validators no longer copy with copy.deepcopy")
    return problems


def _install_json_copies(installer: Installer) -> None:
    for module in _JSON_COPY_MODULES:
        installer.replace(module, "copy", _JsonCopyModule())


def _json_copies_fit() -> list[str]:
    return [
        f"{module.__name__} no longer copies with copy.deepcopy"
        for module in _JSON_COPY_MODULES
        if not (
            vars(module).get("copy") is copy
            or isinstance(vars(module).get("copy"), _JsonCopyModule)
        )
        or "copy.deepcopy(" not in inspect.getsource(module)
    ]


def _install_signing(installer: Installer) -> None:
    installer.replace(botocore.signers.RequestSigner, "sign", _sign_unless_local)


def _signing_fits() -> list[str]:
    signer_init = inspect.getsource(botocore.signers.RequestSigner.__init__)
    if not all(f"self.{name} =" in signer_init for name in _SIGNER_ATTRIBUTES):
        return ["botocore's RequestSigner no longer keeps what the local signature uses"]
    return []


def _install_sanitiser(installer: Installer) -> None:
    installer.replace(botocore.useragent, "sanitize_user_agent_string_component", _cached_sanitize)


_ORIGINAL_LIST_OBJECT_VERSIONS = s3_models.S3Backend.list_object_versions


class _KeysOf:
    """A bucket's ``keys`` as list_object_versions reads them, with only some names."""

    def __init__(self, keys: Any, keep: Callable[[str], bool]) -> None:
        self._keys, self._keep = keys, keep

    def iterlists(self) -> Any:
        return ((name, versions) for name, versions in self._keys.iterlists() if self._keep(name))


class _BackendFor:
    """The S3 backend as list_object_versions uses it (get_bucket only), its bucket's
    keys narrowed."""

    def __init__(self, backend: Any, keep: Callable[[str], bool]) -> None:
        self._backend, self._keep = backend, keep

    def get_bucket(self, bucket_name: str) -> Any:
        bucket = self._backend.get_bucket(bucket_name)
        return types.SimpleNamespace(keys=_KeysOf(bucket.keys, self._keep))


def _prefixed_list_object_versions(
    self: Any,
    bucket_name: str,
    delimiter: str | None = None,
    key_marker: str | None = None,
    max_keys: int | None = 1000,
    prefix: str = "",
    version_id_marker: str | None = None,
) -> Any:
    """moto's list_object_versions over the keys it can return: those under the prefix
    (and the marker's key, where it resumes). moto deep-copies and sorts every version
    in the bucket on every call, then drops the keys outside the prefix; a batch of the
    audit lists 1000 keys of a 100,000-key bucket. A marker without a version id is
    left to moto as it is (it skips a version that depends on all keys)."""
    if not prefix or (key_marker is not None and not version_id_marker):
        return _ORIGINAL_LIST_OBJECT_VERSIONS(
            self, bucket_name, delimiter, key_marker, max_keys, prefix, version_id_marker
        )

    def keep(name: str) -> bool:
        return name.startswith(prefix) or name == key_marker

    return _ORIGINAL_LIST_OBJECT_VERSIONS(
        _BackendFor(self, keep),  # type: ignore[arg-type]
        bucket_name, delimiter, key_marker, max_keys, prefix, version_id_marker,
    )  # fmt: skip


def _install_prefixed_versions(installer: Installer) -> None:
    installer.replace(s3_models.S3Backend, "list_object_versions", _prefixed_list_object_versions)


def _prefixed_versions_fits() -> list[str]:
    body = inspect.getsource(_ORIGINAL_LIST_OBJECT_VERSIONS)
    used = set(re.findall(r"\bself\.(\w+)", body))
    problems = []
    if used != {"get_bucket"}:
        problems.append(f"moto's list_object_versions now uses self.{sorted(used)}")
    if set(re.findall(r"\bbucket\.(\w+)", body)) != {"keys"}:
        problems.append("moto's list_object_versions reads more of the bucket than its keys")
    return problems


def _speedup(
    name: str,
    why: str,
    test: str,
    install: Callable[[Installer], None],
    sources: Callable[[], list[Any]],
    sha256: str,
    fits: Callable[[], list[str]] | None = None,
) -> Patch:
    pin = Pin(name, sources, sha256)
    if fits is None:
        return Patch(name, "speedup", why, test, install, pins=(pin,))
    return Patch(name, "speedup", why, test, install, fits=fits, pins=(pin,))


_TESTS = "tests/unit/test_patches.py::"
PATCHES = (
    _speedup(
        "one parse per definition",
        "moto parsed the ASL with ANTLR for every execution (about 50 ms).",
        _TESTS + "test_one_parsed_program_serves_concurrent_executions_with_their_own_retries",
        _install_parsed,
        lambda: [_original_entrypoint, vars(eval_component.EvalComponent)["heap_key"].fget],
        "342e43cd45c316f356d3b3943261c583a6e1df26d9c2f20c9c7fb15f480fc51d",
        _parsed_fits,
    ),
    _speedup(
        "a definition validated once",
        "moto parsed every definition with ANTLR to validate it at each CreateStateMachine.",
        _TESTS + "test_a_definition_is_validated_once_and_a_refused_one_every_time",
        _install_validation,
        lambda: [_original_validate_definition],
        "a5921e3d3b46dcd341ec3a64e61af486cd2f843751a1890e07e9ea0f0008569b",
        _validation_fits,
    ),
    _speedup(
        "one client per service",
        "moto's task integrations built a boto3 client for every call.",
        _TESTS + "test_moto_integrations_share_one_client_per_service",
        _install_clients,
        lambda: [_original_boto_client_for],
        "1f44dc2ac8aa2179df62365a6e5ea377f1770ea828a0f107440a2554f1b4edb8",
        _clients_fit,
    ),
    _speedup(
        "response methods listed once",
        "moto listed a response class's methods with inspect.getmembers per request.",
        _TESTS + "test_moto_lists_a_response_class_once",
        _install_method_names,
        lambda: [moto_responses.BaseResponse.call_action, _original_method_names_from_class],
        "978da82a1b0736457971073d9e26af258cd927fd4d0a16689c723781076a7c3c",
        _method_names_fit,
    ),
    _speedup(
        "URL tables built once",
        "moto rebuilt a backend's URL table (and reloaded S3's urls module) per request.",
        _TESTS + "test_a_url_table_is_built_once_and_follows_the_settings",
        _install_urls,
        _url_sources,
        "c215c5ba4b2c67495d68fdf28e0883399f844257bed0c500355ca46ec7b329c6",
        _urls_fit,
    ),
    _speedup(
        "ConditionExpressions lexed once",
        "moto's DynamoDB lexed every ConditionExpression anew (some forty regex matches).",
        _TESTS + "test_condition_expressions_are_lexed_once_and_judged_as_moto_alone_judges_them",
        _install_condition_lexing,
        lambda: [_CONDITION_PARSER],
        _CONDITION_PARSER_SHA256,
    ),
    _speedup(
        "plain UpdateExpression trees copied directly",
        "moto's validator deep-copied the parsed UpdateExpression for every UpdateItem.",
        _TESTS
        + "test_the_validator_copies_a_plain_tree_as_deepcopy_does_and_anything_else_with_deepcopy",
        _install_validator_copy,
        lambda: [ddb_validators.Validator.__init__, _AST_NODE],
        "5dd4c7da2755c23564da082a7558b8a934be0ea3f388dd9109d9876d9505e1c0",
        _validator_copy_fits,
    ),
    _speedup(
        "JSON values copied directly",
        "moto's interpreter deep-copied every state's input, result and stack.",
        _TESTS + "test_the_interpreter_copies_json_values_as_deepcopy_does",
        _install_json_copies,
        lambda: [*_JSON_COPY_MODULES, program_state],
        "60597bf814f63d13c216798ca659929ddc625a51c11a518fc7f335ee4a466ab0",
        _json_copies_fit,
    ),
    _speedup(
        "local requests not signed",
        "botocore computed a SigV4 signature nobody checks for every local request.",
        _TESTS + "test_local_requests_carry_a_dummy_signature_and_the_rest_are_signed",
        _install_signing,
        lambda: [botocore.signers.RequestSigner.__init__, _original_sign],
        "8581c0ad983d4732dc340a5ee9873926e8051643a488c5bc224ad76cf6570791",
        _signing_fits,
    ),
    _speedup(
        "user agent sanitised once",
        "botocore re-sanitised every part of its User-Agent, character by character.",
        _TESTS + "test_the_user_agent_sanitiser_gives_what_botocore_gives",
        _install_sanitiser,
        lambda: [_original_sanitize],
        "4536076c32a939585f75f51f77b6b9c46489c54c04a384d14dce914947ad08e7",
    ),
    _speedup(
        "object versions listed under their prefix",
        "moto deep-copied and sorted every version in the bucket for each ListObjectVersions "
        "call, whatever its Prefix.",
        _TESTS + "test_versions_listed_under_a_prefix_are_what_moto_lists",
        _install_prefixed_versions,
        lambda: [_ORIGINAL_LIST_OBJECT_VERSIONS],
        "268a5f62e83a572464f0dd13c2048e20e8b1ef39ea09aae8be0248b286dc71b4",
        _prefixed_versions_fits,
    ),
)
