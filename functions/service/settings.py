"""Environment variables parsed once into validated settings objects."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from service.errors import ConfigurationError
from service.logic.key_filter import KeyFilter


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is required")
    return value


def _number(env: Mapping[str, str], name: str, minimum: float, integer: bool = False) -> float:
    raw = _required(env, name)
    try:
        value = float(int(raw) if integer else float(raw))
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{name} must be {kind}, not {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum:g}")
    return value


def _optional(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    if not env.get(name, "").strip():
        return default
    return _number(env, name, minimum)


@dataclass(frozen=True)
class ProcessorSettings:
    """Where the bundled image processor writes, and how large."""

    output_bucket: str
    output_prefix: str
    max_dimension: int
    record_prefix: str = "records/"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProcessorSettings:
        return cls(
            output_bucket=_required(env, "OUTPUT_BUCKET"),
            output_prefix=env.get("OUTPUT_PREFIX", "processed/"),
            max_dimension=int(_number(env, "OUTPUT_MAX_DIMENSION", 16, integer=True)),
            record_prefix=env.get("RECORD_PREFIX", "records/"),
        )


@lru_cache(maxsize=1)
def processor_settings() -> ProcessorSettings:
    return ProcessorSettings.from_env(os.environ)


@dataclass(frozen=True)
class AuditSettings:
    """What the audit walks, what it may resubmit, and where it reports."""

    ingest_bucket: str
    ledger_table: str
    open_work_index: str
    processor_arn: str
    dead_letter_queue_url: str
    report_bucket: str
    report_prefix: str
    max_attempts: int
    recent_cutoff_seconds: float
    retention_seconds: float
    stuck_margin_seconds: float
    object_content_index: str = "ObjectContent"
    late_event_seconds: float = 0.0
    # Where S3 delivers the bucket's inventory reports, in the report bucket
    # (<prefix>/<source bucket>/<configuration id>/); empty: no inventory.
    inventory_prefix: str = ""
    # A report older than this is not used (the listing is): objects uploaded since
    # it was taken are in none, and one that misses too many days misses the
    # retention window.
    inventory_max_age_seconds: float = 48 * 3600.0
    # All batches together start at most this many processor executions a second.
    resubmits_per_second: float = 25.0
    max_concurrency: int = 1
    # How long one batch may spend resubmitting (its EXPRESS child lives 5 minutes).
    batch_seconds: float = 240.0
    # The open-work sweep: rows read per index query; how long one call of SweepLocks sweeps
    # (the function's Timeout bounds it too); how long after the run's start the sweep stops
    # and leaves the rest to the next audit (its history grows with its duration, never with
    # the number of open rows).
    sweep_page_size: int = 200
    sweep_call_seconds: float = 540.0
    sweep_seconds: float = 20 * 3600.0
    # KeyPrefix and KeySuffix: the keys the stack's rule passes; the audit walks no other.
    key_filter: KeyFilter = field(default_factory=KeyFilter)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuditSettings:
        return cls(
            ingest_bucket=_required(env, "INGEST_BUCKET"),
            ledger_table=_required(env, "LEDGER_TABLE"),
            open_work_index=env.get("OPEN_WORK_INDEX", "OpenWork"),
            processor_arn=_required(env, "PROCESSOR_STATE_MACHINE_ARN"),
            dead_letter_queue_url=_required(env, "DEAD_LETTER_QUEUE_URL"),
            report_bucket=_required(env, "REPORT_BUCKET"),
            report_prefix=env.get("REPORT_PREFIX", "reports/audit/"),
            max_attempts=int(_number(env, "MAX_ATTEMPTS", 1, integer=True)),
            recent_cutoff_seconds=_number(env, "AUDIT_RECENT_CUTOFF_HOURS", 0) * 3600,
            retention_seconds=_number(env, "RETENTION_DAYS", 1) * 86400,
            stuck_margin_seconds=_number(env, "AUDIT_STUCK_MARGIN_SECONDS", 0),
            object_content_index=env.get("OBJECT_CONTENT_INDEX", "ObjectContent"),
            # The longest any configured source can still deliver an upload's event.
            late_event_seconds=max(
                _number(env, "INGRESS_MAX_EVENT_AGE_SECONDS", 0),
                _optional(env, "SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS", 0, 0),
            ),
            inventory_prefix=env.get("AUDIT_INVENTORY_PREFIX", "").strip(),
            inventory_max_age_seconds=_optional(env, "AUDIT_INVENTORY_MAX_AGE_HOURS", 48, 1) * 3600,
            resubmits_per_second=_optional(env, "AUDIT_RESUBMITS_PER_SECOND", 25, 0.001),
            max_concurrency=int(_optional(env, "AUDIT_MAX_CONCURRENCY", 1, 1)),
            batch_seconds=_optional(env, "AUDIT_BATCH_SECONDS", 240, 0.01),
            sweep_page_size=int(_optional(env, "AUDIT_SWEEP_PAGE_SIZE", 200, 1)),
            sweep_call_seconds=_optional(env, "AUDIT_SWEEP_CALL_SECONDS", 540, 0.01),
            sweep_seconds=_optional(env, "AUDIT_SWEEP_HOURS", 20, 0.001) * 3600,
            key_filter=KeyFilter(
                prefix=env.get("INGEST_KEY_PREFIX", ""), suffix=env.get("INGEST_KEY_SUFFIX", "")
            ),
        )


@lru_cache(maxsize=1)
def audit_settings() -> AuditSettings:
    return AuditSettings.from_env(os.environ)
