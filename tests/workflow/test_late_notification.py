"""An unversioned bucket read through an SQS source: a notification days late is no second effect.

Without a version id an upload's event is keyed on its sequencer, and the audit,
which sees no sequencer, resubmits a lost upload under its ETag and last-modified
time (docs/audit.md). The two keys do not meet, so the audit must wait as long as
any configured source can still hold the upload's event: an SQS source queue keeps
a message up to 14 days, its DLQ up to 14 days from the same enqueue time, and one
move back (SQS redrive) starts a new 14 days.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote_plus

import pytest

from onceflow.local.engine import LocalEngine
from onceflow.view.units import units
from tests.helpers import dlq_messages, forget_watermark, run_audit
from tests.workflow.test_existing_bucket import (
    BUCKET,
    age_uploads,
    effects_by_object,
    make_users_bucket,
    put,
)

PARAMETERS = {
    "ExistingBucketName": BUCKET,
    "SqsSource": "create",
    "AuditRecentCutoffHours": "0",
}
KEY = "late/photo 1.png"


BATCH_MODE = {
    "SqsBatchMode": "true",
    "ProcessorTimeoutSeconds": "40",
}


@pytest.fixture(params=[{}, BATCH_MODE], ids=["one-per-execution", "batch-mode"])
def unversioned(request: pytest.FixtureRequest) -> Iterator[LocalEngine]:
    parameters = {**PARAMETERS, **request.param}
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        make_users_bucket(engine, versioning=None)
        yield engine


def notification(engine: LocalEngine, key: str) -> dict[str, Any]:
    """S3's classic Object Created notification of an upload to the unversioned bucket, as S3
    sends it to an SQS queue (events/sqs-s3-notification.json: no versionId without versioning)."""
    head = engine.client("s3").head_object(Bucket=BUCKET, Key=key)
    body = json.loads(json.loads((_events() / "sqs-s3-notification.json").read_text())[0]["body"])
    s3 = body["Records"][0]["s3"]
    s3["bucket"].update({"name": BUCKET, "arn": f"arn:aws:s3:::{BUCKET}"})
    s3["object"] = {
        "key": quote_plus(key, safe="/"),
        "size": head["ContentLength"],
        "eTag": str(head["ETag"]).strip('"'),
        "sequencer": "0062E99A88DC407460",
    }
    return dict(body)


def _events() -> Any:
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "events"


def send(engine: LocalEngine, body: dict[str, Any]) -> None:
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps(body)
    )


def test_a_notification_two_days_late_is_processed_once(unversioned: LocalEngine) -> None:
    # GIVEN an upload whose notification waits in the source queue (the pipe stopped, a
    # backlog, a move back from the source DLQ): nothing is processed yet
    put(unversioned, KEY)
    send(unversioned, notification(unversioned, KEY))
    # WHEN the audit runs two days later, the notification still in the queue
    age_uploads(unversioned, days=2)
    report = run_audit(unversioned).output
    # AND the pipe runs again and delivers the two-day-late notification
    started = unversioned.pump_pipes()
    results = [unversioned.wait(arn) for arn in started]
    # THEN the upload has one effect: the notification's
    assert effects_by_object(unversioned) == Counter({KEY: 1})
    # (one message: the execution's outcome, or its one iteration's in the batch mode)
    assert len(results) == 1 and [u.end_state for u in units(results[0])] == ["Processed"]
    # AND the audit had left it alone, as the queue may still have held its event
    assert report["missing_resubmitted"] == 0 and report["skipped_recent"] == 1
    # AND audits run once no source can hold its event any longer, and again
    # (the uploads dated back, not the clock moved: the first audit's watermark forgotten;
    # the second judges the window again)
    age_uploads(unversioned, days=29.5)
    forget_watermark(unversioned)
    first = run_audit(unversioned).output
    forget_watermark(unversioned)
    second = run_audit(unversioned).output
    # THEN they find the upload processed under its event's key and resubmit nothing
    assert (first["ok"], first["missing_resubmitted"]) == (1, 0)
    assert (second["ok"], second["missing_resubmitted"]) == (1, 0)
    # AND the upload had one effect, none dead-lettered
    assert effects_by_object(unversioned) == Counter({KEY: 1})
    assert dlq_messages(unversioned) == []


def test_a_lost_notification_is_found_once_no_source_can_hold_it(
    unversioned: LocalEngine,
) -> None:
    # GIVEN an upload whose notification never arrives
    put(unversioned, KEY)
    # WHEN the audit runs inside the window, past the longest hold of the source queue
    # (RetentionDays 30: the window is one day wide, the daily audit's interval)
    age_uploads(unversioned, days=29.5)
    report = run_audit(unversioned).output
    # THEN it resubmits the upload once, and a second audit finds it processed
    assert report["missing_resubmitted"] == 1
    forget_watermark(unversioned)  # the second judges the window again
    assert run_audit(unversioned).output["ok"] == 1
    assert effects_by_object(unversioned) == Counter({KEY: 1})
