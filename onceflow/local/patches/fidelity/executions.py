"""An execution as Step Functions shows it: its context object and DescribeExecution.

Recorded in LocalStack's suite (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/): context_object/test_context_object
(test_variable), test_sfn_api (test_describe_execution), base/test_base
(test_state_fail).
"""

from __future__ import annotations

import datetime
from typing import Any

from moto.stepfunctions import responses as sfn_responses
from moto.stepfunctions.parser.backend import execution_worker

from onceflow.local.patches.registry import Installer, Patch

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


def _install_context(installer: Installer) -> None:
    installer.replace(_Worker, "_get_evaluation_environment", _evaluation_environment)


def _install_describe(installer: Installer) -> None:
    installer.replace(_Responses, "describe_execution", _describe_execution)


def _context_fits() -> list[str]:
    if "_get_evaluation_environment" not in vars(_Worker):
        return ["ExecutionWorker._get_evaluation_environment is gone"]
    return []


def _describe_fits() -> list[str]:
    if "describe_execution" not in vars(_Responses):
        return ["StepFunctionResponse.describe_execution is gone"]
    return []


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
        fits=_context_fits,
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
        fits=_describe_fits,
    ),
)
