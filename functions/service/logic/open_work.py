"""Open work in the ledger: the sharded key of the sparse OpenWork index.

A row that still needs work carries ``open_status`` = ``<STATUS>#<shard>``, the
shard being the first hex digit of the MD5 of its key (the state machine writes
it with JSONata's ``$hash(key, 'MD5')``). Sixteen index partitions share the
claims: every claim writes the row into the index and its completion takes it
out, 2 index writes a message, so one two-valued key (``PROCESSING``) would cap
the ledger at one partition's 1,000 WRU/s, about 500 messages/s; sixteen take
8,000. Rows written before the shards carry the bare status: still read.
"""

from __future__ import annotations

import hashlib

SHARDS = "0123456789abcdef"
# Every value of open_status one status can have: the unsharded form first.
LEGACY = ""


def shard(idempotency_key: str) -> str:
    """The shard of a key: what the state machine computes with $hash(key, 'MD5')."""
    return hashlib.md5(idempotency_key.encode("utf-8", "surrogatepass")).hexdigest()[0]  # noqa: S324


def open_status(status: str, idempotency_key: str) -> str:
    """The open_status value of a row in this status."""
    return f"{status}#{shard(idempotency_key)}"


def open_status_values(status: str) -> list[str]:
    """Every index key the rows of one status may sit under, in query order."""
    return [status, *(f"{status}#{s}" for s in SHARDS)]
