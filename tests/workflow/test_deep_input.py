"""Deep input: each message is judged alone, where Step Functions' JSONata judges it.

A value nested deeper than node's stack fails inside the JSONata evaluation, as it
does in Step Functions; the Python that carries values to it (moto's interpreter,
the engine) must never give up first, and a node worker that died with one
execution's expression must never answer another's.
"""

from __future__ import annotations

import io
import json
from typing import Any

from onceflow.local.engine import LocalEngine
from tests.helpers import MACHINE, attributes, dlq_messages, ledger_rows, load_event
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes
from tests.workflow.test_invalid_events import INVALID_PATH


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_deep_message_in_a_batch_is_invalid_alone_and_its_neighbours_are_processed() -> None:
    # GIVEN batch mode, nine orders and one message nested 1,500 levels deep
    with LocalEngine(parameters=BATCH_PARAMETERS, function_log=io.StringIO()) as engine:
        sqs = engine.client("sqs")
        url = engine.ref("SourceQueue")
        ids = {}
        for n in range(9):
            body = json.dumps({"orderId": f"order-{n}"})
            ids[sqs.send_message(QueueUrl=url, MessageBody=body)["MessageId"]] = f"order-{n}"
        deep = json.dumps(nested(1_500), separators=(",", ":"))
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


def deep_custom_event(depth: int) -> dict[str, Any]:
    """events/eventbridge-custom-event.json with its detail's payload nested depth levels."""
    event = load_event("eventbridge-custom-event.json")
    event["detail"]["payload"] = nested(depth)
    return event


def test_a_custom_event_too_deep_for_the_rules_started_directly_ends_invalid_event(
    engine: LocalEngine,
) -> None:
    # GIVEN a custom event whose detail nests 3,000 levels deep, past what Claim's rules can
    # walk (its JSON text, 18 KB, well within StartExecution's 256 KiB)
    event = deep_custom_event(3_000)
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
