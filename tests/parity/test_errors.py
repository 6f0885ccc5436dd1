"""Errors the states meet, with AWS's names and words, and which catchers take them."""

from __future__ import annotations

from typing import Any

from onceflow.local.engine import LocalEngine
from tests.helpers import FUNCTION
from tests.parity.conftest import Run, events_of

# STATES_ERRORS: github.com/localstack/localstack,
# tests/aws/services/stepfunctions/v2/error_handling/test_states_errors.snapshot.json
TOO_LARGE = "returned a result with a size exceeding the maximum number of bytes service limit."


def _large_invoke(engine: LocalEngine, catch: list[str]) -> dict[str, Any]:
    return {
        "Invoke": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Arguments": {"FunctionName": engine.get_att(FUNCTION, "Arn"), "Payload": {}},
            "Catch": [{"ErrorEquals": catch, "Next": "Caught"}],
            "Next": "Done",
        },
        "Done": {"Type": "Succeed"},
        "Caught": {"Type": "Pass", "End": True},
    }


def test_states_all_catches_a_result_over_256_kib(run: Run, engine: LocalEngine) -> None:
    """Recorded: STATES_ERRORS, TestStatesErrors::
    test_service_task_lambada_catch_state_all_data_limit_exceeded_on_large_utf8_response:
    a Catch on States.ALL takes States.DataLimitExceeded (the docs say it cannot;
    the recording wins), with the cause "The state/task 'lambda' returned a result
    with a size exceeding the maximum number of bytes service limit."."""
    with engine.override_function(FUNCTION, lambda event, context: "é" * 140_000):
        result = run(_large_invoke(engine, ["States.ALL"]))
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.states_entered == ["Invoke", "Caught"]
    assert result.output == {
        "Error": "States.DataLimitExceeded",
        "Cause": f"The state/task 'lambda' {TOO_LARGE}",
    }
    [failed] = events_of(result, "TaskFailed")
    assert (failed["resource"], failed["resourceType"]) == ("invoke", "lambda")


def test_a_catch_naming_data_limit_exceeded_takes_it_first(run: Run, engine: LocalEngine) -> None:
    """Recorded: STATES_ERRORS, TestStatesErrors::
    test_service_task_lambada_data_limit_exceeded_on_large_utf8_response."""
    states = _large_invoke(engine, ["States.DataLimitExceeded"])
    states["Invoke"]["Catch"].append({"ErrorEquals": ["States.ALL"], "Next": "Done"})
    with engine.override_function(FUNCTION, lambda event, context: "é" * 140_000):
        result = run(states)
    assert result.states_entered == ["Invoke", "Caught"]
    assert result.output["Error"] == "States.DataLimitExceeded"


def test_a_pass_state_over_256_kib_fails_the_execution(run: Run) -> None:
    """Recorded: STATES_ERRORS, TestStatesErrors::test_start_large_input: a Pass state
    whose result is 257 KiB fails the execution, "The state/task 'State_1' returned
    a result with a size exceeding the maximum number of bytes service limit."."""
    result = run(
        {"State_1": {"Type": "Pass", "Result": {"Arg1": "a" * (257 * 1024)}, "End": True}},
        query_language="JSONPath",
    )
    assert result.status == "FAILED"
    assert (result.error, result.cause) == (
        "States.DataLimitExceeded",
        f"The state/task 'State_1' {TOO_LARGE}",
    )
    assert result.event_types()[-1] == "ExecutionFailed"
