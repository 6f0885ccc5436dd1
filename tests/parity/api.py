"""Replay AWS-recorded Step Functions API answers (not an execution's history) on the engine.

LocalStack's API suites (tests/aws/services/stepfunctions/v2/test_sfn_api*.py, each test
marked `@markers.aws.validated`, its answers kept in the `.snapshot.json` beside it) call
StartExecution, DescribeExecution, ListExecutions, GetExecutionHistory, CreateStateMachine ...
and record each answer or error. Here the test's own body runs again, on the engine's clients,
with the same arguments: its fixtures and LocalStack's waiting helpers are stood in for
(`_Fixtures`, `await_*`), each `sfn_snapshot.match(key, value)` keeps the local answer, and
the answers go through the transformers the test registered (snapshot.py, built from the local
run's own ARNs and names) before they are compared with the recording, key by key.

So that a fixed selection replays without the suite, the body is kept as source with every
expression that reads only the test module's names (a template it loads, a handler file's
path, a parametrize value) replaced by its value (`fold`); the files it names travel with it.
"""

from __future__ import annotations

import ast
import builtins
import copy
import datetime
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine
from onceflow.local.provisioning import ACCOUNT_ID, REGION
from tests.parity import recordings, snapshot
from tests.parity.recordings import ROLE, load_json5
from tests.parity.snapshot import Run, Spec

# The Step Functions operations onceflow calls (onceflow/ops, view, functions/service/dal;
# StartSyncExecution: the template's EventBridge Pipe; CreateStateMachine: its deploy).
USED_OPERATIONS = frozenset(
    {
        "CreateStateMachine",
        "DescribeExecution",
        "DescribeStateMachine",
        "DescribeStateMachineForExecution",
        "GetExecutionHistory",
        "ListExecutions",
        "StartExecution",
        "StartSyncExecution",
        "StopExecution",
    }
)
# States an API test runs only to have an execution to ask about: outside onceflow's own
# features (JSONPath Pass, Wait), they change no API answer.
PLAIN_FEATURES = re.compile(r"^(QueryLanguage:JSONPath|(Pass|Wait|Succeed|Fail)\.\w+)$")
SUITES = re.compile(
    r"^(test_sfn_api(_express|_validation|_variable_references|_map_run)?|test_express_sync)$"
)
# Fixtures a replay stands in for; a test asking another is not replayed.
FIXTURES = {
    "self",
    "aws_client",
    "aws_client_no_retry",
    "aws_client_no_sync_prefix",
    "sqs_create_queue",
    "sfn_snapshot",
    "snapshot",
    "create_state_machine",
    "create_state_machine_iam_role",
    "create_lambda_function",
    "account_id",
    "region_name",
}
_DEADLINE = 20.0  # seconds any wait of a replay may take


@dataclass
class ApiCase:
    """One recorded API test, ready to replay: its body (folded), what AWS answered."""

    key: str
    snapshot: str
    source: str  # `def test(...)`: the folded body
    arguments: list[str]  # the fixtures it takes, in order
    recorded: dict[str, Any]  # the snapshot's recorded-content: key -> what AWS answered
    files: dict[str, str] = field(default_factory=dict)  # handler path -> its text
    transformers: list[dict[str, Any]] = field(default_factory=list)  # the fixtures' own
    expected: str = ""  # in a fixed selection: the verdict it had when selected
    recorded_date: str = ""  # ISO date the recording was made
    api: bool = True

    @property
    def specs(self) -> list[Spec]:
        return [Spec.from_json(t) for t in self.transformers]


# ---- folding the test body ---------------------------------------------------------------


def _json_literal(value: Any) -> ast.expr | None:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return None
    if isinstance(value, str | int | float | bool | dict | list) or value is None:
        return ast.parse(repr(json.loads(text)), mode="eval").body
    return None


