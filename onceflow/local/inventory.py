"""An S3 Inventory report delivered as S3 delivers a CSV one, on demand (moto writes none).
docs/local-engine.md ("S3 Inventory reports") gives the layout, the rows, the AWS pages
the comments below cite ([LOC], [INV], [CFG], [CFN], [SFN]) and what is not verified.
"""

from __future__ import annotations

import csv
import datetime
import functools
import gzip
import hashlib
import io
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote_plus

from onceflow.local.iam import statement_matches

VERSION = "2016-11-30"
ROWS_PER_FILE = 1_000_000  # where S3 starts a new data file is its own choice
VERSION_COLUMNS = ("VersionId", "IsLatest", "IsDeleteMarker")
# [LOC]'s example fileSchema, in its order: the optional fields' order in a report.
OPTIONAL_ORDER = (
    "Size", "LastModifiedDate", "ETag", "StorageClass", "IsMultipartUploaded",
    "ReplicationStatus", "EncryptionStatus", "ObjectLockRetainUntilDate", "ObjectLockMode",
    "ObjectLockLegalHoldStatus", "IntelligentTieringAccessTier", "BucketKeyStatus",
    "ChecksumAlgorithm",
)  # fmt: skip
REPRODUCED = frozenset(
    {"Size", "LastModifiedDate", "ETag", "StorageClass", "IsMultipartUploaded", "EncryptionStatus"}
)
_OPERATORS = ("ArnLike", "ArnEquals", "StringLike", "StringEquals")  # in a delivery's policy
_MULTIPART_ETAG = re.compile(r".*-\d+")
_ENCRYPTION = {"AES256": "SSE-S3", "aws:kms": "SSE-KMS", "aws:kms:dsse": "DSSE-KMS"}


class InventoryConfigurationError(ValueError):
    """A configuration S3 would refuse, or one this module does not reproduce."""


def columns(configuration: dict[str, Any]) -> list[str]:
    """The report's columns, in fileSchema order, for this configuration."""
    versions = configuration.get("IncludedObjectVersions")
    if versions not in ("All", "Current"):
        raise InventoryConfigurationError(
            f"IncludedObjectVersions must be All or Current, is {versions!r}"
        )
    optional = configuration.get("OptionalFields", [])
    if not isinstance(optional, list) or not all(isinstance(f, str) for f in optional):
        raise InventoryConfigurationError("OptionalFields must be a list of field names")
    for known, why in ((set(OPTIONAL_ORDER), "not known here"), (REPRODUCED, "not reproduced")):
        if refused := set(optional) - known:
            raise InventoryConfigurationError(f"OptionalFields {why}: {sorted(refused)}")
    head = ["Bucket", "Key", *(VERSION_COLUMNS if versions == "All" else ())]
    return head + [field for field in OPTIONAL_ORDER if field in optional]


def encode_key(key: str) -> str:
    """A key as an inventory CSV gives it (URL-encoded, a space as +)."""
    return quote_plus(key, safe="/")


def _listed(s3_client: Any, bucket: str, prefix: str, versions: bool) -> list[dict[str, Any]]:
    """Every object (versions: every version and delete marker) under prefix, all pages,
    as the listing gives it."""
    if not versions:
        pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [{**e, "IsLatest": True} for page in pages for e in page.get("Contents", [])]
    found: list[dict[str, Any]] = []
    pages = s3_client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        found += page.get("Versions", [])
        found += [{**e, "IsDeleteMarker": True} for e in page.get("DeleteMarkers", [])]
    # A key's versions newest first: the latest, then by date (ties in S3's order).
    found.sort(key=lambda v: (v["Key"], not v["IsLatest"], -v["LastModified"].timestamp()))
    return found


def _encryption(s3_client: Any, bucket: str, entry: dict[str, Any]) -> str:
    extra = {"VersionId": entry["VersionId"]} if entry.get("VersionId") else {}
    head = s3_client.head_object(Bucket=bucket, Key=entry["Key"], **extra)
    if head.get("SSECustomerAlgorithm"):
        return "SSE-C"
    return _ENCRYPTION.get(head.get("ServerSideEncryption", ""), "NOT-SSE")


