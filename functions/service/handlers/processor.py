"""Processor Lambda: turn one claimed work item into one WebP output."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from service.dal.objects import ObjectStore
from service.errors import ObjectSuperseded, PermanentError
from service.logic.images import downscale_to_webp, output_key
from service.observability import logger, metrics, tracer
from service.settings import ProcessorSettings, processor_settings

_store: ObjectStore | None = None


def _object_store() -> ObjectStore:
    global _store
    if _store is None:
        _store = ObjectStore()
    return _store


def process(
    event: dict[str, Any], settings: ProcessorSettings, store: ObjectStore
) -> dict[str, Any]:
    """Read the object of the work item, downscale it, write the output once.

    A work item from a message or a custom event (no object, a payload)
    is recorded once instead: the payload as JSON under the record prefix.
    """
    work_item = event.get("workItem")
    if not isinstance(work_item, dict) or not work_item.get("idempotencyKey"):
        raise PermanentError("the payload has no workItem with an idempotencyKey")
    idempotency_key = str(work_item["idempotencyKey"])
    metadata = {
        # Metadata must be ASCII: keep the key readable but encoded.
        "idempotency-key": quote(idempotency_key, safe="/:#"),
        "lock-token": str(event.get("lockToken", "")),
    }
    if not work_item.get("bucket") or not work_item.get("key"):
        if "payload" not in work_item:
            raise PermanentError("the workItem has neither an object (bucket, key) nor a payload")
        key = output_key(settings.record_prefix, idempotency_key, ".json")
        text = json.dumps(work_item["payload"], ensure_ascii=False)
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (JSON allows "\ud800", UTF-8 has no form for it): write
            # the same JSON with every non-ASCII character escaped.
            body = json.dumps(work_item["payload"]).encode("ascii")
        created = store.write_once(settings.output_bucket, key, body, "application/json", metadata)
        return {
            "output": f"s3://{settings.output_bucket}/{key}",
            "created": created,
            "bytes": len(body),
        }
    etag = work_item.get("etag")
    data = store.read(
        work_item["bucket"],
        work_item["key"],
        work_item.get("versionId"),
        etag if isinstance(etag, str) else None,
    )
    rendition = downscale_to_webp(data, settings.max_dimension)
    key = output_key(settings.output_prefix, idempotency_key)
    created = store.write_once(
        settings.output_bucket,
        key,
        rendition.body,
        "image/webp",
        metadata,
    )
    return {
        "output": f"s3://{settings.output_bucket}/{key}",
        "created": created,
        "width": rendition.width,
        "height": rendition.height,
        "bytes": len(rendition.body),
    }


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Every line this invocation logs carries the key and the execution.
    work_item = event.get("workItem") or {}
    logger.append_keys(
        idempotency_key=work_item.get("idempotencyKey"),
        execution_arn=event.get("lockToken"),
        attempt=event.get("attempt"),
    )
    tracer.put_annotation(key="idempotency_key", value=str(work_item.get("idempotencyKey")))
    try:
        result = process(event, processor_settings(), _object_store())
    except PermanentError:
        metrics.add_metric(name="PermanentError", unit=MetricUnit.Count, value=1)
        logger.exception("permanent failure: the work item will be dead-lettered")
        raise
    except ObjectSuperseded as exc:
        # Not a failure: the state machine ends it in Superseded (and counts it there).
        logger.info("superseded: the object was replaced or deleted", extra={"reason": str(exc)})
        raise
    # The flow's outcomes (Processed, Duplicate, Superseded, Failed, DeadLettered, LockLost)
    # are counted from the state machine's log group. This counts what only the
    # function sees: an output that already existed means the effect had
    # happened before (a worker that lost its lock, or crashed after writing).
    name = "OutputWritten" if result["created"] else "OutputExisted"
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    # Not "created": that name belongs to logging.LogRecord, and logging refuses it.
    logger.info(
        "processed", extra={"output": result["output"], "output_created": result["created"]}
    )
    return result
