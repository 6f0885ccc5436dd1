"""Parameter combinations that would silently break exactly-once or the audit are refused at
deploy, by the template's own Rules and parameter patterns, with a message that says what to
change; the local engine refuses the same values (it evaluates the same Rules).

Each guard is held to the arithmetic or the behaviour it stands for, not to its own list:
CloudFormation's rules cannot do arithmetic, so a rule lists the values that bind, and these
tests compute which values must bind from the template's own resources and constants.
"""

from __future__ import annotations

import copy
import io
import json
import math
from functools import cache
from typing import Any

import pytest

from onceflow.cli import main
from onceflow.local import ingress
from onceflow.local import template as template_module
from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.template import (
    RulesRefused,
    Stack,
    TemplateError,
    coerce_parameter,
    load_template,
)
from onceflow.ops import doctor
from tests.helpers import dlq_messages, invocations, ledger_rows, png_bytes
from tests.template.translate import translated

DAY = 86_400
# SQS's longest MessageRetentionPeriod, 14 days (SetQueueAttributes: 60 to 1,209,600
# seconds): a queue the stack does not own (SqsSource=<ARN>) is judged at it.
SQS_LONGEST_RETENTION = 1_209_600
# The seed's longest gap between two sends of one unit of work: 22,162 s (DESIGN.md, 8).
DUPLICATE_GAP = 22_162
ORDERS = "arn:aws:sqs:us-east-1:123456789012:orders"
EXPRESS = {"ProcessorTimeoutSeconds": "40"}
# Every way a stack reads an SQS queue: its own (create), yours, and the batch mode's
# queue, for your messages or for the S3 and custom events it carries.
QUEUE_SOURCES: list[dict[str, str]] = [
    {"SqsSource": "create"},
    {"SqsSource": ORDERS},
    {"SqsBatchMode": "true", **EXPRESS},
    {"SqsSource": "create", "SqsBatchMode": "true", **EXPRESS},
    {"SqsSource": ORDERS, "SqsBatchMode": "true", **EXPRESS},
]
HOLD_RULE = "SourceQueueHoldWithinRetention"


@cache
def _template() -> dict[str, Any]:
    return load_template(DEFAULT_TEMPLATE)


def _stack(parameters: dict[str, str]) -> Stack:
    stack = Stack(_template(), DEFAULT_TEMPLATE.parent, {}, "us-east-1", "1", "s")
    stack.bind(parameters)
    return stack


def failed_rules(parameters: dict[str, str]) -> set[str]:
    """The rules that refuse these parameters (none: the stack deploys)."""
    try:
        _stack(parameters)
    except RulesRefused as refusal:
        return {name for name, _ in refusal.failures}
    return set()


def longest_hold_seconds(parameters: dict[str, str]) -> int:
    """How long after a unit of work was first sent a copy of it can still come out of the
    source queue, as the template deploys that queue.

    The queue keeps a message its retention; its DLQ expires it on the same, original enqueue
    time ("For standard queues, the expiration of a message is always based on its original
    enqueue timestamp", SQS developer guide, setting-up-dead-letter-queue-retention.html);
    one move back gives it a new enqueue time ("The redrive task resets the retention
    period", sqs-configure-dead-letter-queue-redrive.html) and the same hold again. An event
    reaches a queue up to EventBridge's retry window late, and a producer's duplicate is
    sent up to the seed's longest gap after the first copy."""
    stack = _stack({**parameters, "RetentionDays": "36500"})
    if stack.resource_enabled("SourceQueue"):
        resources = stack.template["Resources"]
        retentions = [
            int(stack.resolve(resources[name]["Properties"]["MessageRetentionPeriod"]))
            for name in ("SourceQueue", "SourceDeadLetterQueue")
        ]
    else:  # your queue: rules cannot read it, so SQS's longest
        retentions = [SQS_LONGEST_RETENTION, SQS_LONGEST_RETENTION]
    hold = max(retentions)
    moved_back = hold
    late = int(stack.find_in_map("Constants", "Values", "IngressMaxEventAgeSeconds"))
    return hold + moved_back + late + DUPLICATE_GAP


