"""Ingress emulation: EventBridge's default bus and rules, and EventBridge Pipes from SQS.

What each delivery does as AWS does, with its sources: docs/local-engine.md, "Ingress".
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

from botocore.exceptions import ClientError
from moto.events.models import EventPattern
from moto.s3.models import s3_backends

from onceflow.local import executions, inventory, limits
from onceflow.local.errors import EngineError
from onceflow.local.limits.states import STATE_SIZE_LIMIT, json_bytes
from onceflow.local.provisioning import ACCOUNT_ID, REGION
from onceflow.local.template import TemplateError

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# Failed starts after which pump_pipes() leaves a pipe's queue as it is.
_PIPE_FAILURE_LIMIT = 100


def rule_arn(name: str) -> str:
    return f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/{name}"


def _envelope(detail_type: str, source: str, when: str, detail: Any, **more: Any) -> dict[str, Any]:
    """An event as the default bus delivers it."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": ACCOUNT_ID,
        "time": when,
        "region": REGION,
        "resources": [],
        **more,
        "detail": detail,
    }


def put_event(engine: LocalEngine, event: Mapping[str, Any]) -> list[str]:
    """Deliver one event as the default bus does, to every matching enabled rule's targets
    (a failed one to its rule's dead-letter queue); the ARNs of the executions started."""
    started: list[str] = []
    for rule in engine.rules.values():
        if "EventPattern" not in rule:  # a scheduled rule matches no event (PutRule API)
            continue
        pattern = EventPattern.load(json.dumps(rule["EventPattern"]))
        if rule.get("State", "ENABLED") != "ENABLED" or not pattern.matches_event(dict(event)):  # type: ignore[arg-type]
            continue
        for target in rule.get("Targets", []):
            arn = str(target["Arn"])
            try:
                if arn.startswith("arn:aws:sqs:"):
                    if refused := _queue_refuses(engine, arn, rule):
                        raise refused
                    body = _body(event)
                    engine.client("sqs").send_message(QueueUrl=_url(engine, arn), MessageBody=body)
                else:  # as the target's role (not verified: EventBridge's error for it)
                    if refused := engine.access.refusal(target.get("RoleArn"), _START, arn):
                        raise refused
                    started.append(executions.start(engine, arn, event, name_prefix="events"))
            except ClientError as exc:
                _dead_letter(engine, rule, target, event, exc)
    return started


def put_custom_event(engine: LocalEngine, source: str, detail_type: str, detail: Any) -> list[str]:
    """PutEvents: EventBridge wraps the entry in its envelope, then delivers it."""
    limits.eventbridge.check_custom_event(source, detail_type, detail)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return put_event(engine, _envelope(detail_type, source, when, detail))


def sends_to_eventbridge(bucket: str) -> bool:
    """Whether the bucket's EventBridge notifications are on (moto keeps the setting but
    leaves it out of GetBucketNotificationConfiguration)."""
    configuration = s3_backends[ACCOUNT_ID]["aws"].buckets[bucket].notification_configuration
    return configuration is not None and configuration.event_bridge is not None


def put_s3_event(
    engine: LocalEngine, bucket: str, key: str, version_id: str | None = None
) -> list[str]:
    """S3's Object Created event of one upload, delivered as the default bus does while the
    bucket's EventBridge notifications are on (else nothing starts); the executions started."""
    if not sends_to_eventbridge(bucket):
        return []
    return put_event(engine, s3_object_created_event(engine, bucket, key, version_id))


def s3_object_created_event(
    engine: LocalEngine, bucket: str, key: str, version_id: str | None = None
) -> dict[str, Any]:
    """The EventBridge event S3 sends for one upload."""
    versioned = {"VersionId": version_id} if version_id else {}
    head = engine.client("s3").head_object(Bucket=bucket, Key=key, **versioned)
    etag, version = str(head["ETag"]).strip('"'), head.get("VersionId")
    upload = f"{bucket}/{key}#{version or etag + head['LastModified'].isoformat()}"
    obj: dict[str, Any] = {
        "key": quote_plus(key, safe="/"),
        "size": head["ContentLength"],
        "etag": etag,
        **({"version-id": version} if version else {}),
        "sequencer": hashlib.sha256(upload.encode()).hexdigest()[:18].upper(),
    }
    detail = {
        "version": "0",
        "bucket": {"name": bucket},
        "object": obj,
        "request-id": uuid.uuid4().hex[:16].upper(),
        "requester": ACCOUNT_ID,
        "source-ip-address": "127.0.0.1",
        "reason": "PutObject",
    }
    when = head["LastModified"].strftime("%Y-%m-%dT%H:%M:%SZ")
    return _envelope("Object Created", "aws.s3", when, detail, resources=[f"arn:aws:s3:::{bucket}"])


