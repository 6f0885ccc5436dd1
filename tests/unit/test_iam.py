"""IAM on the local engine, piece by piece: the policy evaluation, and which action and
resource each AWS request is authorised against (Service Authorization Reference).

The requests are the ones botocore really sends, caught before they leave the client.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from onceflow.local import iam
from onceflow.local.lambdas import InProcessRuntime
from onceflow.local.template import Stack, TemplateError

ACCOUNT = "123456789012"
TABLE_ARN = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/Ledger"
QUEUE_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/dlq"
MACHINE_ARN = f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:processor"


def allow(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


# ---- evaluation ---------------------------------------------------------------------


def test_an_explicit_deny_wins_over_any_allow() -> None:
    # GIVEN a role allowed everything on the table, and denied DeleteItem on it
    statements = [allow("dynamodb:*", TABLE_ARN), deny("dynamodb:DeleteItem", TABLE_ARN)]
    # WHEN each action is evaluated
    # THEN the deny decides DeleteItem, the allow decides the rest
    assert iam.evaluate(statements, "dynamodb:DeleteItem", TABLE_ARN) is iam.Decision.EXPLICIT_DENY
    assert iam.evaluate(statements, "dynamodb:PutItem", TABLE_ARN) is iam.Decision.ALLOWED


def test_what_no_statement_allows_is_implicitly_denied() -> None:
    # GIVEN a role allowed PutItem on one table
    statements = [allow("dynamodb:PutItem", TABLE_ARN)]
    # WHEN another action, or the same on another table, is evaluated
    # THEN neither is allowed
    assert iam.evaluate(statements, "dynamodb:GetItem", TABLE_ARN) is iam.Decision.IMPLICIT_DENY
    other = TABLE_ARN.replace("Ledger", "Other")
    assert iam.evaluate(statements, "dynamodb:PutItem", other) is iam.Decision.IMPLICIT_DENY


def test_actions_ignore_case_and_resources_do_not() -> None:
    # GIVEN a statement written in a different case than the request's action
    statements = [allow("S3:getobject", "arn:aws:s3:::bucket/Photos/*")]
    # WHEN the request's action and resource are evaluated
    # THEN the action matches whatever its case (IAM: actions are case-insensitive),
    # the resource only in its own case
    assert iam.evaluate(statements, "s3:GetObject", "arn:aws:s3:::bucket/Photos/a.png") is (
        iam.Decision.ALLOWED
    )
    assert iam.evaluate(statements, "s3:GetObject", "arn:aws:s3:::bucket/photos/a.png") is (
        iam.Decision.IMPLICIT_DENY
    )


def test_wildcards_are_iams_and_every_other_character_is_literal() -> None:
    # GIVEN patterns with "*", "?" and a "." (a regular expression would read it as any character)
    statements = [
        allow("dynamodb:Query", f"{TABLE_ARN}/index/Open.Work"),
        allow("s3:GetObject", "arn:aws:s3:::bucket/v?/*"),
    ]
    # WHEN requests are evaluated against them
    # THEN "." matches only itself, "?" one character, "*" any run
    assert iam.evaluate(statements, "dynamodb:Query", f"{TABLE_ARN}/index/Open.Work") is (
        iam.Decision.ALLOWED
    )
    assert iam.evaluate(statements, "dynamodb:Query", f"{TABLE_ARN}/index/OpenXWork") is (
        iam.Decision.IMPLICIT_DENY
    )
    assert iam.evaluate(statements, "s3:GetObject", "arn:aws:s3:::bucket/v1/a/b.png") is (
        iam.Decision.ALLOWED
    )
    assert iam.evaluate(statements, "s3:GetObject", "arn:aws:s3:::bucket/v12/a.png") is (
        iam.Decision.IMPLICIT_DENY
    )


def test_not_action_and_not_resource_match_everything_else() -> None:
    # GIVEN a deny of every SQS action but ReceiveMessage, and an allow outside one queue
    statements = [
        {"Effect": "Allow", "Action": "sqs:*", "NotResource": "arn:aws:sqs:us-east-1:1:secret"},
        {"Effect": "Deny", "NotAction": "sqs:ReceiveMessage", "Resource": "*"},
    ]
    # WHEN actions are evaluated
    # THEN ReceiveMessage is allowed except on the excluded queue, every other action denied
    assert iam.evaluate(statements, "sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:1:q") is (
        iam.Decision.ALLOWED
    )
    assert iam.evaluate(statements, "sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:1:secret") is (
        iam.Decision.IMPLICIT_DENY
    )
    assert iam.evaluate(statements, "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q") is (
        iam.Decision.EXPLICIT_DENY
    )


def test_a_statement_with_a_condition_neither_allows_nor_denies() -> None:
    # GIVEN statements whose conditions the local engine cannot evaluate
    condition = {"Bool": {"aws:SecureTransport": "false"}}
    allowing = [allow("s3:GetObject", "*", Condition=condition)]
    denying = [allow("s3:GetObject", "*"), deny("s3:*", "*", Condition=condition)]
    # WHEN a request is evaluated
    # THEN the conditional Allow grants nothing, the conditional Deny refuses nothing
    assert iam.evaluate(allowing, "s3:GetObject", "arn:aws:s3:::b/k") is (
        iam.Decision.IMPLICIT_DENY
    )
    assert iam.evaluate(denying, "s3:GetObject", "arn:aws:s3:::b/k") is iam.Decision.ALLOWED


def test_motos_own_evaluator_reads_the_policy_language_otherwise_than_iam() -> None:
    # Why iam.py evaluates policies itself rather than with moto's IAMPolicyStatement
    # (moto 5.2.5). When a moto release reads these as IAM does ("Policy evaluation
    # logic"; "IAM JSON policy elements": Action, NotResource, Condition), this test
    # fails: iam.evaluate can then give way to moto's.
    from moto.iam.access_control import IAMPolicyStatement, PermissionResult

    def moto(statement: dict[str, Any], action: str, resource: str) -> PermissionResult:
        return IAMPolicyStatement(statement).is_action_permitted(action, resource)

    index = f"{TABLE_ARN}/index/Open.Work"
    secret = "arn:aws:sqs:us-east-1:1:secret"
    insecure = {"Bool": {"aws:SecureTransport": "false"}}
    # GIVEN statements IAM reads one way  WHEN moto evaluates them  THEN it reads another:
    # "." is a regular expression's any character (IAM: literal) ...
    assert moto(allow("dynamodb:Query", index), "dynamodb:Query", index.replace(".", "X")) is (
        PermissionResult.PERMITTED
    )
    # ... "?" is not one character (IAM: it is) ...
    v1 = "arn:aws:s3:::bucket/v1/a.png"
    assert moto(allow("s3:GetObject", "arn:aws:s3:::bucket/v?/*"), "s3:GetObject", v1) is (
        PermissionResult.NEUTRAL
    )
    # ... an action's case counts (IAM: it does not) ...
    assert moto(allow("S3:getobject", "*"), "s3:GetObject", v1) is PermissionResult.NEUTRAL
    # ... NotResource is ignored: the excluded resource is allowed ...
    not_secret = {"Effect": "Allow", "Action": "sqs:*", "NotResource": secret}
    assert moto(not_secret, "sqs:ReceiveMessage", secret) is PermissionResult.PERMITTED
    # ... and a Condition on a key it has no value for holds (IAM: a key absent from the
    # request context does not match, so the Allow does not apply)
    conditional = allow("s3:GetObject", "*", Condition=insecure)
    assert moto(conditional, "s3:GetObject", v1) is PermissionResult.PERMITTED
    # while iam.evaluate reads each as IAM does
    assert iam.evaluate(
        [allow("dynamodb:Query", index)], "dynamodb:Query", index.replace(".", "X")
    ) is (iam.Decision.IMPLICIT_DENY)
    assert iam.evaluate(
        [allow("s3:GetObject", "arn:aws:s3:::bucket/v?/*")], "s3:GetObject", v1
    ) is (iam.Decision.ALLOWED)
    assert iam.evaluate([not_secret], "sqs:ReceiveMessage", secret) is iam.Decision.IMPLICIT_DENY
    assert iam.evaluate([conditional], "s3:GetObject", v1) is iam.Decision.IMPLICIT_DENY


# ---- requests -> actions ------------------------------------------------------------


class _Caught(Exception):
    """Raised in place of sending: carries the call as botocore's before-call sees it."""

    def __init__(self, model: Any, params: Any) -> None:
        super().__init__("caught")
        self.model, self.params = model, params


