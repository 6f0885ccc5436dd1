"""`onceflow doctor`: a stack's wiring against what exactly-once needs, one finding a line.

Each check reads what is deployed, not what the template says: a change made outside
the stack (a rule disabled in the console, a queue's redrive policy removed) is what it
is there to find. `sam deploy` does not undo such a change while the template is
unchanged (CloudFormation updates the resources whose template changed: not verified
for every property), so a FAIL names the command that puts it back.

The AWS APIs and the fields read, with the page that documents each:

- CloudFormation DescribeStacks (Outputs, Parameters) and ListStackResources
  (LogicalResourceId, PhysicalResourceId, ResourceType): `ops.target.DeployedTarget`.
- S3 GetBucketNotificationConfiguration: ``EventBridgeConfiguration`` is present when the
  bucket sends its events to EventBridge; "If notifications are not enabled on the bucket,
  the action returns an empty NotificationConfiguration element" (S3 API reference).
- S3 ListBucketInventoryConfigurations (``InventoryConfigurationList``: ``Id``,
  ``IsEnabled``, ``Destination.S3BucketDestination`` ``Bucket``/``Format``/``Prefix``,
  ``IncludedObjectVersions``, ``OptionalFields``, ``Filter.Prefix``, ``Schedule``) and
  the audit function's ``Environment`` (Lambda GetFunctionConfiguration): where S3
  delivers the inventory the audit reads (S3 API reference, InventoryConfiguration; S3
  user guide, "Inventory list": reports land under prefix/source-bucket/config-ID/).
- S3 GetBucketVersioning: ``Status`` Enabled or Suspended, absent on a bucket whose
  versioning was never set (S3 API reference, GetBucketVersioning and
  PutBucketVersioning: "If the versioning state has never been set on a bucket, it has no
  versioning state").
- EventBridge DescribeRule (``State``, ``EventPattern``), ListTargetsByRule (``Targets``:
  ``Id``, ``Arn``, ``RoleArn``, ``RetryPolicy``, ``DeadLetterConfig.Arn``) and
  TestEventPattern (``Result``: "Indicates whether the event matches the event pattern";
  the event needs id, account, source, time, region, resources and detail-type)
  (EventBridge API reference). A rule's physical id is its name on the default bus
  ("bus|name" on another: not verified, handled alike).
- EventBridge Pipes DescribePipe: ``CurrentState`` (RUNNING, STOPPED, ... CREATE_FAILED),
  ``DesiredState``, ``StateReason``, ``Source``, ``Target``, ``RoleArn``,
  ``SourceParameters.SqsQueueParameters`` (``BatchSize``, default 10;
  ``MaximumBatchingWindowInSeconds``, default 0) and
  ``TargetParameters.StepFunctionStateMachineParameters.InvocationType`` (default
  REQUEST_RESPONSE) (EventBridge Pipes API reference, DescribePipe, StopPipe;
  PipeSourceSqsQueueParameters; PipeTargetStateMachineParameters).
- SQS GetQueueUrl (``QueueOwnerAWSAccountId``) and GetQueueAttributes (``RedrivePolicy``:
  JSON with ``deadLetterTargetArn`` and ``maxReceiveCount``; ``VisibilityTimeout``;
  ``MessageRetentionPeriod``) (SQS API reference). A message received and not deleted
  comes back after the visibility timeout and counts as a receive (SQS developer guide,
  "Amazon SQS visibility timeout"); EventBridge deletes a batch once the pipe has
  processed it (EventBridge user guide, "Amazon SQS as a source").
- Step Functions DescribeStateMachine (``definition``, ``type``), ListExecutions ("Results
  are sorted by time, with the most recent execution first") and DescribeExecution
  (``error``, ``cause``) (Step Functions API reference).
- CloudWatch DescribeAlarms (``MetricAlarms``: ``AlarmName``, ``ActionsEnabled``,
  ``AlarmActions``) and DescribeAlarmsForMetric (``MetricName``, ``Namespace``,
  ``Dimensions``; each ``MetricAlarm`` carries its ``Dimensions``, compared here too)
  (CloudWatch API reference, DescribeAlarms, DescribeAlarmsForMetric, MetricAlarm).
- Lambda's guidance for an SQS source: "set the source queue's visibility timeout to at
  least six times the configuration timeout on your function" (Lambda developer guide,
  services-sqs-configure.html); the pipe's synchronous target runs up to five minutes.
- SNS ListSubscriptionsByTopic: ``SubscriptionArn`` is the subscription's ARN once it is
  confirmed and "PendingConfirmation" until then (SNS API reference, Subscribe: "the
  string 'pending confirmation' if the subscription requires confirmation"; the exact
  spelling in the listing, PendingConfirmation, is not verified against a live account:
  any value that is not an ARN counts as unconfirmed).
- EventBridge Scheduler GetSchedule: ``State`` ENABLED or DISABLED, ``Target.Arn``,
  ``ScheduleExpression`` (Scheduler API reference, ScheduleSummary). SAM's ScheduleV2
  event becomes an AWS::Scheduler::Schedule (SAM developer guide, "ScheduleV2").
- Lambda GetFunctionConfiguration: ``Timeout``, "the amount of time in seconds that
  Lambda allows a function to run before stopping it" (Lambda API reference).

A Task's TimeoutSeconds fails the state with States.Timeout once it runs out (Step
Functions developer guide, "Task workflow state"); that the Lambda invocation it
started keeps running until the function's own timeout is not verified.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from onceflow.asl.worstcase import EXPRESS_LIMIT_SECONDS, state_seconds, worst_case_seconds
from onceflow.ops.target import Target, error_code

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"

# What the rule is asked to match: an upload the stack must process.
PROBE_NAME = "onceflow-doctor-probe"


@dataclass(frozen=True)
class Finding:
    """One line of the diagnosis: PASS, WARN or FAIL, what was checked, what to do."""

    status: str
    check: str
    detail: str

    def line(self) -> str:
        return f"{self.status} {self.check}: {self.detail}"

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status, "check": self.check, "detail": self.detail}


class DoctorTarget(Target, Protocol):
    """A stack as the doctor reads it: a Target, its name, its parameters and its
    resources as ListStackResources gives them (LogicalResourceId, PhysicalResourceId,
    ResourceType)."""

    stack_name: str

    def parameters(self) -> Mapping[str, str]: ...

    def resources(self) -> list[dict[str, str]]: ...


@dataclass
class _Stack:
    """What every check reads once: the target, its parameters, resources and outputs."""

    target: DoctorTarget
    parameters: Mapping[str, str]
    resources: list[dict[str, str]]
    _described: dict[str, dict[str, Any]] = field(default_factory=dict)

    def of_type(self, kind: str) -> list[tuple[str, str]]:
        """(logical id, physical id) of the stack's resources of a type, in its order."""
        return [
            (r["LogicalResourceId"], r["PhysicalResourceId"])
            for r in self.resources
            if r["ResourceType"] == kind
        ]

    def parameter(self, name: str, default: str = "") -> str:
        return str(self.parameters.get(name, default))

    def command(self, name: str) -> str:
        """An onceflow command on this stack, as its operator types it."""
        return f"onceflow {name}" + ("" if self.target.local else f" --stack-name {self.name}")

    @property
    def name(self) -> str:
        return self.target.stack_name

    def client(self, service: str) -> Any:
        return self.target.client(service)

    def state_machine(self, arn: str) -> dict[str, Any]:
        """DescribeStateMachine's answer, the definition parsed, read once."""
        if arn not in self._described:
            described = dict(
                self.client("stepfunctions").describe_state_machine(stateMachineArn=arn)
            )
            described["definition"] = json.loads(described["definition"])
            self._described[arn] = described
        return self._described[arn]

    def arn_parts(self) -> tuple[str, str, str]:
        """(partition, region, account) of the stack, read from its processor's ARN."""
        parts = self.target.output("ProcessorStateMachineArn").split(":")
        return parts[1], parts[3], parts[4]


