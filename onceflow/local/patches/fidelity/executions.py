"""An execution as Step Functions shows it: its context object, DescribeExecution and
the calls refused for EXPRESS (recorded in LocalStack's Step Functions suite)."""

from __future__ import annotations

import datetime
import re
import uuid
from typing import Any

from moto.core.exceptions import AWSError
from moto.stepfunctions import exceptions as sfn_exceptions
from moto.stepfunctions import responses as sfn_responses
from moto.stepfunctions.parser import models as sfn_parser_models
from moto.stepfunctions.parser.backend import execution, execution_worker

from onceflow.local.patches.fidelity.express_arn import is_express
from onceflow.local.patches.registry import Installer, Patch, gone, lacks, takes

_Worker = execution_worker.ExecutionWorker
_Responses = sfn_responses.StepFunctionResponse
_Backend = sfn_parser_models.StepFunctionsParserBackend
_original_environment = _Worker._get_evaluation_environment


def _evaluation_environment(self: Any) -> Any:
    env = _original_environment(self)
    data: Any = env.states.context_object.context_object_data
    execution = data["Execution"]
    # moto's StartTime is the start's aware datetime; AWS's reads 2019-03-26T20:14:13.192Z
    started = execution["StartTime"].astimezone(datetime.UTC).isoformat(timespec="milliseconds")
    kept = {key: execution[key] for key in ("Id", "Input", "StartTime", "Name", "RoleArn")}
    data["Execution"] = {**kept, "StartTime": started.replace("+00:00", "Z")}
    if ":express:" not in str(execution["Id"]):  # an EXPRESS execution has none (redrive
        # is STANDARD's; recorded: express/test_express_sync, test_query_runtime_memory)
        data["Execution"]["RedriveCount"] = 0  # never redriven here: `onceflow redrive`
    return env


def _with_redrive_fields(original: Any) -> Any:
    def describe_execution(self: Any) -> Any:
        answer = original(self)
        described: dict[str, Any] = answer.result
        described.update(inputDetails={"included": True}, redriveCount=0)
        status = str(getattr(described["status"], "value", described["status"]))
        if status in ("FAILED", "TIMED_OUT", "ABORTED"):
            described["redriveStatus"] = "REDRIVABLE"
        else:
            described["redriveStatus"] = "NOT_REDRIVABLE"
            described["redriveStatusReason"] = f"Execution is {status} and cannot be redriven"
        return answer

    return describe_execution


# Recorded: test_sfn_api_express.snapshot.json, test_start_async_describe_history_execution
# ("describe_execution_error", "stop_execution_error", "get_execution_history_error":
# InvalidArn; "list_executions_error": StateMachineTypeNotSupported; HTTP 400 all).
EXPRESS_REFUSED = "Invalid Arn: 'Resource type not valid in this context: express'"
NOT_SUPPORTED = "This operation is not supported by this type of state machine"


def _refusing_express(original: Any, listing: bool = False) -> Any:
    def call(self: Any) -> Any:
        # An unknown or malformed ARN raises moto's own error here, as it would below.
        backend = self.stepfunction_backend
        if not listing:
            started = backend.describe_execution(self._get_param("executionArn"))
            if is_express(started.state_machine):
                raise sfn_exceptions.InvalidArn(EXPRESS_REFUSED)
        elif is_express(backend.describe_state_machine(self._get_param("stateMachineArn"))):
            raise AWSError(NOT_SUPPORTED, "StateMachineTypeNotSupported")
        return original(self)

    return call


# What StartExecution's name must not contain (API reference, StartExecution: name): white
# space, brackets, wildcards, the special characters, control characters (U+0000-001F,
# U+007F-009F, U+FFFE-FFFF), surrogates, U+10FFFF; and it holds 1 to 80 characters.
_REFUSED_IN_A_NAME = re.compile(
    r'[\s<>{}\[\]?*"#%\\^|~`$&,;:/\x00-\x1f\x7f-\x9f\ufffe\uffff\ud800-\udfff\U0010ffff]'
)
NAME_LIMIT = 80


