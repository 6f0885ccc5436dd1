"""One mapping from a failed AWS call to the functions' TransientError or PermanentError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber

from service.dal.aws import CONDITIONAL_CHECK_FAILED, aws_call, aws_error
from service.dal.bucket import Bucket, Inventory
from service.dal.ledger import Ledger
from service.dal.objects import ObjectStore
from service.dal.workflow import DeadLetters, Processor, Reports
from service.errors import PermanentError, TransientError
from service.model import LedgerRow, Status


def _refused(code: str, status: int = 400) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "no"}}
    response["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(response, "AnyOperation")


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (_refused("ThrottlingException"), TransientError),
        (_refused("ProvisionedThroughputExceededException"), TransientError),
        (_refused("SlowDown", 503), TransientError),
        (_refused("AnythingElse", 502), TransientError),  # a 5xx passes, whatever its code
        (_refused("AccessDeniedException"), PermanentError),
        (_refused("ValidationException"), PermanentError),
        (EndpointConnectionError(endpoint_url="https://dynamodb"), TransientError),
        (ReadTimeoutError(endpoint_url="https://dynamodb"), TransientError),
    ],
)
def test_a_failed_call_is_transient_when_a_retry_may_pass(exc: Any, error: type[Exception]) -> None:
    # GIVEN a failed AWS call; WHEN it is mapped
    mapped = aws_error("reading the ledger", exc)
    # THEN a retry-worthy failure is transient, any other refusal permanent, and both say what
    assert type(mapped) is error
    assert str(mapped).startswith("reading the ledger: ")


def test_a_caller_may_keep_unnamed_refusals_transient() -> None:
    # GIVEN a refusal the caller would rather retry (the processor's S3 AccessDenied)
    mapped = aws_error("reading s3://b/k", _refused("AccessDenied", 403), otherwise=TransientError)
    # THEN it is transient
    assert type(mapped) is TransientError


def test_an_expected_code_is_an_answer_and_any_other_leaves_mapped_from_its_cause() -> None:
    # GIVEN a fenced write refused by its condition
    with aws_call("releasing k", expected=frozenset({CONDITIONAL_CHECK_FAILED})) as call:
        raise _refused(CONDITIONAL_CHECK_FAILED)
    # THEN the block ends quietly and the caller reads the refusal
    assert call.refused == CONDITIONAL_CHECK_FAILED
    # AND a call that succeeds has none
    with aws_call("releasing k", expected=frozenset({CONDITIONAL_CHECK_FAILED})) as fine:
        pass
    assert fine.refused is None and fine.refusal is None
    # AND another refusal leaves as the functions' error, caused by the AWS error
    throttled = _refused("ThrottlingException")
    with (
        pytest.raises(TransientError, match="releasing k") as raised,
        aws_call("releasing k", expected=frozenset({CONDITIONAL_CHECK_FAILED})),
    ):
        raise throttled
    assert raised.value.__cause__ is throttled


def test_a_stubbers_complaint_is_not_taken_for_a_connection_failure() -> None:
    # GIVEN a client whose Stubber expects other parameters than the ones sent
    client = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")  # fmt: skip
    with Stubber(client) as stub:
        stub.add_response("send_message", {"MessageId": "m"}, {"QueueUrl": "q", "MessageBody": "a"})
        # WHEN the data layer sends something else
        # THEN the test sees the Stubber's assertion, not a TransientError that a
        # test expecting one would take for a pass
        with pytest.raises(AssertionError):
            DeadLetters("q", client).send({"other": True}, {})


# ---- a connection that fails, in every data-layer call ----------------------------


class _Unreachable:
    """A client of any service whose every call fails to connect, as a network partition does."""

    def __getattr__(self, operation: str) -> Callable[..., Any]:
        def call(**_: Any) -> Any:
            raise EndpointConnectionError(endpoint_url=f"https://aws/{operation}")

        return call


ROW = LedgerRow(pk="k", status=Status.PROCESSING, lock_owner="arn:o", lock_expires_at=1)
_CALLS: dict[str, Callable[[Any], Any]] = {
    "Ledger.batch_get": lambda c: Ledger("t", "i", c).batch_get(["k"]),
    "Ledger.open_rows": lambda c: Ledger("t", "i", c).open_rows(Status.FAILED, None, None),
    "Ledger.content_rows": lambda c: Ledger("t", "i", c).content_rows("s3://b/k", "e"),
    "Ledger.release_stuck": lambda c: Ledger("t", "i", c).release_stuck(ROW, 1, "a"),
    "Ledger.current": lambda c: Ledger("t", "i", c).current("k"),
    "Ledger.take": lambda c: Ledger("t", "i", c).take(ROW, 1, "a", 2),
    "Ledger.mark_dead_lettered": lambda c: Ledger("t", "i", c).mark_dead_lettered("k", "a", 1, "e"),
    "Bucket.versioned": lambda c: Bucket("b", c).versioned(),
    "Bucket.versions_between": lambda c: Bucket("b", c).versions_between("a", "b"),
    "Inventory.newest": lambda c: Inventory("b", "p/", c).newest(),
    "Processor.start": lambda c: Processor("arn:sm", c).start("n", {}),
    "Processor.execution_input": lambda c: Processor("arn:sm", c).execution_input("arn:e"),
    "DeadLetters.send": lambda c: DeadLetters("q", c).send({}, {}),
    "Reports.put": lambda c: Reports("b", c).put("k", {}),
    "Reports.find_manifest": lambda c: Reports("b", c).find_manifest("p/"),
    "Reports.map_run_entries": lambda c: list(Reports("b", c).map_run_entries("b", "m")),
    "ObjectStore.read": lambda c: ObjectStore(c).read("b", "k", "v1"),
    "ObjectStore.write_once": lambda c: ObjectStore(c).write_once("b", "k", b"", "t", {}),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_a_call_that_cannot_connect_is_transient_in_every_data_layer_method(call: str) -> None:
    # GIVEN AWS cannot be reached (the SDK has given up its own retries)
    # WHEN any data-layer method calls it
    # THEN the state machines see a TransientError, which they retry with backoff
    # (the ledger, the bucket and DescribeExecution let the SDK's error through before)
    with pytest.raises(TransientError, match="Could not connect") as raised:
        _CALLS[call](_Unreachable())
    assert isinstance(raised.value.__cause__, EndpointConnectionError)
