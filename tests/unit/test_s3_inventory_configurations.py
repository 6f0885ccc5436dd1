"""S3 Inventory configurations on the engine read back as put and are deleted one by one
(onceflow/local/patches/fidelity/s3_inventory.py; its stock-moto reproduction is in
tests/upstream/test_stock_moto.py)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine


def _put(s3: Any, bucket: str, config_id: str, **fields: Any) -> None:
    destination = {"S3BucketDestination": {"Bucket": "arn:aws:s3:::reports", "Format": "CSV"}}
    s3.put_bucket_inventory_configuration(Bucket=bucket, Id=config_id, InventoryConfiguration={
        "Id": config_id, "IsEnabled": True, "Destination": destination,
        "Schedule": {"Frequency": "Daily"}, **fields})  # fmt: skip


def test_get_answers_the_configuration_as_it_was_put(engine: LocalEngine) -> None:
    """S3 API reference, GetBucketInventoryConfiguration and InventoryConfiguration: the
    configuration answers its IncludedObjectVersions (All or Current) and OptionalFields
    (a list of field names) as PutBucketInventoryConfiguration took them."""
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="got")
    _put(s3, "got", "one", IncludedObjectVersions="Current", OptionalFields=["Size"])
    _put(s3, "got", "two", IncludedObjectVersions="All", OptionalFields=["Size", "ETag"])
    one = s3.get_bucket_inventory_configuration(Bucket="got", Id="one")
    two = s3.get_bucket_inventory_configuration(Bucket="got", Id="two")
    assert one["InventoryConfiguration"]["IncludedObjectVersions"] == "Current"
    assert one["InventoryConfiguration"]["OptionalFields"] == ["Size"]
    assert one["InventoryConfiguration"]["IsEnabled"] is True
    assert two["InventoryConfiguration"]["IncludedObjectVersions"] == "All"
    assert two["InventoryConfiguration"]["OptionalFields"] == ["Size", "ETag"]


def test_delete_removes_only_the_configuration_of_that_id(engine: LocalEngine) -> None:
    """S3 API reference, DeleteBucketInventoryConfiguration: "Deletes an S3 Inventory
    configuration (identified by the inventory ID) from the bucket"; DeleteBucket still
    deletes the bucket."""
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="kept")
    _put(s3, "kept", "one", IncludedObjectVersions="Current")
    _put(s3, "kept", "two", IncludedObjectVersions="All")
    s3.delete_bucket_inventory_configuration(Bucket="kept", Id="one")
    listed = s3.list_bucket_inventory_configurations(Bucket="kept")["InventoryConfigurationList"]
    assert [c["Id"] for c in listed] == ["two"]
    # An unknown Id is refused as GetBucketInventoryConfiguration refuses it
    with pytest.raises(ClientError, match="NoSuchConfiguration"):
        s3.delete_bucket_inventory_configuration(Bucket="kept", Id="one")
    s3.delete_bucket_inventory_configuration(Bucket="kept", Id="two")
    s3.delete_bucket(Bucket="kept")
    assert "kept" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_an_unknown_configuration_is_refused_in_s3s_words(engine: LocalEngine) -> None:
    """Recorded on AWS (21-02-2026): GetBucketInventoryConfiguration of an Id the bucket does
    not have answers 404, NoSuchConfiguration, "The specified configuration does not exist."
    (LocalStack's tests/aws/services/s3/test_s3.snapshot.json, test_s3_inventory_report_crud,
    get-nonexistent-inv-config). moto answered NoSuchInventoryConfig."""
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="asked")
    with pytest.raises(ClientError) as refused:
        s3.get_bucket_inventory_configuration(Bucket="asked", Id="none")
    assert refused.value.response["Error"] == {
        "Code": "NoSuchConfiguration",
        "Message": "The specified configuration does not exist.",
    }
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
