"""EventBridge's limits: PutEvents' entries under 1 MB, sized as EventBridge sizes them, and
nested at most 1000 levels deep."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from botocore.exceptions import ClientError
from moto.events import models as events_models
from moto.events.exceptions import ValidationException

from onceflow.local import json_depth
from onceflow.local.limits.common import ORIGINAL, limit, utf8
from onceflow.local.patches.registry import takes

# API reference, PutEvents: "the total entry size must be less than 1MB".
EVENTBRIDGE_ENTRIES_LIMIT: Final = 1024 * 1024
EVENTBRIDGE_TOO_LARGE: Final = "Total size of the entries in the request is over the limit."
# API reference, PutEvents: "PutEvents will only process nested JSON up to 1000 levels deep"
# (earlier revisions of the page said 1100). Counted on the event the bus delivers, its
# envelope around the Detail: a Detail nested at most 999 levels. What PutEvents answers for a
# deeper one is not documented (not verified): the engine refuses the request, named.
EVENTBRIDGE_DEPTH_LIMIT: Final = 1000


def _too_deep(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """Why PutEvents would not process one of entries for its depth, or None."""
    for entry in entries:
        depth = json_depth(str(entry.get("Detail") or "")) + 1  # the envelope around it
        if depth > EVENTBRIDGE_DEPTH_LIMIT:
            return (
                f"the event nests {depth} levels deep (its Detail {depth - 1}); PutEvents "
                f"processes nested JSON up to {EVENTBRIDGE_DEPTH_LIMIT} levels deep"
            )
    return None


def put_events_entry_size(entry: Mapping[str, Any]) -> int:
    """EventBridge's "Calculating PutEvents event entry size": Time 14 bytes if
    given; Source, DetailType, Detail and each of Resources in UTF-8 bytes."""
    texts = [*map(entry.get, ("Source", "DetailType", "Detail")), *(entry.get("Resources") or [])]
    time = 14 if entry.get("Time") is not None else 0
    return time + sum(utf8(text) for text in texts if text is not None)


def _put_events(self: Any, events: list[dict[str, Any]]) -> Any:
    if sum(put_events_entry_size(e) for e in events) >= EVENTBRIDGE_ENTRIES_LIMIT:
        raise ValidationException(EVENTBRIDGE_TOO_LARGE)
    if (too_deep := _too_deep(events)) is not None:
        raise ValidationException(too_deep)
    return ORIGINAL[_put_events](self, events)


def check_custom_event(source: str, detail_type: str, detail: Any) -> None:
    """The engine's PutEvents of one custom event (ingress.put_custom_event), refused as
    PutEvents refuses it (the Detail sized as the compact JSON text a client sends)."""
    text = json.dumps(detail, ensure_ascii=False, separators=(",", ":"))
    entry = {"Source": source, "DetailType": detail_type, "Detail": text}
    too_large = put_events_entry_size(entry) >= EVENTBRIDGE_ENTRIES_LIMIT
    message = EVENTBRIDGE_TOO_LARGE if too_large else _too_deep([entry])
    if message is None:
        return
    error = {"Code": "ValidationException", "Message": message}
    response: Any = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}
    raise ClientError(response, "PutEvents")


PATCHES = (
    limit(
        "EventBridge entries",
        "PutEvents refuses entries of 1 MB or more in all, sized as 'Calculating "
        "PutEvents event entry size' says, with ValidationException (PutEvents API reference); "
        "it processes nested JSON up to 1000 levels deep (same page; the engine refuses a "
        "deeper event with ValidationException, AWS's answer not verified).",
        "tests/unit/test_limits.py::test_a_put_events_entry_is_sized_as_eventbridge_documents",
        (events_models.EventsBackend, "put_events", _put_events),
        fits=lambda: takes(events_models.EventsBackend.put_events, "self", "events"),
    ),
)
