"""Speed-ups: moto (or botocore) doing the same thing faster (docs/local-engine.md, "The
engine's patches", "What each speed-up gains"); a fits check checks what no pin (a source's
text and decorators) covers."""

from __future__ import annotations

import collections
import copy
import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import botocore.signers
import botocore.useragent
from moto import settings as moto_settings
from moto.core import base_backend
from moto.core.models import botocore_stubber as moto_botocore_stubber
from moto.core.utils import camelcase_to_underscores as moto_camelcase_to_underscores
from moto.dynamodb import comparisons as ddb_comparisons
from moto.dynamodb.parsing import ast_nodes as ddb_ast_nodes
from moto.dynamodb.parsing import validators as ddb_validators
from moto.s3 import models as s3_models
from moto.sqs import models as sqs_models
from moto.stepfunctions.parser import models as sfn_parser_models
from moto.stepfunctions.parser.asl.component import component as asl_component
from moto.stepfunctions.parser.asl.component import eval_component
from moto.stepfunctions.parser.asl.component.common.retry import max_attempts_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_factory,  # noqa: F401 - imports every integration module
)
from moto.stepfunctions.parser.asl.utils import boto_client as moto_boto_client
from moto.stepfunctions.parser.backend import execution_worker

from onceflow.local.patches.registry import Installer, Patch, lacks

# One parse per definition. One program serves every execution of it, as moto shares one
# between a Map's iterations: an evaluation's values live in its Environment (a
# component's in env.heap under its heap_key), none in the components.
_original_entrypoint = execution_worker.ExecutionWorker._get_evaluation_entrypoint
_PARSED: dict[str, Any] = {}
_PARSED_LOCK = threading.Lock()


def _fix_heap_keys(program: Any) -> None:
    """Draw every component's heap_key now: moto draws it on first use without a
    lock, and two executions could keep different keys (losing a Retry's count)."""
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
        if definition not in _PARSED:
            _PARSED[definition] = _original_entrypoint(self)
            _fix_heap_keys(_PARSED[definition])
        return _PARSED[definition]


# A definition validated once (a third of an engine's start). The verdict depends on the
# text alone: an accepted one is not parsed again, a refused one is every time, by
# whichever validator is in place (the fidelity check of unique state names wraps moto's).
_original_validate_definition = sfn_parser_models.StepFunctionsParserBackend._validate_definition
_VALIDATED: set[str] = set()


def _remembering_validation(validate: Callable[..., Any]) -> Callable[[str], None]:
    def _validate_definition(definition: str) -> None:
        if definition not in _VALIDATED:
            validate(definition=definition)
            _VALIDATED.add(definition)  # set.add is atomic

    return _validate_definition


def _install_validation(installer: Installer) -> None:
    backend = sfn_parser_models.StepFunctionsParserBackend
    remembering = _remembering_validation(backend._validate_definition)
    installer.replace(backend, "_validate_definition", staticmethod(remembering))


