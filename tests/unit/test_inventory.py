"""An S3 Inventory report written as S3 writes a CSV one (onceflow/local/inventory.py)."""

from __future__ import annotations

import csv
import datetime
import gzip
import hashlib
import io
import json
import re
import threading
from typing import Any
from urllib.parse import unquote_plus

import pytest

from onceflow.local import inventory
from onceflow.local.engine import LocalEngine

NOW = datetime.datetime(2026, 3, 8, 21, 32, 45, tzinfo=datetime.UTC)
_NAMES = iter(range(10**6))


def _bucket(engine: LocalEngine, versioned: bool = False) -> str:
    s3 = engine.client("s3")
    name = f"inventory-{threading.get_ident()}-{next(_NAMES)}"
    s3.create_bucket(Bucket=name)
    if versioned:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def _configuration(destination: str, **fields: Any) -> dict[str, Any]:
    """One InventoryConfigurations entry in its CloudFormation shape."""
    return {
        "Id": "daily-audit",
        "Enabled": True,
        "Destination": {
            "BucketArn": f"arn:aws:s3:::{destination}",
            "Format": "CSV",
            "Prefix": "inventory",
        },
        "IncludedObjectVersions": "Current",
        "ScheduleFrequency": "Daily",
        **fields,
    }


def _get(engine: LocalEngine, bucket: str, key: str) -> bytes:
    body: bytes = engine.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def _rows(engine: LocalEngine, bucket: str, manifest: dict[str, Any]) -> list[dict[str, str]]:
    """Every row of the report, by the manifest's fileSchema."""
    columns = manifest["fileSchema"].split(", ")
    rows = []
    for file in manifest["files"]:
        text = gzip.decompress(_get(engine, bucket, file["key"])).decode()
        rows += [dict(zip(columns, row, strict=True)) for row in csv.reader(io.StringIO(text))]
    return rows


def test_a_current_inventory_is_written_as_s3_writes_it(engine: LocalEngine) -> None:
    s3 = engine.client("s3")
    source, destination = _bucket(engine), _bucket(engine)
    keys = ["data/a b.txt", "data/c+d.txt", "data/é/f%.txt"]
    for key in [*keys, "other/outside.txt"]:
        s3.put_object(Bucket=source, Key=key, Body=key.encode())
    optional = ["ETag", "Size", "StorageClass", "LastModifiedDate"]  # any order asked
    configuration = _configuration(destination, Prefix="data/", OptionalFields=optional)
    manifest_key = inventory.deliver(s3, source, configuration, NOW, rows_per_file=2)

    base = f"inventory/{source}/daily-audit/"
    assert manifest_key == base + "2026-03-08T21-32Z/manifest.json"
    text = _get(engine, destination, manifest_key)
    manifest = json.loads(text)
    assert manifest["sourceBucket"] == source
    assert manifest["destinationBucket"] == f"arn:aws:s3:::{destination}"
    assert manifest["version"] == "2016-11-30"
    assert manifest["creationTimestamp"] == str(int(NOW.timestamp() * 1000))
    assert manifest["fileFormat"] == "CSV"
    # Bucket and Key, then the optional fields in the documented order.
    assert manifest["fileSchema"] == "Bucket, Key, Size, LastModifiedDate, ETag, StorageClass"
    # Two rows a file: three objects under the prefix make two data files.
    assert len(manifest["files"]) == 2
    for file in manifest["files"]:
        assert re.fullmatch(re.escape(base) + r"data/[0-9a-f-]{36}\.csv\.gz", file["key"])
        body = _get(engine, destination, file["key"])
        assert (file["size"], file["MD5checksum"]) == (len(body), hashlib.md5(body).hexdigest())
    checksum = _get(engine, destination, base + "2026-03-08T21-32Z/manifest.checksum")
    assert checksum.decode() == hashlib.md5(text).hexdigest()
    symlink = _get(engine, destination, base + "hive/dt=2026-03-08-21-32/symlink.txt").decode()
    assert symlink.splitlines() == [f"s3://{destination}/{f['key']}" for f in manifest["files"]]

    rows = _rows(engine, destination, manifest)
    # The key URL-encoded (a space as +), decoded by unquote_plus.
    assert [row["Key"] for row in rows] == [
        "data/a+b.txt",
        "data/c%2Bd.txt",
        "data/%C3%A9/f%25.txt",
    ]
    assert [unquote_plus(row["Key"]) for row in rows] == keys
    for row, key in zip(rows, keys, strict=True):
        head = s3.head_object(Bucket=source, Key=key)
        assert row == {
            "Bucket": source,
            "Key": row["Key"],
            "Size": str(len(key.encode())),
            "LastModifiedDate": head["LastModified"].strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "ETag": head["ETag"].strip('"'),
            "StorageClass": "STANDARD",
        }
    # Every field quoted, no header row.
    first = gzip.decompress(_get(engine, destination, manifest["files"][0]["key"])).decode()
    assert first.startswith(f'"{source}","data/a+b.txt","')


