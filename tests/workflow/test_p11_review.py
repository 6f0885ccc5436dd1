"""An adversarial review of P11 (issue 25): work lost, stuck or doubled in the SQS batch
mode, the audit's sweep and the S3-through-queue path, each defect shown by a test
that failed before its fix. Every failure is injected for real (a processor that
raises, a DLQ that refuses SendMessage, a throttled ledger write, a lock that expires).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    TransientError,
    attributes,
    audit_engine,
    dlq_messages,
    expire_lock,
    ledger_row,
    load_event,
)
from tests.workflow.test_audit_dead_letter import always, dlq_refusing
from tests.workflow.test_failure_paths import failing, throttled


def _order(order: str) -> list[dict[str, Any]]:
    """events/sqs-business-message.json (the pipe's array) carrying another order."""
    event: list[dict[str, Any]] = copy.deepcopy(load_event("sqs-business-message.json"))
    event[0]["messageId"] = f"message-{order}"
    event[0]["body"] = json.dumps({"orderId": order})
    return event


# ---- the sweep goes on when one row's DLQ message cannot be sent -----------------------


def test_a_dlq_that_refuses_the_sweeps_dead_letter_does_not_stop_the_sweep() -> None:
    """A dead letter the DLQ refuses (a KMS key policy mistake) is the sweep's
    DeadLetterFailed: the row stays open work for the next audit, and the rows after it
    are still swept. It stopped the whole sweep, every day the DLQ refused, so a
    message that only needed resubmitting was never retried (issue 25, item 4's
    "the sweep goes on")."""
    with audit_engine(SqsSource="create", IdempotencyKeyPath="orderId") as engine:
        # GIVEN an order stuck at MaxAttempts: two failures, then its third run's
        # MarkComplete throttled past its retries (LedgerUnavailable), its lock expired
        spent = _order("order-spent")
        with engine.override_function(FUNCTION, always(TransientError)):
            for _ in range(2):
                assert engine.execute(MACHINE, spent).outcome == "Failed"
        with failing(engine, "dynamodb", "UpdateItem", throttled(), when="completed_at"):
            assert engine.execute(MACHINE, spent).error == "LedgerUnavailable"
        stuck = ledger_row(engine, "sqs:order-spent") or {}
        assert (stuck["status"], stuck["attempts"]) == ("PROCESSING", "3")
        expire_lock(engine, "sqs:order-spent")
        # AND an order that failed once, which only the sweep retries (the pipe consumed it)
        with engine.override_function(FUNCTION, always(TransientError)):
            assert engine.execute(MACHINE, _order("order-retry")).outcome == "Failed"
        assert (ledger_row(engine, "sqs:order-retry") or {})["status"] == "FAILED"
        # WHEN the audit runs while the DLQ refuses every message
        with dlq_refusing(engine):
            result = engine.execute(AUDIT, {})
            engine.wait_for_running(MACHINE)
        # THEN the audit reports, the order that needed a retry is done, and the row it
        # could not dead-letter is left as it was, open work with no DLQ message
        assert result.status == "SUCCEEDED", (result.error, result.cause)
        report = result.output
        assert report["failed_resubmitted"] == 1
        assert (ledger_row(engine, "sqs:order-retry") or {})["status"] == "PROCESSED"
        assert report["stuck_dead_lettered"] == 0 and report["resubmit_errors"] == 1
        left = ledger_row(engine, "sqs:order-spent") or {}
        assert left["status"] == "PROCESSING" and "dead_lettered_at" not in left
        assert left["lock_owner"] == stuck["lock_owner"]
        assert left["open_status"].startswith("PROCESSING#")
        assert dlq_messages(engine) == []
        # AND once the DLQ takes messages again, the next audit dead-letters it: one message
        again = engine.execute(AUDIT, {})
        assert again.status == "SUCCEEDED", (again.error, again.cause)
        assert again.output["stuck_dead_lettered"] == 1
        [dead] = dlq_messages(engine)
        assert attributes(dead)["IDEMPOTENCY_KEY"] == "sqs:order-spent"
        assert attributes(dead)["EXECUTION_ARN"] == stuck["lock_owner"]
        assert "dead_lettered_at" in (ledger_row(engine, "sqs:order-spent") or {})
