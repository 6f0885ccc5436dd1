"""The audit's view of the ledger table: batched reads, the open-work index, fenced writes."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import boto3

from service.dal.aws import CONDITIONAL_CHECK_FAILED, aws_call
from service.errors import TransientError
from service.logic.open_work import open_status, open_status_values
from service.logic.s3objects import plain_etag
from service.model import Attribute, LedgerRow, Status

_BATCH_GET_LIMIT = 100  # keys per BatchGetItem request
_UNPROCESSED_RETRIES = 8
# What the audit reads of a row; many ledger attribute names are DynamoDB reserved words.
_READ = (
    Attribute.PK, Attribute.STATUS, Attribute.ATTEMPTS, Attribute.DEAD_LETTERED_AT,
    Attribute.EXPIRES_AT, Attribute.LOCK_OWNER, Attribute.LOCK_EXPIRES_AT, Attribute.SOURCE,
    Attribute.BUCKET, Attribute.OBJECT_KEY, Attribute.VERSION_ID, Attribute.SEQUENCER,
    Attribute.ETAG, Attribute.SIZE, Attribute.OPEN_STATUS, Attribute.UPDATED_AT,
)  # fmt: skip
_READ_NAMES = {f"#a{i}": str(name) for i, name in enumerate(_READ)}
_READ_ATTRIBUTES = ", ".join(_READ_NAMES)
# A failed batch's recount also reads who claimed each row (its resubmission's name).
_RECOUNT = (*_READ, Attribute.CLAIMS)
_RECOUNT_NAMES = {f"#a{i}": str(name) for i, name in enumerate(_RECOUNT)}
# A fenced write that finds the row changed is refused: an answer, not a failure.
_FENCED = frozenset({CONDITIONAL_CHECK_FAILED})
_STATUSES = frozenset(s.value for s in Status)
_NUMBERS = (
    Attribute.ATTEMPTS, Attribute.EXPIRES_AT, Attribute.LOCK_EXPIRES_AT, Attribute.UPDATED_AT,
    Attribute.DEAD_LETTERED_AT, Attribute.SIZE,
)  # fmt: skip
_REASON_CHARACTERS = 300


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


@dataclass(frozen=True)
class UnreadableRow:
    """A ledger row the audit cannot decide on (an attribute of the wrong type, no status
    or an unknown one, a claimed row without its owner): its key, why, and where it
    sits in the open-work index (a sweep goes on after it). Such a row is never
    resubmitted nor written: the audit cannot know what it stands for; it is counted
    (``unreadable_rows``, ``resubmit_errors``: alarmed) and logged, every run, until
    someone mends or deletes it."""

    pk: str
    reason: str
    open_status: str | None = None
    lock_expires_at: int | None = None


def read_row(item: dict[str, Any]) -> LedgerRow | UnreadableRow:
    """A row as read from the table or an index, or why the audit cannot read it."""
    raw = plain(item)
    # A number the rules compare or add to, stored as another type: the state machines'
    # conditions never hold for it (a string is not below a number) and Reclaim's
    # ADD attempts fails on it, so a resubmission could only fail, every audit.
    wrong = [str(n) for n in _NUMBERS if n in item and "N" not in item[n]]
    try:
        if wrong:
            raise TypeError(f"{', '.join(wrong)} not stored as a number")
        row = LedgerRow.of(raw)
    except (KeyError, ValueError, TypeError, ArithmeticError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    else:
        if row.status not in _STATUSES:
            reason = f"its status {row.status[:40]!r} is none of {sorted(_STATUSES)}"
        elif row.status == Status.PROCESSING and row.lock_owner is None:
            reason = "it is PROCESSING without a lock_owner: no fence to hold to"
        else:
            return row
    where, until = raw.get(Attribute.OPEN_STATUS), raw.get(Attribute.LOCK_EXPIRES_AT)
    return UnreadableRow(
        pk=str(raw.get(Attribute.PK, "")),
        reason=reason[:_REASON_CHARACTERS],
        open_status=where if isinstance(where, str) else None,
        lock_expires_at=until if isinstance(until, int) else None,
    )


def _as_seen(fence: list[str], values: dict[str, Any], name: str, seen: str | int | None) -> None:
    """Fence a write on an attribute as it was read: equal to it, or absent if it was."""
    if seen is None:
        fence.append(f"attribute_not_exists({name})")
    else:
        values[f":seen_{name}"] = {"N" if isinstance(seen, int) else "S": str(seen)}
        fence.append(f"{name} = :seen_{name}")


def _key(pk: str) -> dict[str, Any]:
    return {Attribute.PK.value: {"S": pk}}


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

    def batch_get(
        self, keys: Iterable[str], with_claims: bool = False
    ) -> dict[str, LedgerRow | UnreadableRow]:
        """The rows of these keys (absent keys have none), 100 keys per request.

        ``with_claims``: read the rows' claims too (the lock owners that claimed them).
        """
        unique = list(dict.fromkeys(keys))
        rows: dict[str, LedgerRow | UnreadableRow] = {}
        names = _RECOUNT_NAMES if with_claims else _READ_NAMES
        for start in range(0, len(unique), _BATCH_GET_LIMIT):
            request: dict[str, Any] = {
                self.table: {
                    "Keys": [_key(k) for k in unique[start : start + _BATCH_GET_LIMIT]],
                    "ProjectionExpression": ", ".join(names),
                    "ExpressionAttributeNames": names,
                }
            }
            for attempt in range(_UNPROCESSED_RETRIES + 1):
                with aws_call("reading the ledger"):
                    response = self._dynamodb.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(self.table, []):
                    row = read_row(item)
                    rows[row.pk] = row
                request = response.get("UnprocessedKeys") or {}
                if not request:
                    break
                if attempt == _UNPROCESSED_RETRIES:
                    raise TransientError("the ledger kept keys unprocessed (throttled)")
                time.sleep(min(0.05 * 2**attempt, 2.0))
        return rows

    def open_rows(
        self, status: str, lock_cutoff: int | None, cursor: dict[str, Any] | None, limit: int = 200
    ) -> tuple[list[LedgerRow | UnreadableRow], dict[str, Any] | None]:
        """A page of open work (the sparse OpenWork index) in one status, shard by shard,
        oldest lock first within a shard. Returns the rows and the cursor of the next page
        (None when every shard is read).

        ``lock_cutoff``: only rows whose lock expired before it (stuck PROCESSING rows).
        """
        keys = open_status_values(str(status))
        position = int((cursor or {}).get("shard", 0))
        start = (cursor or {}).get("key")
        rows: list[LedgerRow | UnreadableRow] = []
        while position < len(keys) and len(rows) < limit:
            page, start = self._open_page(keys[position], lock_cutoff, start, limit - len(rows))
            rows += page
            if start is None:
                position += 1
        if position >= len(keys):
            return rows, None
        return rows, {"shard": position, "key": start}

    @staticmethod
    def resume_after(status: str, row: LedgerRow | UnreadableRow) -> dict[str, Any]:
        """The cursor of open_rows that goes on right after ``row`` (a row it returned):
        a sweep that stops inside a page resumes there, not at the next page."""
        keys = open_status_values(str(status))
        if row.open_status not in keys or row.lock_expires_at is None:
            raise ValueError(f"{row.pk} is not a row of the open-work index in {status}")
        start = {
            Attribute.OPEN_STATUS.value: {"S": row.open_status},
            Attribute.LOCK_EXPIRES_AT.value: {"N": str(row.lock_expires_at)},
            Attribute.PK.value: {"S": row.pk},
        }
        return {"shard": keys.index(row.open_status), "key": start}

    def _open_page(
        self, key: str, lock_cutoff: int | None, start: dict[str, Any] | None, limit: int
    ) -> tuple[list[LedgerRow | UnreadableRow], dict[str, Any] | None]:
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
        with aws_call("querying the open-work index"):
            response = self._dynamodb.query(**kwargs)
        rows = [read_row(i) for i in response.get("Items", [])]
        return rows, response.get("LastEvaluatedKey")

    def content_rows(self, object_ref: str, etag: str) -> list[LedgerRow | UnreadableRow]:
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
            "ExpressionAttributeNames": {"#etag": Attribute.ETAG.value},
            "ExpressionAttributeValues": {
                ":ref": {"S": object_ref},
                ":bare": {"S": bare},
                ":quoted": {"S": f'"{bare}"'},
            },
        }
        rows: list[LedgerRow | UnreadableRow] = []
        while True:
            with aws_call("querying the object-content index"):
                response = self._dynamodb.query(**kwargs)
            rows += [read_row(i) for i in response.get("Items", [])]
            start = response.get("LastEvaluatedKey")
            if not start:
                return rows
            kwargs["ExclusiveStartKey"] = start

    def release_stuck(self, row: LedgerRow, now_ms: int, released_by: str) -> bool:
        """Fenced: FAILED with last_error LockExpired, only if the lock is still the one seen.

        The index is eventually consistent and another delivery may have
        reclaimed the row since (a new owner, a new expiry): then nothing is
        written and False is returned. The row stays in the open-work index,
        as FAILED work to resubmit.
        """
        if row.lock_owner is None or row.lock_expires_at is None:
            # Every row in the OpenWork index has both: a claim writes them.
            raise ValueError(f"{row.pk} has no lock to release")
        message = (
            f"LockExpired: the lock of {row.lock_owner} expired at "
            f"{row.lock_expires_at} with the work unfinished; released by {released_by}"
        )
        with aws_call(f"releasing {row.pk}", expected=_FENCED) as call:
            self._dynamodb.update_item(
                TableName=self.table,
                Key=_key(row.pk),
                UpdateExpression=(
                    "SET #status = :failed, open_status = :open, last_error = :error, "
                    "updated_at = :now_ms, released_by = :by"
                ),
                # The lock as the index showed it: a reclaim since changed owner or expiry.
                ConditionExpression=(
                    "#status = :processing AND lock_owner = :owner "
                    "AND lock_expires_at = :lock_expires_at"
                ),
                ExpressionAttributeNames={"#status": Attribute.STATUS.value},
                ExpressionAttributeValues={
                    ":failed": {"S": Status.FAILED.value},
                    ":processing": {"S": Status.PROCESSING.value},
                    ":owner": {"S": row.lock_owner},
                    ":lock_expires_at": {"N": str(row.lock_expires_at)},
                    ":error": {"S": message[:1000]},
                    ":now_ms": {"N": str(now_ms)},
                    ":by": {"S": released_by},
                    ":open": {"S": open_status(Status.FAILED, row.pk)},
                },
            )
        return call.refused is None

    def current(self, pk: str) -> LedgerRow | UnreadableRow | None:
        """One row as it is now (a strongly consistent read), or None.

        The open-work index lags the table: what it shows may have changed.
        """
        request = {self.table: {"Keys": [_key(pk)], "ConsistentRead": True}}
        with aws_call(f"reading {pk}"):
            response = self._dynamodb.batch_get_item(RequestItems=request)
        if response.get("UnprocessedKeys"):
            raise TransientError(f"reading {pk}: the ledger left it unprocessed (throttled)")
        items = response.get("Responses", {}).get(self.table, [])
        return read_row(items[0]) if items else None

    def reindex(self, row: LedgerRow) -> bool:
        """Put a row of open work that is not in the open-work index back in it, fenced on
        the row as read; False when it changed since (nothing written).

        Open work (PROCESSING, or FAILED and not dead-lettered) without ``open_status``
        (batch-mode rows before P11, an operator's edit) or without ``lock_expires_at``
        (the index's sort key: a row without it is not in the index) is seen by no sweep,
        and a PROCESSING one without a lock expiry by no Reclaim either: stuck for good.
        Indexed, the sweep meets it like any other: a lock that never had an expiry
        counts as expired at 0 (no live claim lacks one: Claim writes both).
        """
        if row.status not in (Status.PROCESSING, Status.FAILED):
            raise ValueError(f"{row.pk} is {row.status}: not open work")
        values: dict[str, Any] = {
            ":status": {"S": str(row.status)},
            ":open": {"S": open_status(row.status, row.pk)},
            ":never": {"N": "0"},
        }
        fence = ["#status = :status", "attribute_not_exists(dead_lettered_at)"]
        _as_seen(fence, values, "open_status", row.open_status)
        _as_seen(fence, values, "lock_owner", row.lock_owner)
        _as_seen(fence, values, "lock_expires_at", row.lock_expires_at)
        with aws_call(f"putting {row.pk} back in the open-work index", expected=_FENCED) as call:
            self._dynamodb.update_item(
                TableName=self.table,
                Key=_key(row.pk),
                UpdateExpression=(
                    "SET open_status = :open, "
                    "lock_expires_at = if_not_exists(lock_expires_at, :never)"
                ),
                ConditionExpression=" AND ".join(fence),
                ExpressionAttributeNames={"#status": Attribute.STATUS.value},
                ExpressionAttributeValues=values,
            )
        return call.refused is None

    def take(self, row: LedgerRow, now_ms: int, owner: str, lock_expires_at: int) -> bool:
        """Fenced on the row as read: take its lock before sending its DLQ message, as the
        batch processor's TakeOverAtMaxAttempts does. Returns False (nothing written) when
        the row changed since it was read.

        Whoever sends a row's DLQ message holds its lock first, so two senders
        cannot both send: the audit's sweep and a delivery of the same work race
        for one conditional write, and the loser sends nothing.

        - A stuck row (PROCESSING): only under the lock seen (owner and expiry);
          a reclaim or a takeover since changed them.
        - A FAILED row: only FAILED, not dead-lettered, with the ``updated_at``
          and ``lock_owner`` seen (a reclaim, a redrive or a takeover change them).

        The row becomes PROCESSING under ``owner`` until ``lock_expires_at``,
        and stays in the open-work index (its PROCESSING shard): a delivery's
        Reclaim or takeover is refused while the lock lives, and should the
        owner die before mark_dead_lettered, the sweep finds the row stuck once
        the lock has expired.
        """
        values: dict[str, Any] = {
            ":processing": {"S": Status.PROCESSING.value},
            ":open": {"S": open_status(Status.PROCESSING, row.pk)},
            ":me": {"S": owner},
            ":lock_expires_at": {"N": str(lock_expires_at)},
            ":now_ms": {"N": str(now_ms)},
        }
        if row.status == Status.PROCESSING:
            if row.lock_owner is None or row.lock_expires_at is None:
                raise ValueError(f"{row.pk} has no lock to take over")
            values[":seen_lock_owner"] = {"S": row.lock_owner}
            values[":seen_lock_expires_at"] = {"N": str(row.lock_expires_at)}
            fence = [
                "#status = :processing",
                "lock_owner = :seen_lock_owner",
                "lock_expires_at = :seen_lock_expires_at",
            ]
        elif row.status == Status.FAILED:
            values[":failed"] = {"S": Status.FAILED.value}
            fence = ["#status = :failed"]
            _as_seen(fence, values, "updated_at", row.updated_at)
            _as_seen(fence, values, "lock_owner", row.lock_owner)
        else:
            raise ValueError(f"{row.pk} is {row.status}: not open work to take")
        fence.append("attribute_not_exists(dead_lettered_at)")
        with aws_call(f"taking {row.pk}", expected=_FENCED) as call:
            self._dynamodb.update_item(
                TableName=self.table,
                Key=_key(row.pk),
                UpdateExpression=(
                    "SET #status = :processing, open_status = :open, lock_owner = :me, "
                    "lock_expires_at = :lock_expires_at, updated_at = :now_ms"
                ),
                ConditionExpression=" AND ".join(fence),
                ExpressionAttributeNames={"#status": Attribute.STATUS.value},
                ExpressionAttributeValues=values,
            )
        return call.refused is None

    def give_back(self, row: LedgerRow, owner: str, now_ms: int) -> bool:
        """Undo ``take``: the row as it was read (its status, open-work entry and lock), fenced
        on the caller's own lock, once its DLQ message could not be sent. Returns False
        (nothing written) when the lock is no longer the caller's.

        The row goes back to its place in the open-work index, behind a sweep that is
        past it, and is what it was for whoever comes next: a delivery's takeover, or
        the next audit, which sends the DLQ message then (as the processor's
        ReleaseUndelivered leaves work it could not dead-letter).
        """
        if row.status not in (Status.PROCESSING, Status.FAILED):
            raise ValueError(f"{row.pk} is {row.status}: never taken")
        values: dict[str, Any] = {
            ":status": {"S": str(row.status)},
            # Its entry as read; a row read without one gets its shard's (it was open work).
            ":open": {"S": row.open_status or open_status(row.status, row.pk)},
            ":processing": {"S": Status.PROCESSING.value},
            ":me": {"S": owner},
            ":now_ms": {"N": str(now_ms)},
        }
        sets = ["#status = :status", "open_status = :open", "updated_at = :now_ms"]
        removes: list[str] = []
        if row.lock_owner is None:
            removes.append("lock_owner")
        else:
            values[":lock_owner"] = {"S": row.lock_owner}
            sets.append("lock_owner = :lock_owner")
        if row.lock_expires_at is None:
            removes.append("lock_expires_at")
        else:
            values[":lock_expires_at"] = {"N": str(row.lock_expires_at)}
            sets.append("lock_expires_at = :lock_expires_at")
        update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        with aws_call(f"giving {row.pk} back", expected=_FENCED) as call:
            self._dynamodb.update_item(
                TableName=self.table,
                Key=_key(row.pk),
                UpdateExpression=update,
                ConditionExpression="lock_owner = :me AND #status = :processing",
                ExpressionAttributeNames={"#status": Attribute.STATUS.value},
                ExpressionAttributeValues=values,
            )
        return call.refused is None

    def mark_dead_lettered(self, pk: str, owner: str, now_ms: int, last_error: str) -> bool:
        """Fenced on the caller's own lock: FAILED and dead-lettered, once its DLQ message
        was sent (``last_error``: the message's ERROR_MESSAGE). The row leaves the
        open-work index, never to be reclaimed. Returns False (nothing written) when
        the lock is no longer the caller's: it expired before this write and a
        delivery took the row over."""
        with aws_call(f"marking {pk} dead-lettered", expected=_FENCED) as call:
            self._dynamodb.update_item(
                TableName=self.table,
                Key=_key(pk),
                UpdateExpression=(
                    "SET #status = :failed, last_error = :error, updated_at = :now_ms, "
                    "dead_lettered_at = :now_ms, dead_lettered_by = :me REMOVE open_status"
                ),
                ConditionExpression="lock_owner = :me AND #status = :processing",
                ExpressionAttributeNames={"#status": Attribute.STATUS.value},
                ExpressionAttributeValues={
                    ":failed": {"S": Status.FAILED.value},
                    ":processing": {"S": Status.PROCESSING.value},
                    ":me": {"S": owner},
                    ":error": {"S": last_error[:1000]},
                    ":now_ms": {"N": str(now_ms)},
                },
            )
        return call.refused is None
