"""The audit's decisions, free of AWS: what a listed object or a ledger row needs.

The ledger rules it relies on (service/model.py draws a row's life):
- a row whose ``expires_at`` has passed counts as absent (Claim overwrites it);
- a dead-lettered row, or a FAILED row at MaxAttempts, is never reclaimed;
- a FAILED row below MaxAttempts is reclaimed by the next delivery of its key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard
from urllib.parse import unquote_plus

from service.logic.s3objects import NULL_VERSION, plain_etag
from service.model import LedgerRow, Status, WorkItem

# Every count the audit reports, in report order.
COUNT_KEYS = (
    "scanned",
    "skipped_recent",
    "skipped_old",
    "skipped_audited",
    "ok",
    "in_progress",
    "missing_resubmitted",
    "failed_resubmitted",
    "dead_lettered_skipped",
    "superseded_skipped",
    "stuck_released",
    "stuck_dead_lettered",
    "stuck_left_alone",
    "failed_dead_lettered",
    "resubmit_errors",
    "resubmit_refused",
    "resubmit_deferred",
    "sweep_deferred",
    "failed_batches",
    "unaudited_objects",
    "unreadable_rows",
    "reindexed",
)
# How many resubmitted keys a report names (the counts are always complete),
# and how many characters of keys one walk carries in the state (keys can be
# 1 KB each; a Map of many prefix walks must stay under the 256 KiB state limit).
SAMPLE_LIMIT = 50
SAMPLE_CHARACTERS = 2048
# The source of the work items the audit sends (the ledger row records it at Claim).
AUDIT_SOURCE = "audit"
# An upload an earlier successful audit judged is not judged again; the earlier audit's
# reach is trusted only up to this much before its end (its watermark). A multipart
# upload's LastModified is when it began (not verified: S3's object metadata page), so
# an upload completed after an audit may carry a time before that audit's reach: one
# that took longer than the recent cutoff plus this margin is not found again. The
# margin costs a day of uploads' ledger reads a run (docs/audit.md, "The watermark").
WATERMARK_MARGIN_SECONDS = 24 * 3600
# A stored watermark may be this far ahead of the reader's clock (Lambda hosts' clocks
# differ by far less); beyond it the watermark was not written by an audit.
WATERMARK_FUTURE_SECONDS = 300

Counts = dict[str, int]


def empty_counts() -> Counts:
    return dict.fromkeys(COUNT_KEYS, 0)


def add_counts(*parts: dict[str, Any]) -> Counts:
    """Sum count dicts, ignoring keys that are not counts (a report's samples)."""
    total = empty_counts()
    for part in parts:
        for key in COUNT_KEYS:
            total[key] += int(part.get(key, 0) or 0)
    return total


@dataclass(frozen=True)
class ListedObject:
    """One object version as a bucket listing shows it."""

    key: str
    version_id: str
    last_modified: float  # epoch seconds
    etag: str
    size: int
    latest: bool = True  # the key's current version (a listing without versions: always)


@dataclass(frozen=True)
class AuditWindow:
    """Which objects the audit may judge, as of the moment the audit started."""

    now: float  # epoch seconds
    recent_cutoff_seconds: float
    retention_seconds: float
    max_attempts: int
    # How late a source may still deliver an event: the rules' MaximumEventAgeInSeconds,
    # or what an SQS source queue and its DLQ can hold. An upload without a version id
    # is resubmitted under a key of its own; its event arriving after that would be
    # processed under another: the audit waits it out.
    late_event_seconds: float = 0.0
    # What earlier successful audits judged, contiguously: uploads with a version id
    # modified up to ``versioned_until``, without one up to ``unversioned_until`` (epoch
    # seconds; None before the first). Those, less WATERMARK_MARGIN_SECONDS, are skipped.
    versioned_until: float | None = None
    unversioned_until: float | None = None

    def judged_until(self, unversioned: bool) -> float:
        """How recent an upload this run judges, of one kind: its cutoff ago."""
        cutoff = self.recent_cutoff_seconds
        if unversioned:
            cutoff = max(cutoff, self.late_event_seconds)
        return self.now - cutoff


@dataclass(frozen=True)
class Watermark:
    """How far successful audits have judged the bucket, as one contiguous stretch
    (epoch milliseconds, 0 for "not yet"): every upload modified up to the time, of its
    kind (with a version id, or without one: those wait longer), was judged by one."""

    versioned_until_ms: int = 0
    unversioned_until_ms: int = 0

    def advanced(self, other: Watermark) -> Watermark:
        """The later of two: a run's reach starts at or before the watermark it read
        (less the margin), so its stretch joins the stored one and the union ends at the
        later end (a run that read an older watermark only judged some uploads twice)."""
        return Watermark(
            max(self.versioned_until_ms, other.versioned_until_ms),
            max(self.unversioned_until_ms, other.unversioned_until_ms),
        )

    def as_json(self) -> dict[str, int]:
        return {
            "versionedUntil": self.versioned_until_ms,
            "unversionedUntil": self.unversioned_until_ms,
        }

    @classmethod
    def from_json(cls, value: Any) -> Watermark:
        """A handed-on watermark (the plan's, in a state); anything else is "not yet" (judge
        the window). A stored one is read with ``parse``, which says what is wrong with it."""
        if not isinstance(value, dict):
            return cls()

        def number(name: str) -> int:
            item = value.get(name)
            return int(item) if _time_ms(item) and item > 0 else 0

        return cls(number("versionedUntil"), number("unversionedUntil"))

    @classmethod
    def parse(cls, value: Any, now_ms: float) -> tuple[Watermark, str | None]:
        """A watermark as stored (JSON, already decoded), and what is wrong with it (None:
        nothing). One that is not exactly what ``as_json`` writes (an object of two
        times in epoch ms, 0 for "not yet"), or that reaches past ``now_ms`` (plus
        WATERMARK_FUTURE_SECONDS for clocks), is "not yet": the run judges its whole
        window. Every audit writes its reach at or before its own start, so a time
        after now was never written by one; trusting it would skip every upload up to
        it, and trusting a garbled one could skip anything."""
        if not isinstance(value, dict):
            return cls(), f"not a JSON object but {type(value).__name__}"
        names = ("versionedUntil", "unversionedUntil")
        if set(value) != set(names):
            return cls(), f"its fields are {sorted(value)}, not {list(names)}"
        latest = now_ms + WATERMARK_FUTURE_SECONDS * 1000
        for name in names:
            item = value[name]
            if not _time_ms(item) or item < 0:
                return cls(), f"{name} is {str(item)[:40]!r}, not a time in epoch milliseconds"
            if item > latest:
                return cls(), f"{name} {item} is in the future (now {int(now_ms)})"
        return cls(int(value[names[0]]), int(value[names[1]])), None


def _time_ms(item: Any) -> TypeGuard[int | float]:
    """Whether a JSON value can be a time in epoch milliseconds: a finite number (not a
    boolean, not 1e400, which JSON reads as infinity), within what datetime holds."""
    return (
        isinstance(item, int | float)
        and not isinstance(item, bool)
        and math.isfinite(item)
        and abs(item) < 253_402_300_800_000  # 10000-01-01
    )


def reached(window: AuditWindow, seen_at: float) -> Watermark:
    """What a run judged that walked every object of the bucket as of ``seen_at`` (the
    listing: the run's start; an inventory report: when S3 began to scan the bucket):
    each kind up to its cutoff, and nothing modified after the objects were seen."""
    return Watermark(
        round(min(window.judged_until(False), seen_at) * 1000),
        round(min(window.judged_until(True), seen_at) * 1000),
    )


def earliest_judged(window: AuditWindow) -> float:
    """The oldest LastModified (epoch seconds) a run may judge, of either kind: uploads
    modified before it are older than the retention or behind the watermark."""
    oldest = window.now - window.retention_seconds
    marks = (window.versioned_until, window.unversioned_until)
    if any(mark is None for mark in marks):
        return oldest
    return max(oldest, min(m for m in marks if m is not None) - WATERMARK_MARGIN_SECONDS)


def idempotency_key(bucket: str, obj: ListedObject) -> str:
    """The key the audit resubmits a listed upload under.

    A version is the key the processor derives for its Object Created event.
    An upload without one (version "null") was keyed on its event's sequencer,
    which no listing shows: the audit finds such rows by content instead (see
    content_row) and, when none has it, names the upload by its ETag and
    last-modified time. That is the same for one upload in every audit, so
    two audits cannot start it under two keys; a new upload of the key,
    even of the same bytes, gets a new last-modified time.
    """
    if obj.version_id == NULL_VERSION:
        last_modified_ms = round(obj.last_modified * 1000)
        return f"s3://{bucket}/{obj.key}#etag:{plain_etag(obj.etag)}:{last_modified_ms}"
    return f"s3://{bucket}/{obj.key}#{obj.version_id}"


def age_verdict(obj: ListedObject, window: AuditWindow) -> str | None:
    """The verdict on an upload the audit may not judge by its age, or None."""
    age = window.now - obj.last_modified
    cutoff = window.recent_cutoff_seconds
    if obj.version_id == NULL_VERSION:
        cutoff = max(cutoff, window.late_event_seconds)
    if age < cutoff:
        return "skipped_recent"  # its events may still be on their way
    if age > window.retention_seconds:
        return "skipped_old"  # its row has expired: resubmitting could process it twice
    until = window.unversioned_until if obj.version_id == NULL_VERSION else window.versioned_until
    if until is not None and obj.last_modified < until - WATERMARK_MARGIN_SECONDS:
        return "skipped_audited"  # an earlier successful audit judged it
    return None


def content_row(rows: list[LedgerRow], window: AuditWindow) -> LedgerRow | None:
    """Of the rows with an unversioned object's current ETag, the one that stands for it.

    A superseded row does not count: its content was replaced before it was
    processed, so the same bytes in the key again are a later upload. Nor
    does an expired row (Claim overwrites it). Of the rest the most settled
    wins: processed, in progress, failed but retryable, dead-lettered.
    """

    def rank(row: LedgerRow) -> int:
        if row.status == Status.PROCESSED:
            return 0
        if row.status == Status.PROCESSING:
            return 1
        if row.dead_lettered or row.attempts >= window.max_attempts:
            return 3
        return 2

    live = [row for row in rows if row.superseded_at is None and row.expires_at >= window.now]
    return min(live, key=lambda row: (rank(row), row.pk), default=None)


def classify(obj: ListedObject, row: LedgerRow | None, window: AuditWindow) -> str:
    """Name the count one listed object version falls into.

    ``row`` is the upload's row: for a version, the row of its key; for an
    unversioned upload, its content_row. ``missing_resubmitted`` and
    ``failed_resubmitted`` are the two that the caller resubmits; every other
    verdict leaves the object alone.
    """
    skipped = age_verdict(obj, window)
    if skipped is not None:
        return skipped
    if obj.version_id == NULL_VERSION and not obj.latest:
        # Versioning was switched back on and this upload is no longer the key's
        # current content: the processor reads only that (it cannot name this
        # upload by a version), so a resubmission could only end Superseded.
        return "superseded_skipped"
    if row is None or row.expires_at < window.now:
        return "missing_resubmitted"
    if row.status == Status.PROCESSED:
        return "ok"
    if row.status == Status.PROCESSING:
        return "in_progress"  # live, or stuck: the lock sweep decides
    if row.dead_lettered or row.attempts >= window.max_attempts:
        return "dead_lettered_skipped"
    return "failed_resubmitted"


def object_work_item(
    bucket: str, obj: ListedObject, idempotency_key_: str | None = None
) -> dict[str, WorkItem]:
    """The direct work item the audit sends for an object (keys are not URL-encoded)."""
    item: WorkItem = {
        "source": AUDIT_SOURCE,
        "idempotencyKey": idempotency_key_ or idempotency_key(bucket, obj),
        "bucket": bucket,
        "key": obj.key,
        "versionId": obj.version_id,
        "etag": obj.etag,
        "size": obj.size,
    }
    return {"workItem": item}


def row_work_item(row: LedgerRow) -> dict[str, WorkItem] | None:
    """A direct work item rebuilt from an object's ledger row; None for messages and events."""
    if not row.bucket or not row.object_key:
        return None
    item: WorkItem = {
        "source": AUDIT_SOURCE,
        "idempotencyKey": row.pk,
        "bucket": row.bucket,
        "key": row.object_key,
    }
    # What Claim copied from the object's work item (WORK_ITEM_COPIES), as it was.
    if row.version_id is not None:
        item["versionId"] = row.version_id
    if row.sequencer is not None:
        item["sequencer"] = row.sequencer
    if row.etag is not None:
        item["etag"] = row.etag
    if row.size is not None:
        item["size"] = row.size
    return {"workItem": item}


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def execution_name(arn: str) -> str:
    """The name of the execution a claim (its ARN) names, in either form AWS writes:
    ``...:execution:<machine>:<name>`` (STANDARD), ``...:express:<machine>:<name>:<id>``
    (EXPRESS: LocalStack's recording test_sfn_api_express.snapshot.json); a bare name is
    itself."""
    parts = arn.split(":")
    return parts[7] if len(parts) >= 8 and parts[0] == "arn" else parts[-1]


def claimed_under(name: str, claims: Iterable[str]) -> bool:
    """Whether an execution of this name claimed the row (its claims, execution ARNs in
    either form): the name ran, and whatever it did stands. Under EXPRESS this is the only
    record of it (no DescribeExecution, and StartExecution starts the name again); a start
    of the name that never claimed the row (it ended a Duplicate, or has not reached Claim
    yet) is not in it, and a second one is refused by the ledger, not here."""
    return any(execution_name(claim) == name for claim in claims)


def resubmission_name(kind: str, audit_id: str, idempotency_key_: str) -> str:
    """A deterministic execution name: a retried page starts nothing twice.

    A STANDARD processor refuses a second execution of one name (ExecutionAlreadyExists:
    StartExecution "is idempotent for STANDARD workflows", API_StartExecution.html); an
    EXPRESS one runs it again ("Starting multiple workflows with the same name results in
    concurrent executions", express-at-least-once-execution.html). So the audit also
    reads the row's claims before it starts a name (claimed_under): under either type
    the same audit resubmitting the same key again is a no-op.
    """
    digest = hashlib.sha256(f"{audit_id}\n{idempotency_key_}".encode()).hexdigest()[:32]
    prefix = _NAME_UNSAFE.sub("-", f"{kind}-{audit_id}")[:40]
    return f"{prefix}-{digest}"


# The largest event a DLQ message carries whole, in UTF-8 bytes (the processor's own bound:
# Claim accepts no larger input); a larger one travels as an excerpt, as SendToDLQ's.
DEAD_LETTER_EVENT_BYTES = 122_880
EXCERPT_CHARACTERS = 32_768
# ERROR_MESSAGE's length in the processor's SendToDLQ ($substring(..., 0, 1000)).
ERROR_MESSAGE_CHARACTERS = 1000


def _dead_letter_message(
    row: LedgerRow,
    original_event: Any,
    state_machine_arn: str,
    code: str,
    message: str,
    condition: str,
) -> dict[str, Any]:
    """A DLQ message for a row, in the processor's message shape: ERROR_MESSAGE cut at
    1000 characters and an event over DEAD_LETTER_EVENT_BYTES as an excerpt and its size,
    as SendToDLQ writes them, so that a row with a huge last_error or event (not the
    state machines' writing) still makes a message SQS takes, not a refusal at every
    audit."""
    work_item = row_work_item(row)
    body: dict[str, Any] = {
        "event": original_event,
        "workItem": work_item["workItem"] if work_item else None,
    }
    text = json.dumps(original_event, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > DEAD_LETTER_EVENT_BYTES:
        body = {
            **body,
            "event": None,
            "eventExcerpt": text[:EXCERPT_CHARACTERS],
            "eventBytes": size,
        }
    return {
        "body": body,
        "attributes": {
            "ERROR_CODE": code[:ERROR_MESSAGE_CHARACTERS],
            "ERROR_MESSAGE": message[:ERROR_MESSAGE_CHARACTERS],
            "EXHAUSTED_RETRY_CONDITION": condition,
            "RETRY_ATTEMPTS": str(row.attempts),
            "STATE_MACHINE_ARN": state_machine_arn,
            "EXECUTION_ARN": row.lock_owner or "",
            "IDEMPOTENCY_KEY": row.pk,
        },
    }


def stuck_dead_letter_message(
    row: LedgerRow, original_event: Any, state_machine_arn: str
) -> dict[str, Any]:
    """The DLQ message for a stuck row at MaxAttempts, in the processor's message shape."""
    owner = row.lock_owner if row.lock_owner is not None else "an unknown execution"
    message = (
        f"LockExpired: the lock of {owner} expired with "
        f"the work unfinished, after {row.attempts} attempt(s)"
    )
    return _dead_letter_message(
        row, original_event, state_machine_arn, "LockExpired", message, "MaximumRetryAttempts"
    )


def refused_dead_letter_message(
    row: LedgerRow,
    execution_input: Any,
    state_machine_arn: str,
    code: str,
    message: str,
) -> dict[str, Any]:
    """The DLQ message for a row whose resubmission StartExecution refused (its input).

    ERROR_CODE is StartExecution's error code, the condition PermanentError (the same
    input is refused again). An input too large for the message travels as an excerpt
    and its size, as the processor's SendToDLQ writes one.
    """
    return _dead_letter_message(
        row, execution_input, state_machine_arn, code, message, "PermanentError"
    )


# What the processor writes to last_error when its DLQ message could not be sent:
# "DeadLetterFailed: <SendMessage's error>: <its cause> (dead-lettering <code>: <message>)".
_UNDELIVERED = re.compile(r"^DeadLetterFailed: .*? \(dead-lettering ([A-Za-z0-9_.-]+): ", re.S)
_LEADING_NAME = re.compile(r"^([A-Za-z0-9_.-]+):")


def failure_code(last_error: str) -> str:
    """The name of the failure a row records: for one that could not be dead-lettered,
    the failure it was being dead-lettered for (not the DLQ's refusal)."""
    undelivered = _UNDELIVERED.match(last_error)
    if undelivered:
        return undelivered.group(1)
    leading = _LEADING_NAME.match(last_error)
    return leading.group(1) if leading else "Unknown"


def failed_dead_letter_message(
    row: LedgerRow, original_event: Any, state_machine_arn: str
) -> dict[str, Any]:
    """The DLQ message for a FAILED row at MaxAttempts that has none (DeadLetterFailed).

    ERROR_CODE is the failure the row records, ERROR_MESSAGE the row's whole
    last_error; the condition is PermanentError when that failure was one.
    """
    last_error = row.last_error or ""
    code = failure_code(last_error)
    message = last_error or f"{code}: failed {row.attempts} time(s)"
    condition = "PermanentError" if code == "PermanentError" else "MaximumRetryAttempts"
    return _dead_letter_message(row, original_event, state_machine_arn, code, message, condition)


# ---- the Distributed Map's items -------------------------------------------------


def listed_item(item: dict[str, Any]) -> ListedObject:
    """A ListObjectsV2 item as the Distributed Map hands it to a batch.

    Step Functions' shape, not boto's: ``Etag`` (lower-case t), ``LastModified``
    in epoch seconds, ``Size`` (input-output-itemreader.html). A listing names no
    versions: in an unversioned bucket this is the upload itself (version "null").
    """
    return ListedObject(
        key=str(item["Key"]),
        version_id=NULL_VERSION,
        last_modified=float(item["LastModified"]),
        etag=str(item.get("Etag", "")),
        size=int(item.get("Size", 0)),
    )


def _true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def inventory_item(row: dict[str, Any], bucket: str) -> ListedObject | None:
    """An S3 Inventory CSV row (every value a string, columns from the manifest's
    fileSchema) as a listed object version; None for a delete marker or another
    bucket's row.

    Keys in an inventory report are URL-encoded (storage-inventory.html); a row
    without VersionId (an inventory of current versions, or an upload made while
    versioning was off) is the key's "null" version.
    """
    if row.get("Bucket", bucket) != bucket or _true(row.get("IsDeleteMarker", "false")):
        return None
    version = str(row.get("VersionId") or "") or NULL_VERSION
    modified = str(row["LastModifiedDate"]).replace("Z", "+00:00")
    return ListedObject(
        key=inventory_key(str(row["Key"])),
        version_id=version,
        last_modified=datetime.fromisoformat(modified).timestamp(),
        etag=str(row.get("ETag", "")),
        size=int(row.get("Size") or 0),
        latest=_true(row.get("IsLatest", "true")),
    )


def inventory_key(text: str) -> str:
    """An inventory report's key, URL-encoded UTF-8 (storage-inventory.html), decoded; a
    ValueError for one that does not decode (S3's keys are UTF-8: such a row is not S3's,
    and a key read with U+FFFD in it names an object that does not exist)."""
    try:
        return unquote_plus(text, errors="strict")
    except UnicodeDecodeError as exc:
        raise ValueError(f"the key {text[:100]!r} is not URL-encoded UTF-8") from exc


def key_marker_before(first_key: str) -> str | None:
    """A ListObjectVersions KeyMarker below ``first_key``, so a listing from it reaches
    ``first_key``'s versions whether the marker itself is included or not: the key
    with its last character dropped (a proper prefix sorts first). None: from the start.
    """
    return first_key[:-1] or None


def common_prefix(first: str, last: str) -> str:
    """The characters two keys start with alike (S3 prefixes are strings, not paths)."""
    length = 0
    for a, b in zip(first, last, strict=False):
        if a != b:
            break
        length += 1
    return first[:length]


def versions_of(keys: Iterable[str], versions: Iterable[ListedObject]) -> list[ListedObject]:
    """The versions of these keys among a range listing's (which may hold other keys)."""
    wanted = set(keys)
    return [v for v in versions if v.key in wanted]


@dataclass
class Budget:
    """How fast and how long one batch may resubmit.

    ``per_second``: the batch's share of AuditResubmitsPerSecond (the rate divided by
    the children running at once), so the audit never takes more of the processor's
    StartExecution quota than that. ``deadline``: the monotonic time after which
    the batch stops resubmitting and counts the rest as deferred (an EXPRESS child
    lives at most five minutes; the next audit finds them again).
    """

    per_second: float
    deadline: float
    next_start: float = 0.0

    def wait(self, now: float) -> float | None:
        """Seconds to sleep before the next start, or None when the time is up."""
        at = max(now, self.next_start)
        if at >= self.deadline:
            return None
        self.next_start = at + 1.0 / self.per_second
        return at - now