def sent(service: str, call: Callable[[Any], Any]) -> iam.Call:
    """What call(client) asks of AWS, described as IAM sees it; nothing is sent."""
    client = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    ).client(service)  # type: ignore[call-overload]
    built: dict[str, Any] = {}

    def note(params: Any, **_: Any) -> None:
        built["params"] = params  # after botocore's own handlers (CopySource quoted)

    def catch(model: Any, **_: Any) -> None:
        raise _Caught(model, built["params"])

    client.meta.events.register("before-parameter-build", note)
    client.meta.events.register_first("before-call", catch)
    with pytest.raises(_Caught) as caught:
        call(client)
    return iam.describe_call(caught.value.model, caught.value.params, "us-east-1", ACCOUNT)


def checks(described: iam.Call) -> list[tuple[str, str]]:
    return [(c.action, c.resource) for c in described.checks]


def test_dynamodb_requests_name_the_table_or_the_index_they_touch() -> None:
    # GIVEN requests on the ledger, one through its index, one on two tables
    put = sent("dynamodb", lambda c: c.put_item(TableName="Ledger", Item={"pk": {"S": "a"}}))
    query = sent(
        "dynamodb",
        lambda c: c.query(
            TableName="Ledger",
            IndexName="OpenWork",
            KeyConditionExpression="s = :s",
            ExpressionAttributeValues={":s": {"S": "x"}},
        ),
    )
    batch = sent(
        "dynamodb",
        lambda c: c.batch_get_item(
            RequestItems={
                "Ledger": {"Keys": [{"pk": {"S": "a"}}]},
                "Other": {"Keys": [{"pk": {"S": "b"}}]},
            }
        ),
    )
    # WHEN IAM authorises them
    # THEN each needs its action on the table, a query on an index the index's ARN
    assert checks(put) == [("dynamodb:PutItem", TABLE_ARN)]
    assert checks(query) == [("dynamodb:Query", f"{TABLE_ARN}/index/OpenWork")]
    assert checks(batch) == [
        ("dynamodb:BatchGetItem", TABLE_ARN),
        ("dynamodb:BatchGetItem", TABLE_ARN.replace("Ledger", "Other")),
    ]


