"""redrive and inspect on the local engine: the DLQ, the ledger and the histories after each."""

from __future__ import annotations

import copy
import datetime
import io
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from onceflow import ops
from onceflow.cli import main, stack_commands
from onceflow.local.engine import LocalEngine
from onceflow.local.target import LocalTarget
from tests.helpers import (
    FUNCTION,
    MACHINE,
    PermanentError,
    TransientError,
    attributes,
    dies_at_its_dead_letter_mark,
    dlq_messages,
    expire_lock,
    idempotency_key,
    ledger_row,
    load_event,
    output_effects,
    s3_event,
    upload,
)
from tests.workflow.test_failure_paths import failing, throttled


def bug(event: dict[str, Any], context: Any) -> Any:
    raise PermanentError("injected: a processor bug that rejects good images")


def dead_letter(engine: LocalEngine, key: str, body: bytes | None = None) -> str:
    """Upload an object and deliver it while the processor rejects it: one DLQ message."""
    version = upload(engine, key, body)
    with engine.override_function(FUNCTION, bug):
        result = engine.execute(MACHINE, s3_event(engine, key, version))
    assert result.outcome == "DeadLettered"
    return idempotency_key(engine, key, version)


def test_redrive_of_a_fixed_poison_object_processes_it_once(engine: LocalEngine) -> None:
    # GIVEN work dead-lettered by a processor bug, since fixed (the override is gone)
    pk = dead_letter(engine, "fixed.png")
    (original,) = dlq_messages(engine)
    # WHEN the DLQ is redriven
    report = ops.redrive(LocalTarget(engine))
    # THEN the message moved, the work was processed once and the DLQ is empty
    assert report.count("resubmitted") == 1
    (moved,) = report.messages
    assert moved.message_id == original["MessageId"] and moved.idempotency_key == pk
    assert moved.outcome == "SUCCEEDED (PROCESSED)"
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 1
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "PROCESSED"
    # AND the row records the deliberate second chance
    assert row["redrives"] == "1" and row["attempts"] == "1"
    assert row["redrive_message_id"] == original["MessageId"]
    assert "dead_lettered_at" not in row
    history = engine.wait(str(moved.execution_arn)).states_entered
    assert history == ["Claim", "Reclaim", "Process", "MarkComplete"]


