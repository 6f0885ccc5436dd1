"""`onceflow redrive` of an unversioned upload's event the audit has taken over: one effect.

Without a version id an upload's event is keyed on its sequencer, and the audit,
which sees no sequencer, resubmits a lost upload under its ETag and last-modified
time once the upload is older than its wait (docs/audit.md). The EventBridge rules'
DLQ keeps an event 14 days, the audit waits a day; a source DLQ message moved back
starts a new 14 days past the audit's 28.5. Redrive keeps such an event in its DLQ
instead of processing the upload a second time under the other key.
"""

from __future__ import annotations

import datetime
import io
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow import ops
from onceflow.local.engine import LocalEngine
from onceflow.local.target import LocalTarget
from tests.helpers import MACHINE, run_audit
from tests.workflow.test_existing_bucket import (
    BUCKET,
    PARAMETERS,
    age_uploads,
    effects_by_object,
    make_users_bucket,
    put,
)
from tests.workflow.test_late_notification import PARAMETERS as SQS_PARAMETERS
from tests.workflow.test_late_notification import notification

KEY = "incoming/late.png"


@pytest.fixture
def unversioned() -> Iterator[LocalEngine]:
    with LocalEngine(parameters=PARAMETERS, function_log=io.StringIO(), time_scale=0.0) as engine:
        make_users_bucket(engine, versioning=None)
        yield engine


def queue_messages(engine: LocalEngine, logical_id: str) -> list[dict[str, Any]]:
    """Every message of a queue, left in place."""
    return list(
        engine.client("sqs")
        .receive_message(
            QueueUrl=engine.ref(logical_id), MaxNumberOfMessages=10, VisibilityTimeout=0
        )
        .get("Messages", [])
    )


def dead_lettered_by_eventbridge(engine: LocalEngine, event: dict[str, Any]) -> None:
    """The rule's target could not be started (throttled past its retries): EventBridge
    sends the event itself to the rule's DLQ with its attributes (as the engine's
    _eventbridge_dead_letter does)."""
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("IngressDeadLetterQueue"),
        MessageBody=json.dumps(event),
        MessageAttributes={
            "ERROR_CODE": {"DataType": "String", "StringValue": "ThrottlingException"},
            "RULE_ARN": {
                "DataType": "String",
                "StringValue": engine.get_att("ObjectCreatedRule", "Arn"),
            },
        },
    )


def _lost_upload_resubmitted_by_the_audit(engine: LocalEngine) -> dict[str, Any]:
    """An upload whose event went to the ingress DLQ two days ago; the audit, past its
    one-day wait, has processed the upload under its ETag. Returns the DLQ'd event."""
    put(engine, KEY)
    age_uploads(engine, days=2)
    event = engine.s3_object_created_event(BUCKET, KEY)  # its time: the upload's, 2 days ago
    assert "version-id" not in event["detail"]["object"]
    dead_lettered_by_eventbridge(engine, event)
    report = run_audit(engine).output
    assert report["missing_resubmitted"] == 1
    assert effects_by_object(engine) == Counter({KEY: 1})
    return event


def test_an_event_older_than_the_audits_wait_is_kept_in_the_ingress_dlq(
    unversioned: LocalEngine,
) -> None:
    # GIVEN an unversioned upload the audit resubmitted after its wait, its event in the
    # EventBridge rules' DLQ (which keeps it 14 days)
    event = _lost_upload_resubmitted_by_the_audit(unversioned)
    # WHEN the operator redrives the ingress DLQ
    report = ops.redrive(LocalTarget(unversioned), queue="ingress")
    # THEN the event is not started: the upload keeps its one effect
    unversioned.wait_for_running(MACHINE)
    assert effects_by_object(unversioned) == Counter({KEY: 1})
    (item,) = report.messages
    assert item.action == "too late", item
    assert "could process it twice" in item.detail and "onceflow inspect" in item.detail
    assert report.as_dict()["too_late"] == 1 and report.as_dict()["resubmitted"] == 0
    # AND the message stays in the DLQ, for the operator to check and delete
    (kept,) = queue_messages(unversioned, "IngressDeadLetterQueue")
    assert json.loads(kept["Body"]) == event


def test_force_moves_an_event_the_audit_has_taken_over(unversioned: LocalEngine) -> None:
    # GIVEN the same upload, processed by the audit under its ETag
    _lost_upload_resubmitted_by_the_audit(unversioned)
    # WHEN an operator who checked redrives it with force
    report = ops.redrive(LocalTarget(unversioned), queue="ingress", force=True)
    # THEN it is started as asked (under its sequencer: the second effect force allows)
    (item,) = report.messages
    assert item.action == "resubmitted" and item.outcome == "SUCCEEDED (PROCESSED)"
    assert queue_messages(unversioned, "IngressDeadLetterQueue") == []
    assert effects_by_object(unversioned) == Counter({KEY: 2})


def test_an_unversioned_event_younger_than_the_wait_is_moved_back_once(
    unversioned: LocalEngine,
) -> None:
    # GIVEN an unversioned upload's event dead-lettered an hour after the upload
    put(unversioned, KEY)
    dead_lettered_by_eventbridge(unversioned, unversioned.s3_object_created_event(BUCKET, KEY))
    # WHEN it is redriven, and the audit runs later, past its wait
    (item,) = ops.redrive(LocalTarget(unversioned), queue="ingress").messages
    age_uploads(unversioned, days=2)
    report = run_audit(unversioned).output
    # THEN the event is processed, and the audit finds it so by content: one effect
    assert item.action == "resubmitted" and item.outcome == "SUCCEEDED (PROCESSED)"
    assert report["missing_resubmitted"] == 0
    assert effects_by_object(unversioned) == Counter({KEY: 1})


@pytest.fixture
def sqs_unversioned() -> Iterator[LocalEngine]:
    with LocalEngine(parameters=SQS_PARAMETERS, function_log=io.StringIO()) as engine:
        make_users_bucket(engine, versioning=None)
        yield engine


def test_a_notification_moved_back_past_the_audits_wait_is_kept_in_the_source_dlq(
    sqs_unversioned: LocalEngine,
) -> None:
    # GIVEN an upload whose S3 notification was moved back from the source DLQ once and
    # failed again: 29.5 days after the upload it is in the source DLQ, past the
    # audit's 28.5-day wait, and the audit has resubmitted the upload under its ETag
    key = "late/photo.png"
    put(sqs_unversioned, key)
    age_uploads(sqs_unversioned, days=29.5)
    body = notification(sqs_unversioned, key)
    uploaded = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=29.5)
    body["Records"][0]["eventTime"] = uploaded.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    sqs_unversioned.client("sqs").send_message(
        QueueUrl=sqs_unversioned.ref("SourceDeadLetterQueue"), MessageBody=json.dumps(body)
    )
    assert run_audit(sqs_unversioned).output["missing_resubmitted"] == 1
    # WHEN the operator moves the source DLQ back, and the pipe runs
    report = ops.redrive(LocalTarget(sqs_unversioned), queue="source")
    started = sqs_unversioned.pump_pipes()
    # THEN nothing went back: the upload keeps its one effect, the message its DLQ
    results = [sqs_unversioned.wait(arn) for arn in started]
    assert effects_by_object(sqs_unversioned) == Counter({key: 1}), results
    (item,) = report.messages
    assert item.action == "too late", item
    (kept,) = queue_messages(sqs_unversioned, "SourceDeadLetterQueue")
    assert json.loads(kept["Body"]) == body