def _message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", "")) or str(exc)


# ---- the bucket ----------------------------------------------------------------------


def check_bucket_events(stack: _Stack) -> Iterator[Finding]:
    bucket = stack.target.output("IngestBucketName")
    try:
        configuration = stack.client("s3").get_bucket_notification_configuration(Bucket=bucket)
    except ClientError as exc:
        if error_code(exc) != "NoSuchBucket":
            raise
        yield Finding(
            FAIL,
            "bucket events",
            f"s3://{bucket} does not exist: nothing can be processed. ExistingBucketName "
            "must name a bucket of this account and Region (docs/existing-bucket.md)",
        )
        return
    if "EventBridgeConfiguration" in configuration:
        yield Finding(PASS, "bucket events", f"s3://{bucket} sends its events to EventBridge")
        return
    yield Finding(
        FAIL,
        "bucket events",
        f"s3://{bucket} sends no events to EventBridge: no upload is processed as it "
        "arrives (the audit finds it only later). Turn them on without dropping the "
        "bucket's other notifications: S3 console, the bucket's Properties, Amazon "
        "EventBridge: On; or the get/merge/put commands of docs/existing-bucket.md "
        "(a plain put-bucket-notification-configuration replaces them all)",
    )


def check_bucket_versioning(stack: _Stack) -> Iterator[Finding]:
    bucket = stack.target.output("IngestBucketName")
    try:
        status = stack.client("s3").get_bucket_versioning(Bucket=bucket).get("Status")
    except ClientError as exc:
        if error_code(exc) != "NoSuchBucket":
            raise
        yield Finding(FAIL, "bucket versioning", f"s3://{bucket} does not exist (bucket events)")
        return
    if status == "Enabled":
        yield Finding(
            PASS,
            "bucket versioning",
            f"Enabled on s3://{bucket}: every upload exactly once, each version its own "
            "unit of work, read by its version id even after it was overwritten",
        )
        return
    state = status or "never enabled"
    weaker = (
        "each event at most once, and only while its content is still in the key (an "
        "upload overwritten or deleted before it is processed ends Superseded); the audit "
        "resubmits a lost upload only after IngressMaxEventAgeSeconds (docs/audit.md)"
    )
    enable = (
        f"aws s3api put-bucket-versioning --bucket {bucket} "
        "--versioning-configuration Status=Enabled"
    )
    if stack.parameter("ExistingBucketName"):
        yield Finding(
            WARN,
            "bucket versioning",
            f"{state} on s3://{bucket}: {weaker}. For every upload exactly once: {enable} "
            "(every overwrite then keeps its old version, stored until you expire it)",
        )
    else:
        yield Finding(
            FAIL,
            "bucket versioning",
            f"{state} on s3://{bucket}, which the stack created versioned: {weaker}. "
            f"Turn it back on: {enable}",
        )


# ---- the EventBridge rules -----------------------------------------------------------


def _probe_event(stack: _Stack, bucket: str, key: str) -> dict[str, Any]:
    """An Object Created event of one upload, with the fields TestEventPattern requires."""
    partition, region, account = stack.arn_parts()
    return {
        "version": "0",
        "id": "00000000-0000-0000-0000-000000000000",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": account,
        "time": "2026-01-01T00:00:00Z",
        "region": region,
        "resources": [f"arn:{partition}:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            # KeyPrefix and KeySuffix hold only characters S3 leaves as they are in
            # its events (the template's AllowedPattern), so the key needs no encoding.
            "object": {"key": key, "size": 1, "etag": "0" * 32, "sequencer": "0" * 18},
            "request-id": "0" * 16,
            "requester": account,
            "source-ip-address": "127.0.0.1",
            "reason": "PutObject",
        },
    }


def _queue_arn(stack: _Stack, url: str) -> str:
    """A queue's ARN from its URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)."""
    partition, region, _ = stack.arn_parts()
    account, name = urlsplit(url).path.strip("/").split("/", 1)
    return f"arn:{partition}:sqs:{region}:{account}:{name}"


