"""SQS's limits: a message's size in bytes (body and attributes), its characters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from moto.sqs import exceptions as sqs_exceptions
from moto.sqs import models as sqs_models
from moto.sqs.constants import MAXIMUM_MESSAGE_LENGTH as SQS_BATCH_LIMIT
from moto.sqs.exceptions import BatchRequestTooLong, InvalidParameterValue, SQSException

from onceflow.local.limits.common import binary_size, utf8
from onceflow.local.patches.registry import Installer, Patch, takes

_ORIGINAL: dict[str, Any] = {}


def _install(installer: Installer) -> None:
    backend = sqs_models.SQSBackend
    _ORIGINAL["send_message"] = installer.replace(backend, "send_message", _send_message)
    _ORIGINAL["send_message_batch"] = installer.replace(
        backend, "send_message_batch", _send_message_batch
    )


_SQS_ALLOWED: Final = "#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]"
_SQS_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _invalid_character(text: str) -> str | None:
    found = _SQS_INVALID.search(text)
    return None if found is None else f"#x{ord(found.group()):X}"


def _attribute_value_bytes(value: Mapping[str, Any]) -> int:
    if "StringValue" in value:
        return utf8(value["StringValue"])
    if "BinaryValue" in value:
        return binary_size(value["BinaryValue"])
    return 0


def sqs_message_size(body: str, attributes: Mapping[str, Any] | None) -> int:
    """SQS counts the body's bytes and every part of every message attribute
    (name, data type, value) against the queue's MaximumMessageSize."""
    size = utf8(body)
    for name, value in (attributes or {}).items():
        size += utf8(name) + utf8(value.get("DataType", "")) + _attribute_value_bytes(value)
    return size


def _check_sqs_message(queue: Any, body: str, attributes: Mapping[str, Any] | None) -> None:
    bad = _invalid_character(body)
    if bad is not None:
        raise SQSException(
            "InvalidMessageContents",
            f"Invalid binary character '{bad}' was found in the message body, the set of "
            f"allowed characters is {_SQS_ALLOWED}.",
        )
    for name, value in (attributes or {}).items():
        text = value.get("StringValue")
        bad = _invalid_character(text) if isinstance(text, str) else None
        if bad is not None:  # the wording for attributes is not verified
            raise SQSException(
                "InvalidMessageContents",
                f"Invalid binary character '{bad}' was found in the value of message "
                f"attribute '{name}', the set of allowed characters is {_SQS_ALLOWED}.",
            )
    size = sqs_message_size(body, attributes)
    limit = int(queue.maximum_message_size)
    if size > limit:
        raise InvalidParameterValue(
            "One or more parameters are invalid. Reason: "
            f"Message must be shorter than {limit} bytes."
        )


def _send_message(self: Any, queue_name: str, message_body: str, *args: Any, **kwargs: Any) -> Any:
    if message_body is None:  # SQS's own answer (moto's size check met None and crashed)
        raise sqs_exceptions.MissingParameter("MessageBody")
    attributes = kwargs.get("message_attributes", args[0] if args else None)
    _check_sqs_message(self.get_queue(queue_name), message_body, attributes)
    return _ORIGINAL["send_message"](self, queue_name, message_body, *args, **kwargs)


def _send_message_batch(self: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
    queue = self.get_queue(queue_name)
    total = 0
    for entry in entries.values():
        _check_sqs_message(queue, entry["MessageBody"], entry.get("MessageAttributes"))
        total += sqs_message_size(entry["MessageBody"], entry.get("MessageAttributes"))
    if total > SQS_BATCH_LIMIT:
        raise BatchRequestTooLong(total)
    return _ORIGINAL["send_message_batch"](self, queue_name, entries)


PATCHES = (
    Patch(
        name="SQS messages",
        kind="limit",
        why="SendMessage and SendMessageBatch refuse a message over the queue's "
        "MaximumMessageSize (body and attributes in bytes), a batch over 256 KiB and "
        "characters outside SQS's set, with SQS's own errors (SendMessage API reference).",
        test="tests/workflow/test_limits.py",
        install=_install,
        fits=lambda: [
            *takes(sqs_models.SQSBackend.send_message, "self", "queue_name", "message_body"),
            *takes(sqs_models.SQSBackend.send_message_batch, "self", "queue_name", "entries"),
        ],
    ),
)
