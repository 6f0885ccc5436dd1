"""The optimised Lambda, DynamoDB and SQS integrations answer, and fail, as AWS recorded
(LocalStack's suite, tests/aws/services/stepfunctions/v2/services/): a request-response
result is the Java SDK's response, 600 to 900 bytes a task more than moto's."""

from __future__ import annotations

import email.utils
import json
import random
import string
import uuid
import zlib
from typing import Any

from botocore.exceptions import ClientError
from moto.core.utils import get_service_model
from moto.dynamodb.responses import DynamoHandler, include_consumed_capacity
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    lambda_eval_utils,
    state_task_lambda,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service,
    state_task_service_aws_sdk,
    state_task_service_dynamodb,
    state_task_service_lambda,
    state_task_service_sqs,
)

from onceflow.local.patches.registry import Installer, Patch, gone, lacks, takes

_Service = state_task_service.StateTaskService
_Lambda = state_task_service_lambda.StateTaskServiceLambda
_DynamoDB = state_task_service_dynamodb.StateTaskServiceDynamoDB
_Sqs = state_task_service_sqs.StateTaskServiceSqs
_AwsSdk = state_task_service_aws_sdk.StateTaskServiceAwsSdk
_original_after = _Service._after_eval_execution
_original_lambda_error = _Lambda._error_cause_from_client_error
_LegacyLambda = state_task_lambda.StateTaskLambda
_original_legacy_from_error = _LegacyLambda._from_error
_original_dynamodb_error = _DynamoDB._error_cause_from_client_error
_original_dynamodb_from_error = _DynamoDB._from_error
_original_sqs_from_error = _Sqs._from_error
_original_update_item: Any = DynamoHandler.update_item

JSON_1_0 = "application/x-amz-json-1.0"


def _with_metadata(
    output: dict[str, Any], request_id: str, id_header: str = "x-amzn-RequestId", **headers: str
) -> dict[str, Any]:
    """output with the Java SDK's SdkHttpMetadata (every header once as a list, once
    as a value) and SdkResponseMetadata."""
    headers = {"Date": email.utils.formatdate(usegmt=True), id_header: request_id, **headers}
    return {
        **output,
        "SdkHttpMetadata": {
            "AllHttpHeaders": {name: [value] for name, value in headers.items()},
            "HttpHeaders": dict(sorted(headers.items(), key=lambda item: item[0].lower())),
            "HttpStatusCode": 200,
        },
        "SdkResponseMetadata": {"RequestId": request_id},
    }


def _lambda_result(output: dict[str, Any], parameters: dict[str, Any], _: str) -> dict[str, Any]:
    arn = str(parameters.get("FunctionName", "")).split(":")  # ...:function:NAME[:QUALIFIER]
    qualifier = str(parameters.get("Qualifier") or (arn[7] if len(arn) == 8 else ""))
    version = qualifier if qualifier.isdigit() else "$LATEST"
    hexes = uuid.uuid4().hex + uuid.uuid4().hex
    trace = f"Root=1-{hexes[:8]}-{hexes[8:32]};Parent={hexes[32:48]};Sampled=0;"
    trace += f"Lineage=1:{hexes[48:56]}:0"
    headers = {"Connection": "keep-alive", "Content-Type": "application/json",
               "Content-Length": str(len(json.dumps(output.get("Payload")).encode())),
               "X-Amz-Executed-Version": version, "x-amzn-Remapped-Content-Length": "0",
               "X-Amzn-Trace-Id": trace}  # fmt: skip
    return {**_with_metadata(output, str(uuid.uuid4()), **headers), "ExecutedVersion": version}