def check_rules(stack: _Stack) -> Iterator[Finding]:
    events = stack.client("events")
    processor = stack.target.output("ProcessorStateMachineArn")
    bucket = stack.target.output("IngestBucketName")
    key = stack.parameter("KeyPrefix") + PROBE_NAME + stack.parameter("KeySuffix")
    # In the batch mode the rules send to the stack's own source queue (template.yaml,
    # EventsThroughQueue); a queue the stack does not own is not their target.
    through_queue = stack.parameter("SqsBatchMode") == "true" and stack.parameter(
        "SqsSource", "none"
    ) in ("none", "create")
    if through_queue:
        expected, what = _queue_arn(stack, stack.target.output("SourceQueueUrl")), "source queue"
        how = "its DeadLetterConfig and no role: the queue's policy lets the rule send"
    else:
        expected, what = processor, "processor"
        how = "the stack's IngressRole and its DeadLetterConfig"
    upload_rules = 0
    for logical_id, physical_id in stack.of_type("AWS::Events::Rule"):
        bus, _, name = physical_id.rpartition("|")
        on_bus = {"EventBusName": bus} if bus else {}
        check = f"rule {logical_id}"
        try:
            rule = events.describe_rule(Name=name, **on_bus)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            yield Finding(
                FAIL,
                check,
                f"{name} is gone (deleted outside the stack): no event reaches the "
                "processor. Recreate it as the template's rule, or delete and redeploy the stack",
            )
            continue
        problems: list[str] = []
        state = str(rule.get("State", ""))
        if not state.startswith("ENABLED"):
            problems.append(
                f"{name} is {state}: no event reaches the processor. "
                f"aws events enable-rule --name {name}"
            )
        targets = events.list_targets_by_rule(Rule=name, **on_bus).get("Targets", [])
        ours = [t for t in targets if t.get("Arn") == expected]
        if not ours:
            problems.append(
                f"{name} does not target the {what} {expected}: its events start "
                f"nothing. Put the target back (aws events put-targets --rule {name}, Id "
                f"processor, with {how})"
            )
        dead_letter = _queue_arn(stack, stack.target.output("IngressDeadLetterQueueUrl"))
        for target in ours:
            if not target.get("DeadLetterConfig", {}).get("Arn"):
                fixed = [{**target, "DeadLetterConfig": {"Arn": dead_letter}}]
                problems.append(
                    f"target {target.get('Id')} of {name} has no dead-letter queue: an event "
                    "EventBridge cannot deliver after its retries is dropped, with no trace. "
                    f"aws events put-targets --rule {name} --targets '{json.dumps(fixed)}'"
                )
        pattern = json.loads(rule.get("EventPattern") or "{}")
        uploads = "aws.s3" in pattern.get("source", [])
        if uploads:
            event = _probe_event(stack, bucket, key)
            matches = events.test_event_pattern(
                EventPattern=rule["EventPattern"], Event=json.dumps(event)
            )["Result"]
            upload_rules += 1
            if not matches:
                problems.append(
                    f"{name} does not match an upload of s3://{bucket}/{key}: its pattern "
                    f"{rule['EventPattern']} was changed outside the stack. Put back the "
                    "pattern of the template's ObjectCreatedRule: aws events put-rule "
                    f"--name {name} --event-pattern ..."
                )
        for problem in problems:
            yield Finding(FAIL, check, problem)
        if not problems:
            matched = f", matches uploads of s3://{bucket}/{key}" if uploads else ""
            dead = ours[0].get("DeadLetterConfig", {}).get("Arn", "").rsplit(":", 1)[-1]
            yield Finding(
                PASS, check, f"{name}: {state}, targets the {what} with DLQ {dead}{matched}"
            )
    if not upload_rules:
        yield Finding(
            FAIL,
            "rules",
            f"no rule of the stack takes Object Created events of s3://{bucket}: no upload "
            "starts the processor; recreate the stack's ObjectCreatedRule (redeploy)",
        )


# ---- the SQS source: the pipe and its queue ------------------------------------------


def _pipe_settings(pipe: Mapping[str, Any]) -> tuple[int, int, str]:
    """(BatchSize, MaximumBatchingWindowInSeconds, InvocationType), AWS's defaults filled in."""
    queue = pipe.get("SourceParameters", {}).get("SqsQueueParameters", {})
    target = pipe.get("TargetParameters", {}).get("StepFunctionStateMachineParameters", {})
    return (
        int(queue.get("BatchSize", 10)),
        int(queue.get("MaximumBatchingWindowInSeconds", 0)),
        str(target.get("InvocationType", "REQUEST_RESPONSE")),
    )


def check_sqs_source(stack: _Stack) -> Iterator[Finding]:
    """The pipe (when SqsSource is set): running, and batching as the stack's mode needs;
    then its source queue."""
    for _, name in stack.of_type("AWS::Pipes::Pipe"):
        pipe = stack.client("pipes").describe_pipe(Name=name)
        state = str(pipe.get("CurrentState", ""))
        if state == "RUNNING":
            yield Finding(PASS, "pipe", f"{name} is RUNNING")
        else:
            reason = f" ({pipe['StateReason']})" if pipe.get("StateReason") else ""
            yield Finding(
                FAIL,
                "pipe",
                f"{name} is {state}, desired {pipe.get('DesiredState')}{reason}: the queue's "
                f"messages wait unread. aws pipes start-pipe --name {name}",
            )
        yield from _pipe_batching(stack, pipe)
        yield from _source_queue(stack, pipe)


def _pipe_batching(stack: _Stack, pipe: Mapping[str, Any]) -> Iterator[Finding]:
    name = pipe["Name"]
    size, window, invocation = _pipe_settings(pipe)
    batch_mode = stack.parameter("SqsBatchMode") == "true"
    # UpdatePipe replaces the SqsQueueParameters group as one, a field left out reset to
    # its default (UpdatePipe API reference): the fix names the window it keeps.
    update = (
        f"aws pipes update-pipe --name {name} --role-arn {pipe.get('RoleArn')} "
        '--source-parameters \'{"SqsQueueParameters": {"BatchSize": %d, '
        f'"MaximumBatchingWindowInSeconds": {window}}}}}\''
    )
    problems: list[str] = []
    if batch_mode:
        # A constant of the template since P12 (docs/operate.md, Constants); a stack
        # deployed before it may still carry the parameter.
        wanted = int(stack.parameter("SqsBatchSize", "10"))
        if invocation != "REQUEST_RESPONSE":
            problems.append(
                f"{name} starts the batch workflow {invocation}: its messages are deleted "
                "before their outcome is in the ledger (SqsBatchMode needs REQUEST_RESPONSE); "
                "recreate the pipe as the template makes it"
            )
        if size > wanted:
            problems.append(
                f"{name} reads batches of {size}, over SqsBatchSize {wanted}: a batch can "
                "exceed the 256 KiB Step Functions input the queue's message size was cut "
                f"for, and be sent in smaller parts. {update % wanted}"
            )
        mode = f"SqsBatchMode: batches of up to {wanted}, REQUEST_RESPONSE"
    else:
        processor = stack.target.output("ProcessorStateMachineArn")
        if pipe.get("Target") != processor:
            problems.append(
                f"{name} targets {pipe.get('Target')}, not the processor {processor}; "
                "recreate the pipe as the template makes it"
            )
        if invocation != "FIRE_AND_FORGET":
            problems.append(
                f"{name} starts the processor {invocation}: a STANDARD workflow can only be "
                "started FIRE_AND_FORGET (PipeTargetStateMachineParameters), and the pipe "
                "stops on it; recreate the pipe as the template makes it"
            )
        if size != 1:
            problems.append(
                f"{name} reads batches of {size}: the processor takes one message per "
                "execution, and a batch of several ends InvalidEvent, its messages sent to "
                f"the DLQ unprocessed. {update % 1}"
            )
        mode = "one message per execution, FIRE_AND_FORGET"
    for problem in problems:
        yield Finding(FAIL, "pipe batching", problem)
    if not problems:
        yield Finding(PASS, "pipe batching", f"{name}: batches of {size} ({mode})")


