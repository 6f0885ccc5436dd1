"""Audit Lambda: the plan, one batch of the bucket walk, one page of open work, or the report.

The audit state machine calls it once to plan the run, once per batch of up
to 1000 objects (each batch is one EXPRESS child of a Distributed Map), once
per page of the open-work index (the state carries the cursor and the running
counts between pages), and once for the report.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from service.dal.bucket import Bucket, Inventory
from service.dal.ledger import Ledger
from service.dal.workflow import DeadLetters, Processor, Reports, batch_size
from service.errors import PermanentError
from service.logic.audit import (
    COUNT_KEYS,
    SAMPLE_CHARACTERS,
    SAMPLE_LIMIT,
    AuditWindow,
    Budget,
    ListedObject,
    add_counts,
    age_verdict,
    classify,
    content_row,
    failed_dead_letter_message,
    idempotency_key,
    inventory_item,
    listed_item,
    object_work_item,
    resubmission_name,
    row_work_item,
    stuck_dead_letter_message,
    versions_of,
)
from service.logic.s3objects import NULL_VERSION, object_ref
from service.observability import logger, metrics, tracer
from service.settings import AuditSettings, audit_settings

_RESUBMIT = {"missing_resubmitted", "failed_resubmitted"}
# Where the Distributed Maps export their children's results (the ASL's ResultWriter).
RESULTS_PREFIX = "reports/audit-runs/"


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
        self.inventory = (
            Inventory(settings.report_bucket, settings.inventory_prefix)
            if settings.inventory_prefix
            else None
        )


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


def plan(event: dict[str, Any], settings: AuditSettings, clients: Clients) -> dict[str, Any]:
    """The run's moment, the bucket's versioning, and where its objects come from.

    The newest complete S3 Inventory report when there is one (AuditInventory)
    no older than AUDIT_INVENTORY_MAX_AGE_HOURS; otherwise the bucket's listing.
    A run for one key prefix, or one that asks for it, uses the listing.
    """
    started_at = int(event.get("startedAt") or time.time() * 1000)
    prefix = str(event.get("prefix") or "")
    source, reason, manifest = "listing", "AuditInventory is off", None
    if event.get("source") == "listing":
        reason = "the run asked for the listing"
    elif prefix:
        reason = f"a run for the prefix {prefix!r} lists it"
    elif settings.inventory_prefix:
        newest = clients.inventory.newest() if clients.inventory else None
        if newest is None:
            reason = "no complete inventory report yet"
        else:
            key, taken = newest
            age = started_at / 1000 - taken.timestamp()
            if age > settings.inventory_max_age_seconds:
                reason = f"the newest inventory report ({taken.isoformat()}) is too old"
            else:
                source, reason = "inventory", f"the inventory report of {taken.isoformat()}"
                manifest = {"bucket": settings.report_bucket, "key": key}
    logger.info("audit planned", extra={"source": source, "reason": reason})
    return {
        "startedAt": started_at,
        "prefix": prefix,
        "versioned": clients.bucket.versioned(),
        "source": source,
        "sourceReason": reason,
        "manifest": manifest,
    }


def _batch_objects(
    event: dict[str, Any], settings: AuditSettings, clients: Clients
) -> list[ListedObject]:
    """The object versions one batch of the Distributed Map stands for."""
    items = [i for i in event.get("items") or [] if isinstance(i, dict)]
    bucket = settings.ingest_bucket
    if event.get("source") == "inventory":
        return [o for o in (inventory_item(i, bucket) for i in items) if o is not None]
    listed = [listed_item(i) for i in items]
    if not event.get("versioned") or not listed:
        return listed
    keys = [o.key for o in listed]
    return versions_of(keys, clients.bucket.versions_between(min(keys), max(keys)))


def audit_batch(
    event: dict[str, Any], settings: AuditSettings, clients: Clients, context: Any = None
) -> dict[str, Any]:
    """One batch: resubmit what has no row or a FAILED row below MaxAttempts.

    Objects outside the window (too recent, older than the retention) are
    counted with no ledger read. Resubmissions keep to the batch's share of
    AuditResubmitsPerSecond and stop when the batch's time is up; the rest are
    counted as deferred (the next audit finds them again).
    """
    # The batch's time runs from here: its EXPRESS child gives the task 280 s, so
    # listing and reading count against the 240 s, leaving room for a last start.
    seconds = settings.batch_seconds
    if context is not None:  # and the Lambda's own timeout, 30 s to spare
        seconds = min(seconds, context.get_remaining_time_in_millis() / 1000 - 30)
    budget = Budget(
        per_second=settings.resubmits_per_second / settings.max_concurrency,
        deadline=time.monotonic() + seconds,
    )
    window = _window(event, settings)
    bucket = settings.ingest_bucket
    objects = _batch_objects(event, settings, clients)
    judged = [o for o in objects if age_verdict(o, window) is None]
    versions = {
        obj: idempotency_key(bucket, obj) for obj in judged if obj.version_id != NULL_VERSION
    }
    rows = clients.ledger.batch_get(versions.values())
    counts = add_counts()
    resubmitted: list[str] = []
    for obj in objects:
        counts["scanned"] += 1
        if obj in versions:
            key, row = versions[obj], rows.get(versions[obj])
        else:  # too recent or too old (no read), or an upload without a version
            key, row = _unversioned_row(obj, window, bucket, clients)
        verdict = classify(obj, row, window)
        if verdict in _RESUBMIT:
            pause = budget.wait(time.monotonic())
            if pause is None:
                counts["resubmit_deferred"] += 1
                continue
            time.sleep(pause)
            name = resubmission_name("audit", str(event["auditId"]), key)
            clients.processor.start(name, object_work_item(bucket, obj, key))
            resubmitted.append(key)
            logger.info("resubmitted", extra={"idempotency_key": key, "verdict": verdict})
        counts[verdict] += 1
    if counts["resubmit_deferred"]:
        logger.warning("resubmissions deferred", extra={"deferred": counts["resubmit_deferred"]})
    return {"counts": counts, "resubmittedSample": _sample({}, resubmitted)}


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


def _walk(
    objects: dict[str, Any], audit_id: str, clients: Clients
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The batches' counts and what the report says about the bucket walk.

    The Distributed Map exported its children's results to S3 (ResultWriter):
    the succeeded batches' outputs are summed; a failed batch's objects are
    counted as not audited (the next run walks them again). A walk that failed
    (too many failed batches) hands on no result, but its results were exported
    all the same (input-output-resultwriter.html): they are found under the run's
    prefix, so what the batches that ran did is still counted.
    """
    walk: dict[str, Any] = {
        "source": objects.get("source", ""),
        "source_reason": objects.get("sourceReason", ""),
        "prefix": objects.get("prefix", ""),
        "batches": 0,
    }
    if objects.get("error"):
        walk["error"] = f"{objects['error']}: {str(objects.get('cause') or '')[:1000]}"
    where = objects.get("results") or {}
    if not where.get("Bucket") or not where.get("Key"):
        found = clients.reports.find_manifest(f"{RESULTS_PREFIX}{audit_id}/")
        if found is None:
            return [], walk
        where = {"Bucket": clients.reports.bucket, "Key": found}
    results = clients.reports.map_run_results(str(where["Bucket"]), str(where["Key"]))
    walk["batches"] = len(results.outputs) + len(results.failed)
    parts = [o for o in results.outputs if isinstance(o, dict)]
    failed = add_counts()
    failed["failed_batches"] = len(results.failed)
    failed["unaudited_objects"] = sum(batch_size(r) for r in results.failed)
    for result in results.failed[:5]:
        logger.error(
            "an audit batch failed",
            extra={"error": result.get("Error"), "cause": str(result.get("Cause"))[:500]},
        )
    return [*parts, {"counts": failed}], walk


def report(event: dict[str, Any], settings: AuditSettings, clients: Clients) -> dict[str, Any]:
    """Sum the batches and the lock sweep, write reports/audit/<date>.json, emit the metrics."""
    batches, walk = _walk(event.get("objects") or {}, str(event.get("auditId", "")), clients)
    parts: list[dict[str, Any]] = [*batches, event.get("locks") or {}]
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
        **walk,
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
        ("AuditResubmitDeferred", counts["resubmit_deferred"]),
        ("AuditFailedBatches", counts["failed_batches"]),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("audit report", extra={"report": result})
    return result


def _batch(event: dict[str, Any], settings: AuditSettings, clients: Clients) -> dict[str, Any]:
    return audit_batch(event, settings, clients, _CONTEXT.get())


_ACTIONS = {"plan": plan, "batch": _batch, "locks": sweep_locks, "report": report}
_CONTEXT: ContextVar[LambdaContext | None] = ContextVar("audit_context", default=None)


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
    token = _CONTEXT.set(context)
    try:
        return action(event, audit_settings(), _get_clients())
    finally:
        _CONTEXT.reset(token)
