"""Processor Lambda: turn one claimed work item into one WebP output.

This module reads the state machine's event (service/contract.py: the work
item, the lock token), calls the use case (service/usecases/process.py) and
shapes its answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from service.contract import ProcessorInput
from service.dal.objects import ObjectStore
from service.errors import ObjectSuperseded, PermanentError, json_kind
from service.model import WorkItem
from service.observability import logger, metrics, tracer
from service.settings import ProcessorSettings, processor_settings
from service.usecases.process import Output
from service.usecases.process import process as process_work_item

_store: ObjectStore | None = None


def _object_store() -> ObjectStore:
    global _store
    if _store is None:
        _store = ObjectStore()
    return _store


def work_item_of(event: object) -> WorkItem:
    """The event's work item; PermanentError when it has none the processor can name."""
    if not isinstance(event, Mapping):  # Lambda hands on any JSON value it is invoked with
        raise PermanentError(
            f"the payload is {json_kind(event)}, not an object: the Process state sends "
            "{workItem, lockToken, attempt, callToken}"
        )
    work_item = event.get("workItem")
    if not isinstance(work_item, dict) or not work_item.get("idempotencyKey"):
        raise PermanentError("the payload has no workItem with an idempotencyKey")
    return cast(WorkItem, work_item)


def shaped(output: Output) -> dict[str, Any]:
    """The Process state's result: an image's also says its size in pixels."""
    result: dict[str, Any] = {"output": output.output, "created": output.created}
    if output.width is not None and output.height is not None:
        result |= {"width": output.width, "height": output.height}
    result["bytes"] = output.bytes
    return result


def process(
    event: ProcessorInput, settings: ProcessorSettings, store: ObjectStore
) -> dict[str, Any]:
    """One invocation's work, from the event to the result the state machine records."""
    work_item = work_item_of(event)
    return shaped(process_work_item(work_item, str(event.get("lockToken", "")), settings, store))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: ProcessorInput, context: LambdaContext) -> dict[str, Any]:
    # Every line this invocation logs carries the key and the execution (a payload that is
    # no object, or whose work item is none, carries none: process() refuses it).
    fields: Mapping[str, Any] = event if isinstance(event, Mapping) else {}
    work_item = fields.get("workItem")
    key = work_item.get("idempotencyKey") if isinstance(work_item, Mapping) else None
    logger.append_keys(
        idempotency_key=key, execution_arn=fields.get("lockToken"), attempt=fields.get("attempt")
    )
    tracer.put_annotation(key="idempotency_key", value=str(key))
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
