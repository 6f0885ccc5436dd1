"""The chaos run through the SQS source, one message per execution and in the batch mode;
its checker on planted end states; the command line's refusals.

One small run per mode (every fault at least once, time scale 0), through the command
line as a user starts it; each invariant is then its own test, so that the ones a known
defect breaks on this branch are marked with that defect and flip on their own.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import threading
import time
from collections import Counter
from typing import Any

import pytest

from onceflow.cli import main
from onceflow.harness.chaos_queue import (
    FAULT_KINDS,
    INVARIANTS,
    QueueChaosConfig,
    QueueInjector,
    QueueRun,
    Unit,
    _judge,
    large_non_ascii_body,
    queue_parameters,
    render,
)
from onceflow.harness.common import TransientError, drain, effects_by_idempotency_key
from onceflow.local.engine import LocalEngine
from tests.helpers import dies_at_its_dead_letter_mark, dlq_messages

UNITS = 30  # every fault once, and a few plain units of each kind

MODES = {
    "single": [],
    "batch": ["--batch"],
    "unversioned": ["--unversioned"],
    # SqsBatchMode's path for S3: uploads announced by EventBridge events the rule sends
    "s3-batch": ["--source", "s3", "--batch"],
    "s3-batch-unversioned": ["--source", "s3", "--batch", "--unversioned"],
    # WorkflowType EXPRESS: the audit and redrive start an EXPRESS processor
    "batch-express": ["--batch", "--express"],
    # S3's events through the queue, the audit walking an S3 Inventory report
    "s3-batch-inventory": ["--source", "s3", "--batch", "--inventory"],
    # Two audits while the deliveries run (the queue's passes, its kept messages, the
    # locks of live executions), then the audits after them as in every mode
    "batch-audit-during": ["--batch", "--audit-during", "2"],
}


def _run(*flags: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["chaos", "--source", "sqs", "--objects", str(UNITS), "--seed", "11",
                     "--duplicate-rate", "0.2", "--json", *flags])  # fmt: skip
    return code, json.loads(out.getvalue())


class _Runs(dict[str, tuple[int, dict[str, Any]]]):
    """One run per mode, made when a test first asks for it (about 10 s each)."""

    def __missing__(self, mode: str) -> tuple[int, dict[str, Any]]:
        self[mode] = _run(*MODES[mode])
        return self[mode]


@pytest.fixture(scope="module")
def runs() -> _Runs:
    return _Runs()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_queue_run_injects_every_fault_and_judges_each_message(runs: _Runs, mode: str) -> None:
    code, report = runs[mode]
    assert report["mode"] == {
        "single": "one message per execution",
        "unversioned": "one message per execution",
        "batch": "batch",
        "batch-express": "batch, the processor EXPRESS",
        "batch-audit-during": "batch",
        "s3-batch-inventory": "batch, S3's events through the queue, the audit from S3 Inventory",
    }.get(mode, "batch, S3's events through the queue")
    unversioned = mode.endswith("unversioned")
    assert report["bucket"].startswith("unversioned" if unversioned else "versioned")
    for kind in (*FAULT_KINDS, "duplicate_delivery"):
        assert report["faults_injected"][kind] >= 1, kind
    assert report["units"] == UNITS == report["objects"] + report["messages"]
    # S3's events through the queue: custom events (the rule's other source) go there too
    assert (report["custom_events"] >= 1) == mode.startswith("s3-batch")
    # Judged per unit of work: every finding names a unit (or an audit), never a batch.
    for violation in report["violations"]:
        assert violation["key"].startswith(("sqs:", "s3://", "audit ")), violation
    assert code == (1 if report["violations"] else 0)
    outcomes = sum(report["outcomes"].values())
    if "batch" in mode:
        # Outcomes are counted per message: more of them than batch executions, at least
        # one for every message sent (a kept message is counted at each delivery).
        assert report["pipe_executions"] < report["messages_sent"] <= outcomes
        # The last-attempt death fails its whole batch (with audits during the deliveries,
        # the last attempt may be an audit's resubmission, a single-message execution)
        assert report["failed_batches"] >= 1 or mode.endswith("audit-during")
    else:
        # (a message the source queue would not take back was started by redrive directly)
        started = report["redrive"]["source_started"]
        assert outcomes == report["pipe_executions"] == report["messages_sent"] - started
        assert report["outcomes"]["ABORTED"] == 1  # the processor execution stopped
        # The large non-ASCII order failed once and nothing else brings it back: the
        # audit's sweep resubmitted it from its execution's input
        assert report["audits"][0]["failed_resubmitted"] >= 1
    assert report["audits_during"] == [] or mode.endswith("audit-during")


def test_the_audits_during_the_deliveries_ran_while_the_deliveries_did(runs: _Runs) -> None:
    # The run cannot pass for one whose audits ran only after the deliveries: each was
    # started with deliveries still to come, and deliveries ended while it ran.
    code, report = runs["batch-audit-during"]
    during = report["audits_during"]
    assert [a["number"] for a in during] == [1, 2]
    for audit in during:
        assert audit["during"] is True, audit
        assert 0 < audit["deliveries_ended_at_start"] < audit["deliveries"], audit
        assert audit["deliveries_ran_alongside"] >= 1, audit
        assert "error" not in audit and audit["scanned"] >= 1, audit
    # (their moments spread over the deliveries: the second started later)
    assert during[0]["deliveries_ended_at_start"] < during[1]["deliveries_ended_at_start"]
    # AND the audits after the deliveries ran too, as without them
    assert len(report["audits"]) >= 2
    assert code == 0 and report["violations"] == []


@pytest.mark.parametrize(
    ("mode", "invariant"),
    [
        pytest.param(mode, invariant, id=f"{mode}-{invariant.replace(' ', '-')}")
        for mode in MODES
        for invariant in INVARIANTS
    ],
)
def test_every_invariant_holds_through_the_queue(runs: _Runs, mode: str, invariant: str) -> None:
    _, report = runs[mode]
    found = [v for v in report["violations"] if v["invariant"] == invariant]
    assert found == []


def test_the_report_is_plain_text_with_every_invariant_named(
    runs: _Runs,
) -> None:
    _, report = runs["batch"]
    text = render(report)
    assert "{" not in text and "}" not in text  # no Python dict repr
    assert "outcomes per message: " in text
    for invariant in INVARIANTS:
        [line] = [line for line in text.splitlines() if line.strip().endswith(invariant)
                  or f"{invariant} (" in line]  # fmt: skip
        assert line.split()[0] in ("held", "VIOLATED"), line


def test_a_large_non_ascii_order_fills_the_queues_limit_in_utf8_bytes() -> None:
    body = large_non_ascii_body("commande-1-déjà-vu-😀", 11_264)
    assert 11_264 - 3 <= len(body.encode("utf-8")) <= 11_264
    assert len(body) < 11_264 - 3000  # counted in characters it would look far below
    assert json.loads(body)["orderId"] == "commande-1-déjà-vu-😀"


# ---- the checker on planted end states ---------------------------------------------


def test_the_checker_names_every_unit_left_outside_a_named_end_state() -> None:
    parameters = queue_parameters(batch=False)
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1))
        now = int(time.time())
        dynamodb = engine.client("dynamodb")
        table = engine.ref("LedgerTable")

        def row(pk: str, status: str, **extra: str) -> None:
            item = {"pk": {"S": pk}, "status": {"S": status}, "attempts": {"N": "3"}}
            item |= {k: {"N" if k.endswith("_at") else "S": v} for k, v in extra.items()}
            dynamodb.put_item(TableName=table, Item=item)

        def dead_letter(pk: str) -> None:
            engine.client("sqs").send_message(
                QueueUrl=engine.ref("DeadLetterQueue"),
                MessageBody="{}",
                MessageAttributes={"IDEMPOTENCY_KEY": {"DataType": "String", "StringValue": pk}},
            )

        def unit(name: str, processable: bool = True) -> Unit:
            body = json.dumps({"orderId": name})
            run.by_body[body] = f"sqs:{name}"
            return Unit(f"sqs:{name}", body, "message", processable)

        units = [unit(n) for n in ("stuck", "stranded", "sweepable", "twice", "done-and-dlq")]
        units += [unit("never"), unit("poison", processable=False)]
        # GIVEN a row PROCESSING under an expired lock, a FAILED row nothing brings back
        # (its message in the source DLQ), a FAILED row the sweep finds (no finding), two
        # DLQ messages for one unit, a PROCESSED unit with a DLQ message, a unit with no
        # row at all, and poison never dead-lettered
        row("sqs:stuck", "PROCESSING", lock_expires_at=str(now - 60))
        row("sqs:stranded", "FAILED")
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceDeadLetterQueue"), MessageBody=units[1].body
        )
        row("sqs:sweepable", "FAILED", open_status="FAILED#1")
        row("sqs:twice", "FAILED", dead_lettered_at=str(now))
        dead_letter("sqs:twice")
        dead_letter("sqs:twice")
        row("sqs:done-and-dlq", "PROCESSED")
        dead_letter("sqs:done-and-dlq")
        row("sqs:poison", "FAILED", open_status="FAILED#2")
        # WHEN the checker judges them (and an audit during the deliveries that failed)
        failed_during = {"number": 1, "during": True, "error": "OpsError: the audit FAILED"}
        report = _judge(
            run,
            units,
            {},
            [{"scanned": 0}, {"error": "the audit FAILED"}],
            None,
            audits_during=[failed_during],
        )
    # THEN each is named under its invariant, per unit of work
    found = {(v["invariant"], v["key"]) for v in report["violations"]}
    assert found == {
        ("every audit runs to its report", "audit 2"),
        ("every audit runs to its report", "audit during 1"),
        ("no unit of work left outside a named end state", "sqs:stuck"),
        ("no unit of work left outside a named end state", "sqs:stranded"),
        ("no unit of work left outside a named end state", "sqs:never"),
        ("at most one DLQ message per unit of work", "sqs:twice"),
        ("no DLQ message for processed work", "sqs:done-and-dlq"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:stuck"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:stranded"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:sweepable"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:never"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:done-and-dlq"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:poison"),
    }
    assert report["source_dead_letter_messages"] == 1
    held = {i["name"] for i in report["invariants"] if not i["violations"]}
    # (no redrive ran, and no processor call was counted: nothing to judge there)
    assert held == {
        "no effect for poison",
        "a second audit resubmits nothing",
        "the operator's redrive leaves only poison dead-lettered, the source DLQ empty",
        "the work runs once unless a fault after its effect forced a rerun",
    }


def test_the_checker_names_messages_the_queue_moved_to_its_dlq_and_no_other() -> None:
    """Seen with `--no-redrive` (seeds 221-225, receives spent at 0.04): a message the pipe
    never handed over has no row, and SQS moved it to the source DLQ, where only the
    operator's `redrive --queue source` brings it back (design.md; its alarm says so); and
    each copy the producer sent is an SQS message of its own, which SQS moves on its own
    receive count (sqs-dead-letter-queues.html, RedrivePolicy's maxReceiveCount), so two
    copies are two messages there. The checker called the first "no ledger row" and each
    copy a second DLQ message. The product is right: neither is onceflow's dead-lettering."""
    parameters = queue_parameters(batch=True)
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        sqs, table = engine.client("sqs"), engine.ref("LedgerTable")

        def unit(name: str, copies: int = 1) -> Unit:
            body = json.dumps({"orderId": name})
            run.by_body[body] = f"sqs:{name}"
            return Unit(f"sqs:{name}", body, "message", True, "receives_spent", copies)

        def moved(u: Unit, times: int) -> None:
            for _ in range(times):
                sqs.send_message(QueueUrl=engine.ref("SourceDeadLetterQueue"), MessageBody=u.body)

        units = [unit("unclaimed"), unit("copies", copies=2), unit("claimed-copies", copies=2)]
        units += [unit("more-than-sent"), unit("also-dead-lettered"), unit("nowhere")]
        # GIVEN a message the pipe never handed over (no row), in the source DLQ; two
        # copies of one, both moved; two copies of one whose row the sweep then finished;
        # two moved messages of a unit sent once; a unit in both DLQs; and a unit with no
        # row that is nowhere
        moved(units[0], 1)
        moved(units[1], 2)
        moved(units[2], 2)
        item = {"pk": {"S": "sqs:claimed-copies"}, "status": {"S": "PROCESSED"}}
        engine.client("dynamodb").put_item(TableName=table, Item=item)
        engine.client("s3").put_object(
            Bucket=engine.ref("OutputBucket"), Key="orders/claimed-copies", Body=b"done",
            Metadata={"idempotency-key": "sqs:claimed-copies"},
        )  # fmt: skip
        moved(units[3], 2)
        moved(units[4], 1)
        sqs.send_message(
            QueueUrl=engine.ref("DeadLetterQueue"),
            MessageBody="{}",
            MessageAttributes={
                "IDEMPOTENCY_KEY": {"DataType": "String", "StringValue": "sqs:also-dead-lettered"}
            },
        )
        # WHEN the checker judges them before the operator's redrive (--no-redrive)
        before = _judge(run, units, {}, [{"scanned": 0}], None)
        # and as if the redrive had run and left them so
        for u in units[:4]:
            moved(u, u.copies)
        run.redriven = {"source_moved_back": 0}
        after = _judge(run, units, {}, [{"scanned": 0}], None)
    # THEN before the redrive only the unit nowhere, the messages beyond those sent, and a
    # second DLQ for one unit are named; the queue's moves are counted apart
    found = {(v["invariant"], v["key"]) for v in before["violations"]}
    assert found == {
        ("no unit of work left outside a named end state", "sqs:nowhere"),
        ("exactly one effect per unit of work not dead-lettered", "sqs:nowhere"),
        ("at most one DLQ message per unit of work", "sqs:more-than-sent"),
        ("at most one DLQ message per unit of work", "sqs:also-dead-lettered"),
    }
    assert before["left_in_the_source_dlq_unclaimed"] == 4  # (also-dead-lettered has no row)
    assert before["source_dlq_copies"] == 2  # copies, claimed-copies
    # AND after the operator's redrive nothing may be left in the source DLQ
    left = {v["key"] for v in after["violations"] if v["invariant"] == INVARIANTS[7]}
    assert left >= {"sqs:unclaimed", "sqs:copies", "sqs:claimed-copies", "sqs:more-than-sent"}


def test_the_checker_names_work_run_twice_and_what_the_operators_redrive_left() -> None:
    parameters = queue_parameters(batch=True)
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        dynamodb = engine.client("dynamodb")
        table = engine.ref("LedgerTable")

        def unit(name: str, fault: str | None = None, processable: bool = True) -> Unit:
            body = json.dumps({"orderId": name})
            run.by_body[body] = f"sqs:{name}"
            return Unit(f"sqs:{name}", body, "message", processable, fault)

        units = [unit("twice"), unit("rerun", "ledger_unavailable"), unit("left"), unit("failed")]
        for name, status in (("twice", "PROCESSED"), ("rerun", "PROCESSED"),
                             ("left", "PROCESSED"), ("failed", "FAILED")):  # fmt: skip
            item = {"pk": {"S": f"sqs:{name}"}, "status": {"S": status}, "open_status": {"S": "x"}}
            dynamodb.put_item(TableName=table, Item=item)
        # GIVEN work a duplicate ran twice, work a ledger outage after its effect ran twice,
        # a processed unit whose message the redrive left in the source DLQ, and a unit the
        # redrive left FAILED (open for the sweep, but not done)
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceDeadLetterQueue"), MessageBody=units[2].body
        )
        run.redriven = {"source_moved_back": 0}
        # (the outage's call, whose MarkComplete was refused, is forgiven by the injector)
        injector = QueueInjector.__new__(QueueInjector)
        injector.died = set()
        injector.unrecorded = {("sqs:rerun", "first")}
        injector.calls = [
            ("sqs:twice", "first"), ("sqs:twice", "second"),
            ("sqs:rerun", "first"), ("sqs:rerun", "sweep"), ("sqs:left", "first"),
        ]  # fmt: skip
        completed = injector.runs()
        # WHEN the checker judges them
        report = _judge(run, units, {}, [{"scanned": 0}], None, completed)
    # THEN only the unfaulted rerun, the left message and the unfinished unit are named
    found = {(v["invariant"], v["key"]) for v in report["violations"]}
    assert {f for f in found if f[0] in INVARIANTS[7:]} == {
        ("the work runs once unless a fault after its effect forced a rerun", "sqs:twice"),
        ("the operator's redrive leaves only poison dead-lettered, the source DLQ empty",
         "sqs:left"),
        ("the operator's redrive leaves only poison dead-lettered, the source DLQ empty",
         "sqs:failed"),
    }  # fmt: skip


