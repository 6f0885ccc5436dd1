"""The SQS source's alarms: whole batches that fail, a pipe that fails or stops; the dashboard."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.template import Stack

BATCH_MODE = {
    "SqsSource": "create",
    "SqsBatchMode": "true",
    "ProcessorTimeoutSeconds": "40",
}
EXISTING_QUEUE = "arn:aws:sqs:us-east-1:123456789012:orders-queue"


@pytest.fixture(scope="module")
def batch_engine() -> Iterator[LocalEngine]:
    with LocalEngine(
        DEFAULT_TEMPLATE, BATCH_MODE, function_log=io.StringIO(), stack_name="alarms"
    ) as engine:
        yield engine


def _alarm(engine: LocalEngine, logical_id: str) -> dict[str, Any]:
    resource = engine.stack.template["Resources"][logical_id]
    assert engine.stack.resource_enabled(logical_id), logical_id
    resolved: dict[str, Any] = engine.stack.resolve(resource["Properties"])
    return resolved


def _watched(alarm: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, str]]]:
    """Each metric of a metric-math alarm by its id: (namespace, name, dimensions)."""
    return {
        m["Id"]: (
            m["MetricStat"]["Metric"]["Namespace"],
            m["MetricStat"]["Metric"]["MetricName"],
            {d["Name"]: d["Value"] for d in m["MetricStat"]["Metric"]["Dimensions"]},
        )
        for m in alarm["Metrics"]
        if "MetricStat" in m
    }


def test_a_batch_that_fails_as_a_whole_alarms(batch_engine: LocalEngine) -> None:
    # GIVEN the batch mode's alarm as the stack resolves it
    alarm = _alarm(batch_engine, "BatchProcessorFailedAlarm")
    batch = batch_engine.ref("BatchProcessorStateMachine")
    # THEN it adds the batch workflow's failed, timed out and aborted executions
    watched = _watched(alarm)
    assert sorted(name for _, name, _ in watched.values()) == [
        "ExecutionsAborted",
        "ExecutionsFailed",
        "ExecutionsTimedOut",
    ]
    for namespace, _, dimensions in watched.values():
        assert (namespace, dimensions) == ("AWS/States", {"StateMachineArn": batch})
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["ReturnData"] is True
    assert sorted(expression["Expression"].replace("FILL(", "").split(" + ")) == sorted(
        f"{metric_id}, 0)" for metric_id in watched
    )
    # AND one such batch is enough
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    # AND the single-message processor's alarm does not stand in for it
    processor = _watched(_alarm(batch_engine, "ProcessorFailedAlarm"))
    assert all(d["StateMachineArn"] != batch for _, _, d in processor.values())


def test_a_pipe_that_fails_to_invoke_its_target_alarms(batch_engine: LocalEngine) -> None:
    # GIVEN the pipe's alarm, and the pipe's name (Ref of AWS::Pipes::Pipe)
    alarm = _alarm(batch_engine, "SourcePipeFailedAlarm")
    pipe = batch_engine.ref("SourcePipe")
    # THEN it watches the metrics the pipe publishes under its name (eb-pipes-monitoring.html)
    watched = _watched(alarm)
    assert sorted(name for _, name, _ in watched.values()) == [
        "ExecutionFailed",
        "ExecutionTimeout",
        "TargetStageFailed",
    ]
    for namespace, _, dimensions in watched.values():
        assert (namespace, dimensions) == ("AWS/EventBridge/Pipes", {"PipeName": pipe})
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")


@pytest.mark.parametrize(
    ("source", "queue_name"), [("create", None), (EXISTING_QUEUE, "orders-queue")]
)
def test_a_stopped_or_disabled_pipe_alarms_through_its_queue(
    source: str, queue_name: str | None
) -> None:
    """A disabled pipe publishes no metric: its queue's oldest message ages instead."""
    # GIVEN a stack with the created queue, or with an existing one
    stack = Stack.from_file(DEFAULT_TEMPLATE, {"SqsSource": source})
    alarm = stack.template["Resources"]["SourceQueueNotDrainingAlarm"]
    assert stack.resource_enabled("SourceQueueNotDrainingAlarm")
    props = alarm["Properties"]
    # THEN it watches that queue's oldest message, by the queue's name
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
        "AWS/SQS",
        "ApproximateAgeOfOldestMessage",
        "Maximum",
    )
    (dimension,) = props["Dimensions"]
    if queue_name is None:
        assert dimension["Value"]["Fn::If"][1] == {"Fn::GetAtt": ["SourceQueue", "QueueName"]}
    else:
        assert stack.resolve(dimension["Value"]) == queue_name
    assert props["Threshold"] == 3600 and props["ComparisonOperator"] == "GreaterThanThreshold"


def test_without_an_sqs_source_there_are_no_source_alarms() -> None:
    stack = Stack.from_file(DEFAULT_TEMPLATE)
    for logical_id in (
        "BatchProcessorFailedAlarm",
        "SourcePipeFailedAlarm",
        "SourceQueueNotDrainingAlarm",
    ):
        assert not stack.resource_enabled(logical_id), logical_id


def test_the_dashboard_shows_the_batch_and_pipe_alarms_and_charts(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN the dashboard of a batch-mode stack, resolved as CloudFormation resolves it
    body_template = batch_engine.stack.template["Resources"]["Dashboard"]["Properties"]
    body = json.loads(batch_engine.stack.resolve(body_template["DashboardBody"]))
    # THEN its alarm widget lists the three new alarms
    (alarm_widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    for logical_id in (
        "BatchProcessorFailedAlarm",
        "SourcePipeFailedAlarm",
        "SourceQueueNotDrainingAlarm",
    ):
        assert batch_engine.get_att(logical_id, "Arn") in alarm_widget["properties"]["alarms"]
    # AND it charts the pipe, the queue's oldest message and the batch workflow's executions
    pipe = batch_engine.ref("SourcePipe")
    charts = json.dumps([w for w in body["widgets"] if w["type"] == "metric"])
    assert f'"PipeName", "{pipe}"' in charts
    assert "ApproximateAgeOfOldestMessage" in charts
    batch = batch_engine.ref("BatchProcessorStateMachine")
    assert f'"StateMachineArn", "{batch}"' in charts
