"""The functions' error classes; the state machines retry and catch them by name.

``TransientError`` is retried with backoff, ``PermanentError`` is not (the
processor's work item is dead-lettered at once), ``ObjectSuperseded`` ends the
work item in Superseded. How a failed AWS call becomes one of them:
service/dal/aws.py.
"""


class ProcessingError(Exception):
    """Base class of the errors a processor reports to the state machine."""


class TransientError(ProcessingError):
    """A failure that may pass: throttling, a 5xx, a timeout. Retried with backoff."""


class PermanentError(ProcessingError):
    """The input can never be processed (not an image, corrupt, gone). Dead-lettered at once.

    Also what an AWS call that the service refused for good becomes (a
    ValidationException, an AccessDenied the caller did not name as
    transient): retrying sends the same request and hears the same answer.
    """


def json_kind(value: object) -> str:
    """What a function was invoked with, in JSON's words: "a JSON array", "null" ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a JSON boolean"
    kinds = ((dict, "an object"), (list, "a JSON array"), (str, "a JSON string"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "a JSON number")


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
