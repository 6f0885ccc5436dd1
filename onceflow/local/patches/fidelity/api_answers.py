"""The Step Functions API calls onceflow makes (StartExecution, ListExecutions,
GetExecutionHistory, DescribeStateMachine, CreateStateMachine ...) answered and refused as
AWS recorded them (LocalStack's test_sfn_api.snapshot.json; tests/parity/test_api.py)."""

from __future__ import annotations

import base64
import contextvars
import copy
import functools
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from moto.core.exceptions import AWSError
from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.stepfunctions import models as sfn_models
from moto.stepfunctions import responses as sfn_responses
from moto.stepfunctions.exceptions import ExecutionDoesNotExist, InvalidArn
from moto.stepfunctions.parser.asl.parse.asl_parser import ASLParserException
from moto.stepfunctions.parser.asl.static_analyser.variable_references_static_analyser import (
    VariableReferencesStaticAnalyser,
)

from onceflow.local import INPUT_DEPTH_LIMIT, json_depth
from onceflow.local.patches.fidelity.express_arn import is_express
from onceflow.local.patches.registry import LOG, Installer, Patch, gone, lacks

_Responses = sfn_responses.StepFunctionResponse
_STATUSES = "SUCCEEDED, TIMED_OUT, PENDING_REDRIVE, ABORTED, FAILED, RUNNING"


def _validated(problems: list[str]) -> None:
    """AWS's request validation: "1 validation error detected: ...", "2 validation errors
    detected: ...; ..." (the plural form is not verified)."""
    if problems:
        errors = "error" if len(problems) == 1 else "errors"
        raise AWSError(f"{len(problems)} validation {errors} detected: " + "; ".join(problems),
                       "ValidationException")  # fmt: skip


def _arn_prefix(value: Any) -> None:
    if not str(value or "").startswith("arn:"):
        raise InvalidArn(f"Invalid Arn: 'Invalid ARN prefix: {value}'")


def _page_problems(self: Any, longest_token: int) -> list[str]:
    """maxResults and nextToken as the operation's model bounds them."""
    limit, token, problems = self._get_param("maxResults"), self._get_param("nextToken"), []
    if isinstance(limit, int) and limit > 1000:
        problems.append(f"Value '{limit}' at 'maxResults' failed to satisfy constraint: "
                        "Member must have value less than or equal to 1000")  # fmt: skip
    if isinstance(token, str) and len(token) > longest_token:
        most = f"Member must have length less than or equal to {longest_token}"
        problems.append(f"Value '{token}' at 'nextToken' failed to satisfy constraint: {most}")
    return problems


def _list_state_machines(original: Any) -> Any:
    def list_state_machines(self: Any) -> Any:
        _validated(_page_problems(self, 1024))  # recorded: test_list_sms_pagination
        return original(self)

    return list_state_machines


def _list_executions(original: Any) -> Any:
    def list_executions(self: Any) -> Any:
        _arn_prefix(self._get_param("stateMachineArn"))
        status, problems = self._get_param("statusFilter"), []
        if status is not None and status not in _STATUSES.split(", "):
            problems.append(f"Value '{status}' at 'statusFilter' failed to satisfy constraint: "
                            f"Member must satisfy enum value set: [{_STATUSES}]")  # fmt: skip
        _validated(problems + _page_problems(self, 3096))
        answer = original(self)
        for listed in answer.result["executions"]:
            listed.setdefault("redriveCount", 0)  # never redriven here
        return answer

    return list_executions


def _arn_checked(original: Any, parameter: str) -> Any:
    def call(self: Any) -> Any:
        _arn_prefix(self._get_param(parameter))
        return original(self)

    return call


_ENDS = {"ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"}


def _settled(backend: Any, arn: str, events: list[Any]) -> None:
    """moto writes an execution's last event before it sets its status: a reader that saw
    the end in the history would find it RUNNING in DescribeExecution and ListExecutions.
    The history is answered once the status has followed (within a second)."""
    last = str(getattr(events[-1]["type"], "value", events[-1]["type"])) if events else ""
    if last not in _ENDS:
        return
    execution = backend.describe_execution(arn)
    deadline = time.monotonic() + 1.0
    while str(getattr(execution, "exec_status", "")).endswith("RUNNING"):
        if time.monotonic() > deadline:
            return
        time.sleep(0.002)


