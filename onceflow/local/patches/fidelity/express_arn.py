"""An EXPRESS execution's ARN in AWS's form: arn:...:express:<machine>:<name>:<id>.

Recorded on AWS: LocalStack's test_express_async and test_express_sync snapshots
(tests/aws/services/stepfunctions/v2/express/), whose executionArn and context object
Execution.Id read "arn:<partition>:states:<region>:111111111111:express:<machine>:
<ExpressExecArn_Part1>:<ExpressExecArn_Part2>", the name then an id (LocalStack's
transformer_utility.sfn_sm_express_exec_arn). moto gave every execution the STANDARD
form, ...:execution:<machine>:<name>: about 37 characters shorter, in every lock owner and
claim a row keeps (a row over 1 KB on AWS fitted locally), and a reader that took the
ARN's last part for the name passed locally and failed deployed.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from moto.stepfunctions import models as sfn_models
from moto.stepfunctions.parser.api import StateMachineType
from moto.stepfunctions.parser.backend import execution as execution_module

from onceflow.local.patches.registry import Installer, Patch, gone, takes

_Execution = execution_module.Execution
_Backend = sfn_models.StepFunctionBackend
_Machine = sfn_models.StateMachine
# moto's own pattern for an execution ARN, with the express resource type beside it.
_ARN = re.compile(
    _Backend.accepted_exec_arn_format.pattern.replace(":execution:", ":(?:execution|express):")
)


def express_arn(standard: str) -> str:
    """The ARN AWS gives the EXPRESS execution moto named in the STANDARD form."""
    return standard.replace(":execution:", ":express:", 1) + ":" + str(uuid.uuid4())


def _install(installer: Installer) -> None:
    original = _Execution.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        # moto's executions all carry sm_type STANDARD: the machine's own type decides.
        express = str(getattr(self.state_machine, "type", "")) == StateMachineType.EXPRESS
        if express and ":execution:" in self.exec_arn:
            self.exec_arn = self.execution_arn = express_arn(self.exec_arn)

    installer.replace(_Execution, "__init__", __init__)
    installer.replace(_Backend, "accepted_exec_arn_format", _ARN)
    names_checked = _Machine._handle_name_input_idempotency

    def _handle_name_input_idempotency(self: Any, name: str, execution_input: str) -> Any:
        # EXPRESS: "Idempotency is not automatically managed. Starting multiple workflows
        # with the same name results in concurrent executions" (developer guide,
        # "Execution guarantees", express-at-least-once-execution.html). moto refused the
        # name (ExecutionAlreadyExists) or gave back the running one, as for STANDARD.
        if str(self.type) == StateMachineType.EXPRESS:
            return None
        return names_checked(self, name, execution_input)

    installer.replace(_Machine, "_handle_name_input_idempotency", _handle_name_input_idempotency)


def _fits() -> list[str]:
    return [
        *gone(_Execution, "__init__"),
        *gone(_Backend, "accepted_exec_arn_format"),
        *([] if _ARN.pattern.count("express") else ["moto's execution ARN pattern moved"]),
        *takes(_Execution.__init__, "self", "name", "sm_type", "role_arn", "exec_arn"),
        *gone(_Machine, "_handle_name_input_idempotency"),
        *takes(_Machine._handle_name_input_idempotency, "self", "name", "execution_input"),
    ]


PATCHES = (
    Patch(
        name="EXPRESS execution ARNs",
        kind="fidelity",
        why="An EXPRESS execution's ARN is arn:...:express:<machine>:<name>:<id> (recorded: "
        "LocalStack's test_express_async and test_express_sync snapshots). moto gave it the "
        "STANDARD form, ...:execution:<machine>:<name>, shorter in every row that keeps it, "
        "and refused a second EXPRESS execution of one name, which AWS starts "
        "(express-at-least-once-execution.html).",
        test="tests/parity/test_context.py::test_an_express_execution_has_awss_arn",
        install=_install,
        fits=_fits,
    ),
)
