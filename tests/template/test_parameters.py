"""A light template (P12 item 6): at most 20 parameters, the former knobs documented as
constants, observability in one optional block, every resource justified in the docs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bench.pricing import read_deployment
from onceflow.local.engine import DEFAULT_TEMPLATE
from onceflow.local.template import Stack, TemplateError, load_template

ROOT = Path(__file__).resolve().parents[2]
MOST_PARAMETERS = 20
# The parameters the template had before P12 item 6 that it no longer has: each is now a
# constant (Mappings), derives from a parameter, or is folded into one.
FORMER_PARAMETERS = (
    "IngressMaxRetryAttempts",
    "IngressMaxEventAgeSeconds",
    "SqsBatchSize",
    "SourceQueueMaxReceiveCount",
    "OutputMaxDimension",
    "MaxAttempts",
    "LockTimeoutSeconds",
    "RetryMaxAttempts",
    "RetryIntervalSeconds",
    "RetryBackoffRate",
    "RetryMaxDelaySeconds",
    "ExpireNoncurrentVersions",
    "WarmThroughput",
    "AuditEnabled",
    "AuditMaxConcurrency",
    "AuditToleratedFailurePercentage",
    "AuditResubmitsPerSecond",
    "AuditStuckMarginSeconds",
    "AuditAlarmThreshold",
    "AuditOverdueHours",
    "SqsBatchLogLevel",
    "StateMachineLogExecutionData",
)


def _template() -> dict[str, Any]:
    return load_template(DEFAULT_TEMPLATE)


def _table(page: str, heading: str) -> dict[str, list[str]]:
    """The rows of the first table under ``heading`` in docs/``page``: first cell (its
    backquoted name) -> the other cells."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    section = text.split(f"\n{heading}\n", 1)[1]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(\w+)`", cells[0]) if line.startswith("|") else None
        if match:
            rows[match.group(1)] = cells[1:]
    return rows


def test_the_template_has_at_most_twenty_parameters() -> None:
    parameters = _template()["Parameters"]
    assert len(parameters) <= MOST_PARAMETERS, sorted(parameters)
    assert not set(FORMER_PARAMETERS) & set(parameters)


def test_every_former_parameter_is_documented_with_its_value() -> None:
    # GIVEN the constants table of docs/operate.md and the template's Mappings
    rows = _table("operate.md", "## Constants")
    constants = _template()["Mappings"]["Constants"]["Values"]
    # THEN every former parameter has a row with its value and why
    for name in FORMER_PARAMETERS:
        assert name in rows, f"{name} is not in docs/operate.md, Constants"
        value, why = rows[name]
        assert value and len(why) > 20, name
        # AND a constant's value is the template's, as it is written there
        if name in constants:
            assert value == constants[name], (name, value, constants[name])
    # AND the template has no constant the docs do not name (nor a stale row)
    assert set(constants) <= set(FORMER_PARAMETERS)
    assert set(rows) == set(FORMER_PARAMETERS)


def test_every_constant_is_used_by_the_template() -> None:
    # GIVEN the template's text and its Mappings
    text = DEFAULT_TEMPLATE.read_text(encoding="utf-8")
    constants = _template()["Mappings"]["Constants"]["Values"]
    # THEN each constant is read somewhere (a constant nothing reads would document a lie)
    for name in constants:
        assert f"!FindInMap [Constants, Values, {name}]" in text, name


