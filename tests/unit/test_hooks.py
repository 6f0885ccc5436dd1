"""The request-level concerns on botocore's public events: IAM at before-call, injected
faults in moto's before-send handler, the request log at response-received, each met
in botocore's order for one call (https://docs.aws.amazon.com/botocore/latest/topics/events.html)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.handlers import BUILTIN_HANDLERS
from moto import mock_aws

from onceflow.local import iam, patches
from onceflow.local.patches import hooks

ACCOUNT = "123456789012"
TABLE = "Ledger"
TABLE_ARN = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{TABLE}"


@pytest.fixture
def state() -> Iterator[patches.EngineState]:
    """The patches in place for one engine's state, moto mocking, a ledger table."""
    state = patches.EngineState(name="hooks")
    patches.install(state)
    try:
        with mock_aws(), hooks.working_for(state):
            create_ledger(client("dynamodb"))
            state.requests.clear()
            yield state
    finally:
        patches.uninstall(state)


def client(service: str, attempts: int = 1) -> Any:
    """A client made as a handler makes one: its own session, after the patches went in."""
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    config = Config(retries={"mode": "standard", "total_max_attempts": attempts})
    return session.client(service, config=config)  # type: ignore[call-overload]


def create_ledger(ledger: Any) -> None:
    ledger.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def put(ledger: Any, pk: str) -> Any:
    return ledger.put_item(TableName=TABLE, Item={"pk": {"S": pk}})


def logged(state: patches.EngineState) -> list[tuple[str, str, int]]:
    return [(r.service, r.operation, r.status) for r in state.requests.snapshot()]


