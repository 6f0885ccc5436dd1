"""A seeded corpus of hostile processor inputs: every one must end in a named end state.

Classes (each input says which): not an object; wrong types in every field of
each source's shape; huge strings; deep nesting; lone surrogates; NUL and
control characters; big, tiny, infinite and 16+-digit numbers; empty ids; SQS
pipe arrays of every size; custom events; direct work items; random JSON; and
mutations of every file in events/. An infinite number stands for a JSON
number past a double's range (1e400), which parses as Infinity.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.helpers import EVENTS

LONE_HIGH = "\ud800"
LONE_LOW = "\udc00"
# Strings chosen to break something: encoders, byte counters, XML-only SQS attributes,
# DynamoDB's UTF-8 check, JSONata's regexes.
HOSTILE_STRINGS = [
    "",
    " ",
    "x" * 1025,
    "é" * 700,  # 1400 bytes in UTF-8, 700 characters
    "\u2603" * 400,  # 1200 bytes
    "\U0001f600" * 300,  # 1200 bytes, 600 UTF-16 units
    LONE_HIGH,
    LONE_LOW,
    f"a{LONE_HIGH}b",
    f"{LONE_LOW}{LONE_HIGH}",
    "\x00",
    "nul\x00inside",
    "\x01\x02\x1f\x7f",
    "tab\tnew\nline\rreturn",
    "\ufffe\uffff",
    "\ufeffbom",
    "%",
    "%zz",
    "%E2%98",
    "%C3%28",
    "a+b",
    '"quoted"',
    "back\\slash",
    "{% $states %}",
    "${IngestBucketName}",
    "null",
    "../../etc/passwd",
    "<xml>&amp;</xml>",
]
HOSTILE_NUMBERS: list[Any] = [
    0,
    -1,
    1,
    1.5,
    -0.0,
    1e-200,
    1e300,
    2**53,
    2**53 + 1,
    1234567890123456,
    12345678901234567890,
    10**15,
    -(10**15),
    999999999999999,
]
HOSTILE_VALUES: list[Any] = [None, True, False, [], {}, [1, "a"], {"a": {"b": None}}]
ALL_HOSTILE: list[Any] = HOSTILE_STRINGS + HOSTILE_NUMBERS + HOSTILE_VALUES


@dataclass(frozen=True)
class Hostile:
    """One input and the class it was made for."""

    kind: str
    event: Any
    # An input that cannot be processed by construction must end InvalidEvent.
    must_be_invalid: bool = False


def _events() -> dict[str, Any]:
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(EVENTS.glob("*.json"))
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (dict keys and list indexes)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from _paths(child, (*prefix, index))


def _set(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    copied = copy.deepcopy(document)
    node = copied
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return copied


def _drop(document: Any, path: tuple[Any, ...]) -> Any:
    copied = copy.deepcopy(document)
    node = copied
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return copied


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice([*ALL_HOSTILE, "aws.s3", "Object Created", "workItem", "aws:sqs"])
    if roll < 0.65:
        keys = ["source", "detail-type", "detail", "workItem", "id", "bucket", "key", "body"]
        return {
            rng.choice(keys + [f"k{n}" for n in range(5)]): _random_json(rng, depth + 1)
            for _ in range(rng.randint(0, 5))
        }
    return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"n": value}
    return value


def _sqs_body(record: dict[str, Any], body: str) -> list[dict[str, Any]]:
    copied = copy.deepcopy(record)
    copied["body"] = body
    return [copied]


def corpus(bucket: str, seed: int = 20261123) -> list[Hostile]:
    """The corpus, the same for one seed: at least 1,000 inputs."""
    rng = random.Random(seed)
    samples = _events()
    s3 = _set(samples["s3-object-created.json"], ("detail", "bucket", "name"), bucket)
    sqs = samples["sqs-business-message.json"]
    custom = samples["eventbridge-custom-event.json"]
    item = _set(samples["work-item.json"], ("workItem", "bucket"), bucket)
    notification = samples["sqs-s3-notification.json"]
    shapes = {"s3": s3, "sqs": sqs, "custom": custom, "item": item, "notification": notification}
    out: list[Hostile] = []

    # Not an object.
    for value in [*HOSTILE_STRINGS[:12], *HOSTILE_NUMBERS, None, True, False, "just text"]:
        out.append(Hostile("not-an-object", value, must_be_invalid=True))

    # Wrong types (and hostile values) in every field of each source's shape.
    for name, shape in shapes.items():
        for path in _paths(shape):
            for value in rng.sample(ALL_HOSTILE, 4):
                out.append(Hostile(f"wrong-type:{name}", _set(shape, path, value)))
            out.append(Hostile(f"missing-field:{name}", _drop(shape, path)))

    # Huge strings: in the key, in a message body, in a custom event's detail.
    for size in (1025, 2100, 140_000, 300_000):
        out.append(Hostile("huge", _set(s3, ("detail", "object", "key"), "k" * size)))
        body = json.dumps({"orderId": "o-1", "pad": "p" * size})
        out.append(Hostile("huge", _sqs_body(sqs[0], body)))
        out.append(Hostile("huge", _set(custom, ("detail", "pad"), "é" * size)))
        out.append(Hostile("huge", _set(item, ("workItem", "versionId"), "v" * size)))

    # Deep nesting.
    for depth in (10, 50, 100):
        out.append(Hostile("deep", _set(custom, ("detail",), _nested(depth))))
        out.append(Hostile("deep", _sqs_body(sqs[0], json.dumps(_nested(depth)))))
        out.append(Hostile("deep", _nested(depth), must_be_invalid=True))

    # Lone surrogates, NUL and control characters in every string of every shape.
    for name, shape in shapes.items():
        for path in _paths(shape):
            for text in (LONE_HIGH, f"x{LONE_LOW}", "\x00", "a\x01b", "\ufffe"):
                out.append(Hostile(f"characters:{name}", _set(shape, path, text)))

    # Numbers in the places that become keys or ledger numbers.
    for number in HOSTILE_NUMBERS:
        out.append(Hostile("numbers:size", _set(s3, ("detail", "object", "size"), number)))
        out.append(Hostile("numbers:custom-key", _set(custom, ("detail", "orderId"), number)))
        out.append(Hostile("numbers:sqs-key", _sqs_body(sqs[0], json.dumps({"orderId": number}))))
        out.append(Hostile("numbers:item-size", _set(item, ("workItem", "size"), number)))
    for text in ("1e400", "-1e400", "1e-400", "123456789012345678901234567890"):
        out.append(Hostile("numbers:sqs-text", _sqs_body(sqs[0], '{"orderId": ' + text + "}")))

    # Empty ids.
    out.append(Hostile("empty-id", _set(custom, ("id",), "")))
    out.append(Hostile("empty-id", _set(sqs, (0, "messageId"), "")))
    out.append(Hostile("empty-id", _set(item, ("workItem", "idempotencyKey"), "")))
    out.append(Hostile("empty-id", _sqs_body(sqs[0], json.dumps({"orderId": ""}))))
    out.append(Hostile("empty-id", _set(custom, ("detail", "orderId"), "")))

    # SQS pipe arrays of every size (the processor takes one message).
    for size in (0, 2, 3, 10, 11):
        out.append(Hostile("pipe-array", [copy.deepcopy(sqs[0]) for _ in range(size)], True))
    out.append(Hostile("pipe-array", [None], must_be_invalid=True))
    out.append(Hostile("pipe-array", ["text"], must_be_invalid=True))
    # JSONata flattens [[message]] to [message] (on AWS too): read as the message it holds.
    out.append(Hostile("pipe-array", [[sqs[0]]]))

    # Custom events and direct work items, made at random around their shapes.
    for _ in range(60):
        event = copy.deepcopy(custom)
        event["id"] = rng.choice([*HOSTILE_STRINGS, f"id-{rng.random()}"])
        event["detail"] = {"orderId": rng.choice([*ALL_HOSTILE, "o-1", "o-2"])}
        out.append(Hostile("custom-event", event))
    for _ in range(60):
        fields = {
            "bucket": rng.choice([bucket, bucket, "other-bucket", *HOSTILE_VALUES]),
            "key": rng.choice(["uploads/a.png", *HOSTILE_STRINGS]),
            rng.choice(["versionId", "sequencer", "idempotencyKey"]): rng.choice(
                ["v1", *HOSTILE_STRINGS, *HOSTILE_NUMBERS]
            ),
            "size": rng.choice([*HOSTILE_NUMBERS, "12"]),
            "source": rng.choice(["audit", "redrive", *HOSTILE_STRINGS]),
        }
        out.append(Hostile("direct-item", {"workItem": fields}))

    # Random JSON.
    for _ in range(120):
        out.append(Hostile("random-json", _random_json(rng)))

    # Mutations of every file in events/.
    for name, sample in samples.items():
        paths = list(_paths(sample))
        for _ in range(12):
            if not paths:
                break
            path = rng.choice(paths)
            mutated = (
                _drop(sample, path)
                if rng.random() < 0.3
                else _set(sample, path, rng.choice(ALL_HOSTILE))
            )
            # Mostly keep the stack's own bucket, so mutations get past that check.
            detail = mutated.get("detail") if isinstance(mutated, dict) else None
            if (
                isinstance(detail, dict)
                and isinstance(detail.get("bucket"), dict)
                and rng.random() < 0.7
            ):
                mutated = _set(mutated, ("detail", "bucket", "name"), bucket)
            out.append(Hostile(f"mutation:{name}", mutated))

    # Numbers past a double's range: 1e400 in the JSON text reaches the state machine as
    # Infinity (Python's float("inf") stands for it here), anywhere in the event.
    infinite = float("inf")
    out.append(Hostile("numbers:infinite", infinite, must_be_invalid=True))
    out.append(Hostile("numbers:infinite", _set(custom, ("detail", "orderId"), infinite), True))
    out.append(
        Hostile("numbers:infinite", _set(custom, ("detail", "deep"), [1, {"x": -infinite}]), True)
    )
    out.append(Hostile("numbers:infinite", _set(s3, ("detail", "object", "size"), infinite), True))
    out.append(Hostile("numbers:infinite", _set(item, ("workItem", "size"), -infinite), True))
    return out
