"""The embedded local engine: template.yaml's resources on moto, its ASL and handlers run as-is."""

from __future__ import annotations

import gc
import hashlib
import io
import json
import logging
import math
import os
import re
import sys
import threading
import time
import uuid
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import quote_plus

import boto3
import botocore.loaders
import botocore.session
from botocore.exceptions import ClientError
from moto import mock_aws
from moto import settings as moto_settings
from moto.core.exceptions import AWSError
from moto.events.models import EventPattern
from moto.s3.models import s3_backends
from moto.stepfunctions.parser.models import stepfunctions_parser_backends

from onceflow.local import iam, jsonata_node, limits, monitoring, patches
from onceflow.local.errors import EngineError, ExecutionTimeout
from onceflow.local.lambdas import FUNCTION_OUTPUT, FunctionSpec, InProcessRuntime
from onceflow.local.template import Stack, TemplateError
from onceflow.project import default_project

PROJECT_ROOT = default_project()  # where a command runs (an installed package has no checkout)
DEFAULT_TEMPLATE = PROJECT_ROOT / "template.yaml"
REGION = "us-east-1"
ACCOUNT_ID = "123456789012"

# Resources whose behaviour the local engine does not need (policies, logs):
# they resolve to a name so that references to them still work.
_NOT_EMULATED = {
    "AWS::S3::BucketPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::Logs::LogGroup",
    "AWS::IAM::Role",
    "AWS::IAM::Policy",
    "AWS::CloudWatch::Dashboard",
    "AWS::Logs::MetricFilter",
    "AWS::SNS::TopicPolicy",
}

_EXECUTION_NAME = re.compile(r"[^A-Za-z0-9_-]")
# Failed starts after which pump_pipes() leaves a pipe's queue as it is.
_PIPE_FAILURE_LIMIT = 100


@dataclass
class ExecutionResult:
    """A finished execution: what the console shows for it."""

    arn: str
    name: str
    status: str
    input: Any
    output: Any
    error: str | None
    cause: str | None
    # The history is read when first asked for (it is most of what waiting for
    # an execution would cost): while the engine that ran it is still up.
    load_events: Callable[[], list[dict[str, Any]]] | None = field(
        default=None, repr=False, compare=False
    )
    _events: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @property
    def events(self) -> list[dict[str, Any]]:
        if self._events is None:
            self._events = self.load_events() if self.load_events is not None else []
        return self._events

    @property
    def states_entered(self) -> list[str]:
        return [
            e["stateEnteredEventDetails"]["name"]
            for e in self.events
            if "stateEnteredEventDetails" in e
        ]

    def event_types(self) -> list[str]:
        return [str(e["type"]) for e in self.events]


def execution_name(prefix: str) -> str:
    """A unique, valid execution name (moto names unnamed executions 'None')."""
    clean = _EXECUTION_NAME.sub("-", prefix)[:40].strip("-") or "run"
    return f"{clean}-{uuid.uuid4().hex[:20]}"


# What exists when the first engine has started (moto's and botocore's models,
# the clients, the handlers: over half a million objects) lives as long as the
# engines. Frozen, the garbage collector stops scanning it again and again: a
# full collection took about a second, a tenth of the CPU of a 200-execution
# run. Unfrozen when the last engine stops; until then, the little garbage
# among it waits. A heap someone else froze is left as it is.
_HEAP = {"engines": 0, "frozen_by_us": False}
_HEAP_LOCK = threading.Lock()


# Deep input must fail where Step Functions' JSONata fails (node's stack: about
# 2,200 to 4,400 levels, by expression), never first in the Python that carries
# it there (moto copies and walks every value recursively, two or three frames a
# level; Python's default of 1,000 frames ended executions at about 450 levels).
RECURSION_LIMIT: Final = 20_000
_RECURSION = {"before": 0}


def _freeze_heap() -> None:
    with _HEAP_LOCK:
        if _HEAP["engines"] == 0:
            _RECURSION["before"] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(RECURSION_LIMIT, _RECURSION["before"]))
            if gc.get_freeze_count() == 0:
                gc.freeze()
                _HEAP["frozen_by_us"] = True
        _HEAP["engines"] += 1


def _unfreeze_heap() -> None:
    with _HEAP_LOCK:
        _HEAP["engines"] -= 1
        if _HEAP["engines"] == 0:
            sys.setrecursionlimit(_RECURSION["before"])
            if _HEAP["frozen_by_us"]:
                gc.unfreeze()
                _HEAP["frozen_by_us"] = False


# One loader of botocore's data files for every engine of the process: a session of its
# own loads and parses each service model again (about 0.2 s of JSON an engine start).
_LOADER = botocore.loaders.create_loader()


def _whole_numbers(properties: dict[str, Any]) -> dict[str, int]:
    return {key: int(value) for key, value in properties.items()}


def _botocore_session() -> botocore.session.Session:
    session = botocore.session.get_session()
    session.register_component("data_loader", _LOADER)
    return session


