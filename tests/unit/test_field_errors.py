"""A state field whose value AWS cannot use fails where, and in the words, AWS records.

SCENARIOS: github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/scenarios/test_base_scenarios.snapshot.json (each
test validated on AWS).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest

from onceflow.local.engine import ExecutionResult, LocalEngine
from tests.helpers import FUNCTION

ROLE = "arn:aws:iam::123456789012:role/fields"
_NAMES = count()


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """One stack for the module (an engine start was most of each test's time): each test
    runs state machines of its own (`_run` names each anew) and reads only their
    executions; a function's override ends with its test."""
    with LocalEngine(function_log=io.StringIO()) as local:
        yield local


def _run(engine: LocalEngine, states: dict[str, Any], execution_input: Any,
         language: str = "JSONPath") -> ExecutionResult:  # fmt: skip
    definition = {"QueryLanguage": language, "StartAt": next(iter(states)), "States": states}
    arn = engine.client("stepfunctions").create_state_machine(
        name=f"fields-{next(_NAMES)}", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    return engine.execute(arn, execution_input)


def _details(result: ExecutionResult, kind: str) -> list[dict[str, Any]]:
    return [
        value
        for event in result.events
        if event["type"] == kind
        for key, value in event.items()
        if key.endswith("EventDetails")
    ]


def _decorated(state: str, entered: int, cause: str) -> str:
    return f"An error occurred while executing the state '{state}' (entered at the event id #{entered}). {cause}"  # noqa: E501


@pytest.mark.parametrize(
    "timestamp",
    [
        "2016-12-05 21:29:29Z",  # NO_T
        "2016-12-05T21:29:29",  # NO_Z
        "2016-13-05T21:29:29Z",  # INVALID_DATE
        "2016-12-05T25:29:29Z",  # INVALID_TIME
        "05-12-2016T21:29:29Z",  # INVALID_ISO
    ],
)
def test_a_jsonata_wait_timestamp_that_is_not_iso_8601_is_an_evaluation_failure(
    engine: LocalEngine, timestamp: str
) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_wait_timestamp_jsonata[NO_T|NO_Z|
    INVALID_DATE|INVALID_TIME|INVALID_ISO]: EvaluationFailed (location Timestamp) after the
    entry, then ExecutionFailed, both States.QueryEvaluationError with the same cause."""
    wait = {"Type": "Wait", "Timestamp": "{% $states.input.TimestampValue %}", "End": True}
    result = _run(engine, {"WaitState": wait}, {"TimestampValue": timestamp}, "JSONata")
    cause = _decorated(
        "WaitState",
        2,
        "The Timestamp field cannot be parsed as an ISO-8601 extended offset date-time "
        f"format string: {timestamp}",
    )
    assert result.event_types()[1:] == ["WaitStateEntered", "EvaluationFailed", "ExecutionFailed"]
    assert _details(result, "EvaluationFailed") == [
        {
            "error": "States.QueryEvaluationError",
            "cause": cause,
            "location": "Timestamp",
            "state": "WaitState",
        }
    ]
    assert (result.error, result.cause) == ("States.QueryEvaluationError", cause)
    assert result.events[2]["previousEventId"] == 2


@pytest.mark.parametrize("field", ["TimeoutSecondsPath", "HeartbeatSecondsPath"])
def test_a_seconds_path_that_finds_nothing_fails_the_execution_at_the_state(
    engine: LocalEngine, field: str
) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_invalid_jsonpath[ST.INVALID_JSONPATH_IN_
    TIMEOUTSECONDSPATH|HEARTBEATSECONDSPATH]: TaskStateEntered, then one ExecutionFailed
    (States.Runtime, "Invalid path ..."); no task is scheduled. A Catch on States.ALL
    does not take a States.Runtime error ('Handling errors in Step Functions workflows')."""
    resource = "arn:aws:states:::aws-sdk:s3:listBuckets"
    task = {
        "Type": "Task",
        field: "$.NoSuchTimeoutSecondsPath",
        "Resource": resource + (".waitForTaskToken" if field.startswith("Heart") else ""),
        "Parameters": {},
        "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
        "End": True,
    }
    states = {"task": task, "Caught": {"Type": "Succeed"}}
    result = _run(engine, states, {"int-literal": 0})
    path = "Invalid path '$.NoSuchTimeoutSecondsPath' : No results for path: "
    assert result.event_types() == ["ExecutionStarted", "TaskStateEntered", "ExecutionFailed"]
    assert (result.error, result.cause) == (
        "States.Runtime",
        _decorated("task", 2, path + "$['NoSuchTimeoutSecondsPath']"),
    )


@pytest.mark.parametrize(
    ("states", "cause"),
    [
        (
            {"fail": {"Type": "Fail", "ErrorPath": "$.ErrorX"}},
            "The JSONPath '$.ErrorX' specified for the field 'ErrorPath' could not be found "
            """in the input '{"int-literal":0}'""",
        ),
        (
            {"pass": {"Type": "Pass", "Parameters": {"value.$": "$.nothing"}, "End": True}},
            "The JSONPath '$.nothing' specified for the field 'value.$' could not be found "
            """in the input '{"int-literal":0}'""",
        ),
    ],
)
def test_a_path_that_finds_nothing_names_the_input_as_compact_json(
    engine: LocalEngine, states: dict[str, Any], cause: str
) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_invalid_jsonpath[INVALID_JSONPATH_IN_
    ERRORPATH|STRING_EXPR_JSONPATH] (the input masked there); AWS writes it without spaces,
    as a console shows: "... could not be found in the input '{"flagged":false}'" (AWS
    Step Functions workshop, 000047.awsstudygroup.com, 'Check the workflow')."""
    result = _run(engine, states, {"int-literal": 0})
    name = next(iter(states))
    assert (result.error, result.cause) == ("States.Runtime", _decorated(name, 2, cause))


def test_a_max_items_path_that_is_not_an_integer_fails_before_the_map_run(
    engine: LocalEngine,
) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_map_item_reader_csv_max_items_paths[1.5]:
    MapStateStarted, then ExecutionFailed (States.Runtime, 'The MaxItemsPath field refers
    to value "1.5" which is not a valid integer: $.MaxItems'); no Map Run starts."""
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="items")
    s3.put_object(Bucket="items", Key="file.csv", Body=b"a,b\n1,2\n3,4\n")
    config = {"InputType": "CSV", "CSVHeaderLocation": "FIRST_ROW", "MaxItemsPath": "$.MaxItems"}
    reader = {"ReaderConfig": config, "Resource": "arn:aws:states:::s3:getObject",
              "Parameters": {"Bucket.$": "$.Bucket", "Key.$": "$.Key"}}  # fmt: skip
    processor = {
        "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
        "StartAt": "PassItem",
        "States": {"PassItem": {"Type": "Pass", "End": True}},
    }
    map_state = {"Type": "Map", "MaxConcurrency": 1, "ItemReader": reader,
                 "ItemProcessor": processor, "End": True}  # fmt: skip
    result = _run(engine, {"MapState": map_state}, {"Bucket": "items", "Key": "file.csv",
                                                    "MaxItems": 1.5})  # fmt: skip
    assert result.event_types()[1:] == ["MapStateEntered", "MapStateStarted", "ExecutionFailed"]
    cause = 'The MaxItemsPath field refers to value "1.5" which is not a valid integer: $.MaxItems'
    assert (result.error, result.cause) == ("States.Runtime", _decorated("MapState", 2, cause))


def test_a_cause_names_the_event_its_state_was_entered_at(engine: LocalEngine) -> None:
    """Recorded: SCENARIOS, TestBaseScenarios::test_catch_states_runtime: an OutputPath that
    finds nothing after the Lambda ran (events 3-5) fails the execution "... (entered at
    the event id #2). Invalid path ..."; the Catch on States.Runtime does not take it."""
    task = {
        "Type": "Task",
        "Resource": engine.get_att(FUNCTION, "Arn"),
        "OutputPath": "$.no.such.result.path",
        "Catch": [{"ErrorEquals": ["States.Runtime"], "Next": "CaughtRuntime"}],
        "End": True,
    }
    states = {"RaiseRuntime": task, "CaughtRuntime": {"Type": "Pass", "End": True}}
    with engine.override_function(FUNCTION, lambda event, context: {}):
        result = _run(engine, states, {})
    invalid = "Invalid path '$.no.such.result.path' : Missing property in path $['no']"
    assert result.event_types()[-2:] == ["LambdaFunctionSucceeded", "ExecutionFailed"]
    assert result.error == "States.Runtime"
    assert result.cause == _decorated("RaiseRuntime", 2, invalid)