def _page(self: Any, events: list[Any]) -> tuple[list[Any], str | None]:
    """A page of events: maxResults (default and 0: 100, at most 1000), from nextToken
    (API reference, GetExecutionHistory). moto answered every event at once, so a reader
    that did not follow nextToken saw more locally than on AWS."""
    _validated(_page_problems(self, 3096))
    size = self._get_param("maxResults") or 100
    start = 0
    if token := self._get_param("nextToken"):
        try:
            start = int(base64.urlsafe_b64decode(token.encode()).decode())
        except ValueError as exc:  # not one of ours: AWS's error for it (words not verified)
            raise AWSError("Invalid Token: 'Invalid token'", "InvalidToken") from exc
    end = start + size
    following = base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(events) else None
    return events[start:end], following


def _history(original: Any) -> Any:
    def get_execution_history(self: Any) -> Any:
        _arn_prefix(self._get_param("executionArn"))
        answer = original(self)
        _settled(self.stepfunction_backend, self._get_param("executionArn"),
                 answer.result["events"])  # fmt: skip
        events = list(answer.result["events"])
        if self._get_param("reverseOrder"):
            events.reverse()
        answer.result["events"], token = _page(self, events)
        if token:
            answer.result["nextToken"] = token
        return answer

    return get_execution_history


@functools.lru_cache(maxsize=64)
def _variable_references(definition: str) -> dict[str, list[str]]:
    """What moto's parser finds (StateMachineInstance.describe), which its answer left out;
    read once per definition (a parse is 0.1 s for onceflow's processor). A definition its
    analyser cannot read (none the engine accepted so far) is described without them."""
    try:
        return dict(VariableReferencesStaticAnalyser.process_and_get(definition=definition))
    except ASLParserException as exc:
        LOG.warning("onceflow: variableReferences left out, moto cannot read them: %s", exc)
        return {}


def _described(original: Any) -> Any:
    def _describe_state_machine(self: Any, state_machine_arn: str) -> Any:
        _arn_prefix(state_machine_arn)
        answer = original(self, state_machine_arn)
        logging = dict(answer.result.get("loggingConfiguration") or {"level": "OFF"})
        logging.setdefault("includeExecutionData", False)
        answer.result["loggingConfiguration"] = logging
        machine = self.stepfunction_backend.describe_state_machine(state_machine_arn)
        answer.result["updateDate"] = machine.update_date  # shown only for an execution's
        if references := _variable_references(machine.definition):
            answer.result["variableReferences"] = copy.deepcopy(references)
        return answer

    return _describe_state_machine


def _refused_definition(text: Any) -> None:
    try:
        definition = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return  # moto's parser refuses it as it does
    if isinstance(definition, dict):
        missing = [field for field in ("States", "StartAt") if field not in definition]
        if missing:
            raise AWSError("Invalid State Machine Definition: 'SCHEMA_VALIDATION_FAILED: These "
                           f"fields are required: [{', '.join(missing)}] at /'",
                           "InvalidDefinition")  # fmt: skip


def _express_refusal(states: Any, where: str) -> str | None:
    """What an EXPRESS state machine may not hold, in AWS's words (recorded:
    test_sfn_api_express, test_illegal_callbacks and test_illegal_activity_task; the
    location of a state inside a Map or Parallel is not verified)."""
    for name, state in (states or {}).items():
        if not isinstance(state, dict):
            continue
        resource, at = str(state.get("Resource", "")), f"{where}/States/{name}/Resource"
        if resource.endswith(".waitForTaskToken"):
            return f"Express state machine does not support '.waitForTaskToken' service integration  at {at}"  # noqa: E501
        if re.search(r"\.sync(:\d+)?$", resource):
            return f"Express state machine does not support '.sync' service integration at {at}"
        if re.match(r"arn:[^:]+:states:[^:]*:\d*:activity:", resource):
            return f"Express state machine does not support Activity ARN at {at}"
        inner = [("ItemProcessor", state.get("ItemProcessor")), ("Iterator", state.get("Iterator"))]
        inner += [(f"Branches/{i}", b) for i, b in enumerate(state.get("Branches") or [])]
        for field, branch in inner:
            if isinstance(branch, dict):
                found = _express_refusal(branch.get("States"), f"{where}/States/{name}/{field}")
                if found:
                    return found
    return None


