"""Uploads that are gone or replaced before their event is processed, and the audit of
uploads without a version id, on the local engine.

S3 gives an upload a version id only while versioning is on. With versioning
suspended (or never on) every upload of a key is version "null" and overwrites
the one before: the processor reads only the content its event names (the
ETag), and the audit finds rows by key and ETag (the ObjectContent index).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    FUNCTION,
    MACHINE,
    TransientError,
    age_object,
    attributes,
    audit_engine,
    dlq_messages,
    forget_watermark,
    invocations,
    ledger_row,
    ledger_rows,
    load_event,
    output_effects,
    png_bytes,
    run_audit,
    s3_event,
    upload,
)

KEY = "uploads/plain.png"


# ---- Helpers ---------------------------------------------------------------------


def suspend_versioning(engine: LocalEngine) -> None:
    """From here on every upload to the ingest bucket is version "null" (S3 user guide,
    "Adding objects to versioning-suspended buckets")."""
    engine.client("s3").put_bucket_versioning(
        Bucket=engine.ref("IngestBucket"), VersioningConfiguration={"Status": "Suspended"}
    )


def put(engine: LocalEngine, body: bytes, key: str = KEY) -> str:
    """Upload to the ingest bucket; the ETag, as the event carries it (no quotes).

    The upload is dated two days back: the audit waits out EventBridge's retries
    (IngressMaxEventAgeSeconds, one day) before it resubmits an upload without a
    version id, whose late event would otherwise be processed under another key.
    """
    response = engine.client("s3").put_object(Bucket=engine.ref("IngestBucket"), Key=key, Body=body)
    age_object(engine, key, days=2)
    return str(response["ETag"]).strip('"')


def unversioned_event(engine: LocalEngine, etag: str, sequencer: str, key: str = KEY) -> Any:
    """events/s3-object-created-unversioned.json, for one upload of the local stack."""
    event = copy.deepcopy(load_event("s3-object-created-unversioned.json"))
    event["detail"]["bucket"]["name"] = engine.ref("IngestBucket")
    event["detail"]["object"].update({"key": key, "etag": etag, "sequencer": sequencer})
    return event


def sequencer_key(engine: LocalEngine, sequencer: str, key: str = KEY) -> str:
    return f"s3://{engine.ref('IngestBucket')}/{key}#{sequencer}"


def processor_executions(engine: LocalEngine) -> list[dict[str, Any]]:
    sfn = engine.client("stepfunctions")
    return [
        e
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=engine.ref(MACHINE)
        )
        for e in page["executions"]
    ]


class S3AsAws:
    """The S3 client the bundled processor gets, answering as S3 answers its role.

    For a key or version that does not exist S3 answers 404 only to a caller
    allowed s3:ListBucket on the bucket, and 403 AccessDenied to any other
    (S3 API reference, GetObject, "Permissions"). moto answers 404 to everyone,
    so this rewrites moto's 404 by the template's own policy for the function.
    """

    def __init__(self, client: Any, may_list: bool) -> None:
        self._client = client
        self._may_list = may_list

    def get_object(self, **kwargs: Any) -> Any:
        try:
            return self._client.get_object(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "NoSuchVersion") and not self._may_list:
                denied = {
                    "Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                    "ResponseMetadata": {"HTTPStatusCode": 403},
                }
                raise ClientError(denied, "GetObject") from None  # type: ignore[arg-type]
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def processor_may_list_the_ingest_bucket(engine: LocalEngine) -> bool:
    """Whether the template's policy for ProcessorFunction allows s3:ListBucket on the bucket."""
    policies = engine.stack.template["Resources"]["ProcessorFunction"]["Properties"]["Policies"]
    bucket_arn = engine.get_att("IngestBucket", "Arn")
    for policy in policies:
        for statement in engine.stack.resolve(policy)["Statement"]:
            actions = statement.get("Action", [])
            resources = statement.get("Resource", [])
            if (
                statement.get("Effect") == "Allow"
                and "s3:ListBucket" in (actions if isinstance(actions, list) else [actions])
                and bucket_arn in (resources if isinstance(resources, list) else [resources])
            ):
                return True
    return False


@pytest.fixture
def s3_as_aws(engine: LocalEngine) -> Iterator[LocalEngine]:
    """The engine, its bundled processor reading S3 as the deployed role would."""
    spec = engine.runtime.functions[engine.function_name(FUNCTION)]
    engine.runtime.load(spec)
    module: Any = sys.modules["service.handlers.processor"]  # the handler module the engine loaded
    may_list = processor_may_list_the_ingest_bucket(engine)
    module._store = module.ObjectStore(S3AsAws(engine.client("s3"), may_list))
    yield engine
    module._store = None


@pytest.fixture
def audited() -> Iterator[LocalEngine]:
    with audit_engine() as local:
        local.state.requests.clear()
        yield local


# ---- Item 5: an upload that is gone is a permanent error, on AWS too ---------------


