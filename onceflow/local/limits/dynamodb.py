"""DynamoDB's limits: 400 KB per item (AWS's arithmetic) and numbers it can store."""

from __future__ import annotations

import decimal
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from moto.core.responses import BaseResponse
from moto.core.utils import get_service_model
from moto.dynamodb import responses as dynamodb_responses
from moto.dynamodb.exceptions import (
    HashKeyTooLong,
    ItemSizeTooLarge,
    MockValidationException,
    RangeKeyTooLong,
)
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models.table import Table

from onceflow.local.limits.common import ORIGINAL, binary_size, limit, utf8
from onceflow.local.patches.registry import gone, lacks, takes

# Docs: "DynamoDB item sizes and formats"; "Supported data types".
DYNAMODB_ITEM_LIMIT: Final = 400 * 1024
DYNAMODB_NUMBER_DIGITS: Final = 38
_MAGNITUDE: Final = "Attempting to store a number with magnitude {} than supported range"
_NUMBER_OVERFLOW: Final = "Number overflow. " + _MAGNITUDE.format("larger")
_NUMBER_UNDERFLOW: Final = "Number underflow. " + _MAGNITUDE.format("smaller")
_NUMBER_DIGITS: Final = "Attempting to store more than 38 significant digits in a Number"
_TABLE: Final = "[a-zA-Z0-9_.-]+"  # a table's name; an ARN names it too


def _number(text: Any) -> tuple[decimal.Decimal, str] | None:
    """The number and its significant digits (leading and trailing zeroes trimmed)."""
    try:
        number = decimal.Decimal(text)
    except (decimal.InvalidOperation, ValueError, TypeError):
        return None
    digits = "".join(map(str, number.as_tuple().digits)).strip("0") if number.is_finite() else ""
    return number, digits


def _number_size(text: str) -> int:
    """AWS: "(1 byte per two significant digits) + (1 byte)" (the docs say approximate)."""
    parsed = _number(text)
    return len(str(text)) if parsed is None else (len(parsed[1]) + 1) // 2 + 1


def attribute_size(value: Any) -> int:
    """Bytes of one attribute value, as "DynamoDB item sizes and formats" counts them."""
    kind, data = (value.type, value.value) if hasattr(value, "type") else next(iter(value.items()))
    sizes: dict[str, Any] = {"S": utf8, "N": lambda v: _number_size(str(v)), "B": binary_size}
    if kind in sizes:
        return int(sizes[kind](data))
    if kind in ("SS", "NS", "BS"):
        return sum(sizes[kind[0]](v) for v in data)
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + utf8(k) + attribute_size(v) for k, v in data.items())
    return 1 if kind in ("BOOL", "NULL") else utf8(data)


def item_size(attributes: Mapping[str, Any]) -> int:
    return sum(utf8(name) + attribute_size(value) for name, value in attributes.items())


def _limited_setitem(self: Any, key: str, value: Any) -> None:
    """moto's item-size check with AWS's arithmetic (docs/local-engine.md, "AWS limits on
    the local engine": moto's stopped at 405,000 of its own count)."""
    if item_size({**self, key: value}) > DYNAMODB_ITEM_LIMIT:
        raise ItemSizeTooLarge
    dict.__setitem__(self, key, value)


def number_problem(text: str) -> str | None:
    """What DynamoDB says of a number it cannot store: more than 38 significant
    digits, or a magnitude outside 1E-130 .. 9.99...E+125 (zero is fine)."""
    parsed = _number(text)
    if parsed is None or not parsed[0].is_finite() or parsed[0].is_zero():
        return None  # not a number at all: moto answers that itself
    number, digits = parsed
    if len(digits) > DYNAMODB_NUMBER_DIGITS:
        return _NUMBER_DIGITS
    if number.adjusted() > 125:
        return _NUMBER_OVERFLOW
    return _NUMBER_UNDERFLOW if number.adjusted() < -130 else None


