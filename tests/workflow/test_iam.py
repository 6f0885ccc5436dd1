"""IAM that changes behaviour: on the local engine each function and state machine runs
as the role template.yaml gives it, and a call its policies do not allow fails as it
fails on AWS.

The template's own roles are the ones the rest of the workflow suite runs under; here
a grant is taken away (from the resolved statements, never from the template) to show
what its absence does.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    attributes,
    dlq_messages,
    invocations,
    ledger_row,
    load_event,
    upload,
)

GONE = "uploads/never-there.png"


def without(engine: LocalEngine, logical_id: str, sid: str) -> list[dict[str, Any]]:
    """The role's resolved statements, less the one named sid (which must exist)."""
    statements = engine.access.statements(logical_id)
    kept = [s for s in statements if s.get("Sid") != sid]
    assert len(kept) == len(statements) - 1, f"{logical_id} has no statement {sid}"
    return kept


def error_of(call: Any) -> dict[str, Any]:
    """The error a client call raised: code, message and HTTP status."""
    try:
        call()
    except ClientError as exc:
        error = dict(exc.response["Error"])
        error["Status"] = exc.response["ResponseMetadata"]["HTTPStatusCode"]
        error["HostId"] = exc.response["ResponseMetadata"].get("HostId", "")
        return error
    raise AssertionError("the call succeeded")


def test_a_function_calling_an_action_its_role_lacks_gets_access_denied(
    engine: LocalEngine,
) -> None:
    # GIVEN a processor that writes to the ledger, which only the state machine's role may
    table = engine.ref("LedgerTable")
    item = {"pk": {"S": "written-by-the-processor"}}

    looked: list[Any] = []

    def handler(event: Any, context: Any) -> Any:
        dynamodb = boto3.client("dynamodb")
        # the test looking at the ledger from inside: the operator, not the function
        looked.append(engine.client("dynamodb").scan(TableName=table)["Count"])
        return error_of(lambda: dynamodb.put_item(TableName=table, Item=item))

    # WHEN it is invoked, as the state machine invokes it
    with engine.override_function(FUNCTION, handler):
        error, failed = engine.invoke(FUNCTION, {})
    # THEN DynamoDB refused it as it refuses a role without dynamodb:PutItem on the table
    assert failed is None
    assert error["Code"] == "AccessDeniedException"
    assert error["Status"] == 400
    assert "dynamodb:PutItem" in error["Message"]
    assert engine.get_att("LedgerTable", "Arn") in error["Message"]
    assert "ProcessorFunctionRole" in error["Message"]
    # AND nothing was written, while the engine's own client (the operator's credentials)
    # is never checked, from inside the handler or outside
    assert looked == [0]
    assert ledger_row(engine, "written-by-the-processor") is None
    engine.client("dynamodb").put_item(TableName=table, Item=item)
    assert ledger_row(engine, "written-by-the-processor") is not None


def test_the_processor_denied_its_dlq_ends_dead_letter_failed_with_sqs_own_error(
    engine: LocalEngine,
) -> None:
    # GIVEN the processor state machine's role without sqs:SendMessage on the DLQ
    statements = without(engine, MACHINE, "DeadLetter")
    event = load_event("invalid-unknown-shape.json")
    # WHEN an event that must be dead-lettered is processed
    with engine.access.override(MACHINE, statements):
        result = engine.execute(MACHINE, event)
    # THEN every SendToDLQ attempt failed as Step Functions reports an error SQS
    # answered (SQS.AmazonSQSException, SQS's code in the cause), and the execution
    # ended in its named state with nothing in the DLQ
    failures = [e["taskFailedEventDetails"] for e in result.events if e["type"] == "TaskFailed"]
    assert len(failures) == 5  # the first try and SendToDLQ's 4 retries of States.TaskFailed
    for failure in failures:
        assert failure["resourceType"] == "sqs"
        assert failure["error"] == "SQS.AmazonSQSException"
        assert "is not authorized to perform: sqs:SendMessage" in failure["cause"]
        assert engine.get_att("DeadLetterQueue", "Arn") in failure["cause"]
        assert "Error Code: AccessDenied" in failure["cause"]
    assert result.error == "DeadLetterFailed"
    assert result.states_entered[-3:] == ["SendToDLQ", "CannotDeadLetter", "DeadLetterFailed"]
    assert "SQS.AmazonSQSException" in (result.cause or "")
    assert dlq_messages(engine) == []


def read_missing_key(engine: LocalEngine) -> dict[str, dict[str, Any]]:
    """What GetObject and HeadObject of a missing key answer the processor's role."""
    bucket = engine.ref("IngestBucket")

    def handler(event: Any, context: Any) -> Any:
        s3 = boto3.client("s3")
        return {
            "get": error_of(lambda: s3.get_object(Bucket=bucket, Key=GONE)),
            "head": error_of(lambda: s3.head_object(Bucket=bucket, Key=GONE)),
        }

    with engine.override_function(FUNCTION, handler):
        answers, failed = engine.invoke(FUNCTION, {})
    assert failed is None
    return dict(answers)