def refused_name(name: str) -> Exception | None:
    """The error StartExecution answers a name with; None for a name it takes."""
    if _REFUSED_IN_A_NAME.search(name):
        return sfn_exceptions.InvalidName(f"Invalid Name: '{name}'")
    if len(name) > NAME_LIMIT:
        return sfn_exceptions.NameTooLongException(name)
    return None


def _install_api(installer: Installer) -> None:
    def start_execution(self: Any, state_machine_arn: str, name: Any = None, *args: Any) -> Any:
        if name and (error := refused_name(str(name))) is not None:
            raise error
        return start(self, state_machine_arn, name or str(uuid.uuid4()), *args)

    start = installer.replace(_Backend, "start_execution", start_execution)
    describe = _with_redrive_fields(_Responses.describe_execution)
    installer.replace(_Responses, "describe_execution", _refusing_express(describe))
    for name in ("stop_execution", "get_execution_history", "list_executions"):
        wrapped = _refusing_express(getattr(_Responses, name), listing=name == "list_executions")
        installer.replace(_Responses, name, wrapped)


def _api_fits() -> list[str]:
    names = ("describe_execution", "stop_execution", "get_execution_history", "list_executions")
    moved = gone(_Responses, *names, "stepfunction_backend")
    moved += takes(_Backend.start_execution, "self", "state_machine_arn", "name")
    return moved + lacks(execution.Execution.__init__, "self.state_machine = ")


_TESTS = "tests/parity/test_context.py::"
PATCHES: tuple[Patch, ...] = (
    Patch(
        name="the context object's Execution",
        kind="fidelity",
        why="$states.context.Execution holds Id, Input, StartTime (ISO 8601, "
        "2019-03-26T20:14:13.192Z), Name, RoleArn and RedriveCount (recorded: LocalStack's "
        "test_context_object snapshot; 'Context object' page), an EXPRESS execution's no "
        "RedriveCount (recorded: express/test_express_sync, test_query_runtime_memory). moto "
        "gave Python's datetime text and no RedriveCount.",
        test=_TESTS + "test_the_context_object_has_redrive_count_and_an_iso_8601_start_time",
        install=lambda i: i.replace(
            _Worker, "_get_evaluation_environment", _evaluation_environment
        ),
        fits=lambda: gone(_Worker, "_get_evaluation_environment"),
    ),
    Patch(
        name="executions as the Step Functions API answers for them",
        kind="fidelity",
        why="DescribeExecution answers inputDetails, redriveCount and redriveStatus "
        "(NOT_REDRIVABLE with its reason for a succeeded or running execution, REDRIVABLE for "
        "a failed one) (recorded: LocalStack's test_sfn_api and test_base snapshots); "
        "DescribeExecution, StopExecution and GetExecutionHistory refuse an EXPRESS execution "
        f'with InvalidArn "{EXPRESS_REFUSED}", ListExecutions an EXPRESS state machine with '
        f'StateMachineTypeNotSupported "{NOT_SUPPORTED}" (recorded: LocalStack\'s '
        "test_sfn_api_express snapshot, test_start_async_describe_history_execution; on AWS "
        "the state machine's log group holds them). moto left the fields out and answered "
        "all four, so a reader of EXPRESS executions passed locally and failed deployed. "
        "StartExecution without a name names it by a UUID, and refuses a name holding white "
        "space, brackets, wildcards, special or control characters (InvalidName) or longer "
        "than 80 characters (API reference, StartExecution: name; the message is AWS's "
        "recorded one for CreateActivity, test_sfn_api_activities snapshot); moto named an "
        "unnamed execution 'None', refused a second unnamed start (ExecutionAlreadyExists), "
        "and started any name.",
        test=_TESTS + "test_describe_execution_answers_input_details_and_the_redrive_fields",
        install=_install_api,
        fits=_api_fits,
    ),
)
