"""The audit's view of the ledger table: batched reads, the open-work index, fenced releases."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import boto3
from botocore.exceptions import ClientError

from service.errors import TransientError, is_transient
from service.logic.open_work import open_status, open_status_values
from service.logic.s3objects import plain_etag

_BATCH_GET_LIMIT = 100  # keys per BatchGetItem request
_UNPROCESSED_RETRIES = 8
# What the audit reads of a row; many ledger attribute names are DynamoDB reserved words.
_READ = (
    "pk", "status", "attempts", "dead_lettered_at", "expires_at", "lock_owner",
    "lock_expires_at", "source", "bucket", "object_key", "version_id", "sequencer", "etag", "size",
)  # fmt: skip
_READ_NAMES = {f"#a{i}": name for i, name in enumerate(_READ)}
_READ_ATTRIBUTES = ", ".join(_READ_NAMES)


def plain(item: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB item as plain Python: strings and ints (the ledger stores no floats)."""
    row: dict[str, Any] = {}
    for name, typed in item.items():
        ((kind, value),) = typed.items()
        if kind == "N":
            row[name] = int(value) if value.lstrip("-").isdigit() else float(value)
        elif kind == "L":
            row[name] = [next(iter(v.values())) for v in value]
        else:
            row[name] = value
    return row