def _source_queue(stack: _Stack, pipe: Mapping[str, Any]) -> Iterator[Finding]:
    """The queue the pipe reads: in the stack's Region, a redrive policy, and a visibility
    timeout the pipe's longest hold of a batch fits in."""
    region, account, queue = str(pipe["Source"]).split(":")[3:6]
    # SqsSource's pattern takes any Region, and a template rule cannot compare it with the
    # stack's (rule functions have no Fn::Split or Fn::Sub: intrinsic-function-reference-
    # rules.html): whether a pipe can read a queue of another Region is not verified.
    _, home, _ = stack.arn_parts()
    if region != home:
        yield Finding(
            FAIL,
            "source queue",
            f"the pipe reads {pipe['Source']}, in {region}, but the stack is in {home}: "
            "the stack's alarms, onceflow redrive --queue source and these checks look "
            f"for queues in {home}, and a failed message would go unseen. Deploy with "
            f"SqsSource naming a queue of {home}, or deploy the stack in {region}",
        )
        return
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=queue, QueueOwnerAWSAccountId=account)["QueueUrl"]
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "RedrivePolicy",
            "VisibilityTimeout",
            "MessageRetentionPeriod",
            "MaximumMessageSize",
        ],
    )["Attributes"]
    visibility = int(attributes.get("VisibilityTimeout", 30))
    size, window, invocation = _pipe_settings(pipe)
    target = stack.state_machine(str(pipe["Target"]))
    run = worst_case_seconds(target["definition"], items=size)
    if target.get("type") == "EXPRESS":
        run = min(run, EXPRESS_LIMIT_SECONDS)
    redrive = json.loads(attributes.get("RedrivePolicy") or "{}")
    dlq = str(redrive.get("deadLetterTargetArn", "")).rsplit(":", 1)[-1]
    if not dlq:
        days = int(attributes.get("MessageRetentionPeriod", 345600)) // 86400
        policy = json.dumps(
            {"deadLetterTargetArn": "<your DLQ's ARN>", "maxReceiveCount": "5"}
        ).replace('"', '\\"')
        yield Finding(
            FAIL,
            "source queue",
            f"{queue} has no redrive policy: a message the pipe cannot hand over comes back "
            f"after each visibility timeout until the queue's retention ({days} days) "
            "deletes it unprocessed, with no DLQ to show it. "
            f"aws sqs set-queue-attributes --queue-url {url} "
            f'--attributes \'{{"RedrivePolicy": "{policy}"}}\'',
        )
    else:
        yield _receive_budget(stack, queue, dlq, int(redrive.get("maxReceiveCount", 0)), visibility)
        retention = int(attributes.get("MessageRetentionPeriod", _SQS_DEFAULT_RETENTION))
        yield _dead_letter_retention(stack, queue, retention, str(redrive["deadLetterTargetArn"]))
    yield from _visibility(url, visibility, window, run, invocation)
    if invocation == "REQUEST_RESPONSE":
        largest = int(attributes.get("MaximumMessageSize", _SQS_DEFAULT_MESSAGE_BYTES))
        yield _message_size(url, largest, size)
    if dlq:
        yield _dead_letter_alarm(stack, dlq)


# Step Functions' largest execution input, which a synchronous pipe's whole batch must fit
# ("Step Functions state machine (262,144 characters)": eb-pipes-batching-concurrency.html);
# what the pipe writes of one record besides its body (template.yaml, SourceQueue); SQS's
# default largest message for a queue made without the attribute (SetQueueAttributes).
_STEP_FUNCTIONS_INPUT_BYTES = 262_144
_RECORD_BYTES = 2048
_SQS_DEFAULT_MESSAGE_BYTES = 262_144


