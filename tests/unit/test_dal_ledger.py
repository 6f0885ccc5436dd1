"""The ledger's data layer asks DynamoDB exactly these requests, and maps its answers.

Each request is asserted whole with a botocore Stubber (a parameter more or
less fails the test), as DynamoDB would receive it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from service.dal.ledger import Ledger
from service.errors import PermanentError, TransientError
from service.model import LedgerRow, Status

TABLE = "ledger"
OWNER = "arn:aws:states:us-east-1:123456789012:execution:processor:first"
PK = "s3://in/a.png#v1"
# What the audit reads of a row (the names DynamoDB reserves go through #a<n>).
READ_NAMES = {
    "#a0": "pk", "#a1": "status", "#a2": "attempts", "#a3": "dead_lettered_at",
    "#a4": "expires_at", "#a5": "lock_owner", "#a6": "lock_expires_at", "#a7": "source",
    "#a8": "bucket", "#a9": "object_key", "#a10": "version_id", "#a11": "sequencer",
    "#a12": "etag", "#a13": "size", "#a14": "open_status", "#a15": "updated_at",
}  # fmt: skip
STUCK = LedgerRow(
    pk=PK, status=Status.PROCESSING, attempts=1, lock_owner=OWNER, lock_expires_at=1_700_000_000
)


@pytest.fixture
def dynamodb() -> Iterator[tuple[Ledger, Stubber]]:
    client = boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # a stub: nothing is sent
    )
    with Stubber(client) as stub:
        yield Ledger(TABLE, "OpenWork", client), stub
        stub.assert_no_pending_responses()


def test_batch_get_reads_the_audits_attributes_of_each_key_once(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN a table holding a row for one of two keys
    stub.add_response(
        "batch_get_item",
        {
            "Responses": {
                TABLE: [
                    {
                        "pk": {"S": PK},
                        "status": {"S": "PROCESSED"},
                        "attempts": {"N": "1"},
                        "expires_at": {"N": "1900000000"},
                        "size": {"N": "34910"},
                    }
                ]
            }
        },
        {
            "RequestItems": {
                TABLE: {
                    "Keys": [{"pk": {"S": PK}}, {"pk": {"S": "s3://in/b.png#v1"}}],
                    "ProjectionExpression": ", ".join(READ_NAMES),
                    "ExpressionAttributeNames": READ_NAMES,
                }
            }
        },
    )
    # WHEN the audit reads both keys (one named twice)
    rows = ledger.batch_get([PK, "s3://in/b.png#v1", PK])
    # THEN one request names each key once, and the row comes back typed
    assert rows == {
        PK: LedgerRow(
            pk=PK, status=Status.PROCESSED, attempts=1, expires_at=1_900_000_000, size=34910
        )
    }


def test_open_rows_query_each_shard_of_a_status_with_the_lock_cutoff(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb

    # GIVEN an index with one stuck row in shard 0, read in two pages, and nothing elsewhere
    def query(open_status: str, **more: Any) -> dict[str, Any]:
        return {
            "TableName": TABLE,
            "IndexName": "OpenWork",
            "KeyConditionExpression": "open_status = :status AND lock_expires_at < :cutoff",
            "ExpressionAttributeValues": {
                ":status": {"S": open_status},
                ":cutoff": {"N": "1700000100"},
            },
            "Limit": 200,
            **more,
        }

    item = {
        "pk": {"S": PK},
        "status": {"S": "PROCESSING"},
        "lock_owner": {"S": OWNER},
        "lock_expires_at": {"N": "1700000000"},
        "attempts": {"N": "1"},
    }
    last = {"pk": {"S": PK}, "open_status": {"S": "PROCESSING#0"}}
    # Rows written before the shards carry the bare status: that key is read first.
    stub.add_response("query", {"Items": []}, query("PROCESSING"))
    stub.add_response("query", {"Items": [item], "LastEvaluatedKey": last}, query("PROCESSING#0"))
    stub.add_response(
        "query", {"Items": []}, query("PROCESSING#0", Limit=199, ExclusiveStartKey=last)
    )
    for shard in "123456789abcdef":
        stub.add_response("query", {"Items": []}, query(f"PROCESSING#{shard}", Limit=199))
    # WHEN the sweep reads a page of stuck work
    rows, cursor = ledger.open_rows(Status.PROCESSING, 1_700_000_100, None)
    # THEN every shard was asked in order, page by page, and the sweep is done with them
    assert rows == [STUCK]
    assert cursor is None


def test_a_stuck_release_is_fenced_on_the_lock_the_index_showed(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN the row still held by the owner and expiry the index showed
    stub.add_response(
        "update_item",
        {},
        {
            "TableName": TABLE,
            "Key": {"pk": {"S": PK}},
            "UpdateExpression": (
                "SET #status = :failed, open_status = :open, last_error = :error, "
                "updated_at = :now_ms, released_by = :by"
            ),
            "ConditionExpression": (
                "#status = :processing AND lock_owner = :owner "
                "AND lock_expires_at = :lock_expires_at"
            ),
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                ":failed": {"S": "FAILED"},
                ":processing": {"S": "PROCESSING"},
                ":owner": {"S": OWNER},
                ":lock_expires_at": {"N": "1700000000"},
                ":error": {
                    "S": f"LockExpired: the lock of {OWNER} expired at 1700000000 with the "
                    "work unfinished; released by audit-1"
                },
                ":now_ms": {"N": "1700000200000"},
                ":by": {"S": "audit-1"},
                # The FAILED row goes back into the open-work index, in its key's shard.
                ":open": {"S": "FAILED#e"},
            },
        },
    )
    # WHEN the audit releases it THEN the write went through
    assert ledger.release_stuck(STUCK, 1_700_000_200_000, "audit-1")


def test_a_release_the_fence_refuses_is_a_takeover_not_an_error(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN a redelivery that reclaimed the row since the index was read
    stub.add_client_error("update_item", "ConditionalCheckFailedException", http_status_code=400)
    # WHEN the audit releases what it saw THEN nothing is written, and it says so
    assert ledger.release_stuck(STUCK, 1, "audit-1") is False


# ---- the sweep dead-letters under its own lock: take, send, mark ------------------

# What a take writes, whatever the row was: PROCESSING under the audit, still in the
# open-work index (its key's PROCESSING shard), until the lock the audit gives itself.
TAKE_UPDATE = (
    "SET #status = :processing, open_status = :open, lock_owner = :me, "
    "lock_expires_at = :lock_expires_at, updated_at = :now_ms"
)
TAKE_VALUES = {
    ":processing": {"S": "PROCESSING"},
    ":open": {"S": "PROCESSING#e"},
    ":me": {"S": "audit-1"},
    ":lock_expires_at": {"N": "1700000900"},
    ":now_ms": {"N": "1700000200000"},
}


def test_a_stuck_row_is_taken_fenced_on_the_lock_the_index_showed(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN a stuck row at MaxAttempts, still under the owner and expiry the index showed
    stub.add_response(
        "update_item",
        {},
        {
            "TableName": TABLE,
            "Key": {"pk": {"S": PK}},
            "UpdateExpression": TAKE_UPDATE,
            # A reclaim or a delivery's takeover since changed owner and expiry.
            "ConditionExpression": (
                "#status = :processing AND lock_owner = :seen_lock_owner "
                "AND lock_expires_at = :seen_lock_expires_at "
                "AND attribute_not_exists(dead_lettered_at)"
            ),
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                **TAKE_VALUES,
                ":seen_lock_owner": {"S": OWNER},
                ":seen_lock_expires_at": {"N": "1700000000"},
            },
        },
    )
    # WHEN the sweep takes it before sending its DLQ message THEN the write went through
    assert ledger.take(replace(STUCK, attempts=3), 1_700_000_200_000, "audit-1", 1_700_000_900)


def test_a_failed_row_is_taken_fenced_on_what_was_read(dynamodb: tuple[Ledger, Stubber]) -> None:
    ledger, stub = dynamodb
    # GIVEN a FAILED row at MaxAttempts whose DLQ send failed, as the index showed it
    row = LedgerRow(
        pk=PK, status=Status.FAILED, attempts=3, lock_owner=OWNER, updated_at=1_699_999_000_000
    )
    stub.add_response(
        "update_item",
        {},
        {
            "TableName": TABLE,
            "Key": {"pk": {"S": PK}},
            "UpdateExpression": TAKE_UPDATE,
            # A reclaim, a redrive or a delivery's takeover since changed these.
            "ConditionExpression": (
                "#status = :failed AND updated_at = :seen_updated_at "
                "AND lock_owner = :seen_lock_owner AND attribute_not_exists(dead_lettered_at)"
            ),
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                **TAKE_VALUES,
                ":failed": {"S": "FAILED"},
                ":seen_updated_at": {"N": "1699999000000"},
                ":seen_lock_owner": {"S": OWNER},
            },
        },
    )
    # AND a delivery that took the row over just before the audit's take
    stub.add_client_error("update_item", "ConditionalCheckFailedException", http_status_code=400)
    # WHEN the sweep takes it, and then again
    # THEN the first take holds and the second is refused by the fence: nothing to send
    assert ledger.take(row, 1_700_000_200_000, "audit-1", 1_700_000_900) is True
    assert ledger.take(row, 1_700_000_200_000, "audit-1", 1_700_000_900) is False


def test_a_take_without_an_owner_asks_that_there_still_is_none(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN a FAILED row read without lock_owner and updated_at (absent, not empty)
    row = LedgerRow(pk=PK, status=Status.FAILED, attempts=3)
    stub.add_response(
        "update_item",
        {},
        {
            "TableName": TABLE,
            "Key": {"pk": {"S": PK}},
            "UpdateExpression": TAKE_UPDATE,
            "ConditionExpression": (
                "#status = :failed AND attribute_not_exists(updated_at) "
                "AND attribute_not_exists(lock_owner) AND attribute_not_exists(dead_lettered_at)"
            ),
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {**TAKE_VALUES, ":failed": {"S": "FAILED"}},
        },
    )
    # WHEN the sweep takes it THEN the fence names what was absent
    assert ledger.take(row, 1_700_000_200_000, "audit-1", 1_700_000_900) is True


def test_only_open_work_is_taken(dynamodb: tuple[Ledger, Stubber]) -> None:
    ledger, _ = dynamodb
    # GIVEN a PROCESSED row WHEN the sweep would take it THEN it refuses before any request
    with pytest.raises(ValueError, match="not open work"):
        ledger.take(LedgerRow(pk=PK, status=Status.PROCESSED), 1, "audit-1", 2)


def test_the_dead_letter_mark_is_fenced_on_the_audits_own_lock(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    mark = {
        "TableName": TABLE,
        "Key": {"pk": {"S": PK}},
        "UpdateExpression": (
            "SET #status = :failed, last_error = :error, updated_at = :now_ms, "
            "dead_lettered_at = :now_ms, dead_lettered_by = :me REMOVE open_status"
        ),
        "ConditionExpression": "lock_owner = :me AND #status = :processing",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":failed": {"S": "FAILED"},
            ":processing": {"S": "PROCESSING"},
            ":me": {"S": "audit-1"},
            ":error": {"S": "LockExpired: the lock of x expired"},
            ":now_ms": {"N": "1700000300000"},
        },
    }
    # GIVEN the row still under the audit's lock, then under another owner's
    stub.add_response("update_item", {}, mark)
    stub.add_client_error(
        "update_item", "ConditionalCheckFailedException", http_status_code=400, expected_params=mark
    )
    # WHEN the audit marks it dead-lettered after its DLQ message was sent, twice
    # THEN the row leaves the open-work index, FAILED, never reclaimed; the second
    # write is refused by the fence
    error = "LockExpired: the lock of x expired"
    assert ledger.mark_dead_lettered(PK, "audit-1", 1_700_000_300_000, error) is True
    assert ledger.mark_dead_lettered(PK, "audit-1", 1_700_000_300_000, error) is False


def test_a_row_whose_dead_letter_was_refused_is_given_back_as_it_was_read(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN a stuck row the audit took, and a FAILED one it took without an owner
    failed = LedgerRow(pk=PK, status=Status.FAILED, attempts=3, lock_expires_at=1_699_000_000)
    fenced = {
        "ConditionExpression": "lock_owner = :me AND #status = :processing",
        "ExpressionAttributeNames": {"#status": "status"},
    }
    stub.add_response(
        "update_item",
        {},
        {
            "TableName": TABLE,
            "Key": {"pk": {"S": PK}},
            "UpdateExpression": (
                "SET #status = :status, open_status = :open, updated_at = :now_ms, "
                "lock_owner = :lock_owner, lock_expires_at = :lock_expires_at"
            ),
            **fenced,
            "ExpressionAttributeValues": {
                ":status": {"S": "PROCESSING"},
                ":open": {"S": "PROCESSING#e"},
                ":processing": {"S": "PROCESSING"},
                ":me": {"S": "audit-1"},
                ":now_ms": {"N": "1700000300000"},
                ":lock_owner": {"S": OWNER},
                ":lock_expires_at": {"N": "1700000000"},
            },
        },
    )
    stub.add_client_error(
        "update_item",
        "ConditionalCheckFailedException",
        http_status_code=400,
        expected_params={
            "TableName": TABLE,
            "Key": {"pk": {"S": PK}},
            "UpdateExpression": (
                "SET #status = :status, open_status = :open, updated_at = :now_ms, "
                "lock_expires_at = :lock_expires_at REMOVE lock_owner"
            ),
            **fenced,
            "ExpressionAttributeValues": {
                ":status": {"S": "FAILED"},
                ":open": {"S": "FAILED#e"},
                ":processing": {"S": "PROCESSING"},
                ":me": {"S": "audit-1"},
                ":now_ms": {"N": "1700000300000"},
                ":lock_expires_at": {"N": "1699000000"},
            },
        },
    )
    # WHEN the DLQ refused their dead letters and the audit gives them back
    # THEN each is what it was read as (owner, expiry, open-work entry), fenced on the
    # audit's own lock; a row another owner holds by then is refused, not overwritten
    assert ledger.give_back(replace(STUCK, attempts=3), "audit-1", 1_700_000_300_000) is True
    assert ledger.give_back(failed, "audit-1", 1_700_000_300_000) is False
    with pytest.raises(ValueError, match="never taken"):
        ledger.give_back(LedgerRow(pk=PK, status=Status.PROCESSED), "audit-1", 1)


def test_the_current_row_is_a_consistent_read(dynamodb: tuple[Ledger, Stubber]) -> None:
    ledger, stub = dynamodb
    # GIVEN a key with a row, and one without
    request = {"RequestItems": {TABLE: {"Keys": [{"pk": {"S": PK}}], "ConsistentRead": True}}}
    item = {"pk": {"S": PK}, "status": {"S": "FAILED"}, "last_error": {"S": "PermanentError: x"}}
    stub.add_response("batch_get_item", {"Responses": {TABLE: [item]}}, request)
    stub.add_response("batch_get_item", {"Responses": {TABLE: []}}, request)
    # WHEN the audit reads it twice THEN the row, then None
    assert ledger.current(PK) == LedgerRow(PK, Status.FAILED, last_error="PermanentError: x")
    assert ledger.current(PK) is None


def test_a_consistent_read_left_unprocessed_is_transient(dynamodb: tuple[Ledger, Stubber]) -> None:
    ledger, stub = dynamodb
    # GIVEN DynamoDB leaves the key unprocessed (it does so when throttled)
    keys = {TABLE: {"Keys": [{"pk": {"S": PK}}], "ConsistentRead": True}}
    stub.add_response("batch_get_item", {"Responses": {TABLE: []}, "UnprocessedKeys": keys})
    # WHEN the audit reads it THEN it is told to try again, not that the row is gone
    with pytest.raises(TransientError, match="unprocessed"):
        ledger.current(PK)


# ---- every ledger call, refused ---------------------------------------------------

_CALLS: dict[str, tuple[str, Any]] = {
    "batch_get": ("batch_get_item", lambda ledger: ledger.batch_get([PK])),
    "open_rows": ("query", lambda ledger: ledger.open_rows(Status.FAILED, None, None)),
    "content_rows": ("query", lambda ledger: ledger.content_rows("s3://in/a.png", "e")),
    "release_stuck": ("update_item", lambda ledger: ledger.release_stuck(STUCK, 1, "a")),
    "current": ("batch_get_item", lambda ledger: ledger.current(PK)),
    "take": ("update_item", lambda ledger: ledger.take(STUCK, 1, "a", 2)),
    "give_back": ("update_item", lambda ledger: ledger.give_back(STUCK, "a", 1)),
    "mark_dead_lettered": (
        "update_item",
        lambda ledger: ledger.mark_dead_lettered(PK, "a", 1, "e"),
    ),
}


@pytest.mark.parametrize("method", sorted(_CALLS))
@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("ProvisionedThroughputExceededException", 400, TransientError),
        ("ThrottlingException", 400, TransientError),
        ("InternalServerError", 500, TransientError),
        ("AccessDeniedException", 400, PermanentError),
        ("ValidationException", 400, PermanentError),
    ],
)
def test_a_refused_ledger_call_is_transient_when_it_may_pass_and_permanent_otherwise(
    dynamodb: tuple[Ledger, Stubber], method: str, code: str, status: int, error: type[Exception]
) -> None:
    ledger, stub = dynamodb
    operation, call = _CALLS[method]
    # GIVEN DynamoDB refuses the call with this code
    stub.add_client_error(operation, code, http_status_code=status)
    # WHEN the audit makes it THEN the error is the functions' own, named after the code
    with pytest.raises(error, match=code) as raised:
        call(ledger)
    assert type(raised.value) is error


def test_a_sweep_stopped_after_a_row_resumes_right_after_it(
    dynamodb: tuple[Ledger, Stubber],
) -> None:
    ledger, stub = dynamodb
    # GIVEN a stuck row the sweep handled last, in shard 3 of the index
    row = replace(STUCK, open_status="PROCESSING#3")
    # WHEN the sweep stops after it
    cursor = ledger.resume_after(Status.PROCESSING, row)
    # THEN the next query starts in that shard, right after that row (the index's keys
    # and the table's, as a LastEvaluatedKey of the index holds them)
    assert cursor == {
        "shard": 4,  # the unsharded value first, then PROCESSING#0..f
        "key": {
            "open_status": {"S": "PROCESSING#3"},
            "lock_expires_at": {"N": "1700000000"},
            "pk": {"S": PK},
        },
    }
    stub.add_response(
        "query",
        {"Items": []},
        {
            "TableName": TABLE,
            "IndexName": "OpenWork",
            "KeyConditionExpression": "open_status = :status AND lock_expires_at < :cutoff",
            "ExpressionAttributeValues": {
                ":status": {"S": "PROCESSING#3"},
                ":cutoff": {"N": "1700000100"},
            },
            "Limit": 200,
            "ExclusiveStartKey": cursor["key"],
        },
    )
    for shard in "456789abcdef":
        stub.add_response(
            "query",
            {"Items": []},
            {
                "TableName": TABLE,
                "IndexName": "OpenWork",
                "KeyConditionExpression": "open_status = :status AND lock_expires_at < :cutoff",
                "ExpressionAttributeValues": {
                    ":status": {"S": f"PROCESSING#{shard}"},
                    ":cutoff": {"N": "1700000100"},
                },
                "Limit": 200,
            },
        )
    assert ledger.open_rows(Status.PROCESSING, 1_700_000_100, cursor) == ([], None)


def test_a_row_outside_the_index_has_no_place_to_resume_from() -> None:
    with pytest.raises(ValueError, match="not a row of the open-work index"):
        Ledger.resume_after(Status.PROCESSING, replace(STUCK, open_status="FAILED#3"))
