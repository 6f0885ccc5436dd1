"""`onceflow doctor --stack-name` against stubbed AWS answers: the exact calls it makes on a
deployed stack, and what it concludes where the local engine cannot stand in (an email
subscription still pending, a bucket never versioned, a permission missing, the stack's
resources read page by page)."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from onceflow import ops
from onceflow.cli import main
from onceflow.ops import doctor

REGION, ACCOUNT = "us-east-1", "123456789012"
STACK = "onceflow"
BUCKET = "onceflow-ingestbucket-abc"
PROCESSOR = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:Processor-x"
AUDIT = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:Audit-x"
FUNCTION = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:onceflow-ProcessorFunction-x"
TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:onceflow-AlarmTopic-x"
INGRESS_DLQ = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/onceflow-IngressDeadLetterQueue-x"
SOURCE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:onceflow-SourceQueue-x"
SOURCE_URL = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/onceflow-SourceQueue-x"
RULE, PIPE, SCHEDULE = "onceflow-ObjectCreatedRule-x", "SourcePipe-x", "AuditSchedule-x"
AUDIT_FUNCTION = "onceflow-AuditFunction-x"
ALARMS = ["onceflow-DeadLetterQueueAlarm-x", "onceflow-AuditFailedAlarm-x"]
PATTERN = json.dumps(
    {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {"bucket": {"name": [BUCKET]}},
    }
)
WHEN = datetime.datetime(2026, 11, 24, 3, 0, tzinfo=datetime.UTC)
OUTPUTS = {
    "IngestBucketName": BUCKET,
    "ProcessorStateMachineArn": PROCESSOR,
    "AuditStateMachineArn": AUDIT,
    "ProcessorFunctionArn": FUNCTION,
    "IngressDeadLetterQueueUrl": INGRESS_DLQ,
    "OutputBucketName": "onceflow-outputbucket-abc",
}
PARAMETERS = {
    "ExistingBucketName": "",
    "KeyPrefix": "",
    "KeySuffix": "",
    "SqsBatchMode": "false",
    "ProcessorFunctionArn": "",
    "ProcessorTimeoutSeconds": "60",
    "LockTimeoutSeconds": "900",
}
RESOURCES = [
    ("IngestBucket", BUCKET, "AWS::S3::Bucket"),
    ("ObjectCreatedRule", RULE, "AWS::Events::Rule"),
    ("SourcePipe", PIPE, "AWS::Pipes::Pipe"),
    ("DeadLetterQueueAlarm", ALARMS[0], "AWS::CloudWatch::Alarm"),
    ("AuditFailedAlarm", ALARMS[1], "AWS::CloudWatch::Alarm"),
    ("AuditStateMachineSchedule", SCHEDULE, "AWS::Scheduler::Schedule"),
    ("AuditFunction", AUDIT_FUNCTION, "AWS::Lambda::Function"),
]
# The S3 Inventory the audit reads, as ListBucketInventoryConfigurations answers it.
INVENTORY = {
    "Id": "onceflow-audit",
    "IsEnabled": True,
    "Destination": {
        "S3BucketDestination": {
            "AccountId": ACCOUNT,
            "Bucket": "arn:aws:s3:::onceflow-outputbucket-abc",
            "Format": "CSV",
            "Prefix": "inventory",
        }
    },
    "IncludedObjectVersions": "All",
    "OptionalFields": ["Size", "LastModifiedDate", "ETag"],
    "Schedule": {"Frequency": "Daily"},
}
DEFINITION = {
    "QueryLanguage": "JSONata",
    "StartAt": "Process",
    "States": {
        "Process": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Arguments": {"FunctionName": FUNCTION, "Payload": "{% $states.input %}"},
            "TimeoutSeconds": "{% (60 + 10) %}",
            "Retry": [{"ErrorEquals": ["States.Timeout"], "MaxAttempts": 3, "MaxDelaySeconds": 30}],
            "End": True,
        }
    },
}
# The upload TestEventPattern is asked about (no KeyPrefix or KeySuffix).
PROBE = {
    "version": "0",
    "id": "00000000-0000-0000-0000-000000000000",
    "detail-type": "Object Created",
    "source": "aws.s3",
    "account": ACCOUNT,
    "time": "2026-01-01T00:00:00Z",
    "region": REGION,
    "resources": [f"arn:aws:s3:::{BUCKET}"],
    "detail": {
        "version": "0",
        "bucket": {"name": BUCKET},
        "object": {
            "key": "onceflow-doctor-probe",
            "size": 1,
            "etag": "0" * 32,
            "sequencer": "0" * 18,
        },
        "request-id": "0" * 16,
        "requester": ACCOUNT,
        "source-ip-address": "127.0.0.1",
        "reason": "PutObject",
    },
}
SERVICES = (
    "cloudformation",
    "s3",
    "events",
    "pipes",
    "sqs",
    "stepfunctions",
    "cloudwatch",
    "sns",
    "scheduler",
    "lambda",
)


@dataclass
class Aws:
    """A stubbed client per service, in the order each is called."""

    clients: dict[str, Any] = field(default_factory=dict)
    stubs: dict[str, Stubber] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for service in SERVICES:
            client = boto3.client(
                service,  # type: ignore[call-overload]
                region_name=REGION,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            self.clients[service] = client
            self.stubs[service] = Stubber(client)

    def on(self, service: str, operation: str, answer: dict[str, Any], params: Any) -> None:
        self.stubs[service].add_response(operation, answer, params)

    def error(self, service: str, operation: str, code: str, params: Any) -> None:
        self.stubs[service].add_client_error(
            operation, code, f"{code} (stubbed)", 403, None, params
        )

    def verify(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """Every boto3 client a DeployedTarget makes is one of these, stubbed."""
    stubbed = Aws()

    def client(self: Any, service: str, *args: Any, **kwargs: Any) -> Any:
        return stubbed.clients[service]

    monkeypatch.setattr(boto3.session.Session, "client", client)
    for stub in stubbed.stubs.values():
        stub.activate()
    yield stubbed
    for stub in stubbed.stubs.values():
        stub.deactivate()


def stack_calls(aws: Aws, parameters: dict[str, str] | None = None) -> None:
    """CloudFormation: the stack (outputs, parameters), then its resources in two pages."""
    aws.on(
        "cloudformation",
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": STACK,
                    "StackStatus": "UPDATE_COMPLETE",
                    "CreationTime": WHEN,
                    "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in OUTPUTS.items()],
                    "Parameters": [
                        {"ParameterKey": k, "ParameterValue": v}
                        for k, v in {**PARAMETERS, **(parameters or {})}.items()
                    ],
                }
            ]
        },
        {"StackName": STACK},
    )
    summaries = [
        {
            "LogicalResourceId": logical,
            "PhysicalResourceId": physical,
            "ResourceType": kind,
            "LastUpdatedTimestamp": WHEN,
            "ResourceStatus": "CREATE_COMPLETE",
        }
        for logical, physical, kind in RESOURCES
    ]
    aws.on(
        "cloudformation",
        "list_stack_resources",
        {"StackResourceSummaries": summaries[:3], "NextToken": "page-2"},
        {"StackName": STACK},
    )
    aws.on(
        "cloudformation",
        "list_stack_resources",
        {"StackResourceSummaries": summaries[3:]},
        {"StackName": STACK, "NextToken": "page-2"},
    )


def healthy_calls(
    aws: Aws,
    *,
    versioning: dict[str, Any] | None = None,
    subscriptions: list[dict[str, Any]] | None = None,
    skip: tuple[str, ...] = (),
    inventories: list[dict[str, Any]] | None = None,
    inventory_pages: list[list[dict[str, Any]]] | None = None,
) -> None:
    """The calls of a healthy stack's examination, each with its exact request."""
    aws.on(
        "s3",
        "get_bucket_notification_configuration",
        {"EventBridgeConfiguration": {}},
        {"Bucket": BUCKET},
    )
    aws.on(
        "s3",
        "get_bucket_versioning",
        {"Status": "Enabled"} if versioning is None else versioning,
        {"Bucket": BUCKET},
    )
    if "events" not in skip:
        aws.on(
            "events",
            "describe_rule",
            {"Name": RULE, "EventPattern": PATTERN, "State": "ENABLED"},
            {"Name": RULE},
        )
        aws.on(
            "events",
            "list_targets_by_rule",
            {
                "Targets": [
                    {
                        "Id": "processor",
                        "Arn": PROCESSOR,
                        "DeadLetterConfig": {
                            "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:IngressDeadLetterQueue-x"
                        },
                    }
                ]
            },
            {"Rule": RULE},
        )
        aws.on(
            "events",
            "test_event_pattern",
            {"Result": True},
            {"EventPattern": PATTERN, "Event": json.dumps(PROBE)},
        )
    aws.on(
        "pipes",
        "describe_pipe",
        {
            "Name": PIPE,
            "CurrentState": "RUNNING",
            "DesiredState": "RUNNING",
            "Source": SOURCE,
            "Target": PROCESSOR,
            "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/PipeRole-x",
            "SourceParameters": {"SqsQueueParameters": {"BatchSize": 1}},
            "TargetParameters": {
                "StepFunctionStateMachineParameters": {"InvocationType": "FIRE_AND_FORGET"}
            },
        },
        {"Name": PIPE},
    )
    aws.on(
        "sqs",
        "get_queue_url",
        {"QueueUrl": SOURCE_URL},
        {"QueueName": "onceflow-SourceQueue-x", "QueueOwnerAWSAccountId": ACCOUNT},
    )
    aws.on(
        "sqs",
        "get_queue_attributes",
        {
            "Attributes": {
                "VisibilityTimeout": "60",
                "MessageRetentionPeriod": "1209600",
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": f"{SOURCE}-dlq", "maxReceiveCount": 5}
                ),
            }
        },
        {
            "QueueUrl": SOURCE_URL,
            "AttributeNames": [
                "RedrivePolicy",
                "VisibilityTimeout",
                "MessageRetentionPeriod",
                "MaximumMessageSize",
            ],
        },
    )
    dlq_url = f"{SOURCE_URL}-dlq"
    aws.on(
        "sqs",
        "get_queue_url",
        {"QueueUrl": dlq_url},
        {"QueueName": "onceflow-SourceQueue-x-dlq", "QueueOwnerAWSAccountId": ACCOUNT},
    )
    aws.on(
        "sqs",
        "get_queue_attributes",
        {"Attributes": {"MessageRetentionPeriod": "1209600"}},
        {"QueueUrl": dlq_url, "AttributeNames": ["MessageRetentionPeriod"]},
    )
    dlq = [{"Name": "QueueName", "Value": "onceflow-SourceQueue-x-dlq"}]
    aws.on(
        "cloudwatch",
        "describe_alarms_for_metric",
        {"MetricAlarms": [{"AlarmName": "SourceDLQAlarm-x", "Dimensions": dlq}]},
        {
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Namespace": "AWS/SQS",
            "Dimensions": dlq,
        },
    )
    aws.on(
        "stepfunctions",
        "describe_state_machine",
        {
            "stateMachineArn": PROCESSOR,
            "name": "Processor-x",
            "definition": json.dumps(DEFINITION),
            "roleArn": f"arn:aws:iam::{ACCOUNT}:role/ProcessorRole-x",
            "type": "STANDARD",
            "creationDate": WHEN,
        },
        {"stateMachineArn": PROCESSOR},
    )
    aws.on(
        "cloudwatch",
        "describe_alarms",
        {
            "MetricAlarms": [
                {"AlarmName": name, "ActionsEnabled": True, "AlarmActions": [TOPIC]}
                for name in ALARMS
            ]
        },
        {"AlarmNames": ALARMS, "MaxRecords": 100},
    )
    aws.on(
        "sns",
        "list_subscriptions_by_topic",
        {
            "Subscriptions": [
                {
                    "SubscriptionArn": f"{TOPIC}:1b2c",
                    "Protocol": "email",
                    "Endpoint": "ops@example.com",
                    "TopicArn": TOPIC,
                }
            ]
            if subscriptions is None
            else subscriptions
        },
        {"TopicArn": TOPIC},
    )
    aws.on(
        "scheduler",
        "get_schedule",
        {
            "Name": SCHEDULE,
            "State": "ENABLED",
            "ScheduleExpression": "rate(1 day)",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": {"Arn": AUDIT, "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/ScheduleRole-x"},
        },
        {"Name": SCHEDULE},
    )
    aws.on(
        "lambda",
        "get_function_configuration",
        {"FunctionName": AUDIT_FUNCTION, "Environment": {"Variables": {
            "AUDIT_INVENTORY_PREFIX": f"inventory/{BUCKET}/onceflow-audit/",
            "AUDIT_INVENTORY_MAX_AGE_HOURS": "48"}}},
        {"FunctionName": AUDIT_FUNCTION},
    )  # fmt: skip
    # one page, or pages as S3 answers more than 100 configurations (IsTruncated and
    # NextContinuationToken: S3 API reference, ListBucketInventoryConfigurations)
    pages = inventory_pages or [[INVENTORY] if inventories is None else inventories]
    for n, page in enumerate(pages):
        more = {"IsTruncated": True, "NextContinuationToken": f"t{n + 1}"}
        aws.on(
            "s3",
            "list_bucket_inventory_configurations",
            {"InventoryConfigurationList": page,
             **(more if n + 1 < len(pages) else {"IsTruncated": False})},
            {"Bucket": BUCKET, **({"ContinuationToken": f"t{n}"} if n else {})},
        )  # fmt: skip
    aws.on(
        "stepfunctions",
        "list_executions",
        {
            "executions": [
                {
                    "executionArn": f"{AUDIT.replace('stateMachine', 'execution')}:daily",
                    "stateMachineArn": AUDIT,
                    "name": "daily",
                    "status": "SUCCEEDED",
                    "startDate": WHEN,
                    "stopDate": WHEN,
                }
            ]
        },
        {"stateMachineArn": AUDIT, "maxResults": 20},
    )
    aws.on(
        "lambda",
        "get_function_configuration",
        {"FunctionArn": FUNCTION, "Timeout": 60},
        {"FunctionName": FUNCTION},
    )


