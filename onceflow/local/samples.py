"""Make a sample event from events/ meaningful on the local engine: what changes (the
placeholder bucket, the sample object, Lambda's event shapes), each change noted, is in
docs/local-engine.md, "Try events"."""

from __future__ import annotations

import contextlib
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
SQS_SAMPLE = "events/sqs-s3-notification.json"
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

# Where an event names its object: (the dict holding the bucket, the bucket's field,
# the dict holding key, version id and ETag, the version id's field, key URL-encoded).
_Located = tuple[dict[str, Any], str, dict[str, Any], str, bool]


def _records(event: Any, source: str) -> list[dict[str, Any]] | None:
    """The Records of a Lambda-style event from `source` (aws:s3, aws:sqs); else None."""
    records = event.get("Records") if isinstance(event, dict) else None
    ours = isinstance(records, list) and all(
        isinstance(r, dict) and r.get("eventSource") == source for r in records
    )
    return records if ours and records else None


def _pipe_message(engine: LocalEngine, notification: Any) -> dict[str, Any]:
    """An event as the pipe hands it on: the body of one SQS message.

    S3 sends a notification to an SQS queue as the message body (S3 User Guide,
    notification-content-structure.html), and the pipe passes the queue's messages
    in the shape of eb-pipes-sqs.html's example: the fields below.
    """
    body = json.dumps(notification)
    now = str(int(time.time() * 1000))
    stack = engine.stack
    queue = f"arn:aws:sqs:{stack.region}:{stack.account_id}:{stack.stack_name}-source"
    if "SourceQueue" in stack.template["Resources"] and stack.resource_enabled("SourceQueue"):
        queue = engine.get_att("SourceQueue", "Arn")
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "local-" + uuid.uuid4().hex,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": now,
            "SenderId": stack.account_id,
            "ApproximateFirstReceiveTimestamp": now,
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue,
        "awsRegion": stack.region,
    }


