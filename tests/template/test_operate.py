"""What on-call and a security reviewer read in the template: alarms, metrics, encryption, skips."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from onceflow.asl import END_OUTCOMES, diagram
from onceflow.local.engine import LocalEngine
from onceflow.local.template import Stack
from tests.template.translate import resources_of_type, translated

ROOT = Path(__file__).resolve().parents[2]
KEY = "arn:aws:kms:us-east-1:123456789012:key/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


def _template() -> dict[str, Any]:
    return Stack.from_file(ROOT / "template.yaml").template


def _resources(kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in _template()["Resources"].items() if r["Type"] == kind}


def test_every_checkov_skip_names_a_check_and_gives_a_reason() -> None:
    skips = [
        (logical_id, skip)
        for logical_id, resource in _template()["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips, "the template documents its checkov skips"
    for logical_id, skip in skips:
        assert re.fullmatch(r"CKV_AWS_\d+", skip["id"]), (logical_id, skip)
        assert len(skip.get("comment", "").split()) >= 8, f"{logical_id} {skip['id']}: no reason"


def _pattern(props: dict[str, Any]) -> str:
    """A filter's pattern as written (an Fn::Sub's text with its placeholders)."""
    pattern = props["FilterPattern"]
    if isinstance(pattern, dict):
        sub = pattern["Fn::Sub"]
        pattern = sub[0] if isinstance(sub, list) else sub
    assert isinstance(pattern, str)
    return pattern


def test_metric_filters_count_end_states_the_processor_has() -> None:
    """Each filter names an end state of the processor ASL, or of the batch workflow's
    (Processed, the batch's outcome of MarkComplete), of the kind its event type logs."""
    states = diagram.graph(diagram.load_asl(diagram.MACHINES["processor"])).states
    batch_ends = _batch_end_states()
    filters = _resources("AWS::Logs::MetricFilter")
    metrics = {}
    for logical_id, resource in filters.items():
        props = resource["Properties"]
        assert props["LogGroupName"] == {"Ref": "ProcessorStateMachineLogGroup"}, logical_id
        pattern = _pattern(props)
        event_types = re.findall(r'\$\.type = "(\w+)"', pattern)
        names = re.findall(r'\$\.details\.name = "(\w+)"', pattern)
        assert names, logical_id
        kinds = {"SucceedStateEntered": "Succeed", "FailStateEntered": "Fail"}
        for name in names:
            kind = states[name]["Type"] if name in states else batch_ends[name][0]
            assert kind in {kinds[e] for e in event_types}, (
                f"{logical_id}: {name} is a {kind}, not counted as one"
            )
        (transformation,) = props["MetricTransformations"]
        assert transformation["MetricNamespace"] == {"Fn::Sub": "onceflow/${AWS::StackName}"}
        metrics[transformation["MetricName"]] = names
    assert metrics == {
        "ProcessorSucceedEnds": ["Duplicate", "Superseded", "Ignored"],
        "BatchProcessed": ["Processed"],
        "Duplicate": ["Duplicate"],
        "Superseded": ["Superseded"],
        "Failed": ["Failed"],
        "DeadLettered": ["DeadLettered", "InvalidEvent", "LedgerUnavailable"],
        "LockLost": ["LockLost"],
        "DeadLetterFailed": ["DeadLetterFailed"],
        "LedgerUnavailable": ["LedgerUnavailable"],
    }


def test_the_dashboards_processed_is_every_succeeded_execution_but_the_other_ends() -> None:
    """The processor's happy path ends on MarkComplete, a Task: the dashboard's Processed is
    its succeeded executions less those that ended in one of its Succeed states (every one
    of them, from its own executions only), plus the batch workflow's Processed messages."""
    processor = diagram.load_asl(diagram.MACHINES["processor"])["States"]
    # GIVEN the processor's ways to succeed: its Succeed states and its end Tasks
    succeeds = [n for n, s in processor.items() if s["Type"] == "Succeed"]
    end_tasks = {n for n, s in processor.items() if s.get("End") is True}
    assert end_tasks == set(END_OUTCOMES) and END_OUTCOMES["MarkComplete"] == "Processed"
    # THEN the filter subtracted counts every Succeed state, of the processor's executions
    props = _resources("AWS::Logs::MetricFilter")["ProcessorSucceedEndsMetricFilter"]["Properties"]
    pattern = _pattern(props)
    assert sorted(re.findall(r'\$\.details\.name = "(\w+)"', pattern)) == sorted(succeeds)
    assert '$.execution_arn = "arn:${AWS::Partition}:states:${AWS::Region}:' in pattern
    assert ":${Kind}:${ProcessorStateMachine.Name}:*" in pattern
    assert props["FilterPattern"]["Fn::Sub"][1]["Kind"] == {
        "Fn::If": ["ProcessorIsExpress", "express", "execution"]
    }
    # AND the Outcomes widget's Processed is that metric math, over metrics it reads
    with LocalEngine(parameters={"Observability": "full"}) as engine:
        body_template = engine.stack.template["Resources"]["Dashboard"]["Properties"]
        body = json.loads(engine.stack.resolve(body_template["DashboardBody"]))
        machine = engine.ref("ProcessorStateMachine")
    (outcomes,) = [w for w in body["widgets"] if w["properties"].get("title") == "Outcomes"]
    rows = outcomes["properties"]["metrics"]
    (expression,) = [r[0] for r in rows if isinstance(r[0], dict) and "expression" in r[0]]
    assert expression["label"] == "Processed"
    assert expression["expression"] == (
        "FILL(succeeded, 0) - FILL(succeedends, 0) + FILL(batchprocessed, 0)"
    )
    hidden = {r[-1]["id"]: r[:-1] for r in rows if isinstance(r[-1], dict) and "id" in r[-1]}
    assert hidden["succeeded"] == ["AWS/States", "ExecutionsSucceeded", "StateMachineArn", machine]
    assert hidden["succeedends"][1:] == ["ProcessorSucceedEnds"]
    assert hidden["batchprocessed"] == [".", "BatchProcessed"]


def _batch_end_states() -> dict[str, tuple[str, str]]:
    """The batch workflow's end states by name: (their type, the state they run in)."""
    states = _batch_states()
    ends = {n: ("Succeed", "EachMessage") for n, s in states.items() if s["Type"] == "Succeed"}
    for outer, state in states.items():
        for branch in state.get("Branches", []):
            for name, inner in branch["States"].items():
                if inner["Type"] == "Fail":
                    ends[name] = ("Fail", outer)
    return ends


def test_batch_mode_end_states_are_counted_like_the_processors() -> None:
    """The batch workflow logs to the processor's log group under the processor's end
    state names. Its Fail states run inside a one-branch Parallel whose Catch ends the
    message's iteration (a Fail state of the Map's iteration would fail the whole
    batch), so each metric finds the same name, entered as the same kind of state."""
    ends = _batch_end_states()
    states = _batch_states()
    for logical_id, resource in _resources("AWS::Logs::MetricFilter").items():
        pattern = _pattern(resource["Properties"])
        types = set(re.findall(r'\$\.type = "(\w+)"', pattern))
        for name in re.findall(r'\$\.details\.name = "(\w+)"', pattern):
            assert name in ends, f"{logical_id}: the batch workflow has no end state {name}"
            kind, runs_in = ends[name]
            assert f"{kind}StateEntered" in types, f"{logical_id}: the batch's {name} is a {kind}"
            if kind == "Fail":
                # the Parallel catches every error and ends the message, its outcome kept
                (catch,) = states[runs_in]["Catch"]
                assert catch["ErrorEquals"] == ["States.ALL"], runs_in
                assert states[catch["Next"]]["Type"] == "Succeed", runs_in
                assert f"'outcome': \"{name}\"" in catch["Output"], runs_in


def _batch_states() -> dict[str, dict[str, Any]]:
    batch = diagram.load_asl(ROOT / "statemachines" / "batch.asl.json")
    states: dict[str, dict[str, Any]] = batch["States"]["EachMessage"]["ItemProcessor"]["States"]
    return states


def test_every_alarm_notifies_the_alarm_topic() -> None:
    alarms = _resources("AWS::CloudWatch::Alarm")
    assert set(alarms) >= {
        "DeadLetterQueueAlarm",
        "IngressDeadLetterQueueAlarm",
        "ProcessorFailedAlarm",
        "LockLostAlarm",
        "AuditFoundLostWorkAlarm",
        "AuditFailedAlarm",
        "SourceDeadLetterQueueAlarm",
        "AuditOverdueAlarm",
        "AuditScheduleDeadLetterQueueAlarm",
        "DeadLetterFailedAlarm",
        "LedgerUnavailableAlarm",
    }
    for logical_id, alarm in alarms.items():
        props = alarm["Properties"]
        assert props["AlarmActions"] == [{"Ref": "AlarmTopic"}], logical_id
        assert props["OKActions"] == [{"Ref": "AlarmTopic"}], logical_id
        # Only the overdue alarm fires on silence: no audit, no datapoint.
        expected = "breaching" if logical_id == "AuditOverdueAlarm" else "notBreaching"
        assert props["TreatMissingData"] == expected, logical_id
        assert props.get("AlarmDescription"), logical_id
    subscription = _template()["Resources"]["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"]["Protocol"] == "email"


def test_the_lock_lost_alarm_watches_the_metric_its_filter_writes() -> None:
    props = _template()["Resources"]["LockLostAlarm"]["Properties"]
    assert (props["Namespace"], props["MetricName"]) == (
        {"Fn::Sub": "onceflow/${AWS::StackName}"},
        "LockLost",
    )
    assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"


@pytest.mark.parametrize("metric", ["DeadLetterFailed", "LedgerUnavailable"])
def test_work_that_could_not_be_dead_lettered_or_recorded_alarms_at_once(metric: str) -> None:
    # GIVEN the alarm on the metric its filter writes from the processor's own Fail state
    props = _template()["Resources"][f"{metric}Alarm"]["Properties"]
    # THEN one such execution is enough
    assert (props["Namespace"], props["MetricName"]) == (
        {"Fn::Sub": "onceflow/${AWS::StackName}"},
        metric,
    )
    assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
    dashboard = json.dumps(_template()["Resources"]["Dashboard"])
    assert f"{metric}Alarm.Arn" in dashboard


@pytest.mark.parametrize("schedule", ["rate(1 day)", "off"])
def test_the_dashboard_body_is_json_with_the_flows_numbers(schedule: str) -> None:
    # GIVEN a stack with the dashboard (Observability full), its audit schedule on or off
    parameters = {"Observability": "full", "AuditSchedule": schedule}
    with LocalEngine(parameters=parameters) as engine:
        # WHEN its dashboard body is resolved as CloudFormation resolves it
        body_template = engine.stack.template["Resources"]["Dashboard"]["Properties"]
        body = json.loads(engine.stack.resolve(body_template["DashboardBody"]))
        created = {
            logical_id: engine.get_att(logical_id, "Arn")
            for logical_id in _resources("AWS::CloudWatch::Alarm")
            if engine.stack.resource_enabled(logical_id)
        }
    # THEN it is JSON showing every outcome metric and what the audit did
    metrics = json.dumps(body)
    for name in ("Processed", "Duplicate", "Superseded", "Failed", "DeadLettered", "LockLost"):
        assert f'"{name}"' in metrics
    for name in ("AuditResubmitted", "StuckReleased", "ApproximateNumberOfMessagesVisible"):
        assert name in metrics
    # AND its alarm widget shows every alarm of the stack but the optional source queue's
    (alarm_widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    created.pop("SourceDeadLetterQueueAlarm", None)
    assert sorted(alarm_widget["properties"]["alarms"]) == sorted(created.values())
    assert ("AuditOverdueAlarm" in created) == (schedule != "off")


@pytest.mark.parametrize("key", ["", KEY])
def test_encryption_everywhere_with_the_key_when_given(key: str) -> None:
    stack = Stack.from_file(ROOT / "template.yaml", {"KmsKeyArn": key, "SqsSource": "create"})
    resources = stack.template["Resources"]

    def resolved(logical_id: str, prop: str) -> Any:
        return stack.resolve(resources[logical_id]["Properties"].get(prop))

    for bucket in ("IngestBucket", "OutputBucket"):
        (rule,) = resolved(bucket, "BucketEncryption")["ServerSideEncryptionConfiguration"]
        default = rule["ServerSideEncryptionByDefault"]
        if key:
            assert default == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}
        else:
            assert default == {"SSEAlgorithm": "AES256"}
    (log_rule,) = resolved("AccessLogBucket", "BucketEncryption")[
        "ServerSideEncryptionConfiguration"
    ]
    assert log_rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    sse = resolved("LedgerTable", "SSESpecification")
    assert sse["SSEEnabled"] is True and sse["SSEType"] == "KMS"
    assert sse.get("KMSMasterKeyId") == (key or None)
    for queue in (
        "DeadLetterQueue",
        "SourceQueue",
        "SourceDeadLetterQueue",
    ):
        props = stack.resolve(
            {
                k: v
                for k, v in resources[queue]["Properties"].items()
                if k in ("KmsMasterKeyId", "SqsManagedSseEnabled")
            }
        )
        if key:
            assert props["KmsMasterKeyId"] == key and "SqsManagedSseEnabled" not in props, queue
        else:
            assert props["SqsManagedSseEnabled"] is True and "KmsMasterKeyId" not in props, queue
    # EventBridge and its Scheduler write these DLQs: SSE-SQS always, so no key
    # policy (or missing kms grant) can drop their letters.
    for queue in ("IngressDeadLetterQueue", "AuditScheduleDeadLetterQueue"):
        props = resources[queue]["Properties"]
        assert props["SqsManagedSseEnabled"] is True and "KmsMasterKeyId" not in props, queue
    log_groups = [r for r in resources.values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert len(log_groups) == 4
    for resource in log_groups:
        resolved_key = stack.resolve({"k": resource["Properties"]["KmsKeyId"]}).get("k")
        assert resolved_key == (key or None)
    topic = stack.resolve(resources["AlarmTopic"]["Properties"])
    assert topic.get("KmsMasterKeyId") == (key or None)
    function_globals = stack.resolve(stack.template["Globals"]["Function"])
    assert function_globals.get("KmsKeyArn") == (key or None)


def test_the_customer_key_is_granted_to_whoever_writes_or_reads_with_it() -> None:
    with LocalEngine(parameters={"KmsKeyArn": KEY, "SqsSource": "create"}) as engine:
        for logical_id in ("ProcessorFunction", "AuditFunction", "ProcessorStateMachine"):
            policies = engine.stack.template["Resources"][logical_id]["Properties"]["Policies"]
            statements = [s for p in policies for s in engine.stack.resolve(p)["Statement"]]
            kms = [s for s in statements if any(a.startswith("kms:") for a in s["Action"])]
            assert kms == [
                {
                    "Sid": "UseCustomerKey",
                    "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                    "Resource": KEY,
                }
            ], logical_id
        pipe = engine.stack.resolve(engine.stack.template["Resources"]["PipeRole"]["Properties"])
        statements = pipe["Policies"][0]["PolicyDocument"]["Statement"]
        assert {
            "Sid": "DecryptSourceMessages",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": KEY,
        } in statements
    with LocalEngine() as engine:
        policies = engine.stack.template["Resources"]["AuditFunction"]["Properties"]["Policies"]
        statements = [s for p in policies for s in engine.stack.resolve(p)["Statement"]]
        assert not [s for s in statements if "kms:Decrypt" in s["Action"]], "no key, no grant"


def test_data_at_rest_is_kept_and_recoverable() -> None:
    ledger = _template()["Resources"]["LedgerTable"]
    assert ledger["DeletionPolicy"] == "Retain" and ledger["UpdateReplacePolicy"] == "Retain"
    assert ledger["Properties"]["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": True
    }
    for logical_id, bucket in _resources("AWS::S3::Bucket").items():
        block = bucket["Properties"]["PublicAccessBlockConfiguration"]
        assert all(block.values()) and len(block) == 4, logical_id


def test_every_bucket_queue_and_topic_refuses_plain_http() -> None:
    resources = _template()["Resources"]
    policies = {
        "AWS::S3::BucketPolicy": "Bucket",
        "AWS::SQS::QueuePolicy": "Queues",
        "AWS::SNS::TopicPolicy": "Topics",
    }
    covered = set()
    for resource in resources.values():
        if resource["Type"] in policies:
            statements = resource["Properties"]["PolicyDocument"]["Statement"]
            deny = [s for s in statements if s.get("Sid") == "DenyInsecureTransport"]
            assert deny and deny[0]["Effect"] == "Deny"
            assert deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            target = resource["Properties"][policies[resource["Type"]]]
            for ref in target if isinstance(target, list) else [target]:
                covered.add(ref["Ref"])
    protected = {
        k
        for k, r in resources.items()
        if r["Type"] in {"AWS::S3::Bucket", "AWS::SQS::Queue", "AWS::SNS::Topic"}
    }
    assert protected == covered


def _breaching_hours(successes: set[int], now: int, periods: int) -> int:
    """Hours of the alarm's window (the last `periods` whole hours) that breach.

    An hour with a successful audit has a Sum of at least 1, so it does not
    breach LessThanThreshold 1; an hour without one has a Sum of 0 or no
    datapoint at all (AWS/States publishes on executions), and TreatMissingData
    breaching counts that as breaching too.
    """
    return sum(1 for hour in range(now - periods, now) if hour not in successes)


def test_an_audit_that_stops_running_alarms() -> None:
    """A broken schedule sends no event anywhere: only the absence of successes shows it."""
    # GIVEN the overdue alarm as deployed, its window derived from AuditSchedule
    template = translated()
    alarm = template["Resources"]["AuditOverdueAlarm"]
    props = alarm["Properties"]
    window = {"Fn::If": ["WeeklyAudit", 168, 26]}
    hours = 26
    # THEN it watches the audit's successful executions, hour by hour, over the last N hours
    assert alarm["Condition"] == "AuditScheduleEnabled"
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == (
        "AWS/States",
        "ExecutionsSucceeded",
        "Sum",
    )
    assert props["Dimensions"] == [
        {"Name": "StateMachineArn", "Value": {"Ref": "AuditStateMachine"}}
    ]
    assert props["Period"] == 3600
    assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == window
    assert (props["ComparisonOperator"], props["Threshold"]) == ("LessThanThreshold", 1)
    assert props["TreatMissingData"] == "breaching"
    # AND the default leaves a daily audit two hours' slack
    assert hours == 26
    # AND both windows are ones CloudWatch takes: with a period of an hour or more,
    # Period x EvaluationPeriods may reach 7 days (604,800 s), a weekly audit's interval
    assert props["Period"] * max(window["Fn::If"][1:]) <= 604800
    # WHEN audits succeed once a day (hours 0, 24, 49 and 72: one ran an hour late)
    daily = {0, 24, 49, 72}
    # THEN the whole window never breaches while they run
    assert all(_breaching_hours(daily, now, hours) < hours for now in range(hours, 73 + hours))
    # AND once they stop after hour 72, the alarm fires 26 hours later
    assert _breaching_hours(daily, 72 + hours + 1, hours) == hours


def test_the_audit_schedule_dead_letters_to_its_own_encrypted_queue_with_an_alarm() -> None:
    """The Scheduler cannot start the audit (a deleted or throttled target, a role
    lost): after its retries the event goes to a DLQ, which an alarm watches."""
    # GIVEN the template CloudFormation receives
    template = translated()
    resources = template["Resources"]
    (schedule,) = resources_of_type(template, "AWS::Scheduler::Schedule").values()
    target = schedule["Properties"]["Target"]
    # THEN the schedule dead-letters to a queue of the stack
    assert target["DeadLetterConfig"] == {
        "Arn": {"Fn::GetAtt": ["AuditScheduleDeadLetterQueue", "Arn"]}
    }
    assert target["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    # AND the schedule's role (the Scheduler sends with it) may send there and start the audit
    role = resources[target["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    statements = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    granted = {(s["Action"], json.dumps(s["Resource"], sort_keys=True)) for s in statements}
    assert granted == {
        ("states:StartExecution", json.dumps({"Ref": "AuditStateMachine"})),
        ("sqs:SendMessage", json.dumps({"Fn::GetAtt": ["AuditScheduleDeadLetterQueue", "Arn"]})),
    }
    # AND the queue is encrypted and keeps letters as long as SQS can
    queue = resources["AuditScheduleDeadLetterQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True and queue["MessageRetentionPeriod"] == 1209600
    # AND an alarm fires as soon as a letter waits there
    alarm = resources["AuditScheduleDeadLetterQueueAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert alarm["Dimensions"] == [
        {
            "Name": "QueueName",
            "Value": {"Fn::GetAtt": ["AuditScheduleDeadLetterQueue", "QueueName"]},
        }
    ]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
