"""Stock moto where AWS does otherwise: one minimal reproduction per fidelity patch.

Each test asserts what moto 5.2.5 does today, with the AWS behaviour beside it
(the patch's ``why`` cites the recording or page). When a moto release fixes
one, its test fails: delete the patch it names, and this test. The Step Functions
recordings are LocalStack's (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/, each test validated on AWS).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.asl.utils import boto_client

from tests.upstream.conftest import ROLE, Run

F = TypeVar("F", bound=Callable[..., Any])
REPRODUCED: dict[str, str] = {}  # fidelity patch name: the test reproducing it on stock moto
# Fidelity patches no test here can show on stock moto, and why.
UNREPRODUCIBLE = {
    "atomic single-item writes": "a race: two threads must interleave inside moto's PutItem; "
    "tests/unit/test_patches.py::test_concurrent_conditional_puts_have_exactly_one_winner "
    "shows it with the patch",
    "Distributed Map: ResultWriter": "stock moto's ResultWriter needs the other Distributed "
    "Map patches first (its children run only in STANDARD form without ItemBatcher)",
}
PASS = {"P": {"Type": "Pass", "End": True}}


def reproduces(*patches: str) -> Callable[[F], F]:
    def mark(test: F) -> F:
        for name in patches:
            REPRODUCED[name] = f"tests/upstream/test_stock_moto.py::{test.__name__}"
        return test

    return mark


def _described_at_its_end(sfn: Any, arn: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution did not end"
        time.sleep(0.05)
    return dict(described)


def _machine(sfn: Any, definition: dict[str, Any], name: str = "m") -> str:
    return str(
        sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=ROLE)[
            "stateMachineArn"
        ]
    )


@reproduces(
    "JSONata as Step Functions evaluates it",
    "evaluation failures in the history",
)
def test_jsonata_is_not_evaluated(run: Run) -> None:
    # AWS: Output "{% 1 + 2 %}" gives 3. moto leaves its JSONata hook unset (it expects
    # a JVM), so every JSONata state fails; the patch that refines JSONata's
    # evaluation failures can only be shown once this one is fixed.
    states = {"P": {"Type": "Pass", "Output": "{% 1 + 2 %}", "End": True}}
    result = run({"QueryLanguage": "JSONata", "StartAt": "P", "States": states})
    assert (result["status"], result["error"]) == ("FAILED", "States.Runtime")
    assert "'NoneType' object is not callable" in result["cause"]


@reproduces("string literals decoded as JSON")
def test_an_assigned_string_literal_keeps_its_json_escape(sfn: Any) -> None:
    # A definition is JSON (RFC 8259: "a\/b" is a/b), assignedVariables {"v": "\"a/b\""}; the
    # escape in Assign on AWS is not verified (LocalStack's BASE_CONSTANT_LITERALS has none).
    states = {"A": {"Type": "Pass", "Assign": {"v": "a/b"}, "End": True}}
    definition = json.dumps({"StartAt": "A", "States": states}).replace("a/b", "a\\/b")
    machine = sfn.create_state_machine(name="escaped", definition=definition, roleArn=ROLE)
    arn = sfn.start_execution(stateMachineArn=machine["stateMachineArn"])["executionArn"]
    _described_at_its_end(sfn, arn)
    events = sfn.get_execution_history(executionArn=arn)["events"]
    [exited] = [e["stateExitedEventDetails"] for e in events if e["type"] == "PassStateExited"]
    assert exited["assignedVariables"] == {"v": '"a\\/b"'}


@reproduces("a failed Parallel branch or Map iteration as AWS records it")
def test_a_parallel_branch_failing_with_a_states_error_is_not_caught(run: Run) -> None:
    # AWS: the Parallel state fails with States.Timeout and its Catch takes it.
    branch = {"StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "States.Timeout"}}}
    parallel = {"Type": "Parallel", "Branches": [branch], "End": True,
                "Catch": [{"ErrorEquals": ["States.Timeout"], "Next": "Caught"}]}  # fmt: skip
    result = run({"StartAt": "Par", "States": {"Par": parallel, "Caught": PASS["P"]}})
    assert (result["status"], result["error"]) == ("FAILED", "States.Runtime")


@reproduces("a failed Parallel branch or Map iteration as AWS records it")
def test_a_map_iteration_failing_with_a_states_error_fails_with_another(run: Run) -> None:
    # AWS: the Map fails with the iteration's States.Runtime and its cause (the path).
    processor = {
        "StartAt": "P",
        "States": {"P": {"Type": "Pass", "InputPath": "$.no", "End": True}},
    }
    states = {"M": {"Type": "Map", "ItemsPath": "$.v", "ItemProcessor": processor, "End": True}}
    result = run({"StartAt": "M", "States": states}, {"v": [{}]})
    assert result["cause"].endswith(
        "MUST NOT begin with the prefix 'States.', got 'States.Runtime'."
    )


@reproduces("Assign and Output read the variables as the state found them")
def test_an_output_path_reads_the_variable_its_own_state_assigns(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AWS (recorded: BASE_EVALUATION_ORDER_PASS_STATE): 42, the value at the state's entry.
    # moto reads a variable through its unset JSONata hook: here, one that reads only
    # "($a:=1;$a:=2;$a)", moto's composition of the declarations and a variable.
    def read_variable(expression: str) -> Any:
        *declarations, name = expression.strip("()").split(";")
        return json.loads(dict(d.split(":=", 1) for d in declarations)[name])

    monkeypatch.setattr(moto_jsonata, "_eval_jsonata", read_variable)
    first = {"Type": "Pass", "Assign": {"answer": 42}, "Next": "B"}
    second = {"Type": "Pass", "OutputPath": "$answer", "Assign": {"answer": "new"}, "End": True}
    result = run({"StartAt": "A", "States": {"A": first, "B": second}})
    assert result["output"].strip('"') == "new"  # moto writes a string output unquoted


@reproduces("history events linked as AWS links them")
def test_a_distributed_maps_exit_follows_its_map_run_success(run: Run) -> None:
    # AWS (recorded since November 2024): MapStateExited follows MapRunStarted, #4.
    processor = {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                 "StartAt": "P", "States": PASS}  # fmt: skip
    states = {"M": {"Type": "Map", "ItemsPath": "$.v", "ItemProcessor": processor, "End": True}}
    events = run({"StartAt": "M", "States": states}, {"v": [1]})["events"]
    kinds = [(e["type"], e["previousEventId"]) for e in events[3:7]]
    assert kinds == [("MapRunStarted", 3), ("MapRunSucceeded", 4), ("MapStateSucceeded", 5),
                     ("MapStateExited", 5)]  # fmt: skip


@reproduces("history events linked as AWS links them")
def test_a_failure_cause_names_the_last_event_not_the_states_entry(run: Run) -> None:
    # AWS: "(entered at the event id #2)", the MapStateEntered event.
    processor = {"StartAt": "P", "States": PASS}
    states = {"M": {"Type": "Map", "ItemsPath": "$.v", "OutputPath": "$.no", "End": True,
                    "ItemProcessor": processor}}  # fmt: skip
    result = run({"StartAt": "M", "States": states}, {"v": [1]})
    assert "'M' (entered at the event id #7)." in result["cause"]


@reproduces("execution input limit")
def test_an_input_over_256_kib_starts(sfn: Any) -> None:
    # AWS: StartExecution refuses it (ValidationException, InvalidExecutionInput).
    machine = _machine(sfn, {"StartAt": "P", "States": PASS})
    started = sfn.start_execution(stateMachineArn=machine, input=json.dumps({"a": "x" * 300_000}))
    assert started["executionArn"]


@reproduces("ListObjectVersions from a KeyMarker")
def test_list_object_versions_after_a_key_marker_lists_the_marker_key(sfn: Any) -> None:
    # AWS: KeyMarker "a" lists the versions of the keys after "a": b, b, c, c.
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="versions")
    s3.put_bucket_versioning(Bucket="versions", VersioningConfiguration={"Status": "Enabled"})
    for key in ("a", "b", "c"):
        for body in (b"1", b"2"):
            s3.put_object(Bucket="versions", Key=key, Body=body)
    listed = s3.list_object_versions(Bucket="versions", KeyMarker="a")["Versions"]
    assert [v["Key"] for v in listed] == ["a", "b", "b", "c", "c"]


@reproduces("S3 listings URL-encoded when asked")
def test_list_object_versions_of_a_control_character_key_fails(sfn: Any) -> None:
    # AWS: with EncodingType=url (botocore sends it on every listing and decodes the
    # answer) S3 URL-encodes each key, marker, prefix and delimiter it answers, so a key
    # XML 1.0 cannot hold ("characters with an ASCII value from 0 to 10") is listed.
    once = Config(retries={"total_max_attempts": 1})  # botocore retries a 500
    s3 = boto3.client("s3", region_name="us-east-1", config=once)
    s3.create_bucket(Bucket="versions")
    s3.put_bucket_versioning(Bucket="versions", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="versions", Key="ctl\x01.png", Body=b"1")
    # moto ignores EncodingType in ListObjectVersions, and its XML fails on the key: a 500
    with pytest.raises(ClientError) as listed:
        s3.list_object_versions(Bucket="versions")
    assert listed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    # ListObjectsV2 encodes keys, not StartAfter or Delimiter, which botocore then decodes
    answer = s3.list_objects_v2(Bucket="versions", StartAfter="a%2B", Delimiter="+")
    assert [o["Key"] for o in answer["Contents"]] == ["ctl\x01.png"]
    assert (answer["StartAfter"], answer["Delimiter"]) == ("a+", " ")


@reproduces("S3 Inventory configurations read back as put")
def test_an_inventory_configuration_reads_back_as_it_was_put(sfn: Any) -> None:
    # AWS: a listing answers IncludedObjectVersions "Current" and OptionalFields ["Size"].
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="listed")
    destination = {"S3BucketDestination": {"Bucket": "arn:aws:s3:::reports", "Format": "CSV"}}
    s3.put_bucket_inventory_configuration(Bucket="listed", Id="i", InventoryConfiguration={
        "Id": "i", "IsEnabled": True, "Destination": destination,
        "Schedule": {"Frequency": "Daily"}, "IncludedObjectVersions": "Current",
        "OptionalFields": ["Size"]})  # fmt: skip
    answer = s3.list_bucket_inventory_configurations(Bucket="listed")
    (listed,) = answer["InventoryConfigurationList"]
    assert (listed["IncludedObjectVersions"], listed["OptionalFields"]) == ("All", ["Field"])
    # AWS (recorded, LocalStack's test_s3_inventory_report_crud): an unknown Id is 404
    # NoSuchConfiguration, "The specified configuration does not exist."
    with pytest.raises(ClientError, match="NoSuchInventoryConfig"):
        s3.get_bucket_inventory_configuration(Bucket="listed", Id="unknown")
    # AWS: DeleteBucketInventoryConfiguration "Deletes an S3 Inventory configuration
    # (identified by the inventory ID) from the bucket" (S3 API reference); moto has no
    # such operation and deletes the (empty) bucket instead.
    s3.delete_bucket_inventory_configuration(Bucket="listed", Id="i")
    assert "listed" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@reproduces("S3 objects encrypted by default, with their checksum type and request ids")
def test_an_s3_object_is_encrypted_by_default(sfn: Any) -> None:
    # AWS: ServerSideEncryption AES256 on PutObject, HeadObject and GetObject; PutObject with
    # a CRC32 answers ChecksumType FULL_OBJECT; aws-sdk:s3:getObject answers no checksum.
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="plain")
    put = s3.put_object(Bucket="plain", Key="k", Body=b"text data", ChecksumAlgorithm="CRC32")
    assert "ChecksumCRC32" in put
    assert "ChecksumType" not in put and "ServerSideEncryption" not in put
    assert "ServerSideEncryption" not in s3.head_object(Bucket="plain", Key="k")
    # AWS: every response carries x-amz-request-id and x-amz-id-2 (botocore's HostId)
    assert "HostId" not in put["ResponseMetadata"]
    # The client moto's Step Functions calls S3 with asks for the checksum (botocore's
    # default), which GetObject then answers; stock, the task fails before (LastModified).
    client = boto_client.boto_client_for("us-east-1", "s3")
    assert client.meta.config.response_checksum_validation == "when_supported"


@reproduces("EXPRESS execution ARNs")
def test_an_express_execution_has_the_standard_arn(sfn: Any) -> None:
    # AWS: arn:aws:states:<region>:<account>:express:<machine>:<name>:<id>.
    machine = sfn.create_state_machine(
        name="fast", definition=json.dumps({"StartAt": "P", "States": PASS}), roleArn=ROLE,
        type="EXPRESS",
    )["stateMachineArn"]  # fmt: skip
    arn = sfn.start_execution(stateMachineArn=machine, name="run")["executionArn"]
    assert arn == "arn:aws:states:us-east-1:123456789012:execution:fast:run"
    # AWS: a second EXPRESS execution of one name starts ("Starting multiple workflows with
    # the same name results in concurrent executions": express-at-least-once-execution.html).
    with pytest.raises(ClientError) as refused:
        sfn.start_execution(stateMachineArn=machine, name="run", input='{"again": true}')
    assert refused.value.response["Error"]["Code"] == "ExecutionAlreadyExists"


@reproduces("definitions judged as CreateStateMachine judges them")
def test_a_state_name_used_twice_is_accepted(sfn: Any) -> None:
    # AWS: InvalidDefinition (DUPLICATE_STATE_NAME) for the branch's "A", and a refused
    # definition's error is named InvalidDefinition; moto names none.
    branch = {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True}}}
    definition = {"StartAt": "A", "States": {"A": {"Type": "Parallel", "Branches": [branch],
                                                  "End": True}}}  # fmt: skip
    assert _machine(sfn, definition, "twice")
    with pytest.raises(ClientError) as refused:
        sfn.create_state_machine(name="bad", definition="{}", roleArn=ROLE)
    assert refused.value.response["Error"]["Code"] == ""


@reproduces("definitions judged as CreateStateMachine judges them")
def test_a_refused_jsonata_definition_makes_the_next_jsonpath_one_refused(sfn: Any) -> None:
    # AWS: each definition is judged alone; the second one is valid JSONPath.
    states = {"P": {"Type": "Pass", "ResultPath": "$.x", "End": True}}
    with pytest.raises(ClientError):
        _machine(sfn, {"QueryLanguage": "JSONata", "StartAt": "P", "States": states}, "refused")
    with pytest.raises(ClientError, match="Unsupported declaration in QueryLanguage=JSONPath"):
        _machine(sfn, {"StartAt": "P", "States": states}, "fine")


@reproduces("a Map's non-array input named as JSON")
def test_a_map_over_a_number_names_a_python_class(run: Run) -> None:
    # AWS: "Map state input must be an array but was: 1".
    processor = {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": "P", "States": PASS}
    states = {"M": {"Type": "Map", "ItemsPath": "$.v", "ItemProcessor": processor, "End": True}}
    result = run({"StartAt": "M", "States": states}, {"v": 1})
    assert result["cause"].endswith("Map state input must be an array but was: <class 'int'>")


_MISSING_OBJECT = {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:s3:getObject",
                   "Parameters": {"Bucket": "missing", "Key": "k"}, "End": True}  # fmt: skip


@reproduces(
    "a failed Parallel branch or Map iteration as AWS records it",
    "integration errors as AWS names them",
)
def test_a_failed_sdk_task_is_named_s3_and_its_branch_not_aborted(run: Run) -> None:
    # AWS: S3.NoSuchBucketException; in a Parallel branch, TaskFailed then TaskStateAborted.
    alone = run({"StartAt": "T", "States": {"T": _MISSING_OBJECT}})
    assert alone["error"] == "s3.NoSuchBucketException"
    branch = {"StartAt": "T", "States": {"T": _MISSING_OBJECT}}
    par = {"Type": "Parallel", "Branches": [branch], "End": True}
    parallel = run({"StartAt": "Par", "States": {"Par": par}})
    kinds = [e["type"] for e in parallel["events"]]
    assert kinds[kinds.index("TaskFailed") + 1] == "ParallelStateFailed"


@reproduces("integration errors as AWS names them")
def test_a_missing_function_is_named_without_latest(run: Run) -> None:
    # AWS: "Function not found: arn:aws:lambda:...:function:nope:$LATEST (Service: AWSLambda; ...".
    task = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "nope"}, "End": True}  # fmt: skip
    result = run({"StartAt": "T", "States": {"T": task}})
    assert result["error"] == "Lambda.ResourceNotFoundException"
    assert "function:nope (Service: AWSLambda" in result["cause"]


def _table() -> None:
    boto3.client("dynamodb", region_name="us-east-1").create_table(
        TableName="t", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )  # fmt: skip


def _put(item: dict[str, Any] | None) -> dict[str, Any]:
    return {"StartAt": "T", "States": {"T": {
        "Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
        "Parameters": {"TableName": "t", "Item": item}, "End": True}}}  # fmt: skip


@reproduces("integration results with the SDK's metadata")
def test_a_put_item_task_result_has_no_sdk_metadata(run: Run) -> None:
    # AWS: {"SdkHttpMetadata": {...}, "SdkResponseMetadata": {"RequestId": ...}}.
    _table()
    assert json.loads(run(_put({"pk": {"S": "a"}}))["output"]) == {}


@reproduces("integration errors as AWS names them")
def test_a_put_item_refused_in_validation_is_a_validation_exception(run: Run) -> None:
    # AWS: DynamoDB.AmazonDynamoDBException, "One or more parameter values were invalid: ...".
    _table()
    assert run(_put({"other": {"S": "a"}}))["error"] == "DynamoDB.ValidationException"


@reproduces("integration results with the SDK's metadata")
def test_an_update_item_answers_consumed_capacity_unasked(sfn: Any) -> None:
    # AWS: ConsumedCapacity only with ReturnConsumedCapacity TOTAL or INDEXES.
    _table()
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    answer = dynamodb.update_item(TableName="t", Key={"pk": {"S": "a"}},
                                  UpdateExpression="SET v = :v",
                                  ExpressionAttributeValues={":v": {"S": "x"}})  # fmt: skip
    assert answer["ConsumedCapacity"] == {"TableName": "t", "CapacityUnits": 0.5}


@reproduces("integration results with the SDK's metadata")
def test_an_sdk_put_object_of_a_json_body_fails(run: Run) -> None:
    # AWS: a Body given as JSON is stored as its JSON text, '{"a":1}'.
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bkt")
    task = {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:s3:putObject",
            "Parameters": {"Bucket": "bkt", "Key": "k", "Body": {"a": 1}}, "End": True}  # fmt: skip
    result = run({"StartAt": "T", "States": {"T": task}})
    assert result["error"] == "States.Runtime"
    assert result["cause"].endswith("'dict' object has no attribute 'read'")


@reproduces("integration errors as AWS names them")
def test_a_put_item_of_a_null_item_fails_in_pythons_words(run: Run) -> None:
    # AWS: "1 validation error detected: Value null at 'item' failed to satisfy constraint:
    # Member must not be null (Service: AmazonDynamoDBv2; ..." (the SDK leaves the null out).
    _table()
    result = run(_put(None))
    assert result["error"] == "DynamoDB.AmazonDynamoDBException"
    assert result["cause"] == "'NoneType' object has no attribute 'items'"


@reproduces("integration errors as AWS names them")
def test_send_message_without_a_body_is_a_runtime_error(run: Run) -> None:
    # AWS: SQS.AmazonSQSException naming the service, status, error code and request id.
    queue = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="q")["QueueUrl"]
    task = {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage",
            "Parameters": {"QueueUrl": queue}, "End": True}  # fmt: skip
    result = run({"StartAt": "T", "States": {"T": task}})
    assert result["error"] == "States.Runtime"
    assert result["cause"].endswith("object of type 'NoneType' has no len()")


@reproduces("the context object's Execution")
def test_an_output_holding_the_context_objects_execution_cannot_be_described(sfn: Any) -> None:
    # AWS: $$.Execution.StartTime is ISO 8601 text, RedriveCount 0; moto holds a datetime,
    # and DescribeExecution of an execution whose output holds it raises.
    states = {"P": {"Type": "Pass", "Parameters": {"e.$": "$$.Execution"}, "End": True}}
    machine = _machine(sfn, {"StartAt": "P", "States": states})
    arn = sfn.start_execution(stateMachineArn=machine, name="ctx")["executionArn"]
    with pytest.raises(TypeError, match="datetime is not JSON serializable"):
        _described_at_its_end(sfn, arn)


@reproduces("executions as the Step Functions API answers for them")
def test_describe_execution_has_no_input_details_nor_redrive_fields(run: Run) -> None:
    # AWS: inputDetails {"included": true}, redriveCount 0, redriveStatus NOT_REDRIVABLE.
    described = run({"StartAt": "P", "States": PASS})
    assert {"inputDetails", "redriveCount", "redriveStatus"}.isdisjoint(described)


@reproduces("executions as the Step Functions API answers for them")
def test_an_express_execution_is_described(run: Run) -> None:
    # AWS: InvalidArn, "Invalid Arn: 'Resource type not valid in this context: express'"
    # (test_sfn_api_express.snapshot.json, test_start_async_describe_history_execution).
    assert run({"StartAt": "P", "States": PASS}, kind="EXPRESS")["status"] == "SUCCEEDED"


@reproduces("executions as the Step Functions API answers for them")
def test_an_express_execution_is_listed_and_its_history_read(run: Run, sfn: Any) -> None:
    # AWS: GetExecutionHistory answers InvalidArn, "Invalid Arn: 'Resource type not valid
    # in this context: express'"; ListExecutions of an EXPRESS state machine answers
    # StateMachineTypeNotSupported, "This operation is not supported by this type of
    # state machine" (test_sfn_api_express.snapshot.json,
    # test_start_async_describe_history_execution).
    described = run({"StartAt": "P", "States": PASS}, kind="EXPRESS")
    assert described["events"][-1]["type"] == "ExecutionSucceeded"
    listed = sfn.list_executions(stateMachineArn=described["stateMachineArn"])["executions"]
    assert [e["executionArn"] for e in listed] == [described["executionArn"]]


def _distributed(**fields: Any) -> dict[str, Any]:
    config = {"Mode": "DISTRIBUTED", "ExecutionType": fields.pop("ExecutionType", "STANDARD")}
    processor = {"ProcessorConfig": config, "StartAt": "P", "States": PASS}
    return {"StartAt": "M", "States": {"M": {"Type": "Map", "ItemProcessor": processor,
                                             "End": True, **fields}}}  # fmt: skip


@reproduces("Distributed Map: listObjectsV2 items")
def test_a_listing_map_cannot_be_described(sfn: Any) -> None:
    # AWS: one item per object under the prefix; moto's items hold datetimes.
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="listed")
    s3.put_object(Bucket="listed", Key="k", Body=b"1")
    reader = {"Resource": "arn:aws:states:::s3:listObjectsV2", "Parameters": {"Bucket": "listed"}}
    machine = _machine(sfn, _distributed(ItemReader=reader))
    arn = sfn.start_execution(stateMachineArn=machine, name="listing")["executionArn"]
    with pytest.raises(TypeError, match="datetime is not JSON serializable"):
        _described_at_its_end(sfn, arn)


@pytest.mark.parametrize(
    ("patch", "fields", "refused"),
    [
        ("Distributed Map: EXPRESS children", {"ExecutionType": "EXPRESS"}, "EXPRESS"),
        ("Distributed Map: ItemBatcher", {"ItemBatcher": {"MaxItemsPerBatch": 2}}, "ItemBatcher"),
        ("Distributed Map: tolerated failures", {"ToleratedFailurePercentage": 60}, "60"),
    ],
)  # fmt: skip
def test_a_distributed_map_field_aws_takes_is_refused(
    sfn: Any, patch: str, fields: dict[str, Any], refused: str
) -> None:
    # AWS takes each (the patch's why cites the page); moto's ASL parser refuses it.
    assert REPRODUCED[patch].endswith(test_a_distributed_map_field_aws_takes_is_refused.__name__)
    with pytest.raises(ClientError, match=refused):
        _machine(sfn, _distributed(**fields))


for _name in (
    "EXPRESS children",
    "ItemBatcher",
    "tolerated failures",
):
    REPRODUCED[f"Distributed Map: {_name}"] = (
        "tests/upstream/test_stock_moto.py::test_a_distributed_map_field_aws_takes_is_refused"
    )


@reproduces("state fields AWS cannot use fail as AWS records")
def test_a_timeout_path_that_finds_nothing_is_caught(run: Run) -> None:
    # AWS: the execution fails at the Task's entry (States.Runtime), which no Catch takes.
    task = {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:s3:listBuckets",
            "Parameters": {}, "TimeoutSecondsPath": "$.none", "End": True,
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}]}  # fmt: skip
    result = run({"StartAt": "T", "States": {"T": task, "Caught": {"Type": "Succeed"}}})
    assert result["status"] == "SUCCEEDED"


@reproduces("no Retry or Catch takes States.Runtime")
def test_a_catch_on_states_all_takes_a_states_runtime_error(run: Run) -> None:
    # AWS: no Retry or Catch takes States.Runtime, the execution fails at the Task. moto
    # names a context path the Parameters miss States.Runtime, and its Catch takes it.
    task = {"Type": "Task", "Resource": "arn:aws:states:::aws-sdk:s3:listBuckets",
            "Parameters": {"value.$": "$$.Execution.Input.no_such_jsonpath"},
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}], "End": True}  # fmt: skip
    result = run({"StartAt": "T", "States": {"T": task, "Caught": PASS["P"]}})
    assert result["status"] == "SUCCEEDED"
    assert result["events"][2]["taskFailedEventDetails"]["error"] == "States.Runtime"


@reproduces("executions as the Step Functions API answers for them")
def test_an_unnamed_execution_is_named_none(sfn: Any) -> None:
    # AWS: StartExecution without a name names the execution by a UUID (moto: "None",
    # and a second unnamed start is refused with ExecutionAlreadyExists).
    machine = _machine(sfn, {"StartAt": "P", "States": PASS}, name="unnamed")
    arn = sfn.start_execution(stateMachineArn=machine)["executionArn"]
    assert arn.endswith(":unnamed:None")
    # AWS refuses a name with white space or a special character (InvalidName) and one
    # over 80 characters (API reference, StartExecution: name); moto's parser starts them.
    for name in ("bad name!", "a/b", "n" * 81):
        started = sfn.start_execution(stateMachineArn=machine, name=name)["executionArn"]
        assert started.endswith(f":unnamed:{name}")


@reproduces("the Step Functions API's answers and refusals")
def test_the_api_answers_and_refuses_otherwise_than_aws(run: Run, sfn: Any) -> None:
    # AWS (test_sfn_api.snapshot.json): ListExecutions lists redriveCount 0 and refuses
    # statusFilter "succeeded" (ValidationException); GetExecutionHistory with reverseOrder
    # starts from ExecutionSucceeded; DescribeStateMachine's loggingConfiguration holds
    # includeExecutionData false; a second CreateStateMachine of one name with another
    # definition is StateMachineAlreadyExists; "not_a_valid_arn" is "Invalid Arn: 'Invalid
    # ARN prefix: not_a_valid_arn'"; an input "not some json" is "Invalid State Machine
    # Execution Input: 'Unrecognized token 'not': ...'".
    described = run({"StartAt": "P", "States": PASS})
    machine = described["stateMachineArn"]
    [listed] = sfn.list_executions(stateMachineArn=machine, statusFilter="SUCCEEDED")["executions"]
    assert "redriveCount" not in listed
    assert (
        sfn.list_executions(stateMachineArn=machine, statusFilter="succeeded")["executions"] == []
    )
    events = sfn.get_execution_history(executionArn=described["executionArn"], reverseOrder=True)
    assert events["events"][0]["type"] == "ExecutionStarted"
    logging = sfn.describe_state_machine(stateMachineArn=machine)["loggingConfiguration"]
    assert "includeExecutionData" not in logging
    name = machine.rsplit(":", 1)[-1]
    other = json.dumps({"StartAt": "Q", "States": {"Q": {"Type": "Pass", "End": True}}})
    again = sfn.create_state_machine(name=name, definition=other, roleArn=ROLE)
    assert again["stateMachineArn"] == machine
    with pytest.raises(ClientError, match="Invalid State Machine Arn: 'not_a_valid_arn'"):
        sfn.describe_state_machine(stateMachineArn="not_a_valid_arn")
    with pytest.raises(ClientError, match=r"operation: Expecting value: line 1 column 1"):
        sfn.start_execution(stateMachineArn=machine, input="not some json")


@reproduces("the Step Functions API's answers and refusals")
def test_a_stop_answers_no_stop_date_and_drops_its_error_and_cause(sfn: Any) -> None:
    # AWS (test_stop_execution): StopExecution answers a stopDate; ExecutionAborted holds the
    # error and cause the stop gave, and {} without them. moto: no stopDate, "" for both.
    waiting = {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 60, "End": True}}}
    machine = _machine(sfn, waiting, name="stopped")
    arn = sfn.start_execution(stateMachineArn=machine, name="stopped")["executionArn"]
    deadline = time.monotonic() + 20
    while "WaitStateEntered" not in [
        e["type"] for e in sfn.get_execution_history(executionArn=arn)["events"]
    ]:
        assert time.monotonic() < deadline, "the execution never waited"
        time.sleep(0.05)
    assert "stopDate" not in sfn.stop_execution(executionArn=arn, error="E", cause="C")
    while (events := sfn.get_execution_history(executionArn=arn)["events"])[-1]["type"] != (
        "ExecutionAborted"
    ):
        assert time.monotonic() < deadline, "the execution never stopped"
        time.sleep(0.05)
    assert events[-1]["executionAbortedEventDetails"] == {"error": "", "cause": ""}


@reproduces("the Step Functions API's answers and refusals")
def test_a_history_shows_the_end_before_the_status_does(
    sfn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AWS: once GetExecutionHistory ends in ExecutionSucceeded, DescribeExecution says
    # SUCCEEDED (LocalStack's await_execution_success, then test_describe_execution). moto
    # writes the event, then sets the status: with that step slowed, RUNNING is seen.
    from moto.stepfunctions.parser.backend import execution

    reflect = execution.BaseExecutionWorkerCommunication._reflect_execution_status

    def slowly(self: Any) -> None:
        time.sleep(0.3)
        reflect(self)

    monkeypatch.setattr(
        execution.BaseExecutionWorkerCommunication, "_reflect_execution_status", slowly
    )
    arn = sfn.start_execution(stateMachineArn=_machine(sfn, {"StartAt": "P", "States": PASS}),
                              name="ended")["executionArn"]  # fmt: skip
    deadline = time.monotonic() + 20
    while not (events := sfn.get_execution_history(executionArn=arn)["events"]) or (
        events[-1]["type"] != "ExecutionSucceeded"
    ):
        assert time.monotonic() < deadline, "the execution did not end"
        time.sleep(0.01)
    assert sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"


@reproduces("the Step Functions API's answers and refusals")
def test_a_state_machine_is_described_without_its_variable_references(sfn: Any) -> None:
    # AWS (test_sfn_api_variable_references, BASE_EVALUATION_ORDER_PASS_STATE):
    # variableReferences {"State1": ["answer"]}; moto's parser finds them, its answer omits.
    states = {
        "State0": {"Type": "Pass", "Assign": {"answer": 42}, "Next": "State1"},
        "State1": {"Type": "Pass", "InputPath": "$answer", "End": True},
    }
    machine = _machine(sfn, {"StartAt": "State0", "States": states}, name="references")
    assert "variableReferences" not in sfn.describe_state_machine(stateMachineArn=machine)


@reproduces("the Step Functions API's answers and refusals")
def test_a_sync_execution_is_not_implemented(sfn: Any) -> None:
    # AWS (express/test_express_sync, test_sfn_api's test_start_sync_execution): an EXPRESS
    # state machine's execution answered at its end; a STANDARD one refused with
    # StateMachineTypeNotSupported. moto: 404 for both (sync-states.* is no URL of its).
    machine = _machine(sfn, {"StartAt": "P", "States": PASS}, name="synced")
    with pytest.raises(ClientError, match=r"\(404\).*Not yet implemented"):
        sfn.start_sync_execution(stateMachineArn=machine)


@reproduces("the Step Functions API's answers and refusals")
def test_a_stop_as_the_execution_starts_fails(sfn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # AWS: StopExecution aborts a running execution. moto's worker makes the execution's
    # environment on its own thread; a stop before that (here slowed) fails inside moto.
    from moto.stepfunctions.parser.backend import execution_worker

    entry = execution_worker.ExecutionWorker._get_evaluation_entrypoint

    def slowly(self: Any) -> Any:
        time.sleep(0.3)
        return entry(self)

    monkeypatch.setattr(execution_worker.ExecutionWorker, "_get_evaluation_entrypoint", slowly)
    machine = _machine(sfn, {"StartAt": "P", "States": PASS}, name="stopping")
    arn = sfn.start_execution(stateMachineArn=machine, name="stopping")["executionArn"]
    with pytest.raises(AttributeError, match="set_stop"):
        sfn.stop_execution(executionArn=arn)


@reproduces("the Step Functions API's answers and refusals")
def test_an_express_callback_task_and_a_long_listing_are_taken(sfn: Any) -> None:
    # AWS (test_sfn_api_express, test_illegal_callbacks[WAIT_FOR_TASK_TOKEN]): InvalidDefinition,
    # "Express state machine does not support '.waitForTaskToken' service integration ...";
    # (test_list_sms_pagination) ListStateMachines maxResults 1001: ValidationException.
    task = {"Type": "Task", "Resource": "arn:aws:states:::sns:publish.waitForTaskToken",
            "Parameters": {"TopicArn": "t", "Message.$": "$$.Task.Token"}, "End": True}  # fmt: skip
    created = sfn.create_state_machine(
        name="callback", definition=json.dumps({"StartAt": "T", "States": {"T": task}}),
        roleArn=ROLE, type="EXPRESS",
    )  # fmt: skip
    assert created["stateMachineArn"].endswith(":callback")
    assert sfn.list_state_machines(maxResults=1001)["stateMachines"]


@reproduces("the Step Functions API's answers and refusals")
def test_an_execution_history_comes_in_one_page(run: Run) -> None:
    # AWS (GetExecutionHistory, maxResults: "The default is 100"): pages of 100 events and a
    # nextToken; moto answers all 246 events of this Map at once.
    processor = {"StartAt": "P", "States": PASS}
    states = {"M": {"Type": "Map", "ItemsPath": "$.items", "ItemProcessor": processor,
                    "End": True}}  # fmt: skip
    described = run({"StartAt": "M", "States": states}, {"items": list(range(60))})
    assert len(described["events"]) > 200
