"""S3 reads and write-once puts, with S3 errors mapped to Transient/Permanent."""

from __future__ import annotations

from typing import Any

import boto3

from service.dal.aws import aws_call
from service.errors import ObjectSuperseded, PermanentError, TransientError
from service.logic.s3objects import has_version, plain_etag

# The object (or its version) is gone: retrying cannot help. S3 says so (404)
# only to a caller that may list the bucket; without s3:ListBucket it answers
# a missing key with 403 AccessDenied, so the template grants ListBucket on the
# ingest bucket to the processor.
_MISSING_CODES = frozenset({"NoSuchKey", "NoSuchVersion", "404"})
# Archived (S3 Glacier storage classes): unreadable until someone restores it. A version
# id S3 cannot parse (InvalidArgument), or one that names a delete marker (405
# MethodNotAllowed): no retry makes them readable either.
_UNREADABLE_CODES = frozenset({"InvalidObjectState", "InvalidArgument", "MethodNotAllowed", "405"})
# IfMatch failed: the key holds other bytes now. On a write (IfNoneMatch "*"):
# another writer created the key first, which for a write-once output means done.
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412"})
# 403 AccessDenied is none of these and stays transient, as does every other
# code S3 answers: with ListBucket granted it no longer stands for a missing key
# but for a real permission problem (a KMS key policy, a bucket policy, an SCP),
# which an operator can fix while the retries and redeliveries wait;
# dead-lettering at once would turn a fixable misconfiguration into work to
# redrive by hand.
_OTHERWISE = TransientError


class ObjectStore:
    """The processor's view of S3."""

    def __init__(self, client: Any | None = None) -> None:
        self._s3 = client if client is not None else boto3.client("s3")

    def read(self, bucket: str, key: str, version_id: str | None, etag: str | None = None) -> bytes:
        """The bytes of one upload.

        A version id pins the upload. Without one (versioning off or
        suspended: absent or "null") the key holds only its latest upload, so
        the read is conditional on the ETag the event announced: content that
        was replaced (412) or deleted since raises ObjectSuperseded rather
        than processing the replacement under this upload's key.
        """
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        versioned = has_version(version_id)
        # No etag (a direct work item may carry none): nothing to compare, so
        # the read is plain and takes whatever the key holds now.
        conditional = not versioned and bool(etag)
        if versioned:
            kwargs["VersionId"] = version_id
        elif conditional and etag:
            # If-Match takes an HTTP entity tag, quoted (RFC 7232), as S3 returns
            # ETags; events carry them unquoted.
            kwargs["IfMatch"] = f'"{plain_etag(etag)}"'
        where = f"s3://{bucket}/{key}"
        # A precondition failure is an answer only to a conditional read.
        expected = _MISSING_CODES | _UNREADABLE_CODES
        if conditional:
            expected |= _PRECONDITION_CODES
        with aws_call(f"reading {where}", expected, otherwise=_OTHERWISE) as call:
            response = self._s3.get_object(**kwargs)
            return bytes(response["Body"].read())
        code = call.refused
        if conditional and code in _PRECONDITION_CODES | _MISSING_CODES:
            raise ObjectSuperseded(
                f"{where} no longer holds the content with ETag {etag}: {code}"
            ) from call.refusal
        raise PermanentError(f"{where} cannot be read: {code}") from call.refusal

    def write_once(
        self, bucket: str, key: str, body: bytes, content_type: str, metadata: dict[str, str]
    ) -> bool:
        """Create the object unless it exists (IfNoneMatch: "*"). True when this call created it."""
        # Another writer created the key first (412): for a write-once output, done.
        # Any other refusal (ConditionalRequestConflict 409, SlowDown, 5xx): a retry settles it.
        with aws_call(
            f"writing s3://{bucket}/{key}", _PRECONDITION_CODES, otherwise=_OTHERWISE
        ) as call:
            self._s3.put_object(
                Bucket=bucket,
                Key=key,
                Body=body,
                ContentType=content_type,
                Metadata=metadata,
                IfNoneMatch="*",
            )
        return call.refused is None
