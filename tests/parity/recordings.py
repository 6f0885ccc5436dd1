"""Read AWS recordings from LocalStack's Step Functions suite: what each test ran, what AWS said.

Each `*.snapshot.json` under tests/aws/services/stepfunctions/v2/ of
github.com/localstack/localstack keeps, per test, what real AWS answered; the test is marked
`@markers.aws.validated` and listed in the `.validation.json` beside it. To know what a test
ran, its body is executed here with stand-ins for LocalStack's fixtures and clients: they
record the resources the test creates (Lambda functions with their handler files, queues,
tables, buckets, objects) and catch the definition and input it hands to
`create_and_record_execution` (or to StartExecution), and the snapshot transformers the test,
its fixtures and LocalStack's helpers register (`snapshot.Spec`), so that the local run can be
written through the same ones. A statement that needs something the stand-ins cannot give is
passed over: what matters is what reaches the execution; a stand-in never turns into text (a
definition or an input built from one would be wrong), and a transformer statement passed
over makes the recording unreplayable rather than compared without it.
"""

from __future__ import annotations

import ast
import base64
import datetime
import io
import itertools
import json
import os
import re
import subprocess
import tarfile
import tempfile
import types
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from onceflow.local.provisioning import ACCOUNT_ID, REGION
from tests.parity import snapshot
from tests.parity.snapshot import Spec

if TYPE_CHECKING:
    from tests.parity import api

SUITE = "tests/aws/services/stepfunctions"
API = "localstack-core/localstack/aws/api"  # LocalStack's AWS API types and enums
STATES_PREFIX = "tests.aws.services.stepfunctions"

# Fixtures whose resources the stand-ins create on the engine.
SUPPORTED_FIXTURES = {
    "create_lambda_function",
    "sqs_create_queue",
    "dynamodb_create_table",
    "s3_create_bucket",
}
# Fixtures that make what the engine cannot give a replay (activities, other services).
_UNSUPPORTED = (
    "lambda_",
    "sqs_",
    "sns_",
    "dynamodb_",
    "s3_",
    "events_",
    "kms_",
    "secretsmanager_",
    "create_activity",
    "ecs_",
    "create_rest_api",
    "create_rest_apigw",
    "sfn_activity",
    "mock_config",
    "sfn_create_log_group",
)


@dataclass
class Case:
    """One AWS recording, ready to replay: the definition and input the test used."""

    key: str  # the snapshot's test id: path::Class::test[param]
    snapshot: str  # the snapshot file, relative to the suite
    definition: dict[str, Any]
    input: Any
    recorded: list[dict[str, Any]]  # the recorded history events
    # The input as the test gave StartExecution: its text (the first state's input in the
    # history is this text as given); None: the test gave none.
    input_text: str | None = None
    kind: str = "STANDARD"
    machine_name: str = ""  # the state machine's name (the transformers name it)
    execution_name: str | None = None  # given by the test, or the engine's own
    functions: dict[str, str] = field(default_factory=dict)  # name -> handler source
    timeouts: dict[str, int] = field(default_factory=dict)  # name -> the function's Timeout
    setup: list[dict[str, Any]] = field(default_factory=list)  # calls made before the run
    # The snapshot transformers the recording was written through, in their order.
    transformers: list[dict[str, Any]] = field(default_factory=list)
    expected: str = ""  # in a fixed selection: the verdict it had when selected

    @property
    def specs(self) -> list[Spec]:
        return [Spec.from_json(t) for t in self.transformers]


@dataclass
class Skip:
    key: str
    snapshot: str
    reason: str


def suite_root(source: Path) -> Iterator[Path]:
    """The suite's folder: source itself (a checkout or an extract), or a bare git dir's
    HEAD extracted to a temporary folder for the caller's lifetime."""
    if (source / SUITE).is_dir():
        yield source / SUITE
        return
    with tempfile.TemporaryDirectory(prefix="sfn-recordings-") as tmp:
        paths = [SUITE]
        found = subprocess.run(
            ["git", f"--git-dir={source}", "cat-file", "-e", f"HEAD:{API}"], capture_output=True
        )
        if found.returncode == 0:  # the enums the tests pass (LogType.Tail, ...)
            paths.append(API)
        archive = subprocess.run(
            ["git", f"--git-dir={source}", "archive", "HEAD", *paths],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / SUITE


_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)
_TRAILING_COMMA = re.compile(r'"(?:\\.|[^"\\])*"|,(\s*[}\]])', re.S)


