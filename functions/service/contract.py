"""The processor contract: what the Process state sends a processing function, what it keeps of
the answer, and the error names it acts on.

Every function named by ProcessorFunctionArn signs it, the bundled one
(service/handlers/processor.py) included. The state machine is the other
party: its Process state (statemachines/src/processor.asl.yaml) builds
ProcessorInput, and retries, catches and dead-letters by the names below;
tests/unit/test_processor_contract.py holds the two together. docs/processor.md
says it for someone writing their own function.

A call's life::

    Claim/Reclaim ──> Process(ProcessorInput) ──result──────────> MarkComplete: PROCESSED
                        │ ObjectSuperseded ─────────────────────> MarkSuperseded: PROCESSED
                        │ RETRIED_ERRORS: the same claim, a new callToken (Retry)
                        │ PermanentError ───────────────────────> MarkFailed, dead-lettered now
                        └ any other error, or retries spent ────> MarkFailed: FAILED, claimed
                                              again below MaxAttempts, dead-lettered at it
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

from service.model import WorkItem


class ProcessorInput(TypedDict):
    """The event a processing function is invoked with: the Process state's Payload."""

    workItem: WorkItem  # what to process; workItem.idempotencyKey names it in the ledger
    # The claim's lock owner, the ledger row's fencing token: the execution's ARN (in the
    # SQS batch workflow, the ARN and "#<the message's index>").
    lockToken: str
    attempt: int  # the work item's claims so far: 1 at its first, one more at each Reclaim
    callToken: str  # "<lockToken>#<attempt>.<retry>": this call's own (CallToken)


class ErrorName(StrEnum):
    """The names of the errors a processor raises on purpose. Lambda reports an unhandled
    Python exception with its class name as errorType (Lambda developer guide,
    python-exceptions.html) and Step Functions matches ErrorEquals against that name
    (tutorial-handling-error-conditions.html): a class of any module will do."""

    TRANSIENT = "TransientError"  # may pass: retried with backoff within this claim
    PERMANENT = "PermanentError"  # can never pass: dead-lettered at once, no retry, no claim
    SUPERSEDED = "ObjectSuperseded"  # an upload without a version id holds other content now


# Retried like TransientError (RetryIntervalSeconds, RetryMaxAttempts, ...): the function
# timed out, crashed or ran out of memory, or Lambda itself failed.
RETRIED_ERRORS = (
    ErrorName.TRANSIENT.value,
    "States.Timeout",
    "Sandbox.Timedout",
    "Lambda.Unknown",
    "Runtime.OutOfMemory",
    "Runtime.ExitError",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.ClientExecutionTimeoutException",
)
# Lambda refused the call for the concurrency it has: retried apart, up to this many times
# over about 75 s, whatever RetryMaxAttempts says.
THROTTLED = "Lambda.TooManyRequestsException"
THROTTLED_RETRIES = 8

# The result is kept in the ledger row as JSON text when it has at most this many
# characters, as {"truncated": true} otherwise; the execution's output carries it whole.
RESULT_MAX_CHARACTERS = 4096

_CALL_TOKEN = re.compile(r"(?P<lock_token>.+)#(?P<attempt>[0-9]+)\.(?P<retry>[0-9]+)")


@dataclass(frozen=True)
class CallToken:
    """One call of the processor: the claim's lock token, its attempt, and the retry within it.

    Two calls of one claim share lockToken and attempt; a call that timed out and
    still runs beside its retry has the same work item and a different call token.
    The function's effect is keyed by the work item (its idempotency key), never by
    the call: the call token says which call wrote it.
    """

    lock_token: str
    attempt: int
    retry: int  # 0 for the claim's first call, then the Retry's count

    def __str__(self) -> str:
        return f"{self.lock_token}#{self.attempt}.{self.retry}"

    @classmethod
    def parse(cls, text: str) -> CallToken:
        match = _CALL_TOKEN.fullmatch(text)
        if match is None:
            raise ValueError(f"not a call token: {text!r}")
        return cls(match["lock_token"], int(match["attempt"]), int(match["retry"]))
