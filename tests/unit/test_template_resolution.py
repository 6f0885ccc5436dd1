"""The local engine reads template.yaml as CloudFormation would."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.cli import main
from onceflow.template import Stack, TemplateError

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
EVENTS = TEMPLATE.parent / "events"


def test_defaults_and_overrides() -> None:
    stack = Stack.from_file(TEMPLATE, {"MaxAttempts": 5})
    assert stack.parameters["MaxAttempts"] == "5"
    assert stack.parameters["WorkflowType"] == "STANDARD"
    assert stack.condition("UseBundledProcessor") is True


def test_bring_your_own_function_turns_the_bundled_one_off() -> None:
    stack = Stack.from_file(
        TEMPLATE, {"ProcessorFunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:mine"}
    )
    assert stack.condition("UseBundledProcessor") is False
    assert stack.resource_enabled("ProcessorFunction") is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"WorkflowType": "FAST"}, "is not one of"),
        ({"MaxAttempts": "many"}, "MaxAttempts='many' .*whole number from 1 to 50"),
        ({"MaxAttempts": 0}, "MaxAttempts='0' .*whole number from 1 to 50"),
        ({"MaxAttempts": 51}, "MaxAttempts='51' .*whole number from 1 to 50"),
        ({"RetryIntervalSeconds": 1.5}, "RetryIntervalSeconds='1.5' .*whole number"),
        ({"RetryBackoffRate": "fast"}, "RetryBackoffRate='fast' must be a number"),
        ({"RetryBackoffRate": 0.5}, "RetryBackoffRate='0.5' is below 1"),
        ({"ProcessorFunctionArn": "mine"}, "ProcessorFunctionArn='mine' .*function ARN"),
        ({"SqsSource": "my-queue"}, "SqsSource='my-queue' .*must match"),
        ({"NoSuchParameter": 1}, "unknown parameters"),
    ],
)
def test_bad_parameters_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        Stack.from_file(TEMPLATE, overrides)


def test_the_command_line_refuses_a_bad_parameter_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CloudFormation would fail the deploy on RetryIntervalSeconds=1.5; so does onceflow."""
    # GIVEN a decimal where Step Functions takes a whole number of seconds
    argv = ["execute", "ProcessorStateMachine", "-e", str(EVENTS / "s3-object-created.json")]
    # WHEN onceflow runs with it
    code = main([*argv, "--no-server", "--parameter-overrides", "RetryIntervalSeconds=1.5"])
    # THEN it stops with an error that names the parameter, the value and the rule
    out, err = capsys.readouterr()
    assert code == 2
    assert "RetryIntervalSeconds='1.5'" in err and "whole number from 1 to 86400" in err
    assert "uploaded a sample image" not in err and "status:" not in out


def test_intrinsics_resolve_against_created_resources() -> None:
    stack = Stack.from_file(TEMPLATE)
    stack.refs["OutputBucket"] = "out-bucket"
    stack.attributes["OutputBucket"] = {"Arn": "arn:aws:s3:::out-bucket"}
    assert stack.resolve({"Fn::Sub": "${OutputBucket.Arn}/processed/*"}) == (
        "arn:aws:s3:::out-bucket/processed/*"
    )
    assert stack.resolve({"Fn::Sub": ["${X}-${AWS::Region}", {"X": {"Ref": "OutputBucket"}}]}) == (
        "out-bucket-us-east-1"
    )
    assert stack.resolve({"Fn::If": ["UseBundledProcessor", "a", "b"]}) == "a"
    assert stack.resolve([{"Ref": "AWS::NoValue"}, 1]) == [1]
    assert stack.resolve({"Fn::Join": ["-", ["a", {"Ref": "OutputBucket"}]]}) == "a-out-bucket"


def test_globals_merge_into_functions() -> None:
    stack = Stack.from_file(TEMPLATE)
    for bucket in ("OutputBucket", "IngestBucket"):
        stack.refs[bucket] = bucket.lower()
        stack.attributes[bucket] = {"Arn": f"arn:aws:s3:::{bucket.lower()}"}
    props = stack.function_properties("ProcessorFunction")
    assert props["Runtime"] == "python3.13"
    variables = props["Environment"]["Variables"]
    # From Globals, per stack: !Sub "onceflow/${AWS::StackName}".
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "onceflow/onceflow-local"
    assert variables["OUTPUT_BUCKET"] == "outputbucket"  # from the function