def test_the_process_task_retries_follow_the_workflow_type() -> None:
    """RetryMaxAttempts derives from WorkflowType: one retry keeps EXPRESS under five
    minutes, with no rule to trip on (the rule ExpressFitsInFiveMinutes bounds the rest)."""
    # GIVEN each workflow type at a timeout it accepts
    for workflow, expected in (("STANDARD", "3"), ("EXPRESS", "1")):
        stack = Stack.from_file(
            DEFAULT_TEMPLATE, {"WorkflowType": workflow, "ProcessorTimeoutSeconds": "40"}
        )
        # WHEN the processor's substitutions are resolved
        resources = stack.template["Resources"]
        processor = resources["ProcessorStateMachine"]["Properties"]
        retries = stack.resolve(processor["DefinitionSubstitutions"]["RetryMaxAttempts"])
        # THEN the processor retries as many times as its type allows
        assert retries == expected, workflow
    # AND the batch workflow, always EXPRESS, retries once
    batch = resources["BatchProcessorStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert stack.resolve(batch["RetryMaxAttempts"]) == "1"


def test_express_over_forty_seconds_is_still_refused() -> None:
    with pytest.raises(TemplateError, match="ProcessorTimeoutSeconds must be at most 40"):
        Stack.from_file(DEFAULT_TEMPLATE, {"WorkflowType": "EXPRESS"})


def test_the_queue_budget_covers_the_attempts() -> None:
    """Once the rule SourceQueueCoversMaxAttempts: each attempt takes a receive, and one
    more dead-letters a row whose last attempt died (docs/ingress.md)."""
    constants = _template()["Mappings"]["Constants"]["Values"]
    assert int(constants["SourceQueueMaxReceiveCount"]) >= int(constants["MaxAttempts"]) + 1
    assert "SourceQueueCoversMaxAttempts" not in _template()["Rules"]


def test_every_rule_reads_only_parameters_the_template_has() -> None:
    template = _template()
    parameters = set(template["Parameters"])
    refs = set(re.findall(r"'Ref': '(\w+)'", str(template["Rules"])))
    assert refs and refs <= parameters, refs - parameters


@pytest.mark.parametrize(("schedule", "periods"), [("rate(1 day)", 26), ("rate(7 days)", 168)])
def test_the_overdue_alarm_derives_from_the_schedule(schedule: str, periods: int) -> None:
    stack = Stack.from_file(DEFAULT_TEMPLATE, {"AuditSchedule": schedule, "RetentionDays": "30"})
    alarm = stack.template["Resources"]["AuditOverdueAlarm"]["Properties"]
    assert stack.resolve(alarm["EvaluationPeriods"]) == periods
    assert stack.resolve(alarm["DatapointsToAlarm"]) == periods


def test_audit_schedule_off_disables_the_schedule_and_its_overdue_alarm() -> None:
    # GIVEN the audit switched off (once AuditEnabled "false")
    stack = Stack.from_file(DEFAULT_TEMPLATE, {"AuditSchedule": "off"})
    # THEN the schedule stays, disabled and with a valid expression; the overdue alarm goes
    audit = stack.template["Resources"]["AuditStateMachine"]["Properties"]
    (event,) = audit["Events"].values()
    assert stack.resolve(event["Properties"]["State"]) == "DISABLED"
    assert stack.resolve(event["Properties"]["ScheduleExpression"]) == "rate(1 day)"
    assert not stack.resource_enabled("AuditOverdueAlarm")


def test_observability_is_one_parameter_and_alarms_do_not_depend_on_it() -> None:
    # GIVEN the default and the full observability
    default = read_deployment(DEFAULT_TEMPLATE)
    full = read_deployment(DEFAULT_TEMPLATE, {"Observability": "full"})
    # THEN the alarms users need are on either way
    assert default.alarms == full.alarms
    assert {"DeadLetterQueueAlarm", "ProcessorFailedAlarm", "AuditFailedAlarm"} <= {
        alarm for alarm, _ in default.alarms
    }
    # AND the dashboard and the outcome metrics only it charts are one value away
    assert default.dashboards == [] and full.dashboards == ["Dashboard"]
    filters = {f for f, _, _ in default.metric_filters}
    assert filters == {
        "LockLostMetricFilter",
        "DeadLetterFailedMetricFilter",
        "LedgerUnavailableMetricFilter",
    }
    assert {f for f, _, _ in full.metric_filters} > filters
    # AND every metric filter left on is read by an alarm
    alarmed = {
        props["Properties"].get("MetricName")
        for props in _template()["Resources"].values()
        if props["Type"] == "AWS::CloudWatch::Alarm"
    }
    for name in ("LockLost", "DeadLetterFailed", "LedgerUnavailable"):
        assert name in alarmed
    # AND the batch workflow logs at ERROR by default, at ALL with the full block
    assert (default.batch_log_level, full.batch_log_level) == ("ERROR", "ALL")
    assert default.processor_log_level == "ALL"  # StateMachineLogLevel's default


def test_every_resource_is_justified_in_the_design_doc() -> None:
    # GIVEN the resources table of docs/design.md
    rows = _table("design.md", "## Every resource, and why")
    resources = _template()["Resources"]
    # THEN it lists every resource of the template, and no other
    assert set(rows) == set(resources), set(rows) ^ set(resources)
    for logical_id, resource in resources.items():
        created, why = rows[logical_id]
        # AND names the condition that creates it, or says always
        condition = resource.get("Condition")
        if condition is None:
            assert created == "always", logical_id
        else:
            assert created.startswith(f"`{condition}`"), (logical_id, created)
        assert len(why) > 15, logical_id
