"""The audit's use cases: plan the run, audit one batch, sweep open work for a while, report.

Each takes what its state of the audit state machine hands on, already parsed
by the handler, and the clients of the data layer it works through.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from service.dal.bucket import Bucket, Inventory, UnreadableReport, window_csv
from service.dal.ledger import Ledger, UnreadableRow
from service.dal.workflow import (
    DeadLetters,
    Processor,
    Reports,
    StartRefused,
    batch_size,
)
from service.errors import PermanentError, TransientError
from service.logic.audit import (
    COUNT_KEYS,
    SAMPLE_CHARACTERS,
    SAMPLE_LIMIT,
    AuditWindow,
    Budget,
    Counts,
    ListedObject,
    Watermark,
    add_counts,
    age_verdict,
    classify,
    content_row,
    earliest_judged,
    execution_name,
    failed_dead_letter_message,
    idempotency_key,
    inventory_item,
    inventory_key,
    listed_item,
    object_work_item,
    reached,
    refused_dead_letter_message,
    resubmission_name,
    row_work_item,
    stuck_dead_letter_message,
    versions_of,
)
from service.logic.s3objects import NULL_VERSION, object_ref
from service.model import LedgerRow, Status
from service.observability import logger, metrics
from service.settings import AuditSettings

_RESUBMIT = {"missing_resubmitted", "failed_resubmitted"}
# The verdicts of an object whose row is open work (which the sweep must be able to find).
_OPEN_VERDICTS = {"in_progress", "failed_resubmitted", "dead_lettered_skipped"}
# Where the Distributed Maps export their children's results (the ASL's ResultWriter).
RESULTS_PREFIX = "reports/audit-runs/"
# The Lambda's own timeout leaves a batch this much time to spare.
_TIMEOUT_MARGIN_SECONDS = 30
_SWEEP_CALL_FLOOR_SECONDS = 5.0
# Where the audit keeps its watermark in the output bucket (under REPORT_PREFIX).
WATERMARK_NAME = "watermark.json"
# The audit writes a watermark of about 60 bytes; a larger object is not read whole.
_WATERMARK_MAX_BYTES = 4096
# How much of why a watermark is unreadable the report and the state carry.
_WATERMARK_PROBLEM_CHARACTERS = 500
# The audit function's Timeout (template.yaml), for a call that does not say what is left.
_FUNCTION_TIMEOUT_SECONDS = 600.0
# A lock the sweep takes outlives its invocation by this much (clocks differ).
_LOCK_MARGIN_SECONDS = 60


class Clients:
    """The data layer the audit works through; one warm sandbox reuses them."""

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


@dataclass(frozen=True)
class AuditRun:
    """Which audit a call belongs to, and the moment it started (the window's "now")."""

    audit_id: str
    started_at_ms: float

    @property
    def now(self) -> float:
        """The run's start in epoch seconds."""
        return self.started_at_ms / 1000


def sample(earlier: Iterable[str], keys: Iterable[str]) -> list[str]:
    """The first resubmitted keys, bounded in number and size (they travel in the state)."""
    kept = list(earlier)
    size = sum(len(k) for k in kept)
    for key in keys:
        if len(kept) >= SAMPLE_LIMIT or size + len(key) > SAMPLE_CHARACTERS:
            break
        kept.append(key)
        size += len(key)
    return kept


def _window(
    run: AuditRun, settings: AuditSettings, watermark: Watermark | None = None
) -> AuditWindow:
    mark = watermark or Watermark()
    return AuditWindow(
        now=run.now,
        recent_cutoff_seconds=settings.recent_cutoff_seconds,
        retention_seconds=settings.retention_seconds,
        max_attempts=settings.max_attempts,
        late_event_seconds=settings.late_event_seconds,
        versioned_until=mark.versioned_until_ms / 1000 if mark.versioned_until_ms else None,
        unversioned_until=mark.unversioned_until_ms / 1000 if mark.unversioned_until_ms else None,
    )


def _watermark_key(settings: AuditSettings) -> str:
    return f"{settings.report_prefix}{WATERMARK_NAME}"


def read_watermark(settings: AuditSettings, clients: Clients) -> tuple[Watermark, str | None]:
    """How far earlier successful audits judged the bucket (nothing, before the first), and
    why the stored one cannot be used (None: it can, or there is none).

    An unreadable watermark (not UTF-8 JSON, not the shape the audit writes, a time in
    the future, larger than any watermark, an object S3 refuses to serve) is read as
    absent: the run judges its whole window (more ledger reads, nothing skipped) and,
    when its walk judged every object, overwrites it. Failing instead would fail
    every audit at Plan until someone deleted the object. A throttled read is a
    TransientError: Plan retries it. The caller says it loudly (a warning, the
    report, the AuditWatermarkUnreadable metric, the run's named failure).
    """
    key = _watermark_key(settings)
    try:
        body = clients.reports.read_bytes(key, _WATERMARK_MAX_BYTES)
    except PermanentError as refused:
        problem: str | None = f"S3 refused to serve it: {refused}"
    else:
        if body is None:
            return Watermark(), None
        problem = None
        if len(body) > _WATERMARK_MAX_BYTES:
            problem = f"it is larger than {_WATERMARK_MAX_BYTES} bytes"
        else:
            try:
                value = json.loads(body.decode("utf-8"))
            except ValueError as garbled:  # UnicodeDecodeError is a ValueError too
                problem = f"it is not UTF-8 JSON: {garbled}"
            else:
                mark, problem = Watermark.parse(value, time.time() * 1000)
                if problem is None:
                    return mark, None
    problem = f"s3://{clients.reports.bucket}/{key}: {problem}"[:_WATERMARK_PROBLEM_CHARACTERS]
    logger.warning(
        "the audit's watermark cannot be read: judging the whole window",
        extra={"reason": problem},
    )
    return Watermark(), problem


# ---- Plan -------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The run's moment, the bucket's versioning, and where its objects come from."""

    started_at_ms: int
    prefix: str
    versioned: bool
    source: str  # "inventory" or "listing"
    source_reason: str
    manifest: dict[str, str] | None  # the inventory report's manifest.json
    # When the objects the run walks were seen: the run's start for the listing, the
    # moment S3 began to scan the bucket for an inventory report (its timestamp).
    seen_at_ms: int
    watermark: Watermark  # what earlier successful audits judged: the batches skip it
    # Why the stored watermark could not be used (the run judges its whole window), or None.
    watermark_unreadable: str | None = None


def plan(
    settings: AuditSettings,
    clients: Clients,
    started_at_ms: int | None,
    prefix: str,
    asked_for: str | None,
) -> Plan:
    """Plan a run: the newest complete S3 Inventory report when there is one
    (AuditInventory) no older than AUDIT_INVENTORY_MAX_AGE_HOURS; otherwise the
    bucket's listing. A run for one key prefix, or one that asks for it
    (``asked_for`` "listing"), uses the listing.

    The listing starts at KeyPrefix, or at the run's prefix inside it; a run's
    prefix that parts from KeyPrefix names nothing of the stack's and is refused.
    """
    started_at = started_at_ms or int(time.time() * 1000)
    listing_prefix = settings.key_filter.listing_prefix(prefix)
    if listing_prefix is None:
        raise PermanentError(
            f"the prefix {prefix!r} is outside KeyPrefix {settings.key_filter.prefix!r}: "
            "no key under it is this stack's to audit"
        )
    source, reason, manifest = "listing", "AuditInventory is off", None
    seen_at = started_at
    if asked_for == "listing":
        reason = "the run asked for the listing"
    elif prefix:
        reason = f"a run for the prefix {prefix!r} lists it"
    elif settings.inventory_prefix:
        passed_over: list[str] = []
        newest = clients.inventory.newest(None, passed_over) if clients.inventory else None
        if passed_over:
            logger.warning(
                "an inventory report folder names no past time: passed over",
                extra={"folders": passed_over[:10]},
            )
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
                seen_at = round(taken.timestamp() * 1000)
    # A run over a prefix judges no less than a full one: the watermark is what was
    # judged, whoever asks.
    watermark, unreadable = read_watermark(settings, clients)
    logger.info("audit planned", extra={"source": source, "reason": reason})
    return Plan(
        started_at_ms=started_at,
        prefix=listing_prefix,
        versioned=clients.bucket.versioned(),
        source=source,
        source_reason=reason,
        manifest=manifest,
        seen_at_ms=seen_at,
        watermark=watermark,
        watermark_unreadable=unreadable,
    )


# ---- the window of an inventory report ---------------------------------------------


@dataclass(frozen=True)
class Window:
    """What of an inventory report the batches get: the rows the run may judge (a CSV
    file, None when there are none), and the counts of the rows it skipped by age."""

    file: dict[str, str] | None
    rows: int
    counts: Counts


def select_window(
    settings: AuditSettings,
    clients: Clients,
    run: AuditRun,
    manifest_key: str,
    watermark: Watermark,
    remaining_seconds: float | None = None,
) -> Window:
    """The rows of an inventory report that the run judges, before any batch starts.

    A report lists every version the bucket holds, and the bucket only grows: a
    batch (an EXPRESS child, its transition, a Lambda invocation) per 1000 rows
    would cost in proportion to the bucket's age. Here one call streams the
    report and keeps what the batches would judge: rows of this stack's keys
    (KeyPrefix, KeySuffix) that are neither too recent, nor older than the
    retention, nor behind the watermark. Those skipped are counted here as the
    batches would (``scanned`` and the verdict); delete markers and other
    stacks' keys are not counted, as the batches do not. The kept rows go to
    ``reports/audit-runs/<audit>/window.csv``, which the Distributed Map reads.

    A report too large to stream in one call's time fails the call (the walk
    fails, the run alarms, the watermark stays): the bench measures the rate.
    """
    seconds = _FUNCTION_TIMEOUT_SECONDS if remaining_seconds is None else remaining_seconds
    deadline = time.monotonic() + seconds - 2 * _TIMEOUT_MARGIN_SECONDS
    window = _window(run, settings, watermark)
    bucket = settings.ingest_bucket
    wanted = settings.key_filter.matches
    if clients.inventory is None:
        raise PermanentError("AuditInventory is off: there is no inventory report to select from")
    columns, rows = clients.inventory.rows(manifest_key, bucket)
    counts = add_counts()
    kept: list[list[str]] = []
    # Most rows are older than anything the run judges: they are told apart by their
    # LastModifiedDate as text (ISO 8601 in UTC sorts as time does), without parsing
    # the row; a row within a second of a bound takes the full path below.
    at = {name: columns.index(name) for name in columns}
    absent = [c for c in ("Bucket", "Key", "LastModifiedDate") if c not in at]
    if absent:  # an inventory without them (its OptionalFields) cannot serve the audit
        raise UnreadableReport(f"{manifest_key}: its fileSchema has no {', '.join(absent)}")
    earliest = _iso(math.floor(earliest_judged(window)))
    oldest = window.now - window.retention_seconds
    old_before, old_from = _iso(math.floor(oldest)), _iso(math.ceil(oldest))
    filtered = bool(settings.key_filter.prefix or settings.key_filter.suffix)
    modified, deleted = at["LastModifiedDate"], at.get("IsDeleteMarker")
    for n, values in enumerate(rows):
        if n % 10_000 == 0 and time.monotonic() > deadline:
            raise PermanentError(
                f"the inventory report {manifest_key} is too large to select from in one "
                f"call ({n} rows read): the walk fails and the next audit tries again"
            )
        if len(values) != len(columns):
            raise UnreadableReport(
                f"{manifest_key}: row {n + 1} has {len(values)} fields, not {len(columns)}"
            )
        last_modified = values[modified]
        if last_modified < earliest and (last_modified < old_before or last_modified >= old_from):
            if values[at["Bucket"]] != bucket or (
                deleted is not None and values[deleted].lower() == "true"
            ):
                continue  # another bucket's row, or a delete marker: no upload
            if filtered and not wanted(_report_key(values[at["Key"]], manifest_key, n)):
                continue
            counts["scanned"] += 1
            counts["skipped_old" if last_modified < old_before else "skipped_audited"] += 1
            continue
        try:
            obj = inventory_item(dict(zip(columns, values, strict=True)), bucket)
        except (ValueError, KeyError) as garbled:  # a key, a date or a size S3 never wrote
            raise UnreadableReport(
                f"{manifest_key}: row {n + 1}: {type(garbled).__name__}: {garbled}"
            ) from garbled
        if obj is None or not wanted(obj.key):
            continue
        verdict = age_verdict(obj, window)
        if verdict is None:
            kept.append(values)
            continue
        counts["scanned"] += 1
        counts[verdict] += 1
    file = None
    if kept:
        key = f"{RESULTS_PREFIX}{run.audit_id}/window.csv"
        file = clients.reports.put_file(key, window_csv(columns, kept), "text/csv")
    logger.info(
        "inventory window selected", extra={"kept": len(kept), "skipped": counts["scanned"]}
    )
    return Window(file=file, rows=len(kept), counts=counts)


def _report_key(text: str, manifest_key: str, n: int) -> str:
    try:
        return inventory_key(text)
    except ValueError as garbled:
        raise UnreadableReport(f"{manifest_key}: row {n + 1}: {garbled}") from garbled


def _iso(epoch_seconds: int) -> str:
    """A time as an inventory report writes LastModifiedDate (2022-11-16T00:29:32.000Z,
    input-output-itemreader.html's example row; not verified for every report)."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# ---- one batch of the bucket walk -------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One batch of the Distributed Map: up to 1000 items of a listing or an inventory."""

    items: list[dict[str, Any]]
    source: str | None  # "inventory": S3 Inventory CSV rows; otherwise ListObjectsV2 items
    versioned: bool
    watermark: Watermark = field(default_factory=Watermark)  # what earlier audits judged


@dataclass
class Tally:
    """What a batch or a page did: the counts, and a sample of the keys it resubmitted."""

    counts: Counts
    resubmitted_sample: list[str]


def _batch_objects(batch: Batch, settings: AuditSettings, clients: Clients) -> list[ListedObject]:
    """The object versions one batch of the Distributed Map stands for.

    Only keys the stack's rule passes (KeyPrefix, KeySuffix): an inventory lists
    the whole bucket and a listing the whole prefix, and an object whose events
    the rule drops is not the stack's to resubmit.
    """
    bucket = settings.ingest_bucket
    wanted = settings.key_filter.matches
    if batch.source == "inventory":
        found = (inventory_item(i, bucket) for i in batch.items)
        return [o for o in found if o is not None and wanted(o.key)]
    listed = [o for o in (listed_item(i) for i in batch.items) if wanted(o.key)]
    if not batch.versioned or not listed:
        return listed
    keys = [o.key for o in listed]
    return versions_of(keys, clients.bucket.versions_between(min(keys), max(keys)))


def audit_batch(
    settings: AuditSettings,
    clients: Clients,
    run: AuditRun,
    batch: Batch,
    remaining_seconds: float | None = None,
) -> Tally:
    """One batch: resubmit what has no row or a FAILED row below MaxAttempts.

    Objects outside the window (too recent, older than the retention) are
    counted with no ledger read. Resubmissions keep to the batch's share of
    AuditResubmitsPerSecond and stop when the batch's time is up; the rest are
    counted as deferred (the next audit finds them again). Only a start that
    succeeded counts as resubmitted; a failed one counts in resubmit_errors.
    ``remaining_seconds``: what the Lambda's timeout leaves of the invocation.
    """
    # The batch's time runs from here: its EXPRESS child gives the task 280 s, so
    # listing and reading count against the 240 s, leaving room for a last start.
    seconds = settings.batch_seconds
    if remaining_seconds is not None:
        seconds = min(seconds, remaining_seconds - _TIMEOUT_MARGIN_SECONDS)
    budget = Budget(
        per_second=settings.resubmits_per_second / settings.max_concurrency,
        deadline=time.monotonic() + seconds,
    )
    window = _window(run, settings, batch.watermark)
    bucket = settings.ingest_bucket
    objects = _batch_objects(batch, settings, clients)
    judged = [o for o in objects if age_verdict(o, window) is None]
    versions = {
        obj: idempotency_key(bucket, obj) for obj in judged if obj.version_id != NULL_VERSION
    }
    # With their claims (the same read units: DynamoDB counts the item, not the projection).
    rows = clients.ledger.batch_get(versions.values(), with_claims=True)
    counts = add_counts()
    resubmitted: list[str] = []
    for obj in objects:
        counts["scanned"] += 1
        if obj in versions:
            key, row = versions[obj], rows.get(versions[obj])
        else:  # too recent or too old (no read), or an upload without a version
            key, row = _unversioned_row(obj, window, bucket, clients)
        if isinstance(row, UnreadableRow):
            _unreadable(row, counts, "a batch cannot read a ledger row: its object is not judged")
            continue
        verdict = classify(obj, row, window)
        if row is not None and verdict in _OPEN_VERDICTS and _reindexed(obj, row, clients):
            counts["reindexed"] += 1
        if verdict in _RESUBMIT:
            pause = budget.wait(time.monotonic())
            if pause is None:
                counts["resubmit_deferred"] += 1
                continue
            time.sleep(pause)
            name = resubmission_name("audit", run.audit_id, key)
            try:
                # False: this audit started the name before (a retried batch): it counts.
                clients.processor.start(
                    name, object_work_item(bucket, obj, key), _claims(obj, row, clients)
                )
            except (TransientError, PermanentError) as exc:
                # Counted apart, not as resubmitted: the next audit finds the object again.
                counts["resubmit_errors"] += 1
                logger.error("cannot resubmit", extra={"idempotency_key": key, "error": str(exc)})
                continue
            resubmitted.append(key)
            logger.info("resubmitted", extra={"idempotency_key": key, "verdict": verdict})
        counts[verdict] += 1
    if counts["resubmit_deferred"]:
        logger.warning("resubmissions deferred", extra={"deferred": counts["resubmit_deferred"]})
    return Tally(counts, sample([], resubmitted))


def _reindexed(obj: ListedObject, row: LedgerRow, clients: Clients) -> bool:
    """Whether the walk put an object's row of open work back in the open-work index (the
    sweep, which reads only the index, then meets it in this same run: ledger.reindex).
    The ObjectContent index does not keep open_status: an unversioned upload's open row
    is read again (rare: open work)."""
    if obj.version_id == NULL_VERSION:
        current = clients.ledger.current(row.pk)
        if not isinstance(current, LedgerRow):
            return False
        row = current
    if row.dead_lettered or row.status not in (Status.PROCESSING, Status.FAILED):
        return False
    if row.open_status is not None and row.lock_expires_at is not None:
        return False
    if not clients.ledger.reindex(row):
        return False
    logger.warning(
        "open work outside the open-work index put back in it",
        extra={"idempotency_key": row.pk, "status": row.status},
    )
    return True


def _claims(obj: ListedObject, row: LedgerRow | None, clients: Clients) -> tuple[str, ...]:
    """The claims of the row a resubmission is for: read with a version's row; the
    ObjectContent index does not keep them, so an unversioned upload's row is read again."""
    if row is None or obj.version_id != NULL_VERSION:
        return row.claims if row is not None else ()
    current = clients.ledger.current(row.pk)
    return current.claims if isinstance(current, LedgerRow) else ()


def _unversioned_row(
    obj: ListedObject, window: AuditWindow, bucket: str, clients: Clients
) -> tuple[str, LedgerRow | UnreadableRow | None]:
    """(the key to resubmit under, the row) of an upload without a version id.

    Its row, if any, is keyed on its event's sequencer, which no listing shows:
    the ObjectContent index gives the rows of the key, and the one with the
    object's current ETag stands for it. A FAILED one is resubmitted under its
    own key (Reclaim takes it over); with none, the upload gets a key of its own.
    A row of the content that cannot be read might be the one that stands for it:
    the upload is not judged (resubmitting it under a key of its own could do it twice).
    """
    if age_verdict(obj, window) is not None or not obj.latest:
        return idempotency_key(bucket, obj), None  # not judged by its rows: no query
    found = clients.ledger.content_rows(object_ref(bucket, obj.key), obj.etag)
    for unreadable in (r for r in found if isinstance(r, UnreadableRow)):
        return unreadable.pk, unreadable
    row = content_row([r for r in found if isinstance(r, LedgerRow)], window)
    if row is None:
        return idempotency_key(bucket, obj), None
    return row.pk, row


# ---- the sweep of open work -------------------------------------------------------


@dataclass(frozen=True)
class SweepPage:
    """Where the sweep stands after a call: the next call's cursor (None: done), the tally,
    and whether it stopped at its deadline with open work left for the next audit."""

    cursor: dict[str, Any] | None
    tally: Tally
    deferred: bool = False


class _TimeUp(Exception):
    """The call's time is up before the next resubmission: the row waits for the next call."""


def sweep_locks(
    settings: AuditSettings,
    clients: Clients,
    run: AuditRun,
    cursor: dict[str, Any] | None,
    so_far: Tally,
    remaining_seconds: float | None = None,
) -> SweepPage:
    """Sweep the open-work index from ``cursor``, page after page, until it is done or the
    call's time is up: first stuck PROCESSING rows, then FAILED ones.

    One call sweeps as many pages as its time allows (a call that is not done has
    used all of it), and the sweep stops AUDIT_SWEEP_HOURS after the run started,
    leaving the rest to the next audit: the state machine's loop, and so its
    history, grows with the sweep's duration, never with the number of open rows.
    Resubmissions keep to AuditResubmitsPerSecond (the sweep runs after the walk,
    alone); a call that cannot start the next one in time returns a cursor on
    that row.

    A stuck row (its lock expired more than the margin ago) is released with
    a fenced update and resubmitted; at MaxAttempts it is dead-lettered
    instead, under the audit's own lock as the processor does (_dead_letter:
    take, send, mark), so a delivery that dead-letters it too never adds a
    second DLQ message. A FAILED row below
    MaxAttempts is resubmitted: for an SQS message or a custom event nothing
    else ever would (the pipe and the rule do not redeliver a failed
    execution). A FAILED row at MaxAttempts that is still open has no DLQ
    message (the processor's send failed: DeadLetterFailed); it is
    dead-lettered here. A resubmission StartExecution refuses is dead-lettered
    with the refusal. Resubmissions share the bucket walk's names, so a key
    is started once per audit however many phases see it. A row of an object
    that is no longer the stack's (ExistingBucketName, KeyPrefix or KeySuffix
    changed since) is left alone: the processor would refuse it.
    """
    seconds = settings.sweep_call_seconds
    if remaining_seconds is not None:
        seconds = min(seconds, remaining_seconds - _TIMEOUT_MARGIN_SECONDS)
    # Every call makes progress (a call with no time would loop the state machine
    # without end): the template's 600 s timeout leaves 540.
    call_ends = time.monotonic() + max(seconds, _SWEEP_CALL_FLOOR_SECONDS)
    budget = Budget(per_second=settings.resubmits_per_second, deadline=call_ends)
    # The lock the sweep takes a row under before it sends its DLQ message outlives
    # this invocation (the function is stopped at its timeout), so no delivery takes
    # the row over while this call may still send or mark.
    lives = _FUNCTION_TIMEOUT_SECONDS if remaining_seconds is None else remaining_seconds
    counts = add_counts(so_far.counts)
    resubmitted: list[str] = []
    sweep = _Sweep(
        run, settings, clients, counts, resubmitted, budget,
        lock_until=int(time.time() + lives + _LOCK_MARGIN_SECONDS),
    )  # fmt: skip
    position: dict[str, Any] | None = cursor or {"phase": "stuck"}

    def tally() -> Tally:
        return Tally(counts, sample(so_far.resubmitted_sample, resubmitted))

    while position is not None:
        if time.time() >= run.now + settings.sweep_seconds:
            counts["sweep_deferred"] += 1
            logger.warning(
                "the sweep reached its deadline: the rest waits for the next audit",
                extra={"cursor": position},
            )
            return SweepPage(None, tally(), deferred=True)
        if time.monotonic() >= call_ends:
            return SweepPage(position, tally())
        stuck = position.get("phase") == "stuck"
        status = Status.PROCESSING if stuck else Status.FAILED
        cutoff = int(run.now - settings.stuck_margin_seconds) if stuck else None
        rows, start = clients.ledger.open_rows(
            status, cutoff, position.get("start"), settings.sweep_page_size
        )
        for row in rows:
            try:
                if isinstance(row, UnreadableRow):
                    _unreadable(
                        row, counts, "the sweep cannot read a row of open work: left as it is"
                    )
                elif _the_stacks(row, settings):
                    if stuck:
                        _release_stuck(row, sweep)
                    else:
                        _retry_failed(row, sweep)
            except _TimeUp:
                return SweepPage(position, tally())
            except _Undelivered:
                pass  # given back, counted and logged: the next row
            position = {
                "phase": position["phase"],
                "start": clients.ledger.resume_after(status, row),
            }
        if start:
            position = {"phase": position["phase"], "start": start}
        else:  # the last stuck page goes straight on to the first FAILED page
            position = {"phase": "failed"} if stuck else None
    return SweepPage(None, tally())


def _unreadable(row: UnreadableRow, counts: Counts, message: str) -> None:
    """A row the audit cannot read, met by a batch or the sweep: left as it is, counted
    where the alarm sees it (resubmit_errors: work the audit cannot start again) and
    logged with why. The rest of the batch, or of the sweep, goes on; the next audit
    meets it again until someone mends or deletes it (a batch's resubmit_errors also
    keep the watermark where it is, so its object is judged again)."""
    counts["unreadable_rows"] += 1
    counts["resubmit_errors"] += 1
    logger.error(message, extra={"idempotency_key": row.pk, "reason": row.reason})


def _the_stacks(row: LedgerRow, settings: AuditSettings) -> bool:
    """Whether a row's work is still the stack's: a message, an event, or an object of its
    bucket that its key filter passes."""
    if (
        row.bucket is not None
        and row.object_key is not None
        and not (
            row.bucket == settings.ingest_bucket and settings.key_filter.matches(row.object_key)
        )
    ):
        logger.warning(
            "open work outside the stack's bucket or key filter: left alone",
            extra={"idempotency_key": row.pk, "key_filter": settings.key_filter.describe()},
        )
        return False
    return True


def _original_input(row: LedgerRow, clients: Clients) -> Any:
    """What the processor starts again with for a row: a work item for an object; for a
    message or an event the copy Claim kept on the row (compact JSON text); for a row
    claimed before Claim kept one, the input of the execution that holds it (never an
    EXPRESS one's: DescribeExecution does not serve them)."""
    work_item = row_work_item(row)
    if work_item is not None:
        return work_item
    if row.original_event is not None:
        try:
            return json.loads(row.original_event)
        except ValueError:
            logger.error("the row's original_event is not JSON", extra={"idempotency_key": row.pk})
            return None
    return clients.processor.execution_input(row.lock_owner or "")


@dataclass
class _Sweep:
    """What one call of the sweep hands each row: the run, its clients, the running
    counts, the pace, and until when a row it takes stays its own (``lock_until``,
    epoch seconds)."""

    run: AuditRun
    settings: AuditSettings
    clients: Clients
    counts: Counts
    resubmitted: list[str]
    budget: Budget
    lock_until: int


def _resubmit(row: LedgerRow, sweep: _Sweep) -> bool:
    """Start the processor again for a row. A start Step Functions refuses for its input
    is dead-lettered with the refusal (no later audit would get it started either)."""
    counts, clients = sweep.counts, sweep.clients
    execution_input = _original_input(row, clients)
    if execution_input is None:
        counts["resubmit_errors"] += 1
        logger.error(
            "cannot resubmit: the original input is gone (or the execution was EXPRESS)",
            extra={"idempotency_key": row.pk, "lock_owner": row.lock_owner},
        )
        return False
    name = resubmission_name("audit", sweep.run.audit_id, row.pk)
    try:
        started = clients.processor.start(name, execution_input, row.claims)
    except StartRefused as refused:
        counts["resubmit_refused"] += 1
        logger.error(
            "the resubmission was refused: dead-lettered",
            extra={"idempotency_key": row.pk, "error": str(refused)},
        )
        _dead_letter_refused(row, execution_input, refused, sweep)
        return False
    if started:
        sweep.resubmitted.append(row.pk)
    return started


def _pace(budget: Budget) -> None:
    pause = budget.wait(time.monotonic())
    if pause is None:
        raise _TimeUp
    time.sleep(pause)


def _dead_letter(row: LedgerRow, message: dict[str, Any], sweep: _Sweep) -> bool:
    """Send a row's DLQ message the way the processor does: take the row's lock with one
    write fenced on the row as read, send, then mark it FAILED and dead-lettered, fenced
    on that lock. False: the take was refused (the row changed since it was read: a
    delivery reclaimed it, took it over or dead-lettered it), and nothing was sent.

    Whoever sends holds the lock first, so a delivery's takeover (which needs a FAILED
    row, or an expired lock) and this sweep never both send. The message is built
    before the take, from the row as read: once taken, the row names this audit as
    its owner, not the execution whose input the message carries.

    A send that fails past the SDK's retries (the DLQ's KMS key refusing, throttling)
    is the sweep's DeadLetterFailed: the row is given back as it was read (the take
    undone, fenced on this audit's lock), counted in resubmit_errors (alarmed), and
    the sweep goes on with the next row; the next audit, or a batch-mode delivery,
    dead-letters it once the DLQ takes messages. (It used to stop the sweep, every
    run while the DLQ refused, so no row after it was ever retried.) Should the
    give-back fail too, the row stays PROCESSING under this audit's lock, and once
    that has expired the next sweep finds it stuck. Dying between the send and the
    mark leaves that row too: its second DLQ message is the price of never marking a
    row dead-lettered without one.
    """
    clients, audit_id = sweep.clients, sweep.run.audit_id
    if not clients.ledger.take(row, _now_ms(), audit_id, sweep.lock_until):
        logger.info(
            "changed since it was read: no DLQ message sent", extra={"idempotency_key": row.pk}
        )
        return False
    try:
        clients.dead_letters.send(message["body"], message["attributes"])
    except (PermanentError, TransientError) as undelivered:
        sweep.counts["resubmit_errors"] += 1
        logger.error(
            "the DLQ refused the dead letter: the row is left open for the next audit",
            extra={"idempotency_key": row.pk, "error": str(undelivered)},
        )
        _give_back(row, sweep)
        raise _Undelivered from undelivered
    error = str(message["attributes"].get("ERROR_MESSAGE") or "")
    if not clients.ledger.mark_dead_lettered(row.pk, audit_id, _now_ms(), error):
        # Only a lock that expired before this write lets another owner in: the lock
        # outlives the invocation, so this is a clock far off. Its message is sent.
        logger.error(
            "the audit's lock was taken over after its DLQ message was sent",
            extra={"idempotency_key": row.pk},
        )
    return True


class _Undelivered(Exception):
    """The DLQ refused a row's dead letter: the row was given back, and the sweep goes on."""


def _give_back(row: LedgerRow, sweep: _Sweep) -> None:
    try:
        given = sweep.clients.ledger.give_back(row, sweep.run.audit_id, _now_ms())
    except (PermanentError, TransientError) as failed:
        # Left under this audit's lock: the next sweep finds it stuck once that expires.
        logger.error(
            "the row could not be given back",
            extra={"idempotency_key": row.pk, "error": str(failed)},
        )
        return
    if not given:
        logger.error(
            "the audit's lock was lost before the give-back", extra={"idempotency_key": row.pk}
        )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _release_stuck(row: LedgerRow, sweep: _Sweep) -> None:
    settings, clients, counts = sweep.settings, sweep.clients, sweep.counts
    if row.attempts >= settings.max_attempts:
        message = stuck_dead_letter_message(
            row, _dead_letter_event(row, clients), settings.processor_arn
        )
        if not _dead_letter(row, message, sweep):
            counts["stuck_left_alone"] += 1  # reclaimed, taken over or dead-lettered since
            return
        counts["stuck_released"] += 1
        counts["stuck_dead_lettered"] += 1
        logger.warning("stuck work dead-lettered", extra={"idempotency_key": row.pk})
        return
    _pace(sweep.budget)  # before the release: a row the call has no time for stays as it is
    if not clients.ledger.release_stuck(row, _now_ms(), sweep.run.audit_id):
        counts["stuck_left_alone"] += 1  # reclaimed or renewed since the index was read
        return
    counts["stuck_released"] += 1
    # Released first: should this start fail, the retried page (or the next
    # audit) finds the row FAILED and resubmits it from there.
    _resubmit(row, sweep)
    logger.info("stuck lock released and resubmitted", extra={"idempotency_key": row.pk})


def _retry_failed(row: LedgerRow, sweep: _Sweep) -> None:
    if row.dead_lettered or row.expires_at < sweep.run.now:
        return  # not open work (the index lags a write), or expired: a new delivery's
    if row.attempts >= sweep.settings.max_attempts:
        _dead_letter_failed(row, sweep)
        return
    _pace(sweep.budget)
    if _resubmit(row, sweep):
        sweep.counts["failed_resubmitted"] += 1
        logger.info("failed work resubmitted", extra={"idempotency_key": row.pk})


def _dead_letter_event(row: LedgerRow, clients: Clients) -> Any:
    """The original event a DLQ message of a row carries: the row's copy, else the input of
    the execution that held it (None when neither is there)."""
    if row.original_event is not None:
        try:
            return json.loads(row.original_event)
        except ValueError:
            return None
    return clients.processor.execution_input(row.lock_owner or "")


def _dead_letter_failed(row: LedgerRow, sweep: _Sweep) -> None:
    """A FAILED row at MaxAttempts still open: its DLQ message was never sent.

    The processor ends such work in DeadLetterFailed (SendMessage failed past
    its retries) and leaves the row open; nothing but a batch-mode redelivery
    takes it over at MaxAttempts, so the audit dead-letters it (_dead_letter:
    take, send, mark), fenced on the row as the index showed it.
    """
    message = failed_dead_letter_message(
        row, _dead_letter_event(row, sweep.clients), sweep.settings.processor_arn
    )
    if not _dead_letter(row, message, sweep):
        return
    sweep.counts["failed_dead_lettered"] += 1
    logger.warning("failed work dead-lettered", extra={"idempotency_key": row.pk})


def _dead_letter_refused(
    row: LedgerRow, execution_input: Any, refused: StartRefused, sweep: _Sweep
) -> None:
    """A resubmission StartExecution refused for its input: the row is dead-lettered with
    the refusal (_dead_letter, fenced on the row as read now, FAILED: a stuck row was
    released just before), and the sweep goes on. The event goes whole into the
    message when SQS takes it, else an excerpt (the execution's history keeps it whole)."""
    current = sweep.clients.ledger.current(row.pk)
    if (
        not isinstance(current, LedgerRow)
        or current.status != Status.FAILED
        or current.dead_lettered
    ):
        logger.info("changed since the index was read", extra={"idempotency_key": row.pk})
        return
    message = refused_dead_letter_message(
        current,
        execution_input,
        sweep.settings.processor_arn,
        refused.code,
        f"StartExecution refused the audit's resubmission: {refused.reason}",
    )
    if _dead_letter(current, message, sweep):
        sweep.counts["failed_dead_lettered"] += 1


# ---- the report -------------------------------------------------------------------


def _walk(
    settings: AuditSettings,
    clients: Clients,
    run: AuditRun,
    objects: dict[str, Any],
    deadline: float,
) -> tuple[Counts, list[str], dict[str, Any]]:
    """The batches' counts, their resubmitted sample, and what the report says of the walk.

    The Distributed Map exported its children's results to S3 (ResultWriter):
    they are read a child at a time (a failed child's result holds its whole
    input) and the succeeded batches' outputs summed. A failed batch's objects
    are counted as not audited (the next run walks them again), and what it
    resubmitted before it died is counted all the same (_recount). A walk that
    failed (too many failed batches) hands on no result, but its results were
    exported all the same (input-output-resultwriter.html): they are found under
    the run's prefix, so what the batches that ran did is still counted.
    """
    walk: dict[str, Any] = {
        "source": objects.get("source", ""),
        "source_reason": objects.get("sourceReason", ""),
        "prefix": objects.get("prefix", ""),
        "batches": 0,
    }
    counts = add_counts()
    resubmitted: list[str] = []
    if objects.get("error"):
        walk["error"] = f"{objects['error']}: {str(objects.get('cause') or '')[:1000]}"
    where = objects.get("results") or {}
    if not where.get("Bucket") or not where.get("Key"):
        found = clients.reports.find_manifest(f"{RESULTS_PREFIX}{run.audit_id}/")
        if found is None:
            return counts, resubmitted, walk
        where = {"Bucket": clients.reports.bucket, "Key": found}
    for status, entry in clients.reports.map_run_entries(str(where["Bucket"]), str(where["Key"])):
        walk["batches"] += 1
        if status == "SUCCEEDED":
            if isinstance(entry, dict):
                counts = add_counts(counts, entry.get("counts") or {})
                resubmitted = _more(resubmitted, entry.get("resubmittedSample") or [])
            continue
        counts["failed_batches"] += 1
        counts["unaudited_objects"] += batch_size(entry)
        if counts["failed_batches"] <= 5:
            logger.error(
                "an audit batch failed",
                extra={"error": entry.get("Error"), "cause": str(entry.get("Cause"))[:500]},
            )
        if time.monotonic() < deadline:
            recounted = _recount(settings, clients, run, entry)
            counts = add_counts(counts, recounted.counts)
            resubmitted = _more(resubmitted, recounted.resubmitted_sample)
        else:
            logger.warning("no time left to recount a failed batch's resubmissions")
    return counts, resubmitted, walk


def _more(sample_: list[str], keys: Iterable[str]) -> list[str]:
    return [*sample_, *keys][:SAMPLE_LIMIT]


def _recount(settings: AuditSettings, clients: Clients, run: AuditRun, failed: Any) -> Tally:
    """What a failed batch resubmitted before it died, read back from the ledger.

    A batch can start executions and then fail (an error its Retry does not
    list, its timeout): its output, and so its counts, are lost, and by the next
    audit its lost uploads are processed and look "ok". A resubmission of this
    audit claims the upload's row under this audit's name for the key
    (resubmission_name): a row whose claims hold that name was resubmitted by
    this run, as missing when that claim made the row (the first claim), as
    failed otherwise. The lost-work alarm counts them like any batch's.
    """
    value = _parsed_input(failed.get("Input") if isinstance(failed, dict) else None)
    items = value.get("Items") if isinstance(value, dict) else None
    facts = value.get("BatchInput") if isinstance(value, dict) else None
    counts = add_counts()
    if not isinstance(items, list) or not isinstance(facts, dict):
        return Tally(counts, [])
    batch = Batch(
        items=[i for i in items if isinstance(i, dict)],
        source=facts.get("source"),
        versioned=bool(facts.get("versioned")),
        watermark=Watermark.from_json(facts.get("watermark")),
    )
    window = _window(run, settings, batch.watermark)
    bucket = settings.ingest_bucket
    keys = []
    for obj in _batch_objects(batch, settings, clients):
        if age_verdict(obj, window) is not None:
            continue
        if obj.version_id != NULL_VERSION:
            keys.append(idempotency_key(bucket, obj))
        else:
            keys.append(_unversioned_row(obj, window, bucket, clients)[0])
    resubmitted = []
    for key, row in clients.ledger.batch_get(keys, with_claims=True).items():
        if isinstance(row, UnreadableRow):
            continue  # its batch died: the next audit meets (and counts) it again
        name = resubmission_name("audit", run.audit_id, key)
        claims = [execution_name(c) for c in row.claims]
        if name not in claims:
            continue
        counts["missing_resubmitted" if claims[0] == name else "failed_resubmitted"] += 1
        resubmitted.append(key)
    if resubmitted:
        logger.warning(
            "a failed batch had resubmitted work before it failed",
            extra={"resubmitted": len(resubmitted)},
        )
    return Tally(counts, resubmitted)


def _parsed_input(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _not_advanced(
    settings: AuditSettings, walk: dict[str, Any], counts: Counts, seen_at_ms: float | None
) -> str | None:
    """Why this run's walk may not move the watermark (None: it may).

    Only a walk that judged every object it was given moves it: a failed walk,
    a failed batch (its objects unaudited), a resubmission deferred or that
    failed to start (its object judged but not started again) would leave an
    upload behind the watermark that no later audit looks at again.
    """
    if seen_at_ms is None:
        return "the plan did not say when the objects were seen"
    if walk.get("error"):
        return "the bucket walk failed"
    if walk.get("source") not in ("listing", "inventory"):
        return "no bucket walk"
    if walk.get("prefix") != settings.key_filter.listing_prefix(""):
        return f"a run over the prefix {walk.get('prefix')!r} walks part of the bucket"
    for count in ("failed_batches", "resubmit_deferred", "resubmit_errors"):
        if counts[count]:
            return f"{count} {counts[count]}: the next audit judges those objects again"
    return None


def _advance_watermark(
    settings: AuditSettings,
    clients: Clients,
    run: AuditRun,
    walk: dict[str, Any],
    counts: Counts,
    seen_at_ms: float | None,
) -> dict[str, Any]:
    """Move the watermark to what this walk judged, when it judged all it was given, and
    say what it is (the report's ``watermark``)."""
    why_not = _not_advanced(settings, walk, counts, seen_at_ms)
    if why_not is not None or seen_at_ms is None:
        logger.warning("the audit's watermark stays", extra={"reason": why_not})
        return {"advanced": False, "reason": why_not}
    # Read again: an overlapping run may have moved it since the plan. One that cannot
    # be read now is overwritten with this run's reach (the run judged its whole window
    # only if the plan could not read it either; if it could, the reach is still true:
    # it stops at what this run judged).
    stored, unreadable = read_watermark(settings, clients)
    advanced = stored.advanced(reached(_window(run, settings), seen_at_ms / 1000))
    clients.reports.put(_watermark_key(settings), advanced.as_json())
    said: dict[str, Any] = {"advanced": True, **advanced.as_json()}
    if unreadable is not None:
        said["unreadable"] = unreadable
    return said


def report(
    settings: AuditSettings,
    clients: Clients,
    audit_id: str,
    started_at_ms: float,
    objects: dict[str, Any],
    locks: dict[str, Any],
    remaining_seconds: float | None = None,
    seen_at_ms: float | None = None,
    watermark_unreadable: str | None = None,
    inventory_error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Sum the batches and the lock sweep, write reports/audit/<date>.json, emit the metrics,
    and advance the watermark when the walk judged every object it was given.

    ``objects``: what the bucket walk handed on (its results' location, or its
    error); ``locks``: the sweep's last page (its counts and sample), or where
    it stopped and why when it failed; ``seen_at_ms``: when the walked objects were
    seen (the plan's; None: the watermark stays); ``watermark_unreadable``: why the
    plan could not use the stored watermark (the run judged its whole window). That
    is the report's ``watermark.unreadable``, the AuditWatermarkUnreadable metric, and
    the run's named failure after the report (AuditFailedAlarm). ``inventory_error``:
    why the inventory report could not be read (SelectWindow's error; the run listed
    the bucket instead): the report's ``source_reason`` says it.
    """
    run = AuditRun(audit_id=audit_id, started_at_ms=started_at_ms)
    seconds = _FUNCTION_TIMEOUT_SECONDS if remaining_seconds is None else remaining_seconds
    deadline = time.monotonic() + seconds - 2 * _TIMEOUT_MARGIN_SECONDS
    counts, resubmitted, walk = _walk(settings, clients, run, objects, deadline)
    if inventory_error:
        why = f"{inventory_error.get('Error')}: {str(inventory_error.get('Cause') or '')[:1000]}"
        walk["source_reason"] = f"{walk['source_reason']}: {why}"
        logger.warning(
            "the inventory report could not be read: the bucket was listed", extra={"reason": why}
        )
    # The rows the inventory's window left out, counted where they were left.
    counts = add_counts(counts, objects.get("selected") or {})
    watermark = _advance_watermark(settings, clients, run, walk, counts, seen_at_ms)
    if watermark_unreadable and "unreadable" not in watermark:
        watermark["unreadable"] = watermark_unreadable
    counts = add_counts(counts, locks.get("counts") or {})
    resubmitted = _more(resubmitted, locks.get("resubmittedSample") or [])
    started = datetime.fromtimestamp(started_at_ms / 1000, UTC)
    result: dict[str, Any] = {
        **{k: counts[k] for k in COUNT_KEYS},
        "audit": audit_id,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "bucket": settings.ingest_bucket,
        **walk,
        "watermark": watermark,
        "resubmitted_sample": resubmitted,
    }
    if locks.get("error"):
        result["sweep_error"] = f"{locks['error']}: {str(locks.get('cause') or '')[:1000]}"
    key = f"{settings.report_prefix}{started.date().isoformat()}.json"
    result["report"] = clients.reports.put(key, result)
    for name, value in (
        ("AuditScanned", counts["scanned"]),
        ("AuditMissing", counts["missing_resubmitted"]),
        ("AuditFailedResubmitted", counts["failed_resubmitted"]),
        ("AuditResubmitted", counts["missing_resubmitted"] + counts["failed_resubmitted"]),
        ("StuckReleased", counts["stuck_released"]),
        ("AuditResubmitErrors", counts["resubmit_errors"]),
        ("AuditResubmitRefused", counts["resubmit_refused"]),
        ("AuditFailedDeadLettered", counts["failed_dead_lettered"]),
        ("AuditResubmitDeferred", counts["resubmit_deferred"]),
        ("AuditSweepDeferred", counts["sweep_deferred"]),
        ("AuditFailedBatches", counts["failed_batches"]),
        ("AuditWatermarkUnreadable", 1 if "unreadable" in watermark else 0),
    ):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("audit report", extra={"report": result})
    return result
