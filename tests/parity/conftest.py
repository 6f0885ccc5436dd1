"""The parity suite: behaviour recorded on AWS, replayed on the local engine.

Each test names where the behaviour was recorded: a snapshot file of LocalStack's
Step Functions suite (github.com/localstack/localstack, under
tests/aws/services/stepfunctions/v2/, each test marked `@markers.aws.validated`:
run against real AWS and its answers kept), and the test that recorded it; or,
where no recording exists, the AWS page that documents it. The assertions state
what AWS answered, not what the engine happens to do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import count
from typing import Any

import pytest

from onceflow.local.engine import ExecutionResult, LocalEngine

ROLE = "arn:aws:iam::123456789012:role/parity"
_NAMES = count()

Run = Callable[..., ExecutionResult]


@pytest.fixture
def run(engine: LocalEngine) -> Run:
    """Run states (JSONata unless told otherwise) on the engine; the finished execution."""

    def run_states(
        states: dict[str, Any],
        execution_input: Any = None,
        *,
        start: str | None = None,
        query_language: str = "JSONata",
        kind: str = "STANDARD",
    ) -> ExecutionResult:
        definition = {
            "QueryLanguage": query_language,
            "StartAt": start or next(iter(states)),
            "States": states,
        }
        arn = engine.client("stepfunctions").create_state_machine(
            name=f"parity-{next(_NAMES)}",
            definition=json.dumps(definition),
            roleArn=ROLE,
            type=kind,
        )["stateMachineArn"]
        return engine.execute(arn, {} if execution_input is None else execution_input)

    return run_states


def details(event: dict[str, Any]) -> dict[str, Any]:
    """An event's details, with JSON text fields (input, output, cause) as values."""
    [found] = [value for key, value in event.items() if key.endswith("EventDetails")]
    return dict(found)


def events_of(result: ExecutionResult, kind: str) -> list[dict[str, Any]]:
    return [details(e) for e in result.events if e["type"] == kind]
