"""The bundled processor's S3 reads: how each S3 answer is classified, and the conditional read.

S3's answers are injected with a botocore Stubber (the 403 that AWS gives a
role without s3:ListBucket cannot be had from moto), and played for real on
moto through the local engine's client.
"""

from __future__ import annotations

import io
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from onceflow.local.engine import LocalEngine
from service.dal.objects import ObjectStore
from service.errors import ObjectSuperseded, PermanentError, TransientError
from service.handlers.processor import process
from service.settings import ProcessorSettings
from tests.helpers import png_bytes

BUCKET = "ingest-bucket"
KEY = "uploads/a.png"
ETAG = "d41d8cd98f00b204e9800998ecf8427e"


def stubbed() -> tuple[ObjectStore, Stubber]:
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # a stub: nothing is sent
    )
    return ObjectStore(client), Stubber(client)


def body(data: bytes) -> dict[str, Any]:
    return {"Body": StreamingBody(io.BytesIO(data), len(data))}


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("NoSuchKey", 404),
        ("NoSuchVersion", 404),
        ("404", 404),
        ("InvalidArgument", 400),  # a version id S3 cannot parse
        ("MethodNotAllowed", 405),  # a version that is a delete marker
        ("InvalidObjectState", 403),  # archived
    ],
)
def test_a_missing_version_is_a_permanent_error(code: str, status: int) -> None:
    # GIVEN S3 answers that the version is gone or unreadable for good (what a role with
    # s3:ListBucket hears)
    store, stub = stubbed()
    stub.add_client_error(
        "get_object",
        service_error_code=code,
        http_status_code=status,
        expected_params={"Bucket": BUCKET, "Key": KEY, "VersionId": "v1"},
    )
    # WHEN the processor reads it THEN retrying cannot help: PermanentError
    with stub, pytest.raises(PermanentError, match=code):
        store.read(BUCKET, KEY, "v1", ETAG)
    stub.assert_no_pending_responses()


def test_access_denied_stays_transient() -> None:
    """With s3:ListBucket granted, 403 means a permission problem (KMS, bucket
    policy) an operator can fix while the retries wait, not a missing object."""
    # GIVEN S3 denies the read
    store, stub = stubbed()
    stub.add_client_error(
        "get_object",
        service_error_code="AccessDenied",
        http_status_code=403,
        expected_params={"Bucket": BUCKET, "Key": KEY, "VersionId": "v1"},
    )
    # WHEN the processor reads it THEN the error is retried, not dead-lettered
    with stub, pytest.raises(TransientError, match="AccessDenied") as raised:
        store.read(BUCKET, KEY, "v1", ETAG)
    assert not isinstance(raised.value, PermanentError)


@pytest.mark.parametrize("version_id", [None, "null"])
@pytest.mark.parametrize("etag", [ETAG, f'"{ETAG}"'])
def test_an_unversioned_read_is_conditional_on_the_announced_etag(
    version_id: str | None, etag: str
) -> None:
    # GIVEN a work item for an unversioned upload, its ETag quoted or not
    store, stub = stubbed()
    stub.add_response(
        "get_object",
        body(b"bytes"),
        # S3 is asked for that content only, as a quoted entity tag, never a version.
        expected_params={"Bucket": BUCKET, "Key": KEY, "IfMatch": f'"{ETAG}"'},
    )
    # WHEN it is read THEN the content comes back
    with stub:
        assert store.read(BUCKET, KEY, version_id, etag) == b"bytes"
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("code", "status"), [("PreconditionFailed", 412), ("NoSuchKey", 404), ("404", 404)]
)
def test_replaced_or_deleted_unversioned_content_is_superseded(code: str, status: int) -> None:
    # GIVEN the key holds other bytes now (412), or nothing (404)
    store, stub = stubbed()
    stub.add_client_error(
        "get_object",
        service_error_code=code,
        http_status_code=status,
        expected_params={"Bucket": BUCKET, "Key": KEY, "IfMatch": f'"{ETAG}"'},
    )
    # WHEN the processor reads the announced content
    with stub, pytest.raises(ObjectSuperseded, match=code) as raised:
        store.read(BUCKET, KEY, "null", ETAG)
    # THEN it is superseded: caught by that name, neither retried nor dead-lettered
    assert type(raised.value).__name__ == "ObjectSuperseded"
    assert not isinstance(raised.value, (PermanentError, TransientError))


def test_without_an_etag_an_unversioned_read_takes_what_the_key_holds() -> None:
    # GIVEN a work item with neither a version nor an etag
    store, stub = stubbed()
    stub.add_response("get_object", body(b"now"), expected_params={"Bucket": BUCKET, "Key": KEY})
    stub.add_client_error(
        "get_object",
        service_error_code="NoSuchKey",
        http_status_code=404,
        expected_params={"Bucket": BUCKET, "Key": KEY},
    )
    with stub:
        # WHEN it is read THEN no condition is sent: there is nothing to compare
        assert store.read(BUCKET, KEY, None, None) == b"now"
        # AND a missing key cannot be told from a replaced one: it is permanent
        with pytest.raises(PermanentError, match="NoSuchKey"):
            store.read(BUCKET, KEY, None, None)
    stub.assert_no_pending_responses()