def test_s3_object_reads_name_the_object_and_the_version_action_when_a_version_is_given() -> None:
    # GIVEN reads of an object whose key needs URL-encoding, with and without a version
    key = "in/ü b+c.png"
    plain = sent("s3", lambda c: c.get_object(Bucket="ingest", Key=key))
    versioned = sent("s3", lambda c: c.get_object(Bucket="ingest", Key=key, VersionId="v1"))
    head = sent("s3", lambda c: c.head_object(Bucket="ingest", Key=key))
    # WHEN IAM authorises them
    # THEN GetObject on the object, GetObjectVersion with a version (S3 GetObject,
    # "Permissions"), and a missing key is judged by ListBucket on the bucket
    assert checks(plain) == [("s3:GetObject", f"arn:aws:s3:::ingest/{key}")]
    assert checks(versioned) == [("s3:GetObjectVersion", f"arn:aws:s3:::ingest/{key}")]
    assert checks(head) == [("s3:GetObject", f"arn:aws:s3:::ingest/{key}")]
    assert plain.missing_key_bucket == "ingest" and head.head and not plain.head


def test_s3_bucket_requests_and_copies_name_what_they_need() -> None:
    # GIVEN listings, a versioning read, a put and a copy
    listing = sent("s3", lambda c: c.list_objects_v2(Bucket="ingest", Prefix="a/"))
    versions = sent("s3", lambda c: c.list_object_versions(Bucket="ingest"))
    versioning = sent("s3", lambda c: c.get_bucket_versioning(Bucket="ingest"))
    put = sent("s3", lambda c: c.put_object(Bucket="out", Key="r/1.json", Body=b"{}"))
    copy = sent(
        "s3",
        lambda c: c.copy_object(
            Bucket="out", Key="copy.png", CopySource={"Bucket": "ingest", "Key": "a.png"}
        ),
    )
    # WHEN IAM authorises them
    # THEN bucket actions on the bucket's ARN, object actions on the object's, a copy both
    assert checks(listing) == [("s3:ListBucket", "arn:aws:s3:::ingest")]
    assert checks(versions) == [("s3:ListBucketVersions", "arn:aws:s3:::ingest")]
    assert checks(versioning) == [("s3:GetBucketVersioning", "arn:aws:s3:::ingest")]
    assert checks(put) == [("s3:PutObject", "arn:aws:s3:::out/r/1.json")]
    assert checks(copy) == [
        ("s3:PutObject", "arn:aws:s3:::out/copy.png"),
        ("s3:GetObject", "arn:aws:s3:::ingest/a.png"),
    ]
    assert put.missing_key_bucket is None


