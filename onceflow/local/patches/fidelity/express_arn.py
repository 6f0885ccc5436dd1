"""An EXPRESS execution's ARN in AWS's form, and its name free to start again (the Patch's why)."""

from __future__ import annotations

import re
import uuid
from typing import Any

from moto.stepfunctions import models as sfn_models
from moto.stepfunctions import responses as sfn_responses
from moto.stepfunctions.parser.api import StateMachineType
from moto.stepfunctions.parser.backend import execution as execution_module

from onceflow.local.patches.registry import Installer, Patch, gone, lacks, takes

_Execution = execution_module.Execution
_Backend = sfn_models.StepFunctionBackend
_Machine = sfn_models.StateMachine
# moto's own pattern for an execution ARN, with the express resource type beside it.
_ARN = re.compile(
    _Backend.accepted_exec_arn_format.pattern.replace(":execution:", ":(?:execution|express):")
)


def is_express(machine: Any) -> bool:
    return str(getattr(machine, "type", "")) == StateMachineType.EXPRESS


def _install(installer: Installer) -> None:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        # moto's executions all carry sm_type STANDARD: the machine's own type decides.
        if is_express(self.state_machine) and ":execution:" in self.exec_arn:
            express = self.exec_arn.replace(":execution:", ":express:", 1)
            self.exec_arn = self.execution_arn = f"{express}:{uuid.uuid4()}"

    def _handle_name_input_idempotency(self: Any, name: str, execution_input: str) -> Any:
        # EXPRESS: "Idempotency is not automatically managed. Starting multiple workflows
        # with the same name results in concurrent executions" (developer guide,
        # "Execution guarantees", express-at-least-once-execution.html). moto refused the
        # name (ExecutionAlreadyExists) or gave back the running one, as for STANDARD.
        return None if is_express(self) else names_checked(self, name, execution_input)

    made = installer.replace(_Execution, "__init__", __init__)
    installer.replace(_Backend, "accepted_exec_arn_format", _ARN)
    names_checked = installer.replace(
        _Machine, "_handle_name_input_idempotency", _handle_name_input_idempotency
    )


def _fits() -> list[str]:
    return [
        *gone(_Execution, "__init__"),
        *gone(_Backend, "accepted_exec_arn_format"),
        *([] if _ARN.pattern.count("express") else ["moto's execution ARN pattern moved"]),
        *takes(_Execution.__init__, "self", "name", "sm_type", "role_arn", "exec_arn"),
        *gone(_Machine, "_handle_name_input_idempotency"),
        *takes(_Machine._handle_name_input_idempotency, "self", "name", "execution_input"),
        # a machine keeps the type it was created with (moto 5.2.4 made every one STANDARD)
        *lacks(sfn_responses.StepFunctionResponse.create_state_machine, '_get_param("type")'),
        *lacks(sfn_models.StateMachineInstance.__init__, "self.type = sm_type"),
    ]


PATCHES = (
    Patch(
        name="EXPRESS execution ARNs",
        kind="fidelity",
        why="An EXPRESS execution's ARN, and its context object's Execution.Id, is "
        "arn:...:express:<machine>:<name>:<id> (recorded: LocalStack's test_express_async and "
        "test_express_sync snapshots, tests/aws/services/stepfunctions/v2/express/; its "
        "transformer_utility.sfn_sm_express_exec_arn). moto gave it the STANDARD form, "
        "...:execution:<machine>:<name>, about 37 characters shorter in every lock owner and "
        "claim a row keeps (a row over 1 KB on AWS fitted locally; a reader that took the "
        "ARN's last part for the name passed locally), and refused a second EXPRESS "
        "execution of one name, which AWS starts (express-at-least-once-execution.html).",
        test="tests/parity/test_context.py::test_an_express_execution_has_awss_arn",
        install=_install,
        fits=_fits,
    ),
)