def test_the_output_is_written_once_and_an_existing_one_is_no_error() -> None:
    # GIVEN S3 creates the output the first time and refuses the second (it exists)
    store, stub = stubbed()
    request = {
        "Bucket": "out",
        "Key": "processed/k.webp",
        "Body": b"webp",
        "ContentType": "image/webp",
        "Metadata": {"idempotency-key": "s3://in/a.png#v1"},
        "IfNoneMatch": "*",
    }
    stub.add_response("put_object", {"ETag": '"e"'}, request)
    stub.add_client_error(
        "put_object", "PreconditionFailed", http_status_code=412, expected_params=request
    )
    metadata = {"idempotency-key": "s3://in/a.png#v1"}
    with stub:
        # WHEN the processor writes it twice
        # THEN the first call created it, the second found it there: done, by someone
        assert store.write_once("out", "processed/k.webp", b"webp", "image/webp", metadata)
        assert not store.write_once("out", "processed/k.webp", b"webp", "image/webp", metadata)
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("code", "status"),
    [("ConditionalRequestConflict", 409), ("SlowDown", 503), ("AccessDenied", 403)],
)
def test_any_other_refused_write_is_retried(code: str, status: int) -> None:
    # GIVEN S3 refuses the write: a concurrent conditional write, throttling, a policy
    store, stub = stubbed()
    stub.add_client_error("put_object", code, http_status_code=status)
    # WHEN the processor writes THEN a retry may settle it: TransientError, never permanent
    with stub, pytest.raises(TransientError, match=code) as raised:
        store.write_once("out", "processed/k.webp", b"webp", "image/webp", {})
    assert type(raised.value) is TransientError


# ---- The same, played on moto through the local engine's client -------------------


def test_moto_serves_the_announced_content_and_refuses_its_replacement(
    engine: LocalEngine,
) -> None:
    # GIVEN a versioning-suspended bucket where one key was uploaded twice
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="suspended-bucket")
    s3.put_bucket_versioning(
        Bucket="suspended-bucket", VersioningConfiguration={"Status": "Suspended"}
    )
    first = s3.put_object(Bucket="suspended-bucket", Key=KEY, Body=b"first")["ETag"]
    second = s3.put_object(Bucket="suspended-bucket", Key=KEY, Body=b"second")["ETag"]
    store = ObjectStore(s3)
    # WHEN each event's content is read (events carry the ETag unquoted)
    # THEN the newest is served, and the first is superseded
    assert store.read("suspended-bucket", KEY, "null", second.strip('"')) == b"second"
    with pytest.raises(ObjectSuperseded, match="PreconditionFailed"):
        store.read("suspended-bucket", KEY, "null", first.strip('"'))
    # AND once the key is deleted, the newest is superseded too
    s3.delete_object(Bucket="suspended-bucket", Key=KEY)
    with pytest.raises(ObjectSuperseded, match="NoSuchKey"):
        store.read("suspended-bucket", KEY, "null", second)


def test_moto_a_deleted_version_is_permanent(engine: LocalEngine) -> None:
    # GIVEN a version of a versioned bucket's object, deleted after its upload
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    version = s3.put_object(Bucket=bucket, Key=KEY, Body=b"x")["VersionId"]
    s3.delete_object(Bucket=bucket, Key=KEY, VersionId=version)
    # WHEN it is read THEN it is a permanent error (NoSuchVersion, 404)
    with pytest.raises(PermanentError, match="NoSuchVersion"):
        ObjectStore(s3).read(bucket, KEY, version, None)


def test_the_processor_writes_nothing_for_superseded_content(engine: LocalEngine) -> None:
    # GIVEN an unversioned work item whose key was overwritten after its event
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="plain-ingest")
    announced = s3.put_object(Bucket="plain-ingest", Key=KEY, Body=png_bytes(32, 32))["ETag"]
    s3.put_object(Bucket="plain-ingest", Key=KEY, Body=png_bytes(64, 48))
    output = engine.ref("OutputBucket")
    settings = ProcessorSettings(output_bucket=output, output_prefix="processed/", max_dimension=64)
    event = {
        "workItem": {
            "idempotencyKey": f"s3://plain-ingest/{KEY}#0A01",
            "bucket": "plain-ingest",
            "key": KEY,
            "versionId": "null",
            "etag": announced.strip('"'),
        },
        "lockToken": "arn:test",
        "attempt": 1,
    }
    # WHEN the processor runs THEN it stops at the read and writes no output
    with pytest.raises(ObjectSuperseded):
        process(event, settings, ObjectStore(s3))
    assert s3.list_objects_v2(Bucket=output).get("KeyCount", 0) == 0
