"""The bundled processor's use case: one claimed work item, one output written once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

from service.dal.objects import ObjectStore
from service.errors import PermanentError
from service.logic.images import downscale_to_webp, output_key
from service.model import WorkItem
from service.settings import ProcessorSettings


@dataclass(frozen=True)
class Output:
    """What the processor wrote: where, whether this call created it, its size."""

    output: str  # s3://bucket/key
    created: bool  # False: it existed (a worker that lost its lock, or crashed, wrote it)
    bytes: int
    width: int | None = None  # an image's, in pixels
    height: int | None = None


def process(
    work_item: WorkItem, lock_token: str, settings: ProcessorSettings, store: ObjectStore
) -> Output:
    """Read the object of the work item, downscale it, write the output once.

    A work item from a message or a custom event (no object, a payload)
    is recorded once instead: the payload as JSON under the record prefix.
    """
    idempotency_key = str(work_item["idempotencyKey"])
    metadata = {
        # Metadata must be ASCII: keep the key readable but encoded.
        "idempotency-key": quote(idempotency_key, safe="/:#"),
        "lock-token": lock_token,
    }
    bucket, key = work_item.get("bucket"), work_item.get("key")
    if not bucket or not key:
        if "payload" not in work_item:
            raise PermanentError("the workItem has neither an object (bucket, key) nor a payload")
        record = output_key(settings.record_prefix, idempotency_key, ".json")
        text = json.dumps(work_item["payload"], ensure_ascii=False)
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (JSON allows "\ud800", UTF-8 has no form for it): write
            # the same JSON with every non-ASCII character escaped.
            body = json.dumps(work_item["payload"]).encode("ascii")
        created = store.write_once(
            settings.output_bucket, record, body, "application/json", metadata
        )
        return Output(f"s3://{settings.output_bucket}/{record}", created, len(body))
    etag = work_item.get("etag")
    data = store.read(
        bucket, key, work_item.get("versionId"), etag if isinstance(etag, str) else None
    )
    rendition = downscale_to_webp(data, settings.max_dimension)
    image = output_key(settings.output_prefix, idempotency_key)
    created = store.write_once(
        settings.output_bucket, image, rendition.body, "image/webp", metadata
    )
    return Output(
        f"s3://{settings.output_bucket}/{image}",
        created,
        len(rendition.body),
        rendition.width,
        rendition.height,
    )
