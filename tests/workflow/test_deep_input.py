"""Deep input: each message is judged alone, where Step Functions' JSONata judges it.

A value nested deeper than node's stack fails inside the JSONata evaluation, as it
does in Step Functions; the Python that carries values to it (moto's interpreter,
the engine) must never give up first, and a node worker that died with one
execution's expression must never answer another's.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow import ops
from onceflow.local import INPUT_DEPTH_LIMIT
from onceflow.local.engine import LocalEngine
from onceflow.local.limits.eventbridge import EVENTBRIDGE_DEPTH_LIMIT
from onceflow.local.target import LocalTarget
from tests.helpers import MACHINE, attributes, dlq_messages, ledger_rows, load_event
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes
from tests.workflow.test_invalid_events import INVALID_PATH


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def brackets(nbytes: int) -> str:
    """The deepest JSON text of nbytes: arrays in arrays, two bytes a level."""
    return "[" * (nbytes // 2) + "]" * (nbytes // 2)


def executions(engine: LocalEngine) -> list[Any]:
    sfn = engine.client("stepfunctions")
    return list(sfn.list_executions(stateMachineArn=engine.ref(MACHINE))["executions"])


# The created queue's MaximumMessageSize in the batch mode (SqsBatchSize 10: template.yaml)
BATCH_QUEUE_MESSAGE_BYTES = 11_264


@pytest.mark.parametrize(
    "deep",
    [
        pytest.param('{"a":' * 1_500 + '"leaf"' + "}" * 1_500, id="1500-levels"),
        pytest.param(brackets(BATCH_QUEUE_MESSAGE_BYTES), id="deepest-the-queue-takes"),
    ],
)
def test_a_deep_message_in_a_batch_is_invalid_alone_and_its_neighbours_are_processed(
    deep: str,
) -> None:
    # GIVEN batch mode, nine orders and one message nested deep: 1,500 levels, or the
    # deepest body the created queue takes (5,632 levels of arrays)
    with LocalEngine(parameters=BATCH_PARAMETERS, function_log=io.StringIO()) as engine:
        sqs = engine.client("sqs")
        url = engine.ref("SourceQueue")
        ids = {}
        for n in range(9):
            body = json.dumps({"orderId": f"order-{n}"})
            ids[sqs.send_message(QueueUrl=url, MessageBody=body)["MessageId"]] = f"order-{n}"
        deep_id = sqs.send_message(QueueUrl=url, MessageBody=deep)["MessageId"]
        # WHEN the pipe hands the ten over as one batch
        [arn] = engine.pump_pipes()
        # THEN the batch succeeded; the deep message alone is an InvalidEvent
        # (dead-lettered, settled), and the nine orders were processed
        assert engine.wait(arn).status == "SUCCEEDED"
        by_message = outcomes(engine, arn)
        assert by_message[deep_id]["outcome"] == "InvalidEvent"
        assert {by_message[m]["outcome"] for m in ids} == {"Processed"}
        assert {row["pk"] for row in ledger_rows(engine)} == {f"sqs:{o}" for o in ids.values()}
        [dead] = dlq_messages(engine)
        assert attributes(dead)["ERROR_CODE"] == "InvalidEvent"
        # the DLQ message keeps the message's body (the pipe's record is shallow)
        [record] = json.loads(dead["Body"])["event"]
        assert record["messageId"] == deep_id and record["body"] == deep


def test_a_deep_custom_event_ends_invalid_event_with_its_dlq_message(engine: LocalEngine) -> None:
    # GIVEN an event of no known shape, nested 900 levels deep
    event = nested(900)
    # WHEN the processor runs on it
    result = engine.execute("ProcessorStateMachine", event)
    # THEN Claim's rules judge it: InvalidEvent, one DLQ message, no ledger row
    assert result.outcome == "InvalidEvent", (result.error, result.cause)
    [dead] = dlq_messages(engine)
    assert attributes(dead)["ERROR_CODE"] == "InvalidEvent"
    assert ledger_rows(engine) == []


# How deep the rules walk depends on how warm the node evaluator is (V8's optimised frames
# are smaller): about 2,700 levels of objects in a fresh worker, over 4,000 in one that has
# evaluated a few hundred executions, under 6,000 either way (measured). A depth just within
# what the engine runs (INPUT_DEPTH_LIMIT, the event and its detail two levels more) is past
# the rules' reach however warm the worker is.
TOO_DEEP_FOR_THE_RULES = INPUT_DEPTH_LIMIT - 10


def deep_custom_event(depth: int) -> dict[str, Any]:
    """events/eventbridge-custom-event.json with its detail's payload nested depth levels."""
    event = load_event("eventbridge-custom-event.json")
    event["detail"]["payload"] = nested(depth)
    return event


def test_a_custom_event_too_deep_for_the_rules_started_directly_ends_invalid_event(
    engine: LocalEngine,
) -> None:
    # GIVEN a custom event whose detail nests nearly as deep as the engine runs, past what
    # Claim's rules can walk (its JSON text, about 48 KB, well within StartExecution's 256 KiB)
    event = deep_custom_event(TOO_DEEP_FOR_THE_RULES)
    text = json.dumps(event, separators=(",", ":"))
    assert len(text.encode()) < 256 * 1024
    # WHEN a producer starts the processor on it directly
    sfn = engine.client("stepfunctions")
    arn = sfn.start_execution(stateMachineArn=engine.ref(MACHINE), input=text)["executionArn"]
    result = engine.wait(arn)
    # THEN Claim's rules could not read it: InvalidEvent, one DLQ message saying why, no row
    assert result.outcome == "InvalidEvent", (result.error, result.cause)
    assert result.states_entered == INVALID_PATH
    [dead] = dlq_messages(engine)
    reason = attributes(dead)
    assert reason["ERROR_CODE"] == "InvalidEvent"
    assert reason["ERROR_MESSAGE"].startswith("the event could not be read: ")
    assert reason["EXECUTION_ARN"] == arn
    # the event is not carried (nothing after Claim walks it again); its history keeps it
    assert json.loads(dead["Body"])["event"] is None
    assert ledger_rows(engine) == []


