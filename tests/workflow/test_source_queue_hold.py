"""A copy of a message that an SQS source hands back weeks late finds its ledger row.

The user's queue (SqsSource=<ARN>) and its DLQ can hold a message 14 days on its first
enqueue time, and 14 more once it is moved back from the DLQ (SQS's redrive gives it a new
enqueue time). A copy that comes out after its row's expires_at is claimed as new work and
processed a second time; only an idempotent sink would hide it. The template's rule
SourceQueueHoldWithinRetention keeps every row the rules let deploy alive that long: here
the lowest RetentionDays they accept is deployed, and the copy moved back at the last
moment is a Duplicate.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.view.units import units
from tests.helpers import invocations, ledger_row
from tests.unit.test_parameter_guards import (
    HOLD_RULE,
    ORDERS,
    failed_rules,
    longest_hold_seconds,
    lowest_accepted_retention,
)

ORDER = {"orderId": "order-late-1"}
MODES = {
    "one-per-execution": {"SqsSource": ORDERS, "IdempotencyKeyPath": "orderId"},
    "batch-mode": {
        "SqsSource": ORDERS,
        "IdempotencyKeyPath": "orderId",
        "SqsBatchMode": "true",
        "ProcessorTimeoutSeconds": "40",
    },
}


@pytest.fixture(params=list(MODES), ids=list(MODES))
def parameters(request: pytest.FixtureRequest) -> dict[str, str]:
    return dict(MODES[request.param])


@pytest.fixture
def engine(parameters: dict[str, str]) -> Iterator[LocalEngine]:
    # GIVEN the fewest RetentionDays the template's rules let deploy with the user's queue
    # (every rule, not only the hold rule: that is what a deploy accepts)
    retention = next(
        days
        for days in range(1, 400)
        if not failed_rules({**parameters, "RetentionDays": str(days)})
    )
    assert retention >= lowest_accepted_retention(parameters, HOLD_RULE)
    with LocalEngine(
        DEFAULT_TEMPLATE,
        parameters={**parameters, "RetentionDays": str(retention)},
        function_log=io.StringIO(),
        time_scale=0.0,
    ) as running:
        # AND the user's queue, with a redrive policy to its DLQ
        sqs = running.client("sqs")
        sqs.create_queue(QueueName="orders-dlq")
        policy = {"deadLetterTargetArn": f"{ORDERS}-dlq", "maxReceiveCount": "5"}
        sqs.create_queue(
            QueueName="orders",
            Attributes={"VisibilityTimeout": "1800", "RedrivePolicy": json.dumps(policy)},
        )
        yield running


def _deliver(engine: LocalEngine) -> list[str]:
    """Send the order to the user's queue and let the pipe deliver it: each unit's end state."""
    sqs = engine.client("sqs")
    url = sqs.get_queue_url(QueueName="orders")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(ORDER))
    started = engine.pump_pipes()
    return [u.end_state for arn in started for u in units(engine.wait(arn))]


def _pass_time(engine: LocalEngine, pk: str, seconds: int) -> None:
    """The ledger as it stands `seconds` later: the row's expiry moved that much closer (the
    claim compares expires_at with the time it runs; TTL deletes a row only after it)."""
    row = ledger_row(engine, pk)
    assert row is not None
    engine.client("dynamodb").update_item(
        TableName=engine.ref("LedgerTable"),
        Key={"pk": {"S": pk}},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": {"N": str(int(row["expires_at"]) - seconds)}},
    )


def test_a_copy_moved_back_from_the_dlq_at_the_last_moment_is_a_duplicate(
    engine: LocalEngine, parameters: dict[str, str]
) -> None:
    # GIVEN the order processed once
    assert _deliver(engine) == ["Processed"]
    assert invocations(engine) == 1
    # WHEN a copy comes out of the user's queue as late as the queue, its DLQ and one move
    # back can hand it over (a producer's duplicate left there, or the message itself,
    # processed but not deleted by a failed pipe, moved back with start-message-move-task)
    _pass_time(engine, f"sqs:{ORDER['orderId']}", longest_hold_seconds(parameters))
    late = _deliver(engine)
    # THEN it finds its row: a Duplicate, and the processor ran once in all
    assert late == ["Duplicate"], late
    assert invocations(engine) == 1
    row = ledger_row(engine, f"sqs:{ORDER['orderId']}")
    assert row is not None and row["status"] == "PROCESSED" and int(row["attempts"]) == 1
