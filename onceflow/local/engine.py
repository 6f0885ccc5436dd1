"""The embedded local engine: LocalEngine is the stack's lifecycle and its clients; what it
does lives by concern in provisioning, executions and ingress (docs/architecture.md)."""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import boto3
import botocore.loaders
import botocore.session
from botocore.exceptions import ClientError
from moto import mock_aws

from onceflow.local import (
    RECURSION_LIMIT,
    executions,
    iam,
    ingress,
    jsonata_node,
    limits,
    patches,
    provisioning,
)
from onceflow.local.errors import EngineError
from onceflow.local.executions import ExecutionResult, execution_name
from onceflow.local.lambdas import FUNCTION_OUTPUT, InProcessRuntime
from onceflow.local.provisioning import ACCOUNT_ID, DEFAULT_TEMPLATE, PROJECT_ROOT, REGION
from onceflow.local.template import Stack

__all__ = [
    "ACCOUNT_ID", "DEFAULT_TEMPLATE", "PROJECT_ROOT", "REGION", "EngineError", "ExecutionResult",
    "LocalEngine", "execution_name",
]  # fmt: skip

# While any engine runs, the heap the first one started with is frozen and the recursion limit
# raised: docs/local-engine.md, "What each speed-up gains" (its last paragraph) and "Handlers
# run in the engine's Python" (Parity).
_HEAP = {"engines": 0, "frozen_by_us": False, "recursion_before": 0}
_HEAP_LOCK = threading.Lock()


def _freeze_heap(engines: int) -> None:
    """One engine more (engines=1) or fewer (-1)."""
    with _HEAP_LOCK:
        if engines > 0 and _HEAP["engines"] == 0:
            _HEAP["recursion_before"] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(RECURSION_LIMIT, sys.getrecursionlimit()))
            _HEAP["frozen_by_us"] = gc.get_freeze_count() == 0
            if _HEAP["frozen_by_us"]:
                gc.freeze()
        _HEAP["engines"] += engines
        if engines < 0 and _HEAP["engines"] == 0:
            sys.setrecursionlimit(int(_HEAP["recursion_before"]))
            if _HEAP["frozen_by_us"]:
                gc.unfreeze()


# One loader of botocore's data files for every engine of the process: a session of its own
# parses each model again, 5x an engine start's CPU (local-engine.md, speed-ups).
_LOADER = botocore.loaders.create_loader()


def _default_session_with_the_loader() -> None:
    """boto3's default session, which moto's start emptied (a fresh one for the mock, made
    by the first boto3.client: the handlers' clients, at every engine's start), made now
    with that loader: made lazily it read S3's model and the endpoint rules anew, 50 ms of
    CPU an engine. Made after patches.install, it takes the engine's handlers as a lazy one
    does (BUILTIN_HANDLERS); moto's stop puts back the one there was before."""
    if boto3.DEFAULT_SESSION is None:
        core = botocore.session.get_session()
        core.register_component("data_loader", _LOADER)
        boto3.setup_default_session(botocore_session=core)


