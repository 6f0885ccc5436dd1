"""SqsBatchMode for every source: S3's (and the custom) events go to the stack's source
queue, and the pipe gathers them into batches for the batch workflow.

AWS facts these tests hold the template to:
- An SQS target of a rule is authorised by the queue's policy, not a role: "do not
  specify a RoleArn" for SQS targets (eb-use-resource-based.html), and the policy names
  events.amazonaws.com with the rule's ARN as aws:SourceArn (same page, Amazon SQS
  permissions).
- A pipe's SQS source takes MaximumBatchingWindowInSeconds, 0 to 300
  (PipeSourceSqsQueueParameters); the pipe invokes when the window expires, the batch
  is full or the payload limit is reached (eb-pipes-sqs.html).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.pricing import SEED_MESSAGES_PER_SECOND, mean_batch, read_deployment
from onceflow.local.engine import DEFAULT_TEMPLATE
from onceflow.local.template import Stack, TemplateError
from tests.template.test_existing_bucket import deployed, properties
from tests.template.test_template import run

ROOT = Path(__file__).resolve().parents[2]
EXPRESS_LIMITS = {"ProcessorTimeoutSeconds": "40"}
S3_BATCH = {"SqsBatchMode": "true", **EXPRESS_LIMITS}


def _rule_target(stack: Stack, rule: str) -> dict[str, Any]:
    [target] = properties(stack, rule)["Targets"]
    return dict(target)


def test_the_batch_mode_alone_creates_the_queue_and_routes_s3_events_into_it() -> None:
    # GIVEN the template with SqsBatchMode and nothing else a user must set (SqsSource none)
    stack = deployed(S3_BATCH)
    # THEN the stack makes its own source queue, the pipe and the batch workflow
    for resource in ("SourceQueue", "SourceDeadLetterQueue", "SourcePipe", "PipeRole"):
        assert stack.resource_enabled(resource), resource
    assert stack.resource_enabled("BatchProcessorStateMachine")
    # AND both rules send their events to that queue, with no role (an SQS target takes
    # the queue's policy), keeping their retries and the ingress DLQ
    queue_arn = stack.get_att("SourceQueue", "Arn")
    for rule in ("ObjectCreatedRule", "CustomEventRule"):
        target = _rule_target(stack, rule)
        assert target["Arn"] == queue_arn, rule
        assert "RoleArn" not in target, rule
        assert target["DeadLetterConfig"] == {"Arn": stack.get_att("IngressDeadLetterQueue", "Arn")}
        assert set(target["RetryPolicy"]) == {"MaximumRetryAttempts", "MaximumEventAgeInSeconds"}
    # AND the S3 rule still filters by bucket (and KeyPrefix/KeySuffix, tested elsewhere)
    assert properties(stack, "ObjectCreatedRule")["EventPattern"]["detail"]["bucket"] == {
        "name": [stack.ref("IngestBucket")]
    }


def test_the_queue_lets_only_the_stacks_rules_send() -> None:
    stack = deployed(S3_BATCH)
    statements = properties(stack, "SourceQueuePolicy")["PolicyDocument"]["Statement"]
    [send] = [s for s in statements if s.get("Sid") == "EventBridgeRulesSend"]
    assert send["Effect"] == "Allow"
    assert send["Principal"] == {"Service": "events.amazonaws.com"}
    assert send["Action"] == "sqs:SendMessage"
    assert send["Resource"] == stack.get_att("SourceQueue", "Arn")
    assert set(send["Condition"]["ArnEquals"]["aws:SourceArn"]) == {
        stack.get_att("ObjectCreatedRule", "Arn"),
        stack.get_att("CustomEventRule", "Arn"),
    }
    # AND without the batch mode the created queue grants EventBridge nothing
    plain = deployed({"SqsSource": "create"})
    statements = properties(plain, "SourceQueuePolicy")["PolicyDocument"]["Statement"]
    assert [s.get("Sid") for s in statements] == ["DenyInsecureTransport"]


def test_the_pipe_gathers_batches_that_form_at_the_seeds_rate() -> None:
    # GIVEN the batch mode as shipped
    stack = deployed(S3_BATCH)
    sqs = properties(stack, "SourcePipe")["SourceParameters"]["SqsQueueParameters"]
    # THEN the pipe waits up to 10 s for up to 10 messages (AWS allows 0 to 300 s)
    assert (sqs["BatchSize"], sqs["MaximumBatchingWindowInSeconds"]) == ("10", 10)
    # AND at the seed's rate that window fills nearly every batch; none would form without it
    deployment = read_deployment(DEFAULT_TEMPLATE, S3_BATCH)
    assert deployment.pipe_window_seconds == 10
    assert mean_batch(SEED_MESSAGES_PER_SECOND, deployment.pipe_window_seconds, 10) > 9.5
    assert mean_batch(SEED_MESSAGES_PER_SECOND, 0, 10) == 1.0
    # AND the one-message pipe of the default SQS source has no window (it could not fill)
    plain = deployed({"SqsSource": "create"})
    plain_sqs = properties(plain, "SourcePipe")["SourceParameters"]["SqsQueueParameters"]
    assert "MaximumBatchingWindowInSeconds" not in plain_sqs


def test_without_the_batch_mode_the_rules_start_the_processor() -> None:
    for parameters in ({}, {"SqsSource": "create"}):
        stack = deployed(parameters)
        target = _rule_target(stack, "ObjectCreatedRule")
        assert target["Arn"] == stack.ref("ProcessorStateMachine"), parameters
        assert target["RoleArn"] == stack.get_att("IngressRole", "Arn"), parameters
    assert not deployed({}).resource_enabled("SourceQueue")


def test_a_queue_the_stack_does_not_own_batches_only_its_own_messages() -> None:
    # GIVEN the batch mode on the user's queue (its policy is its owner's, not the stack's)
    queue = "arn:aws:sqs:us-east-1:123456789012:orders"
    stack = deployed({**S3_BATCH, "SqsSource": queue})
    # THEN the stack creates no queue, and S3's events still start the processor directly
    assert not stack.resource_enabled("SourceQueue")
    target = _rule_target(stack, "ObjectCreatedRule")
    assert target["Arn"] == stack.ref("ProcessorStateMachine")
    assert properties(stack, "SourcePipe")["Source"] == queue


def test_the_batch_mode_over_an_existing_bucket_waits_as_long_as_the_queue_holds() -> None:
    # GIVEN the user's bucket (it may be unversioned: keys by sequencer) and the batch mode
    existing = {"ExistingBucketName": "their-uploads", **S3_BATCH}
    # THEN its events may sit in the queue and its DLQ: the audit's window must cover that
    with pytest.raises(TemplateError, match="AuditWindowCoversTheSchedule"):
        Stack.from_file(DEFAULT_TEMPLATE, {**existing, "RetentionDays": "29"})
    # (without the batch mode that bucket needs only 3 days)
    Stack.from_file(DEFAULT_TEMPLATE, {**existing, "SqsBatchMode": "false", "RetentionDays": "29"})
    stack = deployed({**existing, "RetentionDays": "30"})
    env = properties(stack, "AuditFunction")["Environment"]["Variables"]
    assert env["SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS"] == "2462400"
    assert _rule_target(stack, "ObjectCreatedRule")["Arn"] == stack.get_att("SourceQueue", "Arn")


def test_the_batch_mode_keeps_the_express_limits_and_the_receive_budget() -> None:
    with pytest.raises(TemplateError, match="ExpressFitsInFiveMinutes"):
        Stack.from_file(DEFAULT_TEMPLATE, {"SqsBatchMode": "true"})
    # AND the stack's own queue keeps a receive for each attempt and one more (constants)
    stack = Stack.from_file(DEFAULT_TEMPLATE, S3_BATCH)
    queue = stack.template["Resources"]["SourceQueue"]["Properties"]
    receives = int(stack.resolve(queue["RedrivePolicy"]["maxReceiveCount"]))
    assert receives >= int(stack.setting("MaxAttempts")) + 1


def test_cfn_lint_accepts_the_s3_batch_mode() -> None:
    parameters = [f"{k}={v}" for k, v in S3_BATCH.items()]
    cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
    result = run(cfn_lint, str(DEFAULT_TEMPLATE), "--parameters", *parameters)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_validate_lint_accepts_the_s3_batch_mode_as_its_defaults(tmp_path: Path) -> None:
    # sam validate reads no parameter overrides: the same template with the batch mode's
    # values as its defaults, beside the files it names
    text = DEFAULT_TEMPLATE.read_text(encoding="utf-8")
    for name, value in S3_BATCH.items():
        marker = f"  {name}:\n    Type: String\n    Default: "
        start = text.index(marker) + len(marker)
        end = text.index("\n", start)
        text = text[:start] + f'"{value}"' + text[end:]
    for part in ("functions", "statemachines"):
        (tmp_path / part).symlink_to(ROOT / part)
    (tmp_path / "template.yaml").write_text(text, encoding="utf-8")
    sam = shutil.which("sam", path=str(Path(sys.executable).parent))
    assert sam is not None
    result = run(sam, "validate", "--lint", "--region", "us-east-1", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr
