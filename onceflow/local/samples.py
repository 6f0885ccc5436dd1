"""Make a sample event from events/ meaningful on the local engine.

The files in events/ are the ones `sam local invoke -e` takes, so they name
the documentation placeholder bucket and a version id from a real account.
Locally, the placeholder stands for the stack's ingest bucket, and a sample
object is uploaded at the event's key when none is there (an image, or text
for keys ending in .txt: the poison case). Every change is reported.

The events SAM users already have (`sam local generate-event s3 put`, `sqs
receive-message`) are Lambda's shapes, which no state machine of the stack is
started with: they are run as the pipe would deliver them, or refused with the
name of the sample to use.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from botocore.exceptions import ClientError
from PIL import Image

from onceflow.local.engine import LocalEngine
from onceflow.local.errors import WrongEvent

PLACEHOLDER_BUCKET = "amzn-s3-demo-bucket"
# The AWS documentation's placeholder, and the bucket `sam local generate-event s3 put`
# names unless told (aws-sam-cli, samcli/lib/generated_sample_events/event-mapping.json).
PLACEHOLDER_BUCKETS = (PLACEHOLDER_BUCKET, "example-bucket")
# User metadata of a sample upload: the version id the event named (see _earlier_sample).
SAMPLE_OF = "onceflow-sample-of"
PROCESSOR = "ProcessorStateMachine"
BATCH_PROCESSOR = "BatchProcessorStateMachine"
# What each of the stack's targets is started (or invoked) with, as a file in events/.
SAMPLES = {
    PROCESSOR: "events/s3-object-created.json (EventBridge) or "
    "events/sqs-s3-notification.json (one SQS message from the pipe)",
    BATCH_PROCESSOR: "events/sqs-s3-notification.json (the pipe's SQS messages), or "
    "events/s3-object-created.json (what the rule sends to the queue in the batch mode)",
    "ProcessorFunction": "events/processor-payload.json (the payload the processor sends)",
    "AuditFunction": "events/audit-batch.json (one batch of the audit's Distributed Map)",
    "AuditStateMachine": "events/audit-run.json",
}


def _eventbridge(event: Any) -> bool:
    """An event as EventBridge delivers it (source, detail-type, detail)."""
    return isinstance(event, dict) and {"source", "detail-type", "detail"} <= set(event)


def _records(event: Any, source: str) -> list[dict[str, Any]] | None:
    """The Records of a Lambda-style event from `source` (aws:s3, aws:sqs); else None."""
    if not isinstance(event, dict) or not isinstance(event.get("Records"), list):
        return None
    records: list[dict[str, Any]] = event["Records"]
    if records and all(isinstance(r, dict) and r.get("eventSource") == source for r in records):
        return records
    return None


def _pipe_message(engine: LocalEngine, notification: Any) -> dict[str, Any]:
    """An S3 notification as the pipe hands it on: the body of one SQS message.

    S3 sends a notification to an SQS queue as the message body (S3 User Guide,
    notification-content-structure.html), and the pipe passes the queue's messages
    in the shape of eb-pipes-sqs.html's example: the fields below.
    """
    body = json.dumps(notification)
    now = str(int(time.time() * 1000))
    region, account = engine.stack.region, engine.stack.account_id
    queue = f"arn:aws:sqs:{region}:{account}:{engine.stack.stack_name}-source"
    if "SourceQueue" in engine.stack.template["Resources"] and engine.stack.resource_enabled(
        "SourceQueue"
    ):
        queue = engine.get_att("SourceQueue", "Arn")
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "local-" + uuid.uuid4().hex,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": now,
            "SenderId": account,
            "ApproximateFirstReceiveTimestamp": now,
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue,
        "awsRegion": region,
    }


def adapt_event(engine: LocalEngine, event: Any, target: str | None) -> tuple[Any, list[str]]:
    """A Lambda-style S3 or SQS event as the state machine would be started with it.

    A classic S3 notification (Records[].s3) reaches the processor through the
    source queue and the pipe: it becomes that message, and so the same work item
    (the same idempotency key) as the EventBridge Object Created event of that
    object. A Lambda-style SQS event's Records are the messages the pipe sends:
    one per execution to the processor (the pipe's BatchSize is 1), up to
    SqsBatchSize to the batch processor. Any other target refuses them.
    """
    s3 = _records(event, "aws:s3")
    sqs = _records(event, "aws:sqs")
    if (s3 is None and sqs is None) or target not in SAMPLES:
        return event, []
    kind = (
        "a classic S3 notification (Records[].s3)"
        if s3 is not None
        else "a Lambda-style SQS event (Records[] of messages)"
    )
    if target in (PROCESSOR, BATCH_PROCESSOR) and s3 is not None:
        note = (
            f"{kind}: run as the SQS message the pipe delivers it in "
            "(S3 -> source queue -> pipe; events/sqs-s3-notification.json)"
        )
        return [_pipe_message(engine, event)], [note]
    if target == BATCH_PROCESSOR and sqs is not None:
        return sqs, [f"{kind}: its {len(sqs)} record(s) run as the pipe's batch of messages"]
    if target == PROCESSOR and sqs is not None:
        if len(sqs) == 1:
            return sqs, [f"{kind}: its record runs as the message the pipe sends the processor"]
        raise WrongEvent(
            f"{kind} with {len(sqs)} records: the pipe starts {PROCESSOR} with one message "
            "per execution; keep one record, as events/sqs-s3-notification.json does (or run "
            f"{BATCH_PROCESSOR}, --parameter-overrides SqsSource=create SqsBatchMode=true)"
        )
    raise WrongEvent(
        f"{target} is never sent {kind}; it takes {SAMPLES[target]}. "
        f"Such an event goes to the processor: onceflow execute {PROCESSOR} -e FILE"
    )


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
    engine: LocalEngine, event: Any, *, fixtures: bool = True, target: str | None = None
) -> tuple[Any, list[str]]:
    """Return the event to run locally and notes on what was changed or uploaded.

    Raises WrongEvent for an event the target (a logical id) never receives.
    """
    if target == BATCH_PROCESSOR and _eventbridge(event):
        # In the batch mode the rules send their events to the source queue: the event,
        # prepared as the rule would deliver it, is a message's body (docs/ingress.md,
        # S3 and custom events through the queue).
        event, notes = prepare_event(engine, event, fixtures=fixtures)
        note = "an EventBridge event: run as the message the rule sends to the source queue"
        return [_pipe_message(engine, event)], [*notes, note]
    event, notes = adapt_event(engine, copy.deepcopy(event), target)
    located = _locate(event)
    if located is None:
        return event, notes
    holder, bucket_path, key_path, version_path, encoded = located
    try:
        return event, _prepare_object(
            engine, holder, bucket_path, key_path, version_path, encoded, fixtures, notes
        )
    finally:
        if isinstance(event, list):  # the notification lives in the body text: write it back
            body = json.loads(event[0]["body"])
            body["Records"][0]["s3"] = holder
            event[0]["body"] = json.dumps(body)


def ensure_ingest_bucket(engine: LocalEngine) -> list[str]:
    """Make the stand-in for an ExistingBucketName the local stack lacks; notes on it."""
    s3 = engine.client("s3")
    ingest = engine.ingest_bucket()
    if engine.ref("IngestBucket") == ingest or _bucket_exists(s3, ingest):
        return []
    # ExistingBucketName: on AWS the bucket is the user's; the local stack has none.
    s3.create_bucket(Bucket=ingest)
    # Configured as docs/existing-bucket.md asks of the user's bucket, and as the doctor checks.
    s3.put_bucket_versioning(Bucket=ingest, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_notification_configuration(
        Bucket=ingest, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    return [
        f"bucket {ingest} (ExistingBucketName) does not exist locally: created it, "
        "versioned and sending its events to EventBridge, as a stand-in for yours"
    ]


def upload_file(
    engine: LocalEngine, path: Path, key: str | None = None, target: str | None = PROCESSOR
) -> tuple[dict[str, Any], list[str]]:
    """Upload a user's own file to the local stack's bucket; S3's Object Created event of it.

    The event is the one S3 would send EventBridge for that upload, so the processor
    reads the user's real content with the user's real function.
    """
    if target != PROCESSOR:
        raise WrongEvent(
            f"--upload runs S3's Object Created event, which {PROCESSOR} takes "
            f"(through the EventBridge rule); {target} is never sent one"
        )
    body = path.read_bytes()
    key = key if key is not None else path.name
    notes = ensure_ingest_bucket(engine)
    bucket = engine.ingest_bucket()
    try:
        uploaded = engine.client("s3").put_object(Bucket=bucket, Key=key, Body=body)
    except ClientError as exc:
        raise WrongEvent(f"S3 refused the upload of {path} as {key!r}: {exc}") from None
    version = uploaded.get("VersionId")
    notes.append(
        f"uploaded {path.name} to s3://{bucket}/{key}"
        + (f" (version {version})" if version else "")
        + "; each --upload is a new upload, so new work"
    )
    return engine.s3_object_created_event(bucket, key, version), notes


def _bucket_exists(s3: Any, bucket: str) -> bool:
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError:
        return False
    return True


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
    ingest = engine.ingest_bucket()
    named = _get(holder, bucket_path)
    if named in PLACEHOLDER_BUCKETS:
        _set(holder, bucket_path, ingest)
        notes.append(f"bucket {named} stands for the local stack's {ingest}")
    elif isinstance(named, str) and named and named != ingest:
        notes.append(
            f"bucket {named} is not the local stack's: the processor refuses it, as the "
            f"deployed one refuses any bucket but its own. Locally, {PLACEHOLDER_BUCKET} "
            f"(the AWS docs' placeholder) and example-bucket (sam local generate-event's) "
            f"stand for the ingest bucket {ingest}: name one of them in the event"
        )
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
    notes += ensure_ingest_bucket(engine)
    version = _get(holder, version_path)
    try:
        kwargs = {"Bucket": bucket, "Key": key}
        if isinstance(version, str):
            kwargs["VersionId"] = version
        s3.head_object(**kwargs)
        return notes
    except ClientError:
        pass  # not there yet: upload the sample below
    earlier = _earlier_sample(s3, bucket, key, version)
    if earlier is not None:
        # On `onceflow up` the same file run again is the same upload delivered again.
        notes.append(
            f"version id {version} is {earlier['VersionId']}, the version the sample "
            "uploaded earlier for it"
        )
        _name_upload(holder, version_path, version, earlier, notes, announce=False)
        return notes
    metadata = {SAMPLE_OF: version} if isinstance(version, str) and _is_metadata(version) else {}
    try:
        uploaded = s3.put_object(Bucket=bucket, Key=key, Body=_sample_body(key), Metadata=metadata)
    except ClientError as exc:
        notes.append(f"no sample object uploaded: S3 refused the key ({exc})")
        return notes
    kind = "text (not an image)" if key.endswith(".txt") else "image"
    notes.append(f"uploaded a sample {kind} to s3://{bucket}/{key}")
    _name_upload(holder, version_path, version, uploaded, notes, announce=True)
    return notes


def _is_metadata(value: str) -> bool:
    """Whether S3 keeps the value as user metadata as it is (printable ASCII)."""
    return value.isascii() and value.isprintable() and len(value) <= 1024


def _earlier_sample(s3: Any, bucket: str, key: str, version: Any) -> dict[str, Any] | None:
    """The sample uploaded before for an event naming this version id (None: none was).

    The event's version id is a real account's, never the local bucket's: the upload
    keeps it in its metadata, so that the same event file names the same upload again.
    """
    if not isinstance(version, str) or not _is_metadata(version):
        return None
    listed = s3.list_object_versions(Bucket=bucket, Prefix=key)
    for candidate in listed.get("Versions", []):
        if candidate.get("Key") != key:
            continue
        head = s3.head_object(Bucket=bucket, Key=key, VersionId=candidate["VersionId"])
        if head.get("Metadata", {}).get(SAMPLE_OF) == version:
            return {"VersionId": candidate["VersionId"], "ETag": head.get("ETag", "")}
    return None


def _name_upload(
    holder: dict[str, Any],
    version_path: str,
    version: Any,
    uploaded: dict[str, Any],
    notes: list[str],
    *,
    announce: bool,
) -> None:
    """Point the event at the upload: its version id, and its ETag."""
    new_version = uploaded.get("VersionId")
    if isinstance(version, str) and new_version:
        _set(holder, version_path, new_version)
        if announce:
            notes.append(f"version id {version} is now {new_version}, the one S3 gave the upload")
    # An upload without a real version id is read only while it still holds the
    # ETag its event names (anything else counts as superseded): name the sample's.
    parent_path = version_path.rpartition(".")[0]
    parent = _get(holder, parent_path) if parent_path else holder
    etag = str(uploaded.get("ETag", "")).strip('"')
    for field in ("etag", "eTag"):
        if isinstance(parent, dict) and isinstance(parent.get(field), str) and etag:
            if announce:
                notes.append(f"etag {parent[field]} is now {etag}, the one S3 gave the upload")
            parent[field] = etag
