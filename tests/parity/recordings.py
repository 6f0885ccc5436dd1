"""Read AWS recordings from LocalStack's Step Functions suite: what each test ran, what AWS said.

Each `*.snapshot.json` under tests/aws/services/stepfunctions/v2/ of
github.com/localstack/localstack keeps, per test, what real AWS answered; the test is marked
`@markers.aws.validated` and listed in the `.validation.json` beside it. To know what a test
ran, its body is executed here with stand-ins for LocalStack's fixtures and clients: they
record the resources the test creates (Lambda functions with their handler files, queues,
tables, buckets, objects) and catch the definition and input it hands to
`create_and_record_execution` (or to StartExecution). A statement that needs something the
stand-ins cannot give is passed over: what matters is what reaches the execution.
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import os
import re
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from onceflow.local.provisioning import ACCOUNT_ID, REGION

SUITE = "tests/aws/services/stepfunctions"
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
    kind: str = "STANDARD"
    # The test recorded with SfnNoneRecursiveParallelTransformer: the events inside a
    # Parallel state were sorted and their ids zeroed (they interleave differently each run).
    unordered_parallel: bool = False
    functions: dict[str, str] = field(default_factory=dict)  # name -> handler source
    timeouts: dict[str, int] = field(default_factory=dict)  # name -> the function's Timeout
    setup: list[dict[str, Any]] = field(default_factory=list)  # calls made before the run
    names: list[str] = field(default_factory=list)  # generated names LocalStack masked
    masks: list[str] = field(default_factory=list)  # texts its RegexTransformers masked
    expected: str = ""  # in a fixed selection: the verdict it had when selected


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
        archive = subprocess.run(
            ["git", f"--git-dir={source}", "archive", "HEAD", SUITE],
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


class _Anything:
    """Whatever a statement asks of it: used for what the replay does not need."""

    def __getattr__(self, name: str) -> _Anything:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return self

    def __getitem__(self, key: Any) -> _Anything:
        return self

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class _Ran(Exception):
    """The test handed over its definition and input: stop executing it."""

    def __init__(self, definition: Any, execution_input: Any, kind: str) -> None:
        super().__init__()
        self.definition, self.input, self.kind = definition, execution_input, kind


def _ran(args: tuple[Any, ...], kwargs: dict[str, Any], kind: str = "STANDARD") -> _Ran:
    texts = [a for a in args if isinstance(a, str)]
    definition = kwargs.get("definition")
    execution_input = kwargs.get("execution_input", kwargs.get("input"))
    if definition is None:
        definition = next((t for t in texts if '"States"' in t), None)
    if execution_input is None and definition in texts:
        rest = texts[texts.index(definition) + 1 :]
        execution_input = rest[0] if rest else None
    return _Ran(definition, execution_input, kind)


class _Recorder:
    """The resources a test creates, as calls to replay on the engine."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.functions: dict[str, str] = {}
        self.timeouts: dict[str, int] = {}
        self.setup: list[dict[str, Any]] = []
        self.names: list[str] = []
        self.definition: Any = None
        self.kind = "STANDARD"
        # LocalStack's RegexTransformer(value, replacement): both texts mean one masked value.
        self.masks: list[str] = []

    def regex_transformer(self, value: Any, replacement: Any = "", *_: Any, **__: Any) -> Any:
        self.masks += [str(v) for v in (value, replacement) if isinstance(v, str) and v]
        return _Anything()

    def call(self, service: str, operation: str, params: dict[str, Any]) -> Any:
        if service == "stepfunctions":
            if operation == "create_state_machine":
                self.definition = params.get("definition")
                self.kind = params.get("type", "STANDARD")
                return {"stateMachineArn": _Anything()}
            if operation == "start_execution":
                raise _Ran(self.definition, params.get("input"), self.kind)
            if operation == "start_sync_execution":
                raise _Ran(self.definition, params.get("input"), "EXPRESS_SYNC")
            return _Anything()
        self.setup.append({"service": service, "operation": operation, "params": params})
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
        self.names.append(func_name)
        function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{func_name}"
        return {"CreateFunctionResponse": {"FunctionArn": function_arn, "FunctionName": func_name}}

    def sqs_create_queue(self, QueueName: str | None = None, **kwargs: Any) -> str:
        name = QueueName or f"queue-{_short_uid()}"
        self.names.append(name)
        params = {"QueueName": name, **kwargs}
        return str(self.call("sqs", "create_queue", params)["QueueUrl"])

    def dynamodb_create_table(
        self, table_name: str | None = None, partition_key: str = "id", **_: Any
    ) -> Any:
        name = table_name or f"table-{_short_uid()}"
        self.names.append(name)
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
        self.names.append(name)
        self.call("s3", "create_bucket", {"Bucket": name})
        return name


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

    def record(*args: Any, **kwargs: Any) -> Any:
        raise _ran(args, kwargs)

    def express(*args: Any, **kwargs: Any) -> Any:
        raise _ran(args, kwargs, "EXPRESS")

    namespace: dict[str, Any] = {"json": json, "__builtins__": __builtins__}
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
            elif alias.name.startswith("create_and_record") or alias.name.startswith("launch_and"):
                namespace[local] = express if "express" in alias.name else record
            elif (node.module or "").startswith(STATES_PREFIX + ".v2"):
                namespace[local] = _helper(root, node.module or "", alias.name, namespace)
            else:
                namespace[local] = anything
    # The module's own helpers and constants.
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.Assign | ast.AnnAssign):
            _try(node, namespace)
    return namespace