class _Folder(ast.NodeTransformer):
    """Replace each expression that reads only module names by its JSON value."""

    def __init__(self, namespace: dict[str, Any], local: set[str], root: Path) -> None:
        self.namespace, self.local, self.root = namespace, local, root
        self.files: dict[str, str] = {}

    def _foldable(self, node: ast.expr) -> bool:
        names = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
        if not names or any(n.id in self.local for n in names):
            return False
        text = ast.unparse(node)
        return "uid" not in text and not isinstance(node, ast.Lambda)

    def relative(self, value: Any) -> str | None:
        """A file of the suite's (a template, a handler) named by its path: kept with the
        case, by its path under the checkout."""
        top = self.root.parents[3]
        if isinstance(value, str) and value.startswith(str(top)) and Path(value).is_file():
            relative = str(Path(value).relative_to(top))
            self.files[relative] = Path(value).read_text()
            return relative
        return None

    def visit_Call(self, node: ast.Call) -> Any:
        # X.load_sfn_template(path), X a template class: read from the files kept
        if isinstance(node.func, ast.Attribute) and node.func.attr == "load_sfn_template":
            node.func = ast.Name("load_sfn_template", ast.Load())
        return self.generic_visit(node)

    def visit(self, node: ast.AST) -> Any:
        stored = isinstance(getattr(node, "ctx", None), ast.Store | ast.Del)
        if isinstance(node, ast.expr) and not stored and self._foldable(node):
            try:
                value = eval(compile(ast.Expression(node), "<fold>", "eval"), self.namespace)
            except Exception:  # not a value here (a helper, a fixture): left as written
                value = _UNFOLDED
            if (relative := self.relative(value)) is not None:
                return ast.copy_location(ast.Constant(relative), node)
            literal = _json_literal(value) if value is not _UNFOLDED else None
            if literal is not None:
                return ast.copy_location(literal, node)
        return super().visit(node)


_UNFOLDED = object()


def _locals(function: ast.FunctionDef) -> set[str]:
    found = {a.arg for a in function.args.args + function.args.kwonlyargs}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.arg):
            found.add(node.name if isinstance(node, ast.FunctionDef) else node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
    return found


def fold(
    function: ast.FunctionDef, namespace: dict[str, Any], bound: dict[str, Any], root: Path
) -> tuple[str, dict[str, str]]:
    """The test function as source: parametrize values bound, module values folded in."""
    tree = copy.deepcopy(function)
    tree.decorator_list = []
    tree.name = "test"
    names = [a.arg for a in tree.args.args if a.arg not in bound]
    tree.args = ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])
    local = _locals(tree)
    folder = _Folder(namespace, local | set(bound), root)
    bound = {k: folder.relative(v) or v for k, v in bound.items()}
    assigned = [
        ast.Assign([ast.Name(k, ast.Store())], literal, lineno=0)
        for k, v in bound.items()
        if (literal := _json_literal(v)) is not None
    ]
    if len(assigned) != len(bound):
        raise ValueError("a parametrize value that is not JSON")
    tree.body = [*assigned, *[folder.visit(s) for s in tree.body]]
    ast.fix_missing_locations(tree)
    return ast.unparse(tree), folder.files


# ---- the stand-ins of a live run ---------------------------------------------------------


class _Utility:
    """TransformerUtility with the local run's own ARNs."""

    def __getattr__(self, name: str) -> Any:
        return lambda *_, **__: Spec("unsupported", f"TransformerUtility.{name}")

    key_value = staticmethod(snapshot.key_value)

    @staticmethod
    def regex(regex: Any, replacement: str) -> Spec:
        return snapshot.regex(regex, replacement)

    @staticmethod
    def sfn_sm_create_arn(create_sm_res: Any, index: int) -> Spec:
        return snapshot.sfn_sm_create_arn(create_sm_res["stateMachineArn"], index)

    @staticmethod
    def sfn_sm_exec_arn(start_exec: Any, index: int) -> Spec:
        arn = str(start_exec["executionArn"]).rpartition(":")[-1]
        return snapshot.regex(arn, f"<ExecArnPart_{index}idx>")

    @staticmethod
    def sfn_sm_sync_exec_arn(start_exec: Any, index: int) -> list[Spec]:
        *_, name, run = str(start_exec["executionArn"]).split(":")
        return [
            snapshot.regex(name, f"<SyncExecArn_Part1_{index}idx>"),
            snapshot.regex(run, f"<SyncExecArn_Part2_{index}idx>"),
        ]

    @staticmethod
    def resource_name(replacement_name: str = "resource") -> Spec:
        return Spec("match", "resource_name", replacement_name)

    @staticmethod
    def stepfunctions_api() -> list[Spec]:
        return snapshot.stepfunctions_api()


