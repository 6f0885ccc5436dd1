"""`onceflow doctor` on the local engine's stack: all PASS when healthy, and each wiring
fault planted on purpose reported as exactly one FAIL that says how to fix it.

Each fault is made with the API an operator (or a mistake) would use on AWS; where the
engine plays the service itself (the rules, the pipe) the fault changes what it does,
and the test shows that too. The fault is undone after each test, so the stack is
healthy again for the next.
"""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from onceflow import ops
from onceflow.local.engine import LocalEngine
from onceflow.local.wiring import LocalStack
from tests.helpers import AUDIT, png_bytes

HEALTHY = {
    "SqsSource": "create",  # a pipe and its queue to check
    "AlarmEmail": "ops@example.com",  # a subscribed destination (moto confirms it at once)
}
CHECKS = [
    "bucket events",
    "bucket versioning",
    "rule ObjectCreatedRule",
    "rule CustomEventRule",
    "pipe",
    "pipe batching",
    "source queue",
    "source DLQ retention",
    "source queue visibility",
    "source queue DLQ alarm",
    "alarms",
    "audit schedule",
    "audit inventory",
    "last audit",
    "processor timeout",
]


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalEngine(parameters=HEALTHY, function_log=io.StringIO(), time_scale=0.0) as engine:
        local = LocalStack(engine)
        ops.run_audit(local)  # a last audit to read
        yield local


def failures(findings: list[ops.Finding]) -> list[ops.Finding]:
    return [f for f in findings if f.status != ops.PASS]


def test_a_healthy_stack_passes_every_check(stack: LocalStack) -> None:
    # WHEN the doctor examines the stack as it was deployed
    findings = ops.examine(stack)
    # THEN every check ran and passed
    assert [f.check for f in findings] == CHECKS
    assert failures(findings) == []


# ---- the faults, each with the way to undo it ---------------------------------------


def _bucket(stack: LocalStack) -> str:
    return stack.output("IngestBucketName")


def _rule(stack: LocalStack) -> str:
    return str(stack.engine.rules["ObjectCreatedRule"]["name"])


def _pipe(stack: LocalStack) -> str:
    return str(stack.engine.pipes["SourcePipe"]["name"])


def _schedule(stack: LocalStack, state: str) -> None:
    scheduler = stack.client("scheduler")
    name = stack.engine.stack.refs["AuditStateMachineSchedule"]
    current = scheduler.get_schedule(Name=name)
    scheduler.update_schedule(  # UpdateSchedule replaces every setting: pass them all
        Name=name,
        ScheduleExpression=current["ScheduleExpression"],
        FlexibleTimeWindow=current["FlexibleTimeWindow"],
        Target=current["Target"],
        State=state,
    )


def _notifications(configuration: dict[str, Any]) -> Callable[[LocalStack], None]:
    def put(stack: LocalStack) -> None:
        stack.client("s3").put_bucket_notification_configuration(
            Bucket=_bucket(stack), NotificationConfiguration=configuration
        )

    return put


def _versioning(status: str) -> Callable[[LocalStack], None]:
    def put(stack: LocalStack) -> None:
        stack.client("s3").put_bucket_versioning(
            Bucket=_bucket(stack), VersioningConfiguration={"Status": status}
        )

    return put


_SAVED: dict[str, Any] = {}


def _drop_dead_letter(stack: LocalStack) -> None:
    events = stack.client("events")
    (target,) = events.list_targets_by_rule(Rule=_rule(stack))["Targets"]
    _SAVED["target"] = target
    bare = {k: v for k, v in target.items() if k != "DeadLetterConfig"}
    events.put_targets(Rule=_rule(stack), Targets=[bare])


def _restore_dead_letter(stack: LocalStack) -> None:
    stack.client("events").put_targets(Rule=_rule(stack), Targets=[_SAVED.pop("target")])


def _batch_size(size: int) -> Callable[[LocalStack], None]:
    def update(stack: LocalStack) -> None:
        pipes = stack.client("pipes")
        pipe = pipes.describe_pipe(Name=_pipe(stack))
        pipes.update_pipe(
            Name=_pipe(stack),
            RoleArn=pipe["RoleArn"],
            SourceParameters={"SqsQueueParameters": {"BatchSize": size}},
        )

    return update


