"""The audit's sweep and a delivery dead-letter the same row at MaxAttempts: one DLQ message.

In the SQS batch mode a redelivery of a row at MaxAttempts takes it over
(TakeOverAtMaxAttempts), sends its DLQ message and marks it dead-lettered; the
audit's sweep does the same for the rows it finds in the open-work index. The
race is run for real: the audit Lambda runs with its own clients, and the batch
redelivery (the pipe, the batch state machine) runs inside its sweep at the
moment named, after its read of the index or just before its DLQ send.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    FUNCTION,
    TransientError,
    attributes,
    dlq_messages,
    expire_lock,
    out_of_time,
    run_audit,
)
from tests.workflow.test_batch_mode import (  # noqa: F401 (batch_engine: a fixture)
    batch_engine,
    bundled,
    outcomes,
    queued,
    row,
    send,
)
from tests.workflow.test_failure_paths import KMS_DENIED, failing

AUDIT_FUNCTION = "AuditFunction"


@contextmanager
def inside_the_sweep(
    engine: LocalEngine,
    monkeypatch: pytest.MonkeyPatch,
    pk: str,
    moment: str,
    action: Callable[[], None],
) -> Iterator[list[str]]:
    """Run ``action`` once inside the audit's sweep of ``pk``: right after a read of the
    open-work index that returned the row ("index"), or right before the audit's DLQ
    send for it ("send"). Yields the moments it ran at."""
    runtime = engine.runtime
    real = runtime.load(runtime.functions[engine.function_name(AUDIT_FUNCTION)])
    # The module the engine loaded (a cold start re-imports it): its clients are the audit's.
    module = sys.modules[real.__module__]
    ran: list[str] = []

    def once(where: str) -> None:
        if where == moment and not ran:
            ran.append(where)
            action()

    def handler(event: Any, context: Any) -> Any:
        clients = module._get_clients()
        if event.get("action") == "locks" and not hasattr(clients, "_raced"):
            open_rows, send_message = clients.ledger.open_rows, clients.dead_letters.send

            def read_index(*args: Any, **kwargs: Any) -> Any:
                rows, cursor = open_rows(*args, **kwargs)
                if any(r.pk == pk for r in rows):
                    once("index")
                return rows, cursor

            def send_to_dlq(body: Any, message_attributes: dict[str, str]) -> None:
                if message_attributes.get("IDEMPOTENCY_KEY") == pk:
                    once("send")
                send_message(body, message_attributes)

            monkeypatch.setattr(clients.ledger, "open_rows", read_index)
            monkeypatch.setattr(clients.dead_letters, "send", send_to_dlq)
            monkeypatch.setattr(clients, "_raced", True, raising=False)
        return real(event, context)

    with engine.override_function(AUDIT_FUNCTION, handler):
        yield ran


def _dies_on_the_last_attempt(engine: LocalEngine) -> Callable[[Any, Any], Any]:
    real = bundled(engine)

    def handler(payload: Any, context: Any) -> Any:
        if payload["attempt"] < 3:
            raise TransientError("the warehouse is down")
        return out_of_time(engine, payload, real(payload, context))

    return handler


def _fails_always(payload: Any, context: Any) -> Any:
    raise TransientError("the warehouse is down")


def _stuck_at_max_attempts(engine: LocalEngine) -> None:
    """A row PROCESSING at MaxAttempts (3) under an expired lock, its message in the queue:
    the last attempt's whole batch execution died."""
    send(engine, "order-race")
    with engine.override_function(FUNCTION, _dies_on_the_last_attempt(engine)):
        for _ in range(3):
            engine.pump_pipes()
    expire_lock(engine, "sqs:order-race")
    assert (row(engine, "order-race")["status"], row(engine, "order-race")["attempts"]) == (
        "PROCESSING",
        "3",
    )


def _failed_at_max_attempts(engine: LocalEngine) -> None:
    """A row FAILED at MaxAttempts (3) with no DLQ message, its message in the queue: the
    last attempt's DLQ send was refused (DeadLetterFailed)."""
    send(engine, "order-race")
    with engine.override_function(FUNCTION, _fails_always):
        for _ in range(2):
            engine.pump_pipes()
        with failing(engine, "sqs", "SendMessage", KMS_DENIED):
            engine.pump_pipes()
    found = row(engine, "order-race")
    assert (found["status"], found["attempts"], "dead_lettered_at" in found) == (
        "FAILED",
        "3",
        False,
    )


@pytest.mark.parametrize(
    ("state", "moment"),
    [
        # The redelivery dead-letters the row between the sweep's read and its action.
        (_stuck_at_max_attempts, "index"),
        # The redelivery arrives while the audit dead-letters the row.
        (_stuck_at_max_attempts, "send"),
        (_failed_at_max_attempts, "send"),
    ],
    ids=["stuck-redelivered-after-the-index-read", "stuck-redelivered-at-the-send", "failed"],
)
def test_a_row_the_sweep_and_a_redelivery_both_dead_letter_has_one_dlq_message(
    batch_engine: LocalEngine,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
    state: Callable[[LocalEngine], None],
    moment: str,
) -> None:
    engine = batch_engine
    # GIVEN a row at MaxAttempts that is not settled, its message still in the queue
    state(engine)
    assert dlq_messages(engine) == []
    redeliveries: list[str] = []

    def redeliver() -> None:
        redeliveries.extend(engine.pump_pipes())

    # WHEN the audit's sweep dead-letters it and the message is redelivered meanwhile
    with inside_the_sweep(engine, monkeypatch, "sqs:order-race", moment, redeliver) as ran:
        report = run_audit(engine).output
    assert ran == [moment] and len(redeliveries) == 1
    # THEN exactly one DLQ message exists, and the row is dead-lettered once
    [dead] = dlq_messages(engine)
    assert attributes(dead)["IDEMPOTENCY_KEY"] == "sqs:order-race"
    done = row(engine, "order-race")
    assert done["status"] == "FAILED" and "dead_lettered_at" in done
    assert "open_status" not in done
    dead_lettered = report["stuck_dead_lettered"] + report["failed_dead_lettered"]
    [outcome] = outcomes(engine, redeliveries[0]).values()
    if moment == "index":
        # the redelivery came first: the audit's take is refused and it sends nothing
        assert outcome["outcome"] == "DeadLettered"
        assert dead_lettered == 0 and report["stuck_left_alone"] == 1
    else:
        # the audit held the row: the redelivery's takeover was refused, its message kept
        assert (outcome["outcome"], outcome["retry"]) == ("Duplicate", True)
        assert dead_lettered == 1
        assert done["dead_lettered_by"] == report["audit"]
    # AND the message's next delivery is a settled duplicate: deleted, nothing sent
    engine.pump_pipes()
    assert queued(engine) == {}
    assert len(dlq_messages(engine)) == 1
