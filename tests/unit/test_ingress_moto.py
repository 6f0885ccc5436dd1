"""Why the engine keeps EventBridge rules and Pipes' reads outside moto (ingress.py, wiring.py).

Against stock moto: each test shows what moto's own API does where the engine could have
used it, so a moto release that changes it shows here.
"""

from __future__ import annotations

import json

import boto3
from moto import mock_aws

REGION = "us-east-1"


@mock_aws
def test_moto_delivers_every_upload_to_its_own_rules_targets() -> None:
    # GIVEN stock moto: a bucket sending its events to EventBridge, and a rule in moto's
    # events backend whose target is a queue (the batch mode's source queue)
    s3, sqs, events = (boto3.client(s, region_name=REGION) for s in ("s3", "sqs", "events"))
    s3.create_bucket(Bucket="ingest")
    s3.put_bucket_notification_configuration(
        Bucket="ingest", NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    url = sqs.create_queue(QueueName="source")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    events.put_rule(Name="created", EventPattern=json.dumps({"source": ["aws.s3"]}))
    events.put_targets(Rule="created", Targets=[{"Id": "queue", "Arn": arn["QueueArn"]}])
    # WHEN an object is uploaded, nothing else
    s3.put_object(Bucket="ingest", Key="a.csv", Body=b"x")
    # THEN moto itself has delivered S3's event to the queue (moto 5.2.5: twice): rules kept
    # in moto would deliver each upload again next to put_s3_event (which a test calls, or
    # not, to deliver or lose an event), so the engine keeps its rules itself
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    keys = [json.loads(m["Body"])["detail"]["object"]["key"] for m in messages]
    assert keys and set(keys) == {"a.csv"}


@mock_aws
def test_moto_leaves_eventbridge_out_of_the_bucket_notification_configuration() -> None:
    # GIVEN stock moto and a bucket whose EventBridge notifications are on
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="ingest")
    s3.put_bucket_notification_configuration(
        Bucket="ingest", NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    # WHEN its configuration is read
    answer = s3.get_bucket_notification_configuration(Bucket="ingest")
    # THEN moto leaves EventBridgeConfiguration out, where S3 answers it (S3 API reference,
    # GetBucketNotificationConfiguration): wiring.LocalBucketNotifications adds it
    assert "EventBridgeConfiguration" not in answer


def test_update_pipe_replaces_a_parameters_group_as_one() -> None:
    # GIVEN a pipe whose SQS source batches 10 messages for up to 10 seconds
    from types import SimpleNamespace

    from onceflow.local.wiring import LocalPipes

    queue = {"BatchSize": "10", "MaximumBatchingWindowInSeconds": "10"}
    pipe = {"name": "p", "RoleArn": "r", "SourceParameters": {"SqsQueueParameters": queue}}
    engine = SimpleNamespace(
        pipes={"Pipe": pipe}, stack=SimpleNamespace(attributes={"Pipe": {"Arn": "a"}})
    )
    pipes = LocalPipes(engine)  # type: ignore[arg-type]
    # WHEN UpdatePipe gives only its BatchSize
    pipes.update_pipe(
        Name="p", RoleArn="r", SourceParameters={"SqsQueueParameters": {"BatchSize": 5}}
    )
    # THEN the group is replaced as one: the window not given is back to its default (UpdatePipe
    # API reference: "The fields in these objects are updated atomically as one and override
    # existing values ... that field will be set to its system-default value")
    described = pipes.describe_pipe(Name="p")
    assert described["SourceParameters"] == {"SqsQueueParameters": {"BatchSize": 5}}


@mock_aws
def test_the_pipes_record_carries_each_attribute_as_lambdas_sqs_event_does() -> None:
    from onceflow.local import ingress

    # GIVEN a message with a String, a Number and a Binary attribute, received as the
    # pipe receives it (all attributes)
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="source")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageAttributes={
        "kind": {"DataType": "String", "StringValue": "order"},
        "n": {"DataType": "Number", "StringValue": "7"},
        "raw": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    })  # fmt: skip
    [message] = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    )["Messages"]
    # WHEN the pipe makes its record of it
    record = ingress._pipe_record(message, "arn:aws:sqs:us-east-1:123456789012:source")
    # THEN each attribute has the shape of Lambda's SQS event, which Pipes hands a target
    # (eb-pipes-sqs.html): recorded on AWS for String and Number (LocalStack's
    # test_lambda_integration_sqs snapshot, test_message_body_and_attributes_passed_correctly:
    # stringValue, stringListValues [], binaryListValues [], dataType, and the record's
    # md5OfMessageAttributes); a Binary one gives binaryValue in base64 in place of
    # stringValue (Powertools' SqsMsgAttributeModel; no recording of one found)
    assert record["messageAttributes"] == {
        "kind": {"stringValue": "order", "stringListValues": [], "binaryListValues": [],
                 "dataType": "String"},
        "n": {"stringValue": "7", "stringListValues": [], "binaryListValues": [],
              "dataType": "Number"},
        "raw": {"binaryValue": "AP8=", "stringListValues": [], "binaryListValues": [],
                "dataType": "Binary"},
    }  # fmt: skip
    assert record["md5OfMessageAttributes"] == message["MD5OfMessageAttributes"]
    assert list(record)[list(record).index("messageAttributes") + 1] == "md5OfMessageAttributes"
    # ... and a message without attributes has none, nor their digest (as recorded)
    sqs.send_message(QueueUrl=url, MessageBody="plain")
    [plain] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    plain_record = ingress._pipe_record(plain, "arn:aws:sqs:us-east-1:123456789012:source")
    assert plain_record["messageAttributes"] == {}
    assert "md5OfMessageAttributes" not in plain_record