def test_a_copy_source_key_holding_a_question_mark_is_read_whole() -> None:
    # GIVEN a copy whose source key holds "?" (botocore quotes it: src/dir/a%3Fb%3D1)
    copy = sent(
        "s3",
        lambda c: c.copy_object(
            Bucket="out", Key="c", CopySource={"Bucket": "src", "Key": "dir/a?versionId=1"}
        ),
    )
    # WHEN IAM authorises it
    # THEN s3:GetObject on the whole key: only botocore's own "?versionId=" names a version
    assert checks(copy)[1] == ("s3:GetObject", "arn:aws:s3:::src/dir/a?versionId=1")


def test_a_put_that_tags_or_sets_an_acl_or_a_lock_needs_those_actions_too() -> None:
    # GIVEN a put with tags, a canned ACL, a retention and a legal hold, and a copy with tags
    put = sent(
        "s3",
        lambda c: c.put_object(
            Bucket="out",
            Key="k",
            Body=b"x",
            Tagging="a=1",
            ACL="private",
            ObjectLockMode="GOVERNANCE",
            ObjectLockRetainUntilDate="2030-01-01T00:00:00Z",
            ObjectLockLegalHoldStatus="ON",
        ),
    )
    copy = sent(
        "s3",
        lambda c: c.copy_object(
            Bucket="out", Key="c", CopySource={"Bucket": "in", "Key": "k"}, Tagging="a=1"
        ),
    )
    # WHEN IAM authorises them
    # THEN each option's own action on the new object as well, as the Service
    # Authorization Reference lists them for PutObject and CopyObject (which parameter
    # brings in which action is not verified: a grant missing one is refused, harsher
    # than AWS at worst, never kinder)
    target = "arn:aws:s3:::out/k"
    assert sorted(checks(put)) == [
        ("s3:PutObject", target),
        ("s3:PutObjectAcl", target),
        ("s3:PutObjectLegalHold", target),
        ("s3:PutObjectRetention", target),
        ("s3:PutObjectTagging", target),
    ]
    assert ("s3:PutObjectTagging", "arn:aws:s3:::out/c") in checks(copy)


def test_object_attributes_need_the_object_read_too_and_hide_a_missing_key() -> None:
    # GIVEN GetObjectAttributes of an object, and of one version of it
    plain = sent(
        "s3", lambda c: c.get_object_attributes(Bucket="b", Key="k", ObjectAttributes=["ETag"])
    )
    version = sent(
        "s3",
        lambda c: c.get_object_attributes(
            Bucket="b", Key="k", VersionId="v1", ObjectAttributes=["ETag"]
        ),
    )
    # WHEN IAM authorises them
    # THEN both actions S3 names ("GetObjectAttributes", Permissions: s3:GetObject and
    # s3:GetObjectAttributes, or their Version forms), and a missing key is a 404 only
    # with s3:ListBucket, as for GetObject
    assert sorted(checks(plain)) == [
        ("s3:GetObject", "arn:aws:s3:::b/k"),
        ("s3:GetObjectAttributes", "arn:aws:s3:::b/k"),
    ]
    assert sorted(checks(version)) == [
        ("s3:GetObjectVersion", "arn:aws:s3:::b/k"),
        ("s3:GetObjectVersionAttributes", "arn:aws:s3:::b/k"),
    ]
    assert plain.missing_key_bucket == "b" and version.missing_key_bucket == "b"