def load_json5(text: str) -> Any:
    """The JSON5 the suite's templates are written in (comments, trailing commas)."""
    text = _COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)
    text = _TRAILING_COMMA.sub(lambda m: m.group(1) if m.group(1) else m.group(0), text)
    return json.loads(text)


# ---- stand-ins -------------------------------------------------------------------


class StandIn(Exception):
    """A stand-in was asked to become text: what it would give is unknown here."""


class _Anything:
    """Whatever a statement asks of it: used for what the replay does not need. It never
    turns into text, so a definition, an input or a name built from one is never replayed."""

    def __getattr__(self, name: str) -> _Anything:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return self

    def __getitem__(self, key: Any) -> _Anything:
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __str__(self) -> str:
        raise StandIn("a value of a fixture or client the replay does not stand in for")

    def __format__(self, spec: str) -> str:
        raise StandIn("a value of a fixture or client the replay does not stand in for")


class _Ran(Exception):
    """The test started an execution: its definition, input and kind."""

    def __init__(
        self, definition: Any, execution_input: Any, kind: str, machine_name: str = "",
        execution_name: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.definition, self.input, self.kind = definition, execution_input, kind
        self.machine_name, self.execution_name = machine_name, execution_name


class _Stop(Exception):
    """A second execution: the replay keeps the first."""


class _ExecutionArn(str):
    """The ARN of the execution the replay starts: known once it has run."""


ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/replay"
# The helpers of localstack.testing.pytest.stepfunctions.utils the stand-ins reproduce,
# transformers included; a recording made through another helper is not replayed.
_HELPERS = (
    "create_state_machine_with_iam_role",
    "launch_and_record_execution",
    "create_and_record_execution",
)


class _Snapshot:
    """The sfn_snapshot fixture: keeps the transformers registered on it, in their order."""

    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder
        self.transform = _Utility(recorder)

    def add_transformer(self, transformer: Any, *, priority: int | None = 0) -> None:
        if isinstance(transformer, list):
            self.add_transformers_list(transformer, priority)
        else:
            self._recorder.add(transformer, priority or 0)

    def add_transformers_list(self, transformers: list[Any], priority: int | None = 0) -> None:
        for transformer in transformers:
            self._recorder.add(transformer, priority or 0)

    def match(self, *_: Any, **__: Any) -> None:
        return None

    match_object = match


class _Utility:
    """TransformerUtility (LocalStack's, transformer_utility.py) as the suite calls it."""

    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return lambda *_, **__: Spec("unsupported", f"TransformerUtility.{name}")

    @staticmethod
    def key_value(
        key: str, value_replacement: str | None = None, reference_replacement: bool = True
    ) -> Spec:
        return snapshot.key_value(key, value_replacement, reference_replacement)

    @staticmethod
    def regex(regex: Any, replacement: str) -> Spec:
        return _regex(regex, replacement)

    @staticmethod
    def text(text: str, replacement: str) -> Spec:
        return Spec("text", text, replacement)

    @staticmethod
    def jsonpath(jsonpath: str, value_replacement: str, reference_replacement: bool = True) -> Spec:
        return Spec("jsonpath", jsonpath, value_replacement, reference_replacement)

    @staticmethod
    def json_string(key: str) -> Spec:
        return Spec("json_string", key)

    @staticmethod
    def remove_key(key: str) -> Spec:
        return Spec("remove_key", key)

    @staticmethod
    def resource_name(replacement_name: str = "resource") -> Spec:
        return Spec("match", "resource_name", replacement_name)

    @staticmethod
    def dynamodb_api() -> list[Spec]:
        return [snapshot.regex(r"([a-zA-Z0-9-_.]*)?test_table_([a-zA-Z0-9-_.]*)?", "<test-table>")]

    @staticmethod
    def sqs_api() -> list[Spec]:
        return [
            snapshot.key_value("ReceiptHandle"),
            snapshot.key_value("TaskHandle"),
            snapshot.key_value("SenderId"),
            snapshot.key_value("SequenceNumber"),
            Spec("jsonpath", "$..MessageAttributes.RequestID.StringValue", "request-id"),
            Spec("match", "resource_name", "resource"),
        ]

    def sfn_sqs_integration(self) -> list[Spec]:
        return [
            *self.sqs_api(),
            snapshot.key_value("MD5OfMessageBody"),
            snapshot.key_value("MD5OfMessageAttributes"),
        ]

    @staticmethod
    def stepfunctions_api() -> list[Spec]:
        return snapshot.stepfunctions_api()

    @staticmethod
    def sfn_sm_create_arn(create_sm_res: Any, index: int) -> Spec:
        arn = create_sm_res["stateMachineArn"]
        if not isinstance(arn, str):
            return Spec("unsupported", "sfn_sm_create_arn of a state machine not seen")
        return snapshot.sfn_sm_create_arn(arn, index)

    @staticmethod
    def sfn_sm_exec_arn(start_exec: Any, index: int) -> Spec:
        arn = start_exec["executionArn"]
        if isinstance(arn, _ExecutionArn):
            return Spec("execution_arn", index=index)
        return Spec("unsupported", "sfn_sm_exec_arn of an execution the replay does not run")

    @staticmethod
    def sfn_map_run_arn(map_run_arn: Any, index: int) -> Spec:
        return Spec("unsupported", "sfn_map_run_arn of a map run read by the test")


def _regex(regex: Any, replacement: Any) -> Spec:
    if isinstance(regex, str | re.Pattern) and isinstance(replacement, str):
        return snapshot.regex(regex, replacement)
    return Spec("unsupported", "RegexTransformer of a value the stand-ins do not know")


def _transformer_classes(recorder: _Recorder) -> dict[str, Any]:
    """localstack_snapshot's transformer classes, as the suite's tests build them."""

    def regex_transformer(regex: Any, replacement: Any = "") -> Spec:
        return _regex(regex, replacement)

    def jsonpath_transformer(
        jsonpath: str, replacement: str, replace_reference: bool = True
    ) -> Spec:
        return Spec("jsonpath", jsonpath, replacement, replace_reference)

    def text_transformer(text: str, replacement: str) -> Spec:
        return Spec("text", text, replacement)

    def json_string_transformer(key: str) -> Spec:
        return Spec("json_string", key)

    def parallel(events_jsonpath: str = "$..events") -> Spec:
        if events_jsonpath != "$..events":
            return Spec("unsupported", f"SfnNoneRecursiveParallelTransformer({events_jsonpath})")
        return Spec("parallel")

    def unsupported(name: str) -> Any:
        return lambda *_, **__: Spec("unsupported", name)

    return {
        "RegexTransformer": regex_transformer,
        "JsonpathTransformer": jsonpath_transformer,
        "TextTransformer": text_transformer,
        "JsonStringTransformer": json_string_transformer,
        "SfnNoneRecursiveParallelTransformer": parallel,
        "KeyValueBasedTransformer": unsupported("KeyValueBasedTransformer"),
        "GenericTransformer": recorder.generic_transformer,
        "SortingTransformer": unsupported("SortingTransformer"),
        "TransformerUtility": _Utility(recorder),
    }


class _Recorder:
    """The resources a test creates, as calls to replay on the engine; the transformers it
    registers; the execution it starts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.functions: dict[str, str] = {}
        self.timeouts: dict[str, int] = {}
        self.setup: list[dict[str, Any]] = []
        self.machines: dict[str, tuple[Any, str, str]] = {}  # arn -> definition, kind, name
        # The sfn_snapshot fixture's transformers first (tests/aws/conftest.py, fixtures.py).
        self.transformers: list[Spec] = snapshot.fixtures()
        self.unsupported: list[str] = []
        self.ran: _Ran | None = None
        self.sources: dict[str, str] = {}  # the test's own functions: name -> source

    def generic_transformer(self, function: Any) -> Spec:
        """GenericTransformer(fn) of a function the test defines: its source, run again on
        the local answers (with json and re, all such functions of the suite use)."""
        source = self.sources.get(getattr(function, "__name__", ""))
        if source is None:
            return Spec("unsupported", "GenericTransformer of a function not in the test")
        return Spec("generic", source, function.__name__)

    def add(self, transformer: Any, priority: int) -> None:
        if not isinstance(transformer, Spec):
            self.unsupported.append(f"the test's own transformer {type(transformer).__name__}")
        elif transformer.kind == "unsupported":
            self.unsupported.append(transformer.a)
        else:
            self.transformers.append(replace(transformer, priority=priority))

    def create_state_machine(self, params: dict[str, Any]) -> dict[str, Any]:
        """A state machine the test creates: the one it runs is created by the replay, any
        other (a target of the one it runs) before the run, as the test made it."""
        name = str(params.get("name") or f"statemachine_{_short_uid()}")
        arn = f"arn:aws:states:{REGION}:{ACCOUNT_ID}:stateMachine:{name}"
        kind = str(params.get("type", "STANDARD"))
        self.machines[arn] = (params.get("definition"), kind, name)
        made = {"name": name, "definition": params.get("definition"), "roleArn": ROLE, "type": kind}
        self.setup.append(
            {"service": "stepfunctions", "operation": "create_state_machine", "params": made}
        )
        return {"stateMachineArn": arn, "creationDate": _Anything()}

    def start_execution(self, params: dict[str, Any], kind: str = "") -> dict[str, Any]:
        if self.ran is not None:
            raise _Stop()
        arn = params.get("stateMachineArn")
        if not isinstance(arn, str) or arn not in self.machines:
            raise _Ran(None, None, "a state machine the stand-ins did not see")
        definition, machine_kind, name = self.machines[arn]
        execution_name = params.get("name")
        self.ran = _Ran(
            definition, params.get("input"), kind or machine_kind, name,
            execution_name if isinstance(execution_name, str) else None,
        )  # fmt: skip
        execution_arn = _ExecutionArn(f"{arn}:execution")
        return {"executionArn": execution_arn, "startDate": _Anything()}

    def call(self, service: str, operation: str, params: dict[str, Any]) -> Any:
        if service == "stepfunctions" and operation == "start_execution":
            return self.start_execution(params)
        if service == "stepfunctions" and operation == "start_sync_execution":
            return self.start_execution(params, "EXPRESS_SYNC")
        if self.ran is not None:
            return _Anything()  # after the run: what the test reads or changes then
        if service == "stepfunctions":
            if operation == "create_state_machine":
                return self.create_state_machine(params)
            if operation == "delete_state_machine":
                self.setup.append({"service": service, "operation": operation, "params": params})
            return _Anything()
        self.setup.append({"service": service, "operation": operation, "params": _data(params)})
        arn = f"arn:aws:{service}:{REGION}:{ACCOUNT_ID}"
        if operation == "create_queue":
            name = params["QueueName"]
            return {"QueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT_ID}/{name}"}
        if operation == "get_queue_attributes":
            name = str(params.get("QueueUrl", "")).rsplit("/", 1)[-1]
            return {"Attributes": {"QueueArn": f"{arn}:{name}"}}
        if operation == "create_table":
            name = params["TableName"]
            return {"TableDescription": {"TableName": name, "TableArn": f"{arn}:table/{name}"}}
        return _Anything()

    # LocalStack's fixtures, as the suite calls them.
    def create_lambda_function(
        self, *, func_name: str, handler_file: str, timeout: int | None = None, **_: Any
    ) -> Any:
        self.functions[func_name] = Path(handler_file).read_text()
        # localstack.utils.testutil.create_lambda_function: LAMBDA_TIMEOUT_SEC (30) by default.
        self.timeouts[func_name] = int(timeout or 30)
        function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{func_name}"
        return {"CreateFunctionResponse": {"FunctionArn": function_arn, "FunctionName": func_name}}

    def sqs_create_queue(self, QueueName: str | None = None, **kwargs: Any) -> str:
        name = QueueName or f"queue-{_short_uid()}"
        params = {"QueueName": name, **kwargs}
        return str(self.call("sqs", "create_queue", params)["QueueUrl"])

    def dynamodb_create_table(
        self, table_name: str | None = None, partition_key: str = "id", **_: Any
    ) -> Any:
        name = table_name or f"table-{_short_uid()}"
        return self.call(
            "dynamodb",
            "create_table",
            {
                "TableName": name,
                "KeySchema": [{"AttributeName": partition_key, "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": partition_key, "AttributeType": "S"}],
                "BillingMode": "PAY_PER_REQUEST",
            },
        )

    def s3_create_bucket(self, Bucket: str | None = None, **_: Any) -> str:
        name = Bucket or f"bucket-{_short_uid()}"
        self.call("s3", "create_bucket", {"Bucket": name})
        return name

    def create_state_machine_iam_role(self, *_: Any, **__: Any) -> str:
        return ROLE

    def create_state_machine_fixture(self, *_: Any, **params: Any) -> dict[str, Any]:
        return self.create_state_machine(params)

    # localstack.testing.pytest.stepfunctions.utils, with the transformers each registers.
    def create_state_machine_with_iam_role(
        self,
        target_aws_client: Any,
        create_state_machine_iam_role: Any,
        create_state_machine: Any,
        snapshot_: _Snapshot,
        definition: Any,
        logging_configuration: Any = None,
        state_machine_name: str | None = None,
        state_machine_type: str = "STANDARD",
    ) -> str:
        name = state_machine_name or f"statemachine_create_and_record_execution_{_short_uid()}"
        specs = snapshot.create_state_machine_with_iam_role(ROLE, name)
        snapshot_.add_transformers_list(specs[:-1])
        arn = self.create_state_machine(
            {"name": name, "definition": definition, "roleArn": ROLE, "type": state_machine_type}
        )["stateMachineArn"]
        snapshot_.add_transformer(specs[-1])
        return str(arn)

    def launch_and_record_execution(
        self,
        target_aws_client: Any,
        sfn_snapshot: _Snapshot,
        state_machine_arn: str,
        execution_input: Any,
        verify_execution_description: bool = False,
    ) -> str:
        started = self.start_execution(
            {"stateMachineArn": state_machine_arn, "input": execution_input}
        )
        sfn_snapshot.add_transformers_list(snapshot.launch_and_record_execution())
        return str(started["executionArn"])

    def create_and_record_execution(
        self,
        target_aws_client: Any,
        create_state_machine_iam_role: Any,
        create_state_machine: Any,
        sfn_snapshot: _Snapshot,
        definition: Any,
        execution_input: Any,
        verify_execution_description: bool = False,
    ) -> str:
        arn = self.create_state_machine_with_iam_role(
            target_aws_client, create_state_machine_iam_role, create_state_machine,
            sfn_snapshot, definition,
        )  # fmt: skip
        return self.launch_and_record_execution(
            target_aws_client, sfn_snapshot, arn, execution_input, verify_execution_description
        )


class _Service:
    def __init__(self, recorder: _Recorder, service: str) -> None:
        self._recorder, self._service = recorder, service

    def __getattr__(self, operation: str) -> Any:
        def call(**params: Any) -> Any:
            return self._recorder.call(self._service, operation, params)

        return call


class _Clients:
    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder

    def __getattr__(self, service: str) -> _Service:
        return _Service(
            self._recorder, {"lambda_": "lambda", "awslambda": "lambda"}.get(service, service)
        )


def _short_uid() -> str:
    return uuid.uuid4().hex[:8]


class _TemplateLoader:
    @staticmethod
    def load_sfn_template(file_path: str) -> Any:
        return load_json5(Path(file_path).read_text())


# ---- reading the suite -------------------------------------------------------------


def template_classes(root: Path) -> dict[str, type]:
    """Each template class of the suite (ScenariosTemplate ...): its module run with its
    imports replaced (constants are paths and literals; load_sfn_template reads JSON5)."""
    found: dict[str, type] = {}
    for module in (root / "templates").rglob("*.py"):
        tree = ast.parse(module.read_text())
        tree.body = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom)]
        namespace: dict[str, Any] = {
            "os": os,
            "Final": Final,
            "TemplateLoader": _TemplateLoader,
            "__file__": str(module),
        }
        for node in tree.body:
            _try(node, namespace)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and isinstance(namespace.get(node.name), type):
                found[node.name] = namespace[node.name]
    return found


def _namespace(
    tree: ast.Module, root: Path, classes: dict[str, type], recorder: _Recorder
) -> dict[str, Any]:
    """What the test module's names mean here."""
    anything = _Anything()
    transformers = _transformer_classes(recorder)

    def other_helper(name: str) -> Any:
        def run(*_: Any, **__: Any) -> Any:
            raise _Ran(None, None, f"recorded through {name}, which the stand-ins do not reproduce")

        return run

    namespace: dict[str, Any] = {"json": json, "__builtins__": __builtins__, _RECORDER: recorder}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("json", "re", "os", "copy", "base64", "itertools"):
                    namespace[alias.asname or alias.name] = __import__(alias.name)
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            local = alias.asname or alias.name
            if alias.name in classes:
                namespace[local] = classes[alias.name]
            elif alias.name in ("short_uid", "long_uid"):
                namespace[local] = _short_uid
            elif alias.name in _HELPERS:
                namespace[local] = getattr(recorder, alias.name)
            elif alias.name in transformers:
                namespace[local] = transformers[alias.name]
            elif alias.name.startswith(("create_and_record", "launch_and", "create_and_run")):
                namespace[local] = other_helper(alias.name)
            elif (node.module or "").startswith(STATES_PREFIX + ".v2"):
                namespace[local] = _helper(root, node.module or "", alias.name, namespace)
            elif (module := _constants(root, f"{node.module}.{alias.name}")) is not None:
                namespace[local] = module
            elif (enum := _api_enum(root, node.module or "", alias.name)) is not None:
                namespace[local] = enum
            else:
                namespace[local] = anything
    # The module's own helpers and constants.
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.Assign | ast.AnnAssign):
            _try(node, namespace)
    return namespace


