"""Shared test helpers: sample events from events/, uploads, ledger and DLQ reads."""

from __future__ import annotations

import copy
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

from PIL import Image

from onceflow.local.engine import LocalEngine

EVENTS = Path(__file__).resolve().parent.parent / "events"
MACHINE = "ProcessorStateMachine"
FUNCTION = "ProcessorFunction"


def load_event(name: str) -> Any:
    """A sample event: an object, or (from the pipe) an array of SQS messages."""
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


def png_bytes(width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def upload(engine: LocalEngine, key: str, body: bytes | None = None) -> str:
    response = engine.client("s3").put_object(
        Bucket=engine.ref("IngestBucket"), Key=key, Body=png_bytes() if body is None else body
    )
    return str(response["VersionId"])


def s3_event(engine: LocalEngine, key: str, version_id: str) -> dict[str, Any]:
    """events/s3-object-created.json, pointed at an object of the local stack."""
    event: dict[str, Any] = copy.deepcopy(load_event("s3-object-created.json"))
    event["detail"]["bucket"]["name"] = engine.ref("IngestBucket")
    event["detail"]["object"]["key"] = key
    event["detail"]["object"]["version-id"] = version_id
    return event


def idempotency_key(engine: LocalEngine, key: str, version_id: str) -> str:
    return f"s3://{engine.ref('IngestBucket')}/{key}#{version_id}"


def ledger_row(engine: LocalEngine, pk: str) -> dict[str, Any] | None:
    item = (
        engine.client("dynamodb")
        .get_item(TableName=engine.ref("LedgerTable"), Key={"pk": {"S": pk}}, ConsistentRead=True)
        .get("Item")
    )
    if item is None:
        return None
    return {name: next(iter(value.values())) for name, value in item.items()}


def ledger_rows(engine: LocalEngine) -> list[dict[str, Any]]:
    items = engine.client("dynamodb").scan(TableName=engine.ref("LedgerTable"))["Items"]
    return [{n: next(iter(v.values())) for n, v in item.items()} for item in items]


def dlq_messages(engine: LocalEngine) -> list[dict[str, Any]]:
    """Every message in the DLQ, left in place (visibility timeout 0)."""
    sqs = engine.client("sqs")
    url = engine.ref("DeadLetterQueue")
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(5):
        batch = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=0,
        ).get("Messages", [])
        for message in batch:
            seen[message["MessageId"]] = message
        if not batch:
            break
    return list(seen.values())


def drain_dlq(engine: LocalEngine) -> None:
    """Delete every message in the DLQ: a module's engine, shared by tests that each
    refuse one input, starts each test with an empty DLQ (and asserts its one message)."""
    sqs = engine.client("sqs")
    url = engine.ref("DeadLetterQueue")
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert dlq_messages(engine) == []


def attributes(message: dict[str, Any]) -> dict[str, str]:
    return {k: v["StringValue"] for k, v in message["MessageAttributes"].items()}


def output_effects(engine: LocalEngine) -> int:
    """Successful PutObjects of outputs (not the audit's reports or the bucket's inventory
    reports): writes that took effect."""
    puts = engine.successful_puts(engine.ref("OutputBucket"))
    return sum(n for key, n in puts.items() if not key.startswith(("reports/", "inventory/")))


def invocations(engine: LocalEngine) -> int:
    return len(engine.runtime.invocations)


class TransientError(Exception):
    """Raised by injected processors; the state machine retries it by name."""


class PermanentError(Exception):
    """Raised by injected processors; the state machine dead-letters it by name."""