def test_the_checker_names_the_send_then_mark_gaps_second_dlq_message_and_no_other() -> None:
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        sqs, dlq = engine.client("sqs"), engine.ref("DeadLetterQueue")
        units = []
        for name in ("gap", "unexplained"):
            body = json.dumps({"orderId": name})
            run.by_body[body] = f"sqs:{name}"
            units.append(Unit(f"sqs:{name}", body, "message", processable=True))
            item = {"pk": {"S": f"sqs:{name}"}, "status": {"S": "FAILED"},
                    "dead_lettered_at": {"N": "1"}}  # fmt: skip
            engine.client("dynamodb").put_item(TableName=engine.ref("LedgerTable"), Item=item)

        def dead_letter(pk: str, sender: str, code: str, message: str) -> None:
            values = {"IDEMPOTENCY_KEY": pk, "EXECUTION_ARN": sender, "ERROR_CODE": code,
                      "ERROR_MESSAGE": message}  # fmt: skip
            sqs.send_message(
                QueueUrl=dlq,
                MessageBody="{}",
                MessageAttributes={
                    k: {"DataType": "String", "StringValue": v} for k, v in values.items()
                },
            )

        expired = "LockExpired: the lock of {} expired with the work unfinished, after 3 attempt(s)"
        # GIVEN a unit whose second DLQ message is a taker's LockExpired naming the lock of
        # the execution that sent the first (it died before its mark), and a unit whose
        # second one names a lock nobody dead-lettered under
        dead_letter("sqs:gap", "arn:batch:a#0", "TransientError", "TransientError: down")
        dead_letter("sqs:gap", "arn:batch:b#1", "LockExpired", expired.format("arn:batch:a#0"))
        dead_letter("sqs:unexplained", "arn:batch:c#0", "TransientError", "TransientError: down")
        dead_letter("sqs:unexplained", "arn:batch:d#1", "LockExpired", expired.format("arn:x#0"))
        # WHEN the checker judges them as they are, and as a redrive found them
        now = _judge(run, units, {}, [{"scanned": 0}], None)
        run.dead_letters_before_redrive = drain(engine, dlq)
        sqs.purge_queue(QueueUrl=dlq)
        redriven = _judge(run, units, {}, [{"scanned": 0}], None)
    # THEN only the unexplained second message is a violation; the gap's is named
    for report in (now, redriven):
        found = {(v["invariant"], v["key"]) for v in report["violations"]}
        assert found == {("at most one DLQ message per unit of work", "sqs:unexplained")}
        assert report["send_then_mark_gap"] == 1
    assert "before the operator's redrive" in redriven["violations"][0]["detail"]


