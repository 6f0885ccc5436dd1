"""Make a sample event from events/ meaningful on the local engine.

The files in events/ are the ones `sam local invoke -e` takes, so they name
the documentation placeholder bucket and a version id from a real account.
Locally, the placeholder stands for the stack's ingest bucket, and a sample
object is uploaded at the event's key when none is there (an image, or text
for keys ending in .txt: the poison case). Every change is reported.
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any
from urllib.parse import unquote_plus

from botocore.exceptions import ClientError
from PIL import Image

from onceflow.engine import LocalEngine

PLACEHOLDER_BUCKET = "amzn-s3-demo-bucket"


def _sample_body(key: str) -> bytes:
    if key.endswith(".txt"):
        return b"this is not an image\n"
    out = io.BytesIO()
    Image.new("RGB", (640, 480), (40, 120, 200)).save(out, format="PNG")
    return out.getvalue()


def _locate(event: Any) -> tuple[dict[str, Any], str, str, str, bool] | None:
    """(holder, bucket field, key field, version field, key URL-encoded) of an event's object."""
    if isinstance(event, list) and len(event) == 1 and isinstance(event[0], dict):
        # An SQS message from the pipe carrying a classic S3 notification.
        try:
            body = json.loads(event[0].get("body", ""))
        except (TypeError, ValueError):
            return None
        records = body.get("Records") if isinstance(body, dict) else None
        first = records[0] if isinstance(records, list) and records else None
        if isinstance(first, dict) and isinstance(first.get("s3"), dict):
            return first["s3"], "bucket.name", "object.key", "object.versionId", True
        return None
    if not isinstance(event, dict):
        return None
    detail = event.get("detail")
    if event.get("source") == "aws.s3" and isinstance(detail, dict):
        bucket, obj = detail.get("bucket"), detail.get("object")
        if isinstance(bucket, dict) and isinstance(obj, dict):
            merged = {"bucket": bucket, "object": obj}
            return merged, "bucket.name", "object.key", "object.version-id", True
    work_item = event.get("workItem")
    if isinstance(work_item, dict):
        return work_item, "bucket", "key", "versionId", False
    return None


def _get(holder: dict[str, Any], path: str) -> Any:
    node: Any = holder
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _set(holder: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = holder
    for part in parents:
        node = node[part]
    node[last] = value


def prepare_event(
    engine: LocalEngine, event: Any, *, fixtures: bool = True
) -> tuple[Any, list[str]]:
    """Return the event to run locally and notes on what was changed or uploaded."""
    event = copy.deepcopy(event)
    located = _locate(event)
    if located is None:
        return event, []
    holder, bucket_path, key_path, version_path, encoded = located
    notes: list[str] = []
    try:
        return event, _prepare_object(
            engine, holder, bucket_path, key_path, version_path, encoded, fixtures, notes
        )
    finally:
        if isinstance(event, list):  # the notification lives in the body text: write it back
            body = json.loads(event[0]["body"])
            body["Records"][0]["s3"] = holder
            event[0]["body"] = json.dumps(body)


def _prepare_object(
    engine: LocalEngine,
    holder: dict[str, Any],
    bucket_path: str,
    key_path: str,
    version_path: str,
    encoded: bool,
    fixtures: bool,
    notes: list[str],
) -> list[str]:
    ingest = engine.ref("IngestBucket")
    if _get(holder, bucket_path) == PLACEHOLDER_BUCKET:
        _set(holder, bucket_path, ingest)
        notes.append(f"bucket {PLACEHOLDER_BUCKET} stands for the local stack's {ingest}")
    bucket, key = _get(holder, bucket_path), _get(holder, key_path)
    if not fixtures or bucket != ingest or not isinstance(key, str) or not key:
        return notes
    if encoded:  # S3 event formats URL-encode the key, "+" for a space
        try:
            key = unquote_plus(key, errors="strict")
        except UnicodeDecodeError:
            return notes
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        notes.append("the key is not valid Unicode: no sample object uploaded for it")
        return notes
    if size > 1024:
        notes.append(f"the key is {size} bytes, more than S3 allows: no sample object uploaded")
        return notes
    s3 = engine.client("s3")
    version = _get(holder, version_path)
    try:
        kwargs = {"Bucket": bucket, "Key": key}
        if isinstance(version, str):
            kwargs["VersionId"] = version
        s3.head_object(**kwargs)
        return notes
    except ClientError:
        pass  # not there yet: upload the sample below
    try:
        uploaded = s3.put_object(Bucket=bucket, Key=key, Body=_sample_body(key))
    except ClientError as exc:
        notes.append(f"no sample object uploaded: S3 refused the key ({exc})")
        return notes
    new_version = uploaded.get("VersionId")
    kind = "text (not an image)" if key.endswith(".txt") else "image"
    notes.append(f"uploaded a sample {kind} to s3://{bucket}/{key}")
    if isinstance(version, str) and new_version:
        _set(holder, version_path, new_version)
        notes.append(f"version id {version} is now {new_version}, the one S3 gave the upload")
    # An upload without a real version id is read only while it still holds the
    # ETag its event names (anything else counts as superseded): name the sample's.
    parent_path = version_path.rpartition(".")[0]
    parent = _get(holder, parent_path) if parent_path else holder
    etag = str(uploaded.get("ETag", "")).strip('"')
    for field in ("etag", "eTag"):
        if isinstance(parent, dict) and isinstance(parent.get(field), str) and etag:
            notes.append(f"etag {parent[field]} is now {etag}, the one S3 gave the upload")
            parent[field] = etag
    return notes