class LiveSnapshot:
    """sfn_snapshot: the transformers registered, in order, and the local answers matched."""

    def __init__(self, specs: list[Spec], calls: _Calls) -> None:
        self.specs = list(specs)
        self.unsupported: list[str] = []
        self.observed: dict[str, Any] = {}
        self.operations: dict[str, str] = {}  # key -> the operation its answer came from
        self.transform = _Utility()
        self._calls = calls

    def add_transformer(self, transformer: Any, *, priority: int | None = 0) -> None:
        for one in transformer if isinstance(transformer, list) else [transformer]:
            if not isinstance(one, Spec) or one.kind == "unsupported":
                self.unsupported.append(getattr(one, "a", type(one).__name__))
            else:
                self.specs.append(Spec(**{**one.to_json(), "priority": priority or 0}))

    def add_transformers_list(self, transformers: list[Any], priority: int | None = 0) -> None:
        self.add_transformer(transformers, priority=priority)

    def match(self, key: str, value: Any) -> None:
        self.observed[key] = value
        self.operations[key] = self._calls.origin(value)

    match_object = match


class _Calls:
    """The Step Functions operations a run makes, and which answer came from which."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.answers: dict[int, str] = {}
        self.definitions: list[str] = []  # of the state machines it creates

    def origin(self, value: Any) -> str:
        """The operation that gave value, else the last one made (a value the test built)."""
        return self.answers.get(id(value), self.made[-1] if self.made else "")


def _operation(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Client:
    """An engine client whose Step Functions calls are recorded."""

    def __init__(self, client: Any, calls: _Calls, service: str) -> None:
        self._client, self._calls, self._service = client, calls, service

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if (
            self._service != "stepfunctions"
            or not callable(attribute)
            or name.startswith(
                ("get_paginator", "get_waiter", "can_paginate", "exceptions", "meta")
            )
        ):
            return attribute

        def call(**params: Any) -> Any:
            if name == "create_state_machine" and isinstance(params.get("definition"), str):
                self._calls.definitions.append(params["definition"])
            self._calls.made.append(_operation(name))
            try:
                answer = attribute(**params)
            except ClientError as error:
                self._calls.answers[id(error)] = _operation(name)
                self._calls.answers[id(error.response)] = _operation(name)
                raise
            self._calls.answers[id(answer)] = _operation(name)
            return answer

        return call


class _Clients:
    def __init__(self, engine: LocalEngine, calls: _Calls) -> None:
        self._engine, self._calls = engine, calls

    def __getattr__(self, service: str) -> _Client:
        service = {"lambda_": "lambda", "awslambda": "lambda"}.get(service, service)
        return _Client(self._engine.client(service), self._calls, service)


def _poll(check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + _DEADLINE
    while time.monotonic() < deadline:
        try:
            if found := check():
                return found
        except ClientError:
            pass  # not there yet: asked again, as LocalStack's helpers do
        time.sleep(0.02)
    return None


_TERMINAL = {"ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut", "ExecutionSucceeded"}


def await_on_execution_events(
    stepfunctions_client: Any, execution_arn: str, check_func: Callable[[list[Any]], bool]
) -> list[Any]:
    events: list[Any] = []

    def check() -> bool:
        events[:] = sorted(
            stepfunctions_client.get_execution_history(executionArn=execution_arn)["events"],
            key=lambda e: e.get("timestamp"),
        )
        return check_func(events)

    assert _poll(check), f"{execution_arn}: the awaited events never came"
    return events


def await_execution_success(stepfunctions_client: Any, execution_arn: str) -> list[Any]:
    return await_on_execution_events(
        stepfunctions_client, execution_arn,
        lambda e: bool(e) and "executionSucceededEventDetails" in e[-1],
    )  # fmt: skip


def await_execution_terminated(stepfunctions_client: Any, execution_arn: str) -> list[Any]:
    return await_on_execution_events(
        stepfunctions_client, execution_arn,
        lambda e: bool(e) and e[-1].get("type") in _TERMINAL,
    )  # fmt: skip


def await_execution_started(stepfunctions_client: Any, execution_arn: str) -> list[Any]:
    return await_on_execution_events(
        stepfunctions_client, execution_arn,
        lambda e: bool(e) and "executionStartedEventDetails" in e[0],
    )  # fmt: skip


def await_execution_aborted(stepfunctions_client: Any, execution_arn: str) -> None:
    _poll(
        lambda: (
            stepfunctions_client.describe_execution(executionArn=execution_arn)["status"]
            == "ABORTED"
        )
    )


def await_list_execution_status(
    stepfunctions_client: Any, state_machine_arn: str, execution_arn: str, status: str
) -> None:
    _poll(
        lambda: any(
            e["executionArn"] == execution_arn and e["status"] == status
            for e in stepfunctions_client.list_executions(
                stateMachineArn=state_machine_arn, statusFilter=status
            )["executions"]
        )
    )


def await_execution_lists_terminated(
    stepfunctions_client: Any, state_machine_arn: str, execution_arn: str
) -> None:
    _poll(
        lambda: any(
            e["executionArn"] == execution_arn and e["status"] != "RUNNING"
            for e in stepfunctions_client.list_executions(stateMachineArn=state_machine_arn)[
                "executions"
            ]
        )
    )


def _listed(client: Any, arn: str) -> bool:
    pages = client.get_paginator("list_state_machines").paginate()
    return any(m["stateMachineArn"] == arn for page in pages for m in page["stateMachines"])


def await_state_machine_listed(stepfunctions_client: Any, state_machine_arn: str) -> None:
    _poll(lambda: _listed(stepfunctions_client, state_machine_arn))


def await_state_machine_not_listed(stepfunctions_client: Any, state_machine_arn: str) -> None:
    _poll(lambda: not _listed(stepfunctions_client, state_machine_arn))


def retry(function: Callable[[], Any], retries: int = 3, sleep: float = 1.0, **_: Any) -> Any:
    deadline = time.monotonic() + _DEADLINE
    while True:
        try:
            return function()
        except Exception:  # LocalStack's retry: again until its budget is spent
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def wait_until(function: Callable[[], Any], *_: Any, **__: Any) -> bool:
    return bool(_poll(function))


def short_uid() -> str:
    return uuid.uuid4().hex[:8]


_HELPERS: dict[str, Any] = {
    name: value
    for name, value in dict(globals()).items()
    if name.startswith("await_") or name in ("retry", "wait_until", "short_uid")
}
_HELPERS["long_uid"] = lambda: str(uuid.uuid4())
_HELPERS["HistoryEventList"] = list  # localstack.aws.api.stepfunctions: an annotation


class _Fixtures:
    """LocalStack's fixtures on one engine."""

    def __init__(self, engine: LocalEngine, replayer: Any, case: ApiCase) -> None:
        self.engine, self.replayer, self.case = engine, replayer, case

    def create_state_machine(self, target_aws_client: Any, **kwargs: Any) -> Any:
        return target_aws_client.stepfunctions.create_state_machine(**kwargs)

    def create_state_machine_iam_role(self, *_: Any, **__: Any) -> str:
        return ROLE

    def sqs_create_queue(self, QueueName: str | None = None, **kwargs: Any) -> str:
        name = QueueName or f"queue-{short_uid()}"
        return str(self.engine.client("sqs").create_queue(QueueName=name, **kwargs)["QueueUrl"])

    def create_lambda_function(
        self, *, func_name: str, handler_file: str, timeout: int | None = None, **_: Any
    ) -> Any:
        source = self.case.files[handler_file]
        self.replayer.create_function(self.engine, func_name, source, int(timeout or 30))
        arn = f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{func_name}"
        return {"CreateFunctionResponse": {"FunctionArn": arn, "FunctionName": func_name}}


