"""redrive and inspect on the local engine: the DLQ, the ledger and the histories after each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from onceflow import ops
from onceflow.cli import main
from onceflow.engine import LocalEngine
from tests.helpers import (
    FUNCTION,
    MACHINE,
    PermanentError,
    attributes,
    dlq_messages,
    idempotency_key,
    ledger_row,
    output_effects,
    s3_event,
    upload,
)


def bug(event: dict[str, Any], context: Any) -> Any:
    raise PermanentError("injected: a processor bug that rejects good images")


def dead_letter(engine: LocalEngine, key: str, body: bytes | None = None) -> str:
    """Upload an object and deliver it while the processor rejects it: one DLQ message."""
    version = upload(engine, key, body)
    with engine.override_function(FUNCTION, bug):
        result = engine.execute(MACHINE, s3_event(engine, key, version))
    assert result.states_entered[-1] == "DeadLettered"
    return idempotency_key(engine, key, version)


def test_redrive_of_a_fixed_poison_object_processes_it_once(engine: LocalEngine) -> None:
    # GIVEN work dead-lettered by a processor bug, since fixed (the override is gone)
    pk = dead_letter(engine, "fixed.png")
    (original,) = dlq_messages(engine)
    # WHEN the DLQ is redriven
    report = ops.redrive(ops.LocalTarget(engine))
    # THEN the message moved, the work was processed once and the DLQ is empty
    assert report.count("resubmitted") == 1
    (moved,) = report.messages
    assert moved.message_id == original["MessageId"] and moved.idempotency_key == pk
    assert moved.outcome == "SUCCEEDED"
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 1
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "PROCESSED"
    # AND the row records the deliberate second chance
    assert row["redrives"] == "1" and row["attempts"] == "1"
    assert row["redrive_message_id"] == original["MessageId"]
    assert "dead_lettered_at" not in row
    history = engine.wait(str(moved.execution_arn)).states_entered
    assert history == ["Normalize", "Claim", "Reclaim", "Process", "MarkComplete", "Processed"]


def test_redrive_of_a_still_broken_object_lands_it_in_the_dlq_again(engine: LocalEngine) -> None:
    # GIVEN a corrupt upload, dead-lettered as poison
    version = upload(engine, "broken.png", b"not an image")
    pk = idempotency_key(engine, "broken.png", version)
    engine.execute(MACHINE, s3_event(engine, "broken.png", version))
    (first,) = dlq_messages(engine)
    # WHEN it is redriven, still corrupt
    report = ops.redrive(ops.LocalTarget(engine))
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
    dry = ops.redrive(ops.LocalTarget(engine), dry_run=True)
    assert dry.count("would resubmit") == 3
    assert len(dlq_messages(engine)) == 3
    assert [ledger_row(engine, k) for k in keys] == rows_before
    limited = ops.redrive(ops.LocalTarget(engine), max_messages=2)
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
    assert engine.execute(MACHINE, s3_event(engine, key, version)).states_entered[-1] == (
        "Processed"
    )
    report = ops.redrive(ops.LocalTarget(engine))
    (item,) = report.messages
    assert item.action == "deleted" and "already processed" in item.detail
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 1


def test_an_oversized_event_is_redriven_from_its_execution_history(engine: LocalEngine) -> None:
    # The DLQ body holds only an excerpt; EXECUTION_ARN's input has the event whole.
    event: dict[str, Any] = {"detail": {"padding": "x" * 140_000}, "source": "elsewhere"}
    result = engine.execute(MACHINE, event)
    assert result.states_entered[-1] == "InvalidEvent"
    (message,) = dlq_messages(engine)
    assert json.loads(message["Body"])["event"] is None
    report = ops.redrive(ops.LocalTarget(engine))
    (moved,) = report.messages
    assert moved.action == "resubmitted"
    rerun = engine.wait(str(moved.execution_arn))
    assert rerun.input == event  # the whole event, not the excerpt
    assert rerun.states_entered[-1] == "InvalidEvent"  # still invalid: back in the DLQ
    assert len(dlq_messages(engine)) == 1


def test_inspect_shows_the_row_and_every_execution_that_touched_the_key(
    engine: LocalEngine,
) -> None:
    version = upload(engine, "seen.png")
    event = s3_event(engine, "seen.png", version)
    first = engine.execute(MACHINE, event)
    second = engine.execute(MACHINE, event)
    found = ops.inspect_key(ops.LocalTarget(engine), idempotency_key(engine, "seen.png", version))
    assert found["row"]["status"] == "PROCESSED"
    assert found["row"]["claims"] == [first.arn]
    roles = {e["executionArn"]: e["role"] for e in found["executions"]}
    assert roles == {first.arn: "claimed", second.arn: "discarded as a duplicate"}
    paths = {e["executionArn"]: e["path"] for e in found["executions"]}
    assert paths[second.arn] == ["Normalize", "Claim", "Reclaim", "Duplicate"]


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
    report = ops.redrive(ops.LocalTarget(engine))
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
    report = ops.redrive(ops.LocalTarget(engine))
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
    report = ops.redrive(ops.LocalTarget(engine), queue="ingress")
    (item,) = report.messages
    assert item.action == "resubmitted" and item.outcome == "SUCCEEDED"
    assert output_effects(engine) == 1
    assert ledger_row(engine, idempotency_key(engine, "ingress.png", version)) is not None
