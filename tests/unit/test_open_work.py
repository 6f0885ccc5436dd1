"""The sharded open-work index: one definition of a row's shard, every shard read, no hot key."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import boto3
from botocore.stub import Stubber

from onceflow import ops
from service.dal.ledger import Ledger
from service.logic.open_work import SHARDS, open_status, open_status_values, shard

INDEX_WRITES_PER_MESSAGE = 2  # Claim puts the row into the index, MarkComplete takes it out
PARTITION_WRU_PER_SECOND = 1000  # DynamoDB's per-partition write limit, which GSIs share


def test_the_operator_tools_shard_a_key_as_the_audit_does() -> None:
    for key in ["s3://b/a.png#v1", "sqs:order-1", "event:src:é", "s3://b/\ud800#v"]:
        assert ops.open_status("FAILED", key) == open_status("FAILED", key)


def test_a_shard_is_the_first_hex_digit_of_the_keys_md5() -> None:
    key = "sqs:order-1001"
    assert shard(key) == hashlib.md5(key.encode()).hexdigest()[0]
    assert open_status_values("FAILED") == ["FAILED", *(f"FAILED#{s}" for s in SHARDS)]


def test_the_index_sustains_5000_claims_a_second_before_a_partition_limit_binds() -> None:
    # GIVEN 100,000 keys of the shapes the ledger holds
    keys = [f"s3://bucket/uploads/{n}.png#v{n % 7}" for n in range(50_000)]
    keys += [f"sqs:order-{n}" for n in range(50_000)]
    load = Counter(shard(key) for key in keys)
    # WHEN 5,000 claims a second spread over the shards as these keys do
    busiest_share = max(load.values()) / len(keys)
    wru = 5000 * INDEX_WRITES_PER_MESSAGE * busiest_share
    # THEN the busiest index partition stays under its 1,000 WRU/s
    assert len(load) == 16
    assert wru < PARTITION_WRU_PER_SECOND, wru


def test_a_page_reads_on_through_the_shards_and_the_cursor_resumes_where_it_stopped() -> None:
    # GIVEN rows under the unsharded key (written before the shards) and in shards 0 and 3
    client = boto3.client("dynamodb", region_name="us-east-1")
    ledger = Ledger("t", "OpenWork", client)
    row = {"pk": {"S": "a"}, "status": {"S": "FAILED"}}
    answers = {key: [] for key in open_status_values("FAILED")}
    answers["FAILED"] = [row]
    answers["FAILED#0"] = [{**row, "pk": {"S": "b"}}, {**row, "pk": {"S": "c"}}]
    answers["FAILED#3"] = [{**row, "pk": {"S": "d"}}]
    seen: list[str] = []
    cursor: dict[str, Any] | None = None
    with Stubber(client) as stub:
        # WHEN the open rows are read two at a time
        for key in open_status_values("FAILED"):
            items = answers[key]
            stub.add_response("query", {"Items": items, "Count": len(items), "ScannedCount": 0})
        pages = 0
        while True:
            rows, cursor = ledger.open_rows("FAILED", None, cursor, limit=2)
            seen += [r.pk for r in rows]
            pages += 1
            if cursor is None:
                break
        stub.assert_no_pending_responses()
    # THEN every row is read once, every shard asked once, and pages hold at most two rows
    assert seen == ["a", "b", "c", "d"]
    assert pages >= 2
