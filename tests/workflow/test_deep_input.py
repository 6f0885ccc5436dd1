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
from tests.helpers import attributes, dlq_messages, ledger_rows
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes


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