def test_a_batch_delete_and_a_transaction_check_each_entry() -> None:
    # GIVEN a DeleteObjects of a key and of one version of another, and a transaction
    # that puts, updates, deletes and checks a condition on two tables
    deleted = sent(
        "s3",
        lambda c: c.delete_objects(
            Bucket="b",
            Delete={
                "Objects": [
                    {"Key": "k1"},
                    {"Key": "k2", "VersionId": "v1"},
                    {"Key": "k3", "VersionId": ""},  # names no version (moto: a delete marker)
                ]
            },
        ),
    )
    key = {"pk": {"S": "a"}}
    written = sent(
        "dynamodb",
        lambda c: c.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "Ledger", "Item": key}},
                {"Update": {"TableName": "Ledger", "Key": key, "UpdateExpression": "SET n = :n",
                            "ExpressionAttributeValues": {":n": {"N": "1"}}}},
                {"Delete": {"TableName": "Other", "Key": key}},
                {"ConditionCheck": {"TableName": "Other", "Key": key,
                                    "ConditionExpression": "attribute_exists(pk)"}},
            ]
        ),
    )  # fmt: skip
    # WHEN IAM authorises them
    # THEN each key as its own DeleteObject would be (s3:DeleteObjectVersion for a
    # version), and each entry its own item action on its table (DynamoDB Developer
    # Guide, "Using IAM with DynamoDB transactions": ConditionCheck is ConditionCheckItem)
    assert checks(deleted) == [
        ("s3:DeleteObject", "arn:aws:s3:::b/k1"),
        ("s3:DeleteObjectVersion", "arn:aws:s3:::b/k2"),
        ("s3:DeleteObject", "arn:aws:s3:::b/k3"),
    ]
    other = TABLE_ARN.replace("Ledger", "Other")
    assert checks(written) == [
        ("dynamodb:PutItem", TABLE_ARN),
        ("dynamodb:UpdateItem", TABLE_ARN),
        ("dynamodb:DeleteItem", other),
        ("dynamodb:ConditionCheckItem", other),
    ]


def test_list_queues_is_checked_on_the_accounts_queues() -> None:
    # GIVEN a ListQueues call
    listed = sent("sqs", lambda c: c.list_queues())
    # WHEN IAM authorises it
    # THEN on the account's queues, which "arn:aws:sqs:us-east-1:ACCOUNT:*" grants
    # (SQS Developer Guide, "Amazon SQS API permissions: Actions and resource reference")
    assert checks(listed) == [("sqs:ListQueues", f"arn:aws:sqs:us-east-1:{ACCOUNT}:")]
    allow = [
        {
            "Effect": "Allow",
            "Action": "sqs:ListQueues",
            "Resource": f"arn:aws:sqs:us-east-1:{ACCOUNT}:*",
        }
    ]
    assert iam.evaluate(allow, *checks(listed)[0]) is iam.Decision.ALLOWED


