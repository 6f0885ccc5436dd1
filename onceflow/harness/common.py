"""What the harnesses share: the injected error, the objects they upload and the events
that announce them, a progress bar, and the witnesses they judge by (the DLQ, S3's
request log).

Imports nothing heavy (the engine is a type here only): the command line reads the
demo's parameters from here before it knows whether it will start an engine.
"""

from __future__ import annotations

import hashlib
import io
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote_plus, unquote

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine
    from onceflow.view.units import Unit


class TransientError(Exception):
    """Injected by a harness; the state machine retries it by this name."""


def demo_parameters(source: str) -> dict[str, str]:
    """The template parameters the demo runs with."""
    # The audit judges every object: the demo's are all seconds old.
    parameters = {"AuditRecentCutoffHours": "0"}
    if source == "sqs":
        parameters["SqsSource"] = "create"
    return parameters


@dataclass
class DemoObject:
    """One uploaded object and what the harness did with it."""

    key: str
    version_id: str
    processable: bool
    deliveries: int = 0
    concurrent_duplicate: bool = False
    inject_transient: bool = False

    def idempotency_key(self, bucket: str) -> str:
        return f"s3://{bucket}/{self.key}#{self.version_id}"


class Progress:
    """A one-line progress bar on a stream (stderr), redrawn in place on a terminal."""

    def __init__(self, total: int, label: str, stream: TextIO | None) -> None:
        self.total, self.label, self.stream = total, label, stream
        self.done = 0
        self._lock = threading.Lock()
        self._last_draw = 0.0

    def advance(self) -> None:
        with self._lock:
            self.done += 1
            now = time.monotonic()
            if self.done == self.total or now - self._last_draw > 0.1:
                self._last_draw = now
                self._draw()

    def _draw(self) -> None:
        if self.stream is None:
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if self.done == self.total else ""
        if self.stream.isatty():
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}{end}")
        elif self.done == self.total:
            self.stream.write(f"{self.label} [{bar}] {self.done}/{self.total}\n")
        self.stream.flush()


def small_png(rng: random.Random) -> bytes:
    """A small PNG of random size and colour: an upload the bundled processor takes."""
    from PIL import Image  # here, not at the top: the command line imports this module

    out = io.BytesIO()
    size = (rng.randint(16, 96), rng.randint(16, 96))
    Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), 0)).save(out, format="PNG")
    return out.getvalue()


def s3_notification(bucket: str, obj: DemoObject, size: int) -> dict[str, Any]:
    """A classic S3 event notification, as S3 sends it to an SQS queue (key URL-encoded)."""
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": "us-east-1",
                "eventTime": "2026-11-21T10:00:00.000Z",
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                    "object": {
                        "key": quote_plus(obj.key, safe="/"),
                        "size": size,
                        "versionId": obj.version_id,
                        "sequencer": hashlib.sha256(obj.version_id.encode()).hexdigest()[:18],
                    },
                },
            }
        ]
    }


def s3_event(
    bucket: str,
    key: str,
    size: int,
    *,
    version_id: str = "",
    sequencer: str = "",
    etag: str = "",
    copy: int = 1,
) -> dict[str, Any]:
    """S3's Object Created event on the default bus, as EventBridge delivers it (see
    events/s3-object-created.json): the key URL-encoded; no version-id for an unversioned
    bucket, whose uploads S3 tells apart by the sequencer (derived from the upload when not
    given). `copy` numbers the events S3 sent for one upload: each has an id of its own.
    A harness that does not know the upload's etag leaves it out."""
    upload = f"{bucket}/{key}#{version_id or sequencer}"
    obj: dict[str, Any] = {"key": quote_plus(key, safe="/"), "size": size}
    if etag:
        obj["etag"] = etag
    if version_id:
        obj["version-id"] = version_id
    obj["sequencer"] = sequencer or hashlib.sha256(upload.encode()).hexdigest()[:18].upper()
    return {
        "version": "0",
        "id": hashlib.sha256(f"{upload}#{copy}".encode()).hexdigest(),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-21T10:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": obj,
            "request-id": "C3D13FE58DE4C810",
            "requester": "123456789012",
            "source-ip-address": "127.0.0.1",
            "reason": "PutObject",
        },
    }


def processed_twice(ran: Iterable[Unit]) -> list[str]:
    """Idempotency keys that more than one message (unit of work: an execution, or one
    message of a batch) ended Processed for: the ledger let two deliveries do the work."""
    processed = Counter(unit.key for unit in ran if unit.end_state == "Processed")
    return sorted(str(key) for key, count in processed.items() if count > 1)


def drain(
    engine: LocalEngine, queue_url: str, keys: set[str] | None = None
) -> list[dict[str, Any]]:
    """Read the DLQ's messages about these keys (all, for None); leave every one in place.

    Each message received is made visible again afterwards: reading the DLQ
    must not hide a dead letter from whoever looks next (redrive, the user).
    """
    sqs = engine.client("sqs")
    messages: list[dict[str, Any]] = []
    handles: list[str] = []
    while True:
        batch = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["SentTimestamp"],  # (the order the messages were sent in)
        ).get("Messages", [])
        if not batch:
            break
        for message in batch:
            handles.append(message["ReceiptHandle"])
            key = message.get("MessageAttributes", {}).get("IDEMPOTENCY_KEY", {})
            if keys is None or key.get("StringValue") in keys:
                messages.append(message)
    for handle in handles:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
    return messages