def _dead_lettered_units(
    engine: LocalEngine, run: QueueRun, names: tuple[str, ...], fault: str | None = None
) -> list[Unit]:
    """A message unit of each name, its row FAILED and marked dead-lettered."""
    units = []
    for name in names:
        body = json.dumps({"orderId": name})
        run.by_body[body] = f"sqs:{name}"
        units.append(Unit(f"sqs:{name}", body, "message", True, fault))
        item = {"pk": {"S": f"sqs:{name}"}, "status": {"S": "FAILED"},
                "dead_lettered_at": {"N": "1"}}  # fmt: skip
        engine.client("dynamodb").put_item(TableName=engine.ref("LedgerTable"), Item=item)
    return units


def _send_lock_expired(engine: LocalEngine, pk: str, sender: str, lock: str) -> None:
    """A taker's LockExpired DLQ message for pk, sent by sender, naming lock."""
    message = f"LockExpired: the lock of {lock} expired with the work unfinished, after 3"
    values = {"IDEMPOTENCY_KEY": pk, "EXECUTION_ARN": sender, "ERROR_CODE": "LockExpired",
              "ERROR_MESSAGE": message + " attempt(s)"}  # fmt: skip
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("DeadLetterQueue"),
        MessageBody="{}",
        MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in values.items()},
    )


