"""The optimised Lambda, DynamoDB and SQS integrations answer as AWS recorded them.

On AWS a request-response task's result is the SDK's response object: the
service's fields, plus SdkHttpMetadata (the HTTP headers and status) and
SdkResponseMetadata (the request id), and for lambda:invoke the
ExecutedVersion. That is about 600 to 900 bytes a task, which the 256 KiB state
limit and the state machines' size guards count. moto answered the bare service
response (and DynamoDB's ConsumedCapacity, which AWS leaves out unless asked).
Recorded in LocalStack's suite (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/services/): test_lambda_task_service,
test_dynamodb_task_service and test_sqs_task_service snapshots.
"""

from __future__ import annotations

import email.utils
import json
import random
import string
import uuid
import zlib
from typing import Any

from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
    state_task_service_aws_sdk,
    state_task_service_dynamodb,
    state_task_service_lambda,
    state_task_service_sqs,
)

from onceflow.local.patches.registry import Installer, Patch

_Service = state_task_service.StateTaskService
_Lambda = state_task_service_lambda.StateTaskServiceLambda
_DynamoDB = state_task_service_dynamodb.StateTaskServiceDynamoDB
_Sqs = state_task_service_sqs.StateTaskServiceSqs
_original_after = _Service._after_eval_execution
_original_lambda_error = _Lambda._error_cause_from_client_error
_original_dynamodb_error = _DynamoDB._error_cause_from_client_error
_original_dynamodb_from_error = _DynamoDB._from_error
_original_sqs_from_error = _Sqs._from_error

JSON_1_0 = "application/x-amz-json-1.0"
SQS_SERVICE_ERROR = "SQS.AmazonSQSException"


def _dynamodb_request_id() -> str:
    return "".join(random.choices(string.ascii_uppercase + string.digits, k=52))


def _trace_id() -> str:
    def hexes(n: int) -> str:
        return uuid.uuid4().hex[:n]

    root = f"Root=1-{hexes(8)}-{uuid.uuid4().hex[:24]}"
    return f"{root};Parent={hexes(16)};Sampled=0;Lineage=1:{hexes(8)}:0"


