"""IAM on the local engine: each call a function or a state machine makes is checked
against the policies template.yaml gives its role, and refused as AWS refuses it.

On AWS a function runs as its execution role and a state machine's task
integrations as the state machine's role; SAM builds each role from the
resource's ``Policies``. moto checks nothing of the kind, so an app that lacks a
grant runs green locally and fails deployed. Here every request that reaches
moto while an identity is set is mapped to the IAM action(s) and resource ARN(s)
AWS authorises it against (the Service Authorization Reference) and evaluated
against that identity's statements: an explicit Deny wins, then an Allow, else
the request is implicitly denied. A denied request never reaches moto; the
caller gets the service's own AccessDenied response.

Who is calling is a context variable: set around each in-process handler call
(to the function's role) and around each task state's work (to the state
machine's role). Calls without one (the engine itself, tests, the CLI) stand for
the operator's admin credentials and are not checked.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import threading
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from botocore.client import BaseClient

from onceflow.local.lambdas import InProcessRuntime
from onceflow.local.patches import hooks
from onceflow.local.patches.registry import Installer, Patch, emits
from onceflow.local.template import Stack, TemplateError

Response = tuple[int, dict[str, str], Any]
Handler = Callable[[Any, Any], Any]


class Decision(Enum):
    ALLOWED = "allowed"
    IMPLICIT_DENY = "implicit deny"  # no statement allows it
    EXPLICIT_DENY = "explicit deny"  # a Deny statement matches: nothing can allow it


# ---- policy evaluation ---------------------------------------------------------
#
# moto ships an evaluator (moto.iam.access_control.IAMPolicyStatement), but it
# reads the policy language differently from IAM in ways this app would hit:
# an Allow statement whose Condition does not hold counts as a Deny, "." and
# "?" in a pattern are regular-expression syntax (so "table/x.y" matched
# "table/xzy", and "?" is not IAM's one-character wildcard), actions compare
# case-sensitively where IAM ignores their case, and a NotResource statement
# matches every resource. The rules IAM documents (policy evaluation logic,
# "Determining whether a request is allowed or denied within an account") are
# short enough to follow here exactly.


@functools.lru_cache(maxsize=4096)
def _pattern(text: str, case_sensitive: bool) -> re.Pattern[str]:
    # IAM wildcards: "*" any run of characters, "?" exactly one; all else literal.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile(regex, re.DOTALL if case_sensitive else re.DOTALL | re.IGNORECASE)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _any_match(patterns: Any, value: str, *, case_sensitive: bool) -> bool:
    return any(_pattern(p, case_sensitive).fullmatch(value) for p in _as_list(patterns))


def statement_matches(statement: Mapping[str, Any], action: str, resource: str) -> bool:
    """Whether one identity-policy statement applies to (action, resource)."""
    if "Condition" in statement:
        # Condition keys (aws:SecureTransport, aws:SourceArn, s3:prefix ...)
        # describe the request's context, which the local engine does not
        # model. Such a statement is treated as not matching: its Allow grants
        # nothing and its Deny refuses nothing. Stricter than AWS for an Allow,
        # more lenient for a Deny; this template's roles have no conditions.
        return False
    if "Action" in statement:
        if not _any_match(statement["Action"], action, case_sensitive=False):
            return False
    elif "NotAction" in statement:
        if _any_match(statement["NotAction"], action, case_sensitive=False):
            return False
    else:
        return False
    if "Resource" in statement:
        return _any_match(statement["Resource"], resource, case_sensitive=True)
    if "NotResource" in statement:
        return not _any_match(statement["NotResource"], resource, case_sensitive=True)
    return False  # an identity policy statement must name its resources


def evaluate(statements: Iterable[Mapping[str, Any]], action: str, resource: str) -> Decision:
    """IAM's decision for one identity's statements: explicit Deny, then Allow, else deny."""
    allowed = False
    for statement in statements:
        if not statement_matches(statement, action, resource):
            continue
        if statement.get("Effect") == "Deny":
            return Decision.EXPLICIT_DENY
        if statement.get("Effect") == "Allow":
            allowed = True
    return Decision.ALLOWED if allowed else Decision.IMPLICIT_DENY


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

    def decide(self, action: str, resource: str) -> Decision:
        return evaluate(self.statements, action, resource)


IDENTITY: ContextVar[Principal | None] = ContextVar("onceflow_iam_identity", default=None)


@contextmanager
def acting_as(principal: Principal | None) -> Iterator[None]:
    """Make the calls of this thread (and its context) as principal."""
    token = IDENTITY.set(principal)
    try:
        yield
    finally:
        IDENTITY.reset(token)


def as_operator(client: Any) -> Any:
    """client, its calls made with the operator's (admin) credentials wherever they run.

    The engine's own clients serve the engine, the CLI and tests; a test that
    looks at the ledger from inside a handler it injected is the operator
    looking, not the function.
    """
    make_api_call = client._make_api_call

    def unchecked(operation_name: str, api_params: Any) -> Any:
        with acting_as(None):
            return make_api_call(operation_name, api_params)

    client._make_api_call = unchecked
    return client


# Which IAM action each request needs (Service Authorization Reference), and the AWS
# managed policies SAM attaches to every function role: data, apart from the evaluator.
DATA: Final = json.loads((Path(__file__).parent / "iam_actions.json").read_text())
_S3_OBJECT: Final[dict[str, str]] = DATA["s3_object"]
_S3_BUCKET: Final[dict[str, str]] = DATA["s3_bucket"]
_S3_PLAIN_PARAMETERS: Final = frozenset(DATA["s3_plain_parameters"])


def _document_statements(document: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(document, Mapping) or "Statement" not in document:
        raise TemplateError(f"{where}: not a policy document")
    statements = document["Statement"]
    statements = statements if isinstance(statements, list) else [statements]
    for statement in statements:
        if not isinstance(statement, Mapping) or statement.get("Effect") not in ("Allow", "Deny"):
            raise TemplateError(f"{where}: a statement without Effect Allow or Deny: {statement}")
    return [dict(s) for s in statements]


def _policy_template(stack: Stack, item: Any, where: str) -> list[dict[str, Any]] | None:
    """The statements of a SAM policy template (``S3ReadPolicy: {BucketName: ...}``), as SAM's
    own translator expands it; None when the item is not one (a managed policy's name).

    SAM tells a policy template by a map of one key that names one of its templates
    (samtranslator/model/function_policies.py); its statements come from SAM's
    policy_templates.json through the same PolicyTemplatesProcessor ``sam build`` and
    the Transform use, never from a copy, so a new SAM release brings its templates here.
    """
    if not isinstance(item, Mapping) or len(item) != 1:
        return None
    [(name, values)] = item.items()
    # Imported here: only a template that uses one pays for loading SAM's translator.
    from samtranslator.policy_template_processor.exceptions import (
        InsufficientParameterValues,
        InvalidParameterValues,
    )
    from samtranslator.policy_template_processor.processor import PolicyTemplatesProcessor

    processor = PolicyTemplatesProcessor(
        PolicyTemplatesProcessor.get_default_policy_templates_json()
    )
    if not processor.has(name):
        raise TemplateError(
            f"{where}: {name} is not one of SAM's policy templates (aws-sam-translator's "
            "policy_templates.json); check its spelling, or write the statements inline"
        )
    try:
        document = processor.convert(name, values if values is not None else {})
    except (InsufficientParameterValues, InvalidParameterValues, ValueError) as exc:
        raise TemplateError(f"{where}: policy template {name}: {exc}") from exc
    # The expansion holds Fn::Sub over AWS::Partition, AWS::Region and the like.
    return _document_statements(stack.resolve(document), f"{where} ({name})")


def _sam_policies(stack: Stack, policies: Any, where: str) -> list[dict[str, Any]]:
    """The statements of a SAM ``Policies`` value (resolved): inline documents and SAM's
    policy templates.

    SAM also takes managed policy names or ARNs. Their statements live outside the
    template, so the local engine refuses them rather than guess.
    """
    items = policies if isinstance(policies, list) else [policies]
    statements: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, Mapping) and "Statement" in item:
            statements += _document_statements(item, where)
            continue
        expanded = _policy_template(stack, item, where)
        if expanded is None:
            raise TemplateError(
                f"{where}: policy {item!r} is a managed policy; the local engine enforces "
                "inline policy documents and SAM policy templates only"
            )
        statements += expanded
    return statements


def _role_statements(stack: Stack, logical_id: str, raw_role: Any) -> list[dict[str, Any]]:
    """The statements of an AWS::IAM::Role of the template named by a ``Role`` property."""
    role_id = None
    if isinstance(raw_role, Mapping) and "Fn::GetAtt" in raw_role:
        target = raw_role["Fn::GetAtt"]
        role_id = (target if isinstance(target, list) else str(target).split("."))[0]
    resources = stack.template["Resources"]
    if role_id is None or resources.get(role_id, {}).get("Type") != "AWS::IAM::Role":
        raise TemplateError(
            f"{logical_id}: Role must be !GetAtt of an AWS::IAM::Role in the template "
            "for the local engine to know its policies"
        )
    props = resources[role_id].get("Properties", {})
    if props.get("ManagedPolicyArns") or props.get("PermissionsBoundary"):
        raise TemplateError(f"{role_id}: managed policies are not enforced by the local engine")
    statements: list[dict[str, Any]] = []
    for policy in stack.resolve(props.get("Policies", [])):
        statements += _document_statements(policy.get("PolicyDocument"), role_id)
    return statements


# ---- requests -> IAM actions ----------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One action on one resource that a request needs allowed."""

    action: str
    resource: str


@dataclass(frozen=True)
class Call:
    """An AWS request as IAM sees it."""

    service: str  # dynamodb, sqs, states, lambda, events, s3 (or the host's first label)
    operation: str
    checks: tuple[Check, ...]
    # S3 object reads: the bucket whose s3:ListBucket decides 404 or 403 for a missing key.
    missing_key_bucket: str | None = None
    head: bool = False
    unmapped: str | None = None  # why no action could be named


_HOST = re.compile(r"^(?P<service>[a-z0-9-]+)\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?::\d+)?$")
_S3_HOST = re.compile(
    r"^(?:(?P<bucket>.+)\.)?s3(?:[.-](?P<region>[a-z0-9-]+))?\.amazonaws\.com(?::\d+)?$"
)


def describe_call(request: Any, account_id: str) -> Call | None:
    """The IAM actions and resources a botocore request needs; None for a non-AWS URL."""
    parts = urlsplit(request.url)
    host = parts.netloc.lower()
    s3 = _S3_HOST.match(host)
    if s3 is not None:
        return _s3_call(request, parts, s3.group("bucket"))
    match = _HOST.match(host)
    if match is None:
        if host.split(":", 1)[0].endswith(".amazonaws.com"):  # a global endpoint (IAM, STS ...)
            return Call(host.split(".", 1)[0], request.method, (), unmapped=host)
        return None
    service, region = match.group("service"), match.group("region")
    if service == "lambda":
        return _lambda_call(request, parts, region, account_id)
    target = _header(request, "X-Amz-Target")
    body = _json_body(request)
    operation = target.rsplit(".", 1)[-1] if target else ""
    mapper = _JSON_SERVICES.get(service)
    if mapper is None or not operation:
        return Call(service, operation or request.method, (), unmapped=f"{service} {operation}")
    resources = mapper(operation, body, region, account_id)
    if resources is None:
        return Call(service, operation, (), unmapped=f"{service} {operation}")
    return Call(service, operation, tuple(Check(a, r) for a, r in resources))


def _header(request: Any, name: str) -> str:
    value = request.headers.get(name) or request.headers.get(name.lower()) or ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _json_body(request: Any) -> dict[str, Any]:
    body = request.body
    if body is None or body == b"" or body == "":
        return {}
    if hasattr(body, "read"):
        return {}  # a stream: no JSON API sends one
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


Pairs = list[tuple[str, str]] | None


def _table_arn(name: str, region: str, account_id: str) -> str:
    if name.startswith("arn:"):
        return name
    return f"arn:aws:dynamodb:{region}:{account_id}:table/{name}"


def _dynamodb(operation: str, body: dict[str, Any], region: str, account_id: str) -> Pairs:
    if operation in DATA["dynamodb_table_operations"]:
        return [
            (f"dynamodb:{operation}", _table_arn(str(body.get("TableName")), region, account_id))
        ]
    if operation in ("Query", "Scan"):
        arn = _table_arn(str(body.get("TableName")), region, account_id)
        if body.get("IndexName"):
            arn += f"/index/{body['IndexName']}"  # IAM authorises an index query on the index
        return [(f"dynamodb:{operation}", arn)]
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [
            (f"dynamodb:{operation}", _table_arn(str(t), region, account_id))
            for t in body.get("RequestItems", {})
        ]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        pairs = []
        for item in body.get("TransactItems", []):
            for kind, spec in item.items():
                action = DATA["dynamodb_transact_actions"].get(kind)
                if action is None:
                    return None
                pairs.append(
                    (f"dynamodb:{action}", _table_arn(str(spec["TableName"]), region, account_id))
                )
        return pairs
    if operation == "ListTables":
        return [("dynamodb:ListTables", "*")]
    return None


def _queue_arn(url: str, region: str, account_id: str) -> str:
    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    match = _HOST.match(parts.netloc.lower())
    queue_region = match.group("region") if match else region
    if len(path) >= 2:
        return f"arn:aws:sqs:{queue_region}:{path[-2]}:{path[-1]}"
    return f"arn:aws:sqs:{queue_region}:{account_id}:{path[-1] if path else url}"


def _sqs(operation: str, body: dict[str, Any], region: str, account_id: str) -> Pairs:
    if operation in DATA["sqs_actions"]:
        arn = _queue_arn(str(body.get("QueueUrl", "")), region, account_id)
        return [(f"sqs:{DATA['sqs_actions'][operation]}", arn)]
    if operation in ("GetQueueUrl", "CreateQueue"):
        owner = str(body.get("QueueOwnerAWSAccountId") or account_id)
        return [(f"sqs:{operation}", f"arn:aws:sqs:{region}:{owner}:{body.get('QueueName')}")]
    if operation == "ListQueues":
        return [("sqs:ListQueues", "*")]
    return None


def _states(operation: str, body: dict[str, Any], region: str, account_id: str) -> Pairs:
    if operation in DATA["states_by_machine"]:
        return [(f"states:{operation}", str(body.get("stateMachineArn")))]
    if operation in DATA["states_by_execution"]:
        return [(f"states:{operation}", str(body.get("executionArn")))]
    if operation in DATA["states_any"]:
        return [(f"states:{operation}", "*")]
    return None


def _events(operation: str, body: dict[str, Any], region: str, account_id: str) -> Pairs:
    if operation != "PutEvents":
        return None
    buses = {str(e.get("EventBusName") or "default") for e in body.get("Entries", [])}
    return [
        (
            "events:PutEvents",
            bus
            if bus.startswith("arn:")
            else f"arn:aws:events:{region}:{account_id}:event-bus/{bus}",
        )
        for bus in sorted(buses)
    ]


_JSON_SERVICES: dict[str, Callable[[str, dict[str, Any], str, str], Pairs]] = {
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "states": _states,
    "events": _events,
}

_LAMBDA_PATH = re.compile(
    r"^/(?P<version>\d{4}-\d\d-\d\d)/functions/(?P<name>[^/]+)(?P<rest>/.*)?$"
)


def _function_arn(name: str, qualifier: str | None, region: str, account_id: str) -> str:
    # FunctionName may be a name, a partial ARN (ACCOUNT:function:NAME) or an ARN,
    # each with an optional :QUALIFIER (Lambda API reference, Invoke).
    if name.startswith("arn:"):
        arn = name
    elif ":function:" in name:
        arn = f"arn:aws:lambda:{region}:{name}"
    elif ":" in name:
        base, _, version = name.partition(":")
        arn = f"arn:aws:lambda:{region}:{account_id}:function:{base}:{version}"
    else:
        arn = f"arn:aws:lambda:{region}:{account_id}:function:{name}"
    if qualifier and arn.count(":") == 6:
        arn += f":{qualifier}"
    return arn


def _lambda_call(request: Any, parts: Any, region: str, account_id: str) -> Call:
    match = _LAMBDA_PATH.match(parts.path)
    if match is None:
        return Call("lambda", request.method, (), unmapped=f"lambda {request.method} {parts.path}")
    qualifier = parse_qs(parts.query).get("Qualifier", [None])[0]
    arn = _function_arn(unquote(match.group("name")), qualifier, region, account_id)
    rest = (match.group("rest") or "").rstrip("/")
    operation = DATA["lambda_operations"].get(f"{request.method} {rest}")
    if operation is None:
        return Call("lambda", request.method, (), unmapped=f"lambda {request.method} {parts.path}")
    return Call("lambda", operation, (Check(f"lambda:{operation}", arn),))


def _s3_call(request: Any, parts: Any, host_bucket: str | None) -> Call:
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if host_bucket:
        bucket, key = host_bucket, unquote(path)
    else:
        raw_bucket, _, raw_key = path.partition("/")
        bucket, key = unquote(raw_bucket), unquote(raw_key)
    query = parse_qs(parts.query, keep_blank_values=True)
    version = query.get("versionId", [None])[0]
    subresources = sorted(k for k in query if k not in _S3_PLAIN_PARAMETERS)
    if "uploadId" in query:
        subresources = ["uploadId"]
    method = request.method
    if len(subresources) > 1 or not bucket:
        return Call("s3", method, (), unmapped=f"s3 {method} ?{parts.query}")
    sub = subresources[0] if subresources else ""
    bucket_arn = f"arn:aws:s3:::{bucket}"
    if not key:
        if (method, sub) == ("POST", "delete"):
            return _s3_delete_objects(request, bucket)
        action = _S3_BUCKET.get(f"{method} {sub}")
        if action is None:
            return Call("s3", method, (), unmapped=f"s3 {method} bucket ?{sub}")
        return Call("s3", action, (Check(f"s3:{action}", bucket_arn),), head=method == "HEAD")
    action = _S3_OBJECT.get(f"{method} {sub}")
    if action is None:
        return Call("s3", method, (), unmapped=f"s3 {method} object ?{sub}")
    if version is not None:
        action = DATA["s3_versioned"].get(action, action)
    checks = [Check(f"s3:{action}", f"{bucket_arn}/{key}")]
    source = _header(request, "x-amz-copy-source")
    if source and method == "PUT":  # CopyObject, UploadPartCopy: the source is read too
        source_path, _, source_query = unquote(source).lstrip("/").partition("?")
        read = "GetObjectVersion" if "versionId=" in source_query else "GetObject"
        checks.append(Check(f"s3:{read}", f"arn:aws:s3:::{source_path}"))
    reads_object = action in ("GetObject", "GetObjectVersion")
    return Call(
        "s3",
        action,
        tuple(checks),
        missing_key_bucket=bucket if reads_object else None,
        head=method == "HEAD",
    )


def _s3_delete_objects(request: Any, bucket: str) -> Call:
    body = request.body
    if hasattr(body, "read") or not body:
        return Call("s3", "DeleteObjects", (), unmapped="s3 DeleteObjects without a body")
    root = ET.fromstring(body)  # noqa: S314 - the request the caller itself serialised
    checks = []
    for obj in root.iter():
        if not obj.tag.endswith("Object"):
            continue
        key = next((c.text for c in obj if c.tag.endswith("Key")), None)
        version = next((c.text for c in obj if c.tag.endswith("VersionId")), None)
        action = "DeleteObjectVersion" if version else "DeleteObject"
        checks.append(Check(f"s3:{action}", f"arn:aws:s3:::{bucket}/{key}"))
    return Call("s3", "DeleteObjects", tuple(checks))


# ---- AccessDenied as each service answers it -------------------------------------


def denial_message(principal: Principal, check: Check, decision: Decision) -> str:
    """The message AWS gives a denied identity-based request (not verified word for word)."""
    why = (
        "with an explicit deny in an identity-based policy"
        if decision is Decision.EXPLICIT_DENY
        else f"because no identity-based policy allows the {check.action} action"
    )
    return (
        f"User: {principal.caller_arn} is not authorized to perform: {check.action} "
        f"on resource: {check.resource} {why}"
    )


def denied_response(call: Call, message: str) -> Response:
    """The service's own AccessDenied error response, in its protocol."""
    request_id = str(uuid.uuid4())
    if call.service == "s3":
        headers = {"x-amz-request-id": request_id, "Content-Type": "application/xml"}
        if call.head:  # a HEAD answer has no body: the SDK sees 403 Forbidden
            return 403, headers, b""
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
            f"<Message>{_xml_text(message)}</Message><RequestId>{request_id}</RequestId>"
            "</Error>"
        )
        return 403, headers, body
    if call.service == "lambda":
        headers = {
            "x-amzn-ErrorType": "AccessDeniedException",
            "x-amzn-RequestId": request_id,
            "Content-Type": "application/json",
        }
        return 403, headers, json.dumps({"Type": "User", "Message": message})
    headers = {
        "x-amzn-RequestId": request_id,
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-ErrorType": "AccessDeniedException",
    }
    status = 400  # DynamoDB, Step Functions and EventBridge answer AccessDeniedException with 400
    if call.service == "sqs":
        # SQS's JSON protocol keeps its query-protocol code in this header
        # (SQS developer guide, "Interpreting Amazon SQS JSON API responses"):
        # the SDK reports AccessDenied, with the 403 of the query protocol.
        headers["x-amzn-query-error"] = "AccessDenied;Sender"
        status = 403
    body = json.dumps(
        {"__type": "com.amazon.coral.service#AccessDeniedException", "message": message}
    )
    return status, headers, body


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_MISSING_OBJECT_CODES = (b"<Code>NoSuchKey</Code>", b"<Code>NoSuchVersion</Code>")


