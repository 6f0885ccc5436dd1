"""Definitions: each is judged on its own, as CreateStateMachine judges it."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine
from tests.parity.conftest import ROLE


def test_a_refused_definition_leaves_the_next_one_as_it_is(engine: LocalEngine) -> None:
    """AWS judges each definition alone (Step Functions API reference, CreateStateMachine:
    InvalidDefinition for the one that is invalid). moto kept the query language of the
    scope being parsed in a list shared by every parse: a definition refused mid-scope
    left JSONata on it, and the next JSONPath definition's ResultPath was refused."""
    sfn = engine.client("stepfunctions")
    invalid = {
        "QueryLanguage": "JSONata",
        "StartAt": "P",
        "States": {"P": {"Type": "Pass", "ResultPath": "$.x", "End": True}},
    }
    with pytest.raises(ClientError, match="InvalidDefinition"):
        sfn.create_state_machine(name="refused", definition=json.dumps(invalid), roleArn=ROLE)
    valid = {"StartAt": "P", "States": {"P": {"Type": "Pass", "ResultPath": "$.x", "End": True}}}
    arn = sfn.create_state_machine(name="fine", definition=json.dumps(valid), roleArn=ROLE)[
        "stateMachineArn"
    ]
    assert engine.execute(arn, {}).output == {"x": {}}
