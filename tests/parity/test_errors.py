"""Errors the states meet, with AWS's names and words, and which catchers take them."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import FUNCTION, invocations
from tests.parity.conftest import Run, events_of

# STATES_ERRORS: github.com/localstack/localstack,
# tests/aws/services/stepfunctions/v2/error_handling/test_states_errors.snapshot.json
TOO_LARGE = "returned a result with a size exceeding the maximum number of bytes service limit."


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """One stack for the module (an engine start was most of each test's time): each test
    runs state machines of its own (`run` names each anew) and reads only their executions;
    a function's override ends with its test."""
    with LocalEngine(function_log=io.StringIO()) as local:
        yield local


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


def test_a_service_task_input_over_256_kib_names_the_resource_type(
    run: Run, engine: LocalEngine
) -> None:
    """A lambda:invoke whose arguments are over 256 KiB in UTF-8 fails with
    States.DataLimitExceeded before the call, its cause naming the task as the recorded
    result case names it, by its resource type: "The state/task 'lambda' has an input with
    a size exceeding ..." (the result's wording is recorded, STATES_ERRORS above; the
    input's is not verified)."""
    states = _large_invoke(engine, ["States.ALL"])
    states["Invoke"]["Arguments"]["Payload"] = {"text": "é" * 140_000}
    invoked = invocations(engine)  # (the module's stack: other tests' calls came before)
    result = run(states)
    assert result.output == {
        "Error": "States.DataLimitExceeded",
        "Cause": "The state/task 'lambda' has an input with a size exceeding the maximum "
        "number of bytes service limit.",
    }
    [failed] = events_of(result, "TaskFailed")
    assert (failed["resource"], failed["resourceType"]) == ("invoke", "lambda")
    assert invocations(engine) == invoked


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


# SCENARIOS: github.com/localstack/localstack,
# tests/aws/services/stepfunctions/v2/scenarios/test_base_scenarios.snapshot.json
@pytest.mark.parametrize(
    ("items", "shown"),
    [
        (1, "1"),
        ("string", '"string"'),
        (True, "true"),
        (None, "null"),
        ({"foo": "bar"}, '{"foo":"bar"}'),
    ],
)
def test_a_map_whose_input_is_not_an_array_names_the_value(
    run: Run, items: Any, shown: str
) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_map_state_items_input_types[number|string|
    boolean|null|object]: States.QueryEvaluationError, "Map state input must be an array
    but was: <the value as JSON>", one EvaluationFailed naming the state."""
    result = run(
        {
            "Start": {
                "Type": "Pass",
                "Output": "{% $states.input.items %}",
                "Next": "MapIterateState",
            },
            "MapIterateState": {
                "Type": "Map",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "Pass",
                    "States": {"Pass": {"Type": "Pass", "End": True}},
                },
                "End": True,
            },
        },
        {"items": items},
    )
    cause = (
        "An error occurred while executing the state 'MapIterateState' (entered at the event "
        f"id #4). Map state input must be an array but was: {shown}"
    )
    assert (result.error, result.cause) == ("States.QueryEvaluationError", cause)
    [failed] = events_of(result, "EvaluationFailed")
    assert (failed["cause"], failed["state"]) == (cause, "MapIterateState")


# ASSIGN_REFERENCES: github.com/localstack/localstack,
# tests/aws/services/stepfunctions/v2/assign/test_assign_reference_variables.snapshot.json
@pytest.mark.parametrize(
    ("state", "location"),
    [
        ({"Type": "Pass", "Output": "{% $doesNotExist %}", "End": True}, "Output"),
        (
            {"Type": "Pass", "Output": {"result": "{% $doesNotExist %}"}, "End": True},
            "Output/result",
        ),
        (
            {"Type": "Pass", "Assign": {"result": "{% $doesNotExist %}"}, "End": True},
            "Assign/result",
        ),
        (
            {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Arguments": {"FunctionName": "{% $doesNotExist %}", "Payload": {}},
                "End": True,
            },
            "Arguments/FunctionName",
        ),
    ],
)
def test_an_undefined_result_names_the_field_once(
    run: Run, state: dict[str, Any], location: str
) -> None:
    """Recorded: ASSIGN_REFERENCES, TestAssignReferenceVariables::test_undefined_reference
    [BASE_UNDEFINED_OUTPUT|_OUTPUT_FIELD|_ASSIGN|_ARGUMENTS_FIELD]: one EvaluationFailed
    with the state and the field's location; the cause "The JSONata expression
    '$doesNotExist' specified for the field 'F' returned nothing (undefined).\""""
    result = run({"State0": state})
    cause = (
        "An error occurred while executing the state 'State0' (entered at the event id #2). "
        f"The JSONata expression '$doesNotExist' specified for the field '{location}' "
        "returned nothing (undefined)."
    )
    assert (result.error, result.cause) == ("States.QueryEvaluationError", cause)
    [failed] = events_of(result, "EvaluationFailed")
    assert failed == {
        "error": "States.QueryEvaluationError",
        "cause": cause,
        "location": location,
        "state": "State0",
    }


