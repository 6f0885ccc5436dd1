"""The functions' error classes; the state machines retry and catch them by name."""

from collections.abc import Mapping
from typing import Any


class ProcessingError(Exception):
    """Base class of the errors a processor reports to the state machine."""


class TransientError(ProcessingError):
    """A failure that may pass: throttling, a 5xx, a timeout. Retried with backoff."""


class PermanentError(ProcessingError):
    """The input can never be processed (not an image, corrupt, gone). Dead-lettered at once."""


class ObjectSuperseded(ProcessingError):
    """The object of an unversioned work item no longer holds the content its event announced.

    Without version ids an upload overwrites the key in place: when the key now
    holds other bytes (its ETag no longer matches) or is gone, the announced
    content can never be read again. Processing the replacement instead would
    process it twice and the announced content never, so the work item ends in
    the state machine's Superseded state; the replacement is its own upload,
    with its own event (or the audit's resubmission). Deliberately not a
    PermanentError: nothing failed, and nothing belongs in the DLQ.
    """


class ConfigurationError(Exception):
    """An environment variable the function needs is missing or malformed."""


_TRANSIENT_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "SlowDown",
}


def is_transient(response: Mapping[str, Any]) -> bool:
    """Whether a failed AWS call (a ClientError's response) may succeed if retried."""
    error = response.get("Error")
    code = str(error.get("Code", "")) if isinstance(error, dict) else ""
    metadata = response.get("ResponseMetadata")
    status = metadata.get("HTTPStatusCode", 0) if isinstance(metadata, dict) else 0
    return code in _TRANSIENT_CODES or (isinstance(status, int) and status >= 500)