def test_queue_state_machine_function_and_bus_requests_name_their_arns() -> None:
    # GIVEN a send, a start, a describe, two invokes and a PutEvents
    send = sent("sqs", lambda c: c.send_message(QueueUrl=QUEUE_URL, MessageBody="x"))
    start = sent("stepfunctions", lambda c: c.start_execution(stateMachineArn=MACHINE_ARN))
    execution = MACHINE_ARN.replace("stateMachine", "execution") + ":run-1"
    describe = sent("stepfunctions", lambda c: c.describe_execution(executionArn=execution))
    by_name = sent("lambda", lambda c: c.invoke(FunctionName="processor", Payload=b"{}"))
    function_arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:processor"
    qualified = sent(
        "lambda", lambda c: c.invoke(FunctionName=function_arn, Qualifier="live", Payload=b"{}")
    )
    events = sent(
        "events",
        lambda c: c.put_events(Entries=[{"Source": "s", "DetailType": "d", "Detail": "{}"}]),
    )
    # WHEN IAM authorises them
    # THEN each names the resource it acts on (the execution, not its machine, for Describe)
    assert checks(send) == [("sqs:SendMessage", f"arn:aws:sqs:us-east-1:{ACCOUNT}:dlq")]
    assert checks(start) == [("states:StartExecution", MACHINE_ARN)]
    assert checks(describe) == [("states:DescribeExecution", execution)]
    assert checks(by_name) == [("lambda:InvokeFunction", function_arn)]
    assert checks(qualified) == [("lambda:InvokeFunction", f"{function_arn}:live")]
    assert checks(events) == [
        ("events:PutEvents", f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/default")
    ]


def test_calls_on_an_endpoint_of_their_own_are_described_by_their_operation() -> None:
    # GIVEN calls botocore sends to an endpoint other than the service's usual one
    # (StartSyncExecution to sync-states.REGION; ListTagsOfResource with a table ARN to
    # the account-based DynamoDB endpoint)
    sync = sent("stepfunctions", lambda c: c.start_sync_execution(stateMachineArn=MACHINE_ARN))
    tags = sent("dynamodb", lambda c: c.list_tags_of_resource(ResourceArn=TABLE_ARN))
    # WHEN IAM authorises them THEN each is its own action on its resource, not refused as
    # a request of an unknown service
    assert checks(sync) == [("states:StartSyncExecution", MACHINE_ARN)]
    assert checks(tags) == [("dynamodb:ListTagsOfResource", TABLE_ARN)]


def test_a_request_no_action_is_known_for_is_refused_not_let_through() -> None:
    # GIVEN a PartiQL statement (no mapping to an IAM action here) made by a role
    principal = iam.Principal("F", "function", "F-role", "f", ACCOUNT, (allow("*", "*"),))
    statement = sent("dynamodb", lambda c: c.execute_statement(Statement="SELECT * FROM t"))
    assert statement.unmapped is not None
    # WHEN the role makes it
    response = iam.check_request(principal, statement)
    # THEN the caller hears AccessDenied (in the service's place: never sent), naming the gap
    assert response is not None
    status, _, body = response
    assert status == 400
    assert json.loads(body)["__type"].endswith("AccessDeniedException")
    assert "cannot map to an IAM action" in json.loads(body)["message"]


# ---- roles from a template ------------------------------------------------------------


def test_a_managed_policy_is_refused_rather_than_guessed(tmp_path: Path) -> None:
    # GIVEN a function whose Policies name an AWS managed policy (its statements are not
    # in the template)
    template = tmp_path / "template.yaml"
    template.write_text(
        "Transform: AWS::Serverless-2016-10-31\n"
        "Resources:\n"
        "  Fn:\n"
        "    Type: AWS::Serverless::Function\n"
        "    Properties:\n"
        "      CodeUri: functions/\n"
        "      Handler: app.handler\n"
        "      Policies: [AmazonS3ReadOnlyAccess]\n",
        encoding="utf-8",
    )
    stack = Stack.from_file(template)
    stack.refs["Fn"] = "fn"
    access = iam.AccessControl(stack)
    # WHEN the engine would enforce the roles
    # THEN it refuses, naming the policy, and installs nothing
    with pytest.raises(TemplateError, match="AmazonS3ReadOnlyAccess"):
        access.start(InProcessRuntime())
    access.stop()
    assert not iam._CONTROLS


POLICY_TEMPLATES = (
    "Transform: AWS::Serverless-2016-10-31\n"
    "Resources:\n"
    "  Counts:\n"
    "    Type: AWS::DynamoDB::Table\n"
    "  Fn:\n"
    "    Type: AWS::Serverless::Function\n"
    "    Properties:\n"
    "      CodeUri: functions/\n"
    "      Handler: app.handler\n"
    "      Policies:\n"
    "        - S3ReadPolicy: {BucketName: uploads}\n"
    "        - DynamoDBCrudPolicy: {TableName: !Ref Counts}\n"
    "        - SQSPollerPolicy: {QueueName: work}\n"
    "        - Statement: [{Effect: Allow, Action: sns:Publish, Resource: '*'}]\n"
)


def _access(tmp_path: Path, text: str) -> iam.AccessControl:
    template = tmp_path / "template.yaml"
    template.write_text(text, encoding="utf-8")
    stack = Stack.from_file(template)
    stack.refs.update({"Fn": "fn", "Counts": "counts"})
    return iam.AccessControl(stack)


def _started_statements(tmp_path: Path, text: str) -> list[dict[str, Any]]:
    """Fn's statements as the engine enforces them once its roles are started."""
    access = _access(tmp_path, text)
    access.start(InProcessRuntime())
    try:
        return access.statements("Fn")
    finally:
        access.stop()


def test_sam_policy_templates_are_expanded_by_sams_translator_and_enforced(
    tmp_path: Path,
) -> None:
    # GIVEN a function whose Policies are SAM policy templates beside an inline document
    # WHEN the engine starts enforcing the roles
    statements = _started_statements(tmp_path, POLICY_TEMPLATES)
    # THEN each template became SAM's own statements, its resources resolved
    table = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/counts"
    allowed = [
        ("s3:GetObject", "arn:aws:s3:::uploads/notes.txt"),
        ("s3:ListBucket", "arn:aws:s3:::uploads"),
        ("dynamodb:PutItem", table),
        ("dynamodb:Query", f"{table}/index/by-date"),
        ("sqs:ReceiveMessage", f"arn:aws:sqs:us-east-1:{ACCOUNT}:work"),
        ("sns:Publish", "arn:aws:sns:us-east-1:123456789012:topic"),
    ]
    for action, resource in allowed:
        assert iam.evaluate(statements, action, resource) is iam.Decision.ALLOWED, (
            action,
            resource,
        )
    # AND nothing beyond them: no write to the bucket, no other table
    denied = [
        ("s3:PutObject", "arn:aws:s3:::uploads/notes.txt"),
        ("s3:GetObject", "arn:aws:s3:::other/notes.txt"),
        ("dynamodb:PutItem", f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/other"),
    ]
    for action, resource in denied:
        assert iam.evaluate(statements, action, resource) is not iam.Decision.ALLOWED, (
            action,
            resource,
        )


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("NoSuchPolicy: {BucketName: uploads}", "NoSuchPolicy"),
        ("S3ReadPolicy: {Bucket: uploads}", "BucketName"),
    ],
    ids=["unknown template", "missing parameter"],
)
def test_a_policy_template_sam_would_refuse_is_refused_with_its_reason(
    tmp_path: Path, policy: str, message: str
) -> None:
    # GIVEN a policy template SAM does not know, or one without its parameter
    text = POLICY_TEMPLATES.replace("S3ReadPolicy: {BucketName: uploads}", policy)
    access = _access(tmp_path, text)
    # WHEN the engine would enforce the roles THEN it refuses, naming what is wrong
    with pytest.raises(TemplateError, match=message):
        access.start(InProcessRuntime())
    access.stop()
    assert not iam._CONTROLS


