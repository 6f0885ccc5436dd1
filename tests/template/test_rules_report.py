"""A refusal by the template's Rules names every failed assertion at once (P13: a user
found EXPRESS's limits one deploy at a time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from onceflow.local.template import RulesRefused, Stack, TemplateError, load_template

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


def _rules() -> dict[str, Any]:
    rules: dict[str, Any] = load_template(TEMPLATE)["Rules"]
    return rules


def test_every_failed_rule_assertion_is_reported_at_once() -> None:
    # GIVEN EXPRESS with the STANDARD timeout, and rows kept one day by a daily audit
    # that skips two days of uploads: three assertions of two rules fail
    parameters = {
        "WorkflowType": "EXPRESS",
        "RetentionDays": "1",
        "AuditRecentCutoffHours": "48",
    }
    # WHEN the local engine binds them
    with pytest.raises(TemplateError) as refusal:
        Stack.from_file(TEMPLATE, parameters)
    # THEN one refusal names every failed assertion, each with its rule and description
    rules = _rules()
    expected = [
        ("ExpressFitsInFiveMinutes", " ".join(assertion["AssertDescription"].split()))
        for assertion in rules["ExpressFitsInFiveMinutes"]["Assertions"]
    ]
    window = rules["AuditWindowCoversTheSchedule"]["Assertions"]
    refused = [
        a
        for a in window
        if "at least 3 with a daily" in a["AssertDescription"]
        or "48 to 71" in a["AssertDescription"]
    ]
    assert len(refused) == 2
    expected += [
        ("AuditWindowCoversTheSchedule", " ".join(a["AssertDescription"].split())) for a in refused
    ]
    assert isinstance(refusal.value, RulesRefused)
    assert refusal.value.failures == expected
    message = str(refusal.value)
    assert message.startswith("3 rule assertions failed:\n"), message
    assert message.splitlines()[1:] == [f"  rule {name}: {text}" for name, text in expected]
    # AND what the rules accept is unchanged: the same values within the limits deploy
    Stack.from_file(
        TEMPLATE,
        {
            "WorkflowType": "EXPRESS",
            "ProcessorTimeoutSeconds": "40",
        },
    )


def test_one_failed_assertion_reads_as_before() -> None:
    with pytest.raises(TemplateError) as refusal:
        Stack.from_file(TEMPLATE, {"RetentionDays": "1"})
    assert str(refusal.value).startswith(
        "rule AuditWindowCoversTheSchedule: RetentionDays must be at least 3"
    )
