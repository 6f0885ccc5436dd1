"""The audit's decisions, free of AWS: what a listed object or a ledger row needs.

The ledger rules it relies on (see DESIGN.md section 3):
- a row whose ``expires_at`` has passed counts as absent (Claim overwrites it);
- a dead-lettered row, or a FAILED row at MaxAttempts, is never reclaimed;
- a FAILED row below MaxAttempts is reclaimed by the next delivery of its key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

# Every count the audit reports, in report order.
COUNT_KEYS = (
    "scanned",
    "skipped_recent",
    "skipped_old",
    "ok",
    "in_progress",
    "missing_resubmitted",
    "failed_resubmitted",
    "dead_lettered_skipped",
    "unversioned_skipped",
    "stuck_released",
    "stuck_dead_lettered",
    "stuck_left_alone",
    "resubmit_errors",
)
# How many resubmitted keys a report names (the counts are always complete),
# and how many characters of keys one walk carries in the state (keys can be
# 1 KB each; a Map of many prefix walks must stay under the 256 KiB state limit).
SAMPLE_LIMIT = 50
SAMPLE_CHARACTERS = 2048
NULL_VERSION = "null"

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


@dataclass(frozen=True)
class AuditWindow:
    """Which objects the audit may judge, as of the moment the audit started."""

    now: float  # epoch seconds
    recent_cutoff_seconds: float
    retention_seconds: float
    max_attempts: int


def idempotency_key(bucket: str, obj: ListedObject) -> str:
    """The key the processor derives for the Object Created event of this version."""
    return f"s3://{bucket}/{obj.key}#{obj.version_id}"


def classify(obj: ListedObject, row: dict[str, Any] | None, window: AuditWindow) -> str:
    """Name the count one listed object version falls into.

    ``missing_resubmitted`` and ``failed_resubmitted`` are the two that the
    caller resubmits; every other verdict leaves the object alone.
    """
    age = window.now - obj.last_modified
    if age < window.recent_cutoff_seconds:
        return "skipped_recent"  # its events may still be on their way
    if age > window.retention_seconds:
        return "skipped_old"  # its row has expired: resubmitting could process it twice
    if obj.version_id == NULL_VERSION:
        # Uploaded while versioning was off: the processor keyed it on the
        # event's sequencer, which no listing shows. See README, "The audit".
        return "unversioned_skipped"
    if row is None or int(row.get("expires_at", 0)) < window.now:
        return "missing_resubmitted"
    status = row.get("status")
    if status == "PROCESSED":
        return "ok"
    if status == "PROCESSING":
        return "in_progress"  # live, or stuck: the lock sweep decides
    if "dead_lettered_at" in row or int(row.get("attempts", 0)) >= window.max_attempts:
        return "dead_lettered_skipped"
    return "failed_resubmitted"


def object_work_item(
    bucket: str, obj: ListedObject, idempotency_key_: str | None = None
) -> dict[str, Any]:
    """The direct work item the audit sends for an object (keys are not URL-encoded)."""
    return {
        "workItem": {
            "source": "audit",
            "idempotencyKey": idempotency_key_ or idempotency_key(bucket, obj),
            "bucket": bucket,
            "key": obj.key,
            "versionId": obj.version_id,
            "etag": obj.etag,
            "size": obj.size,
        }
    }


def row_work_item(row: dict[str, Any]) -> dict[str, Any] | None:
    """A direct work item rebuilt from an object's ledger row; None for messages and events."""
    if not row.get("bucket") or not row.get("object_key"):
        return None
    item: dict[str, Any] = {
        "source": "audit",
        "idempotencyKey": row["pk"],
        "bucket": row["bucket"],
        "key": row["object_key"],
    }
    for attribute, field in (
        ("version_id", "versionId"),
        ("sequencer", "sequencer"),
        ("etag", "etag"),
        ("size", "size"),
    ):
        if attribute in row:
            item[field] = row[attribute]
    return {"workItem": item}


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def resubmission_name(kind: str, audit_id: str, idempotency_key_: str) -> str:
    """A deterministic execution name: a retried page starts nothing twice.

    Step Functions refuses a second execution of one name (ExecutionAlreadyExists),
    so the same audit resubmitting the same key again is a no-op.
    """
    digest = hashlib.sha256(f"{audit_id}\n{idempotency_key_}".encode()).hexdigest()[:32]
    prefix = _NAME_UNSAFE.sub("-", f"{kind}-{audit_id}")[:40]
    return f"{prefix}-{digest}"


def stuck_dead_letter_message(
    row: dict[str, Any], original_event: Any, state_machine_arn: str
) -> dict[str, Any]:
    """The DLQ message for a stuck row at MaxAttempts, in the processor's message shape."""
    work_item = row_work_item(row)
    attempts = int(row.get("attempts", 0))
    message = (
        f"LockExpired: the lock of {row.get('lock_owner', 'an unknown execution')} expired with "
        f"the work unfinished, after {attempts} attempt(s)"
    )
    return {
        "body": {
            "event": original_event,
            "workItem": work_item["workItem"] if work_item else None,
        },
        "attributes": {
            "ERROR_CODE": "LockExpired",
            "ERROR_MESSAGE": message,
            "EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts",
            "RETRY_ATTEMPTS": str(attempts),
            "STATE_MACHINE_ARN": state_machine_arn,
            "EXECUTION_ARN": str(row.get("lock_owner", "")),
            "IDEMPOTENCY_KEY": str(row["pk"]),
        },
    }