def test_the_checker_follows_the_gap_through_a_taker_that_died_before_its_send() -> None:
    """Seen as "at most one DLQ message per unit of work" VIOLATED (`chaos --source s3
    --batch --objects 220 --seed 272 --last-attempt-death-rate 0.15
    --ledger-unavailable-rate 0.15 --duplicate-rate 0.3`, twice in four runs): a unit
    whose last attempt died; the batch that took its row over sent the DLQ message and ran
    out of time before its mark (the send-then-mark gap, design.md); the next batch that
    took it over ran out of time before its send; the one after it sent a second message,
    naming the lock of that silent taker, not the first sender's. The product is right:
    a takeover needs a row not marked dead-lettered (TakeOverAtMaxAttempts' condition),
    so any message a taker sends after another was sent follows a mark that never landed.
    The checker now follows the chain through a taker that died; a second message naming
    a lock nobody dead-lettered under and that did not die, or a lock another message
    already named (two takers of one lock), is still a violation."""
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        sqs, dlq = engine.client("sqs"), engine.ref("DeadLetterQueue")
        units = _dead_lettered_units(engine, run, ("chain", "alive", "same-lock", "died-first"))

        def dead_letter(pk: str, sender: str, lock: str) -> None:
            _send_lock_expired(engine, pk, sender, lock)
            time.sleep(0.01)  # (sent one after another, as the passes of the queue are)

        # GIVEN a unit whose last attempt died (arn:death), the first taker's message, then
        # a second taker that died before its send (arn:silent), then the third taker's
        # message naming it; a unit whose second message names a lock that neither sent
        # nor died; one whose two messages name the same dead lock (two takers of one
        # lock); and one whose message naming a dead taker was sent before the other
        dead_letter("sqs:chain", "arn:first#8", "arn:death#1")
        dead_letter("sqs:chain", "arn:third#8", "arn:silent#8")
        dead_letter("sqs:alive", "arn:first#2", "arn:death#2")
        dead_letter("sqs:alive", "arn:third#2", "arn:living#2")
        dead_letter("sqs:same-lock", "arn:first#3", "arn:death#3")
        dead_letter("sqs:same-lock", "arn:third#3", "arn:death#3")
        dead_letter("sqs:died-first", "arn:third#4", "arn:silent#4")
        dead_letter("sqs:died-first", "arn:first#4", "arn:living#4")
        died = {"arn:death", "arn:silent"}
        # WHEN the checker judges them as they are, and as a redrive found them
        now = _judge(run, units, {}, [{"scanned": 0}], None, died=died)
        run.dead_letters_before_redrive = drain(engine, dlq)
        sqs.purge_queue(QueueUrl=dlq)
        redriven = _judge(run, units, {}, [{"scanned": 0}], None, died=died)
    # THEN only the chain's second message is the gap's; the others are violations
    for report in (now, redriven):
        found = {v["key"] for v in report["violations"] if v["invariant"] == INVARIANTS[2]}
        assert found == {"sqs:alive", "sqs:same-lock", "sqs:died-first"}
        assert report["send_then_mark_gap"] == 1