@pytest.mark.parametrize("kind", ["Pass", "Task"])
def test_an_evaluation_failure_is_linked_to_what_its_states_entry_follows(
    run: Run, kind: str
) -> None:
    """Recorded: ASSIGN_REFERENCES, TestAssignReferenceVariables::test_undefined_reference
    [BASE_UNDEFINED_OUTPUT_MULTIPLE_STATES]: the second state entered (#6) after the first's
    exit (#5), its EvaluationFailed (#7) after #5 too, not after its entry; and
    [BASE_UNDEFINED_ARGUMENTS]: a first state's EvaluationFailed after event 0, as its entry."""
    failing: dict[str, Any] = (
        {"Type": "Pass", "Output": "{% $doesNotExist %}", "End": True}
        if kind == "Pass"
        else {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
              "Arguments": {"FunctionName": "{% $doesNotExist %}"}, "End": True}
    )  # fmt: skip
    result = run({"State0": {"Type": "Pass", "Next": "State1"}, "State1": failing})
    by_type = {e["type"]: e for e in result.events}
    entered, failed = by_type[f"{kind}StateEntered"], by_type["EvaluationFailed"]
    exited = by_type["PassStateExited"]
    assert entered["previousEventId"] == exited["id"]
    assert failed["id"] == entered["id"] + 1
    assert failed["previousEventId"] == exited["id"]
    assert by_type["ExecutionFailed"]["previousEventId"] == failed["id"]
    # AND a first state's failure follows event 0, as its entry does
    first = run({"State0": failing})
    assert [e["previousEventId"] for e in first.events[1:3]] == [0, 0]


def test_an_expression_that_throws_names_the_field_and_the_error(run: Run) -> None:
    """Recorded: intrinsic_functions/test_math_operations_jsonata.snapshot.json,
    TestMathOperationsJSONata::test_math_random_seeded: "The JSONata expression
    '$randomSeeded(...)' specified for the field 'Output/FunctionResult' threw an error
    during evaluation. T1006: Attempted to invoke a non-function"."""
    expression = "$randomSeeded($states.input.FunctionInput.fst)"
    result = run(
        {
            "State_0": {
                "Type": "Pass",
                "Output": {"FunctionResult": f"{{% {expression} %}}"},
                "End": True,
            }
        },
        {"FunctionInput": "fst"},
    )
    cause = (
        "An error occurred while executing the state 'State_0' (entered at the event id #2). "
        f"The JSONata expression '{expression}' specified for the field 'Output/FunctionResult' "
        "threw an error during evaluation. T1006: Attempted to invoke a non-function"
    )
    assert (result.error, result.cause) == ("States.QueryEvaluationError", cause)
    [failed] = events_of(result, "EvaluationFailed")
    assert (failed["cause"], failed["location"]) == (cause, "Output/FunctionResult")


def test_a_failed_parallel_branch_aborts_its_failed_state(run: Run, engine: LocalEngine) -> None:
    """Recorded: states_variables/test_error_output.snapshot.json,
    TestStateVariablesTemplate::test_parallel_catch_error[PARALLEL_CATCH_ERROR_OUTPUT]: the
    branch's events are TaskStateEntered, TaskScheduled, TaskStarted, TaskFailed and
    TaskStateAborted; the Parallel's Catch takes the error; 13 events in all (the
    snapshot's order-normalising transformer drops event 9, ParallelStateFailed)."""

    def raising(event: Any, context: Any) -> Any:
        raise Exception("Some exception was raised.")

    branch = {
        "StartAt": "ExecuteLambdaTask",
        "States": {
            "ExecuteLambdaTask": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Arguments": {
                    "FunctionName": engine.get_att(FUNCTION, "Arn"),
                    "Payload": {"foo": "foobar"},
                },
                "End": True,
            }
        },
    }
    states = {
        "ParallelState": {
            "Type": "Parallel",
            "Branches": [branch],
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Fallback"}],
            "Next": "Finish",
        },
        "Fallback": {"Type": "Pass", "End": True},
        "Finish": {"Type": "Pass", "End": True},
    }
    with engine.override_function(FUNCTION, raising):
        result = run(states, {"inputData": "dummy"})
    types = result.event_types()
    assert types[3:8] == [
        "TaskStateEntered",
        "TaskScheduled",
        "TaskStarted",
        "TaskFailed",
        "TaskStateAborted",
    ]
    assert types[8:] == [
        "ParallelStateFailed",
        "ParallelStateExited",
        "PassStateEntered",
        "PassStateExited",
        "ExecutionSucceeded",
    ]