def _transformer_classes() -> dict[str, Any]:
    def regex(regex: Any, replacement: Any = "") -> Spec:
        return snapshot.regex(regex, replacement)

    def jsonpath(jsonpath: str, replacement: str, replace_reference: bool = True) -> Spec:
        return Spec("jsonpath", jsonpath, replacement, replace_reference)

    return {
        "_SfnSortVariableReferences": lambda: Spec("sort_variable_references"),
        "RegexTransformer": regex,
        "JsonpathTransformer": jsonpath,
        "TextTransformer": lambda text, replacement: Spec("text", text, replacement),
        "JsonStringTransformer": lambda key: Spec("json_string", key),
    }


@dataclass
class LocalRun:
    """What a replay of an ApiCase saw: the answers as the recording would hold them."""

    written: dict[str, Any]
    operations: dict[str, str]
    made: list[str]
    definitions: list[str]
    raised: str = ""  # the body stopped here (an error AWS did not give, or a stand-in's)


def run_case(engine: LocalEngine, replayer: Any, case: ApiCase) -> LocalRun:
    calls = _Calls()
    live = LiveSnapshot(case.specs, calls)
    fixtures = _Fixtures(engine, replayer, case)
    clients = _Clients(engine, calls)
    namespace: dict[str, Any] = {
        "json": json,
        "pytest": pytest,
        "ClientError": ClientError,
        "__builtins__": __builtins__,
        **_HELPERS,
        **_transformer_classes(),
    }
    namespace["load_sfn_template"] = lambda path: load_json5(case.files[path])
    exec(compile(case.source, f"<{case.key}>", "exec"), namespace)
    given = {
        "self": None,
        "aws_client": clients,
        "aws_client_no_retry": clients,
        "aws_client_no_sync_prefix": clients,  # the engine routes sync-states.* itself
        "sqs_create_queue": fixtures.sqs_create_queue,
        "sfn_snapshot": live,
        "snapshot": live,
        "create_state_machine": fixtures.create_state_machine,
        "create_state_machine_iam_role": fixtures.create_state_machine_iam_role,
        "create_lambda_function": fixtures.create_lambda_function,
        "account_id": ACCOUNT_ID,
        "region_name": REGION,
    }
    raised = ""
    try:
        namespace["test"](*[given[a] for a in case.arguments])
    except (Exception, pytest.fail.Exception) as exc:  # where the local run left AWS's path
        raised = f"{type(exc).__name__}: {exc}"[:200]
    if live.unsupported:
        raise ValueError(f"a transformer the replay cannot build: {live.unsupported[0]}")
    written = snapshot.transform(live.observed, live.specs, Run("", []))
    return LocalRun(written, live.operations, calls.made, calls.definitions, raised)