def _deleted_version(engine: LocalEngine) -> tuple[Any, str]:
    version = upload(engine, "uploads/gone.png")
    engine.client("s3").delete_object(
        Bucket=engine.ref("IngestBucket"), Key="uploads/gone.png", VersionId=version
    )
    return s3_event(engine, "uploads/gone.png", version), "NoSuchVersion"


def _never_there(engine: LocalEngine) -> tuple[Any, str]:
    # A direct work item with neither version nor etag: nothing tells a replaced
    # object from a missing one, so a missing key is permanent too.
    item = {"bucket": engine.ref("IngestBucket"), "key": "uploads/never.png"}
    return {"workItem": {**item, "idempotencyKey": "manual:never"}}, "NoSuchKey"


@pytest.mark.parametrize("make", [_deleted_version, _never_there], ids=["version", "key"])
def test_an_upload_deleted_before_processing_is_dead_lettered_after_one_attempt(
    s3_as_aws: LocalEngine, make: Any
) -> None:
    engine = s3_as_aws
    # GIVEN an event whose upload was deleted before it was processed, read by the
    # processor as S3 answers its role
    event, code = make(engine)
    # WHEN the event is processed
    result = engine.execute(MACHINE, event)
    # THEN S3 said "not found" (404) and the processor gave up at once: one Process
    # attempt, dead-lettered as a PermanentError
    assert result.outcome == "DeadLettered", (result.error, result.cause)
    assert result.states_entered.count("Process") == 1
    assert invocations(engine) == 1
    (message,) = dlq_messages(engine)
    attrs = attributes(message)
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    assert attrs["ERROR_CODE"] == "PermanentError"
    assert code in attrs["ERROR_MESSAGE"]
    assert attrs["RETRY_ATTEMPTS"] == "1"
    row = ledger_row(engine, attrs["IDEMPOTENCY_KEY"])
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    assert output_effects(engine) == 0


# ---- Item 6a: an event never processes the content that replaced its own ----------


def test_an_overwritten_unversioned_upload_is_superseded_not_processed(
    engine: LocalEngine,
) -> None:
    # GIVEN two uploads to one key of a versioning-suspended bucket, different bytes
    suspend_versioning(engine)
    first = put(engine, png_bytes(32, 32))
    second = put(engine, png_bytes(64, 48))
    assert first != second
    # WHEN the first upload's event arrives after the second upload
    late = engine.execute(MACHINE, unversioned_event(engine, first, "0A01"))
    # THEN it ends Superseded after one Process attempt, and nothing was written
    assert late.status == "SUCCEEDED"
    assert late.states_entered[-2:] == ["MarkSuperseded", "Superseded"]
    assert late.states_entered.count("Process") == 1
    assert late.output["status"] == "SUPERSEDED"
    assert output_effects(engine) == 0
    row = ledger_row(engine, sequencer_key(engine, "0A01"))
    assert row is not None and row["status"] == "PROCESSED" and "superseded_at" in row
    assert row["object_ref"] == f"s3://{engine.ref('IngestBucket')}/{KEY}"
    assert "open_status" not in row
    # AND the second upload's event processes the second content, once
    current = engine.execute(MACHINE, unversioned_event(engine, second, "0A02"))
    assert current.outcome == "Processed"
    assert output_effects(engine) == 1
    # AND a redelivery of the first event is a duplicate, not a second try
    again = engine.execute(MACHINE, unversioned_event(engine, first, "0A01"))
    assert again.outcome == "Duplicate"
    assert invocations(engine) == 2
    assert dlq_messages(engine) == []


def test_a_deleted_unversioned_upload_is_superseded(engine: LocalEngine) -> None:
    # GIVEN an upload to a versioning-suspended bucket, deleted before its event is processed
    suspend_versioning(engine)
    etag = put(engine, png_bytes())
    engine.client("s3").delete_object(Bucket=engine.ref("IngestBucket"), Key=KEY)
    # WHEN its event arrives
    result = engine.execute(MACHINE, unversioned_event(engine, etag, "0B01"))
    # THEN it is superseded: nothing to process, nothing to dead-letter, no retry
    assert result.outcome == "Superseded"
    assert invocations(engine) == 1
    assert dlq_messages(engine) == []
    assert output_effects(engine) == 0


# ---- Item 6b: the audit of uploads without a version id ---------------------------


def test_an_unversioned_upload_processed_from_its_event_is_ok(audited: LocalEngine) -> None:
    # GIVEN an upload whose event was processed (keyed on its sequencer)
    suspend_versioning(audited)
    etag = put(audited, png_bytes())
    processed = audited.execute(MACHINE, unversioned_event(audited, etag, "0C01"))
    assert processed.outcome == "Processed"
    # WHEN the audit runs
    report = run_audit(audited).output
    # THEN it found the row by key and ETag: ok, nothing resubmitted
    assert report["scanned"] == 1 and report["ok"] == 1
    assert report["missing_resubmitted"] == 0 and "unversioned_skipped" not in report
    assert len(processor_executions(audited)) == 1
    assert output_effects(audited) == 1