class LocalEngine:
    """Creates the template's resources in moto and runs executions and invocations.

    Use as a context manager; everything lives in memory and is gone at exit.
    """

    def __init__(
        self,
        template: Path = DEFAULT_TEMPLATE,
        parameters: Mapping[str, Any] | None = None,
        *,
        time_scale: float = 0.0,
        function_log: TextIO | None = None,
        function_log_level: str | None = None,
        stack_name: str = "onceflow-local",
    ) -> None:
        self.stack = Stack.from_file(
            template, parameters, region=REGION, account_id=ACCOUNT_ID, stack_name=stack_name
        )
        # A template that nests onceflow as an application (examples/) is the parent: the
        # engine creates its resources too, and self.stack is the nested stack, the one
        # every command acts on (_create_application binds its parameters).
        self.parent: Stack | None = None
        self._nested = self.stack.nested_application()
        if self._nested is not None:
            self.parent, self.stack = self.stack, self._nested[1]
        self.time_scale = time_scale
        # This engine's clock, request log, faults, functions and executions
        # inside the patches: another engine in this process keeps its own.
        self.state = patches.EngineState(name=stack_name, clock=patches.Clock(time_scale))
        self.runtime = InProcessRuntime()
        # A handler's calls are this engine's work, on whichever thread it runs.
        self.runtime.around = lambda: patches.hooks.working_for(self.state)
        self.function_log = function_log
        self.function_log_level = function_log_level
        self.not_emulated: list[str] = []
        self.rules: dict[str, dict[str, Any]] = {}
        self.pipes: dict[str, dict[str, Any]] = {}
        # S3 Inventory configurations by bucket (logical id): deliver_inventory().
        self.inventories: dict[str, list[dict[str, Any]]] = {}
        self._creating: set[str] = set()
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._mock: Any = None
        self._saved_env: dict[str, str | None] = {}
        self._froze_heap = False
        # The template's IAM roles, enforced (the parent's too).
        self.access = iam.AccessControl(self.stack, (self.parent,) if self.parent else ())
        self.stack.create = self._create
        if self.parent is not None:
            self.parent.create = self._create

    # ---- lifecycle -----------------------------------------------------------

    def __enter__(self) -> LocalEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.state.clock.scale = self.time_scale
        self.state.requests.clear()  # a new engine is a new world: no requests of an earlier one
        jsonata_node.evaluator().warm()  # node and jsonata 2.0.6 are there, or fail now
        patches.install(self.state)  # taken away again when the last engine stops
        # moto logs every ASL error it handles (a Catch is normal control
        # flow here); the history and the result carry what matters.
        logging.getLogger("moto.stepfunctions").setLevel(logging.CRITICAL)
        # In-process, concurrent invocations share one Powertools Metrics object,
        # so one may flush what another added and warn that its own set is empty.
        # A Lambda sandbox runs one invocation at a time and never sees this.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        self._set_env({"AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION})
        FUNCTION_OUTPUT.install(self.function_log or sys.stderr)
        self._mock = mock_aws(config={"stepfunctions": {"execute_state_machine": True}})
        self._mock.start()
        try:
            limits.install(self)  # AWS's quotas (history, sizes, timeouts), undone by stop()
            if self.parent is not None:  # its nested application creates self.stack's resources
                with self._creating_in(self.parent):
                    for logical_id in self.parent.template["Resources"]:
                        self._create(logical_id)
            for logical_id in self.stack.template["Resources"]:
                self._create(logical_id)
            # Import every handler now (the cold start), before executions
            # run them from several threads at once.
            self.runtime.cold_start()
            for spec in list(self.runtime.functions.values()):
                self.runtime.load(spec)
            self.access.start(self.runtime)  # every resource exists: the roles resolve
        except Exception:
            self.stop()
            raise
        _freeze_heap()
        self._froze_heap = True

    def stop(self) -> None:
        self.access.stop()  # first: it was installed last, over the limits and patches
        limits.uninstall(self)
        patches.uninstall(self.state)  # after the limits, which were installed over them
        if self._froze_heap:
            _unfreeze_heap()
            self._froze_heap = False
        self.state.finished.clear()
        self.state.invokers.clear()
        FUNCTION_OUTPUT.uninstall()
        if self._mock is not None:
            self._mock.stop()
            self._mock = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()

    def _set_env(self, variables: Mapping[str, str]) -> None:
        for key, value in variables.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    # ---- clients -------------------------------------------------------------

    def client(self, service: str) -> Any:
        """A boto3 client shared by every thread.

        Clients are thread-safe; sessions are not, so each client is made
        under a lock. Making one costs about 0.1 s of CPU (botocore loads and
        parses the service model), which a client per thread paid again for
        every new thread.
        """
        client = self._clients.get(service)
        if client is None:
            with self._clients_lock:
                client = self._clients.get(service)
                if client is None:
                    session = boto3.session.Session(
                        botocore_session=_botocore_session(), region_name=REGION
                    )
                    client = session.client(service)  # type: ignore[call-overload]
                    # The operator's: unchecked by IAM even from inside a handler.
                    client = iam.as_operator(client)
                    client = patches.hooks.on_behalf_of(self.state, client)
                    self._clients[service] = client
        return client

    # ---- resources -----------------------------------------------------------

    def ref(self, logical_id: str) -> str:
        return self.stack.ref(logical_id)

    def get_att(self, logical_id: str, attribute: str) -> str:
        return self.stack.get_att(logical_id, attribute)

    def ingest_bucket(self) -> str:
        """The bucket whose uploads the stack processes: its own IngestBucket, or the one
        ExistingBucketName names (the template's IngestBucketName output follows both)."""
        named = self.outputs().get("IngestBucketName")
        return named if named else self.ref("IngestBucket")

    def outputs(self) -> dict[str, str]:
        return {
            name: str(self.stack.resolve(spec["Value"]))
            for name, spec in self.stack.template.get("Outputs", {}).items()
            if "Condition" not in spec or self.stack.condition(spec["Condition"])
        }

    def _physical_name(self, logical_id: str, limit: int = 63) -> str:
        suffix = hashlib.sha256(f"{self.stack.stack_name}/{logical_id}".encode()).hexdigest()[:8]
        base = f"{self.stack.stack_name}-{logical_id}".lower()[: limit - 9]
        return f"{base}-{suffix}"

    def _create(self, logical_id: str) -> None:
        if logical_id in self.stack.refs:
            return
        if logical_id in self._creating:
            raise TemplateError(f"circular reference through {logical_id}")
        self._creating.add(logical_id)
        try:
            resource = self.stack.template["Resources"][logical_id]
            kind = resource["Type"]
            if not self.stack.resource_enabled(logical_id):
                self.stack.refs[logical_id] = ""
                return
            creator = {
                "AWS::S3::Bucket": self._create_bucket,
                "AWS::DynamoDB::Table": self._create_table,
                "AWS::SQS::Queue": self._create_queue,
                "AWS::Serverless::Function": self._create_function,
                "AWS::Serverless::StateMachine": self._create_state_machine,
                "AWS::Events::Rule": self._create_rule,
                "AWS::Pipes::Pipe": self._create_pipe,
                **dict.fromkeys(monitoring.CREATORS, self._create_monitored),
                "AWS::Serverless::Application": self._create_application,
            }.get(kind)
            if creator is None:
                if kind not in _NOT_EMULATED:
                    raise TemplateError(f"{logical_id}: {kind} is not emulated locally")
                self.not_emulated.append(logical_id)
                name = self._physical_name(logical_id)
                self.stack.refs[logical_id] = name
                self.stack.attributes[logical_id] = {
                    "Arn": f"arn:aws:local:{REGION}:{ACCOUNT_ID}:{name}"
                }
                return
            creator(logical_id, resource)
        finally:
            self._creating.discard(logical_id)

    @contextmanager
    def _creating_in(self, stack: Stack) -> Iterator[None]:
        """The creators read and fill self.stack: point it at another stack of this engine
        (a parent template) while its resources are created."""
        current, self.stack = self.stack, stack
        try:
            yield
        finally:
            self.stack = current

    def _create_application(self, logical_id: str, resource: dict[str, Any]) -> None:
        """The nested onceflow of a parent template: its stack bound to the parameters the
        parent passes, then its resources created, as CloudFormation creates a nested stack
        once the resources its parameters reference exist. The application's Ref is the
        nested stack's ID and its attributes are Outputs.<name> (AWS::CloudFormation::Stack,
        return values: serverless-sam-template-nested-applications.html deploys it as one).
        """
        if self._nested is None or self._nested[0] != logical_id or self.stack is not self.parent:
            raise TemplateError(f"{logical_id}: only the parent template's application is run")
        nested = self._nested[1]
        parameters = self.stack.resolve(resource.get("Properties", {})).get("Parameters", {})
        nested.bind(parameters)
        with self._creating_in(nested):
            for nested_id in nested.template["Resources"]:
                self._create(nested_id)
            outputs = self.outputs()
        self.stack.refs[logical_id] = str(nested.pseudo("AWS::StackId"))
        self.stack.attributes[logical_id] = {f"Outputs.{k}": v for k, v in outputs.items()}

    def _create_bucket(self, logical_id: str, resource: dict[str, Any]) -> None:
        props = self.stack.resolve(resource.get("Properties", {}))
        name = props.get("BucketName") or self._physical_name(logical_id)
        s3 = self.client("s3")
        s3.create_bucket(Bucket=name)
        if props.get("VersioningConfiguration", {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        notifications = props.get("NotificationConfiguration", {})
        if notifications.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled") in (
            True,
            "true",
        ):  # what put_s3_event() asks of a bucket, as S3 does
            s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )
        self.inventories[logical_id] = list(props.get("InventoryConfigurations") or [])
        self.stack.refs[logical_id] = name
        self.stack.attributes[logical_id] = {
            "Arn": f"arn:aws:s3:::{name}",
            "DomainName": f"{name}.s3.amazonaws.com",
        }

    def deliver_inventory(self, bucket: str = "IngestBucket", when: datetime | None = None) -> str:
        """Deliver a bucket's S3 Inventory report now, as S3 does on its schedule.

        S3 writes a report daily or weekly (storage-inventory.html); locally
        nothing runs on a schedule, so a test or the bench asks for one. Returns
        the manifest's key. Raises EngineError when the bucket has no inventory
        configured (AuditInventory none).
        """
        from onceflow.local import inventory

        configurations = [c for c in self.inventories.get(bucket, []) if c.get("Enabled")]
        if not configurations:
            raise EngineError(f"{bucket} has no S3 Inventory configured (AuditInventory)")
        return inventory.deliver(
            self.client("s3"), self.ref(bucket), configurations[0], when or datetime.now(UTC)
        )

    def _create_table(self, logical_id: str, resource: dict[str, Any]) -> None:
        props = self.stack.resolve(resource.get("Properties", {}))
        name = props.get("TableName") or self._physical_name(logical_id, 255)
        kwargs: dict[str, Any] = {
            "TableName": name,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        # CloudFormation takes a String parameter where an Integer goes; the API does not.
        if "WarmThroughput" in props:
            kwargs["WarmThroughput"] = _whole_numbers(props["WarmThroughput"])
        if props.get("GlobalSecondaryIndexes"):
            kwargs["GlobalSecondaryIndexes"] = [
                {**index, "WarmThroughput": _whole_numbers(index["WarmThroughput"])}
                if "WarmThroughput" in index
                else index
                for index in props["GlobalSecondaryIndexes"]
            ]
        dynamodb = self.client("dynamodb")
        description = dynamodb.create_table(**kwargs)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl:
            dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        self.stack.refs[logical_id] = name
        self.stack.attributes[logical_id] = {"Arn": description["TableArn"]}

    def _create_queue(self, logical_id: str, resource: dict[str, Any]) -> None:
        props = self.stack.resolve(resource.get("Properties", {}))
        name = props.get("QueueName") or self._physical_name(logical_id, 80)
        attributes = {
            key: str(props[key])
            for key in (
                "MessageRetentionPeriod",
                "VisibilityTimeout",
                "DelaySeconds",
                "MaximumMessageSize",
            )
            if key in props
        }
        if "RedrivePolicy" in props:
            attributes["RedrivePolicy"] = json.dumps(props["RedrivePolicy"])
        url = self.client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        self.stack.refs[logical_id] = url
        self.stack.attributes[logical_id] = {
            "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}",
            "QueueName": name,
            "QueueUrl": url,
        }

    def _execution_role(self) -> str:
        iam = self.client("iam")
        name = f"{self.stack.stack_name}-local-role"
        try:
            return str(iam.get_role(RoleName=name)["Role"]["Arn"])
        except iam.exceptions.NoSuchEntityException:
            trust = {"Version": "2012-10-17", "Statement": []}
            return str(
                iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"][
                    "Arn"
                ]
            )

    def _create_function(self, logical_id: str, resource: dict[str, Any]) -> None:
        props = self.stack.function_properties(logical_id)
        name = props.get("FunctionName") or self._physical_name(logical_id, 64)
        environment = {
            k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()
        }
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("README", "onceflow runs this function in-process")
        arn = self.client("lambda").create_function(
            FunctionName=name,
            Runtime=str(props.get("Runtime", "python3.13")),
            Role=self._execution_role(),
            Handler=props["Handler"],
            Code={"ZipFile": code.getvalue()},
            Timeout=int(props.get("Timeout", 3)),
            MemorySize=int(props.get("MemorySize", 128)),
            Environment={"Variables": environment},
        )["FunctionArn"]
        spec = FunctionSpec(
            logical_id=logical_id,
            name=name,
            arn=arn,
            code_uri=self.stack.root / props["CodeUri"],
            handler=props["Handler"],
            timeout=float(props.get("Timeout", 3)),
            memory=int(props.get("MemorySize", 128)),
            environment=environment,
        )
        self._apply_function_environment(spec)
        self.runtime.register(spec)
        self.state.invokers[name] = self.runtime.moto_invoker(name)
        self.stack.refs[logical_id] = name
        self.stack.attributes[logical_id] = {"Arn": arn}

    def _apply_function_environment(self, spec: FunctionSpec) -> None:
        # Handlers run in this one process, so they share os.environ. That is
        # safe only while no two functions give one variable different values.
        for other in self.runtime.functions.values():
            for key, value in spec.environment.items():
                if key in other.environment and other.environment[key] != value:
                    raise EngineError(
                        f"{spec.logical_id} and {other.logical_id} both set {key} "
                        "differently; the in-process runtime cannot tell them apart"
                    )
        overrides = {
            "POWERTOOLS_TRACE_DISABLED": "true",
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        }
        # By default the functions log at the template's level, as deployed.
        if self.function_log_level is not None:
            overrides["POWERTOOLS_LOG_LEVEL"] = self.function_log_level
        self._set_env({**spec.environment, **overrides})

    def state_machine_definition(self, logical_id: str) -> tuple[str, str]:
        """(definition text, workflow type) after DefinitionSubstitutions."""
        resource = self.stack.template["Resources"][logical_id]
        props = resource.get("Properties", {})
        text = (self.stack.root / props["DefinitionUri"]).read_text(encoding="utf-8")
        substitutions = self.stack.resolve(props.get("DefinitionSubstitutions", {}))
        for key, value in substitutions.items():
            text = text.replace("${" + key + "}", str(value))
        leftover = re.findall(r"\$\{(\w+)\}", text)
        if leftover:
            raise TemplateError(f"{logical_id}: no substitution for {sorted(set(leftover))}")
        json.loads(text)  # what deploys must be valid JSON after substitution
        return text, str(self.stack.resolve(props.get("Type", "STANDARD")))

    def _create_state_machine(self, logical_id: str, resource: dict[str, Any]) -> None:
        definition, workflow_type = self.state_machine_definition(logical_id)
        name = self._physical_name(logical_id, 80)
        arn = self.client("stepfunctions").create_state_machine(
            name=name,
            definition=definition,
            roleArn=self._execution_role(),
            type=workflow_type,
        )["stateMachineArn"]
        self.stack.refs[logical_id] = arn
        self.stack.attributes[logical_id] = {"Name": name, "Arn": arn}
        monitoring.create_schedules(self, logical_id, arn)  # its ScheduleV2 events

    def _create_monitored(self, logical_id: str, resource: dict[str, Any]) -> None:
        monitoring.create(self, logical_id, resource)  # an alarm, its topic, a subscription

    def _create_rule(self, logical_id: str, resource: dict[str, Any]) -> None:
        # EventBridge is emulated here, not in moto: moto's rules cannot start
        # a state machine. put_event() matches and delivers as EventBridge does.
        props = self.stack.resolve(resource.get("Properties", {}))
        name = props.get("Name") or self._physical_name(logical_id, 64)
        self.rules[logical_id] = {"name": name, **props}
        self.stack.refs[logical_id] = name
        self.stack.attributes[logical_id] = {
            "Arn": f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/{name}"
        }

    def _create_pipe(self, logical_id: str, resource: dict[str, Any]) -> None:
        props = self.stack.resolve(resource.get("Properties", {}))
        name = props.get("Name") or self._physical_name(logical_id, 64)
        self.pipes[logical_id] = {"name": name, **props}
        self.stack.refs[logical_id] = name
        self.stack.attributes[logical_id] = {
            "Arn": f"arn:aws:pipes:{REGION}:{ACCOUNT_ID}:pipe/{name}"
        }

    def successful_puts(self, bucket: str) -> Counter[str]:
        """PutObjects into bucket that S3 accepted, by key: writes that took effect."""
        return Counter(
            r.key
            for r in self.state.requests.snapshot()
            if r.service == "s3"
            and r.operation == "PutObject"
            and r.bucket == bucket
            and r.status == 200
        )

    # ---- functions -----------------------------------------------------------

    def function_name(self, logical_id_or_name: str) -> str:
        for spec in self.runtime.functions.values():
            if logical_id_or_name in (spec.logical_id, spec.name):
                return spec.name
        raise EngineError(
            f"no function {logical_id_or_name!r}; the template has "
            + ", ".join(s.logical_id for s in self.runtime.functions.values())
        )

    def invoke(self, function: str, event: Any) -> tuple[Any, str | None]:
        """Invoke a function through the Lambda API, as the state machine does."""
        response = self.client("lambda").invoke(
            FunctionName=self.function_name(function), Payload=json.dumps(event).encode()
        )
        payload = json.loads(response["Payload"].read() or b"null")
        error = payload.get("errorType") if response.get("FunctionError") else None
        return payload, error

    @contextmanager
    def override_function(self, function: str, handler: Any) -> Iterator[None]:
        """Run handler in place of the template's for a while (failure injection)."""
        name = self.function_name(function)
        self.runtime.overrides[name] = self.access.as_function(name, handler)
        try:
            yield
        finally:
            self.runtime.overrides.pop(name, None)

    # ---- executions ----------------------------------------------------------

    def state_machine_arn(self, logical_id_or_arn: str) -> str:
        if logical_id_or_arn.startswith("arn:"):
            return logical_id_or_arn
        resource = self.stack.template["Resources"].get(logical_id_or_arn)
        if resource is None or resource["Type"] != "AWS::Serverless::StateMachine":
            machines = [
                lid
                for lid, r in self.stack.template["Resources"].items()
                if r["Type"] == "AWS::Serverless::StateMachine"
            ]
            raise EngineError(
                f"no state machine {logical_id_or_arn!r}; the template has {', '.join(machines)}"
            )
        return self.ref(logical_id_or_arn)

    def state_machines(self) -> dict[str, str]:
        """ARN -> logical id of the template's state machines that exist (one whose
        Condition is false, such as BatchProcessorStateMachine by default, has no ARN)."""
        return {
            self.ref(logical_id): logical_id
            for logical_id, resource in self.stack.template["Resources"].items()
            if resource["Type"] == "AWS::Serverless::StateMachine"
            and self.stack.refs.get(logical_id)
        }

    def start_execution(
        self,
        state_machine: str,
        execution_input: Any,
        name: str | None = None,
        *,
        name_prefix: str | None = None,
    ) -> str:
        """Start an execution; its ARN.

        The name is the caller's, or else one of the engine's making (from
        name_prefix, else the machine's name). With the engine's, the local
        Step Functions backend is asked directly: through botocore and moto's
        HTTP layer, the same start cost about a tenth of an execution's CPU.
        Anything the backend refuses (a machine it does not know, input over
        the limit) is asked again the usual way, so the error is the one AWS
        gives; a caller's name, or moto checking IAM, goes the usual way too.
        """
        arn = self.state_machine_arn(state_machine)
        # What EventBridge and Pipes send and Step Functions counts (256 KiB "as a
        # UTF-8 encoded string"): compact JSON, an "é" two bytes, not "\u00e9".
        text = json.dumps(execution_input, ensure_ascii=False, separators=(",", ":"))
        prefix = name_prefix or state_machine.rsplit(":", 1)[-1]
        if (
            name is None
            and arn.startswith(f"arn:aws:states:{REGION}:{ACCOUNT_ID}:stateMachine:")
            and not math.isfinite(moto_settings.INITIAL_NO_AUTH_ACTION_COUNT)
        ):
            backend = stepfunctions_parser_backends[ACCOUNT_ID][REGION]
            try:
                started = backend.start_execution(arn, execution_name(prefix), text)
                return str(started.execution_arn)
            except AWSError:  # refused before anything started: the client call raises it
                pass
        response = self.client("stepfunctions").start_execution(
            stateMachineArn=arn,
            name=name or execution_name(prefix),
            input=text,
        )
        return str(response["executionArn"])

    def _describe_execution(self, execution_arn: str) -> dict[str, Any]:
        """DescribeExecution's answer, read from the local Step Functions backend.

        The engine asking its own in-process service through botocore and
        moto's HTTP layer cost about 1.6 ms of CPU per execution, a
        twentieth of one. The answer is the backend's own description (input
        and output as JSON text, as AWS gives them). An ARN the backend does
        not know goes the usual way, for the usual error.
        """
        backend = stepfunctions_parser_backends[ACCOUNT_ID][REGION]
        try:
            execution = backend.describe_execution(execution_arn)
        except AWSError:  # not found, a bad ARN: the client call raises it as AWS would
            return dict(self.client("stepfunctions").describe_execution(executionArn=execution_arn))
        # The parser backend keeps its own Execution objects (they describe themselves).
        described = execution.to_describe_output()  # type: ignore[attr-defined]
        status = described["status"]
        return {
            key: value
            for key, value in {
                "name": described["name"],
                "status": status.value if isinstance(status, Enum) else str(status),
                "input": described.get("input"),
                "output": described.get("output"),
                "error": described.get("error"),
                "cause": described.get("cause"),
            }.items()
            if value is not None
        }

    def wait(self, execution_arn: str, timeout: float = 120.0) -> ExecutionResult:
        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + timeout
        finished = self.state.finished.event(execution_arn)
        while True:
            # Woken by the execution's end (at once if it has ended); the
            # timeout only bounds a missed signal.
            signalled = finished.wait(min(0.5, max(deadline - time.monotonic(), 0.001)))
            description = self._describe_execution(execution_arn)
            if description["status"] != "RUNNING":
                if not signalled and finished.wait(1.0):
                    # Ended between the wait and the read: moto sets the
                    # status before the output, error and cause.
                    description = self._describe_execution(execution_arn)
                break
            if time.monotonic() > deadline:
                raise ExecutionTimeout(f"{execution_arn} still running after {timeout}s")

        def history() -> list[dict[str, Any]]:
            if self._mock is None:
                raise EngineError("the engine has stopped: read the history while it runs")
            events: list[dict[str, Any]] = []
            for page in sfn.get_paginator("get_execution_history").paginate(
                executionArn=execution_arn
            ):
                events += page["events"]
            return events

        output = description.get("output")
        return ExecutionResult(
            arn=execution_arn,
            name=description["name"],
            status=description["status"],
            input=json.loads(description.get("input") or "null"),
            output=json.loads(output) if output else None,
            error=description.get("error"),
            cause=description.get("cause"),
            load_events=history,
        )

    # ---- ingress: EventBridge rules and the SQS pipe -------------------------

    def put_event(self, event: Mapping[str, Any]) -> list[str]:
        """Deliver one event as the default bus does: to every matching rule's targets.

        A target that cannot be started (a deleted state machine, an input
        over 256 KiB) sends the event to the rule's dead-letter queue with
        EventBridge's own attributes, after the rule's retries, as AWS does.
        An SQS target (the batch mode's source queue) receives the event as a
        message; pump_pipes() then runs it. Returns the ARNs of the executions started.
        """
        started: list[str] = []
        for rule in self.rules.values():
            if rule.get("State", "ENABLED") != "ENABLED":
                continue
            pattern = EventPattern.load(json.dumps(rule.get("EventPattern", {})))
            if not pattern.matches_event(dict(event)):  # type: ignore[arg-type]
                continue
            for target in rule.get("Targets", []):
                try:
                    if str(target["Arn"]).startswith("arn:aws:sqs:"):
                        # An SQS target gets the event itself as the message body (no
                        # InputPath or transformer here); the pipe reading the queue runs it.
                        self.client("sqs").send_message(
                            QueueUrl=self._queue_url(str(target["Arn"])),
                            MessageBody=json.dumps(event, ensure_ascii=False),
                        )
                    else:
                        started.append(
                            self.start_execution(target["Arn"], event, name_prefix="events")
                        )
                except ClientError as exc:
                    self._eventbridge_dead_letter(rule, target, event, exc)
        return started

    def put_custom_event(self, source: str, detail_type: str, detail: Any) -> list[str]:
        """PutEvents: EventBridge wraps the entry in its envelope, then delivers it."""
        return self.put_event(
            {
                "version": "0",
                "id": str(uuid.uuid4()),
                "detail-type": detail_type,
                "source": source,
                "account": ACCOUNT_ID,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "region": REGION,
                "resources": [],
                "detail": detail,
            }
        )

    def put_s3_event(self, bucket: str, key: str, version_id: str | None = None) -> list[str]:
        """S3's Object Created event of one upload, delivered as the default bus does.

        S3 sends its events to EventBridge only while the bucket's EventBridge
        notifications are on (PutBucketNotificationConfiguration with an
        EventBridgeConfiguration: S3 User Guide, enable-event-notifications-eventbridge.html);
        otherwise nothing is sent and nothing starts, as on AWS. For a bucket the
        stack does not own (ExistingBucketName) that is the user's one step. The
        event has the fields of S3's (S3 User Guide, EventBridge event message
        structure), the key URL-encoded with "+" for a space (docs/ingress.md,
        Object keys: not verified against a live account), and a sequencer derived
        from the upload, so a second call for one upload is a duplicate delivery.
        A test loses an event by not calling this. Returns the executions started.
        """
        # moto keeps the setting but leaves it out of GetBucketNotificationConfiguration.
        configuration = s3_backends[ACCOUNT_ID]["aws"].buckets[bucket].notification_configuration
        if configuration is None or configuration.event_bridge is None:
            return []
        return self.put_event(self.s3_object_created_event(bucket, key, version_id))

    def s3_object_created_event(
        self, bucket: str, key: str, version_id: str | None = None
    ) -> dict[str, Any]:
        """The EventBridge event S3 sends for one upload (put_s3_event describes its fields)."""
        s3 = self.client("s3")
        head = s3.head_object(
            Bucket=bucket, Key=key, **({"VersionId": version_id} if version_id else {})
        )
        etag = str(head["ETag"]).strip('"')
        version = head.get("VersionId")
        upload = f"{bucket}/{key}#{version or etag + head['LastModified'].isoformat()}"
        obj: dict[str, Any] = {
            "key": quote_plus(key, safe="/"),
            "size": head["ContentLength"],
            "etag": etag,
        }
        if version:
            obj["version-id"] = version
        obj["sequencer"] = hashlib.sha256(upload.encode()).hexdigest()[:18].upper()
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Object Created",
            "source": "aws.s3",
            "account": ACCOUNT_ID,
            "time": head["LastModified"].strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:s3:::{bucket}"],
            "detail": {
                "version": "0",
                "bucket": {"name": bucket},
                "object": obj,
                "request-id": uuid.uuid4().hex[:16].upper(),
                "requester": ACCOUNT_ID,
                "source-ip-address": "127.0.0.1",
                "reason": "PutObject",
            },
        }

    def _eventbridge_dead_letter(
        self, rule: dict[str, Any], target: dict[str, Any], event: Any, exc: ClientError
    ) -> None:
        dead_letter = target.get("DeadLetterConfig", {}).get("Arn")
        if not dead_letter:
            raise EngineError(f"rule {rule['name']}: target failed and has no DLQ") from exc
        error = exc.response.get("Error", {})
        attributes = {
            "RULE_ARN": f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/{rule['name']}",
            "TARGET_ARN": str(target["Arn"]),
            "ERROR_CODE": str(error.get("Code", "Unknown")),
            "ERROR_MESSAGE": str(error.get("Message", ""))[:256],
            "RETRY_ATTEMPTS": str(target.get("RetryPolicy", {}).get("MaximumRetryAttempts", 185)),
        }
        self.client("sqs").send_message(
            QueueUrl=self._queue_url(dead_letter),
            MessageBody=json.dumps(event),
            MessageAttributes={
                k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
            },
        )

    def _queue_url(self, arn: str) -> str:
        return str(self.client("sqs").get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"])

    def pump_pipes(self, limit: int | None = None) -> list[str]:
        """Run every pipe until its source queue is empty (or limit executions started).

        As EventBridge Pipes does for SQS: receive a batch, start the target
        with the batch as a JSON array, even for one message
        (eb-pipes-batching-concurrency.html). The target's InvocationType
        decides the rest; AWS's default is REQUEST_RESPONSE (AWS::Pipes::Pipe
        PipeTargetStateMachineParameters).

        FIRE_AND_FORGET (StartExecution): the messages are deleted once the
        start was accepted. A failed start leaves them in the queue (visible
        again at once); after the queue's maxReceiveCount its redrive policy
        moves them to its DLQ.

        REQUEST_RESPONSE (StartSyncExecution, EXPRESS only): the pipe waits for
        the execution's end and deletes what it reports done (_sync_failures):
        a failed or timed-out execution keeps the whole batch; its output's
        batchItemFailures keeps the messages it names. Kept messages become
        visible again when this pass over the queue ends: on AWS they reappear
        after the queue's visibility timeout, so the next pump_pipes() is their
        next delivery (and counts toward maxReceiveCount).
        Returns the ARNs of the executions started.
        """
        sqs = self.client("sqs")
        started: list[str] = []
        for pipe in self.pipes.values():
            if pipe.get("DesiredState", "RUNNING") != "RUNNING":
                continue  # a stopped pipe polls nothing (StopPipe; AWS::Pipes::Pipe DesiredState)
            url = self._queue_url(str(pipe["Source"]))
            batch_size = int(
                pipe.get("SourceParameters", {}).get("SqsQueueParameters", {}).get("BatchSize", 10)
            )
            synchronous = self._pipe_invocation_type(pipe) == "REQUEST_RESPONSE"
            if synchronous:
                self._check_sync_target(pipe)
            kept: list[dict[str, Any]] = []  # visible again once the queue is drained
            failures = 0
            while (limit is None or len(started) < limit) and failures < _PIPE_FAILURE_LIMIT:
                messages = sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(batch_size, 10),
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
                if not messages:
                    break
                records = [self._pipe_record(m, str(pipe["Source"])) for m in messages]
                try:
                    arn = self.start_execution(str(pipe["Target"]), records, name_prefix="pipe")
                except ClientError:
                    # A queue without a redrive policy would retry forever;
                    # the pipe would too, but a local run has to end.
                    failures += 1
                    for m in messages:  # visible again at once: the next receive retries it
                        sqs.change_message_visibility(
                            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                        )
                    continue
                started.append(arn)
                retried = self._sync_failures(arn, messages) if synchronous else set()
                kept += [m for m in messages if m["MessageId"] in retried]
                settled = [m for m in messages if m["MessageId"] not in retried]
                kept += self._delete_batch(sqs, url, settled)
            for m in kept:
                sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
        return started

    @staticmethod
    def _delete_batch(sqs: Any, url: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Delete a batch's settled messages in one DeleteMessageBatch; those it could not.

        The Pipes page says only that EventBridge "deletes its messages from the
        queue" once the target has processed the batch (eb-pipes-sqs.html), the
        words of Lambda's SQS page for its event source mapping (with-sqs.html).
        Which call either makes is not verified; one DeleteMessageBatch per batch
        (at most 10 entries, SQS's limit) is assumed for both, here and in the
        bench. A message whose delete fails stays in the queue and comes back,
        as it would on AWS after its visibility timeout: a duplicate, not a loss.
        """
        if not messages:
            return []
        response = sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)
            ],
        )
        return [messages[int(failed["Id"])] for failed in response.get("Failed", [])]

    @staticmethod
    def _pipe_invocation_type(pipe: Mapping[str, Any]) -> str:
        """FIRE_AND_FORGET or REQUEST_RESPONSE (AWS's default when the template names none)."""
        parameters = pipe.get("TargetParameters", {}).get("StepFunctionStateMachineParameters", {})
        return str(parameters.get("InvocationType", "REQUEST_RESPONSE"))

    def _check_sync_target(self, pipe: Mapping[str, Any]) -> None:
        """REQUEST_RESPONSE is not supported for STANDARD workflows (PipeTargetStateMachine-
        Parameters); AWS stops such a pipe (eb-pipes-error-troubleshooting.html)."""
        arn = self.state_machine_arn(str(pipe["Target"]))
        described = self.client("stepfunctions").describe_state_machine(stateMachineArn=arn)
        if described.get("type") != "EXPRESS":
            raise EngineError(
                f"pipe {pipe['name']}: REQUEST_RESPONSE needs an EXPRESS state machine, "
                f"{arn} is {described.get('type')}; AWS stops such a pipe"
            )

    def _sync_failures(self, execution_arn: str, messages: list[dict[str, Any]]) -> set[str]:
        """The messageIds a synchronously invoked target leaves in the queue.

        As EventBridge Pipes reads a Step Functions target's answer for an SQS
        source (eb-pipes-sqs.html, eb-pipes-batching-concurrency.html):
        - an execution that did not succeed (FAILED, TIMED_OUT: a customer
          invocation error, eb-pipes-error-troubleshooting.html) keeps every message;
        - an output that is empty or null, or whose batchItemFailures is empty
          or null, is complete success: none is kept;
        - an itemIdentifier that is null, empty or not a string, or an entry
          without one (a bad key name), fails the whole batch;
        - otherwise the messages named are kept. An itemIdentifier that names
          no message of the batch fails the whole batch here as well, as
          Lambda's event source mapping does; for Pipes that is not verified.
        """
        everything = {str(m["MessageId"]) for m in messages}
        result = self.wait(execution_arn, timeout=limits.EXPRESS_DURATION_LIMIT + 60)
        if result.status != "SUCCEEDED":
            return everything
        output = result.output
        if output is None or output == {} or output == "":
            return set()
        if not isinstance(output, dict):
            return everything  # not the payload a partial failure is read from
        failures = output.get("batchItemFailures")
        if failures is None or failures == []:
            return set()
        if not isinstance(failures, list):
            return everything
        named: set[str] = set()
        for entry in failures:
            identifier = entry.get("itemIdentifier") if isinstance(entry, dict) else None
            if not isinstance(identifier, str) or identifier not in everything:
                return everything
            named.add(identifier)
        return named

    @staticmethod
    def _pipe_record(message: dict[str, Any], source_arn: str) -> dict[str, Any]:
        """One SQS message as EventBridge Pipes hands it to a target."""
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message.get("Body", ""),
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {
                name: {
                    "stringValue": value.get("StringValue"),
                    "dataType": value["DataType"],
                }
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": source_arn,
            "awsRegion": REGION,
        }

    def run_out_of_time(self, execution_arn: str) -> None:
        """Spend a running EXPRESS execution's five minutes on its clock, as a call that
        ran that long would: its next history event ends it in ExecutionTimedOut
        (States.Timeout), as AWS ends an EXPRESS execution at five minutes. For chaos:
        an EXPRESS execution cannot be stopped (StopExecution is STANDARD only)."""
        backend = stepfunctions_parser_backends[ACCOUNT_ID][REGION]
        execution = backend.describe_execution(execution_arn)
        record = limits.execution_limits(execution.exec_worker.env)  # type: ignore[attr-defined]
        if record is None or not record.express:
            raise EngineError(f"{execution_arn} is not a running EXPRESS execution")
        record.advance(max(record.remaining(), 0.0) / max(1.0 - record.clock.scale, 1e-9))

    def wait_for_running(
        self, state_machine: str, timeout: float = 600.0, ignore: Collection[str] = ()
    ) -> list[str]:
        """Wait until no execution of the state machine is RUNNING (those another one started).

        Executions in ``ignore`` are not waited for. Returns the ARNs waited for.
        """
        sfn = self.client("stepfunctions")
        arn = self.state_machine_arn(state_machine)
        deadline = time.monotonic() + timeout
        waited: list[str] = []
        while True:
            running = [
                e["executionArn"]
                for page in sfn.get_paginator("list_executions").paginate(
                    stateMachineArn=arn, statusFilter="RUNNING"
                )
                for e in page["executions"]
                if e["executionArn"] not in ignore
            ]
            if not running:
                return waited
            for execution in running:
                waited.append(execution)
                self.wait(execution, max(deadline - time.monotonic(), 0.1))

    def execute(
        self,
        state_machine: str,
        execution_input: Any,
        name: str | None = None,
        timeout: float = 120.0,
    ) -> ExecutionResult:
        return self.wait(self.start_execution(state_machine, execution_input, name), timeout)
