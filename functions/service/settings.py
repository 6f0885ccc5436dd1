"""Environment variables parsed once into validated settings objects."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from service.errors import ConfigurationError


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is required")
    return value


@dataclass(frozen=True)
class ProcessorSettings:
    """Where the bundled image processor writes, and how large."""

    output_bucket: str
    output_prefix: str
    max_dimension: int
    record_prefix: str = "records/"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProcessorSettings:
        raw_dimension = _required(env, "OUTPUT_MAX_DIMENSION")
        try:
            max_dimension = int(raw_dimension)
        except ValueError:
            raise ConfigurationError(
                f"OUTPUT_MAX_DIMENSION must be an integer, not {raw_dimension!r}"
            ) from None
        if max_dimension < 16:
            raise ConfigurationError("OUTPUT_MAX_DIMENSION must be at least 16")
        return cls(
            output_bucket=_required(env, "OUTPUT_BUCKET"),
            output_prefix=env.get("OUTPUT_PREFIX", "processed/"),
            max_dimension=max_dimension,
            record_prefix=env.get("RECORD_PREFIX", "records/"),
        )


@lru_cache(maxsize=1)
def processor_settings() -> ProcessorSettings:
    return ProcessorSettings.from_env(os.environ)


def _number(env: Mapping[str, str], name: str, minimum: float) -> float:
    raw = _required(env, name)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, not {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum:g}")
    return value


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
            max_attempts=int(_number(env, "MAX_ATTEMPTS", 1)),
            recent_cutoff_seconds=_number(env, "AUDIT_RECENT_CUTOFF_HOURS", 0) * 3600,
            retention_seconds=_number(env, "RETENTION_DAYS", 1) * 86400,
            stuck_margin_seconds=_number(env, "AUDIT_STUCK_MARGIN_SECONDS", 0),
        )


@lru_cache(maxsize=1)
def audit_settings() -> AuditSettings:
    return AuditSettings.from_env(os.environ)
