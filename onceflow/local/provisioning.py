"""Provisioning: the template's resources created on moto, as CloudFormation creates them."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from onceflow.local import monitoring
from onceflow.local.inventory import as_put
from onceflow.local.lambdas import RESERVED_VARIABLES, FunctionSpec
from onceflow.local.template import Stack, TemplateError
from onceflow.project import default_project

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

PROJECT_ROOT = default_project()  # where a command runs (an installed package has no checkout)
DEFAULT_TEMPLATE = PROJECT_ROOT / "template.yaml"
REGION = "us-east-1"
ACCOUNT_ID = "123456789012"

# Resources whose behaviour the local engine does not need (policies, logs):
# they resolve to a name so that references to them still work.
_NOT_EMULATED = {
    "AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy", "AWS::Logs::LogGroup", "AWS::IAM::Role",
    "AWS::IAM::Policy", "AWS::CloudWatch::Dashboard", "AWS::Logs::MetricFilter",
    "AWS::SNS::TopicPolicy",
}  # fmt: skip
# A creator makes one resource from its name and resolved properties (Globals merged in).
Creator = Callable[["LocalEngine", str, str, dict[str, Any]], None]


def _created(engine: LocalEngine, logical_id: str, ref: str, **attributes: str) -> None:
    engine.stack.refs[logical_id] = ref
    engine.stack.attributes[logical_id] = attributes


def create(engine: LocalEngine, logical_id: str) -> None:
    """Create one resource (and, through the references it resolves, those it needs first)."""
    stack = engine.stack
    if logical_id in stack.refs:
        return
    if logical_id in engine._creating:
        raise TemplateError(f"circular reference through {logical_id}")
    engine._creating.add(logical_id)
    try:
        resource = stack.template["Resources"][logical_id]
        kind = resource["Type"]
        if not stack.resource_enabled(logical_id):
            stack.refs[logical_id] = ""
            return
        if kind in CREATORS:
            name_property, limit, creator = CREATORS[kind]
            if kind == "AWS::Serverless::Function":
                props = stack.function_properties(logical_id)
            else:
                props = stack.resolve(resource.get("Properties", {}))
            name = str(props.get(name_property) or stack.physical_name(logical_id, limit))
            creator(engine, logical_id, name, props)
        elif kind in _NOT_EMULATED:
            name = stack.physical_name(logical_id)
            _created(engine, logical_id, name, Arn=f"arn:aws:local:{REGION}:{ACCOUNT_ID}:{name}")
        else:
            raise TemplateError(f"{logical_id}: {kind} is not emulated locally")
    finally:
        engine._creating.discard(logical_id)


def create_all(engine: LocalEngine) -> None:
    """Every resource of the template (a parent's first: its application creates the rest)."""
    for stack in (engine.parent, engine.stack):
        if stack is not None:
            _create_stack(engine, stack)


def _create_stack(engine: LocalEngine, stack: Stack) -> dict[str, str]:
    """Create every resource of a stack of the engine (a parent's, the nested one); its
    outputs. The creators read and fill engine.stack, pointed at it meanwhile."""
    current, engine.stack = engine.stack, stack
    try:
        for logical_id in stack.template["Resources"]:
            create(engine, logical_id)
        return engine.outputs()
    finally:
        engine.stack = current


def _application(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    """The nested onceflow of a parent template, created as CloudFormation creates a nested
    stack: its Ref the stack's ID, its attributes Outputs.<name> (docs/processor.md)."""
    nested_of = engine._nested
    if nested_of is None or nested_of[0] != logical_id or engine.stack is not engine.parent:
        raise TemplateError(f"{logical_id}: only the parent template's application is run")
    nested = nested_of[1]
    nested.bind(props.get("Parameters", {}))
    attributes = {f"Outputs.{k}": v for k, v in _create_stack(engine, nested).items()}
    _created(engine, logical_id, str(nested.pseudo("AWS::StackId")), **attributes)


def _bucket(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    s3 = engine.client("s3")
    s3.create_bucket(Bucket=name)
    if props.get("VersioningConfiguration", {}).get("Status") == "Enabled":
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    notifications = props.get("NotificationConfiguration", {})
    bridge = notifications.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled")
    if bridge in (True, "true"):  # what put_s3_event() asks of a bucket, as S3 does
        s3.put_bucket_notification_configuration(
            Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
    for inventory in props.get("InventoryConfigurations") or []:  # S3 delivers by these
        s3.put_bucket_inventory_configuration(
            Bucket=name, Id=inventory["Id"],
            InventoryConfiguration=as_put(inventory, str(engine.stack.pseudo("AWS::AccountId"))),
        )  # fmt: skip
    _created(
        engine, logical_id, name, Arn=f"arn:aws:s3:::{name}", DomainName=f"{name}.s3.amazonaws.com"
    )


def _table(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    # CloudFormation takes a String parameter where an Integer goes; the API does not.
    for key in ("WarmThroughput", "GlobalSecondaryIndexes"):
        if props.get(key):
            kwargs[key] = monitoring.numbers(props[key])
    dynamodb = engine.client("dynamodb")
    description = dynamodb.create_table(**kwargs)["TableDescription"]
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
    _created(engine, logical_id, name, Arn=description["TableArn"])


_QUEUE_ATTRIBUTES = (
    "MessageRetentionPeriod", "VisibilityTimeout", "DelaySeconds", "MaximumMessageSize",
)  # fmt: skip


def _queue(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    attributes = {key: str(props[key]) for key in _QUEUE_ATTRIBUTES if key in props}
    if "RedrivePolicy" in props:
        attributes["RedrivePolicy"] = json.dumps(props["RedrivePolicy"])
    url = engine.client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"
    _created(engine, logical_id, url, Arn=arn, QueueName=name, QueueUrl=url)


def execution_role(engine: LocalEngine) -> str:
    """The one role every function and state machine is created with (IAM is iam.py's)."""
    iam = engine.client("iam")
    name = f"{engine.stack.stack_name}-local-role"
    try:
        return str(iam.get_role(RoleName=name)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException:
        trust = json.dumps({"Version": "2012-10-17", "Statement": []})
        return str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)["Role"]["Arn"])


# What the engine can run: a Python handler from CodeUri, imported in its own process.
_RUNS_ONLY = (
    "the local engine runs Python functions only (CodeUri and Handler, imported in its own "
    "process); run this one with sam local invoke, or on AWS"
)


def _function(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    if props.get("PackageType", "Zip") != "Zip":
        raise TemplateError(f"{logical_id}: PackageType {props['PackageType']}: {_RUNS_ONLY}")
    if "Runtime" not in props or "Handler" not in props:  # CreateFunction's words
        raise TemplateError(
            f"{logical_id}: InvalidParameterValueException: Runtime and Handler are "
            "mandatory parameters for functions created with deployment packages."
        )
    runtime = str(props["Runtime"])
    if not runtime.startswith("python"):
        raise TemplateError(f"{logical_id}: Runtime {runtime}: {_RUNS_ONLY}")
    if not isinstance(props.get("CodeUri"), str):
        raise TemplateError(
            f"{logical_id}: its code is not a CodeUri directory (InlineCode, an S3 "
            f"location): {_RUNS_ONLY}"
        )
    if not (engine.stack.root / props["CodeUri"]).is_dir():  # sam build fails on it too
        raise TemplateError(
            f"{logical_id}: CodeUri {props['CodeUri']} is not a directory beside the template "
            f"({engine.stack.root}); the local engine imports the handler from there"
        )
    variables = props.get("Environment", {}).get("Variables", {}).items()
    if nulls := [k for k, v in variables if v is None]:  # `KEY:` with nothing after it
        raise TemplateError(
            f"{logical_id}: [/Resources/{logical_id}/Properties/Environment/Variables/"
            f"{nulls[0]}] 'null' values are not allowed in templates (CloudFormation); "
            "write '' for an empty value"
        )
    # CloudFormation passes a YAML boolean (true, yes) as "true" or "false", not "True"
    environment = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in variables}
    if reserved := sorted(RESERVED_VARIABLES.intersection(environment)):  # Lambda's words
        raise TemplateError(
            f"{logical_id}: Lambda was unable to configure your environment variables because "
            "the environment variables you have provided contains reserved keys that are "
            f"currently not supported for modification. Reserved keys used in this request: "
            f"{', '.join(reserved)}"
        )
    measured = json.dumps(environment, separators=(",", ":"), ensure_ascii=False)
    if len(measured.encode("utf-8")) > 4096:  # Lambda's quota: 4 KB, not adjustable
        raise TemplateError(
            f"{logical_id}: InvalidParameterValueException: Lambda was unable to configure "
            "your environment variables because the environment variables you have provided "
            f"exceeded the 4KB limit. String measured: {measured}"
        )
    timeout, memory = int(props.get("Timeout", 3)), int(props.get("MemorySize", 128))
    ranges = {"timeout": (timeout, 1, 900), "memorySize": (memory, 128, 10240)}
    for field, (value, low, high) in ranges.items():
        if not low <= value <= high:  # CreateFunction's words and ranges (API reference)
            word, edge = ("less", high) if value > high else ("greater", low)
            raise TemplateError(
                f"{logical_id}: ValidationException: 1 validation error detected: Value "
                f"'{value}' at '{field}' failed to satisfy constraint: Member must have "
                f"value {word} than or equal to {edge}"
            )
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("README", "onceflow runs this function in-process")
    arn = engine.client("lambda").create_function(
        FunctionName=name,
        Runtime=runtime,
        Role=execution_role(engine),
        Handler=props["Handler"],
        Code={"ZipFile": code.getvalue()},
        Timeout=timeout,
        MemorySize=memory,
        Environment={"Variables": environment},
    )["FunctionArn"]
    code_uri = engine.stack.root / props["CodeUri"]
    # Each function sees its own variables (lambdas.function_environment), as on Lambda;
    # the process keeps the template variables and name for threads a handler starts, each
    # only while every function that sets it gives it one value (never another function's
    # value); not LAMBDA_TASK_ROOT ..., by which libraries tell they are in Lambda.
    local = {"POWERTOOLS_TRACE_DISABLED": "true"}
    if engine.function_log_level is not None:  # else at the template's level, as deployed
        local["POWERTOOLS_LOG_LEVEL"] = engine.function_log_level
    spec = FunctionSpec(
        logical_id, name, arn, code_uri, props["Handler"], timeout, memory,
        {**environment, **local}, runtime, tuple(str(a) for a in props.get("Layers") or ()),
    )  # fmt: skip
    _process_environment(engine, spec)
    engine.runtime.register(spec)
    engine.state.invokers[name] = engine.runtime.moto_invoker(name)
    _created(engine, logical_id, name, Arn=arn)


def _process_environment(engine: LocalEngine, spec: FunctionSpec) -> None:
    """Put a new function's variables and name in the process's environment, where a
    thread its handler starts reads them (Lambda would show it the function's own); one
    that an earlier function gives another value is taken back out (the process's own
    value, if it had one): such a thread sees no function's rather than another's."""
    shown = {**spec.environment, "AWS_LAMBDA_FUNCTION_NAME": spec.name}
    earlier = list(engine.runtime.functions.values())
    for key, value in shown.items():
        theirs = {
            other.name if key == "AWS_LAMBDA_FUNCTION_NAME" else other.environment.get(key)
            for other in earlier
        } - {None, value}
        if theirs and key in engine._saved_env:  # set by an earlier function: undone
            before = engine._saved_env[key]
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before
        elif not theirs and key not in engine._saved_env:
            engine._set_env({key: value})


def _layer(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    """A LayerVersion from a ContentUri directory, put where the Python runtime looks: its
    python/ (packaging-layers.html); with a Python BuildMethod, sam build puts the
    ContentUri's files there itself (samcli workflow_config.get_layer_subfolder)."""
    content = props.get("ContentUri")
    if not isinstance(content, str) or not (engine.stack.root / content).is_dir():
        raise TemplateError(
            f"{logical_id}: ContentUri {content!r} is not a directory beside the template "
            f"({engine.stack.root}); the local engine reads a Layer from there"
        )
    metadata = engine.stack.template["Resources"][logical_id].get("Metadata") or {}
    built = str(metadata.get("BuildMethod", "")).startswith("python")
    arn = f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:layer:{name}:1"
    path = engine.stack.root / content
    engine.runtime.layers[arn] = (path if built else path / "python").resolve()
    _created(engine, logical_id, arn)


def state_machine_definition(stack: Stack, logical_id: str) -> tuple[str, str]:
    """(definition text, workflow type) after DefinitionSubstitutions."""
    props = stack.template["Resources"][logical_id].get("Properties", {})
    text = (stack.root / props["DefinitionUri"]).read_text(encoding="utf-8")
    for key, value in stack.resolve(props.get("DefinitionSubstitutions", {})).items():
        text = text.replace("${" + key + "}", str(value))
    leftover = re.findall(r"\$\{(\w+)\}", text)
    if leftover:
        raise TemplateError(f"{logical_id}: no substitution for {sorted(set(leftover))}")
    json.loads(text)  # what deploys must be valid JSON after substitution
    return text, str(stack.resolve(props.get("Type", "STANDARD")))


def _state_machine(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    definition, workflow_type = state_machine_definition(engine.stack, logical_id)
    role = execution_role(engine)
    arn = engine.client("stepfunctions").create_state_machine(
        name=name, definition=definition, roleArn=role, type=workflow_type
    )["stateMachineArn"]
    _created(engine, logical_id, arn, Name=name, Arn=arn)
    monitoring.create_schedules(engine, logical_id, arn, role)  # its ScheduleV2 events


def _ingress(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    """An EventBridge rule or a pipe: kept by the engine, which delivers as AWS does
    (ingress.py); moto's rules cannot start a state machine."""
    rule = engine.stack.template["Resources"][logical_id]["Type"] == "AWS::Events::Rule"
    for target in props.get("Targets", []) if rule else []:
        if shaped := sorted({"Input", "InputPath", "InputTransformer"}.intersection(target)):
            raise TemplateError(
                f"{logical_id}: target {target.get('Id')}'s {shaped[0]} is not emulated: the "
                "local engine would hand its target the whole event; leave it out to run here"
            )
    (engine.rules if rule else engine.pipes)[logical_id] = {"name": name, **props}
    arn = f"{REGION}:{ACCOUNT_ID}:rule/{name}" if rule else f"{REGION}:{ACCOUNT_ID}:pipe/{name}"
    _created(engine, logical_id, name, Arn=f"arn:aws:{'events' if rule else 'pipes'}:{arn}")


# Each type: the property that names it (if the template gives one), the name's limit, its
# creator (the state machines' names are the stack's).
CREATORS: dict[str, tuple[str, int, Creator]] = {
    "AWS::S3::Bucket": ("BucketName", 63, _bucket),
    "AWS::DynamoDB::Table": ("TableName", 255, _table),
    "AWS::SQS::Queue": ("QueueName", 80, _queue),
    "AWS::Serverless::Function": ("FunctionName", 64, _function),
    "AWS::Serverless::LayerVersion": ("LayerName", 140, _layer),
    "AWS::Serverless::StateMachine": ("", 80, _state_machine),
    "AWS::Events::Rule": ("Name", 64, _ingress),
    "AWS::Pipes::Pipe": ("Name", 64, _ingress),
    "AWS::Serverless::Application": ("", 0, _application),
    **monitoring.CREATORS,  # an alarm, its topic, a subscription
}
