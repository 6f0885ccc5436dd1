"""Audit Lambda: the plan, one batch of the bucket walk, a while of the open-work sweep, the report.

The audit state machine calls it once to plan the run, once per batch of up
to 1000 objects (each batch is one EXPRESS child of a Distributed Map), once
per call of the open-work sweep, which sweeps pages for up to 540 s (the state
carries the cursor and the running counts between calls), and once for the
report. This module reads the state's event, calls the use case
(service/usecases/audit.py) and shapes its answer for the next state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from service.errors import PermanentError, json_kind
from service.logic.audit import Watermark
from service.observability import logger, metrics, tracer
from service.settings import AuditSettings, audit_settings
from service.usecases import audit
from service.usecases.audit import AuditRun, Batch, Clients, Tally

_clients: Clients | None = None


def _get_clients() -> Clients:
    global _clients
    if _clients is None:
        _clients = Clients(audit_settings())
    return _clients


def _run(event: dict[str, Any]) -> AuditRun:
    return AuditRun(audit_id=str(event["auditId"]), started_at_ms=float(event["startedAt"]))


def _tally(tally: Tally) -> dict[str, Any]:
    return {"counts": tally.counts, "resubmittedSample": tally.resubmitted_sample}


def plan(
    event: dict[str, Any], settings: AuditSettings, clients: Clients, context: Any
) -> dict[str, Any]:
    """Plan: the run's moment, the bucket's versioning, and where its objects come from."""
    started_at = event.get("startedAt")
    planned = audit.plan(
        settings,
        clients,
        started_at_ms=int(started_at) if started_at else None,
        prefix=str(event.get("prefix") or ""),
        asked_for=event.get("source"),
    )
    return {
        "startedAt": planned.started_at_ms,
        "prefix": planned.prefix,
        "versioned": planned.versioned,
        "source": planned.source,
        "sourceReason": planned.source_reason,
        "manifest": planned.manifest,
        "seenAt": planned.seen_at_ms,
        "watermark": planned.watermark.as_json(),
        "watermarkUnreadable": planned.watermark_unreadable,
        # What the run becomes should the inventory report prove unreadable (SelectWindow's
        # Catch merges it in): the listing, whose objects are seen at the run's start.
        "listing": {
            "source": "listing",
            "seenAt": planned.started_at_ms,
            "sourceReason": "the inventory report could not be read, so the bucket was listed",
        },
    }


def select(
    event: dict[str, Any], settings: AuditSettings, clients: Clients, context: Any = None
) -> dict[str, Any]:
    """The inventory report's window (SelectWindow): the file the batches read, if any."""
    manifest = event.get("manifest") or {}
    remaining = None if context is None else context.get_remaining_time_in_millis() / 1000
    window = audit.select_window(
        settings,
        clients,
        _run(event),
        str(manifest.get("key") or ""),
        Watermark.from_json(event.get("watermark")),
        remaining,
    )
    return {"file": window.file, "rows": window.rows, "counts": window.counts}


def audit_batch(
    event: dict[str, Any], settings: AuditSettings, clients: Clients, context: Any = None
) -> dict[str, Any]:
    """One batch of the Distributed Map (AuditInventoryBatch, AuditListedBatch)."""
    batch = Batch(
        items=[i for i in event.get("items") or [] if isinstance(i, dict)],
        source=event.get("source"),
        versioned=bool(event.get("versioned")),
        watermark=Watermark.from_json(event.get("watermark")),
    )
    remaining = None if context is None else context.get_remaining_time_in_millis() / 1000
    return _tally(audit.audit_batch(settings, clients, _run(event), batch, remaining))


def sweep_locks(
    event: dict[str, Any], settings: AuditSettings, clients: Clients, context: Any = None
) -> dict[str, Any]:
    """One call of the open-work sweep (SweepLocks): the event goes on, with the new cursor
    and tally."""
    so_far = Tally(
        counts=dict(event.get("counts") or {}),
        resubmitted_sample=list(event.get("resubmittedSample") or []),
    )
    remaining = None if context is None else context.get_remaining_time_in_millis() / 1000
    page = audit.sweep_locks(settings, clients, _run(event), event.get("cursor"), so_far, remaining)
    return {
        **event,
        "cursor": page.cursor,
        "done": page.cursor is None,
        "deferred": page.deferred,
        **_tally(page.tally),
    }


def report(
    event: dict[str, Any], settings: AuditSettings, clients: Clients, context: Any = None
) -> dict[str, Any]:
    """The report (Report): written to S3, and the state machine's output. The run's facts
    come in its plan (``plan``: the Plan state's output as SelectWindow's Catch left it)."""
    given = event.get("plan")
    planned: dict[str, Any] = given if isinstance(given, dict) else event
    unreadable = planned.get("watermarkUnreadable")
    return audit.report(
        settings,
        clients,
        audit_id=str(event.get("auditId", "")),
        started_at_ms=float(planned["startedAt"]),
        objects=event.get("objects") or {},
        locks=event.get("locks") or {},
        remaining_seconds=None
        if context is None
        else context.get_remaining_time_in_millis() / 1000,
        seen_at_ms=float(planned["seenAt"]) if planned.get("seenAt") else None,
        watermark_unreadable=str(unreadable) if unreadable else None,
        inventory_error=planned.get("inventoryError") or None,
    )


# The actions the audit state machine's states ask for, by their event's "action".
ACTIONS: dict[str, Callable[[dict[str, Any], AuditSettings, Clients, Any], dict[str, Any]]] = {
    "plan": plan,
    "select": select,
    "batch": audit_batch,
    "locks": sweep_locks,
    "report": report,
}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if not isinstance(event, dict):  # Lambda hands on any JSON value it is invoked with
        raise PermanentError(
            f"the event is {json_kind(event)}, not an object with the audit's action"
        )
    action = ACTIONS.get(str(event.get("action")))
    if action is None:
        raise PermanentError(f"unknown audit action {event.get('action')!r}")
    logger.append_keys(
        audit=event.get("auditId"),
        action=event.get("action"),
        execution_arn=event.get("executionArn"),
    )
    return action(event, audit_settings(), _get_clients(), context)