def _source_queue(stack: LocalStack) -> str:
    return stack.output("SourceQueueUrl")


def _drop_redrive(stack: LocalStack) -> None:
    sqs = stack.client("sqs")
    _SAVED["redrive"] = sqs.get_queue_attributes(
        QueueUrl=_source_queue(stack), AttributeNames=["RedrivePolicy"]
    )["Attributes"]["RedrivePolicy"]
    sqs.set_queue_attributes(QueueUrl=_source_queue(stack), Attributes={"RedrivePolicy": ""})


def _restore_redrive(stack: LocalStack) -> None:
    stack.client("sqs").set_queue_attributes(
        QueueUrl=_source_queue(stack), Attributes={"RedrivePolicy": _SAVED.pop("redrive")}
    )


def _dlq_retention(seconds: int) -> Callable[[LocalStack], None]:
    def set_it(stack: LocalStack) -> None:
        stack.client("sqs").set_queue_attributes(
            QueueUrl=stack.output("SourceDeadLetterQueueUrl"),
            Attributes={"MessageRetentionPeriod": str(seconds)},
        )

    return set_it


def _unsubscribe(stack: LocalStack) -> None:
    sns = stack.client("sns")
    topic = stack.output("AlarmTopicArn")
    for subscription in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]:
        sns.unsubscribe(SubscriptionArn=subscription["SubscriptionArn"])


def _subscribe(stack: LocalStack) -> None:
    stack.client("sns").subscribe(
        TopicArn=stack.output("AlarmTopicArn"), Protocol="email", Endpoint="ops@example.com"
    )


def _failed_audit(stack: LocalStack) -> None:
    def broken(event: Any, context: Any) -> Any:
        raise RuntimeError("the audit's function is broken")

    with stack.engine.override_function("AuditFunction", broken):
        result = stack.engine.execute(AUDIT, {})
    assert result.status == "FAILED"


def _audit(stack: LocalStack) -> None:
    ops.run_audit(stack)


def _function_timeout(seconds: int) -> Callable[[LocalStack], None]:
    def update(stack: LocalStack) -> None:
        stack.client("lambda").update_function_configuration(
            FunctionName=stack.output("ProcessorFunctionArn"), Timeout=seconds
        )

    return update


@dataclass(frozen=True)
class Fault:
    name: str
    plant: Callable[[LocalStack], None]
    undo: Callable[[LocalStack], None]
    check: str  # the one check that must fail
    fix: str  # words of the fix it must print