def sdk_metadata(headers: dict[str, str], request_id: str) -> dict[str, Any]:
    """SdkHttpMetadata and SdkResponseMetadata as the Java SDK behind Step Functions
    writes them: every header once as a list (AllHttpHeaders) and once as a value."""
    return {
        "SdkHttpMetadata": {
            "AllHttpHeaders": {name: [value] for name, value in headers.items()},
            "HttpHeaders": dict(sorted(headers.items(), key=lambda item: item[0].lower())),
            "HttpStatusCode": 200,
        },
        "SdkResponseMetadata": {"RequestId": request_id},
    }


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _lambda_result(output: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    name = str(parameters.get("FunctionName", ""))
    qualifier = parameters.get("Qualifier") or (
        name.split(":")[7] if name.count(":") == 7 else None
    )
    version = str(qualifier) if qualifier and str(qualifier).isdigit() else "$LATEST"
    request_id = str(uuid.uuid4())
    body = json.dumps(output.get("Payload"))
    headers = {
        "Connection": "keep-alive",
        "Content-Length": str(len(body.encode())),
        "Content-Type": "application/json",
        "Date": email.utils.formatdate(usegmt=True),
        "X-Amz-Executed-Version": version,
        "x-amzn-Remapped-Content-Length": "0",
        "x-amzn-RequestId": request_id,
        "X-Amzn-Trace-Id": _trace_id(),
    }
    return {**output, "ExecutedVersion": version, **sdk_metadata(headers, request_id)}


def _dynamodb_result(output: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    if parameters.get("ReturnConsumedCapacity", "NONE") == "NONE":
        output = {k: v for k, v in output.items() if k != "ConsumedCapacity"}
    body = _compact(output).encode()
    request_id = _dynamodb_request_id()
    headers = {
        "Connection": "keep-alive",
        "Content-Length": str(len(body)),
        "Content-Type": JSON_1_0,
        "Date": email.utils.formatdate(usegmt=True),
        "Server": "Server",
        "x-amz-crc32": str(zlib.crc32(body)),
        "x-amzn-RequestId": request_id,
    }
    return {**output, **sdk_metadata(headers, request_id)}


def _sqs_result(output: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    request_id = str(uuid.uuid4())
    headers = {
        "connection": "keep-alive",
        "Content-Length": str(len(_compact(output).encode())),
        "Content-Type": JSON_1_0,
        "Date": email.utils.formatdate(usegmt=True),
        "x-amzn-RequestId": request_id,
    }
    return {**output, **sdk_metadata(headers, request_id)}


_RESULTS = ((_Lambda, _lambda_result), (_DynamoDB, _dynamodb_result), (_Sqs, _sqs_result))


def _after_eval_execution(
    self: Any,
    env: Any,
    resource_runtime_part: Any,
    normalised_parameters: Any,
    state_credentials: Any,
) -> None:
    output = env.stack[-1] if env.stack else None
    # Only a request-response task answers with the SDK's response; a callback's
    # or a .sync's result is what the worker or the job returned.
    if isinstance(output, dict) and self.resource.condition is None:
        for kind, result in _RESULTS:
            if isinstance(self, kind):
                whole = result(output, dict(normalised_parameters or {}))
                env.stack[-1] = dict(sorted(whole.items()))
                break
    _original_after(self, env, resource_runtime_part, normalised_parameters, state_credentials)


def _lambda_error(client_error: Any) -> tuple[str, str]:
    """Lambda names a missing function by its unqualified ARN with :$LATEST.

    Recorded: test_task_service_lambda.snapshot.json, test_no_such_function
    (tests/aws/services/stepfunctions/v2/error_handling/)."""
    error, cause = _original_lambda_error(client_error)
    prefix = "Function not found: "
    if error == "Lambda.ResourceNotFoundException" and cause.startswith(prefix):
        arn, _, rest = cause[len(prefix) :].partition(" ")
        if arn.count(":") == 6:  # arn:aws:lambda:REGION:ACCOUNT:function:NAME, no qualifier
            cause = f"{prefix}{arn}:$LATEST {rest}"
    return error, cause


# aws-sdk errors are named for the service as Step Functions spells it
# (recorded: LocalStack's test_aws_sdk snapshot: S3.NoSuchKeyException,
# SecretsManager.SecretsManagerException); moto knew only DynamoDb and Sfn.
SDK_ERROR_NAMES = {
    "dynamodb": "DynamoDb",
    "sfn": "Sfn",
    "s3": "S3",
    "secretsmanager": "SecretsManager",
}


def _install_sdk_error_names(installer: Installer) -> None:
    installer.replace(state_task_service_aws_sdk, "_SERVICE_ERROR_NAMES", SDK_ERROR_NAMES)


def _sdk_error_names_fit() -> list[str]:
    if not isinstance(getattr(state_task_service_aws_sdk, "_SERVICE_ERROR_NAMES", None), dict):
        return ["the aws-sdk integration no longer names errors from _SERVICE_ERROR_NAMES"]
    return []


# DynamoDB's ValidationException is not one of the SDK's modelled errors: a
# dynamodb task names it DynamoDB.AmazonDynamoDBException (recorded: LocalStack's
# test_task_service_dynamodb snapshot, test_invalid_param and
# test_put_item_invalid_table_name), its cause keeping "Error Code: ValidationException".
AMAZON_DYNAMODB_EXCEPTION = "DynamoDB.AmazonDynamoDBException"


def _dynamodb_error(client_error: Any) -> tuple[str, str]:
    error, cause = _original_dynamodb_error(client_error)
    if error == "DynamoDB.ValidationException":
        error = AMAZON_DYNAMODB_EXCEPTION
    return error, cause


def _dynamodb_from_error(self: Any, env: Any, ex: Exception) -> Any:
    """A request without a member DynamoDB requires is refused in validation; moto's
    handler met it as a KeyError and reported "'Item'". A failure the state itself
    raised (an expression of its Arguments, States.QueryEvaluationError) stays what it
    is, as for every other state; moto named it DynamoDB.AmazonDynamoDBException."""
    if isinstance(ex, FailureEventException):
        return ex.failure_event
    if isinstance(ex, KeyError) and ex.args and isinstance(ex.args[0], str):
        member = ex.args[0][:1].lower() + ex.args[0][1:]
        message = (
            f"1 validation error detected: Value null at '{member}' failed to satisfy "
            "constraint: Member must not be null"
        )
        response: Any = {
            "Error": {"Code": "ValidationException", "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": _dynamodb_request_id()},
        }
        ex = ClientError(response, self._get_boto_service_action())
    return _original_dynamodb_from_error(self, env, ex)


def _install_dynamodb_errors(installer: Installer) -> None:
    installer.replace(_DynamoDB, "_error_cause_from_client_error", staticmethod(_dynamodb_error))
    installer.replace(_DynamoDB, "_from_error", _dynamodb_from_error)


def _dynamodb_errors_fit() -> list[str]:
    missing = [
        name
        for name in ("_error_cause_from_client_error", "_from_error")
        if name not in vars(_DynamoDB)
    ]
    return [f"StateTaskServiceDynamoDB.{name} is gone" for name in missing]


def _sqs_from_error(self: Any, env: Any, ex: Exception) -> Any:
    """An error SQS answered is SQS.AmazonSQSException, its cause the Java SDK's
    summary (recorded: LocalStack's test_task_service_sqs snapshot,
    test_send_message_empty_body: "The request must contain the parameter MessageBody.
    (Service: AmazonSQS; Status Code: 400; Error Code: MissingParameter; Request ID: ...;
    Proxy: null)"); SQS.SdkClientException is for a request that got no answer
    (test_send_message_no_such_queue). moto named every ClientError SdkClientException
    and gave SQS's message alone. An IAM denial is such an answer too (AccessDenied)."""
    failure_event = _original_sqs_from_error(self, env, ex)
    every: Any = failure_event.event_details or {}
    details = every.get("taskFailedEventDetails")
    if isinstance(ex, ClientError) and details is not None:
        error = ex.response.get("Error", {})
        metadata = ex.response.get("ResponseMetadata", {})
        details["error"] = SQS_SERVICE_ERROR
        details["cause"] = (
            f"{error.get('Message', '')} (Service: AmazonSQS; Status Code: "
            f"{metadata.get('HTTPStatusCode', 400)}; Error Code: {error.get('Code', '')}; "
            f"Request ID: {metadata.get('RequestId') or uuid.uuid4()}; Proxy: null)"
        )
        failure_event = FailureEvent(
            env=env,
            error_name=CustomErrorName(SQS_SERVICE_ERROR),
            event_type=failure_event.event_type,
            event_details=failure_event.event_details,
        )
    return failure_event


def _install_sqs_errors(installer: Installer) -> None:
    installer.replace(_Sqs, "_from_error", _sqs_from_error)


def _sqs_errors_fit() -> list[str]:
    return [] if "_from_error" in vars(_Sqs) else ["StateTaskServiceSqs._from_error is gone"]


def _install_results(installer: Installer) -> None:
    installer.replace(_Service, "_after_eval_execution", _after_eval_execution)


def _install_lambda_error(installer: Installer) -> None:
    installer.replace(_Lambda, "_error_cause_from_client_error", staticmethod(_lambda_error))


def _results_fit() -> list[str]:
    problems = []
    if "_after_eval_execution" not in vars(_Service):
        problems.append("StateTaskService._after_eval_execution is gone")
    for kind in (_Lambda, _DynamoDB, _Sqs):
        if not issubclass(kind, _Service):
            problems.append(f"{kind.__name__} no longer is a StateTaskService")
    return problems


def _lambda_error_fits() -> list[str]:
    if "_error_cause_from_client_error" not in vars(_Lambda):
        return ["StateTaskServiceLambda._error_cause_from_client_error is gone"]
    return []


_TESTS = "tests/parity/test_integrations.py::"
PATCHES: tuple[Patch, ...] = (
    Patch(
        name="integration results with the SDK's metadata",
        kind="fidelity",
        why="lambda:invoke, dynamodb:* and sqs:sendMessage tasks answer with SdkHttpMetadata "
        "and SdkResponseMetadata (lambda:invoke also ExecutedVersion), and DynamoDB without "
        "ConsumedCapacity unless asked (recorded: LocalStack's test_lambda_task_service, "
        "test_dynamodb_task_service and test_sqs_task_service snapshots). moto answered the "
        "bare service response, about 1 KiB a task smaller than AWS.",
        test=_TESTS + "test_an_invoke_result_carries_the_executed_version_and_the_sdk_metadata",
        install=_install_results,
        fits=_results_fit,
    ),
    Patch(
        name="a missing function named with $LATEST",
        kind="fidelity",
        why="A lambda:invoke task of a missing function fails with "
        "Lambda.ResourceNotFoundException, 'Function not found: ARN:$LATEST (Service: "
        "AWSLambda; ...)' (recorded: LocalStack's test_task_service_lambda snapshot, "
        "test_no_such_function). moto left out the version.",
        test=_TESTS + "test_a_missing_function_is_named_with_latest",
        install=_install_lambda_error,
        fits=_lambda_error_fits,
    ),
    Patch(
        name="aws-sdk errors named for the service",
        kind="fidelity",
        why="An aws-sdk task's error is SERVICE.ErrorException with the service as Step "
        "Functions spells it: S3.NoSuchKeyException (recorded: LocalStack's test_aws_sdk "
        "snapshot, test_s3_no_such_key). moto named S3's errors s3.",
        test=_TESTS + "test_an_aws_sdk_s3_error_is_named_for_s3",
        install=_install_sdk_error_names,
        fits=_sdk_error_names_fit,
    ),
    Patch(
        name="DynamoDB validation errors as a dynamodb task meets them",
        kind="fidelity",
        why="A request DynamoDB refuses in validation fails a dynamodb task with "
        "DynamoDB.AmazonDynamoDBException and DynamoDB's own words ('1 validation error "
        "detected: Value null at 'item' ...', Error Code: ValidationException) (recorded: "
        "LocalStack's test_task_service_dynamodb snapshot, test_invalid_param). moto named it "
        "DynamoDB.ValidationException, or gave Python's KeyError text.",
        test=_TESTS
        + "test_a_dynamodb_request_refused_in_validation_is_an_amazon_dynamodb_exception",
        install=_install_dynamodb_errors,
        fits=_dynamodb_errors_fit,
    ),
    Patch(
        name="SQS errors with the SDK's details",
        kind="fidelity",
        why="An sqs:sendMessage task refused by SQS fails with SQS.AmazonSQSException and "
        "a cause naming the service, status, error code and request id (recorded: "
        "LocalStack's test_task_service_sqs snapshot, test_send_message_empty_body). moto "
        "gave SQS's message alone.",
        test=_TESTS + "test_send_message_without_a_body_is_an_amazon_sqs_exception",
        install=_install_sqs_errors,
        fits=_sqs_errors_fit,
    ),
)