# ---- comparing ---------------------------------------------------------------------------


def _refused(value: Any) -> str | None:
    """The error code of an answer that is an error, else None."""
    if isinstance(value, dict):
        if isinstance(value.get("Error"), dict):
            return str(value["Error"].get("Code"))
        if "exception_typename" in value:
            return str(value["exception_typename"])
    if isinstance(value, str) and (found := re.match(r"An error occurred \((\w+)\)", value)):
        return found.group(1)
    return None


def _billed_form(*values: Any) -> bool:
    """Whether each is a billed duration: whole 100 ms steps, at least one. Its value measures
    how long that run took (on AWS, or on the engine, slower, and slower still on a loaded
    machine: a Pass state's 100 read 200 in one CI run), not a behaviour."""
    return all(type(v) is int and v >= 100 and v % 100 == 0 for v in values)


def _deep_diff(recorded: Any, local: Any, path: str, out: list[str]) -> None:
    """replay._diff, into lists of one length too (an answer's list of executions)."""
    from tests.parity.replay import _diff

    if path.endswith(".billedDurationInMilliseconds") and _billed_form(recorded, local):
        return  # each side's own run time, billed in 100 ms steps: the form is compared
    if isinstance(recorded, list) and isinstance(local, list) and len(recorded) == len(local):
        for index, (a, b) in enumerate(zip(recorded, local, strict=True)):
            _deep_diff(a, b, f"{path}[{index}]", out)
    elif isinstance(recorded, dict) and isinstance(local, dict):
        for key in sorted(set(recorded) | set(local)):
            if key in recorded and key in local:
                _deep_diff(recorded[key], local[key], f"{path}.{key}", out)
            else:
                _diff({key: recorded.get(key)} if key in recorded else {},
                      {key: local.get(key)} if key in local else {}, path, out)  # fmt: skip
    else:
        _diff(recorded, local, path, out)