# Errors EventBridge does not retry but sends "directly to the DLQ" (eb-rule-dlq.html:
# "missing permissions to a target, or a target resource that no longer exists"), with
# its ERROR_CODE for each (the page's list; which API error maps to which code is not
# verified). Any other error keeps its API code (EventBridge's for it: not verified).
_NOT_RETRIED = {
    "AccessDeniedException": "NO_PERMISSIONS",
    "StateMachineDoesNotExist": "NO_RESOURCE",
    "AWS.SimpleQueueService.NonExistentQueue": "NO_RESOURCE",
}


def _dead_letter(
    engine: LocalEngine, rule: dict[str, Any], target: dict[str, Any], event: Any, exc: ClientError
) -> None:
    dead_letter = target.get("DeadLetterConfig", {}).get("Arn")
    if not dead_letter:
        raise EngineError(f"rule {rule['name']}: target failed and has no DLQ") from exc
    if refused := _queue_refuses(engine, dead_letter, rule):  # InvocationsFailedToBeSentToDLQ
        raise EngineError(
            f"rule {rule['name']}: target failed ({exc}) and on AWS the event is dropped: "
            f"{refused.response['Error']['Message']} (eb-rule-dlq.html)"
        ) from exc
    error, status = exc.response.get("Error", {}), exc.response.get("ResponseMetadata", {})
    code = str(error.get("Code", "Unknown"))
    # EventBridge retries 5xx and 429 answers (and throttling), no other 4xx (re:Post,
    # eventbridge-resolve-failedinvocation-errors); the engine takes the retries to fail
    # as the first try did.
    retried = status.get("HTTPStatusCode", 400) in (429, *range(500, 600)) or "Throttl" in code
    attributes = {
        "RULE_ARN": rule_arn(rule["name"]),
        "TARGET_ARN": str(target["Arn"]),
        "ERROR_CODE": _NOT_RETRIED.get(code, code),
        "ERROR_MESSAGE": str(error.get("Message", ""))[:256],
        "RETRY_ATTEMPTS": str(
            target.get("RetryPolicy", {}).get("MaximumRetryAttempts", 185) if retried else 0
        ),
    }
    engine.client("sqs").send_message(
        QueueUrl=_url(engine, dead_letter),
        MessageBody=_body(event),
        MessageAttributes={
            k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
        },
    )


def _queue_refuses(
    engine: LocalEngine, queue_arn: str, rule: Mapping[str, Any]
) -> ClientError | None:
    """The AccessDenied EventBridge meets sending the rule's event to an SQS queue (a target,
    its DLQ) whose policy lets events.amazonaws.com no sqs:SendMessage for the rule
    (eb-use-resource-based.html, "Amazon SQS permissions"; eb-rule-dlq.html; AWS's words
    not verified); None if it may. The policy: the template's AWS::SQS::QueuePolicy (not
    put on the local queue), else one put on the queue."""
    url, policy = _url(engine, queue_arn), None
    for logical_id, resource in engine.stack.template["Resources"].items():
        properties = resource.get("Properties", {})
        if (
            resource.get("Type") == "AWS::SQS::QueuePolicy"
            and engine.stack.resource_enabled(logical_id)
            and url in engine.stack.resolve(properties.get("Queues", []))
        ):
            policy = engine.stack.resolve(properties.get("PolicyDocument"))
    if policy is None:
        attributes = engine.client("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["Policy"]
        )
        policy = json.loads(attributes.get("Attributes", {}).get("Policy") or "null")
    source = rule_arn(str(rule["name"]))
    context = {"aws:sourcearn": source, "aws:sourceaccount": ACCOUNT_ID}
    if inventory.grants(policy, "events.amazonaws.com", "sqs:SendMessage", queue_arn, context):
        return None
    message = f"the policy of {queue_arn} lets events.amazonaws.com no sqs:SendMessage for {source}"
    return ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": message}}, "SendMessage"
    )


