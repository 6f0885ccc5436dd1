"""What the functions log and measure: JSON lines with the key and the execution, EMF metrics."""

from __future__ import annotations

import io
import json
from typing import Any

from onceflow.local.engine import LocalEngine
from tests.helpers import AUDIT, idempotency_key, s3_event, upload

MACHINE = "ProcessorStateMachine"


def _records(log: io.StringIO) -> list[dict[str, Any]]:
    records = []
    for line in log.getvalue().splitlines():
        line = line.strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def _log_lines(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "level" in r and "_aws" not in r]


def _metric_names(records: list[dict[str, Any]]) -> list[str]:
    return [
        metric["Name"]
        for r in records
        if "_aws" in r
        for directive in r["_aws"]["CloudWatchMetrics"]
        for metric in directive["Metrics"]
    ]


def test_every_processor_log_line_carries_the_key_and_the_execution() -> None:
    log = io.StringIO()
    with LocalEngine(function_log=log) as engine:
        version = upload(engine, "watch/one.png")
        result = engine.execute(MACHINE, s3_event(engine, "watch/one.png", version))
        assert result.status == "SUCCEEDED"
        key = idempotency_key(engine, "watch/one.png", version)
        # The same work again, straight to the function: the output is already there.
        payload = {
            "workItem": {
                "idempotencyKey": key,
                "bucket": engine.ref("IngestBucket"),
                "key": "watch/one.png",
                "versionId": version,
            },
            "lockToken": "arn:aws:states:us-east-1:123456789012:execution:x:again",
            "attempt": 2,
        }
        second, error = engine.invoke("ProcessorFunction", payload)
        assert error is None and second["created"] is False
    records = _records(log)
    lines = _log_lines(records)
    assert lines, "the processor logged"
    first = [line for line in lines if line.get("execution_arn") == result.arn]
    assert first and any(line["message"] == "processed" for line in first)
    for line in lines:
        assert line["idempotency_key"] == key, line
        assert line["execution_arn"] in (result.arn, payload["lockToken"]), line
        assert line["service"] == "onceflow" and "function_request_id" in line
    assert _metric_names(records) == ["OutputWritten", "OutputExisted"]


def test_a_permanent_error_is_logged_with_its_key_and_counted() -> None:
    log = io.StringIO()
    with LocalEngine(function_log=log) as engine:
        version = upload(engine, "watch/not-an-image.png", b"this is not a picture")
        result = engine.execute(MACHINE, s3_event(engine, "watch/not-an-image.png", version))
        assert result.outcome == "DeadLettered"
    records = _records(log)
    errors = [line for line in _log_lines(records) if line["level"] == "ERROR"]
    assert errors and errors[0]["execution_arn"] == result.arn
    assert "PermanentError" in json.dumps(errors[0])
    assert _metric_names(records) == ["PermanentError"]


def test_every_audit_log_line_carries_the_audit_execution() -> None:
    # Nothing to resubmit: no processor runs beside the audit. (Functions that
    # run at the same time in the local engine share one Logger, so their keys
    # can cross; on Lambda each invocation has a process of its own.)
    log = io.StringIO()
    with LocalEngine(parameters={"AuditRecentCutoffHours": "0"}, function_log=log) as engine:
        version = upload(engine, "seen/one.png")
        assert engine.execute(MACHINE, s3_event(engine, "seen/one.png", version)).status == (
            "SUCCEEDED"
        )
        log.seek(0)
        log.truncate()
        audit = engine.execute(AUDIT, {})
        assert audit.status == "SUCCEEDED"
        assert audit.output["ok"] == 1 and audit.output["missing_resubmitted"] == 0
    records = _records(log)
    audit_lines = _log_lines(records)
    # Pages with nothing to resubmit log nothing at INFO; the report always logs.
    assert "report" in {line["action"] for line in audit_lines}
    assert {line["execution_arn"] for line in audit_lines} == {audit.arn}
    assert {line["audit"] for line in audit_lines} == {audit.name}
    assert "AuditScanned" in _metric_names(records)
