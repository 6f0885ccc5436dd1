"""redrive against an EXPRESS processor: DescribeExecution serves none of its executions and
StartExecution runs a repeated name again (express-at-least-once-execution.html), so what
an earlier redrive started is read from the ledger's claims, under either type."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow import ops
from onceflow.local.engine import LocalEngine
from onceflow.local.target import LocalTarget
from tests.helpers import (
    FUNCTION,
    MACHINE,
    TransientError,
    dlq_messages,
    ledger_row,
    output_effects,
)
from tests.workflow.test_audit import always
from tests.workflow.test_redrive import dead_letter

TYPES = {
    "STANDARD": {},
    "EXPRESS": {"WorkflowType": "EXPRESS", "ProcessorTimeoutSeconds": "40"},
}


@pytest.fixture(params=list(TYPES))
def typed(request: pytest.FixtureRequest) -> Iterator[LocalEngine]:
    parameters = TYPES[request.param]
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local:
        yield local


_HANDLES: list[str] = []


def _delete_refused(service: str, operation: str, body: str) -> Any:
    """SQS refusing DeleteMessage as it does a role without sqs:DeleteMessage (JSON protocol;
    AccessDenied is not retried by the SDK). Keeps the receipt handle it was sent."""
    if service != "sqs" or operation != "DeleteMessage":
        return None
    _HANDLES.append(json.loads(body)["ReceiptHandle"])
    return (
        400,
        {
            "x-amzn-RequestId": str(uuid.uuid4()),
            "x-amzn-query-error": "AccessDenied;Sender",
            "Content-Type": "application/x-amz-json-1.0",
        },
        json.dumps(
            {
                "__type": "com.amazon.coral.service#AccessDeniedException",
                "message": "injected: not authorized to perform sqs:DeleteMessage",
            }
        ),
    )


def named(engine: LocalEngine, name: str) -> list[dict[str, Any]]:
    """The processor's executions of one name (the engine's record: ListExecutions refuses
    an EXPRESS machine, as AWS does)."""
    return [e for e in engine.list_executions(MACHINE) if e["name"] == name]


def test_a_redrive_that_died_before_deleting_is_not_started_or_reset_again(
    typed: LocalEngine,
) -> None:
    # GIVEN a dead-lettered object, and a first redrive that started its execution, then
    # died: SQS refused to delete the message
    pk = dead_letter(typed, "express.png")
    (message,) = dlq_messages(typed)
    name = f"redrive-{message['MessageId']}"
    with typed.override_function(FUNCTION, always(TransientError)):
        typed.state.faults.append(_delete_refused)
        try:
            with pytest.raises(ClientError, match="AccessDenied"):
                ops.redrive(LocalTarget(typed), wait=False)
        finally:
            typed.state.faults.remove(_delete_refused)
        typed.wait_for_running(MACHINE)
        # (the message's hiding runs out, as redrive's 300 s do before an operator runs it again)
        sqs = typed.client("sqs")
        url = typed.ref("DeadLetterQueue")
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=_HANDLES.pop(), VisibilityTimeout=0
        )
        # (its execution failed below MaxAttempts: the row is FAILED, the audit's to retry)
        row = ledger_row(typed, pk)
        assert row is not None and row["status"] == "FAILED" and row["redrives"] == "1"
        assert "dead_lettered_at" not in row and row["attempts"] == "1"
        # WHEN redrive runs again
        report = ops.redrive(LocalTarget(typed))
        typed.wait_for_running(MACHINE)
    # THEN the message is deleted as the earlier redrive's, nothing started again
    (item,) = report.messages
    assert item.action == "resubmitted" and "earlier redrive" in item.detail
    (started,) = named(typed, name)
    assert item.execution_arn == started["executionArn"]
    assert dlq_messages(typed) == []
    # AND the row was not given a second reset: the first redrive's attempt stands
    row = ledger_row(typed, pk)
    assert row is not None and row["status"] == "FAILED" and row["redrives"] == "1"
    assert row["attempts"] == "1" and "open_status" in row
    assert output_effects(typed) == 0


def test_redrive_undelivered_on_an_express_processor_says_where_its_failures_are() -> None:
    parameters = TYPES["EXPRESS"]
    with (
        LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local,
        pytest.raises(ops.OpsError) as refused,
    ):
        # WHEN redrive looks for executions that could not dead-letter on an EXPRESS processor
        ops.redrive_undelivered(LocalTarget(local))
    # THEN it is refused as AWS refuses ListExecutions for it, with where to look instead
    message = str(refused.value)
    assert "StateMachineTypeNotSupported" in message
    assert message.startswith("the processor is EXPRESS: its executions are not listed")
    assert "log group" in message


class _LogsOnly(LocalTarget):
    """The local stack read as a deployed one is: no record of an EXPRESS execution but its
    log group, which onceflow does not read (DeployedTarget.express_record)."""

    def express_record(self, execution_arn: str) -> dict[str, Any] | None:
        return None


def test_a_redrive_waiting_for_an_express_outcome_points_to_the_logs() -> None:
    parameters = TYPES["EXPRESS"]
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local:
        # GIVEN a dead-lettered object, its processor since fixed
        pk = dead_letter(local, "express-wait.png")
        # WHEN it is redriven and the outcome waited for (--wait), as on a deployed stack
        report = ops.redrive(_LogsOnly(local), wait=True)
        local.wait_for_running(MACHINE)
        # THEN the run ends (DescribeExecution refuses the EXPRESS execution: InvalidArn),
        # the outcome says where to look, and the work was done once
        (item,) = report.messages
        assert item.action == "resubmitted" and ":express:" in str(item.execution_arn)
        assert item.outcome == "EXPRESS: see the processor's log group"
        assert dlq_messages(local) == []
        row = ledger_row(local, pk)
        assert row is not None and row["status"] == "PROCESSED"
        assert output_effects(local) == 1