def _constants(root: Path, module: str) -> types.SimpleNamespace | None:
    """A module of the suite's that holds paths and literals (lambda_functions: the handler
    files), its imports left out; None when there is no such file."""
    if not module.startswith(STATES_PREFIX + "."):
        return None
    path = root.parents[3] / (module.replace(".", "/") + ".py")
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    namespace: dict[str, Any] = {"os": os, "Final": Final, "__file__": str(path)}
    for node in tree.body:
        if not isinstance(node, ast.Import | ast.ImportFrom):
            _try(node, namespace)
    return types.SimpleNamespace(**{k: v for k, v in namespace.items() if k.isupper()})


def _api_enum(root: Path, module: str, name: str) -> types.SimpleNamespace | None:
    """An enum of LocalStack's AWS API types (localstack.aws.api.lambda_.LogType: Tail =
    "Tail", ...) with its values; None when it is not one."""
    if not module.startswith("localstack.aws.api."):
        return None
    path = root.parents[3] / "localstack-core" / module.replace(".", "/") / "__init__.py"
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            values = {
                target.id: statement.value.value
                for statement in node.body
                if isinstance(statement, ast.Assign)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
                for target in statement.targets
                if isinstance(target, ast.Name)
            }
            return types.SimpleNamespace(**values) if values else None
    return None


