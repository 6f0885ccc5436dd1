"""onceflow in front of a bucket it did not create (ExistingBucketName, KeyPrefix, KeySuffix).

The bucket is made with the engine's S3 client after the stack is up, as a
user's bucket exists apart from the stack; the test then takes the user's one
step (EventBridge notifications on) and S3's events reach the stack's rule
through ``LocalEngine.put_s3_event``. An event is lost by not delivering it.
"""

from __future__ import annotations

import io
import json
import shlex
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from moto.core.utils import utcnow
from moto.s3.models import s3_backends

from onceflow import ops
from onceflow.local.engine import ACCOUNT_ID, LocalEngine
from onceflow.local.wiring import LocalStack
from tests.helpers import (
    AUDIT,
    MACHINE,
    attributes,
    dlq_messages,
    forget_watermark,
    ledger_rows,
    png_bytes,
    run_audit,
)

BUCKET = "customer-uploads"  # the user's, not the stack's
PARAMETERS = {
    "ExistingBucketName": BUCKET,
    "KeyPrefix": "incoming/",
    "KeySuffix": ".png",
    "AuditRecentCutoffHours": "0",  # the audit judges objects seconds old
}
UNDER = ["incoming/a.png", "incoming/b c+d é.png", "incoming/sub/e.png"]
LOST = "incoming/lost.png"
# Outside the filter: another prefix, another suffix, no prefix, the prefix's own
# "folder" marker, and the prefix without its slash.
OUTSIDE = ["other/a.png", "incoming/a.txt", "top.png", "incoming/", "incoming.png"]


def make_users_bucket(engine: LocalEngine, versioning: str | None) -> None:
    """The user's bucket, created apart from the stack (here: after it is up)."""
    s3 = engine.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    if versioning is not None:
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": versioning})


def turn_on_eventbridge(engine: LocalEngine) -> None:
    """The one step the stack cannot take on a bucket it does not own (docs/existing-bucket.md)."""
    engine.client("s3").put_bucket_notification_configuration(
        Bucket=BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )


def put(engine: LocalEngine, key: str) -> str | None:
    """Upload to the user's bucket; its version id (None without versioning)."""
    response = engine.client("s3").put_object(Bucket=BUCKET, Key=key, Body=png_bytes())
    version = response.get("VersionId")
    return str(version) if version else None


def age_uploads(engine: LocalEngine, days: float = 2) -> None:
    """Date every upload of the bucket back (moto's clock), once its events were sent.

    The audit waits out EventBridge's retries (IngressMaxEventAgeSeconds, a day)
    before it resubmits an upload without a version id (docs/audit.md).
    """
    bucket = s3_backends[ACCOUNT_ID]["aws"].buckets[BUCKET]
    for key in list(bucket.keys.keys()):
        for version in bucket.keys.getlist(key):
            version.last_modified = utcnow() - timedelta(days=days)


def effects_by_object(engine: LocalEngine) -> Counter[str]:
    """Outputs written (S3's request log, not the ledger), by the object key they came from."""
    output = engine.ref("OutputBucket")
    s3 = engine.client("s3")
    effects: Counter[str] = Counter()
    for key, count in engine.successful_puts(output).items():
        if key.startswith(("reports/", "inventory/")):
            continue
        pk = unquote(s3.head_object(Bucket=output, Key=key)["Metadata"]["idempotency-key"])
        effects[pk.removeprefix(f"s3://{BUCKET}/").rsplit("#", 1)[0]] += count
    return effects


def processor_inputs(engine: LocalEngine) -> list[Any]:
    sfn = engine.client("stepfunctions")
    arns = [
        e["executionArn"]
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=engine.ref(MACHINE)
        )
        for e in page["executions"]
    ]
    return [sfn.describe_execution(executionArn=arn)["input"] for arn in arns]


@pytest.fixture(params=["Enabled", None], ids=["versioned", "unversioned"])
def existing(request: pytest.FixtureRequest) -> Iterator[LocalEngine]:
    """The user's bucket versioned and unversioned: for what versioning changes."""
    yield from _stack_over(request.param)


@pytest.fixture
def versioned(request: pytest.FixtureRequest) -> Iterator[LocalEngine]:
    """The user's bucket versioned: for what versioning does not change (the filter's
    refusals come before any read of the object)."""
    yield from _stack_over("Enabled")


def _stack_over(versioning: str | None) -> Iterator[LocalEngine]:
    with LocalEngine(parameters=PARAMETERS, function_log=io.StringIO(), time_scale=0.0) as engine:
        make_users_bucket(engine, versioning)
        engine.state.requests.clear()
        yield engine


