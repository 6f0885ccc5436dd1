"""The one model of a work item and of its ledger row: statuses, attribute names, records.

The state machines (statemachines/*.asl.json) are JSON and keep their own
literals, and onceflow's operator tools do not import the deployed code:
tests/unit/test_work_item.py holds both to the names here.

A row's life, by the ledger rules::

    Claim ──> PROCESSING ──MarkComplete, MarkSuperseded──> PROCESSED (final)
                │    ^
    MarkFailed, │    │ Reclaim: below MaxAttempts and not dead-lettered
    the audit's │    │ (or PROCESSING, its lock expired: Reclaim takes it over)
    release     v    │
              FAILED ──dead_lettered_at set──> closed: only redrive reopens it
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Required, TypedDict


class Status(StrEnum):
    """A ledger row's ``status``."""

    PROCESSING = "PROCESSING"  # claimed: lock_owner holds it until lock_expires_at
    PROCESSED = "PROCESSED"  # done (or superseded): the effect happened once
    FAILED = "FAILED"  # reclaimable below MaxAttempts, unless dead-lettered


# The statuses of open work: the ones the sparse OpenWork index holds (open_status).
OPEN_STATUSES = (Status.PROCESSING, Status.FAILED)


class Attribute(StrEnum):
    """The ledger's attribute names. Several are DynamoDB reserved words
    (``status``, ``result``, ``source``, ``size``...): expressions name those
    through ExpressionAttributeNames."""

    # -- the claim (Claim, Reclaim) and its fence -----------------------------------
    PK = "pk"  # the idempotency key: the table's partition key
    STATUS = "status"  # a Status
    OPEN_STATUS = "open_status"  # "<status>#<shard>" while the work is open: OpenWork's key
    LOCK_OWNER = "lock_owner"  # the execution ARN that holds the claim: the fencing token
    LOCK_EXPIRES_AT = "lock_expires_at"  # epoch seconds; OpenWork's sort key
    ATTEMPTS = "attempts"  # claims so far: 1 at Claim, +1 at every Reclaim
    CLAIMS = "claims"  # the lock owners that claimed the row, oldest first (bounded)
    CREATED_AT = "created_at"  # epoch milliseconds
    UPDATED_AT = "updated_at"  # epoch milliseconds
    EXPIRES_AT = "expires_at"  # epoch seconds: the table's TTL attribute
    # -- how the work ended ----------------------------------------------------------
    COMPLETED_AT = "completed_at"  # epoch ms: MarkComplete or MarkSuperseded
    RESULT = "result"  # the processor's result as JSON text (bounded)
    SUPERSEDED_AT = "superseded_at"  # epoch ms: the announced content was gone
    LAST_ERROR = "last_error"  # "<error name>: <message>", truncated
    DEAD_LETTERED_AT = "dead_lettered_at"  # epoch ms: its DLQ message exists; never reclaimed
    # -- copied from the work item at Claim (WORK_ITEM_COPIES) -----------------------
    SOURCE = "source"
    BUCKET = "bucket"
    OBJECT_KEY = "object_key"
    VERSION_ID = "version_id"
    SEQUENCER = "sequencer"
    ETAG = "etag"
    SIZE = "size"
    MESSAGE_ID = "message_id"
    EVENT_ID = "event_id"
    EVENT_TIME = "event_time"
    OBJECT_REF = "object_ref"  # s3://bucket/key of an unversioned upload: ObjectContent's key
    # What Claim keeps of a message or a custom event (no bucket, no key), as compact JSON
    # text: what the processor needs to start again, for the audit to resubmit without
    # DescribeExecution (EXPRESS executions have none). An SQS message: the pipe's array
    # of one record, with messageId, eventSource and body; an event: its id, source,
    # detail-type, time and detail.
    ORIGINAL_EVENT = "original_event"
    # -- written by the audit ---------------------------------------------------------
    RELEASED_BY = "released_by"  # the audit that released a stuck lock
    DEAD_LETTERED_BY = "dead_lettered_by"  # the audit that sent a row's DLQ message
    # -- written by onceflow redrive --------------------------------------------------
    REDRIVEN_AT = "redriven_at"
    REDRIVE_MESSAGE_ID = "redrive_message_id"
    REDRIVES = "redrives"
    CLAIMS_DROPPED = "claims_dropped"


