"""Inline and Distributed Map: readers, tolerance, as AWS recorded them.

Recordings: github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/scenarios/test_base_scenarios.snapshot.json.
"""

from __future__ import annotations

import json

from onceflow.local.engine import LocalEngine
from tests.parity.conftest import ROLE, Run, events_of


def _distributed(**fields: object) -> dict[str, object]:
    return {
        "Type": "Map",
        "MaxConcurrency": 1,
        "ItemProcessor": {
            "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
            "StartAt": "PassItem",
            "States": {"PassItem": {"Type": "Pass", "End": True}},
        },
        "End": True,
        **fields,
    }


def test_a_list_objects_v2_reader_gives_each_object_as_s3_lists_it(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: TestBaseScenarios::test_map_item_reader_base_list_objects_v2: each item
    is {Etag, LastModified, Key, Size, StorageClass} ("Etag", as recorded); the Map
    starts with length 0 and runs one Map Run."""
    bucket = engine.ref("IngestBucket")
    for n in range(3):
        engine.client("s3").put_object(Bucket=bucket, Key=f"file_{n}.txt", Body=b"hello world!")
    reader = {
        "Resource": "arn:aws:states:::s3:listObjectsV2",
        "Parameters": {"Bucket.$": "$.Bucket"},
    }
    result = run(
        {"MapState": _distributed(ItemReader=reader)},
        {"Bucket": bucket},
        query_language="JSONPath",
    )
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [sorted(item) for item in result.output] == [
        ["Etag", "Key", "LastModified", "Size", "StorageClass"]
    ] * 3
    assert [(i["Key"], i["Size"], i["StorageClass"]) for i in result.output] == [
        (f"file_{n}.txt", 12, "STANDARD") for n in range(3)
    ]
    assert events_of(result, "MapStateStarted") == [{"length": 0}]
    assert "MapRunStarted" in result.event_types()


def test_a_tolerated_failure_count_runs_a_map_run(run: Run) -> None:
    """Recorded: TestBaseScenarios::test_map_state_tolerated_failure_values[count_literal]:
    MapStateEntered, MapStateStarted (length 1), MapRunStarted, MapRunSucceeded,
    MapStateSucceeded, MapStateExited; the output is the input."""
    result = run(
        {"MapState": _distributed(ToleratedFailureCount=10)}, [0], query_language="JSONPath"
    )
    assert result.output == [0]
    assert result.event_types() == [
        "ExecutionStarted",
        "MapStateEntered",
        "MapStateStarted",
        "MapRunStarted",
        "MapRunSucceeded",
        "MapStateSucceeded",
        "MapStateExited",
        "ExecutionSucceeded",
    ]


def test_an_execution_input_written_with_spaces_enters_the_first_state_compact(
    engine: LocalEngine,
) -> None:
    """Recorded: TestBaseScenarios::test_map_state_label (20 July 2024) and
    test_map_state_result_writer (19 August 2024): the input text '["Hello", "World"]'
    enters the Map as '["Hello","World"]'. (Recordings of February and March 2024, e.g.
    test_map_state_legacy_config_inline, kept the text; docs/local-engine.md.)"""
    sfn = engine.client("stepfunctions")
    definition = {"StartAt": "MapState", "States": {"MapState": _distributed(Label="TestMap")}}
    machine = sfn.create_state_machine(
        name="spaced-input", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    started = sfn.start_execution(stateMachineArn=machine, name="e", input='["Hello", "World"]')
    result = engine.wait(started["executionArn"])
    entered = next(e for e in result.events if e["type"] == "MapStateEntered")
    assert entered["stateEnteredEventDetails"]["input"] == '["Hello","World"]'