# Fields AWS began answering after some recordings were made: DescribeStateMachine's
# encryptionConfiguration is in none recorded up to 2024-06-26 (test_sfn_api_express,
# test_create_describe_delete) and in every one from 2024-11-20 on
# (test_sfn_api_variable_references); when AWS added it is not verified.
ANSWERED_SINCE = {"encryptionConfiguration": datetime.date(2024, 11, 20)}


def _as_of(recorded: Any, local: Any, day: datetime.date) -> Any:
    """local without the fields AWS did not answer yet on the recording's day."""
    if isinstance(recorded, dict) and isinstance(local, dict):
        return {
            k: _as_of(recorded.get(k), v, day)
            for k, v in local.items()
            if k in recorded or not (k in ANSWERED_SINCE and day < ANSWERED_SINCE[k])
        }
    if isinstance(recorded, list) and isinstance(local, list):
        return [_as_of(a, b, day) for a, b in zip(recorded, local, strict=False)] + local[
            len(recorded) :
        ]
    return local


def compare(
    recorded: dict[str, Any], local: LocalRun, recorded_date: str = ""
) -> tuple[str, list[str]]:
    """('' when the same, else kinder/harsher/value) and the differences, key by key."""
    if recorded_date:
        day = datetime.date.fromisoformat(recorded_date)
        local.written = {k: _as_of(recorded.get(k), v, day) for k, v in local.written.items()}
    diff: list[str] = []
    kinds: set[str] = set()
    for key, aws in recorded.items():
        if key not in local.written:
            diff.append(f"{key}: AWS answered, the local run stopped before ({local.raised})")
            # AWS refused a call (pytest.raises) the engine let through: kinder; else the
            # engine raised where AWS went on
            kinds.add("kinder" if "DID NOT RAISE" in local.raised else "harsher")
            continue
        mine = local.written[key]
        aws_error, local_error = _refused(aws), _refused(mine)
        if aws_error and not local_error:
            kinds.add("kinder")
        elif local_error and not aws_error:
            kinds.add("harsher")
        found: list[str] = []
        _deep_diff(aws, mine, key, found)
        if found:
            kinds.add("value")
            diff.extend(found)
    for kind in ("kinder", "harsher", "value"):
        if kind in kinds:
            return kind, diff
    return "", []


def outside(local: LocalRun, used: set[str]) -> list[str]:
    """What puts a case outside onceflow's use: an answer of an operation onceflow does not
    call, or a state machine using what onceflow's do not (but the plain states)."""
    from tests.parity.replay import features

    answered = set(local.operations.values())
    if local.raised and local.made:  # the call the run stopped at
        answered.add(local.made[-1])
    found = {f"API:{op}" for op in answered - USED_OPERATIONS}
    for text in local.definitions:
        try:
            definition = json.loads(text)
        except ValueError:
            continue  # a definition AWS refused as not JSON: no feature of it is used
        if isinstance(definition, dict):
            found |= {f for f in features(definition) - used if not PLAIN_FEATURES.match(f)}
    return sorted(found)


