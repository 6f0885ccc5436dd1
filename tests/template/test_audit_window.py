"""The audit's window (cutoff or wait .. RetentionDays) covers the schedule's interval.

The rule AuditWindowCoversTheSchedule lists the values that bind, because
CloudFormation's rules cannot do arithmetic; these tests hold the list to the
arithmetic, with the interval read from the schedule expression itself and the
wait from the environment the template gives the audit.
"""

from __future__ import annotations

import itertools
import re
from functools import cache
from typing import Any

import pytest

from onceflow.local.engine import DEFAULT_TEMPLATE
from onceflow.local.template import (
    RulesRefused,
    Stack,
    TemplateError,
    coerce_parameter,
    load_template,
)

RULE = "AuditWindowCoversTheSchedule"
# Scheduler starts a run within 60 s of its time (schedule-types.html): an hour to spare.
SLACK_HOURS = 1
UNITS = {"minute": 1 / 60, "minutes": 1 / 60, "hour": 1, "hours": 1, "day": 24, "days": 24}
# A day or a week apart: the intervals the rule knows, judged exactly.
SCHEDULES = ["rate(1 day)", "cron(0 3 * * ? *)", "rate(7 days)"]
# Runs closer together: the rule counts them as a day apart, which only asks for more.
SHORTER = ["rate(90 minutes)", "rate(12 hours)", "cron(15 0/7 ? * * *)"]
CUTOFFS = [0, 12, 23, 24, 47, 48, 71, 72, 95, 96, 119, 120, 143, 144, 167, 168]
EXISTING = "customer-uploads"
SOURCES = [
    {},
    {"SqsSource": "create"},
    {"ExistingBucketName": EXISTING},
    {"SqsSource": "create", "ExistingBucketName": EXISTING},
]


def _field(text: str, low: int, high: int) -> set[int]:
    """The values a cron minutes or hours field matches (*, a, a-b, a/b, */b, lists)."""
    values: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            start, end = low, high
        elif "-" in span:
            start, end = (int(v) for v in span.split("-"))
        else:
            start = int(span)
            end = high if step else start
        values.update(range(start, end + 1, int(step or 1)))
    return values


def interval_hours(schedule: str) -> float:
    """The longest time between two runs of an EventBridge Scheduler expression."""
    rate = re.fullmatch(r"rate\((\d+) (\w+)\)", schedule)
    if rate:
        return int(rate.group(1)) * UNITS[rate.group(2)]
    minutes, hours, day_of_month, month, day_of_week, year = schedule[5:-1].split()
    # Every day: the runs repeat daily, so three days show the longest gap.
    assert {day_of_month, day_of_week} <= {"*", "?"} and (month, year) == ("*", "*")
    runs = sorted(
        day * 1440 + hour * 60 + minute
        for day in range(3)
        for hour in _field(hours, 0, 23)
        for minute in _field(minutes, 0, 59)
    )
    return max(b - a for a, b in itertools.pairwise(runs)) / 60


@cache
def _template() -> dict[str, Any]:
    return load_template(DEFAULT_TEMPLATE)


def _stack(parameters: dict[str, str]) -> Stack:
    # Binding reads the template and writes only the stack's parameters: one copy serves all.
    stack = Stack(_template(), DEFAULT_TEMPLATE.parent, {}, "us-east-1", "1", "s")
    stack.bind(parameters)
    return stack


@cache
def wait_hours(source: tuple[tuple[str, str], ...]) -> float:
    """The audit's wait for uploads without a version id, from the environment the template
    gives the audit function (what service/settings.py reads; EventBridge's retry window,
    IngressMaxEventAgeSeconds, is a constant of a day)."""
    stack = _stack(dict(source))
    env = stack.template["Resources"]["AuditFunction"]["Properties"]["Environment"]["Variables"]
    names = ("INGRESS_MAX_EVENT_AGE_SECONDS", "SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS")
    return max(float(stack.resolve(env[name])) for name in names) / 3600


# With an SQS source the rows must also outlive what the queue can hold (28 days and more):
# that rule judges RetentionDays too (tests/unit/test_parameter_guards.py).
HOLD_RULE = "SourceQueueHoldWithinRetention"


def refused(parameters: dict[str, str]) -> bool:
    """Whether the audit window's rule refuses these parameters."""
    try:
        _stack(parameters)
    except RulesRefused as error:
        # Several assertions of the rule may fail at once; no other rule but the hold rule may
        names = {name for name, _ in error.failures}
        assert names <= {RULE, HOLD_RULE}, error
        return RULE in names
    return False


def covers(schedule: str, cutoff: int, retention: int, wait: float) -> bool:
    window = retention * 24 - max(cutoff, wait)
    return window >= interval_hours(schedule) + SLACK_HOURS