# One client per service. Clients are thread-safe once built, under a lock (boto3's
# default session is not); moto picks the endpoint (stubber or server) as it builds one,
# and ignores state_credentials (the pin holds it to that).
_original_boto_client_for = moto_boto_client.boto_client_for
_CLIENTS: dict[tuple[str, str, bool], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _cached_boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
    key = (region, service, bool(moto_botocore_stubber.enabled))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = _original_boto_client_for(region, service)
        return _CLIENTS[key]


def _install_clients(installer: Installer) -> None:
    for module in list(sys.modules.values()):  # every integration module imports it
        if vars(module).get("boto_client_for") is _original_boto_client_for:
            installer.replace(module, "boto_client_for", _cached_boto_client_for)


# URL tables built once: a table depends on the backend's class and two settings only
# (the pins hold the settings to these variables).
_URL_SETTINGS = ("MOTO_S3_CUSTOM_ENDPOINTS", "MOTO_ENABLE_ISO_REGIONS")
_original_urls: Callable[[Any], dict[str, Any]] = vars(base_backend.BaseBackend)["urls"].fget
_URLS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _cached_urls(self: Any) -> dict[str, Any]:
    key = (type(self), *(os.environ.get(name) for name in _URL_SETTINGS))
    if key not in _URLS:
        _URLS[key] = _original_urls(self)
    return dict(_URLS[key])


# ConditionExpressions lexed once: tokens depend on the text alone and are read only
# (the pin covers the whole parser); each parse gets its own queue of them.
_CONDITION_PARSER: Any = ddb_comparisons.ConditionExpressionParser
_original_lex_condition = _CONDITION_PARSER._lex_condition_expression
_CONDITION_TOKENS: dict[str, tuple[Any, ...]] = {}
_CONDITION_TOKENS_KEPT = 4096
_CONDITION_TOKENS_LOCK = threading.Lock()


def _cached_lex_condition(self: Any) -> collections.deque[Any]:
    text = self.condition_expression
    tokens = _CONDITION_TOKENS.get(text)
    if tokens is None:
        tokens = tuple(_original_lex_condition(self))  # a text that does not lex raises here
        with _CONDITION_TOKENS_LOCK:
            if len(_CONDITION_TOKENS) < _CONDITION_TOKENS_KEPT:
                tokens = _CONDITION_TOKENS.setdefault(text, tokens)
    return collections.deque(tokens)  # the parse pops its queue empty


# Plain UpdateExpression trees copied directly: a tree of nodes holding only type,
# children and parent, leaves text or numbers, each node reached once from its parent,
# is rebuilt here; anything else goes to copy.deepcopy.
_AST_NODE_KEYS = frozenset({"type", "children", "parent"})
_AST_LEAVES, _LISTS = frozenset({str, int}), frozenset({list, type(None)})
_AST_NODE: Any = vars(ddb_ast_nodes)["Node"]


class _NotPlain(Exception):
    """The tree has something copy.deepcopy must handle."""


def _copy_plain_tree(root: Any) -> Any:
    seen: set[int] = set()

    def copy_node(node: Any, parent: Any) -> Any:
        state = vars(node)
        children = state.get("children")
        if state.keys() != _AST_NODE_KEYS or id(node) in seen or type(children) not in _LISTS:
            raise _NotPlain
        seen.add(id(node))
        new = object.__new__(type(node))
        copied: list[Any] | None = None if children is None else []
        new.__dict__.update(type=state["type"], children=copied, parent=parent)
        for child in children or ():
            if isinstance(child, _AST_NODE) and vars(child).get("parent") is node:
                copied.append(copy_node(child, new))  # type: ignore[union-attr]
            elif type(child) in _AST_LEAVES:
                copied.append(child)  # type: ignore[union-attr]
            else:
                raise _NotPlain
        return new

    return copy_node(root, None)


def _validator_deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    if memo is None and isinstance(value, _AST_NODE) and vars(value).get("parent", 0) is None:
        try:
            return _copy_plain_tree(value)
        except _NotPlain:
            pass  # copy.deepcopy copies whatever else the tree holds
    return copy.deepcopy(value, memo)


def _deepcopy_fits() -> list[str]:
    """The validators module's deepcopy is still copy.deepcopy (or ours): no pin covers it."""
    if vars(ddb_validators).get("deepcopy") in (copy.deepcopy, _validator_deepcopy):
        return []
    return [f"{ddb_validators.__name__}.deepcopy is not what the speed-up replaces"]


# Local requests not signed: moto reads only the access key. Such a request gets a
# header of the same form with a dummy signature; requests to AWS, presigned URLs, S3
# (whose signer frames the body) and under moto's IAM auth are signed as ever.
_original_sign = botocore.signers.RequestSigner.sign


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
    context = getattr(request, "context", None) or {}
    region = context.get("signing", {}).get("region") or self._region_name
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{time.strftime('%Y%m%d', time.gmtime())}/"
        f"{region}/{self._signing_name}/aws4_request, SignedHeaders=host, Signature={'0' * 64}"
    )
    return None


_original_sanitize = botocore.useragent.sanitize_user_agent_string_component
_cached_sanitize = functools.lru_cache(maxsize=1024)(_original_sanitize)

# Object versions listed under their prefix: moto is given only the keys under it (and
# the marker's, where it resumes), and from a marker with a version id only the keys from
# the marker's on (a paged listing of a bucket copied every version for every page); a
# marker without a version id stays moto's (what it skips depends on every key). moto's
# list_object_versions uses no more of its backend than self.get_bucket and bucket.keys
# (the pin holds it to that).
_ORIGINAL_LIST_OBJECT_VERSIONS = s3_models.S3Backend.list_object_versions


