"""DynamoDB's limits: 400 KB per item (AWS's arithmetic) and numbers it can store."""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from typing import Any, Final

from moto.dynamodb import responses as dynamodb_responses
from moto.dynamodb.exceptions import ItemSizeTooLarge, MockValidationException
from moto.dynamodb.models import dynamo_type as ddb_dynamo_type

from onceflow.local.limits.common import binary_size, utf8
from onceflow.local.patches.registry import Installer, Patch, gone, takes

# Docs: "DynamoDB item sizes and formats"; "Supported data types".
DYNAMODB_ITEM_LIMIT: Final = 400 * 1024
DYNAMODB_NUMBER_DIGITS: Final = 38
_ORIGINAL: dict[str, Any] = {}


def _install(installer: Installer) -> None:
    installer.replace(ddb_dynamo_type.LimitedSizeDict, "__setitem__", _limited_setitem)
    _ORIGINAL["dynamodb_call"] = installer.replace(
        dynamodb_responses.DynamoHandler, "call_action", _checked_dynamodb_call
    )


def _number_size(text: str) -> int:
    """AWS: "(1 byte per two significant digits) + (1 byte)", leading and trailing
    zeroes trimmed (the docs call it approximate)."""
    try:
        number = decimal.Decimal(text)
    except (decimal.InvalidOperation, ValueError, TypeError):
        return len(str(text))
    digits = "".join(map(str, number.as_tuple().digits)).strip("0") if number.is_finite() else ""
    return (len(digits) + 1) // 2 + 1


def attribute_size(value: Any) -> int:
    """Bytes of one attribute value, as "DynamoDB item sizes and formats" counts them."""
    kind, data = (value.type, value.value) if hasattr(value, "type") else next(iter(value.items()))
    if kind == "S":
        return utf8(data)
    if kind == "N":
        return _number_size(str(data))
    if kind == "B":
        return binary_size(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(utf8(v) for v in data)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in data)
    if kind == "BS":
        return sum(binary_size(v) for v in data)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + utf8(k) + attribute_size(v) for k, v in data.items())
    return utf8(data)


def item_size(attributes: Mapping[str, Any]) -> int:
    return sum(utf8(name) + attribute_size(value) for name, value in attributes.items())


def _limited_setitem(self: Any, key: str, value: Any) -> None:
    """moto's item-size check with AWS's arithmetic: at most 400 KB (409,600 bytes);
    numbers by significant digits, lists and maps with their overhead. moto's
    stopped at 405,000 of its own count and counted a replaced attribute twice."""
    others = sum(utf8(k) + attribute_size(v) for k, v in self.items() if k != key)
    if others + utf8(key) + attribute_size(value) > DYNAMODB_ITEM_LIMIT:
        raise ItemSizeTooLarge
    dict.__setitem__(self, key, value)


_NUMBER_OVERFLOW: Final = (
    "Number overflow. Attempting to store a number with magnitude larger than supported range"
)
_NUMBER_UNDERFLOW: Final = (
    "Number underflow. Attempting to store a number with magnitude smaller than supported range"
)
_NUMBER_DIGITS: Final = "Attempting to store more than 38 significant digits in a Number"


def number_problem(text: str) -> str | None:
    """What DynamoDB says of a number it cannot store: more than 38 significant
    digits, or a magnitude outside 1E-130 .. 9.99...E+125 (zero is fine)."""
    try:
        number = decimal.Decimal(text)
    except (decimal.InvalidOperation, ValueError, TypeError):
        return None  # not a number at all: moto answers that itself
    if not number.is_finite() or number.is_zero():
        return None
    digits = "".join(map(str, number.as_tuple().digits)).strip("0")
    if len(digits) > DYNAMODB_NUMBER_DIGITS:
        return _NUMBER_DIGITS
    if number.adjusted() > 125:
        return _NUMBER_OVERFLOW
    if number.adjusted() < -130:
        return _NUMBER_UNDERFLOW
    return None


def _numbers_in(value: Any) -> Any:
    """Every number of every AttributeValue in a request (N and NS members)."""
    if isinstance(value, dict):
        if len(value) == 1:
            kind, data = next(iter(value.items()))
            if kind == "N" and isinstance(data, str):
                yield data
                return
            if kind == "NS" and isinstance(data, list):
                yield from (n for n in data if isinstance(n, str))
                return
        for member in value.values():
            yield from _numbers_in(member)
    elif isinstance(value, list):
        for member in value:
            yield from _numbers_in(member)


def _checked_dynamodb_call(self: Any) -> Any:
    """DynamoDB validates every number of every AttributeValue in a request before
    anything else; moto checked only the top level of PutItem, through a float."""
    for number in _numbers_in(getattr(self, "params", None) or {}):
        problem = number_problem(number)
        if problem is not None:
            raise MockValidationException(problem)
    return _ORIGINAL["dynamodb_call"](self)


PATCHES = (
    Patch(
        name="DynamoDB items and numbers",
        kind="limit",
        why="An item over 400 KB by AWS's formula, or a number of more than 38 digits or "
        "out of range anywhere in a request, is refused with DynamoDB's ValidationException "
        "(DynamoDB item sizes and formats; Supported data types).",
        test="tests/workflow/test_limits.py",
        install=_install,
        fits=lambda: [
            *gone(ddb_dynamo_type.LimitedSizeDict, "__setitem__"),
            *takes(dynamodb_responses.DynamoHandler.call_action, "self"),
        ],
    ),
)