def _row(s3_client: Any, bucket: str, entry: dict[str, Any], names: list[str]) -> list[str]:
    marker = entry.get("IsDeleteMarker", False)
    etag = entry.get("ETag", "").strip('"')
    modified = entry["LastModified"].astimezone(datetime.UTC)
    values = {
        "Bucket": bucket,
        "Key": encode_key(entry["Key"]),
        "VersionId": entry.get("VersionId", ""),
        "IsLatest": str(entry["IsLatest"]).lower(),
        "IsDeleteMarker": str(marker).lower(),
        "Size": str(entry.get("Size", "")),
        "LastModifiedDate": modified.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "ETag": etag,
        "StorageClass": "" if marker else entry.get("StorageClass", "STANDARD"),
        "IsMultipartUploaded": "" if marker else str(bool(_MULTIPART_ETAG.fullmatch(etag))).lower(),
    }
    if "EncryptionStatus" in names:
        values["EncryptionStatus"] = "" if marker else _encryption(s3_client, bucket, entry)
    return [values[name] for name in names]


def _md5(body: bytes) -> str:
    """The MD5 S3 Inventory gives a file (a checksum, not a security measure)."""
    return hashlib.md5(body, usedforsecurity=False).hexdigest()


def _values(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _condition_met(condition: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    """A statement's Condition against S3's delivery context (aws:SourceArn,
    aws:SourceAccount): ArnLike/ArnEquals/StringLike/StringEquals on those keys. Any
    other operator or key is not modelled, and the statement then does not grant
    (harsher than AWS where it would hold)."""
    for operator, keys in condition.items():
        for key, wanted in (keys or {}).items():
            value = context.get(key.lower())
            if value is None or operator not in _OPERATORS:
                return False
            like = operator.endswith("Like")  # IAM's wildcards, as a Resource reads them
            if not any(
                statement_matches({"Action": "x", "Resource": w}, "x", value)
                if like
                else w == value
                for w in _values(wanted)
            ):
                return False
    return True


def grants(
    policy: Mapping[str, Any] | None,
    service: str,
    action: str,
    resource: str,
    context: Mapping[str, str],
) -> bool:
    """Whether a resource policy lets the AWS service principal do action on resource, in
    context (aws:sourcearn, aws:sourceaccount). Deny statements are not read (the stack's
    only ones refuse insecure transport)."""
    for statement in (policy or {}).get("Statement") or []:
        principal = statement.get("Principal")
        services = _values(principal.get("Service", [])) if isinstance(principal, dict) else []
        bare = {k: v for k, v in statement.items() if k != "Condition"}
        if (
            statement.get("Effect") == "Allow"
            and service in services
            and statement_matches(bare, action, resource)
            and _condition_met(statement.get("Condition") or {}, context)
        ):
            return True
    return False


def delivery_refused(
    policy: Mapping[str, Any] | None, source_bucket: str, account: str, key_arn: str
) -> str | None:
    """Why S3 would not write an inventory file of source_bucket at key_arn under the
    destination's bucket policy, or None when it grants it (S3 user guide, "Configuring
    Amazon S3 Inventory", "Creating a destination bucket policy"; docs/local-engine.md
    says what grants it)."""
    context = {"aws:sourcearn": f"arn:aws:s3:::{source_bucket}", "aws:sourceaccount": account}
    if grants(policy, "s3.amazonaws.com", "s3:PutObject", key_arn, context):
        return None
    return (
        f"the destination's bucket policy lets no s3.amazonaws.com PutObject of {key_arn} for "
        f"s3://{source_bucket} (account {account}): S3 delivers no report"
    )


def as_put(configuration: dict[str, Any], account: str) -> dict[str, Any]:
    """A template's InventoryConfigurations entry [CFN] as PutBucketInventoryConfiguration
    takes it: what S3 keeps for the bucket, and delivers by."""
    destination = configuration["Destination"]
    put: dict[str, Any] = {
        "Id": configuration["Id"],
        "IsEnabled": configuration.get("Enabled") in (True, "true"),
        "Destination": {"S3BucketDestination": {
            "AccountId": destination.get("BucketAccountId", account),
            "Bucket": destination["BucketArn"], "Format": destination["Format"],
            **({"Prefix": destination["Prefix"]} if destination.get("Prefix") else {})}},
        "IncludedObjectVersions": configuration["IncludedObjectVersions"],
        "Schedule": {"Frequency": configuration["ScheduleFrequency"]},
    }  # fmt: skip
    if configuration.get("OptionalFields"):
        put["OptionalFields"] = list(configuration["OptionalFields"])
    if configuration.get("Prefix"):
        put["Filter"] = {"Prefix": configuration["Prefix"]}
    return put


def as_template(configuration: dict[str, Any]) -> dict[str, Any]:
    """A configuration as GetBucketInventoryConfiguration answers it, in the shape
    ``deliver`` takes (the template's)."""
    destination = configuration["Destination"]["S3BucketDestination"]
    return {
        "Id": configuration["Id"],
        "Enabled": configuration.get("IsEnabled", False),
        "Destination": {"BucketArn": destination["Bucket"], "Format": destination["Format"],
                        "Prefix": destination.get("Prefix", "")},
        "IncludedObjectVersions": configuration["IncludedObjectVersions"],
        "OptionalFields": configuration.get("OptionalFields", []),
        "Prefix": configuration.get("Filter", {}).get("Prefix", ""),
        "ScheduleFrequency": configuration.get("Schedule", {}).get("Frequency"),
    }  # fmt: skip


def deliver(
    s3_client: Any,
    source_bucket: str,
    configuration: dict[str, Any],
    now: datetime.datetime,
    *,
    rows_per_file: int = ROWS_PER_FILE,
) -> str:
    """Write one CSV inventory report of source_bucket as S3 would at now; returns the key
    of its manifest.json in the destination bucket. configuration: one entry of a bucket's
    InventoryConfigurations as the template gives it [CFN] (its ScheduleFrequency ignored:
    this is one delivery). s3_client lists, heads and writes (the caller's credentials
    stand for S3's)."""
    if rows_per_file < 1:
        raise ValueError("rows_per_file must be positive")
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    config_id = configuration.get("Id")
    if not isinstance(config_id, str) or not config_id:
        raise InventoryConfigurationError("an inventory configuration needs an Id")
    if configuration.get("Enabled", True) is False:
        raise InventoryConfigurationError(f"inventory {config_id} is not enabled: S3 writes none")
    destination = configuration.get("Destination")
    if not isinstance(destination, dict):
        raise InventoryConfigurationError("an inventory configuration needs a Destination")
    if destination.get("Format") != "CSV":
        raise InventoryConfigurationError(
            f"only a CSV inventory is written here, not {destination.get('Format')!r}"
        )
    arn = destination.get("BucketArn")
    if not isinstance(arn, str) or not arn.startswith("arn:") or ":::" not in arn:
        raise InventoryConfigurationError(f"Destination BucketArn is not a bucket ARN: {arn!r}")
    dest_bucket = arn.split(":::", 1)[1]
    put = functools.partial(s3_client.put_object, Bucket=dest_bucket)
    names = columns(configuration)
    moment = now.astimezone(datetime.UTC)
    dest_prefix = destination.get("Prefix") or ""
    base = (f"{dest_prefix.rstrip('/')}/" if dest_prefix else "") + f"{source_bucket}/{config_id}/"
    versions = configuration["IncludedObjectVersions"] == "All"
    listed = _listed(s3_client, source_bucket, configuration.get("Prefix") or "", versions)
    files: list[dict[str, Any]] = []
    for start in range(0, len(listed), rows_per_file):
        text = io.StringIO(newline="")
        csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
            _row(s3_client, source_bucket, v, names) for v in listed[start : start + rows_per_file]
        )
        body = gzip.compress(text.getvalue().encode("utf-8"), mtime=0)
        key = f"{base}data/{uuid.uuid4()}.csv.gz"
        put(Key=key, Body=body)
        files.append({"key": key, "size": len(body), "MD5checksum": _md5(body)})
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": arn,
        "version": VERSION,
        "creationTimestamp": str(int(moment.timestamp() * 1000)),
        "fileFormat": "CSV",
        "fileSchema": ", ".join(names),
        "files": files,
    }
    folder = base + moment.strftime("%Y-%m-%dT%H-%MZ") + "/"
    manifest_text = json.dumps(manifest, indent=2).encode()
    put(Key=folder + "manifest.json", Body=manifest_text)
    put(Key=folder + "manifest.checksum", Body=_md5(manifest_text).encode())
    symlink = "".join(f"s3://{dest_bucket}/{entry['key']}\n" for entry in files)
    put(Key=f"{base}hive/dt={moment.strftime('%Y-%m-%d-%H-%M')}/symlink.txt", Body=symlink.encode())
    return folder + "manifest.json"
