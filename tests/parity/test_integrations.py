"""The Lambda, DynamoDB and SQS integrations: their results and errors, as AWS recorded them.

Recordings: github.com/localstack/localstack, tests/aws/services/stepfunctions/v2/services/
(test_*_task_service.snapshot.json) and .../v2/error_handling/ (test_task_service_lambda).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import FUNCTION
from tests.parity.conftest import Run, events_of


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """One stack for the module (an engine start was most of each test's time): each test
    runs state machines of its own (`run` names each anew) and reads only their executions
    and the items, objects and versions it writes; a function's override ends with its
    test."""
    with LocalEngine(function_log=io.StringIO()) as local:
        yield local


@pytest.fixture
def function_arn(engine: LocalEngine) -> str:
    return engine.get_att(FUNCTION, "Arn")


@pytest.fixture
def identity(engine: LocalEngine) -> Iterator[None]:
    """The function returns its event, as LocalStack's id_function.py does."""
    with engine.override_function(FUNCTION, lambda event, context: event):
        yield


def _invoke(function: str, payload: Any) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "Arguments": {"FunctionName": function, "Payload": payload},
        "End": True,
    }


# ---- lambda:invoke ---------------------------------------------------------------


@pytest.mark.usefixtures("identity")
@pytest.mark.parametrize(
    ("text", "received"),
    [('"HelloWorld"', "HelloWorld"), ("0", 0), ("true", True), ("{}", {}), ("[]", [])],
)
def test_a_payload_given_as_json_text_reaches_the_function_as_its_value(
    run: Run, function_arn: str, text: str, received: Any
) -> None:
    """Recorded: test_lambda_task_service.snapshot.json,
    TestTaskServiceLambda::test_invoke_json_values[HelloWorld|0_0|True|json_value5|json_value6]
    a Payload that is a string holding JSON text is sent as that
    text; the function returns what it got."""
    result = run({"Invoke": _invoke(function_arn, "{% $states.input.p %}")}, {"p": text})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["Payload"] == received


@pytest.mark.usefixtures("identity")
def test_a_payload_that_is_a_json_string_of_non_json_text_arrives_as_that_string(
    run: Run, function_arn: str
) -> None:
    """Recorded: test_lambda_task_service.snapshot.json,
    TestTaskServiceLambda::test_invoke_bytes_payload: Payload "\\"'{'Hello':'World'}'\\""
    (JSON text of a string) is scheduled as given and the function runs."""
    text = "\"'{'Hello':'World'}'\""
    result = run({"Invoke": _invoke(function_arn, "{% $states.input.p %}")}, {"p": text})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["Payload"] == "'{'Hello':'World'}'"


def test_a_handler_returning_bytes_answers_with_those_bytes(
    run: Run, engine: LocalEngine, function_arn: str
) -> None:
    """Recorded: test_lambda_task_service.snapshot.json,
    TestTaskServiceLambda::test_invoke_bytes_payload: a Python handler returning
    b'"HelloWorld!"' (return_bytes_str.py) gives the Payload "HelloWorld!"."""
    with engine.override_function(FUNCTION, lambda event, context: b'"HelloWorld!"'):
        result = run({"Invoke": _invoke(function_arn, {})})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["Payload"] == "HelloWorld!"


@pytest.mark.usefixtures("identity")
def test_an_invoke_result_carries_the_executed_version_and_the_sdk_metadata(
    run: Run, function_arn: str
) -> None:
    """Recorded: test_lambda_task_service.snapshot.json, TestTaskServiceLambda::test_invoke:
    ExecutedVersion, Payload, SdkHttpMetadata (AllHttpHeaders, HttpHeaders,
    HttpStatusCode 200), SdkResponseMetadata (RequestId), StatusCode."""
    result = run({"Invoke": _invoke(function_arn, {"a": 1})})
    output = result.output
    assert sorted(output) == [
        "ExecutedVersion",
        "Payload",
        "SdkHttpMetadata",
        "SdkResponseMetadata",
        "StatusCode",
    ]
    assert (output["ExecutedVersion"], output["StatusCode"]) == ("$LATEST", 200)
    metadata = output["SdkHttpMetadata"]
    assert metadata["HttpStatusCode"] == 200
    assert sorted(metadata["HttpHeaders"]) == sorted(
        [
            "Connection",
            "Content-Length",
            "Content-Type",
            "Date",
            "X-Amz-Executed-Version",
            "x-amzn-Remapped-Content-Length",
            "x-amzn-RequestId",
            "X-Amzn-Trace-Id",
        ]
    )
    assert metadata["HttpHeaders"]["X-Amz-Executed-Version"] == "$LATEST"
    assert metadata["HttpHeaders"]["Content-Length"] == str(len('{"a": 1}'))
    assert sorted(metadata["AllHttpHeaders"]) == sorted(metadata["HttpHeaders"])
    assert output["SdkResponseMetadata"]["RequestId"]