class LocalEngine:
    """Creates the template's resources in moto and runs executions and invocations.
    Use as a context manager; everything lives in memory and is gone at exit."""

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
        # A template that nests onceflow as an application (examples/) is the parent: its
        # resources are created too; self.stack is the nested one every command acts on.
        self.parent: Stack | None = None
        self._nested = self.stack.nested_application()
        if self._nested is not None:
            self.parent, self.stack = self.stack, self._nested[1]
        # This engine's clock, request log, faults, functions and executions in the patches.
        self.state = patches.EngineState(name=stack_name, clock=patches.Clock(time_scale))
        self.runtime = InProcessRuntime()
        # A handler's calls are this engine's work, on whichever thread it runs.
        self.runtime.around = lambda: patches.hooks.working_for(self.state)
        self.function_log = function_log
        self.function_log_level = function_log_level
        # What monitoring.materialize makes in moto when first read: (service, operation,
        # request, the logical id whose Ref becomes the answer's SubscriptionArn).
        self.unmade: list[tuple[str, str, dict[str, Any], str]] = []
        self.rules: dict[str, dict[str, Any]] = {}
        self.pipes: dict[str, dict[str, Any]] = {}
        self._creating: set[str] = set()
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._undo = ExitStack()  # what start() did, for stop()
        self._started = False
        self._saved_env: dict[str, str | None] = {}
        # The template's IAM roles, enforced (the parent's too).
        self.access = iam.AccessControl(self.stack, (self.parent,) if self.parent else ())
        for stack in (self.stack, self.parent):
            if stack is not None:
                stack.create = lambda logical_id: provisioning.create(self, logical_id)

    # ---- lifecycle -----------------------------------------------------------

    def __enter__(self) -> LocalEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """stop() undoes, newest first, what start() did (all of it, or as far as it came):
        each step's undoing is pushed before the step, and undoes nothing it did not do."""
        if self._started:  # its resources went with moto's state when it stopped
            raise EngineError("a LocalEngine starts once: make a new LocalEngine to start again")
        self._started = True
        self.state.requests.clear()  # a new engine is a new world: no requests of an earlier one
        jsonata_node.evaluator().warm()  # node and jsonata 2.0.6 are there, or fail now
        # moto logs every ASL error it handles (a Catch is normal control flow here).
        logging.getLogger("moto.stepfunctions").setLevel(logging.CRITICAL)
        # In-process, concurrent invocations share one Powertools Metrics object: one may
        # flush what another added and warn that its own set is empty (never in a sandbox).
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        undo = self._undo
        try:
            undo.callback(self._restore_env)
            self._set_env({"AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION})
            self.runtime.function_log = self.function_log or sys.stderr
            FUNCTION_OUTPUT.install()
            undo.callback(FUNCTION_OUTPUT.uninstall)
            undo.enter_context(mock_aws(config={"stepfunctions": {"execute_state_machine": True}}))
            undo.callback(self.state.invokers.clear)
            undo.callback(self.state.finished.clear)
            undo.callback(patches.uninstall, self.state)  # the last engine's takes them away
            patches.install(self.state)
            _default_session_with_the_loader()
            undo.callback(limits.uninstall, self)
            limits.install(self)  # AWS's quotas (history, sizes, timeouts)
            provisioning.create_all(self)
            # Import every handler now, before executions run them from several threads.
            self.runtime.cold_start()
            for spec in list(self.runtime.functions.values()):
                self.runtime.load(spec)
            undo.callback(self.access.stop)
            self.access.start(self.runtime)  # every resource exists: the roles resolve
            ingress.check_pipe_roles(self)
            _freeze_heap(1)
            undo.callback(_freeze_heap, -1)
            # First at stop: what the engine runs ends with it, not in the next engine.
            undo.callback(executions.end_running, self)
        except BaseException:  # Ctrl-C mid-start too: undone as far as it got
            self.stop()
            raise

    def stop(self) -> None:
        self._undo.close()

    def _restore_env(self) -> None:
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

    def client(self, service: str) -> Any:
        """A boto3 client shared by every thread, each made under a lock (clients are
        thread-safe, sessions are not): "one client per service" in docs/local-engine.md."""
        with self._clients_lock:
            if service not in self._clients:
                if self._session is None:
                    # one session for the engine's clients, each made under this lock: a
                    # session registers botocore's builtin handlers as it is made (a third
                    # of an engine's start when each client had its own); a client takes
                    # a copy of the session's handlers (botocore args.py), as before
                    core = botocore.session.get_session()
                    core.register_component("data_loader", _LOADER)
                    self._session = boto3.session.Session(botocore_session=core, region_name=REGION)
                client = self._session.client(service)  # type: ignore[call-overload]
                # The operator's: unchecked by IAM wherever its calls are made (a test
                # reading the ledger from inside a handler is the operator, not the function).
                operator = functools.partial(iam.acting_as, None)
                self._clients[service] = patches.hooks.on_behalf_of(self.state, client, operator)
            return self._clients[service]

    # ---- resources (provisioning.py creates them) -------------------------------

    def ref(self, logical_id: str) -> str:
        return self.stack.ref(logical_id)

    def get_att(self, logical_id: str, attribute: str) -> str:
        return self.stack.get_att(logical_id, attribute)

    def ingest_bucket(self) -> str:
        """The bucket whose uploads the stack processes: its own IngestBucket, or the one
        ExistingBucketName names (the template's IngestBucketName output follows both)."""
        return self.outputs().get("IngestBucketName") or self.ref("IngestBucket")

    def outputs(self) -> dict[str, str]:
        return {
            name: str(self.stack.resolve(spec["Value"]))
            for name, spec in self.stack.template.get("Outputs", {}).items()
            if "Condition" not in spec or self.stack.condition(spec["Condition"])
        }

    def state_machine_definition(self, logical_id: str) -> tuple[str, str]:
        """(definition text, workflow type) after DefinitionSubstitutions."""
        return provisioning.state_machine_definition(self.stack, logical_id)

    def deliver_inventory(
        self,
        bucket: str = "IngestBucket",
        when: datetime | None = None,
        configuration_id: str | None = None,
    ) -> str:
        """Deliver a bucket's S3 Inventory report now, as S3 does on its schedule; the
        manifest's key. bucket: a logical id or a bucket's name. docs/local-engine.md
        ("S3 Inventory reports") says which configuration, and when EngineError instead."""
        from onceflow.local import inventory

        name = self.ref(bucket) if bucket in self.stack.template["Resources"] else bucket
        listed = self.client("s3").list_bucket_inventory_configurations(Bucket=name)
        configurations = [
            inventory.as_template(c)
            for c in listed.get("InventoryConfigurationList") or []
            if c.get("IsEnabled") and configuration_id in (None, c["Id"])
        ]
        if not configurations:
            named = f" {configuration_id}" if configuration_id else ""
            raise EngineError(f"{bucket} has no S3 Inventory{named} configured (AuditInventory)")
        if len(configurations) > 1:
            ids = ", ".join(sorted(c["Id"] for c in configurations))
            raise EngineError(f"{bucket} has several S3 Inventories ({ids}): name one")
        (configuration,) = configurations
        destination = configuration["Destination"]
        prefix = destination["Prefix"].rstrip("/")
        key_arn = f"{destination['BucketArn']}/{prefix + '/' if prefix else ''}{name}/"
        refused = inventory.delivery_refused(
            self._bucket_policy(destination["BucketArn"].rpartition(":::")[2]),
            name,
            str(self.stack.pseudo("AWS::AccountId")),
            key_arn + f"{configuration['Id']}/manifest.json",
        )
        if refused:
            raise EngineError(refused)
        return inventory.deliver(self.client("s3"), name, configuration, when or datetime.now(UTC))

    def _bucket_policy(self, bucket: str) -> dict[str, Any] | None:
        """A bucket's policy: the template's (AWS::S3::BucketPolicy is not put on the local
        bucket), else one put on it by hand, else None."""
        for logical_id, resource in self.stack.template["Resources"].items():
            properties = resource.get("Properties", {})
            if (
                resource.get("Type") == "AWS::S3::BucketPolicy"
                and self.stack.resource_enabled(logical_id)
                and self.stack.resolve(properties.get("Bucket")) == bucket
            ):
                return dict(self.stack.resolve(properties.get("PolicyDocument")))
        try:
            text = self.client("s3").get_bucket_policy(Bucket=bucket)["Policy"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchBucketPolicy":
                raise
            return None
        return dict(json.loads(text))

    def successful_puts(self, bucket: str) -> Counter[str]:
        """PutObjects into bucket that S3 accepted, by key: writes that took effect."""
        return Counter(
            r.key
            for r in self.state.requests.snapshot()
            if (r.service, r.operation, r.bucket, r.status) == ("s3", "PutObject", bucket, 200)
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

    # ---- executions (executions.py) ------------------------------------------

    def _machines(self) -> list[str]:
        resources = self.stack.template["Resources"].items()
        return [lid for lid, r in resources if r["Type"] == "AWS::Serverless::StateMachine"]

    def state_machine_arn(self, logical_id_or_arn: str) -> str:
        if logical_id_or_arn.startswith("arn:"):
            return logical_id_or_arn
        if logical_id_or_arn not in (machines := self._machines()):
            has = ", ".join(machines) or "none (neither onceflow's nor an app that nests it)"
            raise EngineError(f"no state machine {logical_id_or_arn!r}; the template has {has}")
        return self.ref(logical_id_or_arn)

    def state_machines(self) -> dict[str, str]:
        """ARN -> logical id of the template's state machines that exist (one whose
        Condition is false, such as BatchProcessorStateMachine by default, has no ARN)."""
        return {self.ref(lid): lid for lid in self._machines() if self.stack.refs.get(lid)}

    # Each of these is its module's function, called with this engine (but run_out_of_time).
    start_execution = executions.start
    wait = executions.wait
    wait_for_running = executions.wait_for_running
    list_executions = executions.listed
    run_out_of_time = staticmethod(executions.run_out_of_time)
    put_event = ingress.put_event
    put_custom_event = ingress.put_custom_event
    put_s3_event = ingress.put_s3_event
    s3_object_created_event = ingress.s3_object_created_event
    pump_pipes = ingress.pump_pipes

    def execute(
        self, state_machine: str, execution_input: Any, name: str | None = None,
        timeout: float = 120.0,
    ) -> ExecutionResult:  # fmt: skip
        return self.wait(self.start_execution(state_machine, execution_input, name), timeout)