def _narrowed(backend: Any, keep: Callable[[str], bool]) -> Any:
    """The S3 backend as list_object_versions uses it (get_bucket), keys narrowed by keep."""

    def get_bucket(bucket_name: str) -> Any:
        keys = backend.get_bucket(bucket_name).keys
        only = SimpleNamespace(iterlists=lambda: ((n, v) for n, v in keys.iterlists() if keep(n)))
        return SimpleNamespace(keys=only)

    return SimpleNamespace(get_bucket=get_bucket)


def _prefixed_list_object_versions(
    self: Any,
    bucket_name: str,
    delimiter: str | None = None,
    key_marker: str | None = None,
    max_keys: int | None = 1000,
    prefix: str = "",
    version_id_marker: str | None = None,
) -> Any:
    backend = self
    under = bool(prefix) and (key_marker is None or bool(version_id_marker))
    # From a marker with a version id, moto skips every version before the marker's, and
    # the marker's name sorts after every name below it: those keys are never listed.
    after = key_marker is not None and bool(version_id_marker)
    if under or after:
        marker = key_marker or ""

        def keep(name: str) -> bool:
            if under and not (name.startswith(prefix) or name == key_marker):
                return False
            return not after or name >= marker

        backend = _narrowed(self, keep)
    return _ORIGINAL_LIST_OBJECT_VERSIONS(
        backend, bucket_name, delimiter, key_marker, max_keys, prefix, version_id_marker
    )


# A received message's retention read from its queue, once: moto asked GetQueueAttributes
# for MessageRetentionPeriod, which built every attribute of the queue three times, each
# counting its messages three ways (every message's visibility and delay read against a
# fresh clock): each message received cost nine walks of the queue, a drain of n messages
# n-squared. The attribute is the queue's field of that name (Queue.attributes reads each
# BASE_ATTRIBUTES name with getattr, a number as it is); anything else is moto's.
_ORIGINAL_RETENTION_CHECK = sqs_models.SQSBackend.is_message_valid_based_on_retention_period
_RETENTION_FIELD = moto_camelcase_to_underscores("MessageRetentionPeriod")


def _retention_read_once(self: Any, queue_name: str, message: Any) -> bool:
    retention_period = getattr(self.get_queue(queue_name), _RETENTION_FIELD, None)
    if type(retention_period) not in (int, float):
        return bool(_ORIGINAL_RETENTION_CHECK(self, queue_name, message))
    retain_until = retention_period + message.sent_timestamp / 1000
    return not retain_until <= vars(sqs_models)["unix_time"]()  # moto's clock, as it reads it


def _retention_fits() -> list[str]:
    """MessageRetentionPeriod is still a base attribute, read as the queue's field."""
    queue = sqs_models.Queue
    if "MessageRetentionPeriod" in queue.BASE_ATTRIBUTES:
        return []
    return [f"{queue.__qualname__}.BASE_ATTRIBUTES lacks MessageRetentionPeriod"]


def _speedup(
    name: str,
    why: str,
    test: str,
    install: Callable[[Installer], None] | tuple[Any, str, Any],
    pinned: Callable[[], list[Any]],
    sha256: str,
    fits: Callable[[], list[str]] = list,
) -> Patch:
    """A speed-up; install may be (owner, name, value): owner.name = value."""
    if isinstance(install, tuple):
        install = functools.partial(_replace, *install)
    test = "tests/unit/test_patches.py::" + test
    return Patch(name, "speedup", why, test, install, fits, pinned=pinned, sha256=sha256)


def _replace(owner: Any, name: str, value: Any, installer: Installer) -> None:
    installer.replace(owner, name, value)