def _helper(root: Path, module: str, name: str, namespace: dict[str, Any]) -> Any:
    """A helper from a sibling utils.py, defined in the test's namespace."""
    path = root.parents[3] / (module.replace(".", "/") + ".py")
    if not path.exists():
        return _Anything()
    for node in ast.parse(path.read_text()).body:
        if getattr(node, "name", None) == name or isinstance(node, ast.Assign):
            _try(node, namespace)
    return namespace.get(name, _Anything())


_RECORDER = "__replay_recorder__"


def _try(node: ast.stmt, namespace: dict[str, Any]) -> None:
    """Run one statement; one the stand-ins cannot run is passed over, unless it registers
    a snapshot transformer: then the recording is not replayed (compared without it, a
    placeholder on AWS's side would meet a local value)."""
    try:
        exec(compile(ast.Module([node], []), "<recording>", "exec"), namespace)
    except (_Ran, _Stop):
        raise
    except Exception as exc:
        recorder = namespace.get(_RECORDER)
        if isinstance(recorder, _Recorder) and "transform" in ast.unparse(node).lower():
            recorder.unsupported.append(f"a transformer statement failed here: {exc!r}"[:120])


def _auto_id(value: ast.expr, argname: str, index: int) -> str:
    if isinstance(value, ast.Constant) and isinstance(value.value, str | int | float | bool):
        return str(value.value)
    return f"{argname}{index}"