def _body(event: Any) -> str:
    """An event as EventBridge sends it to a queue, a target or its dead-letter queue: JSON
    in UTF-8, not ASCII-escaped (SQS counts its bytes), but a character SQS refuses in a
    body (U+FFFE, U+FFFF, a lone surrogate) escaped, so the event still arrives (the exact
    text AWS sends is not verified)."""
    text = json.dumps(event, ensure_ascii=False)
    return limits.sqs.SQS_INVALID.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def _url(engine: LocalEngine, queue_arn: str) -> str:
    name = queue_arn.rsplit(":", 1)[-1]
    return str(engine.client("sqs").get_queue_url(QueueName=name)["QueueUrl"])


_START = "states:StartExecution"


def pump_pipes(engine: LocalEngine, limit: int | None = None) -> list[str]:
    """Run every running pipe until its source queue is empty (or limit executions started),
    a batch at a time, as EventBridge Pipes does for SQS; the ARNs of the executions started.
    Kept messages are visible again when this pass ends: the next call is their redelivery."""
    sqs = engine.client("sqs")
    started: list[str] = []
    for pipe in engine.pipes.values():
        if pipe.get("DesiredState", "RUNNING") != "RUNNING":
            continue  # a stopped pipe polls nothing (StopPipe; AWS::Pipes::Pipe DesiredState)
        source, url = str(pipe["Source"]), _url(engine, str(pipe["Source"]))
        queue = pipe.get("SourceParameters", {}).get("SqsQueueParameters", {})
        batch_size = min(int(queue.get("BatchSize", 10)), 10)
        parameters = pipe.get("TargetParameters", {}).get("StepFunctionStateMachineParameters", {})
        synchronous = parameters.get("InvocationType", "REQUEST_RESPONSE") == "REQUEST_RESPONSE"
        if synchronous:
            _check_sync_target(engine, pipe)
        kept: list[dict[str, Any]] = []  # visible again once the queue is drained
        held: list[dict[str, Any]] = []  # received, left out of a batch: the next one's first
        failures = 0
        while (limit is None or len(started) < limit) and failures < _PIPE_FAILURE_LIMIT:
            if len(held) < batch_size:
                held += sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=batch_size - len(held),
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
            if not held:
                break
            records = _fitting_records(held, source)
            messages, held = held[: len(records)], held[len(records) :]
            start = "states:StartSyncExecution" if synchronous else _START
            try:  # as the pipe's role
                if refused := engine.access.refusal(pipe.get("RoleArn"), start, pipe["Target"]):
                    raise refused
                arn = executions.start(engine, str(pipe["Target"]), records, name_prefix="pipe")
            except ClientError:
                # A queue without a redrive policy would retry forever; the pipe would too,
                # but a local run has to end. The next receive retries them.
                failures += 1
                _visible_again(sqs, url, messages)
                continue
            started.append(arn)
            retried = sync_failures(engine, arn, messages) if synchronous else set()
            kept += [m for m in messages if m["MessageId"] in retried]
            kept += _delete_batch(sqs, url, [m for m in messages if m["MessageId"] not in retried])
        _visible_again(sqs, url, kept + held)
    return started


def _fitting_records(messages: list[dict[str, Any]], source_arn: str) -> list[dict[str, Any]]:
    """The records of the first messages, in order, whose array fits one execution's input:
    the pipe gathers a batch "until ... the invocation payload size quota is reached"
    (eb-pipes-sqs.html), a Step Functions target's being "the total payload size of the
    event rather than the size of the batch", 262,144 characters
    (eb-pipes-batching-concurrency.html). Counted as Step Functions counts the input it
    starts with (UTF-8 bytes of compact JSON: at least the characters); whether the pipe
    counts characters, and so sends a non-ASCII batch Step Functions refuses, is not
    verified. A first message too large alone is the batch, whose start fails."""
    records: list[dict[str, Any]] = []
    for message in messages:
        record = _pipe_record(message, source_arn)
        if records and json_bytes([*records, record]) > STATE_SIZE_LIMIT:
            break
        records.append(record)
    return records


def check_pipe_roles(engine: LocalEngine) -> None:
    """Refuse a pipe whose role may not read its SQS source, as AWS fails to create it
    (CREATE_FAILED, "The provided customer role does not have permissions to call
    ReceiveMessage on SQS": terraform-aws-modules/terraform-aws-eventbridge#133; the three
    actions: eb-pipes-permissions.html; the words for the other two are not verified)."""
    for logical_id, pipe in engine.pipes.items():
        for action in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes"):
            if engine.access.refusal(pipe.get("RoleArn"), f"sqs:{action}", str(pipe["Source"])):
                raise TemplateError(
                    f"{logical_id}: CREATE_FAILED on AWS: The provided customer role does not "
                    f"have permissions to call {action} on SQS"
                )