class Gate:
    """Blocks an injected processor until the test lets it go (with a deadline)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def wait_entered(self, timeout: float = 30) -> None:
        assert self.entered.wait(timeout), "the processor was never entered"

    def hold(self, timeout: float = 30) -> None:
        self.entered.set()
        assert self.release.wait(timeout), "the test never released the processor"


AUDIT = "AuditStateMachine"


def audit_engine(**parameters: str) -> LocalEngine:
    """A local engine whose audit judges objects of any age (the demo's setting)."""
    return LocalEngine(
        parameters={"AuditRecentCutoffHours": "0", **parameters},
        function_log=io.StringIO(),
        time_scale=0.0,
    )


def with_constants(engine: LocalEngine, **constants: str) -> LocalEngine:
    """The engine's template with some of its constants changed, as a user changes them: in
    template.yaml's Mappings (docs/operate.md, Constants; once parameters). Before start."""
    values = engine.stack.template["Mappings"]["Constants"]["Values"]
    unknown = set(constants) - set(values)
    assert not unknown, f"no such constants: {sorted(unknown)}"
    values.update(constants)
    return engine


def age_object(engine: LocalEngine, key: str, days: float) -> None:
    """Make every version of an object `days` old, as if uploaded then (moto's clock)."""
    from datetime import timedelta

    from moto.core.utils import utcnow
    from moto.s3.models import s3_backends

    from onceflow.local.engine import ACCOUNT_ID

    bucket = s3_backends[ACCOUNT_ID]["aws"].buckets[engine.ref("IngestBucket")]
    versions = bucket.keys.getlist(key)
    assert versions, f"no object {key}"
    for version in versions:
        version.last_modified = utcnow() - timedelta(days=days)


def expire_lock(engine: LocalEngine, pk: str, seconds_ago: int = 3600) -> None:
    """Move a row's lock expiry into the past: the time a stuck lock takes to expire."""
    engine.client("dynamodb").update_item(
        TableName=engine.ref("LedgerTable"),
        Key={"pk": {"S": pk}},
        UpdateExpression="SET lock_expires_at = :t",
        ExpressionAttributeValues={":t": {"N": str(int(time.time()) - seconds_ago)}},
    )


def forget_watermark(engine: LocalEngine) -> None:
    """Delete the audit's watermark, so that the next run judges its whole window again.

    Tests make time pass by dating uploads back (age_object), not by moving the
    clock; the watermark a run leaves is a moment, which that travel does not move.
    A test that dates uploads back between two audits, or wants a second audit to
    judge again what the first judged (as a run after a failed one does), forgets it.
    """
    engine.client("s3").delete_object(
        Bucket=engine.ref("OutputBucket"), Key="reports/audit/watermark.json"
    )


def run_audit(engine: LocalEngine, *hung: str) -> Any:
    """Run the audit state machine, then wait for the executions it started.

    ``hung``: executions the test holds on purpose (not waited for).
    """
    result = engine.execute(AUDIT, {})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    engine.wait_for_running(MACHINE, ignore=hung)
    return result


def out_of_time(engine: LocalEngine, payload: dict[str, Any], result: Any) -> Any:
    """A batch's processor call that did its work, then ran past the batch's five minutes:
    the whole EXPRESS batch execution times out (an EXPRESS execution cannot be stopped;
    AWS's States.ALL catches a result over 256 KiB, so that would not end it)."""
    engine.run_out_of_time(str(payload["lockToken"]).split("#", 1)[0])
    return result


def dies_at_its_dead_letter_mark(engine: LocalEngine, died: list[str], times: int) -> Any:
    """A fault for engine.state.faults: MarkDeadLettered's write, the first ``times`` times,
    runs its batch out of its five minutes there (as when another message's call hangs),
    after its DLQ send: the send-then-mark gap (docs/design.md). Each dying lock owner is
    appended to ``died``."""
    from onceflow.local import patches

    def fault(service: str, operation: str, text: str) -> Any:
        if (service, operation) != ("dynamodb", "UpdateItem") or len(died) == times:
            return None
        request = json.loads(text)
        if "dead_lettered_at = :now_ms" not in request.get("UpdateExpression", ""):
            return None
        owner = request["ExpressionAttributeValues"][":owner"]["S"]
        died.append(owner)
        engine.run_out_of_time(owner.split("#", 1)[0])
        return patches.dynamodb_error("InternalServerError", "injected: out of time")

    return fault