def _dynamodb_result(output: dict[str, Any], _: dict[str, Any], action: str) -> dict[str, Any]:
    body = json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {"Connection": "keep-alive", "Content-Length": str(len(body)),
               "Content-Type": JSON_1_0, "Server": "Server",
               "x-amz-crc32": str(zlib.crc32(body))}  # fmt: skip
    # getItem's answer names it in lower case (recorded: test_dynamodb_task_service,
    # DYNAMODB_PUT_GET_ITEM); putItem's, updateItem's, deleteItem's and query's do not
    named = "x-amzn-requestid" if action == "getItem" else "x-amzn-RequestId"
    request_id = "".join(random.choices(string.ascii_uppercase + string.digits, k=52))
    return _with_metadata(output, request_id, named, **headers)


def _sqs_result(output: dict[str, Any], _: dict[str, Any], __: str) -> dict[str, Any]:
    body = json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {"connection": "keep-alive", "Content-Length": str(len(body)),
               "Content-Type": JSON_1_0}  # fmt: skip
    return _with_metadata(output, str(uuid.uuid4()), **headers)


_RESULTS = ((_Lambda, _lambda_result), (_DynamoDB, _dynamodb_result), (_Sqs, _sqs_result))


@include_consumed_capacity()
def _update_item(self: Any) -> Any:
    """ConsumedCapacity only when the request asks for it (moto: always, 0.5 units)."""
    result = _original_update_item(self)
    result.result.pop("ConsumedCapacity", None)
    return result