def test_the_stack_creates_no_bucket_of_its_own(versioned: LocalEngine) -> None:
    # GIVEN a stack deployed with ExistingBucketName
    # WHEN we look at the buckets there are and what the stack names as its ingest bucket
    names = {b["Name"] for b in versioned.client("s3").list_buckets()["Buckets"]}
    # THEN the ingest bucket is the user's: the stack made only its output and log buckets
    assert versioned.outputs()["IngestBucketName"] == BUCKET
    assert versioned.ref("IngestBucket") == ""  # the resource's condition is false
    assert names == {BUCKET, versioned.ref("OutputBucket"), versioned.ref("AccessLogBucket")}


def test_without_the_users_step_s3_sends_nothing_and_the_audit_finds_it(
    existing: LocalEngine,
) -> None:
    # GIVEN an upload under the prefix before EventBridge notifications are on
    put(existing, "incoming/early.png")
    # WHEN S3 would announce it
    started = existing.put_s3_event(BUCKET, "incoming/early.png")
    # THEN nothing was sent, nothing started
    assert started == []
    assert processor_inputs(existing) == []
    # AND the audit finds it and it is processed once
    age_uploads(existing)
    report = run_audit(existing).output
    assert report["missing_resubmitted"] == 1 and report["scanned"] == 1
    assert effects_by_object(existing) == Counter({"incoming/early.png": 1})
    # (by listing the user's bucket: the inventory the audit would read is not added yet)
    assert (report["source"], report["source_reason"]) == (
        "listing",
        "no complete inventory report yet",
    )


def test_exactly_once_under_the_prefix_none_outside_and_the_lost_event_recovered(
    existing: LocalEngine,
) -> None:
    # GIVEN the user's bucket with EventBridge notifications turned on
    turn_on_eventbridge(existing)
    # WHEN objects are uploaded under and outside the filter, every event delivered
    # (the first twice: "probably once"), except LOST's, which never arrives
    started: dict[str, list[str]] = {}
    for key in [*UNDER, LOST, *OUTSIDE]:
        version = put(existing, key)
        if key != LOST:
            started[key] = existing.put_s3_event(BUCKET, key, version)
    started[UNDER[0]] += existing.put_s3_event(BUCKET, UNDER[0])
    existing.wait_for_running(MACHINE)
    # THEN the rule started the processor for the objects under the filter only
    assert {k for k, arns in started.items() if arns} == set(UNDER)
    assert len(started[UNDER[0]]) == 2 and all(len(started[k]) == 1 for k in UNDER[1:])
    # AND the duplicate was discarded: one output per object so far, none for LOST
    assert effects_by_object(existing) == Counter(dict.fromkeys(UNDER, 1))
    # WHEN the audit runs (a day or more later)
    age_uploads(existing)
    report = run_audit(existing).output
    # THEN it walked only the filter's objects and resubmitted the lost one alone
    assert report["bucket"] == BUCKET and report["prefix"] == "incoming/"
    assert report["scanned"] == len(UNDER) + 1
    assert report["ok"] == len(UNDER) and report["missing_resubmitted"] == 1
    (resubmitted,) = report["resubmitted_sample"]
    assert resubmitted.startswith(f"s3://{BUCKET}/{LOST}#")
    # AND every object under the filter has exactly one effect, none outside
    assert effects_by_object(existing) == Counter(dict.fromkeys([*UNDER, LOST], 1))
    rows = ledger_rows(existing)
    assert sorted(r["object_key"] for r in rows) == sorted([*UNDER, LOST])
    assert all(r["status"] == "PROCESSED" and r["bucket"] == BUCKET for r in rows)
    # AND nothing reached the DLQ, and no execution ever named an outside object
    assert dlq_messages(existing) == []
    assert not any(key in text for text in processor_inputs(existing) for key in OUTSIDE[:3])
    # WHEN the audit runs again, judging the window again (the uploads were dated back)
    forget_watermark(existing)
    again = run_audit(existing).output
    # THEN there is nothing left to do
    assert again["missing_resubmitted"] == 0 and again["ok"] == len(UNDER) + 1
    assert effects_by_object(existing) == Counter(dict.fromkeys([*UNDER, LOST], 1))


