"""`sam deploy --guided` a person can answer: the parameters come in named groups, in the
order a deployer decides, each with a label, and every refusal says what to type instead."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from samcli.commands._utils.template import get_template_parameters
from samcli.commands.deploy import guided_context
from samcli.commands.deploy.guided_context import GuidedContext

from onceflow.local.template import TemplateError, coerce_parameter, load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

# Where events come from first (it decides which other questions matter), then what
# processes them, how hard it retries, what the ledger keeps, the audit, and operations.
GROUP_ORDER = [
    "Where events come from: S3 through EventBridge",
    "Where events come from: an SQS queue",
    "Where events come from: EventBridge custom events",
    "The processor and its ledger",
    "The audit: finds and resubmits lost work",
    "Operations: encryption, alarms and logs",
]


def _template() -> dict[str, Any]:
    return load_template(TEMPLATE)


def _interface() -> dict[str, Any]:
    metadata = _template().get("Metadata", {})
    assert "AWS::CloudFormation::Interface" in metadata, "template.yaml has no parameter groups"
    interface: dict[str, Any] = metadata["AWS::CloudFormation::Interface"]
    return interface


def test_every_parameter_is_in_exactly_one_group_and_has_a_label() -> None:
    # GIVEN the template's parameters and its CloudFormation interface
    parameters = set(_template()["Parameters"])
    interface = _interface()
    # WHEN the groups are read
    grouped = [name for group in interface["ParameterGroups"] for name in group["Parameters"]]
    # THEN each parameter is in one group, no group names a parameter that is not there
    assert sorted(grouped) == sorted(parameters), set(grouped) ^ parameters
    assert len(grouped) == len(set(grouped)), [n for n in grouped if grouped.count(n) > 1]
    # AND each has a label of its own, short enough for a form's field name
    labels = interface["ParameterLabels"]
    assert set(labels) == parameters, set(labels) ^ parameters
    texts = [label["default"] for label in labels.values()]
    assert len(set(texts)) == len(texts), "two parameters have the same label"
    assert all(0 < len(text) <= 64 for text in texts), [t for t in texts if len(t) > 64]


def test_the_groups_come_in_the_order_a_deployer_decides() -> None:
    groups = _interface()["ParameterGroups"]
    assert [group["Label"]["default"] for group in groups] == GROUP_ORDER


def test_sam_deploy_guided_asks_group_by_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """SAM CLI's guided deploy ignores AWS::CloudFormation::Interface: it asks for the
    parameters in the order the template lists them (samcli/commands/deploy/
    guided_context.py, prompt_parameters). So the Parameters section itself follows the
    groups, and the console (which reads the interface) and the terminal agree."""
    # GIVEN SAM CLI's own guided prompts, answered with each default
    asked: list[str] = []

    def answer(text: str, default: Any = None, **_: Any) -> Any:
        asked.append(re.sub(r"\x1b\[[0-9;]*m", "", text).strip().removeprefix("Parameter "))
        return default

    monkeypatch.setattr(guided_context, "prompt", answer)
    context = GuidedContext(str(TEMPLATE), "onceflow", None, None, None, None)
    # WHEN it asks for the template's parameters
    context.prompt_parameters(get_template_parameters(str(TEMPLATE)), None, "", "")
    # THEN it asks them group by group, in the groups' order
    groups = _interface()["ParameterGroups"]
    assert asked == [name for group in groups for name in group["Parameters"]]


def test_every_pattern_says_what_it_accepts() -> None:
    # CloudFormation shows a refused value's ConstraintDescription, else only the regex
    parameters = _template()["Parameters"]
    missing = [
        name
        for name, spec in parameters.items()
        if "AllowedPattern" in spec and not spec.get("ConstraintDescription")
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        ("ops@example.com", True),
        ("first.last+alarms@mail.example.co.uk", True),
        ("ops@example", False),  # no domain
        ("ops example.com", False),
        ("ops@example.com, oncall@example.com", False),  # one address: subscribe more later
        ("ops@example.com,oncall@example.com", False),
        (" ops@example.com", False),
    ],
)
def test_alarm_email_is_one_address_or_empty(value: str, accepted: bool) -> None:
    spec = _template()["Parameters"]["AlarmEmail"]
    if accepted:
        assert coerce_parameter("AlarmEmail", spec, value) == value
        return
    with pytest.raises(TemplateError, match="AlarmEmail") as refusal:
        coerce_parameter("AlarmEmail", spec, value)
    assert spec["ConstraintDescription"] in str(refusal.value)


def test_the_audit_schedule_refusal_says_what_to_write() -> None:
    spec = _template()["Parameters"]["AuditSchedule"]
    with pytest.raises(TemplateError) as refusal:
        coerce_parameter("AuditSchedule", spec, "every day")
    assert "rate(1 day)" in str(refusal.value)


def _express_limits() -> list[str]:
    """What the rule ExpressFitsInFiveMinutes asks, read from its assertions."""
    rule = _template()["Rules"]["ExpressFitsInFiveMinutes"]
    limits = []
    for assertion in rule["Assertions"]:
        (values, ref) = assertion["Assert"]["Fn::Contains"]
        name = ref["Ref"]
        numbers = sorted(int(v) for v in values)
        assert numbers == list(range(numbers[0], numbers[-1] + 1)), name
        limits.append(f"{name} at most {numbers[-1]}")
    return limits


def test_the_express_limits_are_stated_where_the_workflow_type_is_chosen() -> None:
    # GIVEN the limits the rule enforces under EXPRESS and the batch mode
    limits = _express_limits()
    assert limits == ["ProcessorTimeoutSeconds at most 40"]
    # THEN WorkflowType's description, and the README's and operate.md's rows for it,
    # state each of them
    description = " ".join(_template()["Parameters"]["WorkflowType"]["Description"].split())
    rows = [
        line
        for page in ("README.md", "docs/operate.md")
        for line in (ROOT / page).read_text(encoding="utf-8").splitlines()
        if line.startswith("| `WorkflowType`")
    ]
    assert len(rows) == 2
    for text in (description, *rows):
        for limit in limits:
            name, _, number = limit.partition(" at most ")
            assert re.search(rf"{name}\W+(at most|<=) {number}\b", text), (limit, text)