def _parametrize(decorator: ast.expr) -> list[tuple[str, dict[str, ast.expr]]] | None:
    """(id, {argname: value expression}) per element of a parametrize decorator."""
    if not (
        isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize")
    ):
        return None
    names_node, values_node = decorator.args[0], decorator.args[1]
    if isinstance(names_node, ast.Constant):
        names = [n.strip() for n in str(names_node.value).split(",") if n.strip()]
    elif isinstance(names_node, ast.List | ast.Tuple):
        names = [str(getattr(e, "value", "")) for e in names_node.elts]
    else:
        return None
    if not isinstance(values_node, ast.List | ast.Tuple):
        return None
    ids: list[Any] = []
    for keyword in decorator.keywords:
        if keyword.arg == "ids" and isinstance(keyword.value, ast.List | ast.Tuple):
            ids = [getattr(e, "value", None) for e in keyword.value.elts]
    found = []
    for index, element in enumerate(values_node.elts):
        given = ids[index] if index < len(ids) else None
        values = [element]
        if isinstance(element, ast.Call) and ast.unparse(element.func).endswith("param"):
            values = list(element.args)
            for keyword in element.keywords:
                if keyword.arg == "id":
                    given = getattr(keyword.value, "value", given)
        elif len(names) > 1 and isinstance(element, ast.Tuple | ast.List):
            values = list(element.elts)
        bound = dict(zip(names, values, strict=False))
        auto = "-".join(_auto_id(v, n, index) for n, v in bound.items())
        found.append((str(given) if given is not None else auto, bound))
    return found


