"""The processor's error classes; the state machine retries and catches them by name."""


class ProcessingError(Exception):
    """Base class of the errors a processor reports to the state machine."""


class TransientError(ProcessingError):
    """A failure that may pass: throttling, a 5xx, a timeout. Retried with backoff."""


class PermanentError(ProcessingError):
    """The input can never be processed (not an image, corrupt, gone). Dead-lettered at once."""


class ConfigurationError(Exception):
    """An environment variable the function needs is missing or malformed."""