def _is_missing_object(response: Response, head: bool) -> bool:
    status, _, body = response
    if status != 404:
        return False
    if head:
        return True  # HEAD has no body to tell a missing key from a missing bucket
    data = body.encode() if isinstance(body, str) else bytes(body or b"")
    return any(code in data for code in _MISSING_OBJECT_CODES)


def check_request(
    principal: Principal, request: Any, send: Callable[[], Response | None]
) -> Response | None:
    """Answer request as AWS answers principal: denied, or sent (``send``) and answered."""
    call = describe_call(request, principal.account_id)
    if call is None:
        return send()
    if call.unmapped is not None:
        # Refused rather than let through: an action no policy was checked for
        # is exactly what would fail deployed. Map it above to let it in.
        message = (
            f"User: {principal.caller_arn} made a request ({call.unmapped}) the local engine "
            "cannot map to an IAM action; onceflow/local/iam.py must learn it first"
        )
        return denied_response(call, message)
    for check in call.checks:
        decision = principal.decide(check.action, check.resource)
        if decision is not Decision.ALLOWED:
            return denied_response(call, denial_message(principal, check, decision))
    response = send()
    # S3 tells a caller an object is missing (404) only if it may list the
    # bucket; to any other it answers 403 AccessDenied (S3 API reference,
    # GetObject and HeadObject, "Permissions"). For a missing version the same
    # rule is applied (not verified).
    if (
        call.missing_key_bucket is not None
        and response is not None
        and _is_missing_object(response, call.head)
    ):
        listing = Check("s3:ListBucket", f"arn:aws:s3:::{call.missing_key_bucket}")
        if principal.decide(listing.action, listing.resource) is not Decision.ALLOWED:
            return denied_response(call, "Access Denied")
    return response