def test_a_healthy_deployed_stack_passes_with_exactly_these_calls(aws: Aws) -> None:
    # GIVEN a deployed stack whose every answer is healthy
    stack_calls(aws)
    healthy_calls(aws)
    # WHEN the doctor examines it by its name
    findings = ops.examine(ops.DeployedTarget(STACK, REGION))
    # THEN each call above was made, in order, with its exact request, and all pass
    aws.verify()
    assert [(f.status, f.check) for f in findings] == [
        ("PASS", "bucket events"),
        ("PASS", "bucket versioning"),
        ("PASS", "rule ObjectCreatedRule"),
        ("PASS", "pipe"),
        ("PASS", "pipe batching"),
        ("PASS", "source queue"),
        ("PASS", "source DLQ retention"),
        ("PASS", "source queue visibility"),
        ("PASS", "source queue DLQ alarm"),
        ("PASS", "alarms"),
        ("PASS", "audit schedule"),
        ("PASS", "audit inventory"),
        ("PASS", "last audit"),
        ("PASS", "processor timeout"),
    ]


def test_the_stacks_resources_and_parameters_come_from_cloudformation(aws: Aws) -> None:
    # GIVEN a stack whose resources ListStackResources gives in two pages
    stack_calls(aws, {"KeyPrefix": "incoming/"})
    # WHEN they are read
    target = ops.DeployedTarget(STACK, REGION)
    resources = target.resources()
    # THEN all of them, by logical id, physical id and type; and the parameters deployed
    aws.verify()
    assert [
        (r["LogicalResourceId"], r["PhysicalResourceId"], r["ResourceType"]) for r in resources
    ] == RESOURCES
    assert target.parameters()["KeyPrefix"] == "incoming/"


