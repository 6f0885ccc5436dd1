"""AuditInventory auto, the default (P12 item 5): the audit reads a daily S3 Inventory
instead of listing the bucket. The stack configures it on its own bucket; on a bucket it
does not own it grants the delivery and the audit reads the reports once you add the
configuration (onceflow doctor prints the command); until a report arrives it lists."""

from __future__ import annotations

from typing import Any

import pytest

from onceflow.local.engine import DEFAULT_TEMPLATE
from onceflow.local.template import Stack, TemplateError, load_template
from tests.template.test_existing_bucket import EXISTING, created, deployed, properties


def _inventory(stack: Stack) -> list[dict[str, Any]]:
    if "IngestBucket" not in created(stack, "AWS::S3::Bucket"):
        return []
    return list(properties(stack, "IngestBucket").get("InventoryConfigurations") or [])


def _audit_env(stack: Stack) -> dict[str, str]:
    variables: dict[str, str] = properties(stack, "AuditFunction")["Environment"]["Variables"]
    return variables


def _delivery_granted(stack: Stack) -> bool:
    policy = properties(stack, "OutputBucketPolicy")["PolicyDocument"]["Statement"]
    return any(s.get("Sid") == "S3InventoryDelivery" for s in policy if isinstance(s, dict))


def test_auto_is_the_default_and_no_new_parameter() -> None:
    parameter = load_template(DEFAULT_TEMPLATE)["Parameters"]["AuditInventory"]
    assert parameter["Default"] == "auto"
    assert parameter["AllowedValues"] == ["auto", "none", "Daily", "Weekly"]


def test_as_shipped_the_stacks_bucket_gets_a_daily_inventory_the_audit_reads() -> None:
    # GIVEN the template's defaults (the stack's own bucket)
    stack = deployed({})
    # THEN the bucket has one daily inventory of every version, delivered where S3 may write
    (configuration,) = _inventory(stack)
    assert configuration["ScheduleFrequency"] == "Daily"
    assert configuration["IncludedObjectVersions"] == "All"
    assert _delivery_granted(stack)
    # AND the audit is told where its reports arrive and how old one may be (2 days)
    env = _audit_env(stack)
    assert env["AUDIT_INVENTORY_PREFIX"] == "inventory/ingestbucket-name/onceflow-audit/"
    assert env["AUDIT_INVENTORY_MAX_AGE_HOURS"] == "48"


def test_auto_on_a_bucket_the_stack_does_not_own_grants_the_inventory_you_add() -> None:
    # GIVEN an existing bucket, AuditInventory left at its default
    stack = deployed(EXISTING)
    # THEN the stack configures nothing on it (no bucket of the stack's has an inventory)
    assert _inventory(stack) == []
    # AND it lets S3 deliver that bucket's reports, and tells the audit where they arrive:
    # the audit reads one once you add the configuration (onceflow doctor prints it)
    assert _delivery_granted(stack)
    policy = properties(stack, "OutputBucketPolicy")["PolicyDocument"]["Statement"]
    (delivery,) = [s for s in policy if isinstance(s, dict) and s["Sid"] == "S3InventoryDelivery"]
    assert delivery["Condition"]["ArnLike"]["aws:SourceArn"].endswith(
        f":s3:::{EXISTING['ExistingBucketName']}"
    )
    env = _audit_env(stack)
    assert env["AUDIT_INVENTORY_PREFIX"] == (
        f"inventory/{EXISTING['ExistingBucketName']}/onceflow-audit/"
    )


@pytest.mark.parametrize("value", ["Daily", "Weekly"])
def test_an_explicit_frequency_on_a_bucket_the_stack_does_not_own_deploys(value: str) -> None:
    stack = deployed({**EXISTING, "AuditInventory": value, "RetentionDays": "30"})
    assert _inventory(stack) == [] and _delivery_granted(stack)
    max_age = _audit_env(stack)["AUDIT_INVENTORY_MAX_AGE_HOURS"]
    assert max_age == ("48" if value == "Daily" else "192")


def test_the_stacks_inventory_lists_only_the_keys_it_processes() -> None:
    # GIVEN a KeyPrefix: the inventory (billed per object listed) lists only under it
    (configuration,) = _inventory(deployed({"KeyPrefix": "uploads/"}))
    assert configuration["Prefix"] == "uploads/"
    (configuration,) = _inventory(deployed({}))
    assert "Prefix" not in configuration


@pytest.mark.parametrize("retention", ["1", "2"])
def test_auto_asks_for_no_inventory_that_a_report_could_not_serve(retention: str) -> None:
    # GIVEN rows kept 1 or 2 days (only with the schedule off), a report up to 2 days old
    parameters = {"RetentionDays": retention, "AuditSchedule": "off"}
    # THEN auto deploys without an inventory; the audit lists
    stack = deployed(parameters)
    assert _inventory(stack) == []
    assert _audit_env(stack)["AUDIT_INVENTORY_PREFIX"] == ""
    # AND Daily asked for is refused, as before
    with pytest.raises(TemplateError, match="rule InventoryWithinRetention"):
        Stack.from_file(DEFAULT_TEMPLATE, {**parameters, "AuditInventory": "Daily"})


@pytest.mark.parametrize(
    ("value", "frequency", "max_age"), [("Daily", "Daily", "48"), ("Weekly", "Weekly", "192")]
)
def test_an_explicit_frequency_is_deployed_as_asked(
    value: str, frequency: str, max_age: str
) -> None:
    stack = deployed({"AuditInventory": value, "RetentionDays": "30"})
    (configuration,) = _inventory(stack)
    assert configuration["ScheduleFrequency"] == frequency
    assert _audit_env(stack)["AUDIT_INVENTORY_MAX_AGE_HOURS"] == max_age


def test_none_lists_the_stacks_own_bucket() -> None:
    stack = deployed({"AuditInventory": "none"})
    assert _inventory(stack) == [] and not _delivery_granted(stack)
    assert _audit_env(stack)["AUDIT_INVENTORY_PREFIX"] == ""