# ---- installation ----------------------------------------------------------------

_CONTROLS: list[AccessControl] = []
_CONTROLS_LOCK = threading.Lock()


def _machine_principal(arn: str) -> Principal | None:
    for control in reversed(_CONTROLS):
        principal = control.by_machine.get(arn)
        if principal is not None:
            return principal
    return None


_SENT = "onceflow_iam_request"  # the request context's view of what a checked call sends


def _refused(model: Any, params: Any, context: Any, **_: Any) -> Any:
    """before-call: a call made with an identity is checked before botocore sends it; a
    denied one is answered there, in the service's place, and never sent."""
    principal = IDENTITY.get()
    if principal is None:  # the engine, a test, the CLI: the operator's credentials
        return None
    request = context[_SENT] = SimpleNamespace(**params)  # botocore's url, method, headers, body
    refused = check_request(principal, request, lambda: None)
    return None if refused is None else hooks.answered(model, request.url, refused)


def _hidden(http_response: Any, parsed: Any, model: Any, context: Any, **_: Any) -> None:
    """after-call.s3: the answer to a checked call as check_request gives it (a missing
    object is hidden from a caller who may not list the bucket)."""
    principal, request = IDENTITY.get(), context.get(_SENT)
    if principal is None or request is None or http_response.status_code != 404:
        return
    sent = (404, http_response.headers, http_response.content)
    response = check_request(principal, request, lambda: sent)
    if response is not sent and response is not None:
        http, parsed_again = hooks.answered(model, request.url, response)
        http_response.status_code = http.status_code
        parsed.clear()
        parsed.update(parsed_again)


