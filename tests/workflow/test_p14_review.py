"""P14 review: what an adversarial pass found on the landed engine (issue 28, items 2-4).

Another moto: a version other than the pinned one runs only if every patch's fits check
passes, so each check must name everything its patch relies on. Each case here is a
moto release measured with the engine (installed beside it with `pip install --target`):
with moto 5.1.22, 5.2.0 and 5.2.2 every check passed and the engine then failed inside
moto (a CreateTable refused as "null", MarkComplete on "'str' object has no attribute
'result'", a second execution on "cannot pickle '_thread.RLock' object"); with 5.2.4 it
ran, every machine STANDARD (an EXPRESS one without its ARN, its five minutes or its
names started again). Each test puts that release's method, in what the check reads of
it, in moto's place.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import moto
import pytest
from moto.core.responses import BaseResponse
from moto.dynamodb.responses import DynamoHandler
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.responses import StepFunctionResponse

from onceflow.cli import main
from onceflow.local import patches
from onceflow.local.engine import LocalEngine

EVENTS = Path(__file__).resolve().parents[2] / "events"


def _call_action_of_moto_5_1(self: Any) -> Any:
    # moto 5.1.22's DynamoHandler.call_action: the request read by json.loads, no parsed
    # parameters (the engine's DynamoDB validation read none: "Value null at 'tableName'")
    self.body = json.loads(self.body or "{}")
    return BaseResponse.call_action(self)


def _update_item_of_moto_5_1(self: Any) -> str:
    # moto 5.1.22's DynamoHandler.update_item answers JSON text, not an ActionResult
    return json.dumps({})


def _start_execution_of_moto_5_2_2(
    self: Any, state_machine_arn: str, name: Any = None, execution_input: Any = None
) -> Any:
    # moto 5.2.2 and before deep-copied the machine with its running executions (moto
    # issue 10077): a second execution of a machine failed on a lock that cannot be copied
    state_machine = self.describe_state_machine(state_machine_arn)
    return copy.deepcopy(state_machine)


def _create_state_machine_of_moto_5_2_4(self: Any) -> Any:
    # moto 5.2.4 read no machine type (the model set STANDARD): nothing was EXPRESS
    return None


@pytest.mark.parametrize(
    ("owner", "name", "stand_in", "named"),
    [
        (DynamoHandler, "call_action", _call_action_of_moto_5_1, '"params"'),
        (DynamoHandler, "update_item", _update_item_of_moto_5_1, "-> ActionResult"),
        (
            StepFunctionsParserBackend,
            "start_execution",
            _start_execution_of_moto_5_2_2,
            "id(state_machine.executions)",
        ),
        (
            StepFunctionResponse,
            "create_state_machine",
            _create_state_machine_of_moto_5_2_4,
            '_get_param("type")',
        ),
    ],
)
def test_another_moto_that_moved_what_a_patch_relies_on_stops_the_engine_in_one_line(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, stand_in: Any, named: str
) -> None:
    # GIVEN another moto version whose method is as that release had it
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    monkeypatch.setattr(owner, name, stand_in)
    # WHEN an engine starts
    with pytest.raises(RuntimeError) as raised:
        LocalEngine(function_log=io.StringIO()).start()
    # THEN it stops at start with one line naming what moved, and leaves nothing behind
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith("the local engine does not fit moto 9.9.9 (pinned "), line
    assert f"no longer has {named!r}" in line
    assert patches.installed() is None


def test_a_command_on_another_moto_that_does_not_fit_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN another moto version that moved what a patch relies on
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    monkeypatch.setattr(DynamoHandler, "update_item", _update_item_of_moto_5_1)
    # WHEN a command starts the local engine
    code = main(["execute", "ProcessorStateMachine", "-e", str(EVENTS / "s3-object-created.json")])
    # THEN it prints one line (after the notice that the stack is a fresh one) and no
    # traceback, and fails
    assert code == 2
    notice, line = capsys.readouterr().err.splitlines()
    assert notice.startswith("local: this command runs on a fresh, empty local stack")
    assert line.startswith("onceflow: the local engine does not fit moto 9.9.9 (pinned "), line
    assert line.endswith("(install the pinned versions: make setup)")
