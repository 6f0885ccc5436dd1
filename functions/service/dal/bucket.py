"""The audit's view of the ingest bucket and of its S3 Inventory reports."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from service.dal.aws import aws_call
from service.errors import PermanentError
from service.logic.audit import ListedObject, common_prefix, key_marker_before
from service.logic.s3objects import NULL_VERSION

PAGE_SIZE = 1000  # the most one ListObjectVersions call returns
# A report folder may be named this far ahead of the reader's clock (clocks differ).
_REPORT_CLOCK_SKEW_SECONDS = 300

# A report's folder under <destination prefix>/<source bucket>/<configuration id>/
# (storage-inventory-location.html): YYYY-MM-DDTHH-MMZ.
_REPORT_FOLDER = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z)/$")


class Bucket:
    def __init__(self, name: str, client: Any | None = None) -> None:
        self.name = name
        self._s3 = client if client is not None else boto3.client("s3")

    def versioned(self) -> bool:
        """Versioning on or suspended: list versions (each upload has its own)."""
        with aws_call(f"reading versioning of {self.name}"):
            status = self._s3.get_bucket_versioning(Bucket=self.name).get("Status")
        return status in ("Enabled", "Suspended")

    def versions_between(self, first: str, last: str) -> list[ListedObject]:
        """Every version of every key from ``first`` to ``last`` (both included).

        One ListObjectVersions call per 1000 versions: a batch of listed keys is a
        contiguous key range (the listing is in key order), so this reads their
        versions together instead of one request per key. Delete markers are not
        uploads and are left out.
        """
        # Only keys sharing the range's common prefix can fall inside it: the
        # listing starts there, not at whatever sorts between the marker and it.
        kwargs: dict[str, Any] = {
            "Bucket": self.name,
            "MaxKeys": PAGE_SIZE,
            "Prefix": common_prefix(first, last),
        }
        marker = key_marker_before(first)
        if marker is not None:
            kwargs["KeyMarker"] = marker
        found: list[ListedObject] = []
        with aws_call(f"listing versions in s3://{self.name}/"):
            while True:
                response = self._s3.list_object_versions(**kwargs)
                for v in response.get("Versions", []):
                    key = str(v["Key"])
                    if key > last:
                        return found
                    if key >= first:
                        found.append(
                            ListedObject(
                                key=key,
                                version_id=v.get("VersionId") or NULL_VERSION,
                                last_modified=v["LastModified"].timestamp(),
                                etag=str(v.get("ETag", "")),
                                size=int(v.get("Size", 0)),
                                latest=bool(v.get("IsLatest", True)),
                            )
                        )
                if not response.get("IsTruncated"):
                    return found
                next_key = str(response["NextKeyMarker"])
                if next_key > last:
                    return found
                kwargs["KeyMarker"] = next_key
                kwargs.pop("VersionIdMarker", None)
                if response.get("NextVersionIdMarker"):
                    kwargs["VersionIdMarker"] = response["NextVersionIdMarker"]


class Inventory:
    """The S3 Inventory reports of the ingest bucket, where S3 delivers them."""

    def __init__(self, bucket: str, prefix: str, client: Any | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self._s3 = client if client is not None else boto3.client("s3")

    def newest(
        self, now: datetime | None = None, passed_over: list[str] | None = None
    ) -> tuple[str, datetime] | None:
        """(the manifest key, its report time) of the newest complete report, or None.

        S3 writes manifest.checksum after manifest.json (storage-inventory-location.html):
        a report folder without it is still being delivered. A folder whose name is no
        time (2026-13-45T99-99Z), or a time after ``now`` (the clock's, beyond skew), was not
        delivered by S3 at that time: it is passed over (named in ``passed_over``), never
        taken for the newest report (a stale report under a future name would hide every
        upload since) nor allowed to fail the plan.
        """
        latest = (now or datetime.now(UTC)) + timedelta(seconds=_REPORT_CLOCK_SKEW_SECONDS)
        folders: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix, "Delimiter": "/"}
        with aws_call(f"listing s3://{self.bucket}/{self.prefix}"):
            while True:
                response = self._s3.list_objects_v2(**kwargs)
                folders += [p["Prefix"] for p in response.get("CommonPrefixes", [])]
                if not response.get("IsTruncated"):
                    break
                kwargs["ContinuationToken"] = response["NextContinuationToken"]
            for folder in sorted(folders, reverse=True):
                match = _REPORT_FOLDER.search(folder)
                if match is None:
                    continue  # data/, hive/
                listed = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=folder)
                names = {o["Key"][len(folder) :] for o in listed.get("Contents", [])}
                if {"manifest.json", "manifest.checksum"} <= names:
                    try:
                        when = datetime.strptime(match.group(1), "%Y-%m-%dT%H-%MZ")
                    except ValueError:
                        if passed_over is not None:
                            passed_over.append(f"{folder}: not a time")
                        continue
                    if when.replace(tzinfo=UTC) > latest:
                        if passed_over is not None:
                            passed_over.append(f"{folder}: in the future")
                        continue
                    return folder + "manifest.json", when.replace(tzinfo=UTC)
        return None

    def rows(self, manifest_key: str, source_bucket: str) -> tuple[list[str], Iterator[list[str]]]:
        """(the columns, the rows) of one report: its manifest's fileSchema, and every row
        of every data file it lists (gzip-compressed CSV without a header,
        storage-inventory.html), each file read as a stream, never whole.

        A report is used whole or not at all: its rows are what the audit judges, and a
        row it never sees is an upload it never judges. So the manifest must match its
        manifest.checksum ("the MD5 hash of the content of the manifest.json file",
        storage-inventory-location.html) and name ``source_bucket``, and each data file
        its size and MD5checksum (the manifest's "files", same page), checked as it
        streams: a file truncated, garbled, emptied or gone, a file that is not gzip,
        not UTF-8 or not CSV, is an UnreadableReport (a PermanentError) when it is met,
        so the caller drops everything it read of the report.
        """
        manifest_text = self._bytes(manifest_key)
        checksum = self._bytes(manifest_key.rsplit("/", 1)[0] + "/manifest.checksum")
        if checksum.decode("ascii", "replace").strip().lower() != _md5(manifest_text):
            raise UnreadableReport(f"{manifest_key} does not match its manifest.checksum")
        try:
            manifest = json.loads(manifest_text)
        except ValueError as exc:
            raise UnreadableReport(f"{manifest_key} is not JSON: {exc}") from exc
        if not isinstance(manifest, dict):
            raise UnreadableReport(f"{manifest_key} is not a JSON object")
        schema, files = manifest.get("fileSchema"), manifest.get("files")
        if not isinstance(schema, str) or not isinstance(files, list):
            raise UnreadableReport(f"{manifest_key}: no fileSchema string or no files list")
        if manifest.get("sourceBucket") != source_bucket:
            raise UnreadableReport(
                f"{manifest_key} is a report of {str(manifest.get('sourceBucket'))[:80]!r}, "
                f"not of {source_bucket!r}"
            )
        for entry in files:
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("key"), str)
                and isinstance(entry.get("MD5checksum"), str)
            ):
                raise UnreadableReport(f"{manifest_key}: a file without its key or MD5checksum")
        columns = [c.strip() for c in schema.split(",")]
        data_bucket = str(manifest.get("destinationBucket", "")).rsplit(":::", 1)[-1]

        def read() -> Iterator[list[str]]:
            for entry in files:
                key = str(entry["key"])
                with aws_call(f"reading s3://{data_bucket}/{key}"):
                    stream = _Md5Stream(self._s3.get_object(Bucket=data_bucket, Key=key)["Body"])
                    try:
                        with gzip.open(stream, "rt", encoding="utf-8", newline="") as text:
                            yield from csv.reader(text)
                        while stream.read(_CHUNK):
                            pass  # whatever gzip left unread counts in the checksum too
                    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as exc:
                        raise UnreadableReport(
                            f"s3://{data_bucket}/{key}: {type(exc).__name__}: {exc}"
                        ) from exc
                if stream.md5() != str(entry["MD5checksum"]).strip().lower():
                    raise UnreadableReport(
                        f"s3://{data_bucket}/{key} does not match its MD5checksum in "
                        f"{manifest_key} ({stream.size} bytes read)"
                    )

        return columns, read()

    def _bytes(self, key: str) -> bytes:
        with aws_call(f"reading s3://{self.bucket}/{key}", expected=_NO_SUCH_KEY) as call:
            body = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        if call.refused:
            raise UnreadableReport(f"s3://{self.bucket}/{key} is gone")
        return bytes(body)


class UnreadableReport(PermanentError):
    """An inventory report that cannot be read whole: the audit lists the bucket instead."""


_CHUNK = 1 << 16
_NO_SUCH_KEY = frozenset({"NoSuchKey"})


def _md5(data: bytes) -> str:
    # A checksum S3 Inventory gives, not a security measure.
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class _Md5Stream(io.RawIOBase):
    """A response body read through, its MD5 and size counted as it goes."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self._md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(len(buffer))
        self._md5.update(data)
        self.size += len(data)
        buffer[: len(data)] = data
        return len(data)

    def md5(self) -> str:
        return self._md5.hexdigest()


def window_csv(columns: list[str], rows: list[list[str]]) -> bytes:
    """The rows an audit's batches get, as one CSV file with a header row (a Distributed
    Map's ItemReader, InputType CSV, CSVHeaderLocation FIRST_ROW: input-output-itemreader.html).
    Inventory values are kept as S3 wrote them (keys URL-encoded: no commas, no quotes)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")
