"""ExistingBucketName, KeyPrefix and KeySuffix as CloudFormation receives them.

The SAM transform's output is resolved with the local engine's intrinsic resolver
(conditions, Fn::If, Fn::Sub) for given parameters, every resource standing for
itself by a placeholder name: what the stack would create, grant and watch.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from moto.events.models import EventPattern

from onceflow.local.template import Stack, TemplateError, coerce_parameter
from service.logic.key_filter import KeyFilter
from tests.template.translate import translated

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "customer-uploads"
EXISTING = {"ExistingBucketName": BUCKET, "KeyPrefix": "incoming/", "KeySuffix": ".jpg"}


class _Placeholders(dict[str, str]):
    """Any attribute of a resource: ``<logical id>.<attribute>``."""

    def __init__(self, logical_id: str) -> None:
        super().__init__()
        self.logical_id = logical_id

    def __missing__(self, attribute: str) -> str:
        return f"{self.logical_id}.{attribute}"


def deployed(parameters: dict[str, str]) -> Stack:
    """The translated template with its parameters bound; resources by placeholder."""
    stack = Stack.from_file(ROOT / "template.yaml", parameters)
    stack = dataclasses.replace(stack, template=translated(parameters))

    def create(logical_id: str) -> None:
        stack.refs[logical_id] = f"{logical_id.lower()}-name"
        stack.attributes[logical_id] = _Placeholders(logical_id)
        name = stack.refs[logical_id]
        # An ARN of as many parts as a function's: the dashboard cuts a name from it.
        arn = f"arn:aws:placeholder:us-east-1:123456789012:resource:{name}"
        if stack.template["Resources"][logical_id]["Type"] == "AWS::S3::Bucket":
            arn = f"arn:aws:s3:::{name}"
        stack.attributes[logical_id]["Arn"] = arn

    stack.create = create
    return stack


def created(stack: Stack, kind: str) -> dict[str, dict[str, Any]]:
    """The resources of a type the stack creates with these parameters."""
    return {
        logical_id: resource
        for logical_id, resource in stack.template["Resources"].items()
        if resource["Type"] == kind and stack.resource_enabled(logical_id)
    }


def properties(stack: Stack, logical_id: str) -> Any:
    return stack.resolve(stack.template["Resources"][logical_id]["Properties"])


def s3_statements(stack: Stack) -> list[tuple[str, str, str]]:
    """(role, action, resource) of every s3 grant of every role the stack creates."""
    grants = []
    for logical_id in created(stack, "AWS::IAM::Role"):
        for policy in properties(stack, logical_id).get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                resources = statement["Resource"]
                for action in actions if isinstance(actions, list) else [actions]:
                    for resource in resources if isinstance(resources, list) else [resources]:
                        if action.startswith("s3:"):
                            grants.append((logical_id, action, resource))
    return grants


# ---- parameters and rules: bad input refused at deploy ----------------------------


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        (BUCKET, True),
        ("abc", True),
        ("my.bucket.2026", True),
        ("a" * 63, True),
        ("ab", False),  # too short
        ("a" * 64, False),  # too long
        ("Customer-Uploads", False),  # upper case
        ("customer_uploads", False),  # underscore
        ("-customer", False),
        ("customer.", False),
        ("my..bucket", False),
        ("192.168.5.4", False),  # an IP address
        ("xn--bucket", False),
        ("sthree-bucket", False),
        ("amzn-s3-demo-bucket", False),
        ("bucket-s3alias", False),  # an access point alias
        ("bucket--ol-s3", False),
        ("bucket.mrap", False),
        ("bucket--usw2-az1--x-s3", False),  # a directory bucket: no EventBridge events
        ("bucket--table-s3", False),
        ("arn:aws:s3:::customer-uploads", False),  # an ARN, not a name
        ("s3://customer-uploads", False),
        (" customer-uploads", False),
    ],
)
def test_the_bucket_name_follows_s3s_naming_rules(value: str, accepted: bool) -> None:
    # GIVEN the parameter as CloudFormation receives it
    spec = translated()["Parameters"]["ExistingBucketName"]
    # WHEN the value is checked as CloudFormation checks it (the local engine does the same)
    # THEN a name a general purpose bucket can have passes, and nothing else
    if accepted:
        assert coerce_parameter("ExistingBucketName", spec, value) == value
    else:
        with pytest.raises(TemplateError, match="general purpose S3 bucket"):
            coerce_parameter("ExistingBucketName", spec, value)


@pytest.mark.parametrize("name", ["KeyPrefix", "KeySuffix"])
@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        ("incoming/", True),
        (".jpg", True),
        ("a/b-c_d.e/", True),
        ("x" * 512, True),
        ("x" * 513, False),
        ("my folder/", False),  # a space: "+" in the event's key
        ("a+b", False),  # "+" is a space once decoded
        ("100%", False),  # "%" starts an escape
        ("year=2026/", False),  # S3 events encode "=" (%3D)
        ("*.jpg", False),  # the wildcard's own
        ("a\\b", False),  # the wildcard's escape
        ("é/", False),  # non-ASCII: %C3%A9 in the event
        ('a"b', False),
        ("a'b", False),  # would end the ASL's JSONata string
    ],
)
def test_key_filters_take_only_characters_an_event_key_carries_as_they_are(
    name: str, value: str, accepted: bool
) -> None:
    # GIVEN KeyPrefix or KeySuffix as CloudFormation receives it
    spec = translated()["Parameters"][name]
    # WHEN the value is checked
    # THEN only characters that read alike URL-encoded or not pass, and no wildcard
    if accepted:
        assert coerce_parameter(name, spec, value) == value
        assert quote_plus(value, safe="/") == value  # as the local engine encodes keys
    else:
        with pytest.raises(TemplateError, match=f"parameter {name}="):
            coerce_parameter(name, spec, value)


def test_a_key_filter_on_the_stacks_own_bucket_is_allowed() -> None:
    # GIVEN a prefix and a suffix with no existing bucket
    # WHEN the stack is deployed with them
    stack = deployed({"KeyPrefix": "incoming/", "KeySuffix": ".jpg"})
    # THEN the stack still creates its bucket, and the rule filters its keys
    assert "IngestBucket" in created(stack, "AWS::S3::Bucket")
    pattern = properties(stack, "ObjectCreatedRule")["EventPattern"]
    assert pattern["detail"]["object"] == {"key": [{"wildcard": "incoming/*.jpg"}]}


# ---- what the stack creates, grants and watches ------------------------------------


def test_no_bucket_and_no_bucket_policy_for_a_bucket_the_stack_does_not_own() -> None:
    # GIVEN the stack deployed on an existing bucket
    stack = deployed(EXISTING)
    # WHEN we list the S3 resources it creates
    buckets = created(stack, "AWS::S3::Bucket")
    policies = created(stack, "AWS::S3::BucketPolicy")
    # THEN only its output and log buckets, and no policy (nor encryption, logging,
    # notification or inventory setting, which are the bucket's own) on the user's
    assert set(buckets) == {"OutputBucket", "AccessLogBucket"}
    assert {properties(stack, p)["Bucket"] for p in policies} == {
        "outputbucket-name",
        "accesslogbucket-name",
    }
    assert BUCKET not in json.dumps([properties(stack, b) for b in buckets])
    # AND by default the stack still creates and protects its own
    default = deployed({})
    assert set(created(default, "AWS::S3::Bucket")) == {
        "IngestBucket",
        "OutputBucket",
        "AccessLogBucket",
    }
    assert "IngestBucketPolicy" in created(default, "AWS::S3::BucketPolicy")
    assert properties(default, "IngestBucket")["NotificationConfiguration"] == {
        "EventBridgeConfiguration": {"EventBridgeEnabled": True}
    }


@pytest.mark.parametrize(
    ("prefix", "suffix", "key"),
    [
        ("", "", None),
        ("incoming/", "", [{"prefix": "incoming/"}]),
        ("", ".jpg", [{"suffix": ".jpg"}]),
        ("incoming/", ".jpg", [{"wildcard": "incoming/*.jpg"}]),
    ],
)
def test_the_rule_matches_the_named_bucket_and_the_key_filter(
    prefix: str, suffix: str, key: list[dict[str, str]] | None
) -> None:
    # GIVEN an existing bucket with a prefix, a suffix, both or neither
    parameters = {"ExistingBucketName": BUCKET, "KeyPrefix": prefix, "KeySuffix": suffix}
    # WHEN the rule's pattern is resolved
    pattern = properties(deployed(parameters), "ObjectCreatedRule")["EventPattern"]
    # THEN it names the user's bucket, and the key filter with EventBridge's own operators
    assert pattern["source"] == ["aws.s3"] and pattern["detail-type"] == ["Object Created"]
    assert pattern["detail"]["bucket"] == {"name": [BUCKET]}
    if key is None:
        assert "object" not in pattern["detail"]
    else:
        assert pattern["detail"]["object"] == {"key": key}


FILTERS = [("incoming/", ""), ("", ".jpg"), ("incoming/", ".jpg"), ("a/", "/b"), ("ab", "ba")]
KEYS = [
    "incoming/x.jpg",
    "incoming/.jpg",
    "incoming/",
    "incoming",
    "incoming/x.jpeg",
    "incoming/sub/x.jpg",
    "x.jpg",
    ".jpg",
    "other/incoming/x.jpg",
    "incoming/my photo+1 é%.jpg",
    "a/b",  # prefix and suffix overlap: no
    "a//b",
    "a/x/b",
    "aba",  # "ab" then "ba" overlap: no
    "abba",
    "abxba",
    "",
]


@pytest.mark.parametrize(("prefix", "suffix"), FILTERS)
def test_the_audit_judges_keys_as_the_rule_does(prefix: str, suffix: str) -> None:
    """The audit's filter (functions/service/logic/key_filter.py) against the deployed pattern.

    Events carry the key URL-encoded; the filters' characters read alike either way,
    so the rule's verdict on the encoded key is the audit's on the plain one.
    """
    # GIVEN the rule's pattern and the audit's filter for the same parameters
    parameters = {"ExistingBucketName": BUCKET, "KeyPrefix": prefix, "KeySuffix": suffix}
    pattern = EventPattern.load(
        json.dumps(properties(deployed(parameters), "ObjectCreatedRule")["EventPattern"])
    )
    audit = KeyFilter(prefix, suffix)
    for key in KEYS:
        event = {
            "source": "aws.s3",
            "detail-type": "Object Created",
            "detail": {"bucket": {"name": BUCKET}, "object": {"key": quote_plus(key, safe="/")}},
        }
        # WHEN each judges the key
        # THEN they agree
        assert pattern.matches_event(event) == audit.matches(key), (prefix, suffix, key)


def test_iam_names_the_existing_bucket_and_reads_only_the_filtered_keys() -> None:
    # GIVEN the stack deployed on an existing bucket with a prefix and a suffix
    stack = deployed(EXISTING)
    grants = s3_statements(stack)
    bucket_arn = f"arn:aws:s3:::{BUCKET}"
    filtered = f"{bucket_arn}/incoming/*.jpg"
    # WHEN we read the grants on the ingest bucket (everything but the output and log buckets)
    ingest = [(r, a, res) for r, a, res in grants if "outputbucket" not in res.lower()]
    # THEN every one names the user's bucket: its listing, or its objects under the filter
    assert ingest, "the roles are granted on the ingest bucket"
    for role, action, resource in ingest:
        assert resource in (bucket_arn, filtered), (role, action, resource)
        if resource == filtered:
            assert action in ("s3:GetObject", "s3:GetObjectVersion"), (role, action)
    by_role = {(r, a) for r, a, res in ingest}
    assert ("ProcessorFunctionRole", "s3:GetObject") in by_role
    assert ("ProcessorFunctionRole", "s3:ListBucket") in by_role  # 404, not 403, when gone
    assert {("AuditFunctionRole", a) for a in ("s3:ListBucket", "s3:ListBucketVersions")} <= by_role
    assert ("AuditStateMachineRole", "s3:ListBucket") in by_role
    # AND no role may write to or delete from it
    assert not [g for g in ingest if g[1].startswith(("s3:Put", "s3:Delete"))]


def test_the_audit_and_the_processor_are_told_the_bucket_and_the_filter() -> None:
    # GIVEN the stack deployed on an existing bucket, SQS batch mode on too
    # (its EXPRESS workflow needs at most one retry of a call of at most 40 s)
    express = {"ProcessorTimeoutSeconds": "30"}
    stack = deployed({**EXISTING, "SqsSource": "create", "SqsBatchMode": "true", **express})
    # WHEN we read the audit function's environment and the definitions' substitutions
    env = properties(stack, "AuditFunction")["Environment"]["Variables"]
    machines = {
        logical_id: properties(stack, logical_id)["DefinitionSubstitutions"]
        for logical_id in created(stack, "AWS::StepFunctions::StateMachine")
    }
    # THEN the audit walks the user's bucket under the filter
    assert (env["INGEST_BUCKET"], env["INGEST_KEY_PREFIX"], env["INGEST_KEY_SUFFIX"]) == (
        BUCKET,
        "incoming/",
        ".jpg",
    )
    # AND reads its S3 Inventory, once you add it, where S3 delivers the user's bucket's
    assert env["AUDIT_INVENTORY_PREFIX"] == f"inventory/{BUCKET}/onceflow-audit/"
    # AND every state machine names it, and the processors the filter they refuse by
    assert {m: s["IngestBucketName"] for m, s in machines.items()} == dict.fromkeys(
        machines, BUCKET
    )
    for machine in ("ProcessorStateMachine", "BatchProcessorStateMachine"):
        assert (machines[machine]["KeyPrefix"], machines[machine]["KeySuffix"]) == (
            "incoming/",
            ".jpg",
        )
    # AND the stack's output names it
    assert stack.resolve(stack.template["Outputs"]["IngestBucketName"]["Value"]) == BUCKET


def test_the_dashboard_and_the_lost_work_alarm_name_the_bucket() -> None:
    # GIVEN the stack deployed on an existing bucket
    stack = deployed(EXISTING)
    # WHEN its dashboard body and the audit's alarm are resolved
    body = json.loads(properties(stack, "Dashboard")["DashboardBody"])
    description = properties(stack, "AuditFoundLostWorkAlarm")["AlarmDescription"]
    # THEN the dashboard says which bucket and keys, and charts that bucket's objects
    (text,) = [w for w in body["widgets"] if w["type"] == "text"]
    assert f"s3://{BUCKET}" in text["properties"]["markdown"]
    assert "`incoming/*.jpg`" in text["properties"]["markdown"]
    charts = [w["properties"] for w in body["widgets"] if w["type"] == "metric"]
    objects = ["AWS/S3", "NumberOfObjects", "BucketName", BUCKET, "StorageType", "AllStorageTypes"]
    assert objects in [m for chart in charts for m in chart["metrics"]]
    # AND the alarm on lost work names it too
    assert f"s3://{BUCKET} (keys: incoming/*.jpg)" in description
    # AND by default they name the stack's own bucket and every key
    default = deployed({})
    default_body = json.loads(properties(default, "Dashboard")["DashboardBody"])
    assert "s3://ingestbucket-name (keys: `every key`)" in json.dumps(default_body)


def test_cfn_lint_accepts_the_template_deployed_on_an_existing_bucket(tmp_path: Path) -> None:
    """cfn-lint checks defaults against their patterns and the template's rules and
    conditions: give it the existing bucket's values as the defaults."""
    # GIVEN template.yaml with ExistingBucketName, KeyPrefix and KeySuffix defaulted
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    for name, value in EXISTING.items():
        text, count = re.subn(
            rf"(\n  {name}:\n    Type: String\n    Default: )\"\"",
            lambda m, v=value: f"{m.group(1)}{json.dumps(v)}",
            text,
        )
        assert count == 1, name
    copy = tmp_path / "template.yaml"
    copy.write_text(text, encoding="utf-8")
    # WHEN cfn-lint reads it
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), str(copy)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # THEN it finds nothing
    assert result.returncode == 0, result.stdout + result.stderr
