"""SQS's limits: a message's size in bytes (body and attributes), its characters, its
number of attributes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from moto.sqs import exceptions as sqs_errors
from moto.sqs import models as sqs_models
from moto.sqs.constants import MAXIMUM_MESSAGE_LENGTH as SQS_BATCH_LIMIT

from onceflow.local.limits.common import ORIGINAL, binary_size, limit, utf8
from onceflow.local.patches.registry import takes

_SQS_ALLOWED: Final = "#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]"
SQS_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# "Each message can have up to 10 attributes" (SQS Developer Guide, sqs-message-metadata.html)
MOST_ATTRIBUTES: Final = 10


def sqs_message_size(body: str, attributes: Mapping[str, Any] | None) -> int:
    """SQS counts the body's bytes and every part of every message attribute
    (name, data type, value) against the queue's MaximumMessageSize."""
    size = utf8(body)
    for name, value in (attributes or {}).items():
        size += utf8(name) + utf8(value.get("DataType", ""))
        if "StringValue" in value:
            size += utf8(value["StringValue"])
        elif "BinaryValue" in value:
            size += binary_size(value["BinaryValue"])
    return size


def _checked_size(queue: Any, body: str, attributes: Mapping[str, Any] | None) -> int:
    """The message's size, once its attributes, characters and size pass SQS's checks."""
    if (count := len(attributes or {})) > MOST_ATTRIBUTES:
        # live SQS's words (open-telemetry/opentelemetry-java-instrumentation#13799); the
        # code as elasticmq gives it (not verified)
        raise sqs_errors.InvalidParameterValue(
            f"Number of message attributes [{count}] exceeds the allowed maximum [10]."
        )
    texts = [("the message body", body)] + [
        (f"the value of message attribute '{name}'", value.get("StringValue"))
        for name, value in (attributes or {}).items()
    ]  # the wording for attributes is not verified
    for where, text in texts:
        found = SQS_INVALID.search(text) if isinstance(text, str) else None
        if found is not None:
            raise sqs_errors.SQSException(
                "InvalidMessageContents",
                f"Invalid binary character '#x{ord(found.group()):X}' was found in {where}, "
                f"the set of allowed characters is {_SQS_ALLOWED}.",
            )
    if (size := sqs_message_size(body, attributes)) > (most := int(queue.maximum_message_size)):
        reason = f"Reason: Message must be shorter than {most} bytes."
        raise sqs_errors.InvalidParameterValue(f"One or more parameters are invalid. {reason}")
    return size


def _send_message(self: Any, queue_name: str, message_body: str, *args: Any, **kwargs: Any) -> Any:
    if message_body is None:  # SQS's own answer (moto's size check met None and crashed)
        raise sqs_errors.MissingParameter("MessageBody")
    attributes = kwargs.get("message_attributes", args[0] if args else None)
    _checked_size(self.get_queue(queue_name), message_body, attributes)
    return ORIGINAL[_send_message](self, queue_name, message_body, *args, **kwargs)


def _send_message_batch(self: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
    queue = self.get_queue(queue_name)
    total = 0
    for entry in entries.values():
        total += _checked_size(queue, entry["MessageBody"], entry.get("MessageAttributes"))
    if total > SQS_BATCH_LIMIT:
        raise sqs_errors.BatchRequestTooLong(total)
    return ORIGINAL[_send_message_batch](self, queue_name, entries)


_BACKEND = sqs_models.SQSBackend
PATCHES = (
    limit(
        "SQS messages",
        "SendMessage and SendMessageBatch refuse a message over the queue's "
        "MaximumMessageSize (body and attributes in bytes), with more than 10 attributes "
        "(sqs-message-metadata.html), a batch over 1 MiB and characters outside SQS's set, "
        "with SQS's own errors (SendMessage API reference).",
        "tests/workflow/test_limits.py",
        (_BACKEND, "send_message", _send_message),
        (_BACKEND, "send_message_batch", _send_message_batch),
        fits=lambda: [
            *takes(_BACKEND.send_message, "self", "queue_name", "message_body"),
            *takes(_BACKEND.send_message_batch, "self", "queue_name", "entries"),
        ],
    ),
)