def never_there(engine: LocalEngine) -> dict[str, Any]:
    item = {"bucket": engine.ref("IngestBucket"), "key": GONE, "idempotencyKey": "manual:gone"}
    return {"workItem": item}


def test_a_missing_key_is_404_to_a_role_that_may_list_the_bucket(engine: LocalEngine) -> None:
    # GIVEN the processor's role as the template grants it (s3:ListBucket on the ingest bucket)
    # WHEN it reads a key that does not exist
    answers = read_missing_key(engine)
    # THEN S3 says it is missing (S3 API reference, GetObject, "Permissions")
    assert (answers["get"]["Status"], answers["get"]["Code"]) == (404, "NoSuchKey")
    assert answers["head"]["Status"] == 404


def test_a_missing_key_is_403_to_a_role_that_may_not_list_the_bucket(
    engine: LocalEngine,
) -> None:
    # GIVEN the processor's role without its s3:ListBucket grant
    statements = without(engine, FUNCTION, "KnowMissingObjects")
    # WHEN it reads a key that does not exist
    with engine.access.override(FUNCTION, statements):
        answers = read_missing_key(engine)
    # THEN S3 answers 403 AccessDenied, not 404 (S3 API reference, GetObject, "Permissions");
    # a HEAD answer has no body, so the SDK sees the status alone
    assert (answers["get"]["Status"], answers["get"]["Code"]) == (403, "AccessDenied")
    assert answers["head"]["Status"] == 403
    # with S3's Extended Request ID (x-amz-id-2), as every S3 answer has it
    assert answers["get"]["HostId"] and answers["head"]["HostId"]


def test_a_deleted_upload_is_dead_lettered_at_once_by_the_template_role(
    engine: LocalEngine,
) -> None:
    # GIVEN work whose upload does not exist, and the processor's role as the template grants it
    # WHEN it is processed
    result = engine.execute(MACHINE, never_there(engine))
    # THEN S3's 404 made it a PermanentError: one Process call, dead-lettered
    assert result.outcome == "DeadLettered", (result.error, result.cause)
    assert invocations(engine) == 1
    (message,) = dlq_messages(engine)
    assert attributes(message)["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    assert "NoSuchKey" in attributes(message)["ERROR_MESSAGE"]


def test_without_list_bucket_a_deleted_upload_is_retried_instead_of_dead_lettered(
    engine: LocalEngine,
) -> None:
    # GIVEN work whose upload does not exist, and the processor's role without s3:ListBucket
    statements = without(engine, FUNCTION, "KnowMissingObjects")
    # WHEN it is processed
    with engine.access.override(FUNCTION, statements):
        result = engine.execute(MACHINE, never_there(engine))
    # THEN the 403 reads as a permission problem, which the processor treats as
    # transient: the call is retried (1 + RetryMaxAttempts), and the work stays
    # open for the next delivery instead of being dead-lettered
    assert invocations(engine) == 4
    assert result.outcome == "Failed", (result.error, result.cause)
    assert "AccessDenied" in (result.cause or "")
    assert dlq_messages(engine) == []
    row = ledger_row(engine, "manual:gone")
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" not in row


def test_every_function_and_state_machine_runs_as_a_role_of_its_own(engine: LocalEngine) -> None:
    # GIVEN the engine of the template
    principals = engine.access.principals
    # WHEN its roles are resolved
    # THEN each function and state machine has its own, with the template's statements
    # resolved to this stack's ARNs (and SAM's basic execution policy for functions)
    assert set(principals) == {
        "ProcessorFunction",
        "ProcessorStateMachine",
        "AuditFunction",
        "AuditStateMachine",
    }
    processor = {s.get("Sid") for s in engine.access.statements(FUNCTION)}
    assert {"KnowMissingObjects", "SamLambdaBasicExecutionRole"} <= processor
    dead_letter = next(s for s in engine.access.statements(MACHINE) if s.get("Sid") == "DeadLetter")
    assert dead_letter["Resource"] == engine.get_att("DeadLetterQueue", "Arn")


# "IAM policies for using Distributed Map states": the machine's role reads the
# ItemReader's bucket, and starts the children, executions of the machine itself (the
# template grants that in AuditMapRunPolicy, a policy attached to the role).
@pytest.mark.parametrize(
    ("sid", "denied"),
    [("ListIngestBucket", "s3:ListBucket"), ("StartChildren", "states:StartExecution")],
)
def test_the_audits_distributed_map_works_as_its_machines_role(
    engine: LocalEngine, sid: str, denied: str
) -> None:
    # GIVEN the audit state machine's role without one of those grants, and an upload
    upload(engine, "uploads/listed.png")
    statements = without(engine, AUDIT, sid)
    # WHEN the audit runs
    with engine.access.override(AUDIT, statements):
        result = engine.execute(AUDIT, {})
    # THEN that call is denied and the audit fails (AWS's error for it is not verified;
    # States.Runtime, which no Catch takes, errs harsher)
    assert result.status == "FAILED"
    assert result.error == "States.Runtime"
    assert f"not authorized to perform: {denied}" in (result.cause or "")