def _bind(function: ast.FunctionDef, param: str) -> dict[str, ast.expr] | None:
    """The parametrize values the recording's id names (None when no combination fits)."""
    grids = [g for g in (_parametrize(d) for d in function.decorator_list) if g]
    if not grids:
        return {} if not param else None
    for order in (grids, grids[::-1]):
        for combination in itertools.product(*order):
            if "-".join(pid for pid, _ in combination) == param:
                return {k: v for _, bound in combination for k, v in bound.items()}
    return None


def prepare(
    root: Path,
    module: Path,
    tree: ast.Module,
    function: ast.FunctionDef,
    param: str,
    classes: dict[str, type],
    recorded: datetime.date | None = None,
) -> tuple[_Recorder, _Ran] | str:
    """Run the test body with stand-ins: what it created and ran, or why it cannot be told."""
    bound = _bind(function, param)
    if bound is None:
        return f"no parametrize combination gives the id [{param}]"
    recorder = _Recorder(root)
    recorder.transformers = snapshot.fixtures(recorded=recorded)
    recorder.sources = {
        node.name: ast.unparse(node)
        for node in ast.walk(function)
        if isinstance(node, ast.FunctionDef)
    }
    namespace = _namespace(tree, root, classes, recorder)
    if "Thread(" in ast.unparse(function):
        return "another party (a thread of the test) acts on the running execution"
    arguments = [a.arg for a in function.args.args]
    if "sfn_snapshot" not in arguments:  # the bare `snapshot` fixture: no stepfunctions_api
        recorder.transformers = snapshot.fixtures(stepfunctions=False, recorded=recorded)
    for name in arguments:
        if name == "aws_client":
            namespace[name] = _Clients(recorder)
        elif name in ("sfn_snapshot", "snapshot"):
            namespace[name] = _Snapshot(recorder)
        elif name == "create_state_machine":
            namespace[name] = recorder.create_state_machine_fixture
        elif name == "create_state_machine_iam_role":
            namespace[name] = recorder.create_state_machine_iam_role
        elif name in ("account_id", "region_name"):  # the engine's (then transformed)
            namespace[name] = ACCOUNT_ID if name == "account_id" else REGION
        elif name in SUPPORTED_FIXTURES:
            namespace[name] = getattr(recorder, name)
        elif name.startswith(_UNSUPPORTED) or name.endswith("_snapshot"):
            return f"needs the fixture {name}"
        else:
            namespace[name] = _Anything()
    try:
        for name, expression in bound.items():
            namespace[name] = eval(
                compile(ast.Expression(expression), "<param>", "eval"), namespace
            )
    except Exception as exc:
        return f"parameter not readable: {exc!r}"[:120]
    try:
        for statement in function.body:
            _try(statement, namespace)
    except _Stop:
        pass  # a second execution: the first is the one replayed
    except _Ran as refused:
        return refused.kind  # why the run cannot be replayed
    ran = recorder.ran
    if ran is None:
        return "the test started no execution the stand-ins saw"
    if not isinstance(ran.definition, str) or ran.kind == "EXPRESS_SYNC":
        return "ran no readable definition" if ran.kind != "EXPRESS_SYNC" else "a sync EXPRESS run"
    if recorder.unsupported:
        return (
            f"written through a transformer the replay cannot reproduce: {recorder.unsupported[0]}"
        )
    return recorder, ran