@pytest.mark.usefixtures("identity")
def test_an_invoke_of_a_published_version_answers_that_version(
    run: Run, engine: LocalEngine, function_arn: str
) -> None:
    """Lambda API reference, Invoke: ExecutedVersion (the X-Amz-Executed-Version header)
    is "the version of the function that executed", whether the version is named in the
    FunctionName's ARN or as its Qualifier."""
    version = engine.client("lambda").publish_version(FunctionName=function_arn)["Version"]
    for named in ({"FunctionName": f"{function_arn}:{version}"},
                  {"FunctionName": function_arn, "Qualifier": version}):  # fmt: skip
        task = {**_invoke(function_arn, {"a": 1}), "Arguments": {**named, "Payload": {"a": 1}}}
        result = run({"Invoke": task})
        assert result.status == "SUCCEEDED", (result.error, result.cause)
        assert result.output["ExecutedVersion"] == version
        assert result.output["SdkHttpMetadata"]["HttpHeaders"]["X-Amz-Executed-Version"] == version


def test_a_missing_function_is_named_with_latest(run: Run, function_arn: str) -> None:
    """Recorded: test_task_service_lambda.snapshot.json,
    TestTaskServiceLambda::test_no_such_function: Lambda.ResourceNotFoundException,
    "Function not found: arn:...:function:NAME:$LATEST (Service: AWSLambda; Status
    Code: 404; Error Code: ResourceNotFoundException; Request ID: ...; Proxy: null)"."""
    missing = f"{function_arn}-gone"
    result = run({"Invoke": _invoke(missing, {})})
    assert result.error == "Lambda.ResourceNotFoundException"
    assert (result.cause or "").startswith(
        f"Function not found: {missing}:$LATEST (Service: AWSLambda; Status Code: 404; "
        "Error Code: ResourceNotFoundException; Request ID: "
    )
    assert (result.cause or "").endswith("; Proxy: null)")


def _raise(event: Any, context: Any) -> None:
    raise Exception("Some exception was raised.")


def test_a_function_error_is_the_runtime_answer_in_each_integration_text(
    run: Run, engine: LocalEngine, function_arn: str
) -> None:
    """Recorded: test_task_lambda.snapshot.json, TestTaskLambda::test_raise_exception_catch
    (a Task whose Resource is the function's ARN): the cause is the runtime's answer as
    it wrote it, '{"errorMessage": "Some exception was raised.", "errorType":
    "Exception", "requestId": ..., "stackTrace": [...]}'; test_error_output.snapshot.json,
    test_task_catch_error_output (lambda:invoke): the same members, compact. Either way
    the stack trace holds the handler's frame alone (the runtime's own are left out)."""
    with engine.override_function(FUNCTION, _raise):
        legacy = run({"Invoke": {"Type": "Task", "Resource": function_arn, "End": True}})
        service = run({"Invoke": _invoke(function_arn, {})})
    head = ['"errorMessage"', '"Some exception was raised."', '"errorType"', '"Exception"']
    for result, colon, comma in ((legacy, ": ", ", "), (service, ":", ",")):
        assert result.error == "Exception"
        expected = "{" + comma.join(colon.join(head[i : i + 2]) for i in (0, 2))
        assert (result.cause or "").startswith(expected + comma + '"requestId"' + colon)
        [frame] = json.loads(result.cause or "")["stackTrace"]
        assert frame.endswith(', in _raise\n    raise Exception("Some exception was raised.")\n')