def test_the_inventory_the_doctor_asks_for_is_the_one_the_audit_reads(
    versioned: LocalEngine,
) -> None:
    # GIVEN the user's bucket, notifications on, AuditInventory at its default (auto)
    turn_on_eventbridge(versioned)
    # WHEN the doctor examines the stack before the user added an inventory
    (finding,) = [f for f in ops.examine(LocalStack(versioned)) if f.check == "audit inventory"]
    # THEN it warns that the audit lists the bucket, and gives the command that adds it
    assert finding.status == ops.WARN and "lists s3://customer-uploads" in finding.detail
    command = finding.detail[finding.detail.index("aws s3api ") :]
    argv = shlex.split(command)
    assert argv[:3] == ["aws", "s3api", "put-bucket-inventory-configuration"]
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    # WHEN the user runs it (the same call, with the command's arguments)
    versioned.client("s3").put_bucket_inventory_configuration(
        Bucket=options["--bucket"], Id=options["--id"],
        InventoryConfiguration=json.loads(options["--inventory-configuration"]),
    )  # fmt: skip
    # THEN the doctor passes it
    (finding,) = [f for f in ops.examine(LocalStack(versioned)) if f.check == "audit inventory"]
    assert finding.status == ops.PASS, finding.detail
    # WHEN uploads arrive under and outside the filter, one under it with its event lost
    for key in [*UNDER, LOST, *OUTSIDE]:
        version = put(versioned, key)
        if key != LOST:
            versioned.put_s3_event(BUCKET, key, version)
    versioned.wait_for_running(MACHINE)
    age_uploads(versioned)
    # AND S3 delivers the day's report of the user's bucket, then the audit runs
    versioned.deliver_inventory(BUCKET)
    report = run_audit(versioned).output
    # THEN the audit read the report, which listed only the keys under KeyPrefix, and
    # resubmitted the lost upload alone
    assert report["source"] == "inventory", report["source_reason"]
    assert report["scanned"] == len(UNDER) + 1
    assert report["ok"] == len(UNDER) and report["missing_resubmitted"] == 1
    (resubmitted,) = report["resubmitted_sample"]
    assert resubmitted.startswith(f"s3://{BUCKET}/{LOST}#")
    assert effects_by_object(versioned) == Counter(dict.fromkeys([*UNDER, LOST], 1))
    assert dlq_messages(versioned) == []


@pytest.mark.parametrize("key", ["other/a.png", "incoming/a.txt", "incoming.png"])
def test_a_work_item_outside_the_filter_is_refused_before_any_read(
    versioned: LocalEngine, key: str
) -> None:
    # GIVEN an object of the user's bucket outside KeyPrefix/KeySuffix
    version = put(versioned, key) or "null"
    # WHEN a work item names it directly (a redrive, a hand-made resubmission)
    item = {"bucket": BUCKET, "key": key, "versionId": version, "sequencer": "0A"}
    result = versioned.execute(MACHINE, {"workItem": item})
    # THEN it is an InvalidEvent: no claim, no Lambda, one DLQ message that says why
    assert result.outcome == "InvalidEvent"
    assert "Process" not in result.states_entered and ledger_rows(versioned) == []
    (message,) = dlq_messages(versioned)
    why = attributes(message)["ERROR_MESSAGE"]
    assert "incoming/*.png" in why and "KeyPrefix*KeySuffix" in why


def test_an_audit_asked_for_a_prefix_outside_the_filter_fails_with_the_reason(
    versioned: LocalEngine,
) -> None:
    # GIVEN objects outside KeyPrefix
    put(versioned, "other/a.png")
    # WHEN an operator asks the audit for that prefix
    result = versioned.execute(AUDIT, {"prefix": "other/"})
    # THEN the run fails at its plan, naming both prefixes, and nothing was resubmitted
    assert result.status == "FAILED"
    assert result.states_entered == ["Plan"]
    assert result.error == "PermanentError"
    assert "'other/' is outside KeyPrefix 'incoming/'" in str(result.cause)
    assert processor_inputs(versioned) == []


def test_an_audit_asked_for_a_narrower_prefix_lists_only_it(versioned: LocalEngine) -> None:
    # GIVEN a lost upload in a sub-folder of KeyPrefix and one beside it
    put(versioned, "incoming/2026/a.png")
    put(versioned, "incoming/b.png")
    age_uploads(versioned)
    # WHEN the audit is asked for the sub-folder, and for a prefix of KeyPrefix
    narrow = run_audit_with(versioned, {"prefix": "incoming/2026/"})
    wide = run_audit_with(versioned, {"prefix": "inc"})
    # THEN the first lists the sub-folder, the second KeyPrefix, not the whole bucket
    assert narrow["prefix"] == "incoming/2026/" and narrow["missing_resubmitted"] == 1
    assert wide["prefix"] == "incoming/" and wide["missing_resubmitted"] == 1
    assert effects_by_object(versioned) == Counter({"incoming/2026/a.png": 1, "incoming/b.png": 1})


def run_audit_with(engine: LocalEngine, options: dict[str, str]) -> dict[str, Any]:
    result = engine.execute(AUDIT, options)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    engine.wait_for_running(MACHINE)
    output: dict[str, Any] = result.output
    return output


def test_a_bucket_that_does_not_exist_fails_the_first_audit_saying_so() -> None:
    # GIVEN a stack deployed on a bucket name no bucket has (no parameter can check it)
    parameters = {**PARAMETERS, "ExistingBucketName": "no-such-customer-bucket"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as engine:
        # WHEN its audit runs
        result = engine.execute(AUDIT, {})
        # THEN it fails at once, naming the bucket and S3's answer (AuditFailedAlarm fires)
        assert result.status == "FAILED" and result.states_entered == ["Plan"]
    assert result.error == "PermanentError"
    assert "no-such-customer-bucket" in str(result.cause) and "NoSuchBucket" in str(result.cause)