def lowest_accepted_retention(parameters: dict[str, str], rule: str) -> int:
    """The fewest RetentionDays the rule lets deploy with these parameters."""
    for days in range(1, 400):
        if rule not in failed_rules({**parameters, "RetentionDays": str(days)}):
            return days
    raise AssertionError(f"{rule} refuses every RetentionDays up to 400 with {parameters}")


# ---- a copy of a message from the source queue never outlives its ledger row -----------


@pytest.mark.parametrize(
    "source", QUEUE_SOURCES, ids=lambda s: "+".join(f"{k}={v}" for k, v in s.items())
)
def test_rows_outlive_the_longest_time_a_source_queue_can_hold_a_message(
    source: dict[str, str],
) -> None:
    # GIVEN an SQS source, whose queue and DLQ can hand a message back weeks after it was sent
    hold = longest_hold_seconds(source)
    # WHEN the rules judge RetentionDays
    lowest = lowest_accepted_retention(source, HOLD_RULE)
    # THEN every row they let deploy outlives the longest hold: a copy moved back from the
    # DLQ at the last moment still finds its row, and is a Duplicate, not new work
    assert lowest * DAY > hold, (lowest, hold / DAY)
    # AND they ask for no more than the whole days that covers
    assert lowest == math.ceil(hold / DAY), (lowest, hold / DAY)
    # AND a refusal says what to change, and why
    with pytest.raises(RulesRefused) as refusal:
        _stack({**source, "RetentionDays": str(lowest - 1)})
    [description] = [text for name, text in refusal.value.failures if name == HOLD_RULE]
    assert description.startswith(
        "With an SQS source (SqsSource, or SqsBatchMode's queue), RetentionDays must be at "
        f"least {lowest}:"
    )


def test_without_a_source_queue_rows_may_be_kept_briefly() -> None:
    # GIVEN no SQS source: EventBridge's rules start the processor directly
    # THEN the hold rule asks nothing (the audit's window still asks 3 days of a daily audit)
    assert failed_rules({"RetentionDays": "3"}) == set()
    assert lowest_accepted_retention({}, HOLD_RULE) == 1


def test_the_rule_reaches_cloudformation_as_the_engine_evaluates_it() -> None:
    # GIVEN the template as the SAM transform hands it to CloudFormation, with an SQS source
    deployed = translated({"SqsSource": ORDERS, "RetentionDays": "7"})
    # THEN the rule is there unchanged (the transform does not evaluate Rules: CloudFormation
    # does, before it creates anything), so what the engine refuses, the deploy refuses
    source = _template()["Rules"][HOLD_RULE]
    assert (
        deployed["Rules"][HOLD_RULE]["Assertions"][0]["AssertDescription"]
        == (source["Assertions"][0]["AssertDescription"])
    )
    assert deployed["Rules"][HOLD_RULE]["RuleCondition"] == source["RuleCondition"]
    # AND the local engine refuses the same values before it creates anything
    with pytest.raises(TemplateError, match=f"rule {HOLD_RULE}: With an SQS source"):
        Stack.from_file(DEFAULT_TEMPLATE, {"SqsSource": ORDERS, "RetentionDays": "7"})


# ---- a key path gives every copy of a unit of work the same key -------------------------

KEY_PATHS_ACCEPTED = [
    "",
    "orderId",
    "order.id",
    "order.`line-id`",
    "items[0].sku",
    "customer & '#' & orderId",
    "$string(orderId)",
    "$lowercase(customer.email)",
    "$join([tenant, orderId], ':')",
    "$substringBefore(ref, '/')",
    "$.orderId",  # $ followed by a dot: the body itself, as JSONPath users write it
    "$.order.id",
]
# Each would give two copies of one message (or event) two keys, and each copy its own effect.
KEY_PATHS_REFUSED = [
    "$now()",
    "orderId & $millis()",
    "$string($random())",
    "$uuid()",
    "$states.context.Execution.Name",
    "$m.attributes.ApproximateReceiveCount",
    "$eval('$now()')",
    "$",
    'order."id"',
    "order\\id",
    "100%",
]