def test_an_email_subscription_not_yet_confirmed_reaches_no_one(aws: Aws) -> None:
    # GIVEN the alarm topic's only subscription, an email still PendingConfirmation
    # (on AWS until its owner opens the link; moto confirms at once, so the engine can't)
    stack_calls(aws)
    pending = {
        "SubscriptionArn": "PendingConfirmation",
        "Protocol": "email",
        "Endpoint": "ops@example.com",
        "TopicArn": TOPIC,
    }
    healthy_calls(aws, subscriptions=[pending])
    # WHEN the doctor examines the stack
    findings = ops.examine(ops.DeployedTarget(STACK, REGION))
    # THEN the alarms are the one FAIL, saying a confirmation is awaited
    aws.verify()
    (failed,) = [f for f in findings if f.status != ops.PASS]
    assert (failed.status, failed.check) == (ops.FAIL, "alarms")
    assert "no confirmed subscription (1 waiting for confirmation" in failed.detail


def test_an_existing_bucket_never_versioned_is_a_warning_with_its_guarantee(aws: Aws) -> None:
    # GIVEN a stack on the user's bucket (ExistingBucketName), versioning never set:
    # GetBucketVersioning answers no Status
    stack_calls(aws, {"ExistingBucketName": BUCKET})
    healthy_calls(aws, versioning={})
    # WHEN the doctor examines it
    findings = ops.examine(ops.DeployedTarget(STACK, REGION))
    # THEN versioning is a WARN naming what that state promises, and nothing FAILs
    aws.verify()
    (warned,) = [f for f in findings if f.status != ops.PASS]
    assert (warned.status, warned.check) == (ops.WARN, "bucket versioning")
    assert warned.detail.startswith("never enabled on s3://onceflow-ingestbucket-abc: each")
    assert "Status=Enabled" in warned.detail