def test_the_operators_redrive_deletes_the_second_dlq_message_the_send_then_mark_gap_left() -> None:
    """Seen in `chaos --source s3 --batch --objects 205 --seed 71`: a batch execution died
    between a message's DLQ send and its mark (another message's call ran past the batch's
    five minutes), the next delivery sent a second DLQ message once the lock expired
    (docs/design.md, "Where at most one DLQ message does not hold"). The first redrive
    run resubmits one and leaves the other, its key moved already, "for a later run"
    (operate.md); the operator runs that later run, which deletes it: the work is done."""
    parameters = queue_parameters(batch=True)
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        body = json.dumps({"orderId": "twin"})
        run.by_body[body] = "sqs:twin"
        unit = Unit("sqs:twin", body, "message", processable=True)
        real = engine.runtime.load(
            engine.runtime.functions[engine.function_name("ProcessorFunction")]
        )
        refused = [True]  # until the operator's fix

        def processor(event: dict[str, Any], context: Any) -> Any:
            if refused[0]:
                raise TransientError("injected: the warehouse refuses the order")
            return real(event, context)

        died: list[str] = []

        dies_before_its_first_mark = dies_at_its_dead_letter_mark(engine, died, times=1)

        engine.state.faults.append(dies_before_its_first_mark)
        with engine.override_function("ProcessorFunction", processor):
            # GIVEN an order refused at every attempt, whose batch dies between its DLQ send
            # and its mark at MaxAttempts; the next delivery, once the lock has expired,
            # takes the row over and dead-letters it again
            run.send(unit)
            run.pump()
            twins = [
                m["MessageAttributes"]["IDEMPOTENCY_KEY"]["StringValue"]
                for m in dlq_messages(engine)
            ]
            assert len(died) == 1 and twins == ["sqs:twin", "sqs:twin"]
            # WHEN the cause is fixed and the operator redrives as operate.md says
            refused[0] = False
            run.operator_redrive()
        # THEN the work is done once and no DLQ message is left for it
        report = _judge(run, [unit], {}, [{"scanned": 0}], None)
        assert report["violations"] == []
        assert report["effects_histogram"] == {"1": 1}
        assert report["dead_letter_messages"] == 0
        # (by the later run, or by the first if the resubmitted work was done by the time it
        # received the second: a message of work done is deleted whenever a run finds it)
        assert run.redriven is not None
        deleted = (
            run.redriven["deleted_already_processed"] + run.redriven["later_run_deleted_processed"]
        )
        assert deleted == 1
        # AND the second message is named as the gap's, not counted a violation
        assert report["send_then_mark_gap"] == 1


# ---- the injector's faults, in the execution they hit ---------------------------------


def _order(engine: LocalEngine, name: str, fault: str) -> tuple[Unit, list[dict[str, Any]]]:
    """A unit of work with a fault, and the processor's input for it: the pipe's array of
    one SQS record of the stack's source queue (as the audit and redrive start it again)."""
    body = json.dumps({"orderId": name})
    record = {
        "messageId": f"message-{name}",
        "receiptHandle": f"handle-{name}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": engine.get_att("SourceQueue", "Arn"),
        "awsRegion": "us-east-1",
    }
    return Unit(f"sqs:{name}", body, "message", True, fault), [record]


def _row(engine: LocalEngine, pk: str) -> dict[str, Any]:
    item = engine.client("dynamodb").get_item(
        TableName=engine.ref("LedgerTable"), Key={"pk": {"S": pk}}, ConsistentRead=True
    )["Item"]
    return {k: next(iter(v.values())) for k, v in item.items()}