@contextmanager
def _as_its_machine(env: Any) -> Iterator[None]:
    """A state's work as its machine's role (hooks.Stages.machine_role): a task's work
    runs on a thread of its own, and Map and Parallel branches on theirs, so the
    identity is set where the work happens rather than where the execution started."""
    arn = env.states.context_object.context_object_data["StateMachine"]["Id"]
    with acting_as(_machine_principal(str(arn))):
        yield


def _install(installer: Installer) -> None:
    installer.register("before-call", _refused)
    installer.register("after-call.s3", _hidden)
    installer.replace(hooks.Stages, "machine_role", staticmethod(_as_its_machine))


def _fits() -> list[str]:
    from moto.stepfunctions.parser.asl.eval import states

    moved = emits(getattr(BaseClient, "_make_api_call"), "before-call", "after-call")  # noqa: B009
    if "StateMachine" not in states.ContextObjectData.__annotations__:
        moved.append("moto's context object no longer names its StateMachine")
    return moved


PATCHES = (
    Patch(
        name="IAM",
        kind="iam",
        why="A function's calls are checked against its role and a state machine's task "
        "integrations against the machine's role, as SAM builds them from the template; a "
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
    principals: dict[str, Principal] = field(default_factory=dict)
    by_function: dict[str, Principal] = field(default_factory=dict)
    by_machine: dict[str, Principal] = field(default_factory=dict)
    _physical: dict[str, str] = field(default_factory=dict)  # logical id -> name or ARN
    _runtime: Any = None
    _started: bool = False

    def start(self, runtime: InProcessRuntime) -> None:
        """Resolve every role (the resources exist by now) and enforce them.

        Each handler runs as its function's role: runtime.load() hands out the
        handler wrapped, so the identity is set on whichever thread calls it
        (the runtime may run a handler on a thread of its own, to time it out).
        """
        if self._started:
            return
        for stack in (self.stack, *self.hosts):
            for logical_id, resource in stack.template["Resources"].items():
                kind = resource["Type"]
                if kind not in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
                    continue
                if not stack.resource_enabled(logical_id):
                    continue
                if logical_id in self._physical:
                    raise TemplateError(
                        f"{logical_id} names a resource of two stacks; the local engine "
                        "keys their roles by logical id"
                    )
                self._physical[logical_id] = stack.refs[logical_id]
                self._set(self._principal(stack, logical_id, resource))
        load = runtime.load
        runtime.load = lambda spec: self.as_function(spec.name, load(spec))  # type: ignore[method-assign]
        self._runtime = runtime
        with _CONTROLS_LOCK:  # the patches are in place (patches.install(), PATCHES below)
            _CONTROLS.append(self)
        self._started = True

    def stop(self) -> None:
        if self._runtime is not None:
            vars(self._runtime).pop("load", None)
            self._runtime = None
        if not self._started:
            return
        with _CONTROLS_LOCK:
            _CONTROLS.remove(self)
        self._started = False

    def as_function(self, name: str, handler: Handler) -> Handler:
        """handler, run as the role of the function named name."""

        @functools.wraps(handler)
        def run_as_role(event: Any, context: Any) -> Any:
            # Looked up per call, so that override() applies to a handler already handed out.
            with acting_as(self.by_function.get(name)):
                return handler(event, context)

        return run_as_role

    def _principal(self, stack: Stack, logical_id: str, resource: Mapping[str, Any]) -> Principal:
        raw = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function":
            props = stack.function_properties(logical_id)
            if "Role" in raw:
                statements = _role_statements(stack, logical_id, raw["Role"])
            else:
                statements = [copy.deepcopy(DATA["lambda_basic_execution"])]
                if props.get("Tracing") == "Active":
                    statements.append(copy.deepcopy(DATA["xray_write_only"]))
                statements += _sam_policies(stack, props.get("Policies", []), logical_id)
            kind, session = "function", stack.refs[logical_id]
        else:
            if "Role" in raw:
                statements = _role_statements(stack, logical_id, raw["Role"])
            else:
                statements = _sam_policies(
                    stack, stack.resolve(raw.get("Policies", [])), logical_id
                )
            kind, session = "state machine", uuid.uuid4().hex[:32]
        return Principal(
            logical_id=logical_id,
            kind=kind,
            role_name=f"{stack.stack_name}-{logical_id}Role"[:64],
            session=session,
            account_id=stack.account_id,
            statements=tuple(statements),
        )

    def _set(self, principal: Principal) -> None:
        self.principals[principal.logical_id] = principal
        physical = self._physical[principal.logical_id]
        if principal.kind == "function":
            self.by_function[physical] = principal
        else:
            self.by_machine[physical] = principal

    def statements(self, logical_id: str) -> list[dict[str, Any]]:
        """A copy of the resolved statements the role of logical_id has now."""
        return [copy.deepcopy(dict(s)) for s in self.principals[logical_id].statements]

    @contextmanager
    def override(self, logical_id: str, statements: list[dict[str, Any]]) -> Iterator[None]:
        """Give the role of logical_id other statements for a while (tests of a missing grant)."""
        before = self.principals[logical_id]
        self._set(replace(before, statements=tuple(copy.deepcopy(statements))))
        try:
            yield
        finally:
            self._set(before)
