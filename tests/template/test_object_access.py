"""What the processor and the audit may know about the ingest bucket's objects.

The processor must hear 404, not 403, for an upload that is gone; the audit
must find the rows of uploads that have no version id.
"""

from __future__ import annotations

from typing import Any

from onceflow.local.engine import LocalEngine
from tests.template.translate import translated


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for p in role["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement.get("Action", [])
    return action if isinstance(action, list) else [action]


def test_the_processor_role_may_list_the_ingest_bucket_and_no_other() -> None:
    """Without s3:ListBucket S3 answers a missing key with 403 AccessDenied
    (S3 API reference, GetObject), which the processor retries for days."""
    # GIVEN the template CloudFormation receives
    resources = translated()["Resources"]
    # WHEN we read the role the bundled processor runs as
    role_arn = resources["ProcessorFunction"]["Properties"]["Role"]
    assert role_arn == {"Fn::GetAtt": ["ProcessorFunctionRole", "Arn"]}
    statements = _statements(resources["ProcessorFunctionRole"])
    listing = [s for s in statements if "s3:ListBucket" in _actions(s)]
    # THEN it may list the ingest bucket (the bucket's ARN: ListBucket is a bucket
    # action, so an object ARN would grant nothing) and no other bucket
    assert listing, "the processor cannot tell a missing object from a denied one"
    for statement in listing:
        assert statement["Effect"] == "Allow"
        # (the stack's own bucket, or ExistingBucketName: tests/template/test_existing_bucket.py)
        assert statement["Resource"] == {
            "Fn::If": [
                "CreateIngestBucket",
                {"Fn::GetAtt": ["IngestBucket", "Arn"]},
                {"Fn::Sub": "arn:${AWS::Partition}:s3:::${ExistingBucketName}"},
            ]
        }
        assert "Condition" not in statement


def test_the_object_content_index_is_sparse_and_projects_what_the_audit_reads() -> None:
    # GIVEN the ledger as CloudFormation creates it
    resources = translated()["Resources"]
    table = resources["LedgerTable"]["Properties"]
    (index,) = [i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == "ObjectContent"]
    # THEN it is keyed on object_ref alone (only rows of unversioned uploads have one)
    assert index["KeySchema"] == [{"AttributeName": "object_ref", "KeyType": "HASH"}]
    assert {"AttributeName": "object_ref", "AttributeType": "S"} in table["AttributeDefinitions"]
    # AND it carries what the audit's classify reads, no whole rows
    projection = index["Projection"]
    assert projection["ProjectionType"] == "INCLUDE"
    assert {"etag", "status", "event_time", "expires_at", "attempts", "dead_lettered_at",
            "superseded_at"} == set(projection["NonKeyAttributes"])  # fmt: skip
    # AND the audit function is told its name and may query it
    audit = resources["AuditFunction"]["Properties"]
    assert audit["Environment"]["Variables"]["OBJECT_CONTENT_INDEX"] == "ObjectContent"
    queries = [
        s for s in _statements(resources["AuditFunctionRole"]) if "dynamodb:Query" in _actions(s)
    ]
    assert {"Fn::Sub": "${LedgerTable.Arn}/index/ObjectContent"} in [s["Resource"] for s in queries]


def test_the_local_engine_creates_the_object_content_index_as_the_template_says() -> None:
    # GIVEN a local stack made from the template
    with LocalEngine() as engine:
        dynamodb = engine.client("dynamodb")
        # WHEN we describe its ledger
        description = dynamodb.describe_table(TableName=engine.ref("LedgerTable"))["Table"]
        indexes = {i["IndexName"]: i for i in description["GlobalSecondaryIndexes"]}
        # THEN the index is there, with the INCLUDE projection
        index = indexes["ObjectContent"]
        assert index["KeySchema"] == [{"AttributeName": "object_ref", "KeyType": "HASH"}]
        assert index["Projection"]["ProjectionType"] == "INCLUDE"
        # AND a query returns the projected attributes, not the whole row
        table = engine.ref("LedgerTable")
        dynamodb.put_item(
            TableName=table,
            Item={
                "pk": {"S": "s3://b/k.png#SEQ"},
                "object_ref": {"S": "s3://b/k.png"},
                "etag": {"S": "abc"},
                "status": {"S": "PROCESSED"},
                "result": {"S": "{}"},
            },
        )
        (item,) = dynamodb.query(
            TableName=table,
            IndexName="ObjectContent",
            KeyConditionExpression="object_ref = :r",
            ExpressionAttributeValues={":r": {"S": "s3://b/k.png"}},
        )["Items"]
    assert set(item) == {"pk", "object_ref", "etag", "status"}