@pytest.mark.parametrize(
    "fault",
    [
        # Seen as "a second audit resubmits nothing" VIOLATED (--source s3 --batch, seed 72,
        # now and then): two last-attempt deaths in one batch, and the batch ran out of time
        # for the first before the second's processor call, so the second's death never came
        # during the deliveries; the queue then dead-lettered it at MaxAttempts, unprocessed.
        # The operator's redrive ran it after the fix, the death fired there, and the audit
        # after the redrive rightly resubmitted the work it left.
        "last_attempt_death",
        # Seen the same way (`chaos --source s3 --batch --objects 200 --seed 265
        # --last-attempt-death-rate 0.25 --duplicate-rate 0.3`, once in two runs): a large
        # non-ASCII order failed its first attempt whenever that came, also after the
        # deliveries: when a redrive's execution ran it at attempt 1 (its row's attempts
        # reset by `redrive` after every batch that claimed it ran out of time for another
        # message's death and the queue dead-lettered it at MaxAttempts; or, never claimed,
        # started directly by `redrive --queue source`, which the queue refuses back at its
        # largest size), the harness failed it there, and the audit after the redrive
        # rightly resubmitted the FAILED row it left in the open-work index. Which of the two
        # it was in seed 265 is not known: the rerun did not repeat it.
        "large_non_ascii",
    ],
)
def test_a_fault_whose_attempt_never_came_during_the_deliveries_does_not_fire_after_them(
    fault: str,
) -> None:
    """The product was right in both; the harness injected a fault after the deliveries
    (and the operator's fix), which "a second audit resubmits nothing" rules out
    (QueueInjector.delivering)."""
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        unit, execution_input = _order(engine, f"late-{fault.replace('_', '-')}", fault)
        injector = QueueInjector(engine, {unit.pk: unit}, batch=True)
        engine.state.faults.append(injector.service)
        # GIVEN a batch-mode run whose unit's faulted attempt never came during the
        # deliveries, now over, and the operator's fix
        injector.delivering = False
        injector.fixed = True
        audits: list[dict[str, Any]] = []
        with engine.override_function("ProcessorFunction", injector.processor):
            # WHEN the redrive's execution (the single-message processor) runs the work,
            # and the audit after the redrive runs once every lock has expired
            result = engine.execute("ProcessorStateMachine", execution_input, name="redrive-1")
            run.audit(audits)
        engine.state.faults.remove(injector.service)
        row = _row(engine, unit.pk)
        effects = effects_by_idempotency_key(engine, engine.ref("OutputBucket"))
    # THEN the work is done once, in that execution, and the audit finds nothing to do
    assert (result.status, result.outcome) == ("SUCCEEDED", "Processed"), result.cause
    assert (row["status"], row["attempts"]) == ("PROCESSED", "1")
    assert effects[unit.pk] == 1 == injector.completed[unit.pk]
    assert injector.fired[fault] == 0
    assert [audits[0][k] for k in ("missing_resubmitted", "failed_resubmitted",
                                   "stuck_released")] == [0, 0, 0]  # fmt: skip


@pytest.mark.parametrize(
    ("batch", "express", "ended"),
    [
        # a batch-mode run's audit resubmission: the single-message STANDARD processor
        pytest.param(True, False, "ABORTED", id="batch-mode-standard-processor"),
        # StopExecution "is not supported by EXPRESS state machines" (API_StopExecution):
        # an EXPRESS execution that dies runs out of its five minutes
        pytest.param(False, True, "TIMED_OUT", id="express-processor"),
        pytest.param(False, False, "ABORTED", id="standard-processor"),
    ],
)
def test_a_last_attempt_death_ends_the_single_message_execution_it_hit(
    batch: bool, express: bool, ended: str
) -> None:
    """The death is the execution's: a batch's runs out of its time, a single-message
    STANDARD one is stopped, an EXPRESS one runs out of its time. (It was chosen by the
    run's mode: a batch-mode run's death in the audit's STANDARD resubmission, and every
    --express death, failed the processor call instead, EngineError or InvalidArn.)"""
    parameters = queue_parameters(batch=batch, express=express)
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        unit, execution_input = _order(engine, "dies", "last_attempt_death")
        injector = QueueInjector(engine, {unit.pk: unit}, batch=batch)
        engine.state.faults.append(injector.service)
        # GIVEN a unit whose attempts before the last fail (each a new execution)
        with engine.override_function("ProcessorFunction", injector.processor):
            earlier = [
                engine.execute("ProcessorStateMachine", execution_input, name=f"attempt-{n}")
                for n in range(1, injector.max_attempts)
            ]
            # WHEN its last attempt runs: the effect is made, then the execution dies
            last = engine.execute("ProcessorStateMachine", execution_input, name="last")
        engine.state.faults.remove(injector.service)
        row = _row(engine, unit.pk)
        effects = effects_by_idempotency_key(engine, engine.ref("OutputBucket"))
    # THEN that execution ended as a dead worker's does, its claim left to the sweep
    assert [e.status for e in earlier] == ["FAILED"] * (injector.max_attempts - 1)
    assert last.status == ended, (last.error, last.cause)
    assert row["status"] == "PROCESSING"
    assert row["attempts"] == str(injector.max_attempts)
    assert row["lock_owner"] == last.arn
    assert effects[unit.pk] == 1 == injector.fired["last_attempt_death"]


# ---- the command line -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        (["--unversioned"], "--unversioned is a mode of the source queue"),
        (["--express"], "--express is a mode of the source queue"),
        (["--source", "sqs", "--unversioned", "--inventory"], "on its own bucket only"),
        (["--batch", "--lock-expiry-rate", "0.1"], "not a fault of --source s3 --batch"),
        (["--source", "sqs", "--lock-expiry-rate", "0.1"], "not a fault of --source sqs"),
        (["--dlq-refused-rate", "0.1"], "not a fault of --source s3"),
        (["--source", "sqs", "--objects", "3"], "the faults need 13 units of work"),
        (["--audit-during", "-1"], "--audit-during: a number of audits, 0 or more"),
        (["--batch", "--audit-during", "-1"], "--audit-during: a number of audits, 0 or more"),
    ],
)
def test_the_command_refuses_what_the_source_cannot_do(flags: list[str], refusal: str) -> None:
    with pytest.raises(SystemExit, match=refusal):
        main(["chaos", *flags])


