"""What a work item or a listing says about one S3 upload: its version and its content."""

from __future__ import annotations

# The version id S3 gives an upload while versioning is off or suspended. Every
# such upload of a key shares it, so it names the key's current content, not
# one upload.
NULL_VERSION = "null"


def has_version(version_id: object) -> bool:
    """Whether a version id names one upload for good (not absent, not "null")."""
    return isinstance(version_id, str) and bool(version_id) and version_id != NULL_VERSION


def plain_etag(etag: str) -> str:
    """An ETag without its quotes.

    S3 quotes ETags in responses and listings (they are HTTP entity tags) but
    not in event notifications, so two forms of one ETag meet in the ledger.
    """
    return etag.strip().strip('"')


def object_ref(bucket: str, key: str) -> str:
    """What the ledger's ObjectContent index is keyed on: one key, whatever it holds."""
    return f"s3://{bucket}/{key}"