def _history(recorded: dict[str, Any]) -> list[dict[str, Any]] | None:
    histories = [v for k, v in recorded.items() if k.startswith("get_execution_history")]
    if len(histories) != 1 or "events" not in histories[0]:
        return None
    return list(histories[0]["events"])


def _validated(function: ast.FunctionDef, owner: ast.ClassDef | None) -> bool:
    decorators = function.decorator_list + (owner.decorator_list if owner else [])
    return any("aws.validated" in ast.unparse(d) for d in decorators)


def _functions(tree: ast.Module) -> dict[str, tuple[ast.FunctionDef, ast.ClassDef | None]]:
    found: dict[str, tuple[ast.FunctionDef, ast.ClassDef | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}::{item.name}"] = (item, node)
        elif isinstance(node, ast.FunctionDef):
            found[node.name] = (node, None)
    return found


def _creates(call: dict[str, Any], machine_name: str) -> bool:
    return bool(
        call["operation"] == "create_state_machine" and call["params"]["name"] == machine_name
    )


def _data(value: Any) -> Any:
    """Request parameters as JSON: bytes (an object's Body) as {"bytes": base64}."""
    if isinstance(value, bytes | bytearray):
        return {_BYTES: base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_data(v) for v in value]
    return value


def parameters(value: Any) -> Any:
    """_data's parameters as the client takes them."""
    if isinstance(value, dict):
        if set(value) == {_BYTES}:
            return base64.b64decode(value[_BYTES])
        return {k: parameters(v) for k, v in value.items()}
    if isinstance(value, list):
        return [parameters(v) for v in value]
    return value


_BYTES = "__replay_bytes_base64__"


def discover(
    root: Path, filters: Sequence[str] = ()
) -> tuple[list[Case | api.ApiCase], list[Skip]]:
    """Every recording under root/v2 whose id holds one of filters (or all, with none):
    replayable (an execution's history: Case; the API suites' answers: api.ApiCase), or why
    not."""
    from tests.parity import api

    classes = template_classes(root)
    cases: list[Case | api.ApiCase] = []
    skips: list[Skip] = []
    for snapshot_file in sorted((root / "v2").rglob("*.snapshot.json")):
        relative = str(snapshot_file.relative_to(root))
        module = snapshot_file.with_name(snapshot_file.name.replace(".snapshot.json", ".py"))
        validation = snapshot_file.with_name(
            snapshot_file.name.replace(".snapshot.json", ".validation.json")
        )
        validated = set(json.loads(validation.read_text())) if validation.exists() else set()
        tree = ast.parse(module.read_text()) if module.exists() else ast.Module([], [])
        functions = _functions(tree)
        for key, entry in json.loads(snapshot_file.read_text()).items():
            if filters and not any(f in key for f in filters):
                continue
            name, _, param = key.split(".py::", 1)[-1].partition("[")
            found = functions.get(name)
            if found is None or key not in validated or not _validated(*found):
                skips.append(Skip(key, relative, "not marked validated on AWS"))
                continue
            if api.SUITES.match(module.stem):
                prepared_api = api.prepare(
                    root, key, relative, tree, found[0], param.removesuffix("]"), classes,
                    entry["recorded-content"], snapshot.recorded_on(entry.get("recorded-date")),
                )  # fmt: skip
                if isinstance(prepared_api, str):
                    skips.append(Skip(key, relative, prepared_api))
                else:
                    cases.append(prepared_api)
                continue
            events = _history(entry["recorded-content"])
            if events is None:
                skips.append(Skip(key, relative, "no single execution history recorded"))
                continue
            recorded = snapshot.recorded_on(entry.get("recorded-date"))
            prepared = prepare(
                root, module, tree, found[0], param.removesuffix("]"), classes, recorded
            )
            if isinstance(prepared, str):
                skips.append(Skip(key, relative, prepared))
                continue
            recorder, ran = prepared
            try:
                definition = json.loads(ran.definition)
                execution_input = json.loads(ran.input) if isinstance(ran.input, str) else ran.input
                json.dumps([execution_input, recorder.setup])
            except ValueError as exc:
                skips.append(Skip(key, relative, f"definition or input not JSON: {exc}"))
                continue
            except TypeError:
                reason = "the input or a resource holds a value the stand-ins do not know"
                skips.append(Skip(key, relative, reason))
                continue
            cases.append(
                Case(
                    key=key,
                    snapshot=relative,
                    definition=definition,
                    input={} if execution_input is None else execution_input,
                    recorded=events,
                    input_text=ran.input if isinstance(ran.input, str) else None,
                    kind=ran.kind,
                    machine_name=ran.machine_name,
                    execution_name=ran.execution_name,
                    functions=recorder.functions,
                    timeouts=recorder.timeouts,
                    setup=[c for c in recorder.setup if not _creates(c, ran.machine_name)],
                    transformers=[t.to_json() for t in recorder.transformers],
                )
            )
    return cases, skips