def test_a_call_in_flight_when_its_batch_runs_out_of_time_may_run_again() -> None:
    """Seen as "the work runs once unless a fault after its effect forced a rerun" VIOLATED
    (`chaos --source sqs --batch --unversioned --objects 260 --seed 115`, once: a large
    non-ASCII order, "2 processor calls did the work", one effect). A last-attempt death
    spends its batch's five minutes once no other message holds a PROCESSING row; a message
    claimed just after that check has its call in flight when the batch times out. The call
    runs to its end, as a Lambda invocation does when its execution ends, so the effect is
    made and nothing records it: the row stays PROCESSING, and its redelivery runs the work
    again once the lock expires (the sink keeps one effect). The product is right; the
    death was a fault after that message's effect too, which the checker did not count."""
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=2, batch=True))
        dying, dying_records = _order(engine, "dies", "last_attempt_death")
        other, other_records = _order(engine, "in-flight", "")
        other.fault = None
        units = {dying.pk: dying, other.pk: other}
        injector = QueueInjector(engine, units, batch=True)
        checked, in_flight, out_of_time = (threading.Event() for _ in range(3))
        settle = injector._others_settle

        def others_settle(lock_token: str, timeout: float = 30.0) -> None:
            settle(lock_token, timeout)
            checked.set()  # only now may the other message be claimed

        real_out_of_time = engine.run_out_of_time

        def run_out_of_time(execution_arn: str) -> None:
            assert in_flight.wait(30), "the other message's call never started"
            real_out_of_time(execution_arn)
            out_of_time.set()

        def claim_after_the_check(service: str, operation: str, body: str) -> Any:
            if operation == "PutItem" and other.pk in body and not checked.is_set():
                assert checked.wait(30), "the death never checked the other messages"
            return None

        def processor(event: dict[str, Any], context: Any) -> Any:
            if event["workItem"]["idempotencyKey"] == other.pk and not in_flight.is_set():
                in_flight.set()
                assert out_of_time.wait(30), "the batch never ran out of time"
            return injector.processor(event, context)

        injector._others_settle = others_settle  # type: ignore[method-assign]
        engine.run_out_of_time = run_out_of_time  # type: ignore[method-assign]
        engine.state.faults += [injector.service, claim_after_the_check]
        with engine.override_function("ProcessorFunction", processor):
            # GIVEN a message at its last attempt, whose death spends its batch's time
            for _ in range(injector.max_attempts - 1):
                engine.execute("BatchProcessorStateMachine", dying_records)
            # WHEN it shares a batch with a message whose call starts just after the check
            batch = engine.execute("BatchProcessorStateMachine", dying_records + other_records)
            row_after_batch = _row(engine, other.pk)
            # and the pipe hands that message over again once its lock has expired
            run.pass_time(run.lock_timeout + 3600)
            again = engine.execute("BatchProcessorStateMachine", other_records)
        engine.state.faults.remove(claim_after_the_check)
        engine.state.faults.remove(injector.service)
        injector.delivering = False
        run.pass_time(run.lock_timeout + 3600)
        # (judged alone: the dying message's row is left to a delivery this test does not make)
        report = _judge(run, [other], {}, [], None, injector.runs())
        effects = effects_by_idempotency_key(engine, engine.ref("OutputBucket"))
        row = _row(engine, other.pk)
    # THEN the batch timed out with the other message's effect made and unrecorded, its
    # redelivery ran it again, the sink kept one effect, and the checker names no violation
    assert batch.status == "TIMED_OUT", batch.status
    assert (row_after_batch["status"], row_after_batch["attempts"]) == ("PROCESSING", "1")
    assert again.status == "SUCCEEDED"
    assert row["status"] == "PROCESSED"
    assert injector.completed[other.pk] == 2
    assert effects[other.pk] == 1
    # (the dying message's row, left to a delivery this test does not make, is named as a
    # row of no unit: only the other message is judged here)
    assert [v for v in report["violations"] if v["key"] != dying.pk] == []


def test_only_a_call_whose_execution_then_died_is_forgiven_a_rerun() -> None:
    """A call its execution's death left unrecorded may run again; two calls of executions
    that lived are work run twice, and so is a call made after the work was recorded, even
    by an execution that then died."""
    injector = QueueInjector.__new__(QueueInjector)
    injector.died = {"dead-1", "dead-2"}
    injector.unrecorded = set()
    injector.calls = [
        ("in-flight", "dead-1"), ("in-flight", "redelivery"),
        ("twice", "first"), ("twice", "second"),
        ("after-the-record", "first"), ("after-the-record", "dead-2"),
        ("died-twice", "dead-1"), ("died-twice", "dead-2"), ("died-twice", "last"),
    ]  # fmt: skip
    assert injector.runs() == Counter(
        {"in-flight": 1, "twice": 2, "after-the-record": 2, "died-twice": 1}
    )


def test_a_ledger_outage_forgives_only_the_call_it_left_unrecorded() -> None:
    """A ledger outage after the effect (MarkComplete refused past its retries) leaves one
    call unrecorded, and the sweep or the queue runs the work again: that one call is
    forgiven, as a death's is, never a third. (The checker forgave every call of a unit
    whose fault was the outage, however many ran: broader than the fault explains.)"""
    injector = QueueInjector.__new__(QueueInjector)
    injector.died = set()
    injector.unrecorded = {("outage", "first"), ("outage-thrice", "first")}
    injector.calls = [
        ("outage", "first"), ("outage", "sweep"),
        ("outage-thrice", "first"), ("outage-thrice", "sweep"), ("outage-thrice", "queue"),
    ]  # fmt: skip
    assert injector.runs() == Counter({"outage": 1, "outage-thrice": 2})
    # AND the checker charges the third call to the unit, its fault notwithstanding
    with LocalEngine(
        parameters=queue_parameters(batch=False), function_log=io.StringIO()
    ) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1))
        units = []
        for name in ("outage", "outage-thrice"):
            body = json.dumps({"orderId": name})
            run.by_body[body] = f"sqs:{name}"
            units.append(Unit(f"sqs:{name}", body, "message", True, "ledger_unavailable"))
            item = {"pk": {"S": f"sqs:{name}"}, "status": {"S": "PROCESSED"}}
            engine.client("dynamodb").put_item(TableName=engine.ref("LedgerTable"), Item=item)
        runs = Counter({f"sqs:{k}": n for k, n in injector.runs().items()})
        report = _judge(run, units, {}, [{"scanned": 0}], None, runs)
    found = {(v["invariant"], v["key"]) for v in report["violations"]}
    assert {f for f in found if f[0] == INVARIANTS[8]} == {(INVARIANTS[8], "sqs:outage-thrice")}


