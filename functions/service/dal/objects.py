"""S3 reads and write-once puts, with S3 errors mapped to Transient/Permanent."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from service.errors import PermanentError, TransientError

# The object (or its version) is gone or unreadable for good: retrying cannot help.
_PERMANENT_READ_CODES = {"NoSuchKey", "NoSuchVersion", "InvalidObjectState", "404"}
# Another writer created the key first: for a write-once output, that means done.
_ALREADY_EXISTS_CODES = {"PreconditionFailed", "412"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class ObjectStore:
    """The processor's view of S3."""

    def __init__(self, client: Any | None = None) -> None:
        self._s3 = client if client is not None else boto3.client("s3")

    def read(self, bucket: str, key: str, version_id: str | None) -> bytes:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if version_id and version_id != "null":
            kwargs["VersionId"] = version_id
        try:
            response = self._s3.get_object(**kwargs)
            return bytes(response["Body"].read())
        except ClientError as exc:
            if _code(exc) in _PERMANENT_READ_CODES:
                raise PermanentError(f"s3://{bucket}/{key} cannot be read: {_code(exc)}") from exc
            raise TransientError(f"reading s3://{bucket}/{key}: {_code(exc)}") from exc
        except BotoCoreError as exc:
            raise TransientError(f"reading s3://{bucket}/{key}: {exc}") from exc

    def write_once(
        self, bucket: str, key: str, body: bytes, content_type: str, metadata: dict[str, str]
    ) -> bool:
        """Create the object unless it exists (IfNoneMatch: "*"). True when this call created it."""
        try:
            self._s3.put_object(
                Bucket=bucket,
                Key=key,
                Body=body,
                ContentType=content_type,
                Metadata=metadata,
                IfNoneMatch="*",
            )
            return True
        except ClientError as exc:
            if _code(exc) in _ALREADY_EXISTS_CODES:
                return False
            # ConditionalRequestConflict (409), SlowDown, 5xx: a retry settles it.
            raise TransientError(f"writing s3://{bucket}/{key}: {_code(exc)}") from exc
        except BotoCoreError as exc:
            raise TransientError(f"writing s3://{bucket}/{key}: {exc}") from exc