def _visible_again(sqs: Any, url: str, messages: list[dict[str, Any]]) -> None:
    """Make a kept batch's messages visible at once (a local shortcut: on AWS they come
    back when their visibility timeout ends). A message the target deleted itself (the
    batch's DeleteInvalidMessage) is no longer there to come back: moto answers its
    receipt handle ReceiptHandleIsInvalid, and it is skipped."""
    for m in messages:
        try:
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
            )
        except sqs.exceptions.ReceiptHandleIsInvalid:
            continue  # deleted by the target: nothing to bring back


def _delete_batch(sqs: Any, url: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Delete a batch's settled messages in one DeleteMessageBatch (the call is not
    verified); those it could not, which come back: a duplicate, not a loss. A message
    the target already deleted (DeleteInvalidMessage) is deleted again: moto answers it
    as a success; AWS's DeleteMessage reference says only that a stale receipt handle's
    request "will succeed" (API_DeleteMessage.html); a deleted message's own handle is
    not verified, and were it refused, the message would only be "kept" and skipped by
    _visible_again."""
    if not messages:
        return []
    entries = [{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)]
    response = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
    return [messages[int(failed["Id"])] for failed in response.get("Failed", [])]


def _check_sync_target(engine: LocalEngine, pipe: Mapping[str, Any]) -> None:
    """REQUEST_RESPONSE needs an EXPRESS target: AWS stops the pipe otherwise."""
    arn = engine.state_machine_arn(str(pipe["Target"]))
    kind = engine.client("stepfunctions").describe_state_machine(stateMachineArn=arn).get("type")
    if kind != "EXPRESS":
        raise EngineError(
            f"pipe {pipe['name']}: REQUEST_RESPONSE needs an EXPRESS state machine, "
            f"{arn} is {kind}; AWS stops such a pipe"
        )


def sync_failures(
    engine: LocalEngine, execution_arn: str, messages: list[dict[str, Any]]
) -> set[str]:
    """The messageIds a synchronously invoked target leaves in the queue, as EventBridge
    Pipes reads its answer (docs/local-engine.md, "Ingress", lists the rules)."""
    everything = {str(m["MessageId"]) for m in messages}
    result = executions.wait(engine, execution_arn, timeout=limits.EXPRESS_DURATION_LIMIT + 60)
    output = result.output
    if result.status != "SUCCEEDED":
        return everything
    if output in (None, {}, ""):
        return set()
    failures = output.get("batchItemFailures") if isinstance(output, dict) else ()
    if failures in (None, []):
        return set()
    if not isinstance(failures, list):
        return everything  # not the payload a partial failure is read from
    named = [entry.get("itemIdentifier") if isinstance(entry, dict) else None for entry in failures]
    if all(isinstance(i, str) and i in everything for i in named):
        return {str(i) for i in named}
    return everything


def _pipe_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """A message attribute as Lambda's SQS event gives it (recorded: LocalStack's
    test_lambda_integration_sqs snapshot, test_message_body_and_attributes_passed_correctly);
    a Binary one's value in base64 under binaryValue (Powertools' SqsMsgAttributeModel;
    not verified on a recording)."""
    shown: dict[str, Any]
    if "BinaryValue" in value:
        shown = {"binaryValue": base64.b64encode(value["BinaryValue"]).decode()}
    else:
        shown = {"stringValue": value.get("StringValue")}
    return {**shown, "stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}


def _pipe_record(message: dict[str, Any], source_arn: str) -> dict[str, Any]:
    """One SQS message as EventBridge Pipes hands it to a target: Lambda's SQS event record
    (eb-pipes-sqs.html), md5OfMessageAttributes only when it has attributes (as recorded)."""
    attributes = message.get("MessageAttributes", {})
    digest = {"md5OfMessageAttributes": message["MD5OfMessageAttributes"]} if attributes else {}
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": message.get("Attributes", {}),
        "messageAttributes": {name: _pipe_attribute(v) for name, v in attributes.items()},
        **digest,
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": source_arn,
        "awsRegion": REGION,
    }