# ---- reading the suite -------------------------------------------------------------------


def launch_and_record_sync_execution(
    target_aws_client: Any, sfn_snapshot: Any, state_machine_arn: str, execution_input: Any
) -> None:
    answer = target_aws_client.stepfunctions.start_sync_execution(
        stateMachineArn=state_machine_arn, input=execution_input
    )
    sfn_snapshot.add_transformer(sfn_snapshot.transform.sfn_sm_sync_exec_arn(answer, 0))
    sfn_snapshot.match("start_execution_sync_response", answer)


def create_and_record_express_sync_execution(
    target_aws_client: Any,
    create_state_machine_iam_role: Any,
    create_state_machine: Any,
    sfn_snapshot: Any,
    definition: str,
    execution_input: Any,
) -> None:
    """LocalStack's helper of that name (its transformers, its names)."""
    role = create_state_machine_iam_role(target_aws_client=target_aws_client)
    sfn_snapshot.add_transformer(snapshot.regex(role, "sfn_role_arn"))
    created = create_state_machine(
        target_aws_client, name=f"express_statemachine_{short_uid()}", definition=definition,
        roleArn=role, type="EXPRESS",
    )  # fmt: skip
    sfn_snapshot.add_transformer(sfn_snapshot.transform.sfn_sm_create_arn(created, 0))
    sfn_snapshot.match("creation_response", created)
    launch_and_record_sync_execution(
        target_aws_client, sfn_snapshot, created["stateMachineArn"], execution_input
    )


_HELPERS["launch_and_record_sync_execution"] = launch_and_record_sync_execution
_HELPERS["create_and_record_express_sync_execution"] = create_and_record_express_sync_execution


def _free_names(source: str) -> set[str]:
    tree = ast.parse(source)
    [function] = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    local = _locals(function)
    loads = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
    return loads - local - set(dir(builtins))


_RUNTIME = {
    "json", "pytest", "ClientError", "load_sfn_template", *_HELPERS, *_transformer_classes()
}  # fmt: skip


def prepare(
    root: Path,
    key: str,
    relative: str,
    tree: ast.Module,
    function: ast.FunctionDef,
    param: str,
    classes: dict[str, type],
    recorded: dict[str, Any],
    date: datetime.date | None,
) -> ApiCase | str:
    """The recorded API test, folded to run on the engine; or why it cannot be."""
    arguments = [a.arg for a in function.args.args]
    if unknown := [a for a in arguments if a not in FIXTURES and a not in _params(function)]:
        return f"needs the fixture {unknown[0]}"
    expressions = recordings._bind(function, param)
    if expressions is None:
        return f"no parametrize combination gives the id [{param}]"
    recorder = recordings._Recorder(root)
    namespace = recordings._namespace(tree, root, classes, recorder)
    try:
        bound = {
            name: eval(compile(ast.Expression(e), "<param>", "eval"), namespace)
            for name, e in expressions.items()
        }
        source, files = fold(function, namespace, bound, root)
    except Exception as exc:
        return f"parameter or value not readable: {exc!r}"[:120]
    if missing := sorted(_free_names(source) - _RUNTIME):
        return f"uses what the replay does not stand in for: {', '.join(missing[:3])}"
    specs = snapshot.fixtures(stepfunctions="sfn_snapshot" in arguments, recorded=date)
    return ApiCase(
        key=key,
        snapshot=relative,
        source=source,
        arguments=[a for a in arguments if a not in bound],
        recorded=recorded,
        files=files,
        transformers=[s.to_json() for s in specs],
        recorded_date=date.isoformat() if date else "",
    )


def _params(function: ast.FunctionDef) -> set[str]:
    names: set[str] = set()
    for decorator in function.decorator_list:
        for _, bound in recordings._parametrize(decorator) or []:
            names |= set(bound)
    return names