@pytest.mark.parametrize("name", ["IdempotencyKeyPath", "CustomEventKeyPath"])
def test_a_key_path_may_not_change_between_copies_of_one_unit_of_work(name: str) -> None:
    spec = _template()["Parameters"][name]
    for path in KEY_PATHS_ACCEPTED:
        assert coerce_parameter(name, spec, path) == path
    for path in KEY_PATHS_REFUSED:
        with pytest.raises(
            TemplateError, match=rf"parameter {name}=.*no \$ other than the functions"
        ):
            coerce_parameter(name, spec, path)
    # AND the engine refuses it before it creates anything, as the deploy does
    with pytest.raises(TemplateError, match=f"parameter {name}="):
        Stack.from_file(DEFAULT_TEMPLATE, {name: "$uuid()"})


def test_custom_events_are_never_aws_services_own_events() -> None:
    # GIVEN a custom event source named like an AWS service's (aws.s3: every bucket's uploads)
    spec = _template()["Parameters"]["CustomEventSource"]
    for source in ["aws.s3", "aws.events", "aws.partner/x"]:
        # THEN it is refused, saying why
        with pytest.raises(TemplateError, match=r"not starting with aws\."):
            coerce_parameter("CustomEventSource", spec, source)
    # AND custom sources, an empty one (no rule) and look-alikes are taken
    for source in ["", "onceflow.work", "com.example.orders", "awsome.orders", "my.aws.app"]:
        assert coerce_parameter("CustomEventSource", spec, source) == source


# ---- what no template rule can compare: the queue's Region -----------------------------


class _Deployed:
    """A deployed stack in us-east-1, as the doctor reads it; any AWS call fails the test."""

    local = False
    stack_name = "onceflow"

    def output(self, name: str) -> str:
        assert name == "ProcessorStateMachineArn", name
        return "arn:aws:states:us-east-1:123456789012:stateMachine:Processor-x"

    def client(self, service: str) -> Any:
        raise AssertionError(f"no {service} call expected")


def test_a_source_queue_in_another_region_is_a_doctor_fail_that_names_both() -> None:
    # GIVEN SqsSource naming a queue of another Region: its pattern takes any Region, and
    # no rule can compare it with the stack's (rule functions cannot split an ARN)
    queue = "arn:aws:sqs:eu-west-1:123456789012:orders"
    assert coerce_parameter("SqsSource", _template()["Parameters"]["SqsSource"], queue) == queue
    assert "Fn::Split" not in str(_template()["Rules"])
    # WHEN the doctor reads the deployed pipe
    stack = doctor._Stack(_Deployed(), {}, [])  # type: ignore[arg-type]
    findings = list(doctor._source_queue(stack, {"Source": queue}))
    # THEN it fails it, naming both Regions and the fix, and reads nothing in the wrong one
    [finding] = findings
    assert (finding.status, finding.check) == (doctor.FAIL, "source queue")
    assert "in eu-west-1, but the stack is in us-east-1" in finding.detail
    assert "SqsSource naming a queue of us-east-1" in finding.detail