def test_the_deepest_input_the_engine_runs_is_an_invalid_event_and_deeper_is_refused_by_name(
    engine: LocalEngine,
) -> None:
    sfn = engine.client("stepfunctions")
    # GIVEN input nested as deep as the engine runs (arrays in arrays)
    text = brackets(2 * INPUT_DEPTH_LIMIT)
    # WHEN it is started THEN Claim's rules cannot read it: an InvalidEvent with its DLQ message
    arn = sfn.start_execution(stateMachineArn=engine.ref(MACHINE), input=text)["executionArn"]
    assert engine.wait(arn).outcome == "InvalidEvent"
    [dead] = dlq_messages(engine)
    assert " could not be read: " in attributes(dead)["ERROR_MESSAGE"]
    assert ledger_rows(engine) == []
    # GIVEN one level deeper, and the deepest input StartExecution's 256 KiB can hold
    for depth in (INPUT_DEPTH_LIMIT + 1, 128 * 1024):
        # WHEN it is started THEN the engine refuses it at once, saying why: nothing starts
        with pytest.raises(ClientError) as refused:
            sfn.start_execution(stateMachineArn=engine.ref(MACHINE), input=brackets(2 * depth))
        error = refused.value.response["Error"]
        assert error["Code"] == "InvalidExecutionInput"
        assert error["Message"].startswith(f"the input nests {depth} levels deep; the local engine")
    assert len(executions(engine)) == 1
    assert len(dlq_messages(engine)) == 1


def test_put_events_refuses_an_event_nested_deeper_than_eventbridge_processes(
    engine: LocalEngine,
) -> None:
    # GIVEN custom events whose detail nests 999 levels (the event EventBridge delivers, in
    # its envelope, 1,000) and one level more
    def detail(depth: int) -> dict[str, Any]:
        return {"order": "o-1", "deep": nested(depth - 1)}  # in all, depth objects

    # WHEN they are put on the bus THEN the first starts the processor, which records it...
    [arn] = engine.put_custom_event("onceflow.work", "Work", detail(EVENTBRIDGE_DEPTH_LIMIT - 1))
    assert engine.wait(arn).outcome == "Processed"
    # ...and PutEvents refuses the second, by the engine's helper and the API alike
    with pytest.raises(ClientError) as refused:
        engine.put_custom_event("onceflow.work", "Work", detail(EVENTBRIDGE_DEPTH_LIMIT))
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "PutEvents processes nested JSON up to 1000 levels deep" in str(refused.value)
    entry = {
        "Source": "onceflow.work",
        "DetailType": "Work",
        "Detail": json.dumps(detail(EVENTBRIDGE_DEPTH_LIMIT)),
    }
    with pytest.raises(ClientError, match="nests 1001 levels deep"):
        engine.client("events").put_events(Entries=[entry])
    assert len(executions(engine)) == 1


@pytest.fixture
def sqs_engine() -> Iterator[LocalEngine]:
    with LocalEngine(parameters={"SqsSource": "create"}, function_log=io.StringIO()) as local:
        yield local


def test_the_deepest_message_the_queue_takes_is_an_invalid_event_that_keeps_its_body(
    sqs_engine: LocalEngine,
) -> None:
    engine = sqs_engine
    # GIVEN the deepest body the created queue takes (64 KiB: 32,768 levels of arrays)
    body = brackets(64 * 1024)
    sqs = engine.client("sqs")
    message_id = sqs.send_message(QueueUrl=engine.ref("SourceQueue"), MessageBody=body)["MessageId"]
    # WHEN the pipe starts the processor on it
    [arn] = engine.pump_pipes()
    # THEN its body could not be read: InvalidEvent, and the DLQ message keeps the message
    result = engine.wait(arn)
    assert result.outcome == "InvalidEvent", (result.error, result.cause)
    [dead] = dlq_messages(engine)
    assert attributes(dead)["ERROR_MESSAGE"].startswith("the SQS message could not be read: ")
    [record] = json.loads(dead["Body"])["event"]
    assert record["messageId"] == message_id and record["body"] == body
    assert ledger_rows(engine) == []


def test_a_deep_event_is_redriven_from_its_history_and_is_invalid_again(
    engine: LocalEngine,
) -> None:
    # GIVEN a deep event dead-lettered as InvalidEvent: its DLQ body does not carry it
    event = deep_custom_event(TOO_DEEP_FOR_THE_RULES)
    assert engine.execute(MACHINE, event).outcome == "InvalidEvent"
    # WHEN the DLQ is redriven with its invalid events
    report = ops.redrive(LocalTarget(engine), include_invalid=True)
    # THEN the event is started again whole, from its execution's input, and ends the same way
    (moved,) = report.messages
    assert moved.action == "resubmitted"
    rerun = engine.wait(str(moved.execution_arn))
    assert rerun.input == event
    assert rerun.outcome == "InvalidEvent"
    assert len(dlq_messages(engine)) == 1
    assert ledger_rows(engine) == []