def _without_nulls(self: Any, parameters: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """The SDK Step Functions calls with sends no member that is null: the service then
    says it is missing (moto's unvalidated botocore failed on it, in Python's words)."""
    for name in [name for name, value in parameters.items() if value is None]:
        del parameters[name]


def _sdk_parameters(self: Any, parameters: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """An aws-sdk task's members as the API names them in any case (TaskToken: taskToken),
    a blob or string given as JSON sent as its JSON text (S3's Body: {"a":1})."""
    _without_nulls(self, parameters)
    action = self.resource.api_action
    operation = get_service_model(self._get_boto_service_name()).operation_model(
        action[:1].upper() + action[1:]
    )
    self._to_boto_request(parameters, operation.input_shape)


def _sdk_response(self: Any, response: Any, *args: Any, **kwargs: Any) -> None:
    """A streamed member (S3's Body) answers as its text (moto: the stream's repr)."""
    if isinstance(response, dict):
        response.update({k: self._from_boto_response_value(v) for k, v in response.items()})


def _install_results(installer: Installer) -> None:
    installer.replace(_Service, "_after_eval_execution", _after_eval_execution)
    installer.replace(DynamoHandler, "update_item", _update_item)
    installer.replace(_AwsSdk, "_normalise_parameters", _sdk_parameters)
    installer.replace(_AwsSdk, "_normalise_response", _sdk_response)


def _defines(owner: Any, name: str, ours: Any) -> list[str]:
    """moto's class now defines what we add where it inherited the base's no-op."""
    return [] if vars(owner).get(name, ours) is ours else [f"{owner.__name__}.{name} is moto's"]


def _results_fit() -> list[str]:
    return [
        *takes(_original_after, "self", "env", "resource_runtime_part", "normalised_parameters"),
        *gone(DynamoHandler, "update_item"),
        *lacks(DynamoHandler.update_item, "-> ActionResult"),  # whose .result it edits
        *gone(_Service, "_to_boto_request", "_from_boto_response_value"),
        *_defines(_AwsSdk, "_normalise_parameters", _sdk_parameters),
        *_defines(_AwsSdk, "_normalise_response", _sdk_response),
    ]


def _after_eval_execution(self: Any, env: Any, **kwargs: Any) -> None:  # moto passes keywords
    output = env.stack[-1] if env.stack else None
    result = next((result for kind, result in _RESULTS if isinstance(self, kind)), None)
    # Only a request-response task answers with the SDK's response; a callback's
    # or a .sync's result is what the worker or the job returned.
    if result and isinstance(output, dict) and self.resource.condition is None:
        parameters = dict(kwargs.get("normalised_parameters") or {})
        whole = result(output, parameters, self.resource.api_action)
        env.stack[-1] = dict(sorted(whole.items()))
    _original_after(self, env=env, **kwargs)


# Errors, as each integration names and words them.


def _lambda_error(client_error: Any) -> tuple[str, str]:
    """A missing function is named by its unqualified ARN with :$LATEST."""
    error, cause = _original_lambda_error(client_error)
    prefix = "Function not found: "
    if error == "Lambda.ResourceNotFoundException" and cause.startswith(prefix):
        arn, _, rest = cause[len(prefix) :].partition(" ")
        if arn.count(":") == 6:  # arn:aws:lambda:REGION:ACCOUNT:function:NAME, no qualifier
            cause = f"{prefix}{arn}:$LATEST {rest}"
    return error, cause


def _legacy_from_error(self: Any, env: Any, ex: Exception) -> Any:
    """A Task whose Resource is the function's ARN fails with the function's answer as the
    runtime wrote it, ", " and ": " between members (moto: re-written compact)."""
    if isinstance(ex, lambda_eval_utils.LambdaFunctionErrorException):
        text = json.dumps(json.loads(ex.payload))  # the runtime's json.dumps, as it was
        ex = lambda_eval_utils.LambdaFunctionErrorException(ex.function_error, text)
    return _original_legacy_from_error(self, env, ex)


# aws-sdk errors are named "ServiceName.ErrorName" in Pascal case (supported-services-awssdk.html;
# recorded: DynamoDb., Sfn., S3.); moto knew
# only DynamoDb and Sfn.
SDK_ERROR_NAMES = {"dynamodb": "DynamoDb", "sfn": "Sfn", "s3": "S3", "sqs": "Sqs",
                   "secretsmanager": "SecretsManager"}  # fmt: skip
# DynamoDB's ValidationException is not one of the SDK's modelled errors: its cause
# keeps "Error Code: ValidationException".
AMAZON_DYNAMODB_EXCEPTION = "DynamoDB.AmazonDynamoDBException"


def _dynamodb_error(client_error: Any) -> tuple[str, str]:
    error, cause = _original_dynamodb_error(client_error)
    return AMAZON_DYNAMODB_EXCEPTION if error == "DynamoDB.ValidationException" else error, cause


def _dynamodb_from_error(self: Any, env: Any, ex: Exception) -> Any:
    """A failure of the state's own expressions stays States.QueryEvaluationError, as for
    every other state (moto: DynamoDB.AmazonDynamoDBException)."""
    if isinstance(ex, FailureEventException):
        return ex.failure_event
    return _original_dynamodb_from_error(self, env, ex)


def _sqs_from_error(self: Any, env: Any, ex: Exception) -> Any:
    """SQS's answer (an IAM denial too) in the Java SDK's words (moto: the message alone)."""
    failure_event = _original_sqs_from_error(self, env, ex)
    if isinstance(ex, ClientError):
        error, metadata = ex.response.get("Error", {}), ex.response.get("ResponseMetadata", {})
        details: Any = failure_event.event_details
        details["taskFailedEventDetails"]["cause"] = (
            f"{error.get('Message', '')} (Service: AmazonSQS; Status Code: "
            f"{metadata.get('HTTPStatusCode', 400)}; Error Code: {error.get('Code', '')}; "
            f"Request ID: {metadata.get('RequestId') or uuid.uuid4()}; Proxy: null)"
        )
    return failure_event


def _install_errors(installer: Installer) -> None:
    installer.replace(_Lambda, "_error_cause_from_client_error", staticmethod(_lambda_error))
    installer.replace(_LegacyLambda, "_from_error", _legacy_from_error)
    installer.replace(state_task_service_aws_sdk, "_SERVICE_ERROR_NAMES", SDK_ERROR_NAMES)
    installer.replace(_DynamoDB, "_error_cause_from_client_error", staticmethod(_dynamodb_error))
    installer.replace(_DynamoDB, "_from_error", _dynamodb_from_error)
    installer.replace(_DynamoDB, "_normalise_parameters", _without_nulls)
    installer.replace(_Sqs, "_from_error", _sqs_from_error)
    # An error SQS answered; SQS.SdkClientException is for a request that got no answer.
    installer.replace(state_task_service_sqs, "_ERROR_NAME_CLIENT", "SQS.AmazonSQSException")


def _errors_fit() -> list[str]:
    return [
        *gone(_Lambda, "_error_cause_from_client_error"),
        *gone(_LegacyLambda, "_from_error"),
        *takes(lambda_eval_utils.LambdaFunctionErrorException, "function_error", "payload"),
        *gone(state_task_service_aws_sdk, "_SERVICE_ERROR_NAMES"),
        *gone(_DynamoDB, "_error_cause_from_client_error", "_from_error"),
        *_defines(_DynamoDB, "_normalise_parameters", _without_nulls),
        *gone(_Sqs, "_from_error"),
        *gone(state_task_service_sqs, "_ERROR_NAME_CLIENT"),
    ]


_TESTS = "tests/parity/test_integrations.py::"
PATCHES: tuple[Patch, ...] = (
    Patch(
        name="integration results with the SDK's metadata",
        kind="fidelity",
        why="lambda:invoke, dynamodb:* and sqs:sendMessage tasks answer with SdkHttpMetadata "
        "and SdkResponseMetadata (lambda:invoke also ExecutedVersion), and DynamoDB without "
        "ConsumedCapacity unless asked (recorded: LocalStack's test_lambda_task_service, "
        "test_dynamodb_task_service and test_sqs_task_service snapshots). moto answered the "
        "bare service response, about 1 KiB a task smaller than AWS, and UpdateItem always "
        "with ConsumedCapacity (test_aws_sdk_task_service, test_dynamodb_put_update_get_item). "
        "An aws-sdk task sends a blob given as JSON as its JSON text and names members in any "
        "case (test_s3_put_object: a dict Body is stored; moto failed; "
        "test_sfn_send_task_outcome_with_no_such_token: Sfn.InvalidTokenException; moto: "
        "KeyError), and answers a streamed Body as text (test_s3_get_object; moto: a repr).",
        test=_TESTS + "test_an_invoke_result_carries_the_executed_version_and_the_sdk_metadata",
        install=_install_results,
        fits=_results_fit,
    ),
    Patch(
        name="integration errors as AWS names them",
        kind="fidelity",
        why="Recorded in LocalStack's snapshots: a lambda:invoke task of a missing function "
        "fails with Lambda.ResourceNotFoundException, 'Function not found: ARN:$LATEST' "
        "(test_task_service_lambda, test_no_such_function; moto left out the version); a "
        "Task whose Resource is the function's ARN fails with the function's answer as the "
        "runtime wrote it, '{\"errorMessage\": ...' (test_task_lambda, "
        "test_raise_exception_catch; moto: compact, as lambda:invoke's is); an "
        "aws-sdk task's error is named for the service as Step Functions spells it, "
        "S3.NoSuchKeyException (test_aws_sdk, test_s3_no_such_key; moto: s3.); a request "
        "DynamoDB refuses in validation is DynamoDB.AmazonDynamoDBException with DynamoDB's "
        "words, '1 validation error detected: Value null at 'item' ...' "
        "(test_task_service_dynamodb, test_invalid_param; moto: DynamoDB.ValidationException "
        "or Python's text: a null member reached botocore, which Step Functions' SDK leaves "
        "out); SQS's refusal is SQS.AmazonSQSException, its cause "
        "naming the service, status, error code and request id (test_task_service_sqs, "
        "test_send_message_empty_body; moto: SdkClientException and SQS's message alone).",
        test=_TESTS + "test_a_missing_function_is_named_with_latest",
        install=_install_errors,
        fits=_errors_fit,
    ),
)
