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
from typing import Any

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


def _locate(event: Any) -> tuple[dict[str, Any], str, str, str] | None:
    """(holder, bucket field, key field, version field) of the S3 object an event names."""
    if not isinstance(event, dict):
        return None
    detail = event.get("detail")
    if event.get("source") == "aws.s3" and isinstance(detail, dict):
        bucket, obj = detail.get("bucket"), detail.get("object")
        if isinstance(bucket, dict) and isinstance(obj, dict):
            merged = {"bucket": bucket, "object": obj}
            return merged, "bucket.name", "object.key", "object.version-id"
    work_item = event.get("workItem")
    if isinstance(work_item, dict):
        return work_item, "bucket", "key", "versionId"
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
    holder, bucket_path, key_path, version_path = located
    notes: list[str] = []
    ingest = engine.ref("IngestBucket")
    if _get(holder, bucket_path) == PLACEHOLDER_BUCKET:
        _set(holder, bucket_path, ingest)
        notes.append(f"bucket {PLACEHOLDER_BUCKET} stands for the local stack's {ingest}")
    bucket, key = _get(holder, bucket_path), _get(holder, key_path)
    if not fixtures or bucket != ingest or not isinstance(key, str) or not key:
        return event, notes
    s3 = engine.client("s3")
    version = _get(holder, version_path)
    try:
        kwargs = {"Bucket": bucket, "Key": key}
        if isinstance(version, str):
            kwargs["VersionId"] = version
        s3.head_object(**kwargs)
        return event, notes
    except ClientError:
        pass  # not there yet: upload the sample below
    new_version = s3.put_object(Bucket=bucket, Key=key, Body=_sample_body(key)).get("VersionId")
    kind = "text (not an image)" if key.endswith(".txt") else "image"
    notes.append(f"uploaded a sample {kind} to s3://{bucket}/{key}")
    if isinstance(version, str) and new_version:
        _set(holder, version_path, new_version)
        notes.append(f"version id {version} is now {new_version}, the one S3 gave the upload")
    return event, notes