# The attributes only the audit or the operator tools write; the state machines
# write every other one.
WRITTEN_BY_AUDIT = frozenset({Attribute.RELEASED_BY, Attribute.DEAD_LETTERED_BY})
WRITTEN_BY_REDRIVE = frozenset(
    {
        Attribute.REDRIVEN_AT,
        Attribute.REDRIVE_MESSAGE_ID,
        Attribute.REDRIVES,
        Attribute.CLAIMS_DROPPED,
    }
)
WRITTEN_BY_STATE_MACHINES = frozenset(Attribute) - WRITTEN_BY_AUDIT - WRITTEN_BY_REDRIVE


class WorkItem(TypedDict, total=False):
    """One unit of work (``workItem``), as the state machine's Claim builds it and the
    processor and the audit read it. The names are JSON's, as the ASL writes them."""

    source: Required[str]  # aws.s3, sqs, a custom event source, audit, redrive
    idempotencyKey: Required[str]  # the ledger row's pk
    bucket: str  # an S3 upload: bucket and key ...
    key: str
    versionId: str  # ... its version ("null" without versioning)
    sequencer: str
    etag: str
    size: int
    payload: Any  # a message or a custom event: what the processor records
    messageId: str
    eventId: str
    detailType: str  # a custom event's detail-type
    eventTime: str


# What Claim copies from the work item into the row: attribute -> work item field.
WORK_ITEM_COPIES: Mapping[Attribute, str] = {
    Attribute.SOURCE: "source",
    Attribute.BUCKET: "bucket",
    Attribute.OBJECT_KEY: "key",
    Attribute.MESSAGE_ID: "messageId",
    Attribute.EVENT_ID: "eventId",
    Attribute.VERSION_ID: "versionId",
    Attribute.SEQUENCER: "sequencer",
    Attribute.ETAG: "etag",
    Attribute.SIZE: "size",
    Attribute.EVENT_TIME: "eventTime",
}


@dataclass(frozen=True)
class LedgerRow:
    """The attributes of a ledger row the functions decide on, as plain Python.

    None stands for an absent attribute (the ledger never stores NULL); a
    missing ``attempts`` or ``expires_at`` counts as 0, as the rules read it.
    """

    pk: str
    status: str  # a Status; kept as read
    attempts: int = 0
    expires_at: int = 0
    lock_owner: str | None = None
    lock_expires_at: int | None = None
    updated_at: int | None = None
    dead_lettered_at: int | None = None
    superseded_at: int | None = None
    last_error: str | None = None
    source: str | None = None
    bucket: str | None = None
    object_key: str | None = None
    version_id: str | None = None
    sequencer: str | None = None
    etag: str | None = None
    size: int | None = None
    original_event: str | None = None
    open_status: str | None = None
    claims: tuple[str, ...] = ()

    @classmethod
    def of(cls, attributes: Mapping[str, Any]) -> LedgerRow:
        """The row of an item read from the ledger, as plain values (other attributes are
        left out)."""

        def number(name: Attribute) -> int | None:
            value = attributes.get(name)
            return None if value is None else int(value)

        def text(name: Attribute) -> str | None:
            value = attributes.get(name)
            return None if value is None else str(value)

        return cls(
            pk=str(attributes[Attribute.PK]),
            status=str(attributes[Attribute.STATUS]),
            attempts=number(Attribute.ATTEMPTS) or 0,
            expires_at=number(Attribute.EXPIRES_AT) or 0,
            lock_owner=text(Attribute.LOCK_OWNER),
            lock_expires_at=number(Attribute.LOCK_EXPIRES_AT),
            updated_at=number(Attribute.UPDATED_AT),
            dead_lettered_at=number(Attribute.DEAD_LETTERED_AT),
            superseded_at=number(Attribute.SUPERSEDED_AT),
            last_error=text(Attribute.LAST_ERROR),
            source=text(Attribute.SOURCE),
            bucket=text(Attribute.BUCKET),
            object_key=text(Attribute.OBJECT_KEY),
            version_id=text(Attribute.VERSION_ID),
            sequencer=text(Attribute.SEQUENCER),
            etag=text(Attribute.ETAG),
            size=number(Attribute.SIZE),
            original_event=text(Attribute.ORIGINAL_EVENT),
            open_status=text(Attribute.OPEN_STATUS),
            claims=tuple(str(c) for c in attributes.get(Attribute.CLAIMS) or ()),
        )

    @property
    def dead_lettered(self) -> bool:
        """Its DLQ message exists: neither a delivery nor the audit reclaims it."""
        return self.dead_lettered_at is not None