def _create(original: Any) -> Any:
    def create_state_machine(self: Any) -> Any:
        definition = self._get_param("definition")
        _refused_definition(definition)
        if self._get_param("type") == "EXPRESS" and isinstance(definition, str):
            try:
                parsed = json.loads(definition)
            except ValueError:
                parsed = None  # moto's parser refuses it as it does
            if isinstance(parsed, dict) and (found := _express_refusal(parsed.get("States"), "")):
                raise AWSError(f"Invalid State Machine Definition: 'SCHEMA_VALIDATION_FAILED: "
                               f"{found}'", "InvalidDefinition")  # fmt: skip
        name = self._get_param("name")
        backend = self.stepfunction_backend
        for machine in backend.state_machines:
            if machine.name == name and machine.definition != definition:
                raise AWSError(f"State Machine Already Exists: '{machine.arn}'",
                               "StateMachineAlreadyExists")  # fmt: skip
        return original(self)

    return create_state_machine


_TOKEN = re.compile(r"[A-Za-z0-9_$]+")


def _jackson(text: str, error: json.JSONDecodeError) -> str:
    """What AWS's parser (Jackson) says of a text that is not JSON, for the errors recorded;
    any other in Python's words."""
    if not text.strip():
        return "Invalid execution input."
    found = _TOKEN.match(text, error.pos)
    if error.msg == "Expecting value" and found:
        return (f"Unrecognized token '{found.group(0)}': was expecting (JSON String, Number, "
                "Array, Object or token 'null', 'true' or 'false')")  # fmt: skip
    if error.msg.startswith("Expecting property name") and error.pos < len(text):
        character = text[error.pos]
        return (f"Unexpected character ('{character}' (code {ord(character)})): was expecting "
                "double-quote to start field name")  # fmt: skip
    return error.msg


def _checked_input(text: Any) -> None:
    """An input that is not JSON, refused in AWS's words; one over the size limit or deeper
    than the engine runs is left to the start's own refusal, which names that."""
    if not isinstance(text, str) or json_depth(text) > INPUT_DEPTH_LIMIT:
        return
    if len(text.encode("utf-8", "backslashreplace")) <= 262144:
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise AWSError(f"Invalid State Machine Execution Input: '{_jackson(text, exc)}'",
                           "InvalidExecutionInput") from exc  # fmt: skip


def _start(original: Any) -> Any:
    def start_execution(self: Any) -> Any:
        _checked_input(self._get_param("input"))
        return original(self)

    return start_execution


# StopExecution's error and cause, for the model's stop (which moto calls with "" for both).
_STOPPING: contextvars.ContextVar[tuple[str | None, str | None]] = contextvars.ContextVar(
    "stopping", default=(None, None)
)


def _stop(original: Any) -> Any:
    def stop_execution(self: Any) -> Any:
        _arn_prefix(self._get_param("executionArn"))
        token = _STOPPING.set((self._get_param("error"), self._get_param("cause")))
        try:
            answer = original(self)
        finally:
            _STOPPING.reset(token)
        if answer.result.get("stopDate") is None:  # the stop is asynchronous in moto
            answer.result["stopDate"] = utcnow()
        return answer

    return stop_execution


def _model_stop(self: Any, execution_arn: str) -> Any:
    """StateMachine.stop_execution, with the request's error and cause (None: left out of
    ExecutionAborted's details, as AWS leaves them)."""
    execution = next((x for x in self.executions if x.execution_arn == execution_arn), None)
    if not execution:
        raise ExecutionDoesNotExist(f"Execution Does Not Exist: '{execution_arn}'")
    error, cause = _STOPPING.get()
    # moto's worker makes the execution's environment on its own thread: a stop that comes
    # before it failed (500); it waits for it (a second at most, then moto's own error)
    deadline = time.monotonic() + 1.0
    while (worker := execution.exec_worker) is not None and worker.env is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.002)
    execution.stop(stop_date=utcnow(), error=error, cause=cause)
    return execution


def _described_execution(original: Any) -> Any:
    return _arn_checked(original, "executionArn")


NOT_SUPPORTED = "This operation is not supported by this type of state machine"
_EXPRESS_LIMIT = 330.0  # seconds: the 5-minute EXPRESS limit (limits/) ends it before


def _to_sync_host(request: Any, **_: Any) -> None:
    """StartSyncExecution goes to sync-states.<region>.amazonaws.com (its endpoint's host
    prefix), which moto's URL patterns do not match: sent to states.<region> instead."""
    request.url = request.url.replace("://sync-states.", "://states.", 1)