class Ledger:
    def __init__(
        self,
        table: str,
        index: str,
        client: Any | None = None,
        content_index: str = "ObjectContent",
    ) -> None:
        self.table = table
        self.index = index
        self.content_index = content_index
        self._dynamodb = client if client is not None else boto3.client("dynamodb")

    def batch_get(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The rows of these keys (absent keys have none), 100 keys per request."""
        unique = list(dict.fromkeys(keys))
        rows: dict[str, dict[str, Any]] = {}
        for start in range(0, len(unique), _BATCH_GET_LIMIT):
            request: dict[str, Any] = {
                self.table: {
                    "Keys": [{"pk": {"S": k}} for k in unique[start : start + _BATCH_GET_LIMIT]],
                    "ProjectionExpression": _READ_ATTRIBUTES,
                    "ExpressionAttributeNames": _READ_NAMES,
                }
            }
            for attempt in range(_UNPROCESSED_RETRIES + 1):
                try:
                    response = self._dynamodb.batch_get_item(RequestItems=request)
                except ClientError as exc:
                    if not is_transient(exc.response):
                        raise
                    raise TransientError(f"reading the ledger: {exc}") from exc
                for item in response.get("Responses", {}).get(self.table, []):
                    row = plain(item)
                    rows[row["pk"]] = row
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
                if attempt == _UNPROCESSED_RETRIES:
                    raise TransientError("the ledger kept keys unprocessed (throttled)")
                time.sleep(min(0.05 * 2**attempt, 2.0))
        return rows

    def open_rows(
        self, status: str, lock_cutoff: int | None, cursor: dict[str, Any] | None, limit: int = 200
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """A page of open work (the sparse OpenWork index) in one status, shard by shard,
        oldest lock first within a shard. Returns the rows and the cursor of the next page
        (None when every shard is read).

        ``lock_cutoff``: only rows whose lock expired before it (stuck PROCESSING rows).
        """
        keys = open_status_values(status)
        position = int((cursor or {}).get("shard", 0))
        start = (cursor or {}).get("key")
        rows: list[dict[str, Any]] = []
        while position < len(keys) and len(rows) < limit:
            page, start = self._open_page(keys[position], lock_cutoff, start, limit - len(rows))
            rows += page
            if start is None:
                position += 1
        if position >= len(keys):
            return rows, None
        return rows, {"shard": position, "key": start}

    def _open_page(
        self, key: str, lock_cutoff: int | None, start: dict[str, Any] | None, limit: int
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        condition = "open_status = :status"
        values: dict[str, Any] = {":status": {"S": key}}
        if lock_cutoff is not None:
            condition += " AND lock_expires_at < :cutoff"
            values[":cutoff"] = {"N": str(lock_cutoff)}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.index,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "Limit": limit,
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        try:
            response = self._dynamodb.query(**kwargs)
        except ClientError as exc:
            if not is_transient(exc.response):
                raise
            raise TransientError(f"querying the open-work index: {exc}") from exc
        return [plain(i) for i in response.get("Items", [])], response.get("LastEvaluatedKey")

    def content_rows(self, object_ref: str, etag: str) -> list[dict[str, Any]]:
        """The rows of one key's uploads with this content (the sparse ObjectContent index).

        Events carry ETags unquoted and listings quoted; a row holds either form.
        The index is eventually consistent, which the audit can afford: it judges
        only objects older than its recent cutoff.
        """
        bare = plain_etag(etag)
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": self.content_index,
            "KeyConditionExpression": "object_ref = :ref",
            "FilterExpression": "#etag IN (:bare, :quoted)",
            "ExpressionAttributeNames": {"#etag": "etag"},
            "ExpressionAttributeValues": {
                ":ref": {"S": object_ref},
                ":bare": {"S": bare},
                ":quoted": {"S": f'"{bare}"'},
            },
        }
        rows: list[dict[str, Any]] = []
        while True:
            try:
                response = self._dynamodb.query(**kwargs)
            except ClientError as exc:
                if not is_transient(exc.response):
                    raise
                raise TransientError(f"querying the object-content index: {exc}") from exc
            rows += [plain(i) for i in response.get("Items", [])]
            start = response.get("LastEvaluatedKey")
            if not start:
                return rows
            kwargs["ExclusiveStartKey"] = start

    def release_stuck(
        self, row: dict[str, Any], now_ms: int, released_by: str, dead_letter: bool
    ) -> bool:
        """Fenced: FAILED with last_error LockExpired, only if the lock is still the one seen.

        The index is eventually consistent and another delivery may have
        reclaimed the row since (a new owner, a new expiry): then nothing is
        written and False is returned. ``dead_letter`` also sets
        dead_lettered_at and takes the row out of the open-work index.
        """
        message = (
            f"LockExpired: the lock of {row.get('lock_owner')} expired at "
            f"{row.get('lock_expires_at')} with the work unfinished; released by {released_by}"
        )
        if dead_letter:
            update = (
                "SET #status = :failed, last_error = :error, updated_at = :now_ms, "
                "dead_lettered_at = :now_ms, released_by = :by REMOVE open_status"
            )
        else:
            update = (
                "SET #status = :failed, open_status = :open, last_error = :error, "
                "updated_at = :now_ms, released_by = :by"
            )
        try:
            self._dynamodb.update_item(
                TableName=self.table,
                Key={"pk": {"S": row["pk"]}},
                UpdateExpression=update,
                ConditionExpression=(
                    "#status = :processing AND lock_owner = :owner "
                    "AND lock_expires_at = :lock_expires_at"
                ),
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":failed": {"S": "FAILED"},
                    ":processing": {"S": "PROCESSING"},
                    ":owner": {"S": str(row["lock_owner"])},
                    ":lock_expires_at": {"N": str(row["lock_expires_at"])},
                    ":error": {"S": message[:1000]},
                    ":now_ms": {"N": str(now_ms)},
                    ":by": {"S": released_by},
                    **({} if dead_letter else {":open": {"S": open_status("FAILED", row["pk"])}}),
                },
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            if not is_transient(exc.response):
                raise
            raise TransientError(f"releasing {row['pk']}: {exc}") from exc
        return True

    def current(self, pk: str) -> dict[str, Any] | None:
        """One row as it is now (a strongly consistent read), or None.

        The open-work index lags the table: what it shows may have changed.
        """
        request = {self.table: {"Keys": [{"pk": {"S": pk}}], "ConsistentRead": True}}
        try:
            response = self._dynamodb.batch_get_item(RequestItems=request)
        except ClientError as exc:
            if not is_transient(exc.response):
                raise
            raise TransientError(f"reading {pk}: {exc}") from exc
        if response.get("UnprocessedKeys"):
            raise TransientError(f"reading {pk}: the ledger left it unprocessed (throttled)")
        items = response.get("Responses", {}).get(self.table, [])
        return plain(items[0]) if items else None

    def dead_letter_failed(self, row: dict[str, Any], now_ms: int, dead_lettered_by: str) -> bool:
        """Fenced: set dead_lettered_at on a FAILED row whose DLQ message was just sent.

        Holds only if the row is still as read: FAILED, not dead-lettered, the
        same ``updated_at`` and ``lock_owner`` (a redrive or a reclaim since
        changes them). Otherwise nothing is written and False is returned.
        """
        values: dict[str, Any] = {
            ":failed": {"S": "FAILED"},
            ":now_ms": {"N": str(now_ms)},
            ":by": {"S": dead_lettered_by},
        }
        fence = ["#status = :failed", "attribute_not_exists(dead_lettered_at)"]
        for name in ("updated_at", "lock_owner"):
            if name in row:
                values[f":seen_{name}"] = (
                    {"N": str(row[name])} if name == "updated_at" else {"S": str(row[name])}
                )
                fence.append(f"{name} = :seen_{name}")
            else:
                fence.append(f"attribute_not_exists({name})")
        try:
            self._dynamodb.update_item(
                TableName=self.table,
                Key={"pk": {"S": row["pk"]}},
                UpdateExpression=(
                    "SET dead_lettered_at = :now_ms, updated_at = :now_ms, "
                    "dead_lettered_by = :by REMOVE open_status"
                ),
                ConditionExpression=" AND ".join(fence),
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            if not is_transient(exc.response):
                raise
            raise TransientError(f"dead-lettering {row['pk']}: {exc}") from exc
        return True