def test_a_lost_event_of_an_unversioned_upload_is_resubmitted_once(audited: LocalEngine) -> None:
    # GIVEN an upload to a versioning-suspended bucket whose event was lost
    suspend_versioning(audited)
    etag = put(audited, png_bytes())
    # WHEN the audit runs, twice (the second judging the window again)
    first = run_audit(audited).output
    forget_watermark(audited)
    second = run_audit(audited).output
    # THEN the first resubmitted it under a key of its ETag and last-modified time
    assert first["missing_resubmitted"] == 1
    (pk,) = first["resubmitted_sample"]
    assert pk.startswith(f"s3://{audited.ref('IngestBucket')}/{KEY}#etag:{etag}:")
    row = ledger_row(audited, pk)
    assert row is not None and row["status"] == "PROCESSED" and row["source"] == "audit"
    assert row["object_ref"] == f"s3://{audited.ref('IngestBucket')}/{KEY}"
    # AND the second found that row: one execution, one effect
    assert second["ok"] == 1 and second["missing_resubmitted"] == 0
    assert len(processor_executions(audited)) == 1
    assert output_effects(audited) == 1


def test_a_replacement_whose_event_was_lost_is_resubmitted(audited: LocalEngine) -> None:
    # GIVEN an upload processed from its event, then overwritten; the new event was lost
    suspend_versioning(audited)
    first = put(audited, png_bytes(32, 32))
    audited.execute(MACHINE, unversioned_event(audited, first, "0D01"))
    second = put(audited, png_bytes(64, 48))
    # WHEN the audit runs, twice (the second judging the window again)
    report = run_audit(audited).output
    forget_watermark(audited)
    again = run_audit(audited).output
    # THEN the key's first row does not stand for the new content: it was resubmitted
    assert report["scanned"] == 1 and report["missing_resubmitted"] == 1
    (pk,) = report["resubmitted_sample"]
    assert f"#etag:{second}:" in pk
    assert again["ok"] == 1 and again["missing_resubmitted"] == 0
    assert output_effects(audited) == 2


def test_a_failed_unversioned_row_is_retried_under_its_own_key(audited: LocalEngine) -> None:
    # GIVEN an upload whose event failed (transiently) below MaxAttempts
    suspend_versioning(audited)
    etag = put(audited, png_bytes())

    def failing(event: dict[str, Any], context: Any) -> Any:
        raise TransientError("injected")

    with audited.override_function(FUNCTION, failing):
        failed = audited.execute(MACHINE, unversioned_event(audited, etag, "0E01"))
    assert failed.outcome == "Failed"
    # WHEN the audit runs
    report = run_audit(audited).output
    # THEN it reclaimed the event's own row: no second key, one effect
    assert report["failed_resubmitted"] == 1 and report["missing_resubmitted"] == 0
    row = ledger_row(audited, sequencer_key(audited, "0E01"))
    assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
    assert [r["pk"] for r in ledger_rows(audited)] == [sequencer_key(audited, "0E01")]
    assert output_effects(audited) == 1


def test_a_null_upload_replaced_after_versioning_returned_is_not_resubmitted(
    audited: LocalEngine,
) -> None:
    # GIVEN an upload made while versioning was suspended, its event lost; then
    # versioning on again and a new upload of the key, processed from its event
    suspend_versioning(audited)
    put(audited, png_bytes(32, 32))
    audited.client("s3").put_bucket_versioning(
        Bucket=audited.ref("IngestBucket"), VersioningConfiguration={"Status": "Enabled"}
    )
    version = upload(audited, KEY, png_bytes(64, 48))
    assert audited.execute(MACHINE, s3_event(audited, KEY, version)).outcome == ("Processed")
    # WHEN the audit runs, twice
    reports = [run_audit(audited).output]
    forget_watermark(audited)  # the second judges the window again
    reports.append(run_audit(audited).output)
    # THEN the null upload is skipped (only the key's current content can be read
    # without a version id) and nothing is resubmitted: no alarm, audit after audit
    for report in reports:
        assert report["scanned"] == 2 and report["ok"] == 1
        assert report["superseded_skipped"] == 1 and report["missing_resubmitted"] == 0
    assert len(processor_executions(audited)) == 1
    assert output_effects(audited) == 1


def test_the_report_keeps_no_unversioned_skip(audited: LocalEngine) -> None:
    # GIVEN a versioned upload and an unversioned one, both with lost events
    upload(audited, "versioned.png")
    suspend_versioning(audited)
    put(audited, png_bytes(), "unversioned.png")
    # WHEN the audit runs
    report = run_audit(audited).output
    # THEN both were resubmitted, and the stored report has no unversioned_skipped
    assert report["missing_resubmitted"] == 2
    bucket, key = report["report"].removeprefix("s3://").split("/", 1)
    stored = json.loads(audited.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    assert "unversioned_skipped" not in stored and stored["missing_resubmitted"] == 2
    assert output_effects(audited) == 2
