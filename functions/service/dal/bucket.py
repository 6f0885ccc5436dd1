"""The audit's view of the ingest bucket: one listing page at a time."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.exceptions import ClientError

from service.errors import TransientError, is_transient
from service.logic.audit import ListedObject
from service.logic.s3objects import NULL_VERSION

PAGE_SIZE = 1000  # the most one ListObjectsV2 / ListObjectVersions call returns


class Bucket:
    def __init__(self, name: str, client: Any | None = None) -> None:
        self.name = name
        self._s3 = client if client is not None else boto3.client("s3")

    def versioned(self) -> bool:
        """Versioning on or suspended: list versions (each upload has its own)."""
        try:
            status = self._s3.get_bucket_versioning(Bucket=self.name).get("Status")
        except ClientError as exc:
            if not is_transient(exc.response):
                raise
            raise TransientError(f"reading versioning of {self.name}: {exc}") from exc
        return status in ("Enabled", "Suspended")

    def page(
        self, prefix: str, cursor: dict[str, str] | None, versioned: bool
    ) -> tuple[list[ListedObject], dict[str, str] | None]:
        """Up to 1000 objects (every version of them, when versioned) and the next cursor."""
        try:
            if versioned:
                return self._versions_page(prefix, cursor or {})
            return self._objects_page(prefix, cursor or {})
        except ClientError as exc:
            if not is_transient(exc.response):
                raise
            raise TransientError(f"listing s3://{self.name}/{prefix}: {exc}") from exc

    def _versions_page(
        self, prefix: str, cursor: dict[str, str]
    ) -> tuple[list[ListedObject], dict[str, str] | None]:
        kwargs: dict[str, Any] = {"Bucket": self.name, "Prefix": prefix, "MaxKeys": PAGE_SIZE}
        if cursor.get("keyMarker"):
            kwargs["KeyMarker"] = cursor["keyMarker"]
            if cursor.get("versionIdMarker"):
                kwargs["VersionIdMarker"] = cursor["versionIdMarker"]
        response = self._s3.list_object_versions(**kwargs)
        # Delete markers are not uploads: nothing to process.
        objects = [
            ListedObject(
                key=v["Key"],
                version_id=v.get("VersionId") or NULL_VERSION,
                last_modified=v["LastModified"].timestamp(),
                etag=str(v.get("ETag", "")),
                size=int(v.get("Size", 0)),
                latest=bool(v.get("IsLatest", True)),
            )
            for v in response.get("Versions", [])
        ]
        if not response.get("IsTruncated"):
            return objects, None
        next_cursor = {"keyMarker": response["NextKeyMarker"]}
        if response.get("NextVersionIdMarker"):
            next_cursor["versionIdMarker"] = response["NextVersionIdMarker"]
        return objects, next_cursor

    def _objects_page(
        self, prefix: str, cursor: dict[str, str]
    ) -> tuple[list[ListedObject], dict[str, str] | None]:
        kwargs: dict[str, Any] = {"Bucket": self.name, "Prefix": prefix, "MaxKeys": PAGE_SIZE}
        if cursor.get("continuationToken"):
            kwargs["ContinuationToken"] = cursor["continuationToken"]
        response = self._s3.list_objects_v2(**kwargs)
        objects = [
            ListedObject(
                key=o["Key"],
                version_id=NULL_VERSION,
                last_modified=o["LastModified"].timestamp(),
                etag=str(o.get("ETag", "")),
                size=int(o.get("Size", 0)),
            )
            for o in response.get("Contents", [])
        ]
        if not response.get("IsTruncated"):
            return objects, None
        return objects, {"continuationToken": response["NextContinuationToken"]}