def _billed(started: Any, stopped: Any) -> dict[str, int]:
    """billingDetails: 64 MB, the duration up in 100 ms steps (recorded: 64 and 100 for
    short runs, express/test_express_sync; the rounding of longer ones is not verified)."""
    milliseconds = max((stopped - started).total_seconds() * 1000, 1)
    return {
        "billedMemoryUsedInMB": 64,
        "billedDurationInMilliseconds": -(-int(milliseconds) // 100) * 100,
    }


def start_sync_execution(self: Any) -> Any:
    """StartSyncExecution (moto has none): an EXPRESS execution started as StartExecution
    starts one (the engine's patches and limits apply), answered when it has ended."""
    arn = self._get_param("stateMachineArn")
    _arn_prefix(arn)
    backend = self.stepfunction_backend
    if not is_express(backend.describe_state_machine(arn)):
        raise AWSError(NOT_SUPPORTED, "StateMachineTypeNotSupported")
    text = self._get_param("input")
    _checked_input(text)
    name = self._get_param("name") or str(uuid.uuid4())
    execution = backend.start_execution(arn, name, "{}" if text is None else text)
    deadline = time.monotonic() + _EXPRESS_LIMIT
    while str(execution.exec_status).endswith("RUNNING") and time.monotonic() < deadline:
        time.sleep(0.005)
    described = dict(execution.to_describe_output())
    described["status"] = str(getattr(described["status"], "value", described["status"]))
    described["outputDetails"] = {"included": True}
    described["billingDetails"] = _billed(described["startDate"], described["stopDate"])
    return ActionResult(described)


def _install(installer: Installer) -> None:
    wrap: dict[str, Callable[[Any], Any]] = {
        "list_executions": _list_executions,
        "list_state_machines": _list_state_machines,
        "get_execution_history": _history,
        "_describe_state_machine": _described,
        "create_state_machine": _create,
        "start_execution": _start,
        "describe_execution": _described_execution,
        "stop_execution": _stop,
    }
    for name, wrapper in wrap.items():
        installer.replace(_Responses, name, wrapper(getattr(_Responses, name)))
    installer.replace(sfn_models.StateMachine, "stop_execution", _model_stop)
    installer.replace(_Responses, "start_sync_execution", start_sync_execution)
    installer.register("request-created.sfn.StartSyncExecution", _to_sync_host)


def _fits() -> list[str]:
    names = ("list_executions", "list_state_machines", "get_execution_history",
             "_describe_state_machine", "create_state_machine", "start_execution",
             "describe_execution", "stop_execution")  # fmt: skip
    moved = gone(_Responses, *names, "stepfunction_backend")
    moved += gone(sfn_models.StateMachine, "stop_execution")
    moved += ["moto answers StartSyncExecution itself"] * (
        "start_sync_execution" in vars(_Responses)
    )
    return moved + lacks(sfn_models.StateMachine.stop_execution, 'error="", cause=""')


PATCHES: tuple[Patch, ...] = (
    Patch(
        name="the Step Functions API's answers and refusals",
        kind="fidelity",
        why="As recorded on AWS (LocalStack's test_sfn_api snapshot): ListExecutions lists "
        "redriveCount and refuses a statusFilter outside its enum, maxResults over 1000 and "
        "a nextToken over 3096 characters (ValidationException; moto answered), "
        "GetExecutionHistory honours reverseOrder and answers pages of maxResults (100 by "
        "default; moto answered every event at once), DescribeStateMachine answers "
        "loggingConfiguration.includeExecutionData false, the variableReferences of each state "
        "(test_sfn_api_variable_references) and updateDate for an execution's, "
        "a text that is no ARN is refused with \"Invalid Arn: 'Invalid ARN prefix: ...'\", "
        "CreateStateMachine refuses a name in use with another definition "
        "(StateMachineAlreadyExists; moto returned the first), a definition without "
        "States or StartAt and an EXPRESS one with a .waitForTaskToken, .sync or activity "
        "Task (test_sfn_api_express; moto took them) in AWS's words, ListStateMachines "
        "refuses maxResults over 1000 and a nextToken over 1024 characters, and "
        "StartExecution refuses an input that is not JSON in AWS's (Jackson's) words where "
        "moto gave Python's. A history that has ended is answered once DescribeExecution "
        "and ListExecutions show the end too (moto set the "
        "status after the last event). StopExecution answers its "
        "stopDate and records the error and cause it was given in ExecutionAborted (none: "
        'empty details; moto dropped them and wrote "" for both), also as the execution '
        "starts (moto failed with a 500 until its worker had made its environment). "
        "StartSyncExecution (moto had none: 404) refuses a STANDARD state machine "
        "(StateMachineTypeNotSupported) and answers an EXPRESS execution at its end: status, "
        "output or error and cause, their details and billingDetails (recorded: "
        "express/test_express_sync).",
        test="tests/parity/test_api.py",
        install=_install,
        fits=_fits,
    ),
)