PATCHES = (
    _speedup(
        "one parse per definition",
        "moto parsed the ASL with ANTLR for every execution (about 50 ms).",
        "test_one_parsed_program_serves_concurrent_executions_with_their_own_retries",
        (execution_worker.ExecutionWorker, "_get_evaluation_entrypoint", _cached_entrypoint),
        lambda: [_original_entrypoint, vars(eval_component.EvalComponent)["heap_key"].fget],
        "342e43cd45c316f356d3b3943261c583a6e1df26d9c2f20c9c7fb15f480fc51d",
        lambda: lacks(max_attempts_decl, "env.heap"),  # a Retry's count is the execution's
    ),
    _speedup(
        "a definition validated once",
        "moto parsed every definition with ANTLR to validate it at each CreateStateMachine.",
        "test_a_definition_is_validated_once_and_a_refused_one_every_time",
        _install_validation,
        lambda: [_original_validate_definition],
        "a5921e3d3b46dcd341ec3a64e61af486cd2f843751a1890e07e9ea0f0008569b",
    ),
    _speedup(
        "one client per service",
        "moto's task integrations built a boto3 client for every call.",
        "test_moto_integrations_share_one_client_per_service",
        _install_clients,
        lambda: [_original_boto_client_for],
        "1f44dc2ac8aa2179df62365a6e5ea377f1770ea828a0f107440a2554f1b4edb8",
    ),
    _speedup(
        "URL tables built once",
        "moto rebuilt a backend's URL table (and reloaded S3's urls module) per request.",
        "test_a_url_table_is_built_once_and_follows_the_settings",
        (base_backend.BaseBackend, "urls", property(_cached_urls)),
        lambda: [
            _original_urls,
            vars(s3_models.S3Backend)["_url_module"].fget,
            moto_settings.get_s3_custom_endpoints,
            moto_settings.enable_iso_regions,
        ],
        "c215c5ba4b2c67495d68fdf28e0883399f844257bed0c500355ca46ec7b329c6",
    ),
    _speedup(
        "ConditionExpressions lexed once",
        "moto's DynamoDB lexed every ConditionExpression anew (some forty regex matches).",
        "test_condition_expressions_are_lexed_once_and_judged_as_moto_alone_judges_them",
        (_CONDITION_PARSER, "_lex_condition_expression", _cached_lex_condition),
        lambda: [_CONDITION_PARSER],
        "ba0de03156fea746536d0ec3986b7509749b4145d2919c7db2b128c2f4eabdd7",
    ),
    _speedup(
        "plain UpdateExpression trees copied directly",
        "moto's validator deep-copied the parsed UpdateExpression for every UpdateItem.",
        "test_the_validator_copies_a_plain_tree_as_deepcopy_does_and_anything_else_with_deepcopy",
        (ddb_validators, "deepcopy", _validator_deepcopy),
        lambda: [ddb_validators.Validator.__init__, _AST_NODE],
        "5dd4c7da2755c23564da082a7558b8a934be0ea3f388dd9109d9876d9505e1c0",
        _deepcopy_fits,
    ),
    _speedup(
        "local requests not signed",
        "botocore computed a SigV4 signature nobody checks for every local request.",
        "test_local_requests_carry_a_dummy_signature_and_the_rest_are_signed",
        (botocore.signers.RequestSigner, "sign", _sign_unless_local),
        lambda: [botocore.signers.RequestSigner.__init__, _original_sign],  # the fields it reads
        "8581c0ad983d4732dc340a5ee9873926e8051643a488c5bc224ad76cf6570791",
    ),
    _speedup(
        "user agent sanitised once",
        "botocore re-sanitised every part of its User-Agent, character by character.",
        "test_the_user_agent_sanitiser_gives_what_botocore_gives",
        (botocore.useragent, "sanitize_user_agent_string_component", _cached_sanitize),
        lambda: [_original_sanitize],
        "4536076c32a939585f75f51f77b6b9c46489c54c04a384d14dce914947ad08e7",
    ),
    _speedup(
        "object versions listed under their prefix",
        "moto deep-copied and sorted every version in the bucket for each ListObjectVersions "
        "call, whatever its Prefix and wherever its page began.",
        "test_versions_listed_under_a_prefix_are_what_moto_lists",
        (s3_models.S3Backend, "list_object_versions", _prefixed_list_object_versions),
        lambda: [_ORIGINAL_LIST_OBJECT_VERSIONS],
        "268a5f62e83a572464f0dd13c2048e20e8b1ef39ea09aae8be0248b286dc71b4",
    ),
    _speedup(
        "a received message's retention read once",
        "moto built every attribute of the queue three times for each message it received "
        "(each walking every message): a drain of n messages took n-squared walks.",
        "test_a_received_messages_retention_is_judged_as_moto_judges_it",
        (
            sqs_models.SQSBackend,
            "is_message_valid_based_on_retention_period",
            _retention_read_once,
        ),
        lambda: [
            _ORIGINAL_RETENTION_CHECK,
            sqs_models.SQSBackend.get_queue_attributes,
            vars(sqs_models.Queue)["attributes"].fget,
        ],
        "2039bb1bceee1a5686bc3a2e1a4304a68bb2b811423b67b6588af051439bd5a1",
        _retention_fits,
    ),
)