def test_a_daily_audit_that_keeps_rows_one_day_is_refused() -> None:
    # GIVEN RetentionDays 1 with the daily audit: each day only about 12 hours of uploads
    # (between the 12 h cutoff and a day) would be judged, and no upload without a version id
    parameters = {"RetentionDays": "1"}
    # WHEN the stack is deployed, THEN the rule refuses it
    with pytest.raises(TemplateError, match=f"rule {RULE}: RetentionDays must be at least 3"):
        Stack.from_file(DEFAULT_TEMPLATE, parameters)
    # AND a disabled schedule has no interval to cover
    Stack.from_file(DEFAULT_TEMPLATE, {**parameters, "AuditSchedule": "off"})


def test_an_sqs_source_over_the_users_bucket_needs_its_wait_and_a_day() -> None:
    # GIVEN the audit's 28.5-day wait for uploads without a version id (the SQS source)
    sqs = {"SqsSource": "create", "ExistingBucketName": EXISTING}
    # THEN 29 days leave less than a day and an hour after it, 30 leave a day and a half
    with pytest.raises(TemplateError, match=f"rule {RULE}: With an SQS source"):
        Stack.from_file(DEFAULT_TEMPLATE, {**sqs, "RetentionDays": "29"})
    Stack.from_file(DEFAULT_TEMPLATE, {**sqs, "RetentionDays": "30"})
    # AND on the stack's own (versioned) bucket the SQS source adds no wait to the audit's
    # window (its rows must outlive the queue's hold all the same: the hold rule)
    assert not refused({"SqsSource": "create", "RetentionDays": "3"})


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: "+".join(s) or "defaults")
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_rule_refuses_exactly_the_windows_shorter_than_an_interval(
    schedule: str, source: dict[str, str]
) -> None:
    # GIVEN every cutoff class and retention that could bind, with EventBridge's full day
    wait = wait_hours(tuple(source.items()))
    for cutoff, retention in itertools.product(CUTOFFS, range(1, 38)):
        parameters = {
            **source,
            "AuditSchedule": schedule,
            "AuditRecentCutoffHours": str(cutoff),
            "RetentionDays": str(retention),
        }
        # WHEN the stack's rules judge it, THEN they refuse it exactly when the window is short
        expected = not covers(schedule, cutoff, retention, wait)
        assert refused(parameters) == expected, (parameters, wait)


@pytest.mark.parametrize("schedule", SHORTER)
def test_what_the_rule_bounds_it_bounds_from_above(schedule: str) -> None:
    """Runs less than a day apart count as a day apart: the rule may refuse a window that
    would fit, never pass one that does not."""
    # GIVEN a schedule shorter than the rule assumes
    wait = wait_hours(())
    for cutoff, retention in itertools.product(CUTOFFS, range(1, 12)):
        parameters = {
            "AuditSchedule": schedule,
            "AuditRecentCutoffHours": str(cutoff),
            "RetentionDays": str(retention),
        }
        # WHEN the rules let it deploy, THEN its window covers the interval
        if not refused(parameters):
            assert covers(schedule, cutoff, retention, wait), parameters


ACCEPTED = [
    "rate(1 day)",
    "rate(7 days)",
    "rate(24 hours)",
    "rate(1 hour)",
    "rate(5 minutes)",
    "rate(1440 minutes)",
    "cron(0 3 * * ? *)",
    "cron(0/30 * ? * * *)",
    "cron(0 8,20 * * ? *)",
    "cron(5 1-4 * * ? *)",
]
REFUSED = [
    # AWS's rate: a value of 1 takes a singular unit; its cron: one day field is "?"
    # (eb-rate-expressions.html, eb-scheduled-rule-pattern.html)
    "rate(1 days)",
    "rate(1 hours)",
    "cron(0 3 * * * *)",
    "cron(0 3 ? * ? *)",
    "rate(2 days)",
    "rate(8 days)",
    "rate(25 hours)",
    "rate(1441 minutes)",
    "rate(0 minutes)",
    "cron(0 3 ? * MON *)",
    "cron(0 3 1 * ? *)",
    "cron(0 3 L * ? *)",
    "cron(0 3 * 1 ? *)",
    "cron(0 3 * * ? 2027)",
    "at(2027-01-01T00:00:00)",
    "rate(1 week)",
]


def test_the_schedule_takes_only_forms_whose_interval_the_rule_knows() -> None:
    spec = _template()["Parameters"]["AuditSchedule"]
    for schedule in ACCEPTED:
        # THEN every accepted form runs at least daily, or exactly weekly (rate(7 days))
        assert coerce_parameter("AuditSchedule", spec, schedule) == schedule
        assert interval_hours(schedule) <= 24 or schedule == "rate(7 days)", schedule
    for schedule in [*REFUSED, "Off", "none", "false"]:
        with pytest.raises(TemplateError, match="parameter AuditSchedule="):
            coerce_parameter("AuditSchedule", spec, schedule)
    # AND "off" (once AuditEnabled "false") disables the schedule: no interval to judge
    assert coerce_parameter("AuditSchedule", spec, "off") == "off"
    assert interval_hours("cron(15 0/7 ? * * *)") == 7