# ---- the command line refuses what the deploy refuses ------------------------------------


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["SqsSource=create", "RetentionDays=7"], f"rule {HOLD_RULE}: With an SQS source"),
        (["IdempotencyKeyPath=$uuid()"], "parameter IdempotencyKeyPath='$uuid()' failed"),
        (["CustomEventSource=aws.s3"], "parameter CustomEventSource='aws.s3' failed"),
    ],
)
def test_onceflow_execute_refuses_them_before_it_runs_anything(
    overrides: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    event = DEFAULT_TEMPLATE.parent / "events" / "sqs-business-message.json"
    argv = ["execute", "ProcessorStateMachine", "-e", str(event), "--parameter-overrides"]
    # WHEN the engine is asked to run the processor with such values
    code = main([*argv, *overrides])
    # THEN it refuses, saying why, with the usage error's status, and runs nothing
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert said in err
    assert "status:" not in out


# ---- the dashboard never counts a duplicate as processed work ----------------------------

DASHBOARD_RULE = "DashboardReadsEveryOutcome"


def test_the_dashboard_is_refused_where_its_outcomes_are_not_logged() -> None:
    # GIVEN the filters the dashboard's outcomes come from: each reads a Succeed state,
    # which Step Functions logs at level ALL only (cloudwatch-log-level.html)
    resources = _template()["Resources"]
    filters = {
        name: str(resource["Properties"]["FilterPattern"])
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Logs::MetricFilter"
        and resource.get("Condition") == "FullObservability"
        and '"SucceedStateEntered"' in str(resource["Properties"]["FilterPattern"])
    }
    assert "ProcessorSucceedEndsMetricFilter" in filters, sorted(filters)
    # WHEN the processor logs at ERROR with the dashboard on
    refused = failed_rules({"Observability": "full", "StateMachineLogLevel": "ERROR"})
    # THEN the rules refuse it; at ALL, or without the dashboard, ERROR is taken
    assert refused == {DASHBOARD_RULE}
    assert failed_rules({"Observability": "full", "StateMachineLogLevel": "ALL"}) == set()
    assert failed_rules({"Observability": "alarms", "StateMachineLogLevel": "ERROR"}) == set()


@pytest.mark.parametrize("path", ["$string($random())", "orderId & '#' & $uuid()"])
def test_without_the_pattern_a_changing_key_path_processes_every_copy(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the key path's pattern refuses is no matter of taste: the same message delivered
    twice (SQS delivers at least once) is processed twice, and neither run can finish."""
    # GIVEN the template as it would be without the pattern
    loose = copy.deepcopy(_template())
    del loose["Parameters"]["IdempotencyKeyPath"]["AllowedPattern"]
    monkeypatch.setattr(template_module, "load_template", lambda _: copy.deepcopy(loose))
    event = DEFAULT_TEMPLATE.parent / "events" / "sqs-business-message.json"
    message = json.loads(event.read_text())
    with LocalEngine(
        parameters={"SqsSource": "create", "IdempotencyKeyPath": path},
        function_log=io.StringIO(),
        time_scale=0.0,
    ) as engine:
        # WHEN one message is delivered twice
        outcomes = [engine.execute("ProcessorStateMachine", message).outcome for _ in range(2)]
        # THEN each delivery claimed a key of its own and ran the processor: two effects
        assert len(ledger_rows(engine)) == 2, outcomes
        assert invocations(engine) == 2, outcomes
        # AND neither could even mark its work done, the key read again at MarkComplete
        # being another one: each ends LockLost, its row left PROCESSING for the sweep
        assert outcomes == ["LockLost", "LockLost"]
        assert {row["status"] for row in ledger_rows(engine)} == {"PROCESSING"}


def test_without_the_pattern_an_aws_source_takes_every_buckets_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What CustomEventSource's pattern refuses: aws.s3 as a custom source."""
    # GIVEN the template as it would be without the pattern, the custom source aws.s3
    loose = copy.deepcopy(_template())
    del loose["Parameters"]["CustomEventSource"]["AllowedPattern"]
    monkeypatch.setattr(template_module, "load_template", lambda _: copy.deepcopy(loose))
    with LocalEngine(
        parameters={"CustomEventSource": "aws.s3"}, function_log=io.StringIO(), time_scale=0.0
    ) as engine:
        # WHEN an image is uploaded to the stack's bucket
        bucket = engine.ref("IngestBucket")
        s3 = engine.client("s3")
        version = s3.put_object(Bucket=bucket, Key="a.png", Body=png_bytes())["VersionId"]
        event = ingress.s3_object_created_event(engine, bucket, "a.png", version)
        started = ingress.put_event(engine, event)
        # THEN both rules start the processor: the second execution is a paid-for Duplicate
        assert sorted(engine.wait(arn).outcome for arn in started) == ["Duplicate", "Processed"]
        # AND an upload to any other bucket of the account is an InvalidEvent, dead-lettered
        event["detail"]["bucket"]["name"] = "someone-elses-bucket"
        [other] = ingress.put_event(engine, event)
        assert engine.wait(other).outcome == "InvalidEvent"
        assert len(dlq_messages(engine)) == 1
        assert invocations(engine) == 1