def test_items_that_are_not_an_array_fail_once_naming_the_field(run: Run) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_map_state_items_eval_jsonata_fail[number]:
    one EvaluationFailed, location Items, "The JSONata expression '1' specified for the
    field 'Items' returned an unexpected result type. Expected 'array', but was 'number'
    for value: 1"; then MapStateFailed and ExecutionFailed."""
    result = run(
        {
            "MapIterateState": {
                "Type": "Map",
                "MaxConcurrency": 1,
                "Items": "{% 1 %}",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "Pass",
                    "States": {"Pass": {"Type": "Pass", "End": True}},
                },
                "End": True,
            }
        }
    )
    cause = (
        "An error occurred while executing the state 'MapIterateState' (entered at the event "
        "id #2). The JSONata expression '1' specified for the field 'Items' returned an "
        "unexpected result type. Expected 'array', but was 'number' for value: 1"
    )
    assert result.event_types() == [
        "ExecutionStarted",
        "MapStateEntered",
        "EvaluationFailed",
        "MapStateFailed",
        "ExecutionFailed",
    ]
    [failed] = events_of(result, "EvaluationFailed")
    assert failed == {
        "error": "States.QueryEvaluationError",
        "cause": cause,
        "location": "Items",
        "state": "MapIterateState",
    }
    assert (result.error, result.cause) == ("States.QueryEvaluationError", cause)


# 'Handling errors in Step Functions workflows', States.Runtime: "A States.Runtime error
# isn't retriable, and will always cause the execution to fail. A retry or catch on
# States.ALL won't catch States.Runtime errors." Recorded: SCENARIOS,
# TestBaseScenarios::test_catch_states_runtime (a Catch naming States.Runtime does not take
# it); test_invalid_jsonpath[INVALID_JSONPATH_IN_STRING_EXPR_JSONPATH|_CONTEXTPATH] (the
# error and cause; entry, then ExecutionFailed, as [ST.INVALID_JSONPATH_IN_TIMEOUTSECONDSPATH]
# records for a Task).
@pytest.mark.parametrize("path", ["$.no_such_jsonpath", "$$.Execution.Input.no_such_jsonpath"])
@pytest.mark.parametrize(
    "handler",
    [
        {"Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}]},
        {"Catch": [{"ErrorEquals": ["States.Runtime"], "Next": "Caught"}]},
        {"Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 2}]},
        {"Retry": [{"ErrorEquals": ["States.Runtime"], "MaxAttempts": 2}]},
    ],
    ids=["catch-all", "catch-runtime", "retry-all", "retry-runtime"],
)
def test_no_retry_or_catch_takes_a_states_runtime_error(
    run: Run, engine: LocalEngine, handler: dict[str, Any], path: str
) -> None:
    task = {
        "Type": "Task",
        "Resource": engine.get_att(FUNCTION, "Arn"),
        "Parameters": {"value.$": path},
        "Next": "Done",
        **handler,
    }
    states = {"task": task, "Done": {"Type": "Succeed"}, "Caught": {"Type": "Succeed"}}
    result = run(states, {"int-literal": 0}, query_language="JSONPath")
    cause = (
        "An error occurred while executing the state 'task' (entered at the event id #2). "
        f"The JSONPath '{path}' specified for the field 'value.$' could not be found in the "
        "input '"
    )
    assert (result.status, result.error) == ("FAILED", "States.Runtime")
    assert result.cause and result.cause.startswith(cause), result.cause
    if path.startswith("$."):
        assert result.cause == cause + """{"int-literal":0}'"""
    assert result.event_types() == ["ExecutionStarted", "TaskStateEntered", "ExecutionFailed"]


@pytest.mark.parametrize("error", ["States.DataLimitExceeded", "States.Timeout"])
def test_a_fail_state_raising_a_states_error_in_a_parallel_reaches_its_catch(
    run: Run, error: str
) -> None:
    """The batch's LogFailed re-raises a message's error from a Fail state in a Parallel.
    'Fail workflow state': Error is "an error name that you can provide to perform error
    handling using Retry or Catch"; a Parallel fails with its branch's error, States.*
    too, which its Catch takes (recorded: states_variables/test_error_output.snapshot.json,
    test_parallel_catch_error). A Fail state naming a States.* error: not verified on AWS
    (moto refused the name, which became an uncatchable States.Runtime)."""
    failed = {"Type": "Fail", "Error": "{% $states.input.code %}", "Cause": "over the limit"}
    output = "{% $states.errorOutput %}"
    caught = {"ErrorEquals": ["States.ALL"], "Next": "Caught", "Output": output}
    branch = {"StartAt": "Failed", "States": {"Failed": failed}}
    states = {
        "LogFailed": {"Type": "Parallel", "Branches": [branch], "Catch": [caught], "Next": "Done"},
        "Done": {"Type": "Succeed"},
        "Caught": {"Type": "Pass", "End": True},
    }
    result = run(states, {"code": error})
    assert (result.status, result.states_entered[-1]) == ("SUCCEEDED", "Caught")
    assert result.output == {"Error": error, "Cause": "over the limit"}