def test_an_existing_bucket_without_the_audits_inventory_is_a_warning_with_the_command(
    aws: Aws,
) -> None:
    # GIVEN a stack over a bucket of the user's, whose owner has not added the inventory
    # the audit reads (AuditInventory auto)
    stack_calls(aws, {"ExistingBucketName": BUCKET})
    healthy_calls(aws, inventories=[])
    # WHEN the doctor examines it
    findings = {f.check: f for f in ops.examine(ops.DeployedTarget(STACK, REGION))}
    # THEN it warns that the audit lists the bucket, with the command that adds the inventory
    aws.verify()
    finding = findings["audit inventory"]
    assert finding.status == ops.WARN and "you add it" in finding.detail
    command = finding.detail[finding.detail.index("aws s3api ") :]
    wanted = INVENTORY
    assert command == (
        f"aws s3api put-bucket-inventory-configuration --bucket {BUCKET} --id onceflow-audit "
        f"--inventory-configuration '{json.dumps(wanted, separators=(',', ':'))}'"
    )


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        # S3 delivers a Weekly report once a week: the audit, which reads one no older
        # than 2 days (AUDIT_INVENTORY_MAX_AGE_HOURS 48), would list on 5 days of 7.
        ({"Schedule": {"Frequency": "Weekly"}}, "Schedule Frequency is 'Weekly', not 'Daily'"),
        # "The account ID that owns the destination S3 bucket. If no account ID is
        # provided, the owner is not validated before exporting data" (S3 API reference,
        # InventoryS3BucketDestination): another account's ID, and S3 exports nothing.
        (
            {"Destination": {"S3BucketDestination": {
                **INVENTORY["Destination"]["S3BucketDestination"],  # type: ignore[index]
                "AccountId": "210987654321"}}},
            f"Destination AccountId is '210987654321', not '{ACCOUNT}'",
        ),
        # Reports encrypted with a KMS key the audit's role holds no kms:Decrypt on (it
        # holds it on KmsKeyArn alone, and here there is none): the audit cannot read them.
        (
            {"Destination": {"S3BucketDestination": {
                **INVENTORY["Destination"]["S3BucketDestination"],  # type: ignore[index]
                "Encryption": {"SSEKMS": {"KeyId": "arn:aws:kms:us-east-1:1:key/other"}}}}},
            "Destination Encryption is SSE-KMS with arn:aws:kms:us-east-1:1:key/other",
        ),
    ],
)  # fmt: skip
def test_an_inventory_the_audit_cannot_read_in_time_is_a_warning_naming_the_field(
    aws: Aws, changed: dict[str, Any], named: str
) -> None:
    # GIVEN the audit's inventory, one field changed by hand
    stack_calls(aws)
    healthy_calls(aws, inventories=[{**INVENTORY, **changed}])
    # WHEN the doctor examines the stack
    findings = {f.check: f for f in ops.examine(ops.DeployedTarget(STACK, REGION))}
    # THEN it warns, naming that field
    aws.verify()
    finding = findings["audit inventory"]
    assert finding.status == ops.WARN and named in finding.detail, finding.detail


