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
    SAMPLE_LIMIT,
    AuditWindow,
    add_counts,
    classify,
    idempotency_key,
    object_work_item,
    resubmission_name,
    row_work_item,
    stuck_dead_letter_message,
)
from service.observability import logger, metrics, tracer
from service.settings import AuditSettings, audit_settings

_RESUBMIT = {"missing_resubmitted", "failed_resubmitted"}


class Clients:
    """The AWS clients one warm sandbox reuses."""

    def __init__(self, settings: AuditSettings) -> None:
        self.bucket = Bucket(settings.ingest_bucket)
        self.ledger = Ledger(settings.ledger_table, settings.open_work_index)
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
    )


def _sample(event: dict[str, Any], keys: list[str]) -> list[str]:
    sample = list(event.get("resubmittedSample") or [])
    return (sample + keys)[:SAMPLE_LIMIT]


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
    keys = {obj: idempotency_key(settings.ingest_bucket, obj) for obj in objects}
    rows = clients.ledger.batch_get(keys.values())
    counts = add_counts(event.get("counts") or {})
    resubmitted: list[str] = []
    for obj, key in keys.items():
        counts["scanned"] += 1
        verdict = classify(obj, rows.get(key), window)
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


def sweep_locks(event: dict[str, Any], settings: AuditSettings, clients: Clients) -> dict[str, Any]:
    """One page of PROCESSING rows whose lock expired more than the margin ago.

    Each is released with a fenced update and resubmitted; one at MaxAttempts
    is dead-lettered instead, as the processor would have done.
    """
    now = float(event["startedAt"]) / 1000
    cutoff = int(now - settings.stuck_margin_seconds)
    rows, cursor = clients.ledger.expired_locks(cutoff, event.get("cursor"))
    counts = add_counts(event.get("counts") or {})
    resubmitted: list[str] = []
    audit_id = str(event["auditId"])
    for row in rows:
        at_max = int(row.get("attempts", 0)) >= settings.max_attempts
        work = row_work_item(row)
        original = None
        if work is None or at_max:
            # A message or event carries a payload the row does not keep:
            # the execution that held the lock has its input.
            original = clients.processor.execution_input(str(row.get("lock_owner", "")))
        if not clients.ledger.release_stuck(row, int(time.time() * 1000), audit_id, at_max):
            counts["stuck_left_alone"] += 1  # reclaimed or renewed since the index was read
            continue
        counts["stuck_released"] += 1
        if at_max:
            message = stuck_dead_letter_message(row, original, settings.processor_arn)
            clients.dead_letters.send(message["body"], message["attributes"])
            counts["stuck_dead_lettered"] += 1
            logger.warning("stuck work dead-lettered", extra={"idempotency_key": row["pk"]})
            continue
        execution_input = work if work is not None else original
        if execution_input is None:
            counts["resubmit_errors"] += 1
            logger.error(
                "released, but cannot resubmit: the original input is gone",
                extra={"idempotency_key": row["pk"], "lock_owner": row.get("lock_owner")},
            )
            continue
        clients.processor.start(resubmission_name("sweep", audit_id, row["pk"]), execution_input)
        resubmitted.append(str(row["pk"]))
        logger.info("stuck lock released and resubmitted", extra={"idempotency_key": row["pk"]})
    return {
        **event,
        "cursor": cursor,
        "done": cursor is None,
        "counts": counts,
        "resubmittedSample": _sample(event, resubmitted),
    }


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
    logger.append_keys(audit=event.get("auditId"), action=event.get("action"))
    return action(event, audit_settings(), _get_clients())