def effects_by_idempotency_key(engine: LocalEngine, output_bucket: str) -> Counter[str]:
    """Count the writes that created an output, attributed through its metadata.

    S3's request log, not the ledger, is the witness: a second successful
    PutObject of one output would show here even if the ledger said otherwise.
    """
    s3 = engine.client("s3")
    created = engine.successful_puts(output_bucket)
    effects: Counter[str] = Counter()
    for key, count in created.items():
        if key.startswith(("reports/", "inventory/")):
            continue  # the audit's reports and S3 Inventory's, not effects of the work
        metadata = s3.head_object(Bucket=output_bucket, Key=key)["Metadata"]
        effects[unquote(metadata["idempotency-key"])] += count
    return effects


class AuditsDuring:
    """``count`` audits started while the deliveries run, spread over them: audit k (1..n)
    starts, in a thread of its own, once k/(n+1) of the ``expected`` deliveries are done
    (the harness calls ``advance`` as each ends). Each runs ``audit(number)`` (the
    harness's ops.run_audit of the stack) and is recorded with how many deliveries had
    ended when it started and when it ended, and how many deliveries' executions ran
    while it ran (``ran``: each delivery's execution's span): proof that it ran while
    they did.

    ``reserved`` of them are not spread but left for the harness to start at a moment of
    its own (``start_reserved``: the batch mode's first pass of redeliveries). An audit
    whose moment never came (fewer deliveries than expected, no such moment) is started by
    ``finish``, after the deliveries, and says so (``during`` False): the harness's tests
    catch a run that degraded to audits after the deliveries."""

    def __init__(
        self,
        count: int,
        expected: int,
        audit: Callable[[int], dict[str, Any]],
        reserved: int = 0,
    ) -> None:
        self.count, self.expected, self._audit = count, max(expected, 1), audit
        self.reserved = min(reserved, count)
        self.done = 0
        self.records: list[dict[str, Any]] = []
        self._threads: list[threading.Thread] = []
        self._spread_started = 0
        self._spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def advance(self, deliveries: int = 1, span: tuple[float, float] | None = None) -> None:
        """``deliveries`` more deliveries ended (``span``: when their execution started
        and ended, epoch seconds): start the audits whose moment came."""
        if not self.count:
            return
        spread = self.count - self.reserved
        with self._lock:
            self.done += deliveries
            if span is not None:
                self._spans.append(span)
            while (
                self._spread_started < spread
                and self.done * (spread + 1) >= (self._spread_started + 1) * self.expected
            ):
                self._spread_started += 1
                self._start(during=True)

    def start_reserved(self) -> None:
        """Start one of the reserved audits now, while the deliveries go on."""
        with self._lock:
            if len(self.records) < self.count and (
                self.reserved > len(self.records) - self._spread_started
            ):
                self._start(during=True)

    def _start(self, during: bool) -> None:
        record: dict[str, Any] = {
            "number": len(self.records) + 1,
            "during": during,
            "deliveries_ended_at_start": self.done,
        }
        self.records.append(record)
        thread = threading.Thread(
            target=self._run, args=(record,), name=f"audit-during-{record['number']}"
        )
        self._threads.append(thread)
        thread.start()

    def _run(self, record: dict[str, Any]) -> None:
        started = time.time()
        try:
            record["report"] = self._audit(int(record["number"]))
        except Exception as exc:  # recorded: the checker names it a violation
            record["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        with self._lock:
            record["deliveries_ended_at_end"] = self.done
            record["span"] = (started, time.time())

    def finish(self) -> list[dict[str, Any]]:
        """Start the audits whose moment never came (after the deliveries), wait for every
        one; their records, in order."""
        with self._lock:
            while len(self.records) < self.count:
                self._start(during=False)
        for thread in self._threads:
            thread.join()
        for record in self.records:
            record["deliveries"] = self.done
            start, end = record.pop("span")
            record["deliveries_ran_alongside"] = sum(s < end and e > start for s, e in self._spans)
        return self.records


def execution_span(result: Any) -> tuple[float, float] | None:
    """When an execution (its history) started and ended, epoch seconds."""
    events = getattr(result, "events", None) or []
    moments = [e["timestamp"] for e in events if hasattr(e.get("timestamp"), "timestamp")]
    if not moments:
        return None
    return min(moments).timestamp(), max(moments).timestamp()


def during_record(record: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """An audit-during's record as a report shows it: when it ran, and its counts."""
    shown: dict[str, Any] = {
        k: record[k]
        for k in (
            "number", "during", "deliveries_ended_at_start", "deliveries_ended_at_end",
            "deliveries", "deliveries_ran_alongside",
        )
        if k in record
    }  # fmt: skip
    if "error" in record:
        return {**shown, "error": record["error"]}
    report = record.get("report") or {}
    return {**shown, **{k: report.get(k, 0) for k in keys}}


def render_during(records: list[dict[str, Any]]) -> list[str]:
    """One line an audit run during the deliveries."""
    lines = []
    for r in records:
        when = (
            f"started after {r['deliveries_ended_at_start']}/{r['deliveries']} deliveries, "
            f"ended after {r.get('deliveries_ended_at_end')}, "
            f"{r.get('deliveries_ran_alongside')} delivery executions ran alongside"
            + ("" if r["during"] else " (AFTER the deliveries)")
        )
        counts = r.get("error") or ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in r.items()
            if k not in ("number", "during", "deliveries_ended_at_start",
                         "deliveries_ended_at_end", "deliveries", "deliveries_ran_alongside")
        )  # fmt: skip
        lines.append(f"  audit during {r['number']}    {when}: {counts}")
    return lines
