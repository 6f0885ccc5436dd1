"""The audit's reads of the ingest bucket and its inventory reports, request by request.

Each request is asserted whole with a botocore Stubber, as S3 would receive it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from service.dal.bucket import Bucket, Inventory
from service.errors import PermanentError, TransientError
from service.logic.audit import ListedObject

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def _s3() -> Any:
    return boto3.client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # a stub: nothing is sent
    )


@pytest.mark.parametrize(
    ("answer", "versioned"),
    [({"Status": "Enabled"}, True), ({"Status": "Suspended"}, True), ({}, False)],
)
def test_versioning_on_or_suspended_is_listed_by_version(
    answer: dict[str, str], versioned: bool
) -> None:
    s3 = _s3()
    with Stubber(s3) as stub:
        # GIVEN the bucket's versioning as S3 reports it (never enabled: no Status)
        stub.add_response("get_bucket_versioning", answer, {"Bucket": "in"})
        # WHEN the audit plans THEN each upload has a version of its own, or not
        assert Bucket("in", s3).versioned() is versioned
        stub.assert_no_pending_responses()


def test_a_batchs_versions_are_read_from_below_its_first_key_to_past_its_last() -> None:
    s3 = _s3()

    def version(key: str, version_id: str, latest: bool = True) -> dict[str, Any]:
        return {"Key": key, "VersionId": version_id, "LastModified": WHEN, "ETag": '"e"',
                "Size": 3, "IsLatest": latest}  # fmt: skip

    with Stubber(s3) as stub:
        # GIVEN versions of img/1.png .. img/3.png over two pages, and a key past the range
        stub.add_response(
            "list_object_versions",
            {
                "Versions": [version("img/1.png", "a"), version("img/2.png", "b", False)],
                "IsTruncated": True,
                "NextKeyMarker": "img/2.png",
                "NextVersionIdMarker": "b",
            },
            # The listing starts below the first key, under the range's common prefix.
            {"Bucket": "in", "MaxKeys": 1000, "Prefix": "img/", "KeyMarker": "img/1.pn"},
        )
        stub.add_response(
            "list_object_versions",
            {"Versions": [version("img/3.png", "c"), version("img/4.png", "d")]},
            {
                "Bucket": "in",
                "MaxKeys": 1000,
                "Prefix": "img/",
                "KeyMarker": "img/2.png",
                "VersionIdMarker": "b",
            },
        )
        # WHEN the audit reads the range's versions
        found = Bucket("in", s3).versions_between("img/1.png", "img/3.png")
        stub.assert_no_pending_responses()
    # THEN every version in the range, and nothing past it
    stamp = WHEN.timestamp()
    assert found == [
        ListedObject("img/1.png", "a", stamp, '"e"', 3, True),
        ListedObject("img/2.png", "b", stamp, '"e"', 3, False),
        ListedObject("img/3.png", "c", stamp, '"e"', 3, True),
    ]


def test_the_newest_complete_inventory_report_is_the_one_with_its_checksum() -> None:
    s3 = _s3()
    prefix = "inventory/in/all/"
    with Stubber(s3) as stub:
        # GIVEN two report folders, the newest still being delivered (no manifest.checksum)
        stub.add_response(
            "list_objects_v2",
            {
                "CommonPrefixes": [
                    {"Prefix": f"{prefix}2026-01-01T01-00Z/"},
                    {"Prefix": f"{prefix}2026-01-02T01-00Z/"},
                    {"Prefix": f"{prefix}data/"},
                ]
            },
            {"Bucket": "out", "Prefix": prefix, "Delimiter": "/"},
        )
        newest, older = f"{prefix}2026-01-02T01-00Z/", f"{prefix}2026-01-01T01-00Z/"
        stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": f"{newest}manifest.json"}]},
            {"Bucket": "out", "Prefix": newest},
        )
        stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": f"{older}manifest.json"}, {"Key": f"{older}manifest.checksum"}]},
            {"Bucket": "out", "Prefix": older},
        )
        # WHEN the audit plans
        found = Inventory("out", "inventory/in/all", s3).newest()
        stub.assert_no_pending_responses()
    # THEN it takes the complete one, with the time its folder names
    assert found == (f"{older}manifest.json", datetime(2026, 1, 1, 1, 0, tzinfo=UTC))


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("SlowDown", 503, TransientError),
        ("InternalError", 500, TransientError),
        ("AccessDenied", 403, PermanentError),
        ("NoSuchBucket", 404, PermanentError),
    ],
)
def test_a_refused_bucket_read_is_transient_only_when_it_may_pass(
    code: str, status: int, error: type[Exception]
) -> None:
    s3 = _s3()
    with Stubber(s3) as stub:
        # GIVEN S3 refuses each of the audit's reads
        for operation in ("get_bucket_versioning", "list_object_versions", "list_objects_v2"):
            stub.add_client_error(operation, code, http_status_code=status)
        # WHEN the audit reads versioning, versions and inventory reports
        # THEN each error is named after the refusal, and says whether a retry may pass
        for call in (
            lambda: Bucket("in", s3).versioned(),
            lambda: Bucket("in", s3).versions_between("a", "b"),
            lambda: Inventory("out", "inventory/", s3).newest(),
        ):
            with pytest.raises(error, match=code) as raised:
                call()
            assert type(raised.value) is error
        stub.assert_no_pending_responses()