def _fitting_message_bytes(batch_size: int) -> int:
    """The largest MaximumMessageSize, in whole KiB and at most 64 KiB (the processor's event
    limit, half of it escaped), whose full batch fits Step Functions' input: each body
    JSON-escaped to at most twice its size, plus its record (twice if the pipe writes
    non-ASCII text as UTF-8, as the engine does; as \\uXXXX escapes an "é" would take
    three times its bytes: which it writes is not verified)."""
    per_message = (_STEP_FUNCTIONS_INPUT_BYTES // max(batch_size, 1) - _RECORD_BYTES) // 2
    return max(1024, min(65_536, per_message // 1024 * 1024))


def _message_size(url: str, largest: int, batch_size: int) -> Finding:
    """The batch mode hands the pipe's batch to one synchronous execution. The pipe gathers
    a batch only "until ... the invocation payload size quota is reached" (eb-pipes-sqs.html),
    a Step Functions target's being the event's total payload, 262,144 characters
    (eb-pipes-batching-concurrency.html): a queue that takes larger messages than a full
    batch of them fits gets fewer per execution, and a message too large alone never starts.
    The stack sizes the queue it creates so that a full batch fits; an existing queue
    (SqsSource=<ARN>) is the user's to size."""
    fits = _fitting_message_bytes(batch_size)
    if batch_size * (2 * largest + _RECORD_BYTES) <= _STEP_FUNCTIONS_INPUT_BYTES:
        return Finding(
            PASS,
            "source queue message size",
            f"at most {largest} bytes a message: a batch of {batch_size} fits one execution's "
            "256 KiB input",
        )
    return Finding(
        WARN,
        "source queue message size",
        f"the queue takes messages of up to {largest} bytes, but a batch of {batch_size} "
        "such messages, as the pipe writes them, can outgrow the batch workflow's 256 KiB "
        "input: the pipe then sends fewer per execution (it stops gathering at the input's "
        "size), and a message too large alone can never start: it spends its receives until "
        "the queue moves it to its DLQ unprocessed (where moving it back fails the same way). "
        f"aws sqs set-queue-attributes --queue-url {url} --attributes "
        f"MaximumMessageSize={fits} (larger messages are refused when sent, where the "
        "producer sees it)",
    )


def _batch_lock(stack: _Stack) -> int:
    """The shortest lock a batch claim holds: LockTimeoutSeconds capped, as the batch
    definition caps it, by what a batch execution can last (statemachines/src/processor.asl.yaml,
    Claim's lockSeconds for the batch: five minutes, the Process task's timeout, a minute)."""
    # Constants since P12 (docs/operate.md, Constants), parameters of older stacks.
    lock = int(stack.parameter("LockTimeoutSeconds", "900") or 900)
    task = int(stack.parameter("ProcessorTimeoutSeconds", "60") or 60) + 10
    return min(lock, EXPRESS_LIMIT_SECONDS + task + 60)


def _receive_budget(stack: _Stack, queue: str, dlq: str, receives: int, visibility: int) -> Finding:
    """In the batch mode each attempt takes the receives its lock needs to expire (one
    when the visibility timeout outlasts the lock), and one more dead-letters a row whose
    last attempt died: the budget must cover MaxAttempts of them (docs/ingress.md)."""
    moves = f"{queue} moves a message to {dlq} after {receives} receives"
    if stack.parameter("SqsBatchMode") != "true":
        return Finding(PASS, "source queue", moves)
    attempts = int(stack.parameter("MaxAttempts", "3") or 3)
    lock = _batch_lock(stack)
    per_attempt = max(1, math.ceil(lock / max(visibility, 1)))
    needed = attempts * per_attempt + 1
    if receives >= needed:
        return Finding(PASS, "source queue", f"{moves}: enough for MaxAttempts {attempts}")
    return Finding(
        WARN,
        "source queue",
        f"{moves}, but MaxAttempts {attempts} can need {needed} ({per_attempt} a attempt: a "
        f"claim's lock of {lock} s at a visibility timeout of {visibility} s, and one to "
        "dead-letter a row whose last attempt died): unsettled work can reach the source "
        "DLQ first (onceflow redrive --queue source moves it back). Raise maxReceiveCount "
        f"to {needed}",
    )


# SQS's default retention of a queue made without the attribute (4 days), and its longest
# (14 days) (SetQueueAttributes, MessageRetentionPeriod).
_SQS_DEFAULT_RETENTION = 345_600
_SQS_LONGEST_RETENTION = 1_209_600


def _dead_letter_retention(stack: _Stack, queue: str, retention: int, dlq_arn: str) -> Finding:
    """A DLQ expires a message on its original enqueue time ("For standard queues, the
    expiration of a message is always based on its original enqueue timestamp. When a message
    is moved to a dead-letter queue, the enqueue timestamp is unchanged": SQS developer guide,
    setting-up-dead-letter-queue-retention.html, which asks a DLQ's retention to be longer
    than its queue's). A DLQ that keeps messages for less time than its queue deletes a message
    the queue moves to it late (its receives spent over days, a pipe stopped) at once: work
    the stack never claimed, which no audit of the ledger can find. The stack's own DLQ keeps
    14 days; a queue you bring keeps SQS's default 4 unless you set it."""
    account, name = dlq_arn.split(":")[4:6]
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    kept = int(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MessageRetentionPeriod"])[
            "Attributes"
        ].get("MessageRetentionPeriod", _SQS_DEFAULT_RETENTION)
    )
    days = f"{kept / 86400:g} days, {queue} {retention / 86400:g}"
    if kept >= retention:
        return Finding(
            PASS,
            "source DLQ retention",
            f"{name} keeps a message {days}: it holds whatever its queue moves there",
        )
    return Finding(
        FAIL,
        "source DLQ retention",
        f"{name} keeps a message {days}, counted from when it was first sent: a message "
        f"moved there later than {kept / 86400:g} days expires at once, its work lost "
        "without a trace (whether the DLQ's alarm sees it first is not verified). "
        f"aws sqs set-queue-attributes --queue-url {url} --attributes "
        f"MessageRetentionPeriod={_SQS_LONGEST_RETENTION}",
    )


def _dead_letter_alarm(stack: _Stack, dlq: str) -> Finding:
    """An alarm on the source queue's DLQ. The stack makes one for a queue it creates; for
    SqsSource=<your queue's ARN> it cannot, since the DLQ is named only in that queue's
    redrive policy, which CloudFormation does not read: the doctor looks for one."""
    dimensions = [{"Name": "QueueName", "Value": dlq}]
    answer = stack.client("cloudwatch").describe_alarms_for_metric(
        MetricName="ApproximateNumberOfMessagesVisible", Namespace="AWS/SQS", Dimensions=dimensions
    )
    watching = [
        a["AlarmName"]
        for a in answer.get("MetricAlarms", [])
        if a.get("Dimensions") == dimensions and a.get("ActionsEnabled", True)
    ]
    if watching:
        return Finding(PASS, "source queue DLQ alarm", f"{dlq} is watched by {watching[0]}")
    topics = [name for logical, name in stack.of_type("AWS::SNS::Topic") if logical == "AlarmTopic"]
    topic = topics[0] if topics else "<the stack's AlarmTopicArn>"
    return Finding(
        FAIL,
        "source queue DLQ alarm",
        f"no alarm watches {dlq}, where the pipe leaves messages it gave up on: they wait "
        "there unseen until SQS deletes them. aws cloudwatch put-metric-alarm --alarm-name "
        f"{dlq}-not-empty --namespace AWS/SQS --metric-name ApproximateNumberOfMessagesVisible "
        f"--dimensions Name=QueueName,Value={dlq} --statistic Maximum --period 300 "
        "--evaluation-periods 1 --threshold 0 --comparison-operator GreaterThanThreshold "
        f"--treat-missing-data notBreaching --alarm-actions {topic}",
    )


def _visibility(
    url: str, visibility: int, window: int, run: float, invocation: str
) -> Iterator[Finding]:
    if invocation != "REQUEST_RESPONSE":
        yield Finding(
            PASS,
            "source queue visibility",
            f"{visibility} s: the pipe deletes each message once its execution has started "
            f"({invocation}), so the workflow's worst case ({run:.0f} s) does not hold it",
        )
        return
    needed = window + run
    if visibility > needed:
        yield Finding(
            PASS,
            "source queue visibility",
            f"{visibility} s, longer than the pipe can hold a batch: {window} s of batching "
            f"window plus the batch workflow's worst case of {run:.0f} s",
        )
        return
    yield Finding(
        FAIL,
        "source queue visibility",
        f"{visibility} s, but the pipe can hold a batch {needed:.0f} s ({window} s of batching "
        f"window, {run:.0f} s of the batch workflow's worst case): its messages come back "
        "while their batch still runs, and their copies count receives toward the DLQ. "
        f"aws sqs set-queue-attributes --queue-url {url} --attributes "
        f"VisibilityTimeout={max(6 * EXPRESS_LIMIT_SECONDS, math.ceil(needed) + 60)} (AWS asks "
        "six times the longest run of an SQS source's consumer: Lambda's "
        "services-sqs-configure.html)",
    )


# ---- the alarms ---------------------------------------------------------------------


def check_alarms(stack: _Stack) -> Iterator[Finding]:
    names = [name for _, name in stack.of_type("AWS::CloudWatch::Alarm")]
    cloudwatch = stack.client("cloudwatch")
    alarms: dict[str, dict[str, Any]] = {}
    for start in range(0, len(names), 100):  # DescribeAlarms takes at most 100 names
        chunk = names[start : start + 100]
        answer = cloudwatch.describe_alarms(AlarmNames=chunk, MaxRecords=100)
        alarms.update({a["AlarmName"]: a for a in answer.get("MetricAlarms", [])})
    topics: dict[str, list[str]] = {}
    for name in names:
        alarm = alarms.get(name)
        if alarm is None:
            yield Finding(
                FAIL,
                "alarms",
                f"{name} is gone (deleted outside the stack): nothing watches what it "
                "watched; delete and redeploy the stack",
            )
            continue
        if not alarm.get("ActionsEnabled", True):
            yield Finding(
                FAIL,
                "alarms",
                f"{name} has its actions disabled: it notifies no one. "
                f"aws cloudwatch enable-alarm-actions --alarm-names {name}",
            )
        sns = [a for a in alarm.get("AlarmActions", []) if str(a).split(":")[2:3] == ["sns"]]
        if not sns:
            yield Finding(
                FAIL,
                "alarms",
                f"{name} notifies no SNS topic when it fires; put the stack's AlarmTopic "
                "back in its AlarmActions",
            )
        for topic in sns:
            topics.setdefault(str(topic), []).append(name)
    for topic, watched in topics.items():
        yield _topic_finding(stack, topic, watched)


def _topic_finding(stack: _Stack, topic: str, alarms: list[str]) -> Finding:
    subscriptions: list[dict[str, Any]] = []
    paginator = stack.client("sns").get_paginator("list_subscriptions_by_topic")
    try:
        for page in paginator.paginate(TopicArn=topic):
            subscriptions += page.get("Subscriptions", [])
    except ClientError as exc:
        if error_code(exc) != "NotFound":
            raise
        return Finding(
            FAIL, "alarms", f"{len(alarms)} alarm(s) notify {topic}, which does not exist"
        )
    confirmed = [s for s in subscriptions if str(s.get("SubscriptionArn", "")).startswith("arn:")]
    pending = len(subscriptions) - len(confirmed)
    short = topic.rsplit(":", 1)[-1]
    if confirmed:
        ends = ", ".join(f"{s.get('Protocol')} {s.get('Endpoint')}" for s in confirmed)
        return Finding(
            PASS, "alarms", f"{len(alarms)} alarm(s) notify {short}, confirmed to: {ends}"
        )
    waiting = (
        f" ({pending} waiting for confirmation: open the link in the email)" if pending else ""
    )
    if stack.target.local:
        # Nothing local delivers an alarm or sends the confirmation email: a fact of
        # the local engine, not a fault of the stack, and nothing to fix here.
        return Finding(
            WARN,
            "alarms",
            f"{len(alarms)} alarm(s) notify {short}, which has no confirmed subscription; "
            "a subscription cannot be confirmed locally (no email is sent), so this is "
            "checked on AWS: deploy with AlarmEmail, or subscribe a destination there and "
            "confirm it",
        )
    return Finding(
        FAIL,
        "alarms",
        f"{len(alarms)} alarm(s) notify {short}, which has no confirmed subscription"
        f"{waiting}: an alarm that fires reaches no one. Subscribe a destination: "
        f"aws sns subscribe --topic-arn {topic} --protocol email --notification-endpoint "
        "you@example.com (or deploy with AlarmEmail), then confirm it",
    )


# ---- the audit ----------------------------------------------------------------------


def check_audit_schedule(stack: _Stack) -> Iterator[Finding]:
    audit = stack.target.output("AuditStateMachineArn")
    schedules = stack.of_type("AWS::Scheduler::Schedule")
    if not schedules:
        yield Finding(
            FAIL,
            "audit schedule",
            "the stack has no schedule: no audit recovers lost events unless someone runs "
            f"{stack.command('audit')}; redeploy the stack",
        )
        return
    scheduler = stack.client("scheduler")
    for _, name in schedules:
        try:
            schedule = scheduler.get_schedule(Name=name)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            yield Finding(
                FAIL,
                "audit schedule",
                f"{name} is gone (deleted outside the stack): no audit runs; "
                f"delete and redeploy the stack, and meanwhile {stack.command('audit')}",
            )
            continue
        target = schedule.get("Target", {}).get("Arn")
        if target != audit:
            yield Finding(
                FAIL,
                "audit schedule",
                f"{name} starts {target}, not the audit {audit}; delete and redeploy the stack",
            )
        elif schedule.get("State") != "ENABLED":
            yield Finding(
                FAIL,
                "audit schedule",
                f"{name} is {schedule.get('State')}: no audit runs, so a lost event is never "
                "recovered. Enable it: aws scheduler update-schedule --name "
                f"{name} --state ENABLED, with its other settings as get-schedule shows "
                "them (update-schedule replaces them all); or deploy with an AuditSchedule "
                "other than off",
            )
        else:
            yield Finding(
                PASS,
                "audit schedule",
                f"{name} is ENABLED: {schedule.get('ScheduleExpression')}",
            )


def _iso(moment: Any) -> str:
    return moment.isoformat() if hasattr(moment, "isoformat") else str(moment or "")


def check_last_audit(stack: _Stack) -> Iterator[Finding]:
    sfn = stack.client("stepfunctions")
    executions = sfn.list_executions(
        stateMachineArn=stack.target.output("AuditStateMachineArn"), maxResults=20
    ).get("executions", [])
    finished = [e for e in executions if e.get("status") != "RUNNING"]
    running = len(executions) - len(finished)
    if not finished:
        now = f" ({running} running now)" if running else ""
        yield Finding(
            WARN,
            "last audit",
            f"no audit has finished yet{now}: lost events wait for the first. "
            f"{stack.command('audit')} runs one now",
        )
        return
    last = finished[0]  # ListExecutions answers newest first
    when = _iso(last.get("stopDate"))
    if last["status"] == "SUCCEEDED":
        yield Finding(PASS, "last audit", f"{last['name']} SUCCEEDED, {when}")
        return
    described = sfn.describe_execution(executionArn=last["executionArn"])
    why = f"{described.get('error', '')}: {str(described.get('cause', ''))[:300]}"
    yield Finding(
        FAIL,
        "last audit",
        f"{last['name']} {last['status']}, {when} ({why}): lost events and stuck work "
        f"wait until an audit succeeds. Fix the cause ({stack.command('show ' + last['name'])}), "
        f"then {stack.command('audit')}",
    )


# The inventory the audit reads: AUDIT_INVENTORY_PREFIX is where S3 delivers it,
# "<destination prefix>/<source bucket>/<configuration id>/" (S3 user guide, "Inventory
# list"); its age limit (AUDIT_INVENTORY_MAX_AGE_HOURS) names its frequency. The rest is
# what the audit reads out of a report: every version (a versioned bucket's uploads are
# units of work by version), CSV (the only format a Distributed Map reads), and the
# fields it judges by (template.yaml, IngestBucket's InventoryConfigurations).
INVENTORY_FIELDS = ["Size", "LastModifiedDate", "ETag"]


def inventory_configuration(
    stack: _Stack, bucket: str, delivered_under: str, max_age_hours: int
) -> dict[str, Any]:
    """The S3 Inventory configuration the audit reads, as PutBucketInventoryConfiguration
    takes it (its InventoryConfiguration)."""
    destination_prefix, _, config_id = delivered_under.rstrip("/").rpartition(f"/{bucket}/")
    _, _, account = stack.arn_parts()
    partition = stack.arn_parts()[0]
    configuration: dict[str, Any] = {
        "Id": config_id,
        "IsEnabled": True,
        "Destination": {
            "S3BucketDestination": {
                "AccountId": account,
                "Bucket": f"arn:{partition}:s3:::{stack.target.output('OutputBucketName')}",
                "Format": "CSV",
                "Prefix": destination_prefix,
            }
        },
        "IncludedObjectVersions": "All",
        "OptionalFields": list(INVENTORY_FIELDS),
        "Schedule": {"Frequency": "Weekly" if max_age_hours > 48 else "Daily"},
    }
    if stack.parameter("KeyPrefix"):
        configuration["Filter"] = {"Prefix": stack.parameter("KeyPrefix")}
    return configuration


def _inventory_differs(
    wanted: Mapping[str, Any], found: Mapping[str, Any], key: str = ""
) -> list[str]:
    """What of the configuration found keeps the audit from reading it, by field; key is
    the stack's KmsKeyArn, the only KMS key the audit's role may decrypt with."""
    got = found.get("Destination", {}).get("S3BucketDestination", {})
    want = wanted["Destination"]["S3BucketDestination"]
    differs = [
        f"{name} is {found.get(name)!r}, not {wanted[name]!r}"
        for name in ("IsEnabled", "IncludedObjectVersions")
        if found.get(name) != wanted[name]
    ]
    differs += [
        f"Destination {name} is {got.get(name)!r}, not {want[name]!r}"
        for name in ("Bucket", "Format", "Prefix")
        if (got.get(name) or "") != want[name]
    ]
    # "If no account ID is provided, the owner is not validated before exporting data"
    # (S3 API reference, InventoryS3BucketDestination): another account's, nothing exported.
    if got.get("AccountId") not in (None, "", want["AccountId"]):
        differs.append(f"Destination AccountId is {got['AccountId']!r}, not {want['AccountId']!r}")
    # A Weekly report is older than the 2 days a Daily audit reads on 5 days of 7; a Daily
    # one serves a Weekly audit (8 days).
    frequency = (found.get("Schedule") or {}).get("Frequency")
    if wanted["Schedule"]["Frequency"] == "Daily" and frequency != "Daily":
        differs.append(f"Schedule Frequency is {frequency!r}, not 'Daily'")
    # Reports encrypted SSE-KMS (InventoryEncryption's SSEKMS KeyId) are read with
    # kms:Decrypt on their key (S3 user guide, "Using server-side encryption with AWS KMS
    # keys"); the template grants the audit's role KmsKeyArn alone.
    kms = ((got.get("Encryption") or {}).get("SSEKMS") or {}).get("KeyId")
    if kms and kms != key:
        differs.append(
            f"Destination Encryption is SSE-KMS with {kms}, which the audit's role may not "
            f"decrypt with ({'KmsKeyArn is ' + key if key else 'no KmsKeyArn'})"
        )
    missing = [f for f in INVENTORY_FIELDS if f not in (found.get("OptionalFields") or [])]
    if missing:
        differs.append(f"OptionalFields lack {', '.join(missing)}")
    wanted_prefix = wanted.get("Filter", {}).get("Prefix", "")
    if not wanted_prefix.startswith(found.get("Filter", {}).get("Prefix", "")):
        differs.append(f"its Filter leaves out keys under {wanted_prefix!r}")
    return differs


def _inventories(s3: Any, bucket: str) -> Iterator[dict[str, Any]]:
    """Every inventory configuration of bucket: S3 lists "not more than 100 configurations
    at a time" ("Always check the IsTruncated element": S3 API reference,
    ListBucketInventoryConfigurations)."""
    kwargs: dict[str, Any] = {"Bucket": bucket}
    while True:
        listed = s3.list_bucket_inventory_configurations(**kwargs)
        yield from listed.get("InventoryConfigurationList") or []
        if not listed.get("IsTruncated"):
            return
        kwargs["ContinuationToken"] = listed["NextContinuationToken"]


def check_audit_inventory(stack: _Stack) -> Iterator[Finding]:
    bucket = stack.target.output("IngestBucketName")
    functions = [n for lid, n in stack.of_type("AWS::Lambda::Function") if lid == "AuditFunction"]
    if not functions:
        yield Finding(
            FAIL,
            "audit inventory",
            "the stack has no AuditFunction: no audit can run (a stack made by another "
            "version of onceflow?); redeploy the stack",
        )
        return
    (function,) = functions
    environment = (
        stack.client("lambda")
        .get_function_configuration(FunctionName=function)
        .get("Environment", {})
        .get("Variables", {})
    )
    delivered_under = environment.get("AUDIT_INVENTORY_PREFIX", "")
    if not delivered_under:
        yield Finding(
            PASS,
            "audit inventory",
            f"AuditInventory {stack.parameter('AuditInventory', 'auto')}: the audit lists "
            f"s3://{bucket} at every run, a cost that grows with the bucket (docs/audit.md)",
        )
        return
    wanted = inventory_configuration(
        stack, bucket, delivered_under, int(environment.get("AUDIT_INVENTORY_MAX_AGE_HOURS", 48))
    )
    found = [c for c in _inventories(stack.client("s3"), bucket) if c["Id"] == wanted["Id"]]
    put = (
        f"aws s3api put-bucket-inventory-configuration --bucket {bucket} --id {wanted['Id']} "
        f"--inventory-configuration '{json.dumps(wanted, separators=(',', ':'))}'"
    )
    lists = (
        f"the audit lists s3://{bucket} at every run instead of reading an inventory report, "
        "a cost that grows with the bucket (docs/audit.md)"
    )
    if not found:
        whose = "you add it" if stack.parameter("ExistingBucketName") else "redeploy, or add it"
        yield Finding(
            WARN,
            "audit inventory",
            f"s3://{bucket} has no S3 Inventory {wanted['Id']}: {lists}. The stack grants "
            f"its delivery; {whose} (its first report arrives within 48 hours): {put}",
        )
        return
    differs = _inventory_differs(wanted, found[0], stack.parameter("KmsKeyArn"))
    if differs:
        yield Finding(
            WARN,
            "audit inventory",
            f"the S3 Inventory {wanted['Id']} of s3://{bucket} cannot serve the audit "
            f"({'; '.join(differs)}): {lists}. Put it back: {put}",
        )
        return
    yield Finding(
        PASS,
        "audit inventory",
        f"s3://{bucket} delivers the {found[0]['Schedule']['Frequency'].lower()} S3 Inventory "
        f"{wanted['Id']} the audit reads",
    )


# ---- the processor ------------------------------------------------------------------


def _tasks_invoking(definition: Mapping[str, Any], function: str) -> Iterator[tuple[str, Any]]:
    """(state name, TimeoutSeconds) of every Task, at any depth, that invokes the function."""
    for name, state in definition.get("States", {}).items():
        for branch in state.get("Branches", []):
            yield from _tasks_invoking(branch, function)
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor is not None:
            yield from _tasks_invoking(processor, function)
        arguments = state.get("Arguments") or state.get("Parameters") or {}
        if (
            state.get("Type") == "Task"
            and str(state.get("Resource", "")).endswith(":states:::lambda:invoke")
            and isinstance(arguments, dict)
            and arguments.get("FunctionName") == function
        ):
            yield name, state.get("TimeoutSeconds")


def check_processor_timeout(stack: _Stack) -> Iterator[Finding]:
    function = stack.target.output("ProcessorFunctionArn")
    try:
        configuration = stack.client("lambda").get_function_configuration(FunctionName=function)
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        yield Finding(
            FAIL,
            "processor timeout",
            f"the processing function {function} does not exist: every Process call fails "
            "and its work is dead-lettered. Deploy with ProcessorFunctionArn naming a "
            "function of this account and Region (or empty, for the bundled one)",
        )
        return
    timeout = int(configuration["Timeout"])
    definition = stack.state_machine(stack.target.output("ProcessorStateMachineArn"))
    tasks = list(_tasks_invoking(definition["definition"], function))
    if not tasks:
        yield Finding(
            FAIL,
            "processor timeout",
            f"no Task of the processor invokes {function}; delete and redeploy the stack",
        )
        return
    bundled = not stack.parameter("ProcessorFunctionArn")
    for task, given in tasks:
        if given is None:
            yield Finding(WARN, "processor timeout", f"the {task} task sets no TimeoutSeconds")
            continue
        allowed = state_seconds({"TimeoutSeconds": given})  # the timeout alone: no retrier
        if timeout < allowed:
            yield Finding(
                PASS,
                "processor timeout",
                f"the function stops after {timeout} s, before the {task} task's {allowed:.0f} s",
            )
            continue
        fix = (
            f"Set it back: aws lambda update-function-configuration --function-name "
            f"{function} --timeout {stack.parameter('ProcessorTimeoutSeconds')}"
            if bundled
            else f"Deploy with ProcessorTimeoutSeconds={timeout} (the task then allows "
            f"{timeout + 10} s), or lower the function's timeout below {allowed:.0f} s"
        )
        yield Finding(
            FAIL,
            "processor timeout",
            f"the function may run {timeout} s, the {task} task gives up after "
            f"{allowed:.0f} s: a timed-out call is retried while the first may still run, "
            f"and the lock, sized for the task, can expire under it. {fix}",
        )


# ---- the diagnosis -------------------------------------------------------------------

Check = Callable[[_Stack], Iterator[Finding]]
# In the order the operator reads them: how work gets in, then who hears of trouble,
# then what recovers lost work, then what runs it.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("bucket events", check_bucket_events),
    ("bucket versioning", check_bucket_versioning),
    ("rules", check_rules),
    ("sqs source", check_sqs_source),
    ("alarms", check_alarms),
    ("audit schedule", check_audit_schedule),
    ("audit inventory", check_audit_inventory),
    ("last audit", check_last_audit),
    ("processor timeout", check_processor_timeout),
)


def examine(target: DoctorTarget) -> list[Finding]:
    """Every check on the stack. A check whose reads fail is one FAIL naming the error
    (a missing permission, a throttled call) and the others still run."""
    stack = _Stack(target, target.parameters(), target.resources())
    findings: list[Finding] = []
    for label, check in CHECKS:
        try:
            findings += list(check(stack))
        except ClientError as exc:
            findings.append(
                Finding(
                    FAIL,
                    label,
                    f"could not be read: {error_code(exc)}: {_message(exc)} (the doctor's "
                    "calls and the permissions they need: docs/doctor.md)",
                )
            )
    return findings