def _adapt(engine: LocalEngine, event: Any, target: str | None) -> tuple[Any, list[str]]:
    """A Lambda-style S3 or SQS event as the state machine would be started with it: a
    classic S3 notification reaches the processors through the source queue and the pipe
    (so the same work item as S3's EventBridge event of that object); an SQS event's
    Records are the pipe's messages, one per execution to the processor (BatchSize 1),
    up to SqsBatchSize to the batch processor. Any other target refuses them."""
    s3 = _records(event, "aws:s3")
    records = s3 if s3 is not None else _records(event, "aws:sqs")
    if records is None or target not in SAMPLES:
        return event, []
    if s3 is not None:
        kind = "a classic S3 notification (Records[].s3)"
        if target in (PROCESSOR, BATCH_PROCESSOR):
            note = "run as the SQS message the pipe delivers it in (S3 -> source queue -> pipe"
            return [_pipe_message(engine, event)], [f"{kind}: {note}; {SQS_SAMPLE})"]
    else:
        kind = "a Lambda-style SQS event (Records[] of messages)"
        if target == BATCH_PROCESSOR:
            return records, [
                f"{kind}: its {len(records)} record(s) run as the pipe's batch of messages"
            ]
        if target == PROCESSOR and len(records) == 1:
            return records, [f"{kind}: its record runs as the message the pipe sends the processor"]
        if target == PROCESSOR:
            raise WrongEvent(
                f"{kind} with {len(records)} records: the pipe starts {PROCESSOR} with one message "
                f"per execution; keep one record, as {SQS_SAMPLE} does (or "
                f"run {BATCH_PROCESSOR}, --parameter-overrides SqsSource=create SqsBatchMode=true)"
            )
    raise WrongEvent(
        f"{target} is never sent {kind}; it takes {SAMPLES[target]}. "
        f"Such an event goes to the processor: onceflow execute {PROCESSOR} -e FILE"
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _locate(event: Any, in_message: bool = False) -> _Located | None:
    """Where event names its object; in_message: event is a message body from the pipe,
    which carries a classic S3 notification."""
    if not isinstance(event, dict):
        return None
    if in_message:
        records = event.get("Records")
        first = records[0] if isinstance(records, list) and records else None
        s3 = first.get("s3") if isinstance(first, dict) else None
        if isinstance(s3, dict):
            return _dict(s3.get("bucket")), "name", _dict(s3.get("object")), "versionId", True
        return None
    detail = event.get("detail")
    if event.get("source") == "aws.s3" and isinstance(detail, dict):
        bucket, obj = detail.get("bucket"), detail.get("object")
        if isinstance(bucket, dict) and isinstance(obj, dict):
            return bucket, "name", obj, "version-id", True
    item = event.get("workItem")
    return (item, "bucket", item, "versionId", False) if isinstance(item, dict) else None


def prepare_event(
    engine: LocalEngine, event: Any, *, fixtures: bool = True, target: str | None = None
) -> tuple[Any, list[str]]:
    """Return the event to run locally and notes on what was changed or uploaded.

    Raises WrongEvent for an event the target (a logical id) never receives.
    """
    eventbridge = isinstance(event, dict) and {"source", "detail-type", "detail"} <= set(event)
    if target == BATCH_PROCESSOR and eventbridge:
        # In the batch mode the rules send their events to the source queue: the event,
        # prepared as the rule would deliver it, is a message's body (docs/ingress.md,
        # S3 and custom events through the queue).
        event, notes = prepare_event(engine, event, fixtures=fixtures)
        note = "an EventBridge event: run as the message the rule sends to the source queue"
        return [_pipe_message(engine, event)], [*notes, note]
    event, notes = _adapt(engine, copy.deepcopy(event), target)
    one = isinstance(event, list) and len(event) == 1 and isinstance(event[0], dict)
    message, body = (event[0] if one else None), None
    if message is None:
        located = _locate(event)
    else:  # an SQS message from the pipe: its object is named in the body text
        try:
            body = json.loads(message.get("body", ""))
        except (TypeError, ValueError):
            return event, notes
        located = _locate(body, in_message=True)
    if located is not None:
        notes = _prepare_object(engine, located, fixtures, notes)
        if message is not None:
            message["body"] = json.dumps(body)
            # SQS's MD5OfBody: of the body's UTF-8 bytes (API_ReceiveMessage.html).
            digest = hashlib.md5(message["body"].encode("utf-8"), usedforsecurity=False)
            message["md5OfBody"] = digest.hexdigest()
    return event, notes


def ensure_ingest_bucket(engine: LocalEngine) -> list[str]:
    """Make the stand-in for an ExistingBucketName the local stack lacks; notes on it."""
    s3 = engine.client("s3")
    ingest = engine.ingest_bucket()
    if engine.ref("IngestBucket") == ingest:
        return []
    # ExistingBucketName: on AWS the bucket is the user's; the local stack may have none.
    with contextlib.suppress(ClientError):
        s3.head_bucket(Bucket=ingest)
        return []
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
) -> tuple[dict[str, Any] | list[dict[str, Any]], list[str]]:
    """Upload a user's own file to the local stack's bucket; S3's Object Created event of
    it, as S3 would send EventBridge, so the processor reads the user's real content. For
    the batch workflow (the batch mode: the rule sends uploads to the source queue), the
    event as the pipe hands it on, one message's body."""
    if target not in (PROCESSOR, BATCH_PROCESSOR):
        raise WrongEvent(
            f"--upload runs S3's Object Created event, which {PROCESSOR} takes "
            f"(through the EventBridge rule), or {BATCH_PROCESSOR} in the batch mode "
            f"(through the source queue); {target} is never sent one"
        )
    body, key = path.read_bytes(), key if key is not None else path.name
    # The rule matches only KeyPrefix*KeySuffix (not overlapping): on AWS any other upload
    # starts nothing, so none is run, nor dead-lettered, here either.
    prefix = engine.stack.parameters.get("KeyPrefix", "")
    suffix = engine.stack.parameters.get("KeySuffix", "")
    if not (key.startswith(prefix) and key.endswith(suffix)) or len(key) < len(prefix + suffix):
        raise WrongEvent(
            f"{key!r} is not a key this stack processes (KeyPrefix {prefix!r}, KeySuffix "
            f"{suffix!r}): on AWS its upload starts nothing; name one with --key "
            f"{prefix}{Path(key).stem or 'file'}{suffix}"
        )
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
    event = engine.s3_object_created_event(bucket, key, version)
    if target == BATCH_PROCESSOR:
        notes.append("its event runs as the message the rule sends to the source queue")
        return [_pipe_message(engine, event)], notes
    return event, notes