def test_each_concern_meets_a_call_in_botocores_order(state: patches.EngineState) -> None:
    # GIVEN a fault injector that notes what it is asked and throttles PutItems of
    # "hot", and a role that may only read the ledger
    asked: list[str] = []

    def throttle(service: str, operation: str, body: str) -> Any:
        asked.append(operation)
        if operation == "PutItem" and '"hot"' in body:
            return patches.dynamodb_error("ProvisionedThroughputExceededException", "injected")
        return None

    state.faults.append(throttle)
    read = {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": TABLE_ARN}
    reader = iam.Principal("F", "function", "F-role", "f", ACCOUNT, (read,))
    ledger = client("dynamodb", attempts=3)
    # WHEN the role writes: IAM (before-call) answers, so neither the faults nor moto
    # (before-send) nor the log (response-received) ever see the call
    with iam.acting_as(reader), pytest.raises(ClientError) as denied:
        put(ledger, "cold")
    assert denied.value.response["Error"]["Code"] == "AccessDeniedException"
    assert asked == [] and logged(state) == []
    # WHEN the operator writes "hot": the fault answers each of the SDK's three attempts
    # in moto's place, and the log records each answer after it
    with pytest.raises(ClientError) as throttled:
        put(ledger, "hot")
    assert throttled.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert asked == ["PutItem"] * 3
    assert logged(state) == [("dynamodb", "PutItem", 400)] * 3
    # WHEN the operator writes "cold" THEN moto answers and the log records it
    put(ledger, "cold")
    assert logged(state)[3:] == [("dynamodb", "PutItem", 200)]
    # and moto was reached only by the call no fault answered
    items = ledger.scan(TableName=TABLE)["Items"]
    assert [item["pk"]["S"] for item in items] == ["cold"]


def test_the_log_names_the_bucket_and_key_of_each_s3_call(state: patches.EngineState) -> None:
    # GIVEN a bucket
    s3 = client("s3")
    s3.create_bucket(Bucket="ingest")
    # WHEN an object is put, read, and a missing one read
    s3.put_object(Bucket="ingest", Key="in/ü b.png", Body=b"x")
    s3.get_object(Bucket="ingest", Key="in/ü b.png")
    with pytest.raises(ClientError):
        s3.get_object(Bucket="ingest", Key="gone")
    # THEN each is logged by botocore's operation name, with its bucket and key as given
    assert [(r.operation, r.status, r.bucket, r.key) for r in state.requests.snapshot()] == [
        ("CreateBucket", 200, "ingest", ""),
        ("PutObject", 200, "ingest", "in/ü b.png"),
        ("GetObject", 200, "ingest", "in/ü b.png"),
        ("GetObject", 404, "ingest", "gone"),
    ]


def test_a_missing_object_is_hidden_from_a_role_that_may_not_list(
    state: patches.EngineState,
) -> None:
    # GIVEN a bucket, and two roles that may read its objects, one also list it
    s3 = client("s3")
    s3.create_bucket(Bucket="ingest")
    read = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ingest/*"}
    listing = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::ingest"}
    reader = iam.Principal("R", "function", "R-role", "r", ACCOUNT, (read,))
    lister = iam.Principal("L", "function", "L-role", "l", ACCOUNT, (read, listing))
    # WHEN each reads a key that is not there
    answers = {}
    for principal in (reader, lister):
        with iam.acting_as(principal):
            for call in (s3.get_object, s3.head_object):
                with pytest.raises(ClientError) as missing:
                    call(Bucket="ingest", Key="gone")
                error = missing.value.response
                answers[principal.logical_id, call.__name__] = (
                    error["ResponseMetadata"]["HTTPStatusCode"],
                    error["Error"]["Code"],
                )
    # THEN only the role that may list hears that it is missing (S3 API reference,
    # GetObject and HeadObject, "Permissions"); a HEAD answer has no body to name it
    assert answers == {
        ("R", "get_object"): (403, "AccessDenied"),
        ("R", "head_object"): (403, "403"),
        ("L", "get_object"): (404, "NoSuchKey"),
        ("L", "head_object"): (404, "404"),
    }


def test_the_handlers_are_registered_while_an_engine_runs_and_only_then() -> None:
    # GIVEN botocore's built-in handlers with no engine running
    before = list(BUILTIN_HANDLERS)
    state = patches.EngineState(name="probe")
    # WHEN the patches go in THEN the log's, and IAM's, handlers are among them
    installed = patches.install(state)
    try:
        registered = {event for event, _, _ in installed.installer.registered}
        assert {"before-call", "after-call.s3", "response-received.dynamodb"} <= registered
        assert len(BUILTIN_HANDLERS) == len(before) + len(installed.installer.registered)
    finally:
        patches.uninstall(state)
    # and when they are taken away, botocore's list is as it was
    assert before == BUILTIN_HANDLERS


def test_an_answer_on_before_send_still_reaches_stock_moto() -> None:
    # GIVEN stock moto (no engine patches) and a before-send handler ahead of moto's,
    # answering a PutItem with a throttle, as a fault on the public event would
    from moto.core.botocore_stubber import MockRawResponse

    def throttle(request: Any, **_: Any) -> Any:
        status, headers, body = patches.dynamodb_error("ThrottlingException", "injected")
        return AWSResponse(request.url, status, headers, MockRawResponse(body))

    with mock_aws():
        ledger = client("dynamodb")
        create_ledger(ledger)
        ledger.meta.events.register_first("before-send.dynamodb.PutItem", throttle)
        # WHEN the PutItem is made
        with pytest.raises(ClientError) as throttled:
            put(ledger, "a")
        # THEN the caller hears the throttle, and yet moto wrote the item: botocore calls
        # every before-send handler, and moto's answers whatever an earlier one returned.
        # This is why faults replace moto's handler instead (docs/local-engine.md); if
        # this fails, moto honours an earlier answer and the replacement can go.
        assert throttled.value.response["Error"]["Code"] == "ThrottlingException"
        assert ledger.scan(TableName=TABLE)["Count"] == 1


def test_a_default_session_kept_from_one_engine_to_the_next_logs_each_call_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN boto3's default session made while one engine runs, and kept after it (an
    # outer mock_aws: an engine's own would not reset the default session)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    with mock_aws():
        for name in ("first", "second"):
            state = patches.EngineState(name=name)
            patches.install(state)
            try:
                # WHEN a client of that session makes a call for each engine in turn
                with hooks.working_for(state):
                    boto3.client("sqs", region_name="us-east-1").list_queues()
                # THEN each engine logs it once: the handlers are on that session once
                assert logged(state) == [("sqs", "ListQueues", 200)]
            finally:
                patches.uninstall(state)
