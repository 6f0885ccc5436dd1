"""The audit's decisions and settings, without AWS."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from service.dal.aws import is_transient
from service.errors import ConfigurationError
from service.logic.audit import (
    COUNT_KEYS,
    WATERMARK_MARGIN_SECONDS,
    AuditWindow,
    Budget,
    ListedObject,
    Watermark,
    add_counts,
    age_verdict,
    classify,
    common_prefix,
    content_row,
    execution_name,
    idempotency_key,
    inventory_item,
    key_marker_before,
    listed_item,
    object_work_item,
    reached,
    resubmission_name,
    row_work_item,
    versions_of,
)
from service.logic.s3objects import object_ref, plain_etag
from service.model import LedgerRow, Status
from service.settings import AuditSettings

NOW = 1_800_000_000.0
WINDOW = AuditWindow(now=NOW, recent_cutoff_seconds=12 * 3600, retention_seconds=30 * 86400,
                     max_attempts=3)  # fmt: skip
LIVE: dict[str, Any] = {"expires_at": int(NOW) + 86400}


def row(pk: str = "s3://b/k.png#v1", **attributes: Any) -> LedgerRow:
    """A ledger row with these attributes (and the key's pk)."""
    return LedgerRow(pk=pk, **attributes)


def listed(age_hours: float, version: str = "v1") -> ListedObject:
    return ListedObject("k.png", version, NOW - age_hours * 3600, '"etag"', 10)


@pytest.mark.parametrize(
    ("age_hours", "row", "verdict"),
    [
        (1, None, "skipped_recent"),
        (24 * 31, None, "skipped_old"),
        (24, None, "missing_resubmitted"),
        (24, row(status=Status.PROCESSED, expires_at=int(NOW) - 1), "missing_resubmitted"),
        (24, row(status=Status.PROCESSED, **LIVE), "ok"),
        (24, row(status=Status.PROCESSING, **LIVE), "in_progress"),
        (24, row(status=Status.FAILED, attempts=1, **LIVE), "failed_resubmitted"),
        (24, row(status=Status.FAILED, attempts=3, **LIVE), "dead_lettered_skipped"),
        (24, row(status=Status.FAILED, attempts=1, dead_lettered_at=1, **LIVE),
         "dead_lettered_skipped"),
    ],
)  # fmt: skip
def test_classify(age_hours: float, row: LedgerRow | None, verdict: str) -> None:
    assert classify(listed(age_hours), row, WINDOW) == verdict


def test_an_unversioned_upload_without_a_row_is_resubmitted_under_its_etag_and_time() -> None:
    # GIVEN an upload without a version id, 24 h old, that no row has
    obj = listed(24, "null")
    # WHEN the audit classifies it THEN it is missing, as a versioned upload would be
    assert classify(obj, None, WINDOW) == "missing_resubmitted"
    # AND its key names that upload (ETag without quotes, last-modified in ms):
    # the same in every audit, and new for a later upload of the same bytes
    key = idempotency_key("b", obj)
    assert key == f"s3://b/k.png#etag:etag:{round(obj.last_modified * 1000)}"
    assert key == idempotency_key("b", listed(24, "null"))
    assert key != idempotency_key("b", listed(23, "null"))
    item = object_work_item("b", obj, key)["workItem"]
    assert item == {"source": "audit", "idempotencyKey": key, "bucket": "b", "key": "k.png",
                    "versionId": "null", "etag": '"etag"', "size": 10}  # fmt: skip


def test_a_null_version_that_is_no_longer_current_is_not_resubmitted() -> None:
    # GIVEN versioning switched back on: the null upload is an older version now
    old = ListedObject("k.png", "null", NOW - 24 * 3600, '"etag"', 10, latest=False)
    # WHEN the audit classifies it, with or without a row
    # THEN it is skipped: the processor reads only the key's current content
    assert classify(old, None, WINDOW) == "superseded_skipped"
    assert classify(old, row(status=Status.FAILED, attempts=1, **LIVE), WINDOW) == (
        "superseded_skipped"
    )
    # AND a versioned upload that is no longer current is still its own work
    assert classify(listed(24), None, WINDOW) == "missing_resubmitted"
    assert classify(ListedObject("k.png", "v1", NOW - 3600, '"e"', 1, latest=False), None,
                    WINDOW) == "skipped_recent"  # fmt: skip


def test_count_keys_no_longer_know_unversioned_skipped() -> None:
    assert "unversioned_skipped" not in COUNT_KEYS
    assert "missing_resubmitted" in COUNT_KEYS


_PROCESSED = row("s3://b/k.png#SEQ1", status=Status.PROCESSED, **LIVE)
_PROCESSING = row("s3://b/k.png#SEQ2", status=Status.PROCESSING, **LIVE)
_RETRYABLE = row("s3://b/k.png#SEQ3", status=Status.FAILED, attempts=1, **LIVE)
_DEAD = row("s3://b/k.png#SEQ4", status=Status.FAILED, attempts=3, **LIVE)
_SUPERSEDED = replace(_PROCESSED, pk="s3://b/k.png#SEQ5", superseded_at=1)
_EXPIRED = replace(_PROCESSED, pk="s3://b/k.png#SEQ6", expires_at=int(NOW) - 1)


@pytest.mark.parametrize(
    ("rows", "chosen", "verdict"),
    [
        ([], None, "missing_resubmitted"),
        ([_DEAD, _RETRYABLE, _PROCESSING, _PROCESSED], _PROCESSED, "ok"),
        ([_DEAD, _RETRYABLE, _PROCESSING], _PROCESSING, "in_progress"),
        ([_DEAD, _RETRYABLE], _RETRYABLE, "failed_resubmitted"),
        ([_DEAD], _DEAD, "dead_lettered_skipped"),
        # Its content was replaced before it was processed: the same bytes again are new.
        ([_SUPERSEDED], None, "missing_resubmitted"),
        ([_EXPIRED], None, "missing_resubmitted"),
    ],
)
def test_the_row_of_unversioned_content_is_the_most_settled_live_one(
    rows: list[LedgerRow], chosen: LedgerRow | None, verdict: str
) -> None:
    # GIVEN the rows the ObjectContent index holds for the object's current ETag
    # WHEN the audit picks the one that stands for the content
    picked = content_row(rows, WINDOW)
    # THEN it is the most settled live row, and the verdict is that row's
    assert picked == chosen
    assert classify(listed(24, "null"), picked, WINDOW) == verdict


def test_a_listing_etag_and_an_event_etag_are_one_etag() -> None:
    assert plain_etag('"abc-2"') == plain_etag("abc-2") == "abc-2"
    assert object_ref("b", "a/k é.png") == "s3://b/a/k é.png"


def test_the_content_query_asks_for_both_etag_forms_and_reads_every_page() -> None:
    from service.dal.ledger import Ledger

    # GIVEN an index that answers in two pages (stubbed, as DynamoDB would)
    client = boto3.client("dynamodb", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    expected = {
        "TableName": "t",
        "IndexName": "ObjectContent",
        "KeyConditionExpression": "object_ref = :ref",
        "FilterExpression": "#etag IN (:bare, :quoted)",
        "ExpressionAttributeNames": {"#etag": "etag"},
        "ExpressionAttributeValues": {
            ":ref": {"S": "s3://b/k.png"}, ":bare": {"S": "abc"}, ":quoted": {"S": '"abc"'},
        },
    }  # fmt: skip
    last = {"pk": {"S": "s3://b/k.png#A"}, "object_ref": {"S": "s3://b/k.png"}}
    with Stubber(client) as stub:
        stub.add_response(
            "query",
            {"Items": [{**last, "status": {"S": "PROCESSED"}}], "LastEvaluatedKey": last},
            expected,
        )
        stub.add_response(
            "query",
            {"Items": [{"pk": {"S": "s3://b/k.png#B"}, "status": {"S": "FAILED"}}]},
            {**expected, "ExclusiveStartKey": last},
        )
        # WHEN the audit asks for the rows of a listed (quoted) ETag
        rows = Ledger("t", "OpenWork", client).content_rows("s3://b/k.png", '"abc"')
        stub.assert_no_pending_responses()
    # THEN both pages were read
    assert [r.pk for r in rows] == ["s3://b/k.png#A", "s3://b/k.png#B"]


def test_a_throttled_content_query_is_transient_and_a_refused_one_is_not() -> None:
    from service.dal.ledger import Ledger
    from service.errors import PermanentError, TransientError

    client = boto3.client("dynamodb", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    ledger = Ledger("t", "OpenWork", client)
    with Stubber(client) as stub:
        stub.add_client_error(
            "query", "ProvisionedThroughputExceededException", http_status_code=400
        )
        stub.add_client_error("query", "ValidationException", http_status_code=400)
        with pytest.raises(TransientError, match="object-content index"):
            ledger.content_rows("s3://b/k.png", "abc")
        with pytest.raises(PermanentError, match="ValidationException") as refused:
            ledger.content_rows("s3://b/k.png", "abc")
    assert isinstance(refused.value.__cause__, ClientError)


def test_counts_add_up_and_ignore_what_is_not_a_count() -> None:
    total = add_counts({"scanned": 2, "ok": 1, "cursor": "x"}, {"scanned": 3})
    assert list(total) == list(COUNT_KEYS)
    assert total["scanned"] == 5 and total["ok"] == 1


def test_resubmission_names_are_valid_deterministic_and_distinct() -> None:
    name = resubmission_name("audit", "AuditStateMachine-abc:def", "s3://b/k é#v1")
    assert name == resubmission_name("audit", "AuditStateMachine-abc:def", "s3://b/k é#v1")
    assert name != resubmission_name("audit", "AuditStateMachine-abc:def", "s3://b/k é#v2")
    assert len(name) <= 80 and all(c.isalnum() or c in "-_" for c in name)


def test_a_claims_execution_name_is_read_from_either_form_of_arn() -> None:
    # GIVEN the claims a row keeps: its executions' ARNs, as AWS writes them
    # (test_sfn_api_express.snapshot.json in LocalStack's recordings: an EXPRESS execution
    # is ...:express:<machine>:<name>:<id>, a STANDARD one ...:execution:<machine>:<name>)
    standard = "arn:aws:states:us-east-1:123456789012:execution:Processor:audit-x-1f2e"
    express = (
        "arn:aws:states:us-east-1:123456789012:express:Processor:audit-x-1f2e:"
        "9a8b7c6d-1111-2222-3333-444455556666"
    )
    # THEN the name is the execution's name in both (the last part of an EXPRESS ARN is
    # its id: an audit that compared it with its resubmission's name recounted nothing)
    assert execution_name(standard) == "audit-x-1f2e"
    assert execution_name(express) == "audit-x-1f2e"
    assert execution_name("audit-x-1f2e") == "audit-x-1f2e"


def test_work_items_carry_the_ledger_key() -> None:
    item = object_work_item("b", listed(24), "s3://b/k.png#v1")["workItem"]
    assert item["idempotencyKey"] == "s3://b/k.png#v1" and item["versionId"] == "v1"
    of_object = row("s3://b/k.png#SEQ", status=Status.FAILED, bucket="b", object_key="k.png",
                    sequencer="SEQ")  # fmt: skip
    assert row_work_item(of_object) == {
        "workItem": {
            "source": "audit",
            "idempotencyKey": "s3://b/k.png#SEQ",
            "bucket": "b",
            "key": "k.png",
            "sequencer": "SEQ",
        }
    }
    assert row_work_item(row("sqs:o-1", status=Status.FAILED, source="sqs")) is None


ENV = {
    "INGEST_BUCKET": "in",
    "LEDGER_TABLE": "t",
    "PROCESSOR_STATE_MACHINE_ARN": "arn:p",
    "DEAD_LETTER_QUEUE_URL": "https://q",
    "REPORT_BUCKET": "out",
    "MAX_ATTEMPTS": "3",
    "AUDIT_RECENT_CUTOFF_HOURS": "12",
    "RETENTION_DAYS": "30",
    "AUDIT_STUCK_MARGIN_SECONDS": "300",
    "INGRESS_MAX_EVENT_AGE_SECONDS": "86400",
}


def test_audit_settings_parse_the_environment() -> None:
    settings = AuditSettings.from_env(ENV)
    assert settings.recent_cutoff_seconds == 43200 and settings.retention_seconds == 2592000
    assert settings.max_attempts == 3 and settings.report_prefix == "reports/audit/"
    assert settings.object_content_index == "ObjectContent"
    assert settings.late_event_seconds == 86400
    named = AuditSettings.from_env({**ENV, "OBJECT_CONTENT_INDEX": "Other"})
    assert named.object_content_index == "Other"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MAX_ATTEMPTS", "0", "at least 1"),
        ("RETENTION_DAYS", "soon", "must be a number"),
        ("LEDGER_TABLE", "", "LEDGER_TABLE is required"),
    ],
)
def test_bad_audit_settings_are_named(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        AuditSettings.from_env({**ENV, name: value})


@pytest.mark.parametrize(
    ("response", "transient"),
    [
        ({"Error": {"Code": "ProvisionedThroughputExceededException"}}, True),
        ({"Error": {"Code": "Whatever"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, True),
        ({"Error": {"Code": "ValidationException"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
         False),
        ({"Error": {"Code": "AccessDeniedException"}}, False),
    ],
)  # fmt: skip
def test_only_throttling_and_server_errors_are_transient(
    response: dict[str, Any], transient: bool
) -> None:
    assert is_transient(response) is transient


class _Throttled:
    """A DynamoDB client that leaves some keys unprocessed, as DynamoDB does when throttled."""

    def __init__(self, table: str, unprocessed_rounds: int) -> None:
        self.table, self.rounds, self.calls = table, unprocessed_rounds, 0

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        keys = RequestItems[self.table]["Keys"]
        if self.rounds > 0:
            self.rounds -= 1
            served, left = keys[:1], keys[1:]
        else:
            served, left = keys, []
        response: dict[str, Any] = {
            "Responses": {self.table: [{**k, "status": {"S": "PROCESSED"}} for k in served]}
        }
        if left:
            response["UnprocessedKeys"] = {self.table: {**RequestItems[self.table], "Keys": left}}
        return response


def test_batch_get_retries_unprocessed_keys_until_all_are_read() -> None:
    from service.dal.ledger import Ledger

    client = _Throttled("t", unprocessed_rounds=2)
    rows = Ledger("t", "OpenWork", client).batch_get(["a", "b", "c", "a"])
    assert sorted(rows) == ["a", "b", "c"] and client.calls == 3


def test_batch_get_gives_up_as_a_transient_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.dal import ledger
    from service.errors import TransientError

    # GIVEN a table that keeps every key unprocessed (throttled), and a clock that
    # records the backoff instead of sleeping it
    waits: list[float] = []
    monkeypatch.setattr(ledger.time, "sleep", waits.append)
    client = _Throttled("t", unprocessed_rounds=100)
    # WHEN the ledger reads, THEN it backs off exponentially and gives up as transient
    with pytest.raises(TransientError, match="unprocessed"):
        ledger.Ledger("t", "OpenWork", client).batch_get([str(n) for n in range(20)])
    retries = ledger._UNPROCESSED_RETRIES
    assert waits == [min(0.05 * 2**attempt, 2.0) for attempt in range(retries)]


def test_a_name_started_again_while_running_is_not_counted_twice() -> None:
    """Step Functions accepts a second start of a running name with the same input."""
    from service.dal.workflow import Processor

    class Idempotent:
        calls = 0

        def start_execution(self, **kwargs: Any) -> dict[str, str]:
            Idempotent.calls += 1
            return {"executionArn": f"arn:exec:{kwargs['name']}"}

    processor = Processor("arn:sm", Idempotent())
    assert processor.start("audit-x-1", {"a": 1}) is True
    assert processor.start("audit-x-1", {"a": 1}) is False
    assert Idempotent.calls == 1


def test_an_upload_without_a_version_waits_out_eventbridges_retries_before_a_resubmission() -> None:
    # GIVEN the audit's window: 12 h recent cutoff, EventBridge may deliver up to 24 h late
    window = AuditWindow(
        now=1_000_000.0,
        recent_cutoff_seconds=12 * 3600,
        retention_seconds=30 * 86400,
        max_attempts=3,
        late_event_seconds=86400,
    )
    sixteen_hours_ago = window.now - 16 * 3600
    versioned = ListedObject("k", "v1", sixteen_hours_ago, '"e"', 1)
    unversioned = ListedObject("k", "null", sixteen_hours_ago, '"e"', 1)
    # WHEN both were uploaded 16 h ago and have no row
    # THEN the versioned one is resubmitted (a late event keys on the same version id:
    # a Duplicate), and the unversioned one waits (its late event would key elsewhere)
    assert classify(versioned, None, window) == "missing_resubmitted"
    assert age_verdict(unversioned, window) == "skipped_recent"
    assert age_verdict(ListedObject("k", "null", window.now - 25 * 3600, '"e"', 1), window) is None


# ---- the Distributed Map's items and the batch's budget ---------------------------


def test_a_listed_item_in_step_functions_shape_is_the_unversioned_upload() -> None:
    # GIVEN an item as the ListObjectsV2 item reader hands it to a child
    item = {"Etag": '"abc"', "Key": "in/a b.png", "LastModified": 1668699881, "Size": 34910}
    # WHEN it is read
    obj = listed_item({**item, "StorageClass": "STANDARD"})
    # THEN it is the key's current upload, named "null" (a listing has no versions)
    assert obj == ListedObject("in/a b.png", "null", 1668699881.0, '"abc"', 34910, True)


def test_an_inventory_row_is_decoded_and_a_delete_marker_or_foreign_row_skipped() -> None:
    # GIVEN rows of a CSV inventory with every version (every value a string, keys URL-encoded)
    row = {
        "Bucket": "ingest",
        "Key": "in/a+b%C3%A9.png",
        "VersionId": "v1",
        "IsLatest": "false",
        "IsDeleteMarker": "false",
        "Size": "12",
        "LastModifiedDate": "2026-11-20T10:00:01.000Z",
        "ETag": "abc",
    }
    # WHEN they are read
    obj = inventory_item(row, "ingest")
    # THEN the key is decoded, the time is epoch seconds and the version not the latest
    assert obj is not None
    assert (obj.key, obj.version_id, obj.latest, obj.size) == ("in/a bé.png", "v1", False, 12)
    assert obj.last_modified == 1795168801.0
    assert inventory_item({**row, "IsDeleteMarker": "true"}, "ingest") is None
    assert inventory_item({**row, "Bucket": "other"}, "ingest") is None
    unversioned = inventory_item({**row, "VersionId": ""}, "ingest")
    assert unversioned is not None and unversioned.version_id == "null"


@pytest.mark.parametrize(
    ("first", "marker"), [("img/1.png", "img/1.pn"), ("a", None), ("é", None), ("aé", "a")]
)
def test_the_key_marker_sorts_before_the_batchs_first_key(first: str, marker: str | None) -> None:
    assert key_marker_before(first) == marker
    assert marker is None or marker.encode() < first.encode()


@pytest.mark.parametrize(
    ("first", "last", "prefix"),
    [
        ("img/1.png", "img/3.png", "img/"),
        ("a", "a", "a"),
        ("data/x", "data-y", "data"),
        ("", "b", ""),
    ],
)
def test_a_batchs_versions_are_listed_under_its_keys_common_prefix(
    first: str, last: str, prefix: str
) -> None:
    assert common_prefix(first, last) == prefix


def test_versions_of_keeps_only_the_batchs_keys() -> None:
    inside = ListedObject("b", "v1", 0.0, "", 0)
    outside = ListedObject("ba", "v2", 0.0, "", 0)
    assert versions_of(["a", "b"], [inside, outside]) == [inside]


def test_the_budget_spaces_starts_at_its_rate_and_stops_at_its_deadline() -> None:
    # GIVEN a batch's share of 25 starts/s among 10 children, and 2 s to spend
    budget = Budget(per_second=2.5, deadline=102.0)
    # WHEN it is asked for starts at t=100
    waits = [budget.wait(100.0) for _ in range(6)]
    # THEN they are 0.4 s apart, and none is given at or after the deadline
    assert waits[:5] == pytest.approx([0.0, 0.4, 0.8, 1.2, 1.6])
    assert waits[5] is None


class _Starts:
    """A processor that records its starts (the rate is what is under test)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def start(self, name: str, execution_input: Any, claims: Any = ()) -> bool:
        self.names.append(name)
        return True


class _EmptyLedger:
    def batch_get(self, keys: Any, with_claims: bool = False) -> dict[str, LedgerRow]:
        return {}

    def content_rows(self, ref: str, etag: str) -> list[LedgerRow]:
        return []


def test_a_batch_keeps_to_its_share_of_the_rate_and_defers_the_rest() -> None:
    from types import SimpleNamespace

    from service.handlers.audit import audit_batch

    # GIVEN 100 lost uploads in one batch, 10 starts/s among 1 child, 0.15 s to spend
    settings = AuditSettings.from_env(
        {
            **ENV,
            "AUDIT_RESUBMITS_PER_SECOND": "10",
            "AUDIT_MAX_CONCURRENCY": "1",
            "AUDIT_BATCH_SECONDS": "0.15",
            "AUDIT_RECENT_CUTOFF_HOURS": "0",
            "INGRESS_MAX_EVENT_AGE_SECONDS": "0",
        }
    )
    items = [
        {"Key": f"k{n}", "Etag": f'"e{n}"', "LastModified": int(NOW) - 3600, "Size": 1}
        for n in range(100)
    ]
    processor = _Starts()
    clients: Any = SimpleNamespace(processor=processor, ledger=_EmptyLedger(), bucket=None)
    event = {"auditId": "a1", "startedAt": NOW * 1000, "versioned": False, "items": items}
    # WHEN the batch runs
    result = audit_batch(event, settings, clients)
    # THEN it started no more than the rate allows in its time, and counted the rest
    counts = result["counts"]
    assert 1 <= len(processor.names) <= 2
    assert counts["missing_resubmitted"] == len(processor.names)
    assert counts["resubmit_deferred"] == 100 - len(processor.names)
    assert counts["scanned"] == 100


def test_what_a_run_reached_stops_at_each_kinds_cutoff_and_at_when_the_objects_were_seen() -> None:
    # An SQS source over an existing bucket: uploads without a version id wait 28.5 days.
    window = replace(WINDOW, late_event_seconds=28.5 * 86400)
    listing = reached(window, seen_at=NOW)
    assert listing.versioned_until_ms == round((NOW - 12 * 3600) * 1000)
    assert listing.unversioned_until_ms == round((NOW - 28.5 * 86400) * 1000)
    # An inventory report S3 began 40 hours before the run: nothing after it was seen.
    report = reached(window, seen_at=NOW - 40 * 3600)
    assert report.versioned_until_ms == round((NOW - 40 * 3600) * 1000)
    assert report.unversioned_until_ms == listing.unversioned_until_ms


def test_the_watermark_keeps_the_later_end_and_reads_nothing_else() -> None:
    stored = Watermark(5_000, 3_000)
    assert stored.advanced(Watermark(4_000, 4_000)) == Watermark(5_000, 4_000)
    assert Watermark.from_json(stored.as_json()) == stored
    for junk in (None, [], {"versionedUntil": "5000"}, {"versionedUntil": -1}):
        assert Watermark.from_json(junk) == Watermark()


@pytest.mark.parametrize(
    "stored",
    [
        {"versionedUntil": True, "unversionedUntil": 0},  # a boolean is no time
        {"versionedUntil": float("nan"), "unversionedUntil": 0},  # json reads NaN
        {"versionedUntil": float("inf"), "unversionedUntil": 0},  # and 1e400
        {"versionedUntil": 1, "unversionedUntil": 1, "extra": 1},
        {"versionedUntil": 1},
        {"versionedUntil": 10**30, "unversionedUntil": 1},
        {"versionedUntil": NOW * 1000 + 301_000, "unversionedUntil": 1},  # past the skew
    ],
)
def test_a_stored_watermark_that_is_not_the_audits_is_not_yet_and_says_why(stored: Any) -> None:
    mark, problem = Watermark.parse(stored, NOW * 1000)
    assert mark == Watermark() and problem


def test_a_stored_watermark_within_the_clocks_skew_is_taken() -> None:
    stored = {"versionedUntil": NOW * 1000 + 299_000, "unversionedUntil": 0}
    assert Watermark.parse(stored, NOW * 1000) == (Watermark(int(NOW * 1000 + 299_000), 0), None)


@pytest.mark.parametrize(
    ("version", "until_hours_ago", "age_hours", "verdict"),
    [
        ("v1", 24, 24 + 23, None),  # within the margin of the watermark: judged again
        ("v1", 24, 24 + 25, "skipped_audited"),
        ("v1", None, 24 * 29, None),  # no watermark: the retention window
        ("null", 24, 24 + 25, "skipped_audited"),
        ("null", 24 * 20, 24 + 25, None),  # its own, later watermark (it waits longer)
    ],
)  # fmt: skip
def test_an_upload_an_earlier_audit_judged_is_skipped_past_the_margin(
    version: str, until_hours_ago: float | None, age_hours: float, verdict: str | None
) -> None:
    assert WATERMARK_MARGIN_SECONDS == 24 * 3600
    until = None if until_hours_ago is None else NOW - until_hours_ago * 3600
    window = replace(
        WINDOW,
        versioned_until=until if version != "null" else NOW - 24 * 3600,
        unversioned_until=until if version == "null" else None,
    )
    assert age_verdict(listed(age_hours, version), window) == verdict
