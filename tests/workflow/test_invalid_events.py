"""Bad input ends in the named InvalidEvent failure, in the DLQ, with no ledger row."""

from __future__ import annotations

import json
from typing import Any

import pytest

from onceflow.engine import LocalEngine
from tests.helpers import MACHINE, attributes, dlq_messages, invocations, ledger_rows, load_event

INVALID_PATH = [
    "Normalize",
    "DescribeInvalidEvent",
    "SendToDLQ",
    "DeadLetterReason",
    "InvalidEvent",
]


def _without(event: dict[str, Any], *path: str) -> dict[str, Any]:
    node = event
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return event


CASES = [
    pytest.param(
        load_event("invalid-unknown-shape.json"), "unknown event shape", id="unknown-shape"
    ),
    pytest.param(
        load_event("invalid-s3-missing-key.json"), "detail.object.key is missing", id="s3-no-key"
    ),
    pytest.param(
        _without(load_event("s3-object-created.json"), "detail", "bucket", "name"),
        "detail.bucket.name is missing",
        id="s3-no-bucket",
    ),
    pytest.param(
        _without(
            _without(load_event("s3-object-created.json"), "detail", "object", "version-id"),
            "detail",
            "object",
            "sequencer",
        ),
        "neither version-id nor sequencer",
        id="s3-no-version-or-sequencer",
    ),
    pytest.param(
        {**load_event("s3-object-created.json"), "detail-type": "Object Deleted"},
        "unsupported S3 event detail-type: Object Deleted",
        id="s3-wrong-detail-type",
    ),
    pytest.param(
        {"workItem": {"key": "a.png", "versionId": "v"}},
        "workItem.bucket is missing",
        id="item-no-bucket",
    ),
    pytest.param(
        {"workItem": {"bucket": "b", "versionId": "v"}}, "workItem.key is missing", id="item-no-key"
    ),
    pytest.param(
        {"workItem": {"bucket": "b", "key": "k"}},
        "workItem needs an idempotencyKey, a versionId or a sequencer",
        id="item-no-identity",
    ),
    pytest.param([1, 2, 3], "the event is not a JSON object", id="not-an-object"),
]


@pytest.mark.parametrize(("event", "message"), CASES)
def test_invalid_event_is_dead_lettered_with_a_named_failure(
    engine: LocalEngine, event: Any, message: str
) -> None:
    result = engine.execute(MACHINE, event)
    assert result.status == "FAILED"
    assert result.error == "InvalidEvent"
    assert result.cause is not None and message in result.cause
    assert result.states_entered == INVALID_PATH
    assert invocations(engine) == 0
    assert ledger_rows(engine) == []  # no PROCESSING row, no row at all
    messages = dlq_messages(engine)
    assert len(messages) == 1
    attrs = attributes(messages[0])
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "InvalidEvent"
    assert attrs["ERROR_CODE"] == "InvalidEvent"
    assert message in attrs["ERROR_MESSAGE"]
    assert attrs["RETRY_ATTEMPTS"] == "0"
    assert attrs["EXECUTION_ARN"] == result.arn
    assert "IDEMPOTENCY_KEY" not in attrs  # there is no key to name
    assert json.loads(messages[0]["Body"]) == {"event": event, "workItem": None}