def test_the_audits_inventory_on_a_later_page_of_the_listing_is_found(aws: Aws) -> None:
    # GIVEN a bucket with more inventories than one page of the listing holds
    others = [{**INVENTORY, "Id": f"other-{n}"} for n in range(3)]
    stack_calls(aws)
    healthy_calls(aws, inventory_pages=[others, [INVENTORY]])
    # WHEN the doctor examines it
    findings = {f.check: f for f in ops.examine(ops.DeployedTarget(STACK, REGION))}
    # THEN it read every page and found the audit's
    aws.verify()
    assert findings["audit inventory"].status == ops.PASS, findings["audit inventory"].detail


def test_a_stack_without_the_audit_function_is_one_fail_not_a_crash(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack whose resources hold no AuditFunction (another version's, say)
    monkeypatch.setattr(sys.modules[__name__], "RESOURCES", RESOURCES[:-1])
    stack_calls(aws)
    # WHEN only the inventory check runs on it
    target = ops.DeployedTarget(STACK, REGION)
    stack = doctor._Stack(target, target.parameters(), target.resources())
    (finding,) = doctor.check_audit_inventory(stack)
    # THEN it is one FAIL that says what is missing
    assert (finding.status, finding.check) == (ops.FAIL, "audit inventory")
    assert "no AuditFunction" in finding.detail


def test_a_read_refused_is_one_fail_and_the_other_checks_still_run(aws: Aws) -> None:
    # GIVEN credentials without events:DescribeRule
    stack_calls(aws)
    healthy_calls(aws, skip=("events",))
    aws.error("events", "describe_rule", "AccessDeniedException", {"Name": RULE})
    # WHEN the doctor examines the stack
    findings = ops.examine(ops.DeployedTarget(STACK, REGION))
    # THEN the rules are one FAIL naming the error; every other check passed
    aws.verify()
    (failed,) = [f for f in findings if f.status != ops.PASS]
    assert (failed.status, failed.check) == (ops.FAIL, "rules")
    assert failed.detail.startswith("could not be read: AccessDeniedException")
    assert len(findings) == 14  # one line each, the rule's a FAIL


def test_the_command_prints_one_line_a_finding_and_exits_1_on_a_fail(aws: Aws) -> None:
    # GIVEN a deployed stack whose bucket's versioning was suspended
    stack_calls(aws)
    healthy_calls(aws, versioning={"Status": "Suspended"})
    out = io.StringIO()
    # WHEN `onceflow doctor --stack-name` runs
    with contextlib.redirect_stdout(out):
        code = main(["doctor", "--stack-name", STACK, "--region", REGION])
    # THEN it printed a line per finding, the FAIL with its fix, and exited 1
    aws.verify()
    lines = out.getvalue().splitlines()
    assert len(lines) == 14 and code == 1
    assert lines[1].startswith("FAIL bucket versioning: Suspended on s3://onceflow-ingestbucket")
    assert lines[1].endswith("--versioning-configuration Status=Enabled")
    assert all(line.startswith("PASS ") for line in lines[:1] + lines[2:])