def _prepare_object(
    engine: LocalEngine, located: _Located, fixtures: bool, notes: list[str]
) -> list[str]:
    holder, bucket_field, obj, version_field, encoded = located
    ingest = engine.ingest_bucket()
    bucket = holder.get(bucket_field)
    if bucket in PLACEHOLDER_BUCKETS:
        notes.append(f"bucket {bucket} stands for the local stack's {ingest}")
        holder[bucket_field] = bucket = ingest
    elif isinstance(bucket, str) and bucket and bucket != ingest:
        notes.append(
            f"bucket {bucket} is not the local stack's: the processor refuses it, as the "
            f"deployed one refuses any bucket but its own. Locally, {PLACEHOLDER_BUCKET} "
            f"(the AWS docs' placeholder) and example-bucket (sam local generate-event's) "
            f"stand for the ingest bucket {ingest}: name one of them in the event"
        )
    key = obj.get("key")
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
        return [*notes, "the key is not valid Unicode: no sample object uploaded for it"]
    if size > 1024:
        return [*notes, f"the key is {size} bytes, more than S3 allows: no sample object uploaded"]
    s3 = engine.client("s3")
    notes += ensure_ingest_bucket(engine)
    version = obj.get(version_field)
    with contextlib.suppress(ClientError):  # not there yet: upload the sample below
        s3.head_object(
            Bucket=bucket, Key=key, **({"VersionId": version} if isinstance(version, str) else {})
        )
        return notes
    uploaded = _earlier_sample(s3, bucket, key, version)
    announce = uploaded is None
    if uploaded is not None:
        # On `onceflow up` the same file run again is the same upload delivered again.
        notes.append(
            f"version id {version} is {uploaded['VersionId']}, the version the sample "
            "uploaded earlier for it"
        )
    else:
        metadata = {SAMPLE_OF: version} if _is_metadata(version) else {}
        text = key.endswith(".txt")
        try:
            uploaded = s3.put_object(
                Bucket=bucket, Key=key, Body=_sample_body(text), Metadata=metadata
            )
        except ClientError as exc:
            return [*notes, f"no sample object uploaded: S3 refused the key ({exc})"]
        kind = "text (not an image)" if text else "image"
        notes.append(f"uploaded a sample {kind} to s3://{bucket}/{key}")
    # Point the event at the upload: its version id, and its ETag.
    new_version = uploaded.get("VersionId")
    if isinstance(version, str) and new_version:
        obj[version_field] = new_version
        if announce:
            notes.append(f"version id {version} is now {new_version}, the one S3 gave the upload")
    # An upload without a real version id is read only while it still holds the
    # ETag its event names (anything else counts as superseded): name the sample's.
    etag = str(uploaded.get("ETag", "")).strip('"')
    for field in ("etag", "eTag"):
        if isinstance(obj.get(field), str) and etag:
            if announce:
                notes.append(f"etag {obj[field]} is now {etag}, the one S3 gave the upload")
            obj[field] = etag
    return notes


def _sample_body(text: bool) -> bytes:
    if text:
        return b"this is not an image\n"
    out = io.BytesIO()
    Image.new("RGB", (640, 480), (40, 120, 200)).save(out, format="PNG")
    return out.getvalue()


def _is_metadata(value: Any) -> bool:
    """Whether S3 keeps the value as user metadata as it is (printable ASCII)."""
    return isinstance(value, str) and value.isascii() and value.isprintable() and len(value) <= 1024


def _earlier_sample(s3: Any, bucket: str, key: str, version: Any) -> dict[str, Any] | None:
    """The sample uploaded before for an event naming this version id (None: none was).

    The event's version id is a real account's, never the local bucket's: the upload
    keeps it in its metadata, so that the same event file names the same upload again.
    """
    if not _is_metadata(version):
        return None
    for candidate in s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", []):
        if candidate.get("Key") != key:
            continue
        head = s3.head_object(Bucket=bucket, Key=key, VersionId=candidate["VersionId"])
        if head.get("Metadata", {}).get(SAMPLE_OF) == version:
            return {"VersionId": candidate["VersionId"], "ETag": head.get("ETag", "")}
    return None