def test_the_checker_names_two_effects_of_dead_lettered_work() -> None:
    """Dead-lettered work may have made its effect before it died (a last-attempt death),
    never two: the checker judged effects only of work not dead-lettered, so a doubled
    effect of work the DLQ held passed (as under --no-redrive, where no redrive resets
    the row before the check)."""
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        units = []
        for name, effects in (("once", 1), ("twice", 2)):
            body = json.dumps({"orderId": name})
            run.by_body[body] = f"sqs:{name}"
            units.append(Unit(f"sqs:{name}", body, "message", True, "last_attempt_death"))
            item = {"pk": {"S": f"sqs:{name}"}, "status": {"S": "FAILED"},
                    "dead_lettered_at": {"N": "1"}}  # fmt: skip
            engine.client("dynamodb").put_item(TableName=engine.ref("LedgerTable"), Item=item)
            # GIVEN dead-lettered work with one effect, and with two
            for _ in range(effects):
                engine.client("s3").put_object(
                    Bucket=engine.ref("OutputBucket"), Key=f"orders/{name}", Body=b"done",
                    Metadata={"idempotency-key": f"sqs:{name}"},
                )  # fmt: skip
        # WHEN the checker judges them
        report = _judge(run, units, {}, [{"scanned": 0}], None)
    # THEN only the second effect is named
    found = {(v["invariant"], v["key"]) for v in report["violations"]}
    assert found == {(INVARIANTS[3], "sqs:twice")}


def test_the_checker_names_rows_and_effects_of_no_unit_of_work() -> None:
    """A row or an effect under a key no unit of work has is work keyed apart from its unit
    (done twice under two keys, say): the checker judged only the keys of the units, as it
    judged DLQ messages of no unit, and passed them over."""
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        body = json.dumps({"orderId": "known"})
        run.by_body[body] = "sqs:known"
        unit = Unit("sqs:known", body, "message", True)
        table = engine.ref("LedgerTable")
        # GIVEN a unit processed once, a row of no unit, and an effect of no unit
        for pk in ("sqs:known", "sqs:stranger"):
            item = {"pk": {"S": pk}, "status": {"S": "PROCESSED"}}
            engine.client("dynamodb").put_item(TableName=table, Item=item)
        for pk in ("sqs:known", "sqs:elsewhere"):
            engine.client("s3").put_object(
                Bucket=engine.ref("OutputBucket"), Key=f"orders/{pk}", Body=b"done",
                Metadata={"idempotency-key": pk},
            )  # fmt: skip
        # WHEN the checker judges them
        report = _judge(run, [unit], {}, [{"scanned": 0}], None)
    # THEN both strangers are named, the unit is not
    found = {(v["invariant"], v["key"]) for v in report["violations"]}
    assert found == {(INVARIANTS[1], "sqs:stranger"), (INVARIANTS[3], "sqs:elsewhere")}


def test_the_gaps_chain_passes_through_takers_that_died_before_they_sent() -> None:
    """Seen as "at most one DLQ message" VIOLATED, "2 in the DLQ before the operator's
    redrive" (`chaos --source sqs --batch --express --objects 200 --seed 252` and `--seed
    268`, deaths at 0.30; other reruns showed the same units with chains of three LockExpired
    messages, each naming the lock of the one before). A batch died between its DLQ send and
    its mark (the gap, design.md); the next taker's batch died before its send; the one after
    sent a second message, naming the lock of the taker that sent nothing. And the audit's
    sweep, as a taker, sends with EXECUTION_ARN the lock it names (the execution whose input
    carries the event), so it never named "another" sender. Both are the gap: a row at
    MaxAttempts can be taken again only while no mark followed the first send."""
    with LocalEngine(parameters=queue_parameters(batch=True), function_log=io.StringIO()) as engine:
        run = QueueRun(engine, QueueChaosConfig(units=1, batch=True))
        units = _dead_lettered_units(
            engine, run, ("through-a-death", "audit-taker", "unexplained"), "last_attempt_death"
        )
        dead_letter = functools.partial(_send_lock_expired, engine)

        # GIVEN a batch death d0 on the last attempt; a taker s1 that sent and died before its
        # mark; a taker d2 whose batch died before its send; a taker s3 that sent
        dead_letter("sqs:through-a-death", "arn:batch:s1#0", "arn:batch:d0#4")
        dead_letter("sqs:through-a-death", "arn:batch:s3#1", "arn:batch:d2#7")
        # and a taker s1 that sent and died before its mark, then the audit's sweep
        dead_letter("sqs:audit-taker", "arn:batch:s1#2", "arn:batch:d0#5")
        dead_letter("sqs:audit-taker", "arn:batch:s1#2", "arn:batch:s1#2")
        # and two messages each naming a lock that neither sent one nor died (one naming a
        # death would be the gap: the death took the row after the other's send)
        dead_letter("sqs:unexplained", "arn:batch:s1#3", "arn:batch:alive#6")
        dead_letter("sqs:unexplained", "arn:batch:s4#0", "arn:batch:alive#0")
        # WHEN the checker judges them, knowing the executions that died
        died = {"arn:batch:d0", "arn:batch:s1", "arn:batch:d2"}
        report = _judge(run, units, {}, [{"scanned": 0}], None, died=died)
    # THEN only the unexplained second message is a violation; the others are the gap's
    found = {(v["invariant"], v["key"]) for v in report["violations"]}
    assert found == {(INVARIANTS[2], "sqs:unexplained")}
    assert report["send_then_mark_gap"] == 2
