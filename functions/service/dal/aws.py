"""The one place a failed AWS call becomes the functions' TransientError or PermanentError."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from service.errors import PermanentError, TransientError

# Error codes that name throttling or a passing server fault, across the services
# the functions call: the codes the SDK's standard retry mode retries
# (https://docs.aws.amazon.com/boto3/latest/guide/retries.html) and DynamoDB's
# throttling and server errors
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html).
# Any 5xx is transient as well.
_TRANSIENT_CODES = frozenset(
    {
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
)

# Codes a call site names as an answer of its own, not a failure (``expected``).
# A conditional write found the row changed since it was read
# (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html).
CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"
# StartExecution: the name ran before, with other input or finished
# (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html).
EXECUTION_ALREADY_EXISTS = "ExecutionAlreadyExists"


def is_transient(response: Mapping[str, Any]) -> bool:
    """Whether a failed AWS call (a ClientError's response) may succeed if retried."""
    error = response.get("Error")
    code = str(error.get("Code", "")) if isinstance(error, dict) else ""
    metadata = response.get("ResponseMetadata")
    status = metadata.get("HTTPStatusCode", 0) if isinstance(metadata, dict) else 0
    return code in _TRANSIENT_CODES or (isinstance(status, int) and status >= 500)


def error_code(exc: BaseException) -> str:
    """The service's error code of a ClientError; empty for anything else."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def aws_error(
    what: str,
    exc: ClientError | BotoCoreError,
    otherwise: type[TransientError] | type[PermanentError] = PermanentError,
) -> TransientError | PermanentError:
    """The functions' error for a failed AWS call, to raise ``from exc``.

    - The SDK's own failures (a connection dropped, a read timed out, no
      credentials yet: BotoCoreError) are transient: the SDK has retried the
      connection errors already, and a later try may pass.
    - A ClientError with a throttling or server code, or a 5xx, is transient.
    - Any other ClientError is ``otherwise``: permanent unless the caller
      knows better (the processor's S3 calls keep an AccessDenied transient).
    """
    if isinstance(exc, BotoCoreError) or is_transient(exc.response):
        return TransientError(f"{what}: {exc}")
    return otherwise(f"{what}: {exc}")


@dataclass
class AwsCall:
    """What ``aws_call`` saw: the service's refusal with an expected code, or None."""

    refusal: ClientError | None = None

    @property
    def refused(self) -> str | None:
        """The expected code the service answered with; None when the calls succeeded."""
        return None if self.refusal is None else error_code(self.refusal)


@contextmanager
def aws_call(
    what: str,
    expected: frozenset[str] = frozenset(),
    otherwise: type[TransientError] | type[PermanentError] = PermanentError,
) -> Iterator[AwsCall]:
    """Run AWS calls; a failure leaves as the functions' error (``aws_error``), ``from`` it.

    ``expected``: error codes that are an answer, not a failure (a fenced
    write's ConditionalCheckFailedException). Such a refusal ends the block
    quietly and is left in the yielded ``AwsCall`` for the caller to act on.

    An AssertionError goes through as it is: a botocore Stubber's complaint
    that a request was not the expected one must fail the test that made it.
    """
    call = AwsCall()
    try:
        yield call
    except ClientError as exc:
        if error_code(exc) in expected:
            call.refusal = exc
            return
        raise aws_error(what, exc, otherwise) from exc
    except BotoCoreError as exc:
        if isinstance(exc, AssertionError):
            raise
        raise aws_error(what, exc, otherwise) from exc
