"""Audit Lambda: one page of the bucket, one page of expired locks, or the final report.

The audit state machine calls it once per page (up to 1000 object versions)
and once per page of the open-work index; the state carries the cursor and
the running counts between calls.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from service.dal.bucket import Bucket
from service.dal.ledger import Ledger
from service.dal.workflow import DeadLetters, Processor, Reports
from service.errors import PermanentError
from service.logic.audit import (
    COUNT_KEYS,
    SAMPLE_CHARACTERS,
    SAMPLE_LIMIT,
    AuditWindow,
    ListedObject,
    add_counts,
    age_verdict,
    classify,
    content_row,
    failed_dead_letter_message,
    idempotency_key,
    object_work_item,
    resubmission_name,
    row_work_item,
    stuck_dead_letter_message,
)
from service.logic.s3objects import NULL_VERSION, object_ref
from service.observability import logger, metrics, tracer
from service.settings import AuditSettings, audit_settings

_RESUBMIT = {"missing_resubmitted", "failed_resubmitted"}


class Clients:
    """The AWS clients one warm sandbox reuses."""

    def __init__(self, settings: AuditSettings) -> None:
        self.bucket = Bucket(settings.ingest_bucket)
        self.ledger = Ledger(
            settings.ledger_table,
            settings.open_work_index,
            content_index=settings.object_content_index,
        )
        self.processor = Processor(settings.processor_arn)
        self.dead_letters = DeadLetters(settings.dead_letter_queue_url)
        self.reports = Reports(settings.report_bucket)


_clients: Clients | None = None


def _get_clients() -> Clients:
    global _clients
    if _clients is None:
        _clients = Clients(audit_settings())
    return _clients


def _window(event: dict[str, Any], settings: AuditSettings) -> AuditWindow:
    return AuditWindow(
        now=float(event["startedAt"]) / 1000,
        recent_cutoff_seconds=settings.recent_cutoff_seconds,
        retention_seconds=settings.retention_seconds,
        max_attempts=settings.max_attempts,
        late_event_seconds=settings.late_event_seconds,
    )


def _sample(event: dict[str, Any], keys: list[str]) -> list[str]:
    """The first resubmitted keys, bounded in number and size (they travel in the state)."""
    sample = list(event.get("resubmittedSample") or [])
    size = sum(len(k) for k in sample)
    for key in keys:
        if len(sample) >= SAMPLE_LIMIT or size + len(key) > SAMPLE_CHARACTERS:
            break
        sample.append(key)
        size += len(key)
    return sample


def audit_objects(
    event: dict[str, Any], settings: AuditSettings, clients: Clients
) -> dict[str, Any]:
    """One listing page: resubmit what has no row or a FAILED row below MaxAttempts."""
    window = _window(event, settings)
    versioned = event.get("versioned")
    if versioned is None:
        versioned = clients.bucket.versioned()
    prefix = str(event.get("prefix", ""))
    objects, cursor = clients.bucket.page(prefix, event.get("cursor"), versioned)
    bucket = settings.ingest_bucket
    versions = {
        obj: idempotency_key(bucket, obj) for obj in objects if obj.version_id != NULL_VERSION
    }
    rows = clients.ledger.batch_get(versions.values())
    counts = add_counts(event.get("counts") or {})
    resubmitted: list[str] = []
    for obj in objects:
        counts["scanned"] += 1
        if obj in versions:
            key, row = versions[obj], rows.get(versions[obj])
        else:
            key, row = _unversioned_row(obj, window, bucket, clients)
        verdict = classify(obj, row, window)
        if verdict in _RESUBMIT:
            name = resubmission_name("audit", str(event["auditId"]), key)
            clients.processor.start(name, object_work_item(settings.ingest_bucket, obj, key))
            resubmitted.append(key)
            logger.info("resubmitted", extra={"idempotency_key": key, "verdict": verdict})
        counts[verdict] += 1
    return {
        **event,
        "versioned": versioned,
        "cursor": cursor,
        "done": cursor is None,
        "counts": counts,
        "resubmittedSample": _sample(event, resubmitted),
    }


def _unversioned_row(
    obj: ListedObject, window: AuditWindow, bucket: str, clients: Clients
) -> tuple[str, dict[str, Any] | None]:
    """(the key to resubmit under, the row) of an upload without a version id.

    Its row, if any, is keyed on its event's sequencer, which no listing shows:
    the ObjectContent index gives the rows of the key, and the one with the
    object's current ETag stands for it. A FAILED one is resubmitted under its
    own key (Reclaim takes it over); with none, the upload gets a key of its own.
    """
    if age_verdict(obj, window) is not None or not obj.latest:
        return idempotency_key(bucket, obj), None  # not judged by its rows: no query
    row = content_row(clients.ledger.content_rows(object_ref(bucket, obj.key), obj.etag), window)
    if row is None:
        return idempotency_key(bucket, obj), None
    return str(row["pk"]), row


def sweep_locks(event: dict[str, Any], settings: AuditSettings, clients: Clients) -> dict[str, Any]:
    """One page of the open-work index: first stuck PROCESSING rows, then FAILED ones.

    A stuck row (its lock expired more than the margin ago) is released with
    a fenced update and resubmitted; at MaxAttempts it is dead-lettered
    instead, as the processor would have done. A FAILED row below
    MaxAttempts is resubmitted: for an SQS message or a custom event nothing
    else ever would (the pipe and the rule do not redeliver a failed
    execution). A FAILED row at MaxAttempts that is still open has no DLQ
    message (the processor's send failed: DeadLetterFailed); it is
    dead-lettered here. Resubmissions share the bucket walk's names, so a key
    is started once per audit however many phases see it.
    """
    now = float(event["startedAt"]) / 1000
    cursor = event.get("cursor") or {"phase": "stuck"}
    counts = add_counts(event.get("counts") or {})
    resubmitted: list[str] = []
    phase: dict[str, Any] = cursor
    if cursor.get("phase") == "stuck":
        cutoff = int(now - settings.stuck_margin_seconds)
        rows, start = clients.ledger.open_rows("PROCESSING", cutoff, cursor.get("start"))
        for row in rows:
            _release_stuck(row, event, settings, clients, counts, resubmitted)
        # The last stuck page goes straight on to the first FAILED page.
        phase = {"phase": "stuck", "start": start} if start else {"phase": "failed"}
    next_cursor: dict[str, Any] | None = phase
    if phase.get("phase") == "failed":
        rows, start = clients.ledger.open_rows("FAILED", None, phase.get("start"))
        for row in rows:
            _retry_failed(row, event, settings, clients, counts, resubmitted)
        next_cursor = {"phase": "failed", "start": start} if start else None
    return {
        **event,
        "cursor": next_cursor,
        "done": next_cursor is None,
        "counts": counts,
        "resubmittedSample": _sample(event, resubmitted),
    }


def _resubmit(
    row: dict[str, Any],
    event: dict[str, Any],
    clients: Clients,
    counts: dict[str, int],
    resubmitted: list[str],
) -> bool:
    """Start the processor again for a row: a work item, or the original execution's input."""
    execution_input = row_work_item(row) or clients.processor.execution_input(
        str(row.get("lock_owner", ""))
    )
    if execution_input is None:
        counts["resubmit_errors"] += 1
        logger.error(
            "cannot resubmit: the original input is gone (or the execution was EXPRESS)",
            extra={"idempotency_key": row["pk"], "lock_owner": row.get("lock_owner")},
        )
        return False
    name = resubmission_name("audit", str(event["auditId"]), str(row["pk"]))
    started = clients.processor.start(name, execution_input)
    if started:
        resubmitted.append(str(row["pk"]))
    return started


def _release_stuck(
    row: dict[str, Any],
    event: dict[str, Any],
    settings: AuditSettings,
    clients: Clients,
    counts: dict[str, int],
    resubmitted: list[str],
) -> None:
    audit_id = str(event["auditId"])
    if int(row.get("attempts", 0)) >= settings.max_attempts:
        # The message first: if this page fails after it, the retried page
        # finds the row still PROCESSING and sends again (a DLQ message too
        # many beats a dead-lettered row with none).
        original = clients.processor.execution_input(str(row.get("lock_owner", "")))
        message = stuck_dead_letter_message(row, original, settings.processor_arn)
        clients.dead_letters.send(message["body"], message["attributes"])
        if not clients.ledger.release_stuck(row, int(time.time() * 1000), audit_id, True):
            counts["stuck_left_alone"] += 1
            logger.warning(
                "taken over after its DLQ message was sent: redrive will find it done or busy",
                extra={"idempotency_key": row["pk"]},
            )
            return
        counts["stuck_released"] += 1
        counts["stuck_dead_lettered"] += 1
        logger.warning("stuck work dead-lettered", extra={"idempotency_key": row["pk"]})
        return
    if not clients.ledger.release_stuck(row, int(time.time() * 1000), audit_id, False):
        counts["stuck_left_alone"] += 1  # reclaimed or renewed since the index was read
        return
    counts["stuck_released"] += 1
    # Released first: should this start fail, the retried page (or the next
    # audit) finds the row FAILED and resubmits it from there.
    _resubmit(row, event, clients, counts, resubmitted)
    logger.info("stuck lock released and resubmitted", extra={"idempotency_key": row["pk"]})


def _retry_failed(
    row: dict[str, Any],
    event: dict[str, Any],
    settings: AuditSettings,
    clients: Clients,
    counts: dict[str, int],
    resubmitted: list[str],
) -> None:
    now = float(event["startedAt"]) / 1000
    if "dead_lettered_at" in row or int(row.get("expires_at", 0)) < now:
        return  # not open work (the index lags a write), or expired: a new delivery's
    if int(row.get("attempts", 0)) >= settings.max_attempts:
        _dead_letter_failed(row, event, settings, clients, counts)
        return
    if _resubmit(row, event, clients, counts, resubmitted):
        counts["failed_resubmitted"] += 1
        logger.info("failed work resubmitted", extra={"idempotency_key": row["pk"]})


def _dead_letter_failed(
    row: dict[str, Any],
    event: dict[str, Any],
    settings: AuditSettings,
    clients: Clients,
    counts: dict[str, int],
) -> None:
    """A FAILED row at MaxAttempts still open: its DLQ message was never sent.

    The processor ends such work in DeadLetterFailed (SendMessage failed past
    its retries) and leaves the row open; nothing reclaims it at MaxAttempts,
    so the audit sends the message, then marks the row dead-lettered (fenced
    on what it read). A page retried between the two sends again: a DLQ
    message too many beats a dead-lettered row with none.
    """
    current = clients.ledger.current(str(row["pk"]))
    if current is None or any(
        current.get(name) != row.get(name)
        for name in ("status", "updated_at", "lock_owner", "dead_lettered_at")
    ):
        logger.info("changed since the index was read", extra={"idempotency_key": row["pk"]})
        return
    original = clients.processor.execution_input(str(current.get("lock_owner", "")))
    message = failed_dead_letter_message(current, original, settings.processor_arn)
    clients.dead_letters.send(message["body"], message["attributes"])
    audit_id = str(event["auditId"])
    if not clients.ledger.dead_letter_failed(current, int(time.time() * 1000), audit_id):
        logger.warning(
            "changed after its DLQ message was sent: redrive will find it done, busy or reset",
            extra={"idempotency_key": row["pk"]},
        )
        return
    counts["failed_dead_lettered"] += 1
    logger.warning("failed work dead-lettered", extra={"idempotency_key": row["pk"]})


def report(event: dict[str, Any], settings: AuditSettings, clients: Clients) -> dict[str, Any]:
    """Sum the pages, write reports/audit/<date>.json, emit the metrics."""
    parts: list[dict[str, Any]] = [*(event.get("objects") or []), event.get("locks") or {}]
    counts = add_counts(*(p.get("counts") or {} for p in parts))
    sample: list[str] = []
    for part in parts:
        sample += part.get("resubmittedSample") or []
    started = datetime.fromtimestamp(float(event["startedAt"]) / 1000, UTC)
    result: dict[str, Any] = {
        **{k: counts[k] for k in COUNT_KEYS},
        "audit": str(event.get("auditId", "")),
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "bucket": settings.ingest_bucket,
        "prefixes": [p.get("prefix", "") for p in event.get("objects") or []],
        "resubmitted_sample": sample[:SAMPLE_LIMIT],
    }
    key = f"{settings.report_prefix}{started.date().isoformat()}.json"
    result["report"] = clients.reports.put(key, result)
    for name, value in (
        ("AuditScanned", counts["scanned"]),
        ("AuditMissing", counts["missing_resubmitted"]),
        ("AuditFailedResubmitted", counts["failed_resubmitted"]),
        ("AuditResubmitted", counts["missing_resubmitted"] + counts["failed_resubmitted"]),
        ("StuckReleased", counts["stuck_released"]),
        ("AuditResubmitErrors", counts["resubmit_errors"]),
        ("AuditFailedDeadLettered", counts["failed_dead_lettered"]),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("audit report", extra={"report": result})
    return result


_ACTIONS = {"objects": audit_objects, "locks": sweep_locks, "report": report}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    action = _ACTIONS.get(str(event.get("action")))
    if action is None:
        raise PermanentError(f"unknown audit action {event.get('action')!r}")
    logger.append_keys(
        audit=event.get("auditId"),
        action=event.get("action"),
        execution_arn=event.get("executionArn"),
    )
    return action(event, audit_settings(), _get_clients())