# ---- dynamodb --------------------------------------------------------------------

DYNAMODB_HEADERS = [
    "Connection",
    "Content-Length",
    "Content-Type",
    "Date",
    "Server",
    "x-amz-crc32",
    "x-amzn-RequestId",
]


def _dynamodb(engine: LocalEngine, action: str, **arguments: Any) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": f"arn:aws:states:::dynamodb:{action}",
        "Arguments": {"TableName": engine.ref("LedgerTable"), **arguments},
        "End": True,
    }


def test_dynamodb_results_carry_the_sdk_metadata_and_no_consumed_capacity(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: test_dynamodb_task_service.snapshot.json,
    TestTaskServiceDynamoDB::test_base_integrations[DYNAMODB_PUT_UPDATE_GET_ITEM]
    putItem answers only SdkHttpMetadata and SdkResponseMetadata;
    updateItem with ReturnValues adds Attributes, and no ConsumedCapacity."""
    put = run({"Put": _dynamodb(engine, "putItem", Item={"pk": {"S": "p1"}})})
    assert sorted(put.output) == ["SdkHttpMetadata", "SdkResponseMetadata"]
    metadata = put.output["SdkHttpMetadata"]
    assert sorted(metadata["HttpHeaders"]) == sorted(DYNAMODB_HEADERS)
    assert metadata["HttpHeaders"]["Content-Type"] == "application/x-amz-json-1.0"
    assert metadata["HttpHeaders"]["Content-Length"] == "2"
    update = run(
        {
            "Update": _dynamodb(
                engine,
                "updateItem",
                Key={"pk": {"S": "p1"}},
                UpdateExpression="SET s = :s",
                ExpressionAttributeValues={":s": {"S": "HelloWorldUpdated"}},
                ReturnValues="UPDATED_NEW",
            )
        }
    )
    assert sorted(update.output) == ["Attributes", "SdkHttpMetadata", "SdkResponseMetadata"]
    assert update.output["Attributes"] == {"s": {"S": "HelloWorldUpdated"}}


def test_a_get_item_result_names_its_request_id_header_as_dynamodb_answers_it(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: test_dynamodb_task_service.snapshot.json,
    TestTaskServiceDynamoDB::test_base_integrations[DYNAMODB_PUT_GET_ITEM] (6 Nov 2025):
    putItem's headers hold x-amzn-RequestId, getItem's x-amzn-requestid (lower case)."""
    put = run({"Put": _dynamodb(engine, "putItem", Item={"pk": {"S": "g1"}})})
    got = run({"Get": _dynamodb(engine, "getItem", Key={"pk": {"S": "g1"}})})
    assert "x-amzn-RequestId" in put.output["SdkHttpMetadata"]["HttpHeaders"]
    headers = got.output["SdkHttpMetadata"]["HttpHeaders"]
    assert sorted(headers) == sorted(h.lower() if h == "x-amzn-RequestId" else h
                                     for h in DYNAMODB_HEADERS)  # fmt: skip
    assert list(got.output["SdkHttpMetadata"]["AllHttpHeaders"]).count("x-amzn-requestid") == 1


def _sdk(resource: str, **arguments: Any) -> dict[str, Any]:
    return {"Type": "Task", "Resource": f"arn:aws:states:::aws-sdk:{resource}",
            "Arguments": arguments, "End": True}  # fmt: skip


def test_an_sdk_update_item_answers_without_consumed_capacity(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: test_aws_sdk_task_service.snapshot.json,
    TestTaskServiceAwsSdk::test_dynamodb_put_update_get_item: aws-sdk:dynamodb:updateItem
    with ReturnValues UPDATED_NEW answers Attributes alone (no ConsumedCapacity)."""
    table = engine.ref("LedgerTable")
    update = _sdk("dynamodb:updateItem", TableName=table, Key={"pk": {"S": "u1"}},
                  UpdateExpression="SET s = :s", ReturnValues="UPDATED_NEW",
                  ExpressionAttributeValues={":s": {"S": "HelloWorldUpdated"}})  # fmt: skip
    result = run({"Update": update})
    assert sorted(result.output) == ["Attributes"]
    assert result.output["Attributes"]["s"] == {"S": "HelloWorldUpdated"}


NULL_MEMBER = (
    "1 validation error detected: Value null at '{}' failed to satisfy constraint: "
    "Member must not be null"
)


@pytest.mark.parametrize(
    ("action", "member"),
    [("putItem", "Item"), ("getItem", "Key"), ("deleteItem", "Key"), ("updateItem", "Key")],
)
def test_a_null_member_dynamodb_requires_is_refused_in_dynamodb_words(
    run: Run, engine: LocalEngine, action: str, member: str
) -> None:
    """Recorded: error_handling/test_task_service_dynamodb.snapshot.json and
    error_handling/test_aws_sdk.snapshot.json, test_invalid_param and
    test_dynamodb_invalid_param: a putItem whose Item is null fails with
    DynamoDB.AmazonDynamoDBException (optimised) or DynamoDb.DynamoDbException (aws-sdk),
    "1 validation error detected: Value null at 'item' failed to satisfy constraint:
    Member must not be null (Service: ...". The other actions' Key is the same rule
    (not recorded: DynamoDB's API reference marks Key required)."""
    words = NULL_MEMBER.format(member.lower())
    arguments = {"TableName": engine.ref("LedgerTable"), member: None}
    optimised = run({"Task": _dynamodb(engine, action, **{member: None})})
    assert optimised.error == "DynamoDB.AmazonDynamoDBException"
    assert (optimised.cause or "").startswith(
        f"{words} (Service: AmazonDynamoDBv2; Status Code: 400; Error Code: ValidationException;"
    )
    sdk = run({"Task": _sdk(f"dynamodb:{action}", **arguments)})
    assert sdk.error == "DynamoDb.DynamoDbException"
    assert (sdk.cause or "").startswith(f"{words} (Service: DynamoDb, Status Code: 400, ")


def test_a_table_name_dynamodb_cannot_hold_is_refused_in_validation(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: error_handling/test_task_service_dynamodb.snapshot.json,
    TestTaskServiceDynamoDB::test_put_item_invalid_table_name: a TableName "/..." fails
    with DynamoDB.AmazonDynamoDBException, "1 validation error detected: Value '/...' at
    'tableName' failed to satisfy constraint: Member must satisfy regular expression
    pattern: [a-zA-Z0-9_.-]+ (Service: AmazonDynamoDBv2; ..."."""
    task = _dynamodb(engine, "putItem", Item={"pk": {"S": "p"}}) | {}
    task["Arguments"]["TableName"] = "/no_such_table"
    result = run({"Put": task})
    assert result.error == "DynamoDB.AmazonDynamoDBException"
    assert (result.cause or "").startswith(
        "1 validation error detected: Value '/no_such_table' at 'tableName' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ "
        "(Service: AmazonDynamoDBv2; Status Code: 400; Error Code: ValidationException;"
    )


# ---- sqs -------------------------------------------------------------------------


def test_send_message_answers_with_the_sdk_metadata(run: Run, engine: LocalEngine) -> None:
    """Recorded: test_sqs_task_service.snapshot.json, TestTaskServiceSqs::test_send_message
    MD5OfMessageBody, MessageId, SdkHttpMetadata, SdkResponseMetadata."""
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage",
        "Arguments": {"QueueUrl": engine.ref("DeadLetterQueue"), "MessageBody": "hello"},
        "End": True,
    }
    result = run({"Send": task})
    assert sorted(result.output) == [
        "MD5OfMessageBody",
        "MessageId",
        "SdkHttpMetadata",
        "SdkResponseMetadata",
    ]
    headers = result.output["SdkHttpMetadata"]["HttpHeaders"]
    assert sorted(headers) == sorted(
        ["connection", "Content-Length", "Content-Type", "Date", "x-amzn-RequestId"]
    )
    assert events_of(result, "TaskSucceeded")


# ---- aws-sdk ---------------------------------------------------------------------


def test_an_aws_sdk_s3_error_is_named_for_s3(run: Run, engine: LocalEngine) -> None:
    """Recorded: error_handling/test_aws_sdk.snapshot.json, TestAwsSdk::test_s3_no_such_key:
    S3.NoSuchKeyException, "The specified key does not exist. (Service: S3, Status Code:
    404, Request ID: ..., Extended Request ID: ...)"."""
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::aws-sdk:s3:getObject",
        "Arguments": {"Bucket": engine.ref("IngestBucket"), "Key": "no_such_key.json"},
        "End": True,
    }
    result = run({"GetObject": task})
    assert result.error == "S3.NoSuchKeyException"
    # S3 answers every request with x-amz-request-id and x-amz-id-2, the Extended Request ID
    # (S3 API reference, Common Response Headers)
    assert re.fullmatch(
        r"The specified key does not exist\. \(Service: S3, Status Code: 404, "
        r"Request ID: [0-9A-Za-z]+, Extended Request ID: [A-Za-z0-9+/=]+\)",
        result.cause or "",
    ), result.cause


def test_an_aws_sdk_sqs_error_is_named_for_sqs_in_pascal_case(
    run: Run, engine: LocalEngine
) -> None:
    """Documented (Step Functions developer guide, supported-services-awssdk.html): an
    aws-sdk task's Error is "ServiceName.ErrorName", both in Pascal case (acmpca: AcmPca;
    recorded: DynamoDb., Sfn., S3.). The batch's DeleteInvalidMessage is aws-sdk:sqs. moto
    named it for the Resource's lower-case service: sqs. Not verified: the ErrorName AWS
    gives an error code the SDK does not model (the SDK's generic SqsException, perhaps)."""
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::aws-sdk:sqs:deleteMessage",
        "Arguments": {
            "QueueUrl": engine.ref("DeadLetterQueue") + "-no-such-queue",
            "ReceiptHandle": "no-such-receipt",
        },
        "End": True,
    }
    result = run({"Delete": task})
    assert (result.error or "").startswith("Sqs."), result.error


def test_a_dynamodb_request_refused_in_validation_is_an_amazon_dynamodb_exception(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: error_handling/test_task_service_dynamodb.snapshot.json,
    TestTaskServiceDynamoDB::test_invalid_param: a putItem without an Item fails with
    DynamoDB.AmazonDynamoDBException, "1 validation error detected: Value null at 'item'
    failed to satisfy constraint: Member must not be null (Service: AmazonDynamoDBv2;
    Status Code: 400; Error Code: ValidationException; Request ID: ...; Proxy: null)"."""
    result = run({"Put": _dynamodb(engine, "putItem")})
    assert result.error == "DynamoDB.AmazonDynamoDBException"
    assert (result.cause or "").startswith(
        "1 validation error detected: Value null at 'item' failed to satisfy constraint: "
        "Member must not be null (Service: AmazonDynamoDBv2; Status Code: 400; "
        "Error Code: ValidationException; Request ID: "
    )


def test_an_invalid_update_expression_is_an_amazon_dynamodb_exception(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded as above (test_invalid_param, test_put_item_invalid_table_name): DynamoDB's
    ValidationException reaches a dynamodb task as DynamoDB.AmazonDynamoDBException, its
    cause naming Error Code: ValidationException."""
    task = _dynamodb(
        engine, "updateItem", Key={"pk": {"S": "k"}}, UpdateExpression="SET a = :undefined"
    )
    result = run({"Update": task})
    assert result.error == "DynamoDB.AmazonDynamoDBException"
    assert "Error Code: ValidationException;" in (result.cause or "")


def test_send_message_without_a_body_is_an_amazon_sqs_exception(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: error_handling/test_task_service_sqs.snapshot.json,
    TestTaskServiceSqs::test_send_message_empty_body: SQS.AmazonSQSException, "The request
    must contain the parameter MessageBody. (Service: AmazonSQS; Status Code: 400; Error
    Code: MissingParameter; Request ID: ...; Proxy: null)"."""
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage",
        "Arguments": {"QueueUrl": engine.ref("DeadLetterQueue")},
        "End": True,
    }
    result = run({"Send": task})
    assert result.error == "SQS.AmazonSQSException"
    assert (result.cause or "").startswith(
        "The request must contain the parameter MessageBody. (Service: AmazonSQS; "
        "Status Code: 400; Error Code: MissingParameter; Request ID: "
    )


@pytest.mark.parametrize(
    ("body", "stored"),
    [("text data", '"text data"'), ({"Dict": "Value"}, '{"Dict":"Value"}'), (False, "false")],
)
def test_an_sdk_put_object_stores_the_body_as_json_text(
    run: Run, engine: LocalEngine, body: Any, stored: str
) -> None:
    """Recorded: test_aws_sdk_task_service.snapshot.json,
    TestTaskServiceAwsSdk::test_s3_put_object[str|dict|bool]: every Body succeeds, its
    JSON text stored (the str's ETag is the MD5 of '"text data"')."""
    bucket = engine.ref("IngestBucket")
    result = run({"Put": _sdk("s3:putObject", Bucket=bucket, Key="k", Body=body)})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    s3 = engine.client("s3")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read().decode() == stored


def test_an_sdk_get_object_answers_the_body_as_text(run: Run, engine: LocalEngine) -> None:
    """Recorded: test_aws_sdk_task_service.snapshot.json,
    TestTaskServiceAwsSdk::test_s3_get_object[str|binary]: Body is the object's text."""
    bucket = engine.ref("IngestBucket")
    engine.client("s3").put_object(Bucket=bucket, Key="g", Body=b"binary data")
    result = run({"Get": _sdk("s3:getObject", Bucket=bucket, Key="g")})
    assert result.output["Body"] == "binary data"


@pytest.mark.parametrize("action", ["sendTaskSuccess", "sendTaskFailure"])
def test_an_sdk_task_outcome_of_no_such_token_is_an_invalid_token_exception(
    run: Run, action: str
) -> None:
    """Recorded: test_aws_sdk_task_service.snapshot.json,
    TestTaskServiceAwsSdk::test_sfn_send_task_outcome_with_no_such_token: the TaskFailed
    is Sfn.InvalidTokenException, resource sendTaskSuccess, resourceType aws-sdk:sfn."""
    arguments = {"TaskToken": "NoSuchTaskToken"}
    if action == "sendTaskSuccess":
        arguments["Output"] = "ParameterOutput"
    result = run({"Send": _sdk(f"sfn:{action}", **arguments)})
    [failed] = events_of(result, "TaskFailed")
    assert (failed["error"], failed["resource"]) == ("Sfn.InvalidTokenException", action)
    assert failed["resourceType"] == "aws-sdk:sfn"


def test_s3_objects_are_encrypted_by_default_and_answer_as_aws_recorded(
    run: Run, engine: LocalEngine
) -> None:
    """Recorded: test_aws_sdk_task_service.snapshot.json, TestTaskServiceAwsSdk::
    test_s3_put_object[str]: ChecksumCRC32 "KUmHvQ==", ChecksumType FULL_OBJECT,
    ServerSideEncryption AES256; test_s3_get_object[str]: AES256 and no checksum. S3 User
    Guide (UsingServerSideEncryption.html): every new object is SSE-S3 since January 2023."""
    s3 = engine.client("s3")
    s3.create_bucket(Bucket="plain")  # no encryption configuration of its own
    put = run({"Put": _sdk("s3:putObject", Bucket="plain", Key="k", Body="text data")})
    assert put.status == "SUCCEEDED", (put.error, put.cause)
    assert {k: put.output[k] for k in ("ChecksumCRC32", "ChecksumType", "ServerSideEncryption")} \
        == {"ChecksumCRC32": "KUmHvQ==", "ChecksumType": "FULL_OBJECT",
            "ServerSideEncryption": "AES256"}  # fmt: skip
    got = run({"Get": _sdk("s3:getObject", Bucket="plain", Key="k")})
    assert got.output["ServerSideEncryption"] == "AES256"
    assert not [k for k in got.output if k.startswith("Checksum")]
    # a handler's boto3 client reads the same encryption, and its checksum when it asks
    assert s3.head_object(Bucket="plain", Key="k")["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket="plain", Key="k", ChecksumMode="ENABLED")["ChecksumCRC32"]
