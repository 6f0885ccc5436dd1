"""An execution as Step Functions shows it: its context object and DescribeExecution
(which refuses an EXPRESS execution).

Recorded in LocalStack's suite (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/): context_object/test_context_object
(test_variable), test_sfn_api (test_describe_execution), base/test_base
(test_state_fail), test_sfn_api_express (test_start_async_describe_history_execution).
"""

from __future__ import annotations

import datetime
import inspect
from typing import Any

from moto.core.exceptions import AWSError
from moto.stepfunctions import exceptions as sfn_exceptions
from moto.stepfunctions import responses as sfn_responses
from moto.stepfunctions.parser.api import StateMachineType
from moto.stepfunctions.parser.backend import execution_worker

from onceflow.local.patches.registry import Installer, Patch, gone

_Worker = execution_worker.ExecutionWorker
_Responses = sfn_responses.StepFunctionResponse
_original_environment = _Worker._get_evaluation_environment
_original_describe = _Responses.describe_execution


def iso_8601(moment: Any) -> str:
    """2019-03-26T20:14:13.192Z, as the context object's StartTime reads on AWS."""
    when = (
        moment
        if isinstance(moment, datetime.datetime)
        else datetime.datetime.fromisoformat(str(moment))
    )
    if when.tzinfo is not None:
        when = when.astimezone(datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _evaluation_environment(self: Any) -> Any:
    env = _original_environment(self)
    data: Any = env.states.context_object.context_object_data
    execution: dict[str, Any] = dict(data["Execution"])
    data["Execution"] = {
        "Id": execution["Id"],
        "Input": execution["Input"],
        "StartTime": iso_8601(execution["StartTime"]),
        "Name": execution["Name"],
        "RoleArn": execution["RoleArn"],
        # Executions are never redriven here: `onceflow redrive` starts new ones.
        "RedriveCount": 0,
    }
    return env


def _describe_execution(self: Any) -> Any:
    answer = _original_describe(self)
    described: dict[str, Any] = answer.result  # type: ignore[assignment]
    described["inputDetails"] = {"included": True}
    described["redriveCount"] = 0
    status = str(getattr(described["status"], "value", described["status"]))
    if status in ("FAILED", "TIMED_OUT", "ABORTED"):
        described["redriveStatus"] = "REDRIVABLE"
    else:
        described["redriveStatus"] = "NOT_REDRIVABLE"
        described["redriveStatusReason"] = f"Execution is {status} and cannot be redriven"
    return answer


# AWS refuses DescribeExecution and StopExecution (and GetExecutionHistory) for an
# EXPRESS execution: recorded in LocalStack's suite, test_sfn_api_express.snapshot.json,
# key "...::TestSfnApiExpress::test_start_async_describe_history_execution",
# "describe_execution_error" and "stop_execution_error" (validated on AWS 2024-07-03).
EXPRESS_REFUSED = "Invalid Arn: 'Resource type not valid in this context: express'"


def _refusing_express(original: Any) -> Any:
    def call(self: Any) -> Any:
        # An unknown or malformed ARN raises moto's own error here, as it would below.
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        if _is_express(execution.state_machine):
            raise sfn_exceptions.InvalidArn(EXPRESS_REFUSED)
        return original(self)

    return call


def _install_express(installer: Installer) -> None:
    for name in ("describe_execution", "stop_execution"):
        installer.replace(_Responses, name, _refusing_express(getattr(_Responses, name)))


# GetExecutionHistory and ListExecutions refuse EXPRESS too: the same recording,
# "get_execution_history_error" (InvalidArn, EXPRESS_REFUSED) and "list_executions_error"
# (StateMachineTypeNotSupported), HTTP 400 both. An EXPRESS execution's history is in
# its state machine's CloudWatch log group on AWS.
NOT_SUPPORTED = "This operation is not supported by this type of state machine"


class StateMachineTypeNotSupported(AWSError):
    TYPE = "StateMachineTypeNotSupported"
    STATUS = 400


def _is_express(state_machine: Any) -> bool:
    return str(getattr(state_machine, "type", "")) == StateMachineType.EXPRESS


def _not_listing_express(original: Any) -> Any:
    def call(self: Any) -> Any:
        # An unknown or malformed ARN raises moto's own error here, as it would below.
        machine = self.stepfunction_backend.describe_state_machine(
            self._get_param("stateMachineArn")
        )
        if _is_express(machine):
            raise StateMachineTypeNotSupported(NOT_SUPPORTED)
        return original(self)

    return call


def _install_express_history(installer: Installer) -> None:
    history = _Responses.get_execution_history
    installer.replace(_Responses, "get_execution_history", _refusing_express(history))
    listing = _Responses.list_executions
    installer.replace(_Responses, "list_executions", _not_listing_express(listing))


def _install_context(installer: Installer) -> None:
    installer.replace(_Worker, "_get_evaluation_environment", _evaluation_environment)


def _install_describe(installer: Installer) -> None:
    installer.replace(_Responses, "describe_execution", _describe_execution)


def _keeps_its_state_machine() -> list[str]:
    from moto.stepfunctions.parser.backend.execution import Execution

    if "state_machine" not in inspect.getsource(Execution.__init__):
        return ["moto's Execution no longer keeps its state_machine"]
    return []


def _express_fits() -> list[str]:
    moved = gone(_Responses, "describe_execution", "stop_execution", "stepfunction_backend")
    return moved + _keeps_its_state_machine()


def _express_history_fits() -> list[str]:
    moved = gone(_Responses, "get_execution_history", "list_executions", "stepfunction_backend")
    return moved + _keeps_its_state_machine()


_TESTS = "tests/parity/test_context.py::"
PATCHES: tuple[Patch, ...] = (
    Patch(
        name="the context object's Execution",
        kind="fidelity",
        why="$states.context.Execution holds Id, Input, StartTime (ISO 8601, "
        "2019-03-26T20:14:13.192Z), Name, RoleArn and RedriveCount (recorded: LocalStack's "
        "test_context_object snapshot; 'Context object' page). moto gave Python's datetime "
        "text and no RedriveCount.",
        test=_TESTS + "test_the_context_object_has_redrive_count_and_an_iso_8601_start_time",
        install=_install_context,
        fits=lambda: gone(_Worker, "_get_evaluation_environment"),
    ),
    Patch(
        name="DescribeExecution's inputDetails and redrive fields",
        kind="fidelity",
        why="DescribeExecution answers inputDetails, redriveCount and redriveStatus "
        "(NOT_REDRIVABLE with its reason for a succeeded or running execution, REDRIVABLE for "
        "a failed one) (recorded: LocalStack's test_sfn_api and test_base snapshots). moto "
        "left them out.",
        test=_TESTS + "test_describe_execution_answers_input_details_and_the_redrive_fields",
        install=_install_describe,
        fits=lambda: gone(_Responses, "describe_execution"),
    ),
    Patch(
        name="EXPRESS executions are not described",
        kind="fidelity",
        why="DescribeExecution and StopExecution refuse an EXPRESS execution with InvalidArn "
        f'"{EXPRESS_REFUSED}" (recorded: LocalStack\'s test_sfn_api_express snapshot, '
        "test_start_async_describe_history_execution). moto answered both, so a reader of "
        "EXPRESS executions passed locally and failed deployed.",
        test=_TESTS + "test_describe_execution_refuses_an_express_execution",
        install=_install_express,
        fits=_express_fits,
    ),
    Patch(
        name="EXPRESS executions are not listed nor their history read",
        kind="fidelity",
        why="GetExecutionHistory refuses an EXPRESS execution with InvalidArn "
        f'"{EXPRESS_REFUSED}" and ListExecutions an EXPRESS state machine with '
        f'StateMachineTypeNotSupported "{NOT_SUPPORTED}" (recorded: LocalStack\'s '
        "test_sfn_api_express snapshot, test_start_async_describe_history_execution). moto "
        "answered both; on AWS the state machine's log group holds them, locally the "
        "engine's own record.",
        test=_TESTS + "test_history_and_listing_refuse_an_express_execution",
        install=_install_express_history,
        fits=_express_history_fits,
    ),
)
