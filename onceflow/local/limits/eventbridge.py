"""EventBridge's limit: PutEvents' entries under 1 MB, sized as EventBridge sizes them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from botocore.exceptions import ClientError
from moto.events import models as events_models
from moto.events.exceptions import ValidationException

from onceflow.local.limits.common import ORIGINAL, limit, utf8
from onceflow.local.patches.registry import takes

# API reference, PutEvents: "the total entry size must be less than 1MB".
EVENTBRIDGE_ENTRIES_LIMIT: Final = 1024 * 1024
EVENTBRIDGE_TOO_LARGE: Final = "Total size of the entries in the request is over the limit."


def put_events_entry_size(entry: Mapping[str, Any]) -> int:
    """EventBridge's "Calculating PutEvents event entry size": Time 14 bytes if
    given; Source, DetailType, Detail and each of Resources in UTF-8 bytes."""
    texts = [*map(entry.get, ("Source", "DetailType", "Detail")), *(entry.get("Resources") or [])]
    time = 14 if entry.get("Time") is not None else 0
    return time + sum(utf8(text) for text in texts if text is not None)


def _put_events(self: Any, events: list[dict[str, Any]]) -> Any:
    if sum(put_events_entry_size(e) for e in events) >= EVENTBRIDGE_ENTRIES_LIMIT:
        raise ValidationException(EVENTBRIDGE_TOO_LARGE)
    return ORIGINAL[_put_events](self, events)


def check_custom_event(source: str, detail_type: str, detail: Any) -> None:
    """The engine's PutEvents of one custom event (ingress.put_custom_event), refused as
    PutEvents refuses it (the Detail sized as the compact JSON text a client sends)."""
    text = json.dumps(detail, ensure_ascii=False, separators=(",", ":"))
    entry = {"Source": source, "DetailType": detail_type, "Detail": text}
    if put_events_entry_size(entry) >= EVENTBRIDGE_ENTRIES_LIMIT:
        error = {"Code": "ValidationException", "Message": EVENTBRIDGE_TOO_LARGE}
        response: Any = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}
        raise ClientError(response, "PutEvents")


PATCHES = (
    limit(
        "EventBridge entries",
        "PutEvents refuses entries of 1 MB or more in all, sized as 'Calculating "
        "PutEvents event entry size' says, with ValidationException (PutEvents API reference).",
        "tests/unit/test_limits.py::test_a_put_events_entry_is_sized_as_eventbridge_documents",
        (events_models.EventsBackend, "put_events", _put_events),
        fits=lambda: takes(events_models.EventsBackend.put_events, "self", "events"),
    ),
)