def test_a_versioned_inventory_lists_every_version_and_delete_marker(
    engine: LocalEngine,
) -> None:
    s3 = engine.client("s3")
    source, destination = _bucket(engine, versioned=True), _bucket(engine)
    first = s3.put_object(Bucket=source, Key="k.json", Body=b"one")["VersionId"]
    second = s3.put_object(Bucket=source, Key="k.json", Body=b"two!")["VersionId"]
    marker = s3.delete_object(Bucket=source, Key="k.json")["VersionId"]
    kept = s3.put_object(Bucket=source, Key="m.json", Body=b"m", ServerSideEncryption="aws:kms")[
        "VersionId"
    ]
    upload = s3.create_multipart_upload(Bucket=source, Key="p.bin")["UploadId"]
    part = s3.upload_part(Bucket=source, Key="p.bin", UploadId=upload, PartNumber=1, Body=b"p")
    parts = {"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}
    multipart = s3.complete_multipart_upload(
        Bucket=source, Key="p.bin", UploadId=upload, MultipartUpload=parts
    )["VersionId"]
    optional = ["Size", "IsMultipartUploaded", "EncryptionStatus"]
    configuration = _configuration(
        destination, IncludedObjectVersions="All", OptionalFields=optional
    )
    manifest = json.loads(
        _get(engine, destination, inventory.deliver(s3, source, configuration, NOW))
    )
    assert manifest["fileSchema"] == (
        "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, IsMultipartUploaded, "
        "EncryptionStatus"
    )
    rows = [
        {k: v for k, v in row.items() if k != "Bucket"}
        for row in _rows(engine, destination, manifest)
    ]
    # A key's versions newest first: the delete marker (latest), then the noncurrent ones.
    assert rows == [
        {"Key": "k.json", "VersionId": marker, "IsLatest": "true", "IsDeleteMarker": "true",
         "Size": "", "IsMultipartUploaded": "", "EncryptionStatus": ""},
        {"Key": "k.json", "VersionId": second, "IsLatest": "false", "IsDeleteMarker": "false",
         "Size": "4", "IsMultipartUploaded": "false", "EncryptionStatus": "SSE-S3"},
        {"Key": "k.json", "VersionId": first, "IsLatest": "false", "IsDeleteMarker": "false",
         "Size": "3", "IsMultipartUploaded": "false", "EncryptionStatus": "SSE-S3"},
        {"Key": "m.json", "VersionId": kept, "IsLatest": "true", "IsDeleteMarker": "false",
         "Size": "1", "IsMultipartUploaded": "false", "EncryptionStatus": "SSE-KMS"},
        {"Key": "p.bin", "VersionId": multipart, "IsLatest": "true", "IsDeleteMarker": "false",
         "Size": "1", "IsMultipartUploaded": "true", "EncryptionStatus": "SSE-S3"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Destination": {"BucketArn": "arn:aws:s3:::d", "Format": "ORC"}}, "CSV"),
        ({"Destination": {"BucketArn": "d", "Format": "CSV"}}, "ARN"),
        ({"IncludedObjectVersions": "Some"}, "All or Current"),
        ({"OptionalFields": ["Colour"]}, "not known"),
        ({"OptionalFields": ["ObjectLockMode"]}, "not reproduced"),
        ({"Enabled": False}, "not enabled"),
        ({"Id": ""}, "Id"),
    ],
)
def test_configurations_that_are_not_written(
    engine: LocalEngine, change: dict[str, Any], message: str
) -> None:
    source = _bucket(engine)
    configuration = {**_configuration("d"), **change}
    with pytest.raises(inventory.InventoryConfigurationError, match=message):
        inventory.deliver(engine.client("s3"), source, configuration, NOW)
    with pytest.raises(ValueError, match="timezone"):
        inventory.deliver(
            engine.client("s3"), source, _configuration("d"), NOW.replace(tzinfo=None)
        )


@pytest.mark.parametrize(
    ("key", "encoded"),
    [
        ("plain/key-1_a.b~c", "plain/key-1_a.b~c"),
        ("a b", "a+b"),
        ("a+b", "a%2Bb"),
        ("100%", "100%25"),
        ("한/x", "%ED%95%9C/x"),
    ],
)
def test_keys_are_url_encoded_a_space_as_plus(key: str, encoded: str) -> None:
    assert inventory.encode_key(key) == encoded
    assert unquote_plus(encoded) == key