FAULTS = [
    Fault(
        "eventbridge notifications off",
        _notifications({}),
        _notifications({"EventBridgeConfiguration": {}}),
        "bucket events",
        "Amazon EventBridge: On",
    ),
    Fault(
        "versioning suspended",
        _versioning("Suspended"),
        _versioning("Enabled"),
        "bucket versioning",
        "--versioning-configuration Status=Enabled",
    ),
    Fault(
        "rule disabled",
        lambda s: s.client("events").disable_rule(Name=_rule(s)),
        lambda s: s.client("events").enable_rule(Name=_rule(s)),
        "rule ObjectCreatedRule",
        "aws events enable-rule --name",
    ),
    Fault(
        "rule target without its dlq",
        _drop_dead_letter,
        _restore_dead_letter,
        "rule ObjectCreatedRule",
        '"DeadLetterConfig": {"Arn": "arn:aws:sqs:us-east-1:123456789012:',
    ),
    Fault(
        "pipe stopped",
        lambda s: s.client("pipes").stop_pipe(Name=_pipe(s)),
        lambda s: s.client("pipes").start_pipe(Name=_pipe(s)),
        "pipe",
        "aws pipes start-pipe --name",
    ),
    Fault(
        "pipe batch size changed",
        _batch_size(10),
        _batch_size(1),
        "pipe batching",
        '"BatchSize": 1',
    ),
    Fault(
        "source queue without its redrive policy",
        _drop_redrive,
        _restore_redrive,
        "source queue",
        "RedrivePolicy",
    ),
    Fault(
        # SQS's default retention (4 days), as a DLQ made by hand often has: a message its
        # queue (14 days) moves there after 4 days expires at once, its work lost
        "source DLQ keeps messages shorter than its queue",
        _dlq_retention(345_600),
        _dlq_retention(1_209_600),
        "source DLQ retention",
        "MessageRetentionPeriod=1209600",
    ),
    Fault(
        "audit schedule disabled",
        lambda s: _schedule(s, "DISABLED"),
        lambda s: _schedule(s, "ENABLED"),
        "audit schedule",
        "--state ENABLED",
    ),
    Fault("last audit failed", _failed_audit, _audit, "last audit", "then onceflow audit"),
    Fault(
        "function timeout longer than the task's",
        _function_timeout(80),  # the Process task allows ProcessorTimeoutSeconds + 10 = 70 s
        _function_timeout(60),
        "processor timeout",
        "--timeout 60",
    ),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_wiring_fault_is_one_fail_with_its_fix(stack: LocalStack, fault: Fault) -> None:
    # GIVEN the healthy stack, with one fault planted
    assert failures(ops.examine(stack)) == []
    fault.plant(stack)
    try:
        # WHEN the doctor examines it
        findings = ops.examine(stack)
        # THEN exactly that check fails, saying how to fix it, and every other passes
        (failed,) = failures(findings)
        assert (failed.status, failed.check) == (ops.FAIL, fault.check)
        assert fault.fix in failed.detail
        # (a queue without a redrive policy has no DLQ to watch: that check has nothing to do)
        no_dlq = fault.name == "source queue without its redrive policy"
        assert [f.check for f in findings] == [
            c
            for c in CHECKS
            if not (no_dlq and c in ("source DLQ retention", "source queue DLQ alarm"))
        ]
    finally:
        fault.undo(stack)
    # AND once undone, the stack is healthy again
    assert failures(ops.examine(stack)) == []


def test_a_disabled_rule_and_a_stopped_pipe_stop_delivery_as_reported(stack: LocalStack) -> None:
    """The faults the doctor reads on the engine's own rule and pipe are real there."""
    engine = stack.engine
    s3 = stack.client("s3")
    bucket = _bucket(stack)
    s3.put_object(Bucket=bucket, Key="doctor/a.png", Body=png_bytes())
    engine.client("sqs").send_message(QueueUrl=_source_queue(stack), MessageBody='{"a": 1}')
    events, pipes = stack.client("events"), stack.client("pipes")
    # GIVEN the rule disabled and the pipe stopped
    events.disable_rule(Name=_rule(stack))
    pipes.stop_pipe(Name=_pipe(stack))
    try:
        # WHEN an upload's event and the queue's message arrive
        # THEN nothing starts
        assert engine.put_s3_event(bucket, "doctor/a.png") == []
        assert engine.pump_pipes() == []
    finally:
        events.enable_rule(Name=_rule(stack))
        pipes.start_pipe(Name=_pipe(stack))
    # AND once undone, both start the processor again
    assert len(engine.put_s3_event(bucket, "doctor/a.png")) == 1
    assert len(engine.pump_pipes()) == 1
    engine.wait_for_running("ProcessorStateMachine")


def test_an_inventory_the_audit_cannot_read_is_a_warning_naming_what_differs(
    stack: LocalStack,
) -> None:
    s3 = stack.client("s3")
    bucket = _bucket(stack)
    (configuration,) = s3.list_bucket_inventory_configurations(Bucket=bucket)[
        "InventoryConfigurationList"
    ]
    # GIVEN the stack's inventory changed by hand: current versions only, as Parquet
    changed = {**configuration, "IncludedObjectVersions": "Current"}
    changed["Destination"] = {"S3BucketDestination": {
        **configuration["Destination"]["S3BucketDestination"], "Format": "Parquet"}}  # fmt: skip
    s3.put_bucket_inventory_configuration(
        Bucket=bucket, Id=configuration["Id"], InventoryConfiguration=changed
    )
    try:
        # WHEN the doctor examines the stack
        (finding,) = [f for f in ops.examine(stack) if f.check == "audit inventory"]
    finally:
        s3.put_bucket_inventory_configuration(
            Bucket=bucket, Id=configuration["Id"], InventoryConfiguration=configuration
        )
    # THEN it warns, naming each field the audit cannot read, and how to put it back
    assert finding.status == ops.WARN
    assert "IncludedObjectVersions is 'Current', not 'All'" in finding.detail
    assert "Destination Format is 'Parquet', not 'CSV'" in finding.detail
    assert "aws s3api put-bucket-inventory-configuration --bucket " + bucket in finding.detail
    # AND once put back, it passes again
    (finding,) = [f for f in ops.examine(stack) if f.check == "audit inventory"]
    assert finding.status == ops.PASS, finding.detail


def test_a_batch_queue_hidden_shorter_than_a_batch_runs_fails() -> None:
    # GIVEN a stack in the SQS batch mode (EXPRESS limits), healthy
    parameters = {
        **HEALTHY,
        "SqsBatchMode": "true",
        "ProcessorTimeoutSeconds": "30",
    }
    # (a stack name of its own: the module's stack is up in the same moto meanwhile)
    with LocalEngine(
        parameters=parameters, function_log=io.StringIO(), stack_name="batch"
    ) as engine:
        stack = LocalStack(engine)
        ops.run_audit(stack)
        assert failures(ops.examine(stack)) == []
        # WHEN its source queue's visibility timeout is cut to a minute
        stack.client("sqs").set_queue_attributes(
            QueueUrl=stack.output("SourceQueueUrl"), Attributes={"VisibilityTimeout": "60"}
        )
        findings = ops.examine(stack)
        # THEN that is the one FAIL: a batch can run longer than its messages stay hidden
        (failed,) = [f for f in findings if f.status == ops.FAIL]
        assert failed.check == "source queue visibility"
        assert "VisibilityTimeout=1800" in failed.detail
        # AND its receive budget (5) no longer covers MaxAttempts 3 when each attempt waits
        # for a lock of 400 s (900 capped by the batch) at 60 s a receive: a WARN says so
        (warned,) = [f for f in findings if f.status == ops.WARN]
        assert warned.check == "source queue"
        assert "MaxAttempts 3 can need 22 (7 a attempt" in warned.detail


def test_the_batch_size_fix_keeps_the_batching_window() -> None:
    # GIVEN a stack in the SQS batch mode, its pipe batching 10 messages in a 10 s window
    parameters = {**HEALTHY, "SqsBatchMode": "true", "ProcessorTimeoutSeconds": "30"}
    with LocalEngine(
        parameters=parameters, function_log=io.StringIO(), stack_name="batch-window"
    ) as engine:
        stack = LocalStack(engine)
        pipes, name = stack.client("pipes"), _pipe(stack)
        role = pipes.describe_pipe(Name=name)["RoleArn"]
        # WHEN someone raises the batch size by hand (the window kept)
        queue = {"BatchSize": 50, "MaximumBatchingWindowInSeconds": 10}
        pipes.update_pipe(Name=name, RoleArn=role, SourceParameters={"SqsQueueParameters": queue})
        (failed,) = [f for f in ops.examine(stack) if f.check == "pipe batching"]
        assert failed.status == ops.FAIL
        # AND runs the command the doctor prints
        argv = shlex.split(failed.detail[failed.detail.index("aws pipes update-pipe") :])
        options = dict(zip(argv[3::2], argv[4::2], strict=True))
        pipes.update_pipe(
            Name=options["--name"], RoleArn=options["--role-arn"],
            SourceParameters=json.loads(options["--source-parameters"]),
        )  # fmt: skip
        # THEN the batch size is back, and the window with it: UpdatePipe replaces the
        # SqsQueueParameters group as one, resetting a field left out to its default
        # (UpdatePipe API reference), so the command names both
        described = pipes.describe_pipe(Name=name)["SourceParameters"]["SqsQueueParameters"]
        assert (described["BatchSize"], described["MaximumBatchingWindowInSeconds"]) == (10, 10)
        (fixed,) = [f for f in ops.examine(stack) if f.check == "pipe batching"]
        assert fixed.status == ops.PASS, fixed.detail


def test_an_existing_source_queue_without_an_alarm_on_its_dlq_fails() -> None:
    """The stack alarms on the DLQ of a queue it creates; for SqsSource=<your queue's ARN>
    it cannot (the DLQ is named only in that queue's redrive policy), so the doctor looks."""
    orders = "arn:aws:sqs:us-east-1:123456789012:orders"
    parameters = {**HEALTHY, "SqsSource": orders}
    with LocalEngine(
        parameters=parameters, function_log=io.StringIO(), stack_name="existing-queue"
    ) as engine:
        stack = LocalStack(engine)
        ops.run_audit(stack)
        # GIVEN the user's queue with a DLQ of its own, and no alarm on that DLQ
        sqs = stack.client("sqs")
        sqs.create_queue(QueueName="orders-dlq")
        sqs.create_queue(
            QueueName="orders",
            Attributes={
                "RedrivePolicy": (
                    '{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:orders-dlq",'
                    ' "maxReceiveCount": "5"}'
                )
            },
        )
        # WHEN the doctor examines the stack
        (failed,) = failures(ops.examine(stack))
        # THEN the missing alarm is the one FAIL, with the command that makes it
        assert failed.check == "source queue DLQ alarm"
        assert "no alarm watches orders-dlq" in failed.detail
        assert "--dimensions Name=QueueName,Value=orders-dlq" in failed.detail
        assert "--alarm-actions arn:aws:sns:" in failed.detail
        # AND once the alarm exists (an alarm on another queue does not count), it passes
        cloudwatch = stack.client("cloudwatch")
        for queue in ("orders", "orders-dlq"):
            cloudwatch.put_metric_alarm(
                AlarmName=f"{queue}-not-empty",
                Namespace="AWS/SQS",
                MetricName="ApproximateNumberOfMessagesVisible",
                Dimensions=[{"Name": "QueueName", "Value": queue}],
                Statistic="Maximum",
                Period=300,
                EvaluationPeriods=1,
                Threshold=0,
                ComparisonOperator="GreaterThanThreshold",
            )
        findings = ops.examine(stack)
        assert failures(findings) == []
        [alarm] = [f for f in findings if f.check == "source queue DLQ alarm"]
        assert alarm.detail == "orders-dlq is watched by orders-dlq-not-empty"


def test_bad_input_a_missing_bucket_and_an_unreachable_processor_are_reported() -> None:
    # GIVEN a stack deployed on a bucket that does not exist, with a processor ARN that
    # names no function (both pass the template's parameter patterns)
    parameters = {
        "ExistingBucketName": "no-such-uploads",
        "ProcessorFunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:nowhere",
        "AlarmEmail": "ops@example.com",
    }
    with LocalEngine(
        parameters=parameters, function_log=io.StringIO(), stack_name="bad-input"
    ) as engine:
        stack = LocalStack(engine)
        # WHEN the doctor examines it
        found = {f.check: f for f in failures(ops.examine(stack))}
        # THEN the bucket and the function are each a FAIL that names them
        assert "s3://no-such-uploads does not exist" in found["bucket events"].detail
        assert "nowhere does not exist" in found["processor timeout"].detail
        assert found["processor timeout"].status == ops.FAIL
        # WHEN the bucket is then made, unversioned, without EventBridge notifications
        engine.client("s3").create_bucket(Bucket="no-such-uploads")
        found = {f.check: f for f in failures(ops.examine(stack))}
        # THEN the notifications are a FAIL, and versioning a WARN that says what it gives
        assert found["bucket events"].status == ops.FAIL
        assert found["bucket versioning"].status == ops.WARN
        assert "never enabled" in found["bucket versioning"].detail
        assert "each event at most once" in found["bucket versioning"].detail


# ---- a fresh local stack: what cannot apply locally is a WARN that says so ------------


def test_locally_an_alarm_topic_without_a_subscription_is_a_warning_that_says_why(
    stack: LocalStack,
) -> None:
    # GIVEN the local stack's alarm topic without a subscription (nothing local confirms one)
    _unsubscribe(stack)
    try:
        # WHEN the doctor examines it
        findings = ops.examine(stack)
    finally:
        _subscribe(stack)
    # THEN the alarms are the one WARN, saying it applies on AWS and what to do there
    (warned,) = failures(findings)
    assert (warned.status, warned.check) == (ops.WARN, "alarms")
    assert "cannot be confirmed locally" in warned.detail
    assert "AlarmEmail" in warned.detail
