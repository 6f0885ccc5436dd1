"""IAM on the local engine: each call a function or a state machine makes is checked
against the policies template.yaml gives its role, and refused as AWS refuses it (moto
checks nothing of the kind). docs/local-engine.md ("IAM is enforced") says how.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Final, NamedTuple
from urllib.parse import unquote, urlsplit
from xml.sax.saxutils import escape

from botocore.client import BaseClient
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import (
    distributed_iteration_component,
)

from onceflow.local.lambdas import InProcessRuntime
from onceflow.local.patches import hooks
from onceflow.local.patches.fidelity import distributed_map
from onceflow.local.patches.registry import Installer, Patch, emits, takes
from onceflow.local.template import Stack, TemplateError

Response = tuple[int, dict[str, str], Any]
Handler = Callable[[Any, Any], Any]


class Decision(Enum):
    ALLOWED = "allowed"
    IMPLICIT_DENY = "implicit deny"  # no statement allows it
    EXPLICIT_DENY = "explicit deny"  # a Deny statement matches: nothing can allow it


# ---- policy evaluation ---------------------------------------------------------
#
# IAM's own rules ("Policy evaluation logic", within one account), not moto's evaluator
# (moto.iam.access_control), which reads wildcards, case, NotResource and Condition
# otherwise: tests/unit/test_iam.py::test_motos_own_evaluator_reads_the_policy_language_...


@functools.lru_cache(maxsize=4096)
def _pattern(text: str, case_sensitive: bool) -> re.Pattern[str]:
    # IAM wildcards: "*" any run of characters, "?" exactly one; all else literal.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile(regex, re.DOTALL if case_sensitive else re.DOTALL | re.IGNORECASE)


def _insecure(condition: Mapping[str, Any]) -> bool:
    """Whether a Condition holds only for a request over plain HTTP."""
    secure = {k.lower(): v for k, v in (condition.get("Bool") or {}).items()}
    values = secure.get("aws:securetransport")
    return values is not None and "true" not in str(values).lower()


def statement_matches(statement: Mapping[str, Any], action: str, resource: str) -> bool:
    """Whether one identity-policy statement applies to (action, resource): its Action
    (or NotAction) and Resource (or NotResource) cover them; it must name both.

    Its Condition's keys describe the request's context, which the engine does not
    model but for aws:SecureTransport (every call is over TLS): an Allow with one never
    applies, a Deny with one does unless it needs insecure transport (harsher than AWS
    either way, never kinder; this template's roles have none).
    """
    condition = statement.get("Condition")
    if condition is not None and (statement.get("Effect") != "Deny" or _insecure(condition)):
        return False
    for key, value in (("Action", action), ("Resource", resource)):
        name = key if key in statement else f"Not{key}"
        if name not in statement:
            return False
        patterns = statement[name] if isinstance(statement[name], list) else [statement[name]]
        found = any(_pattern(str(p), key == "Resource").fullmatch(value) for p in patterns)
        if found is not (name == key):
            return False
    return True


def evaluate(statements: Iterable[Mapping[str, Any]], action: str, resource: str) -> Decision:
    """IAM's decision for one identity's statements: explicit Deny, then Allow, else deny."""
    effects = {s.get("Effect") for s in statements if statement_matches(s, action, resource)}
    if "Deny" in effects:
        return Decision.EXPLICIT_DENY
    return Decision.ALLOWED if "Allow" in effects else Decision.IMPLICIT_DENY


# ---- identities ----------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """The role a function or a state machine runs as, with its resolved statements."""

    logical_id: str
    kind: str  # "function" or "state machine"
    role_name: str
    session: str
    account_id: str
    statements: tuple[Mapping[str, Any], ...]

    @property
    def caller_arn(self) -> str:
        """The assumed-role ARN AWS names in an AccessDenied message."""
        return f"arn:aws:sts::{self.account_id}:assumed-role/{self.role_name}/{self.session}"


IDENTITY: ContextVar[Principal | None] = ContextVar("onceflow_iam_identity", default=None)


def acting_as(principal: Principal | None) -> AbstractContextManager[None]:
    """Make the calls of this thread (and its context) as principal."""
    return hooks.setting(IDENTITY, principal)


# Which IAM action each operation needs (Service Authorization Reference), and the AWS
# managed policies SAM attaches to every function role: data, apart from the evaluator.
DATA: Final = json.loads((Path(__file__).parent / "iam_actions.json").read_text())


def _document_statements(document: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(document, Mapping) or "Statement" not in document:
        raise TemplateError(f"{where}: not a policy document")
    statements = document["Statement"]
    statements = statements if isinstance(statements, list) else [statements]
    for statement in statements:
        if not isinstance(statement, Mapping) or statement.get("Effect") not in ("Allow", "Deny"):
            raise TemplateError(f"{where}: a statement without Effect Allow or Deny: {statement}")
    return [dict(s) for s in statements]


def _sam_policies(stack: Stack, policies: Any, where: str) -> list[dict[str, Any]]:
    """The statements of a resolved SAM ``Policies`` value: inline documents, and SAM's
    policy templates expanded by SAM's own PolicyTemplatesProcessor, never from a copy
    (docs/local-engine.md, "IAM is enforced"). Managed policies are refused."""
    statements: list[dict[str, Any]] = []
    for item in policies if isinstance(policies, list) else [policies]:
        if isinstance(item, Mapping) and "Statement" in item:
            statements += _document_statements(item, where)
            continue
        if not isinstance(item, Mapping) or len(item) != 1:
            raise TemplateError(
                f"{where}: policy {item!r} is a managed policy; the local engine enforces "
                "inline policy documents and SAM policy templates only"
            )
        [(name, values)] = item.items()
        # Imported here: only a template that uses one pays for loading SAM's translator.
        from samtranslator.policy_template_processor import exceptions
        from samtranslator.policy_template_processor.processor import PolicyTemplatesProcessor

        processor = PolicyTemplatesProcessor(
            PolicyTemplatesProcessor.get_default_policy_templates_json()
        )
        if not processor.has(name):
            raise TemplateError(
                f"{where}: {name} is not one of SAM's policy templates (aws-sam-translator's "
                "policy_templates.json); check its spelling, or write the statements inline"
            )
        refused = (exceptions.InsufficientParameterValues, exceptions.InvalidParameterValues)
        try:
            document = processor.convert(name, values if values is not None else {})
        except (*refused, ValueError) as exc:
            raise TemplateError(f"{where}: policy template {name}: {exc}") from exc
        # The expansion holds Fn::Sub over AWS::Partition, AWS::Region and the like.
        statements += _document_statements(stack.resolve(document), f"{where} ({name})")
    return statements


def _role_statements(stack: Stack, logical_id: str, raw_role: Any) -> list[dict[str, Any]]:
    """The statements of an AWS::IAM::Role of the template named by a ``Role`` property."""
    target = raw_role.get("Fn::GetAtt") if isinstance(raw_role, Mapping) else None
    role_id = (target if isinstance(target, list) else str(target).split("."))[0]
    role = stack.template["Resources"].get(role_id, {}) if target else {}
    if role.get("Type") != "AWS::IAM::Role":
        raise TemplateError(
            f"{logical_id}: Role must be !GetAtt of an AWS::IAM::Role in the template "
            "for the local engine to know its policies"
        )
    props = role.get("Properties", {})
    if props.get("ManagedPolicyArns") or props.get("PermissionsBoundary"):
        raise TemplateError(f"{role_id}: managed policies are not enforced by the local engine")
    statements: list[dict[str, Any]] = []
    for policy in stack.resolve(props.get("Policies", [])):
        statements += _document_statements(policy.get("PolicyDocument"), role_id)
    return statements + _attached_statements(stack, role_id)


def _attached_statements(stack: Stack, role_id: str) -> list[dict[str, Any]]:
    """The statements of each AWS::IAM::Policy of the template whose Roles name role_id (a
    SAM resource's role is <LogicalId>Role: SAM developer guide, generated resources)."""
    statements: list[dict[str, Any]] = []
    for policy_id, resource in stack.template["Resources"].items():
        if resource.get("Type") != "AWS::IAM::Policy" or not stack.resource_enabled(policy_id):
            continue
        props = resource.get("Properties", {})
        if {"Ref": role_id} in props.get("Roles", []):
            statements += _document_statements(stack.resolve(props["PolicyDocument"]), policy_id)
    return statements


# ---- calls -> IAM actions -------------------------------------------------------


class Check(NamedTuple):
    """One action on one resource that a call needs allowed."""

    action: str
    resource: str


@dataclass(frozen=True)
class Call:
    """An AWS call as IAM sees it."""

    service: str  # the IAM service prefix: dynamodb, sqs, states, lambda, events, s3 ...
    checks: tuple[Check, ...]
    # S3 object reads: the bucket whose s3:ListBucket decides 404 or 403 for a missing key.
    missing_key_bucket: str | None = None
    head: bool = False
    unmapped: str | None = None  # why no action could be named


_QUEUE_HOST = re.compile(r"^[a-z0-9-]+\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?::\d+)?$")


def describe_call(model: Any, params: Mapping[str, Any], region: str, account_id: str) -> Call:
    """The IAM actions and resources a call (botocore's operation model, and the call's
    parameters) needs: the action is the operation's name unless iam_actions.json
    renames it, the resource the one its parameters name (an ARN), else "*"."""
    service, operation = model.service_model.signing_name, model.name
    head = model.http["method"] == "HEAD"
    action = DATA["renamed"].get(service, {}).get(operation, operation)
    if operation not in DATA["operations"].get(service, []) and action == operation:
        return Call(service, (), head=head, unmapped=f"{service} {operation}")
    if service == "s3":
        return _s3_call(action, params, head)
    return Call(service, tuple(_checks(f"{service}:{action}", params, region, account_id)))


def _arn(name: Any, prefix: str) -> str:
    return str(name) if str(name).startswith("arn:") else f"{prefix}{name}"


def _checks(action: str, params: Mapping[str, Any], region: str, account_id: str) -> list[Check]:
    """action on what the call's parameters name (ARNs); on "*" when they name nothing."""
    service = action.split(":")[0]
    arn = f"arn:aws:{service}:{region}:{account_id}:"
    if "TableName" in params:  # IAM authorises a query or a scan of an index on the index
        index = f"/index/{params['IndexName']}" if params.get("IndexName") else ""
        return [Check(action, _arn(params["TableName"], f"{arn}table/") + index)]
    if "RequestItems" in params:  # BatchGetItem, BatchWriteItem: each table
        return [Check(action, _arn(table, f"{arn}table/")) for table in params["RequestItems"]]
    if "TransactItems" in params:  # each entry needs its own action on its table: PutItem,
        # UpdateItem, DeleteItem, GetItem or ConditionCheckItem
        return [
            Check(f"dynamodb:{kind}Item", _arn(spec.get("TableName"), f"{arn}table/"))
            for item in params["TransactItems"]
            for kind, spec in item.items()
        ]
    if "QueueName" in params:  # GetQueueUrl, CreateQueue
        owner = params.get("QueueOwnerAWSAccountId") or account_id
        return [Check(action, f"arn:aws:sqs:{region}:{owner}:{params['QueueName']}")]
    if "QueueUrl" in params:
        url = urlsplit(str(params["QueueUrl"]))
        path = [p for p in url.path.split("/") if p]
        if (host := _QUEUE_HOST.match(url.netloc.lower())) is not None:
            region = host.group("region")
        owner, name = path[-2:] if len(path) > 1 else (account_id, path[-1] if path else url)
        return [Check(action, f"arn:aws:sqs:{region}:{owner}:{name}")]
    if "FunctionName" in params:
        # a name, a partial ARN (ACCOUNT:function:NAME) or an ARN, each with an optional
        # :QUALIFIER, or a Qualifier parameter (Lambda API reference, Invoke)
        name = str(params["FunctionName"])
        if ":function:" in name and not name.startswith("arn:"):
            name = f"arn:aws:lambda:{region}:{name}"
        function = _arn(name, f"{arn}function:")
        qualified = params.get("Qualifier") and function.count(":") == 6
        return [Check(action, f"{function}:{params['Qualifier']}" if qualified else function)]
    if action == "sqs:ListQueues":  # the account's queues, granted by ...:ACCOUNT:* or *
        # (SQS Developer Guide, "Amazon SQS API permissions"; the exact ARN is not verified)
        return [Check(action, arn)]
    if "Entries" in params:  # PutEvents: each event bus
        buses = {str(e.get("EventBusName") or "default") for e in params["Entries"]}
        return [Check(action, _arn(name, f"{arn}event-bus/")) for name in sorted(buses)]
    keys = ("stateMachineArn", "executionArn", "ResourceArn")
    return [Check(action, next((str(params[key]) for key in keys if key in params), "*"))]


def _s3_call(action: str, params: Mapping[str, Any], head: bool) -> Call:
    bucket = params["Bucket"]
    if action == "DeleteObjects":  # each key, as DeleteObject (or its Version form) would
        # (an empty VersionId names no version: moto writes a delete marker for it)
        deletes = [
            {"Bucket": bucket, **entry, "VersionId": entry.get("VersionId") or None}
            for entry in params["Delete"]["Objects"]
        ]
        calls = [_s3_call("DeleteObject", entry, head) for entry in deletes]
        return Call("s3", tuple(check for call in calls for check in call.checks))
    if "Key" not in params:
        return Call("s3", (Check(f"s3:{action}", f"arn:aws:s3:::{bucket}"),), head=head)
    if params.get("VersionId") is not None and action in DATA["s3_versioned"]:
        action = action.replace("Object", "ObjectVersion", 1)
    checks = [Check(f"s3:{action}", f"arn:aws:s3:::{bucket}/{params['Key']}")]
    if source := params.get("CopySource"):  # CopyObject, UploadPartCopy: the source is read too
        # botocore has quoted it (bucket/key?versionId=...) before the call is checked
        # (a "?" in the key is quoted: only botocore's own ?versionId= is a query)
        source_path, _, source_query = source.lstrip("/").partition("?")
        read = "GetObjectVersion" if "versionId=" in source_query else "GetObject"
        checks.append(Check(f"s3:{read}", f"arn:aws:s3:::{unquote(source_path)}"))
    if action == "PutObject":  # PutObject, CopyObject, CreateMultipartUpload ...
        # an option that tags, sets an ACL or locks the new object needs its own action too
        # (Service Authorization Reference, Amazon S3: PutObject's and CopyObject's
        # dependent actions; which parameter brings in which is not verified)
        options = DATA["s3_put_options"].items()
        needed = [needs for needs, names in options if any(name in params for name in names)]
        checks += [Check(f"s3:{needs}", checks[0].resource) for needs in needed]
    if action.endswith("Attributes"):  # S3 API reference, GetObjectAttributes: Permissions
        read = action.removesuffix("Attributes")  # GetObject or GetObjectVersion as well
        checks.append(Check(f"s3:{read}", checks[0].resource))
    reads = action.removesuffix("Attributes") in ("GetObject", "GetObjectVersion")
    return Call("s3", tuple(checks), missing_key_bucket=bucket if reads else None, head=head)


# ---- AccessDenied as each service answers it -------------------------------------


def denied_response(call: Call, message: str) -> Response:
    """The service's own AccessDenied error response, in its protocol."""
    request_id = str(uuid.uuid4())
    if call.service == "s3":  # a HEAD answer has no body: the SDK sees 403 Forbidden
        xml = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
        xml += f"<Message>{escape(message)}</Message><RequestId>{request_id}</RequestId>"
        body = "" if call.head else f"{xml}</Error>"
        # with the Extended Request ID every S3 answer carries (S3 API reference, Common
        # Response Headers)
        host_id = base64.b64encode(os.urandom(48)).decode()
        headers = {"x-amz-request-id": request_id, "x-amz-id-2": host_id}
        return 403, {**headers, "Content-Type": "application/xml"}, body
    headers = {"x-amzn-RequestId": request_id, "x-amzn-ErrorType": "AccessDeniedException"}
    if call.service == "lambda":
        headers["Content-Type"] = "application/json"
        return 403, headers, json.dumps({"Type": "User", "Message": message})
    headers["Content-Type"] = "application/x-amz-json-1.0"
    status = 400  # DynamoDB, Step Functions and EventBridge answer AccessDeniedException with 400
    if call.service == "sqs":
        # SQS's JSON protocol keeps its query-protocol code in this header (SQS developer
        # guide, "Interpreting Amazon SQS JSON API responses"): AccessDenied, 403.
        headers["x-amzn-query-error"] = "AccessDenied;Sender"
        status = 403
    error = {"__type": "com.amazon.coral.service#AccessDeniedException", "message": message}
    return status, headers, json.dumps(error)


def check_request(principal: Principal, call: Call) -> Response | None:
    """The service's AccessDenied if principal may not make call; None if it may. The
    message is the one AWS gives a denied identity-based request (not verified word for
    word)."""
    user = f"User: {principal.caller_arn}"
    if call.unmapped is not None:
        # Refused rather than let through: an action no policy was checked for is
        # exactly what would fail deployed. Name it in iam_actions.json to let it in.
        return denied_response(call, (
            f"{user} made a request ({call.unmapped}) the local engine cannot map to an "
            "IAM action; onceflow/local/iam_actions.json must learn it first"
        ))  # fmt: skip
    for action, resource in call.checks:
        decision = evaluate(principal.statements, action, resource)
        if decision is not Decision.ALLOWED:
            why = (
                "with an explicit deny in an identity-based policy"
                if decision is Decision.EXPLICIT_DENY
                else f"because no identity-based policy allows the {action} action"
            )
            message = f"{user} is not authorized to perform: {action} on resource: {resource}"
            return denied_response(call, f"{message} {why}")
    return None


# ---- installation ----------------------------------------------------------------

_CONTROLS: list[AccessControl] = []
_CONTROLS_LOCK = threading.Lock()
_PARAMS, _CALL = "onceflow_iam_params", "onceflow_iam_call"  # in a call's request context


def _noted(params: Any, context: Any, **_: Any) -> None:
    """before-parameter-build: the call's parameters, read once botocore has built them."""
    context[_PARAMS] = params


def _refused(model: Any, params: Any, context: Any, **_: Any) -> Any:
    """before-call: a call made with an identity is checked before botocore sends it; a
    denied one is answered there, in the service's place, and never sent. A call to an
    endpoint that is not AWS's is not checked."""
    principal = IDENTITY.get()
    if principal is None or not (urlsplit(params["url"]).hostname or "").endswith(".amazonaws.com"):
        return None  # the engine, a test, the CLI: the operator's credentials
    region = str(context.get("client_region"))
    call = context[_CALL] = describe_call(model, context[_PARAMS], region, principal.account_id)
    refused = check_request(principal, call)
    return None if refused is None else hooks.answered(model, params["url"], refused)


def _hidden(http_response: Any, parsed: Any, model: Any, context: Any, **_: Any) -> None:
    """after-call.s3: S3 tells a caller an object is missing (404) only if it may list the
    bucket; to any other it answers 403 AccessDenied (S3 API reference, GetObject and
    HeadObject, "Permissions"). For a missing version the same rule is applied (not
    verified)."""
    principal, call = IDENTITY.get(), context.get(_CALL)
    if principal is None or call is None or call.missing_key_bucket is None:
        return
    missing = call.head or parsed.get("Error", {}).get("Code") in ("NoSuchKey", "NoSuchVersion")
    listing = Check("s3:ListBucket", f"arn:aws:s3:::{call.missing_key_bucket}")
    if http_response.status_code != 404 or not missing:
        return
    if evaluate(principal.statements, *listing) is not Decision.ALLOWED:
        denied = denied_response(call, "Access Denied")
        http, parsed_again = hooks.answered(model, http_response.url, denied)
        http_response.status_code = http.status_code
        parsed.clear()
        parsed.update(parsed_again)


@contextmanager
def _as_its_machine(env: Any) -> Iterator[None]:
    """A state's work as its machine's role (hooks.Stages.machine_role): a task's work
    runs on a thread of its own, and Map and Parallel branches on theirs, so the
    identity is set where the work happens rather than where the execution started."""
    arn = str(env.states.context_object.context_object_data["StateMachine"]["Id"])
    principals = (c.principal_of(arn) for c in reversed(_CONTROLS))
    with acting_as(next(filter(None, principals), None)):
        yield


def _starting_children(original: Callable[..., None]) -> Callable[..., None]:
    """A Distributed Map starts its children as executions of its own state machine: its
    role needs states:StartExecution on it ("IAM policies for using Distributed Map
    states"). Denied, the Map Run fails before any child (AWS's error: not verified)."""

    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        principal = IDENTITY.get()
        machine = str(env.states.context_object.context_object_data["StateMachine"]["Id"])
        start = ("states:StartExecution", machine)
        if principal is not None and evaluate(principal.statements, *start) is not Decision.ALLOWED:
            cause = f"User: {principal.caller_arn} is not authorized to perform: {start[0]} "
            raise distributed_map.map_run_failure(env, "StatesRuntime", cause + f"on {machine}")
        original(component, env, eval_input)

    return _map_run


def _install(installer: Installer) -> None:
    component = distributed_iteration_component.DistributedIterationComponent
    installer.replace(component, "_map_run", _starting_children(component._map_run))
    installer.register("before-parameter-build", _noted)
    installer.register("before-call", _refused)
    installer.register("after-call.s3", _hidden)
    installer.replace(hooks.Stages, "machine_role", staticmethod(_as_its_machine))


def _fits() -> list[str]:
    from moto.stepfunctions.parser.asl.eval import states

    moved = [
        *emits(getattr(BaseClient, "_emit_api_params"), "before-parameter-build"),  # noqa: B009
        *emits(getattr(BaseClient, "_make_api_call"), "before-call", "after-call"),  # noqa: B009
    ]
    if "StateMachine" not in states.ContextObjectData.__annotations__:
        moved.append("moto's context object no longer names its StateMachine")
    component = distributed_iteration_component.DistributedIterationComponent
    return [*moved, *takes(component._map_run, "self", "env", "eval_input")]


PATCHES = (
    Patch(
        name="IAM",
        kind="iam",
        why="A function's calls are checked against its role and a state machine's task "
        "integrations, Distributed Map reads and writes and the start of a Distributed Map's "
        "children (states:StartExecution on the machine) against the machine's role, as SAM "
        "builds them from the template, with any AWS::IAM::Policy attached to the role; a "
        "denied request gets the service's AccessDenied (Service Authorization Reference).",
        test="tests/unit/test_iam.py",
        install=_install,
        fits=_fits,
    ),
)


@dataclass
class AccessControl:
    """The template's roles, enforced while an engine runs."""

    stack: Stack
    # Stacks whose functions and state machines run in the same engine, each as its own
    # role too: the parent template's, around a nested onceflow (Stack.nested_application).
    hosts: tuple[Stack, ...] = ()
    principals: dict[str, Principal] = field(default_factory=dict)  # by logical id
    # A service's role of the template (a rule's target, a pipe), its statements by ARN.
    roles: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    _logical: dict[str, str] = field(default_factory=dict)  # function name or machine ARN
    _runtime: Any = None

    def start(self, runtime: InProcessRuntime) -> None:
        """Resolve every role (the resources exist by now) and enforce them. Each handler
        runs as its function's role: runtime.load() hands it out wrapped, so the identity
        is set on whichever thread calls it (a thread of its own, to time it out)."""
        if self._runtime is not None:
            return
        kinds = ("AWS::Serverless::Function", "AWS::Serverless::StateMachine")
        for stack in (self.stack, *self.hosts):
            for logical_id, resource in stack.template["Resources"].items():
                if resource["Type"] not in kinds or not stack.resource_enabled(logical_id):
                    continue
                if logical_id in self.principals:
                    raise TemplateError(
                        f"{logical_id} names a resource of two stacks; the local engine "
                        "keys their roles by logical id"
                    )
                self._logical[stack.refs[logical_id]] = logical_id
                self.principals[logical_id] = self._principal(stack, logical_id, resource)
            for role_id, resource in stack.template["Resources"].items():
                props = resource.get("Properties", {})
                made = role_id in stack.refs  # by the engine (a bare Stack makes none)
                if resource["Type"] != "AWS::IAM::Role" or not made:
                    continue
                if not stack.resource_enabled(role_id):
                    continue
                if props.get("ManagedPolicyArns") or props.get("PermissionsBoundary"):
                    continue  # not evaluated (docs/local-engine.md, "IAM is enforced")
                role = {"Fn::GetAtt": [role_id, "Arn"]}
                statements = _role_statements(stack, role_id, role)
                self.roles[str(stack.resolve(role))] = tuple(statements)
        load = runtime.load
        runtime.load = lambda spec: self.as_function(spec.name, load(spec))  # type: ignore[method-assign]
        self._runtime = runtime
        with _CONTROLS_LOCK:  # the patches are in place (patches.install(), PATCHES above)
            _CONTROLS.append(self)

    def stop(self) -> None:
        if self._runtime is None:
            return
        vars(self._runtime).pop("load", None)
        self._runtime = None
        with _CONTROLS_LOCK:
            _CONTROLS.remove(self)

    def refusal(self, role_arn: Any, action: str, resource: str) -> ClientError | None:
        """The AccessDenied a service acting as the template's role role_arn (a rule's
        target, a pipe) meets for action on resource; None if it may (or the role is not
        one the engine evaluates). AWS's words: not verified."""
        statements = self.roles.get(str(role_arn))
        if statements is None or evaluate(statements, action, resource) is Decision.ALLOWED:
            return None
        message = f"User: {role_arn} is not authorized to perform: {action} on resource: {resource}"
        return ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": message}}, action.split(":")[1]
        )

    def principal_of(self, physical: str) -> Principal | None:
        """The role of the function named physical, or of the state machine of that ARN."""
        return self.principals.get(self._logical.get(physical, ""))

    def as_function(self, name: str, handler: Handler) -> Handler:
        """handler, run as the role of the function named name."""

        @functools.wraps(handler)
        def run_as_role(event: Any, context: Any) -> Any:
            # Looked up per call, so that override() applies to a handler already handed out.
            with acting_as(self.principal_of(name)):
                return handler(event, context)

        return run_as_role

    def _principal(self, stack: Stack, logical_id: str, resource: Mapping[str, Any]) -> Principal:
        raw = resource.get("Properties", {})
        function = resource["Type"] == "AWS::Serverless::Function"
        if "Role" in raw:
            statements = _role_statements(stack, logical_id, raw["Role"])
        elif function:  # SAM's basic execution policy, X-Ray's with Tracing, then Policies
            props = stack.function_properties(logical_id)
            statements = [copy.deepcopy(DATA["lambda_basic_execution"])]
            if props.get("Tracing") == "Active":
                statements.append(copy.deepcopy(DATA["xray_write_only"]))
            statements += _sam_policies(stack, props.get("Policies", []), logical_id)
        else:
            statements = _sam_policies(stack, stack.resolve(raw.get("Policies", [])), logical_id)
        if "Role" not in raw:  # a policy of its own attached to the role SAM makes
            statements += _attached_statements(stack, f"{logical_id}Role")
        return Principal(
            logical_id=logical_id,
            kind="function" if function else "state machine",
            role_name=f"{stack.stack_name}-{logical_id}Role"[:64],
            session=stack.refs[logical_id] if function else uuid.uuid4().hex[:32],
            account_id=stack.account_id,
            statements=tuple(statements),
        )

    def statements(self, logical_id: str) -> list[dict[str, Any]]:
        """A copy of the resolved statements the role of logical_id has now."""
        return [copy.deepcopy(dict(s)) for s in self.principals[logical_id].statements]

    @contextmanager
    def override(self, logical_id: str, statements: list[dict[str, Any]]) -> Iterator[None]:
        """Give the role of logical_id other statements for a while (tests of a missing grant)."""
        before = self.principals[logical_id]
        self.principals[logical_id] = replace(before, statements=tuple(copy.deepcopy(statements)))
        try:
            yield
        finally:
            self.principals[logical_id] = before