def _numbers_in(value: Any) -> Iterator[str]:
    """Every number of every AttributeValue in a request (N and NS members)."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("N"), str):
        yield value["N"]
    elif isinstance(value, dict) and len(value) == 1 and isinstance(value.get("NS"), list):
        yield from (n for n in value["NS"] if isinstance(n, str))
    elif isinstance(value, dict | list):
        for member in value.values() if isinstance(value, dict) else value:
            yield from _numbers_in(member)


def _member_problems(action: str, params: Mapping[str, Any]) -> Iterator[str]:
    """DynamoDB's words for a member the operation requires left null (or out) and a table
    name it cannot hold; moto met a KeyError or looked the table up."""
    operation = get_service_model("dynamodb").operation_model(action)
    for member in operation.input_shape.required_members:
        if params.get(member) is None:
            yield f"Value null at '{member[:1].lower()}{member[1:]}' failed to satisfy " \
                  "constraint: Member must not be null"  # fmt: skip
    table = params.get("TableName")
    if isinstance(table, str) and not table.startswith("arn:") and not re.fullmatch(_TABLE, table):
        yield f"Value '{table}' at 'tableName' failed to satisfy constraint: Member must " \
              f"satisfy regular expression pattern: {_TABLE}"  # fmt: skip


def _refusal(action: str, params: Mapping[str, Any]) -> str | None:
    if problems := list(_member_problems(action, params)):
        many = "s" if len(problems) > 1 else ""
        return f"{len(problems)} validation error{many} detected: " + "; ".join(problems)
    return next(filter(None, map(number_problem, _numbers_in(params))), None)


def _keys_read(action: str, params: Mapping[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(table name, key) of each key a read or a delete names (writes: moto checks them)."""
    if action in ("GetItem", "DeleteItem"):
        yield params.get("TableName"), params.get("Key")
    elif action == "BatchGetItem":
        for table, request in (params.get("RequestItems") or {}).items():
            yield from ((table, key) for key in (request or {}).get("Keys") or ())


def _key_problem(backend: Any, action: str, params: Mapping[str, Any]) -> str | None:
    """A key over 2,048 bytes (partition) or 1,024 (sort), refused as a write's is (AWS
    refuses it in reads and deletes too: ExtendDB/extenddb#194, captured with the AWS CLI;
    moto answered them as if the item were missing)."""
    for name, key in _keys_read(action, params):
        table = backend.tables.get(name) if isinstance(name, str) else None
        if table is not None and isinstance(key, dict):
            try:
                table._validate_key_sizes(key)
            except (HashKeyTooLong, RangeKeyTooLong) as refused:
                return str(refused.key_too_large_msg)
    return None


def _checked_dynamodb_call(self: Any) -> Any:
    """DynamoDB validates a request before anything else: its members, then every number
    of every AttributeValue (moto checked only the top level of PutItem, through a float),
    then the size of every key it reads. A refusal is answered as moto answers an
    action's, with a request id."""
    action, params = self._get_action(), getattr(self, "params", None) or {}
    problem = _refusal(action, params) or _key_problem(self.dynamodb_backend, action, params)
    if problem is None:
        return ORIGINAL[_checked_dynamodb_call](self)
    refused = MockValidationException(problem)
    headers = {**dict(refused.get_headers() or []), "status": refused.code}
    response = (refused.description, headers)
    status, headers, body = self._transform_response(self.response_headers, response)
    return (status, *self._enrich_response(headers, body))


PATCHES = (
    limit(
        "DynamoDB items, numbers and requests",
        "An item over 400 KB by AWS's formula, a number of more than 38 digits or out of "
        "range anywhere in a request, a required member left null, a table name outside "
        "[a-zA-Z0-9_.-]+ or a key over 2,048 (partition) or 1,024 bytes (sort) in a read "
        "or a delete is refused with DynamoDB's ValidationException in its words "
        "(DynamoDB item sizes and formats; Supported data types; LocalStack's recorded "
        "test_task_service_dynamodb test_invalid_param, test_put_item_invalid_table_name; "
        "ExtendDB/extenddb#194 for keys, captured with the AWS CLI).",
        "tests/workflow/test_limits.py",
        (dynamo_type.LimitedSizeDict, "__setitem__", _limited_setitem),
        (dynamodb_responses.DynamoHandler, "call_action", _checked_dynamodb_call),
        fits=lambda: [
            *takes(dynamodb_responses.DynamoHandler.call_action, "self"),
            # the request is read from moto's parsed parameters (moto 5.1 json.loads it there)
            *lacks(dynamodb_responses.DynamoHandler.call_action, '"params"'),
            *gone(BaseResponse, "_transform_response", "_enrich_response"),
            *gone(Table, "_validate_key_sizes"),
            *gone(HashKeyTooLong, "key_too_large_msg"),
            *gone(RangeKeyTooLong, "key_too_large_msg"),
        ],
    ),
)
