"""The seeded hostile corpus (tests/hostile.py) through the processor: every input ends in a
named end state, and its ledger row and DLQ message say the same as its end state."""

from __future__ import annotations

import io
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine
from tests.helpers import MACHINE, attributes, png_bytes
from tests.hostile import Hostile, corpus

SUCCEED = {"Processed", "Duplicate", "Ignored", "Superseded"}
FAIL = {
    "InvalidEvent",
    "DeadLettered",
    "Failed",
    "LockLost",
    "DeadLetterFailed",
    "LedgerUnavailable",
}
# End states that put exactly one message in the DLQ; every other puts none.
DEAD_LETTERING = {"InvalidEvent", "DeadLettered", "LedgerUnavailable"}


def _drain_dlq(engine: LocalEngine) -> dict[str, list[dict[str, Any]]]:
    """Every DLQ message, received and deleted, grouped by the execution that sent it."""
    sqs = engine.client("sqs")
    url = engine.ref("DeadLetterQueue")
    by_execution: dict[str, list[dict[str, Any]]] = defaultdict(list)
    while True:
        batch = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not batch:
            return by_execution
        for message in batch:
            by_execution[attributes(message)["EXECUTION_ARN"]].append(message)
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def _ledger(engine: LocalEngine) -> dict[str, dict[str, Any]]:
    paginator = engine.client("dynamodb").get_paginator("scan")
    rows: dict[str, dict[str, Any]] = {}
    for page in paginator.paginate(TableName=engine.ref("LedgerTable")):
        for item in page["Items"]:
            row = {name: next(iter(value.values())) for name, value in item.items()}
            rows[row["pk"]] = row
    return rows


def _problems(
    hostile: Hostile,
    result: Any,
    dead: dict[str, list[dict[str, Any]]],
    rows: dict[str, dict[str, Any]],
) -> list[str]:
    """What is wrong with one input's outcome; empty when all is as its end state says."""
    if result.status not in ("SUCCEEDED", "FAILED"):
        return [f"ended {result.status}"]
    end = result.outcome if result.states_entered else "(none)"
    named = SUCCEED if result.status == "SUCCEEDED" else FAIL
    if end not in named:
        return [f"{result.status} in {end} ({result.error}: {str(result.cause)[:200]})"]
    problems = []
    if result.status == "FAILED" and result.event_types()[-2] != "FailStateEntered":
        problems.append(f"failed inside {end}, not in a Fail state")
    if hostile.must_be_invalid and end != "InvalidEvent":
        problems.append(f"ended {end}, expected InvalidEvent")
    messages = dead.get(result.arn, [])
    expected = 1 if end in DEAD_LETTERING else 0
    if len(messages) != expected:
        problems.append(f"{end} with {len(messages)} DLQ messages")
    owned = [pk for pk, row in rows.items() if row.get("lock_owner") == result.arn]
    if end in ("InvalidEvent", "Ignored") and owned:
        problems.append(f"{end} left rows {owned}")
    if end == "Processed":
        row = rows.get(result.output["idempotencyKey"], {})
        if row.get("status") != "PROCESSED" or row.get("lock_owner") != result.arn:
            problems.append(f"Processed but the row is {row.get('status')}")
    if end == "DeadLettered":
        (message,) = messages or [{}]
        key = message.get("MessageAttributes", {}).get("IDEMPOTENCY_KEY", {})
        pk = key.get("StringValue", "")
        if key.get("DataType") == "String.urlencoded":  # a key with characters SQS refuses
            pk = unquote(pk)
        row = rows.get(pk, {})
        if row.get("status") != "FAILED" or "dead_lettered_at" not in row:
            problems.append(f"DeadLettered but the row is {row}")
    if end == "Duplicate" and result.output["idempotencyKey"] not in rows:
        problems.append("Duplicate of a key that has no row")
    return problems


@pytest.fixture(params=["default", "keyed"])
def hostile_engine(request: pytest.FixtureRequest) -> Iterator[tuple[LocalEngine, int]]:
    """Keys from message and event ids, or from orderId (IdempotencyKeyPath, CustomEventKeyPath)."""
    parameters = (
        {"IdempotencyKeyPath": "orderId", "CustomEventKeyPath": "orderId"}
        if request.param == "keyed"
        else {}
    )
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as local:
        # Each stack takes every other input: the whole corpus runs once, on both key settings.
        yield local, 0 if request.param == "default" else 1


@pytest.mark.slow
def test_every_hostile_input_ends_in_a_named_end_state(
    hostile_engine: tuple[LocalEngine, int],
) -> None:
    # GIVEN the corpus, and the objects its sample events name (so some inputs are real work)
    engine, half = hostile_engine
    bucket = engine.ref("IngestBucket")
    for key in ("uploads/dog.jpg", "uploads/cat.png", "uploads/photo 1+2.jpg"):
        engine.client("s3").put_object(Bucket=bucket, Key=key, Body=png_bytes())
    everything = corpus(bucket)
    assert len(everything) >= 1000
    inputs = everything[half::2]
    # WHEN every input is delivered (Step Functions refuses an input over 256 KiB at
    # StartExecution, before anything runs: a clear error, and nothing to lose)
    results = []
    refused = 0
    for hostile in inputs:
        try:
            results.append((hostile, engine.execute(MACHINE, hostile.event)))
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ValidationException", exc
            assert len(json.dumps(hostile.event).encode()) > 262144, exc
            refused += 1
    # THEN each ended in a named end state, with the row and DLQ message that state promises
    dead = _drain_dlq(engine)
    rows = _ledger(engine)
    report: Counter[str] = Counter()
    failures = []
    for hostile, result in results:
        report[result.outcome if result.states_entered else result.status] += 1
        for problem in _problems(hostile, result, dead, rows):
            failures.append(f"{hostile.kind}: {problem}: {json.dumps(hostile.event)[:160]}")
    report["refused by StartExecution"] = refused
    sys.stdout.write(f"hostile corpus: {len(inputs)} inputs, {dict(sorted(report.items()))}\n")
    assert failures == [], f"{len(failures)} inputs outside a named end state:\n" + "\n".join(
        failures[:40]
    )
    # AND the corpus reached every kind of outcome it is meant to provoke
    assert {"Processed", "InvalidEvent", "DeadLettered", "Duplicate"} <= set(report)