def _helper(root: Path, module: str, name: str, namespace: dict[str, Any]) -> Any:
    """A helper from a sibling utils.py, defined in the test's namespace."""
    path = root.parents[3] / (module.replace(".", "/") + ".py")
    if not path.exists():
        return _Anything()
    for node in ast.parse(path.read_text()).body:
        if getattr(node, "name", None) == name or isinstance(node, ast.Assign):
            _try(node, namespace)
    return namespace.get(name, _Anything())


def _try(node: ast.stmt, namespace: dict[str, Any]) -> None:
    try:
        exec(compile(ast.Module([node], []), "<recording>", "exec"), namespace)
    except _Ran:
        raise
    except Exception:
        pass


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
) -> tuple[_Recorder, _Ran] | str:
    """Run the test body with stand-ins: what it created and ran, or why it cannot be told."""
    bound = _bind(function, param)
    if bound is None:
        return f"no parametrize combination gives the id [{param}]"
    recorder = _Recorder(root)
    namespace = _namespace(tree, root, classes, recorder)
    namespace["RegexTransformer"] = recorder.regex_transformer
    if "Thread(" in ast.unparse(function):
        return "another party (a thread of the test) acts on the running execution"
    for argument in function.args.args:
        name = argument.arg
        if name == "aws_client":
            namespace[name] = _Clients(recorder)
        elif name in SUPPORTED_FIXTURES:
            namespace[name] = getattr(recorder, name)
        elif name.startswith(_UNSUPPORTED) or name in ("sfn_create_log_group",):
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
    except _Ran as ran:
        if not isinstance(ran.definition, str) or ran.kind == "EXPRESS_SYNC":
            return (
                "ran no readable definition" if ran.kind != "EXPRESS_SYNC" else "a sync EXPRESS run"
            )
        return recorder, ran
    return "the test started no execution the stand-ins saw"


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


def discover(root: Path, filters: Sequence[str] = ()) -> tuple[list[Case], list[Skip]]:
    """Every recording under root/v2 whose id holds one of filters (or all, with none):
    replayable, or why not."""
    classes = template_classes(root)
    cases: list[Case] = []
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
            events = _history(entry["recorded-content"])
            if events is None:
                skips.append(Skip(key, relative, "no single execution history recorded"))
                continue
            prepared = prepare(root, module, tree, found[0], param.removesuffix("]"), classes)
            if isinstance(prepared, str):
                skips.append(Skip(key, relative, prepared))
                continue
            recorder, ran = prepared
            try:
                definition = json.loads(ran.definition)
                execution_input = json.loads(ran.input) if isinstance(ran.input, str) else ran.input
            except ValueError as exc:
                skips.append(Skip(key, relative, f"definition or input not JSON: {exc}"))
                continue
            source = ast.unparse(found[0])
            cases.append(
                Case(
                    key=key,
                    snapshot=relative,
                    definition=definition,
                    input={} if execution_input is None else execution_input,
                    recorded=events,
                    kind=ran.kind,
                    unordered_parallel="SfnNoneRecursiveParallelTransformer" in source,
                    functions=recorder.functions,
                    timeouts=recorder.timeouts,
                    setup=recorder.setup,
                    names=recorder.names,
                    masks=recorder.masks,
                )
            )
    return cases, skips