def test_redrive_of_a_still_broken_object_lands_it_in_the_dlq_again(engine: LocalEngine) -> None:
    # GIVEN a corrupt upload, dead-lettered as poison
    version = upload(engine, "broken.png", b"not an image")
    pk = idempotency_key(engine, "broken.png", version)
    engine.execute(MACHINE, s3_event(engine, "broken.png", version))
    (first,) = dlq_messages(engine)
    # WHEN it is redriven, still corrupt
    report = ops.redrive(LocalTarget(engine))
    # THEN it failed again and is back in the DLQ as a new message: nothing lost
    (moved,) = report.messages
    assert moved.action == "resubmitted" and moved.outcome == "FAILED (PermanentError)"
    (again,) = dlq_messages(engine)
    assert again["MessageId"] != first["MessageId"]
    assert attributes(again)["IDEMPOTENCY_KEY"] == pk
    assert attributes(again)["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    assert row["redrives"] == "1"
    assert output_effects(engine) == 0


def test_dry_run_changes_nothing_and_max_limits_the_move(engine: LocalEngine) -> None:
    keys = [dead_letter(engine, f"many/{n}.png") for n in range(3)]
    rows_before = [ledger_row(engine, k) for k in keys]
    dry = ops.redrive(LocalTarget(engine), dry_run=True)
    assert dry.count("would resubmit") == 3
    assert len(dlq_messages(engine)) == 3
    assert [ledger_row(engine, k) for k in keys] == rows_before
    limited = ops.redrive(LocalTarget(engine), max_messages=2)
    assert limited.count("resubmitted") == 2
    assert len(dlq_messages(engine)) == 1
    assert output_effects(engine) == 2


def test_a_message_whose_work_was_done_meanwhile_is_removed_without_a_second_effect(
    engine: LocalEngine,
) -> None:
    pk = dead_letter(engine, "done.png")
    # Someone resets the row by hand and a redelivery processes it before the redrive.
    engine.client("dynamodb").update_item(
        TableName=engine.ref("LedgerTable"),
        Key={"pk": {"S": pk}},
        UpdateExpression="SET attempts = :z REMOVE dead_lettered_at",
        ExpressionAttributeValues={":z": {"N": "0"}},
    )
    key = pk.rsplit("/", 1)[-1].split("#")[0]
    version = pk.rsplit("#", 1)[-1]
    assert engine.execute(MACHINE, s3_event(engine, key, version)).outcome == ("Processed")
    report = ops.redrive(LocalTarget(engine))
    (item,) = report.messages
    assert item.action == "deleted" and "already processed" in item.detail
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 1


def test_one_run_removes_every_stale_message_of_work_done_meanwhile(engine: LocalEngine) -> None:
    """Seen as "no DLQ message for processed work" VIOLATED (`chaos --source s3 --batch
    --objects 210 --seed 281 --last-attempt-death-rate 0.25 --large-non-ascii-rate 0.10
    --duplicate-rate 0.3`): the send-then-mark gap (design.md) twice over left three DLQ
    messages for one unit; the first run resubmitted one and left two, the later run
    deleted one as already processed and left the third, "moved earlier in this run",
    although its work was done: the DLQ's alarm fired for finished work until yet another
    run. A message whose row is PROCESSED is stale whatever this run did before it."""
    pk = dead_letter(engine, "done-thrice.png")
    (first,) = dlq_messages(engine)
    # GIVEN two more messages for the same work (the gap's: a sender died before its mark,
    # the next taker sent again), and the work done meanwhile (a hand-made fix, then a
    # redelivery)
    sqs = engine.client("sqs")
    for _ in range(2):
        sqs.send_message(
            QueueUrl=engine.ref("DeadLetterQueue"),
            MessageBody=first["Body"],
            MessageAttributes={
                name: {"DataType": value["DataType"], "StringValue": value["StringValue"]}
                for name, value in first["MessageAttributes"].items()
            },
        )
    engine.client("dynamodb").update_item(
        TableName=engine.ref("LedgerTable"),
        Key={"pk": {"S": pk}},
        UpdateExpression="SET attempts = :z REMOVE dead_lettered_at",
        ExpressionAttributeValues={":z": {"N": "0"}},
    )
    version = pk.rsplit("#", 1)[-1]
    assert engine.execute(MACHINE, s3_event(engine, "done-thrice.png", version)).outcome == (
        "Processed"
    )
    # WHEN one redrive run reads the DLQ
    report = ops.redrive(LocalTarget(engine))
    # THEN every message is deleted as stale, none left for a later run, the work done once
    assert [m.action for m in report.messages] == ["deleted"] * 3, report.messages
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 1


def test_an_oversized_event_is_redriven_from_its_execution_history(engine: LocalEngine) -> None:
    # The DLQ body holds only an excerpt; EXECUTION_ARN's input has the event whole.
    event: dict[str, Any] = {"detail": {"padding": "x" * 140_000}, "source": "elsewhere"}
    result = engine.execute(MACHINE, event)
    assert result.outcome == "InvalidEvent"
    (message,) = dlq_messages(engine)
    assert json.loads(message["Body"])["event"] is None
    report = ops.redrive(LocalTarget(engine), include_invalid=True)
    (moved,) = report.messages
    assert moved.action == "resubmitted"
    rerun = engine.wait(str(moved.execution_arn))
    assert rerun.input == event  # the whole event, not the excerpt
    assert rerun.outcome == "InvalidEvent"  # still invalid: back in the DLQ
    assert len(dlq_messages(engine)) == 1


def test_inspect_shows_the_row_and_every_execution_that_touched_the_key(
    engine: LocalEngine,
) -> None:
    version = upload(engine, "seen.png")
    event = s3_event(engine, "seen.png", version)
    first = engine.execute(MACHINE, event)
    second = engine.execute(MACHINE, event)
    found = ops.inspect_key(LocalTarget(engine), idempotency_key(engine, "seen.png", version))
    assert found["row"]["status"] == "PROCESSED"
    assert found["row"]["claims"] == [first.arn]
    roles = {e["executionArn"]: e["role"] for e in found["executions"]}
    assert roles == {first.arn: "claimed", second.arn: "discarded as a duplicate"}
    paths = {e["executionArn"]: e["path"] for e in found["executions"]}
    assert paths[second.arn] == ["Claim", "Reclaim", "Duplicate"]


def test_cli_audit_redrive_and_inspect_on_a_fresh_local_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["audit", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["scanned"] == 0 and report["missing_resubmitted"] == 0
    assert main(["redrive", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resubmitted"] == 0
    assert main(["inspect", "s3://nowhere/x#1"]) == 1
    assert "no ledger row" in capsys.readouterr().out


def test_cli_names_a_missing_stack_clearly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # No credentials anywhere, and no instance metadata to ask: fail fast and say why.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = main(["audit", "--stack-name", "no-such-stack", "--region", "us-east-1"])
    assert code == 2
    assert "cannot read stack no-such-stack" in capsys.readouterr().err


def test_a_refused_start_keeps_the_message_and_dead_letters_the_row_again(
    engine: LocalEngine,
) -> None:
    pk = dead_letter(engine, "refused.png")
    # The processor is gone (a half-deleted stack): Step Functions refuses the start.
    engine.client("stepfunctions").delete_state_machine(stateMachineArn=engine.ref(MACHINE))
    report = ops.redrive(LocalTarget(engine))
    (item,) = report.messages
    assert item.action == "kept" and "refused" in item.detail
    assert len(dlq_messages(engine)) == 1
    row = ledger_row(engine, pk)
    assert row is not None and "dead_lettered_at" in row and "open_status" not in row


def test_a_redrive_that_stopped_before_deleting_is_not_reset_twice(engine: LocalEngine) -> None:
    pk = dead_letter(engine, "twice.png")
    (message,) = dlq_messages(engine)
    # An earlier redrive started the execution, then died before deleting the message.
    earlier = engine.execute(
        MACHINE,
        json.loads(message["Body"])["event"],
        name=f"redrive-{message['MessageId']}",
    )
    report = ops.redrive(LocalTarget(engine))
    (item,) = report.messages
    assert item.action == "resubmitted" and item.execution_arn == earlier.arn
    assert "earlier redrive" in item.detail
    assert dlq_messages(engine) == []
    row = ledger_row(engine, pk)
    assert row is not None and "redrives" not in row  # never reset by this redrive


def test_redrive_from_the_ingress_dlq_starts_the_event_as_it_was(engine: LocalEngine) -> None:
    version = upload(engine, "ingress.png")
    event = s3_event(engine, "ingress.png", version)
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("IngressDeadLetterQueue"),
        MessageBody=json.dumps(event),
        MessageAttributes={"ERROR_CODE": {"DataType": "String", "StringValue": "Throttling"}},
    )
    report = ops.redrive(LocalTarget(engine), queue="ingress")
    (item,) = report.messages
    assert item.action == "resubmitted" and item.outcome == "SUCCEEDED (PROCESSED)"
    assert output_effects(engine) == 1
    assert ledger_row(engine, idempotency_key(engine, "ingress.png", version)) is not None


def _settle_each_start(engine: LocalEngine, starts: list[str]) -> Any:
    """A progress callback: each redriven execution ends (and dead-letters anew) before
    the run receives again, as a slow run on AWS would see it; a runaway is cut short."""

    def settle(item: ops.Redriven) -> None:
        if item.execution_arn and item.action == "resubmitted":
            starts.append(item.execution_arn)
            assert len(starts) <= 3, f"runaway: {len(starts)} starts in one redrive run"
            engine.wait(item.execution_arn)

    return settle


def test_a_run_without_max_redrives_a_still_failing_key_once_and_stops(
    engine: LocalEngine,
) -> None:
    # GIVEN a corrupt upload, dead-lettered as poison
    version = upload(engine, "runaway.png", b"not an image")
    pk = idempotency_key(engine, "runaway.png", version)
    assert engine.execute(MACHINE, s3_event(engine, "runaway.png", version)).outcome == (
        "DeadLettered"
    )
    (first,) = dlq_messages(engine)
    starts: list[str] = []
    # WHEN one redrive run without --max moves it, and the work fails again during the run
    report = ops.redrive(LocalTarget(engine), progress=_settle_each_start(engine, starts))
    # THEN the key was started once; its new dead letter was left for a later run
    assert len(starts) == 1 and report.count("resubmitted") == 1
    assert [m.action for m in report.messages] == ["resubmitted", "left"]
    left = report.messages[1]
    assert left.idempotency_key == pk and "earlier in this run" in left.detail
    # AND the DLQ holds exactly that one new message, visible again
    (again,) = dlq_messages(engine)
    assert again["MessageId"] == left.message_id != first["MessageId"]
    assert attributes(again)["IDEMPOTENCY_KEY"] == pk
    row = ledger_row(engine, pk)
    assert row is not None and row["redrives"] == "1" and "dead_lettered_at" in row


def test_a_run_redrives_a_still_invalid_keyless_event_once_and_stops(
    engine: LocalEngine,
) -> None:
    # GIVEN an event no key can be derived from, dead-lettered as InvalidEvent
    assert (
        engine.execute(MACHINE, load_event("invalid-unknown-shape.json")).outcome == "InvalidEvent"
    )
    starts: list[str] = []
    # WHEN a run redrives it and it is dead-lettered again (no key: EXECUTION_ARN and the
    # event say it is the same work)
    report = ops.redrive(
        LocalTarget(engine), progress=_settle_each_start(engine, starts), include_invalid=True
    )
    # THEN it was started once and the run stopped, its new message left in the DLQ
    assert len(starts) == 1
    assert [m.action for m in report.messages] == ["resubmitted", "left"]
    (again,) = dlq_messages(engine)
    assert attributes(again)["EXECUTION_ARN"] == starts[0]
    assert report.as_dict()["left"] == 1


def test_a_dry_run_says_what_it_would_leave_not_that_it_redrove_it(
    engine: LocalEngine,
) -> None:
    # GIVEN one invalid event delivered twice: two DLQ messages of the same keyless work
    for _ in range(2):
        assert (
            engine.execute(MACHINE, load_event("invalid-unknown-shape.json")).outcome
            == "InvalidEvent"
        )
    # WHEN a dry run looks at them
    report = ops.redrive(LocalTarget(engine), dry_run=True, include_invalid=True)
    # THEN it would move the first and leave the second, and says so in the conditional:
    # nothing was redriven, so nothing "ended" (it said "its work was redriven earlier in
    # this run (this is how that ended)")
    assert [m.action for m in report.messages] == ["would resubmit", "left"]
    left = report.messages[1].detail
    assert "redriven earlier" not in left and "how that ended" not in left
    assert "would" in left
    summary = stack_commands.redrive_summary(report.as_dict(), dry_run=True, undelivered=False)
    assert "already moved" not in summary and "1 would be left for a later run" in summary
    assert len(dlq_messages(engine)) == 2


def test_a_claim_lost_to_a_ledger_outage_is_redriven_once(engine: LocalEngine) -> None:
    """A Claim throttled past its retries writes no row, so its DLQ message is the only
    carrier of the work (P11 item 3: later ledger failures leave the row to the sweep and
    send nothing); redrive starts it again and it is processed once."""
    # GIVEN an upload whose Claim is throttled past its retries
    version = upload(engine, "outage.png")
    pk = idempotency_key(engine, "outage.png", version)
    with failing(engine, "dynamodb", "PutItem", throttled()):
        result = engine.execute(MACHINE, s3_event(engine, "outage.png", version))
    assert result.error == "LedgerUnavailable"
    assert ledger_row(engine, pk) is None
    assert len(dlq_messages(engine)) == 1
    # WHEN redrive runs
    (moved,) = ops.redrive(LocalTarget(engine)).messages
    # THEN the work is done once and the DLQ is empty
    assert moved.action == "resubmitted" and moved.outcome == "SUCCEEDED (PROCESSED)"
    assert (ledger_row(engine, pk) or {})["status"] == "PROCESSED"
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 1


def test_a_row_redriven_many_times_keeps_a_bounded_claims_list(engine: LocalEngine) -> None:
    # GIVEN a poison object, dead-lettered
    version = upload(engine, "again-and-again.png", b"not an image")
    pk = idempotency_key(engine, "again-and-again.png", version)
    engine.execute(MACHINE, s3_event(engine, "again-and-again.png", version))
    # WHEN it is redriven 14 times, failing every time
    redriven = []
    for _ in range(14):
        (item,) = ops.redrive(LocalTarget(engine)).messages
        assert item.action == "resubmitted" and item.outcome == "FAILED (PermanentError)"
        redriven.append(item.execution_arn)
    # THEN the row keeps the newest claims only, and counts the ones it let go
    row = ops.inspect_key(LocalTarget(engine), pk)["row"]
    assert row["redrives"] == 14
    # The newest 10 kept at the last reset, plus that redrive's own Reclaim.
    assert len(row["claims"]) == 11
    assert row["claims"] == redriven[-len(row["claims"]) :]
    assert row["claims_dropped"] + len(row["claims"]) == 15  # the first claim and 14 redrives
    assert len(dlq_messages(engine)) == 1


def test_a_reset_that_races_a_change_of_the_row_does_not_overwrite_it(
    engine: LocalEngine,
) -> None:
    # GIVEN a dead-lettered row, and a writer that changes it between redrive's read and write
    pk = dead_letter(engine, "raced.png")
    dynamodb = engine.client("dynamodb")
    real_get = dynamodb.get_item
    changed = {"n": 0}

    def get_then_change(**kwargs: Any) -> Any:
        item = real_get(**kwargs)
        if changed["n"] == 0:
            changed["n"] += 1
            # Someone processes it meanwhile (a hand-made fix): the reset must not undo that.
            dynamodb.update_item(
                TableName=engine.ref("LedgerTable"),
                Key={"pk": {"S": pk}},
                UpdateExpression="SET #s = :p, updated_at = :t",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":p": {"S": "PROCESSED"}, ":t": {"N": "1"}},
            )
        return item

    target = LocalTarget(engine)
    real_client = target.client

    def client(service: str) -> Any:
        if service == "dynamodb":
            wrapped = type("Wrapped", (), {})()
            wrapped.get_item = get_then_change  # type: ignore[attr-defined]
            wrapped.update_item = dynamodb.update_item  # type: ignore[attr-defined]
            return wrapped
        return real_client(service)

    target.client = client  # type: ignore[method-assign]
    # WHEN the DLQ is redriven
    report = ops.redrive(target)
    # THEN the write saw the change, read again, and removed the now stale message
    (item,) = report.messages
    assert item.action == "deleted" and "already processed" in item.detail
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "PROCESSED" and "redrives" not in row
    assert dlq_messages(engine) == []


def _dlq_refuses(service: str, operation: str, body: str) -> Any:
    """SQS answering SendMessage as it does when the queue's KMS key refuses the sender
    (the JSON protocol: __type, and the query-compatible code in x-amzn-query-error)."""
    if service != "sqs" or operation != "SendMessage":
        return None
    return (
        400,
        {
            "x-amzn-RequestId": str(uuid.uuid4()),
            "x-amzn-query-error": "KMS.AccessDeniedException;Sender",
            "Content-Type": "application/x-amz-json-1.0",
        },
        json.dumps(
            {
                "__type": "com.amazonaws.sqs#KmsAccessDenied",
                "message": "injected: the DLQ's KMS key does not let this role use it",
            }
        ),
    )


@contextmanager
def _dlq_refusing(engine: LocalEngine) -> Iterator[None]:
    engine.state.faults.append(_dlq_refuses)
    try:
        yield
    finally:
        engine.state.faults.remove(_dlq_refuses)


def _processor_executions(engine: LocalEngine) -> list[str]:
    sfn = engine.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=engine.ref(MACHINE))
    return [e["executionArn"] for page in pages for e in page["executions"]]


def test_an_event_that_could_not_be_dead_lettered_is_restarted_once_by_redrive_undelivered(
    engine: LocalEngine,
) -> None:
    # GIVEN an invalid event whose DLQ message could not be sent (the DLQ refused it)
    event = load_event("invalid-unknown-shape.json")
    with _dlq_refusing(engine):
        undelivered = engine.execute(MACHINE, copy.deepcopy(event))
    assert undelivered.status == "FAILED" and undelivered.error == "DeadLetterFailed"
    assert undelivered.outcome == "DeadLetterFailed"
    assert dlq_messages(engine) == []
    # AND an execution that failed for another reason, which is not redrive's to restart
    version = upload(engine, "flaky.png")

    def flaky(event: dict[str, Any], context: Any) -> Any:
        raise TransientError("injected: S3 SlowDown")

    with engine.override_function(FUNCTION, flaky):
        other = engine.execute(MACHINE, s3_event(engine, "flaky.png", version))
    assert other.status == "FAILED" and other.error == "TransientError"
    target = LocalTarget(engine)
    # WHEN the DLQ works again: a dry run, then two real runs
    before = len(_processor_executions(engine))
    dry = ops.redrive_undelivered(target, dry_run=True)
    assert [(m.action, m.failed_execution) for m in dry.messages] == [
        ("would resubmit", undelivered.arn)
    ]
    assert len(_processor_executions(engine)) == before and dlq_messages(engine) == []
    first = ops.redrive_undelivered(target)
    second = ops.redrive_undelivered(target)
    # THEN the undelivered execution was restarted once, with its original input
    (restarted,) = first.messages
    assert restarted.action == "resubmitted" and restarted.failed_execution == undelivered.arn
    assert restarted.outcome == "FAILED (InvalidEvent)"
    rerun = engine.wait(str(restarted.execution_arn))
    assert rerun.input == event
    assert rerun.name == ops.undelivered_name(undelivered.name)
    (again,) = second.messages
    assert again.action == "already restarted" and again.execution_arn == rerun.arn
    assert len(_processor_executions(engine)) == before + 1
    # AND exactly one DLQ message now holds it, as the processor dead-letters an invalid event
    (message,) = dlq_messages(engine)
    assert attributes(message)["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"
    assert attributes(message)["EXECUTION_ARN"] == rerun.arn
    assert json.loads(message["Body"])["event"] == event


def test_redrive_undelivered_looks_back_only_as_far_as_since_and_max(
    engine: LocalEngine,
) -> None:
    # GIVEN two undelivered events
    with _dlq_refusing(engine):
        older = engine.execute(MACHINE, load_event("invalid-unknown-shape.json"))
        newer = engine.execute(MACHINE, load_event("invalid-s3-missing-key.json"))
    assert older.error == newer.error == "DeadLetterFailed"
    target = LocalTarget(engine)
    # WHEN redrive looks only at executions started after both, THEN it restarts nothing
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    assert ops.redrive_undelivered(target, since=later).messages == []
    # WHEN it may restart one, THEN it restarts the newest
    (one,) = ops.redrive_undelivered(target, max_executions=1).messages
    assert one.action == "resubmitted" and one.failed_execution == newer.arn
    # AND the next run restarts the other, and only that one
    rest = ops.redrive_undelivered(target)
    assert sorted((m.action, m.failed_execution) for m in rest.messages) == sorted(
        [("already restarted", newer.arn), ("resubmitted", older.arn)]
    )
    assert len(dlq_messages(engine)) == 2


def test_cli_redrive_undelivered_on_a_fresh_local_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["redrive", "--undelivered", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["undelivered"] is True and data["resubmitted"] == 0
    assert main(["redrive", "--undelivered", "--since", "2h", "--dry-run"]) == 0
    assert "would restart 0 undelivered execution(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["redrive", "--undelivered", "--queue", "ingress"])
    assert "--undelivered reads the processor's failed executions" in str(refused.value.code)


def test_an_invalid_event_is_kept_in_the_dlq_unless_asked_for(engine: LocalEngine) -> None:
    # GIVEN an event the processor refused as invalid (no key can be derived from it)
    result = engine.execute(MACHINE, load_event("invalid-unknown-shape.json"))
    assert result.outcome == "InvalidEvent"
    (message,) = dlq_messages(engine)
    executions = len(engine.client("stepfunctions").list_executions(
        stateMachineArn=engine.ref(MACHINE))["executions"])  # fmt: skip
    # WHEN the DLQ is redriven as usual
    report = ops.redrive(LocalTarget(engine))
    # THEN it is kept, saying why (run again, the same event fails the same way), and
    # nothing was started
    (item,) = report.messages
    assert item.action == "kept"
    assert "InvalidEvent" in item.detail and "--invalid" in item.detail
    (still,) = dlq_messages(engine)
    assert still["MessageId"] == message["MessageId"]
    assert len(engine.client("stepfunctions").list_executions(
        stateMachineArn=engine.ref(MACHINE))["executions"]) == executions  # fmt: skip
    # AND asked for (after a change to the stack that accepts it), it is redriven
    again = ops.redrive(LocalTarget(engine), include_invalid=True)
    assert again.messages[0].action == "resubmitted"


def test_a_resubmission_that_ended_as_a_duplicate_says_the_work_did_not_run(
    engine: LocalEngine,
) -> None:
    from onceflow.ops.redrive import Redriven, RedriveReport, _wait_for_outcomes

    # GIVEN an upload processed, and an execution of its event started again (as a
    # restart redrive makes), which ends as a Duplicate of the processed row
    event = s3_event(engine, "twice.png", upload(engine, "twice.png"))
    assert engine.execute(MACHINE, event).outcome == "Processed"
    sfn = engine.client("stepfunctions")
    again = sfn.start_execution(stateMachineArn=engine.ref(MACHINE), input=json.dumps(event))
    report = RedriveReport("queue", dry_run=False)
    report.messages.append(Redriven("m", "k", "resubmitted", execution_arn=again["executionArn"]))
    # WHEN redrive notes how each execution it started ended
    _wait_for_outcomes(LocalTarget(engine), report, wait=True)
    # THEN the outcome names the Duplicate, not only SUCCEEDED, and the work ran once
    assert report.messages[0].outcome == "SUCCEEDED (DUPLICATE: the work did not run again)"
    assert output_effects(engine) == 1


def test_the_send_then_mark_gaps_messages_for_work_done_are_deleted_in_the_same_run() -> None:
    """Seen in `chaos --source sqs --batch --express --objects 200 --seed 252` (deaths on the
    last attempt at 0.30): a batch died between a message's DLQ send and its mark twice,
    so three DLQ messages carried one key (design.md, "Where at most one DLQ message does
    not hold"). The operator's redrive resubmitted one and the work was done; a second
    message of that key was then "left for a later run" although its row was PROCESSED,
    and the later run deleted one and left the other again: a DLQ message, and its alarm,
    for work done after every run the operator made. Moving a key once per run keeps a
    run from redriving work that fails again in it; deleting a message of work done moves
    nothing."""
    from tests.workflow.test_batch_mode import PARAMETERS, row, send

    with LocalEngine(parameters=PARAMETERS, function_log=io.StringIO(), time_scale=0.0) as engine:
        real = engine.runtime.load(engine.runtime.functions[engine.function_name(FUNCTION)])
        deaths: list[str] = []

        def refused(payload: Any, context: Any) -> Any:
            raise TransientError("injected: the warehouse refuses the order")

        dies_between_send_and_mark = dies_at_its_dead_letter_mark(engine, deaths, times=2)

        # GIVEN an order refused at every attempt, whose batch dies between its DLQ send and
        # its mark at MaxAttempts, and whose next taker's batch dies there too, each once
        # the lock expired: three DLQ messages for one key, the row dead-lettered by the third
        send(engine, "order-gap")
        engine.state.faults.append(dies_between_send_and_mark)
        try:
            with engine.override_function(FUNCTION, refused):
                for _ in range(6):
                    held = ledger_row(engine, "sqs:order-gap") or {}
                    if "dead_lettered_at" in held:
                        break
                    if held.get("status") == "PROCESSING":
                        expire_lock(engine, "sqs:order-gap")
                    for arn in engine.pump_pipes():
                        engine.wait(arn)
        finally:
            engine.state.faults.remove(dies_between_send_and_mark)
        assert len(deaths) == 2
        assert [attributes(m)["IDEMPOTENCY_KEY"] for m in dlq_messages(engine)] == [
            "sqs:order-gap"
        ] * 3
        assert "dead_lettered_at" in row(engine, "order-gap")
        # WHEN the cause is fixed and the operator redrives: one run, each start ended before
        # it receives again (as a slow run on AWS would see it)
        starts: list[str] = []
        with engine.override_function(FUNCTION, real):
            report = ops.redrive(LocalTarget(engine), progress=_settle_each_start(engine, starts))
        # THEN one message was resubmitted and the work done once; the other two, messages of
        # work done, were deleted in that run: none is left for a later one
        assert sorted(m.action for m in report.messages) == ["deleted", "deleted", "resubmitted"]
        assert row(engine, "order-gap")["status"] == "PROCESSED"
        assert output_effects(engine) == 1
        assert dlq_messages(engine) == []