ROLE_TEMPLATE = (
    "Transform: AWS::Serverless-2016-10-31\n"
    "Resources:\n"
    "  Counts:\n"
    "    Type: AWS::DynamoDB::Table\n"
    "  FnRole:\n"
    "    Type: AWS::IAM::Role\n"
    "    Properties:\n"
    "      Policies:\n"
    "        - PolicyName: counts\n"
    "          PolicyDocument:\n"
    "            Statement:\n"
    "              - Effect: Allow\n"
    "                Action: dynamodb:GetItem\n"
    "                Resource: !Sub 'arn:aws:dynamodb:${AWS::Region}:${AWS::AccountId}:"
    "table/${Counts}'\n"
    "  Fn:\n"
    "    Type: AWS::Serverless::Function\n"
    "    Properties:\n"
    "      CodeUri: functions/\n"
    "      Handler: app.handler\n"
    "      Role: !GetAtt FnRole.Arn\n"
)


def test_a_role_of_the_template_gives_its_inline_policies_and_nothing_else(
    tmp_path: Path,
) -> None:
    # GIVEN a function whose Role is an AWS::IAM::Role of the template
    # WHEN the engine starts enforcing the roles
    statements = _started_statements(tmp_path, ROLE_TEMPLATE)
    # THEN the role's own statements, resolved, are the function's: no SAM basic policy
    table = f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/counts"
    assert iam.evaluate(statements, "dynamodb:GetItem", table) is iam.Decision.ALLOWED
    assert iam.evaluate(statements, "dynamodb:PutItem", table) is iam.Decision.IMPLICIT_DENY
    assert iam.evaluate(statements, "logs:PutLogEvents", "*") is iam.Decision.IMPLICIT_DENY


def test_a_role_with_managed_policies_is_refused(tmp_path: Path) -> None:
    # GIVEN the role given a managed policy besides (its statements are not in the template)
    managed = "      ManagedPolicyArns: [arn:aws:iam::aws:policy/ReadOnlyAccess]\n"
    text = ROLE_TEMPLATE.replace("      Policies:\n", managed + "      Policies:\n", 1)
    access = _access(tmp_path, text)
    # WHEN the engine would enforce the roles THEN it refuses, naming the role
    with pytest.raises(TemplateError, match="FnRole: managed policies are not enforced"):
        access.start(InProcessRuntime())
    access.stop()
    assert not iam._CONTROLS
