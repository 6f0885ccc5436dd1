"""The local engine reads template.yaml as CloudFormation would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onceflow.cli import main
from onceflow.local.template import Stack, TemplateError, coerce_parameter, load_template
from onceflow.project import TEMPLATE_NAMES, TemplateNotFound, find_template, project_directory

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
EVENTS = TEMPLATE.parent / "events"


def test_defaults_and_overrides() -> None:
    stack = Stack.from_file(TEMPLATE, {"RetentionDays": 45})
    assert stack.parameters["RetentionDays"] == "45"
    # AND a former parameter reads as its constant (the template's Mappings)
    assert stack.setting("MaxAttempts") == "3"
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
        ({"RetentionDays": "many"}, "RetentionDays='many' .*whole number from 1 to 36500"),
        ({"RetentionDays": 0}, "RetentionDays='0' .*whole number from 1 to 36500"),
        ({"RetentionDays": 36501}, "RetentionDays='36501' .*whole number from 1 to 36500"),
        ({"ProcessorTimeoutSeconds": 1.5}, "ProcessorTimeoutSeconds='1.5' .*whole number"),
        ({"MaxAttempts": 5}, "unknown parameters: MaxAttempts"),  # a constant now
        ({"ProcessorFunctionArn": "mine"}, "ProcessorFunctionArn='mine' .*function ARN"),
        ({"SqsSource": "my-queue"}, "SqsSource='my-queue' failed its constraint: must be none"),
        ({"NoSuchParameter": 1}, "unknown parameters"),
    ],
)
def test_bad_parameters_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        Stack.from_file(TEMPLATE, overrides)


@pytest.mark.parametrize(
    ("value", "message"),
    [("fast", "must be a number"), ("0.5", "is below 1"), ("inf", "must be a number")],
)
def test_a_number_parameter_is_refused_as_cloudformation_refuses_it(
    value: str, message: str
) -> None:
    # GIVEN a Number parameter with a MinValue (the template has none now; a user's may)
    spec = {"Type": "Number", "MinValue": 1}
    # THEN what CloudFormation refuses is refused, naming the parameter
    with pytest.raises(TemplateError, match=f"parameter Rate='{value}' {message}"):
        coerce_parameter("Rate", spec, value)
    assert coerce_parameter("Rate", spec, "1.5") == "1.5"


def test_the_command_line_refuses_a_bad_parameter_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CloudFormation would fail the deploy on ProcessorTimeoutSeconds=1.5; so does onceflow."""
    # GIVEN a decimal where Step Functions takes a whole number of seconds
    argv = ["execute", "ProcessorStateMachine", "-e", str(EVENTS / "s3-object-created.json")]
    # WHEN onceflow runs with it
    code = main([*argv, "--no-server", "--parameter-overrides", "ProcessorTimeoutSeconds=1.5"])
    # THEN it stops with an error that names the parameter, the value and the rule
    out, err = capsys.readouterr()
    assert code == 2
    assert "ProcessorTimeoutSeconds='1.5'" in err and "whole number from 3 to 890" in err
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


# ---- Which template a command uses ----------------------------------------------


def test_the_nearest_template_upward_is_found(tmp_path: Path) -> None:
    # GIVEN a project whose template sits two directories above where a command runs
    (tmp_path / "template.yaml").write_text("Resources: {}\n", encoding="utf-8")
    below = tmp_path / "functions" / "service"
    below.mkdir(parents=True)
    # WHEN the template is looked for from there
    found = find_template(below)
    # THEN it is the project's, and the project is its directory
    assert found == (tmp_path / "template.yaml").resolve()
    assert project_directory(found) == tmp_path.resolve()


def test_a_template_in_the_current_directory_wins_as_in_sam(tmp_path: Path) -> None:
    # GIVEN a template.yml here and a template.yaml above (sam reads the one here)
    (tmp_path / "template.yaml").write_text("Resources: {}\n", encoding="utf-8")
    here = tmp_path / "nested"
    here.mkdir()
    (here / "template.yml").write_text("Resources: {}\n", encoding="utf-8")
    # WHEN the template is looked for from here, THEN the nearest one is used
    assert find_template(here) == (here / "template.yml").resolve()


def test_outside_any_project_the_error_says_what_to_do(tmp_path: Path) -> None:
    # GIVEN a directory with no template in it or above it (tmp_path's parents have none)
    assert not any((d / n).exists() for d in (tmp_path, *tmp_path.parents) for n in TEMPLATE_NAMES)
    # WHEN a template is looked for, THEN the error names the fix
    with pytest.raises(TemplateNotFound, match=r"run onceflow inside the project.*--template"):
        find_template(tmp_path)


def test_a_command_in_a_subdirectory_uses_the_project_template(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a user standing in events/, naming the event relative to it
    monkeypatch.chdir(EVENTS)
    # WHEN a function is invoked without --template
    code = main(["invoke", "ProcessorFunction", "-e", "processor-payload.json", "--no-server"])
    # THEN it runs on the project's template (CodeUri resolved beside it) and says which
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["created"] is True
    assert f"local: using {TEMPLATE}" in err


def test_a_command_outside_any_project_runs_onceflows_own_app_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a directory outside any project, and an event file there
    event = tmp_path / "event.json"
    event.write_text((EVENTS / "processor-payload.json").read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    # WHEN a command that needs a template runs there
    code = main(["invoke", "ProcessorFunction", "-e", str(event), "--no-server"])
    # THEN it runs onceflow's own app (the package's copy, here the checkout's), says so,
    # and names the command that writes an app of the user's
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["created"] is True
    assert "no template.yaml here or in a directory above: onceflow's own app runs" in err
    assert "onceflow init DIR" in err


def test_a_template_that_is_not_yaml_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a --template that YAML cannot read
    broken = tmp_path / "template.yaml"
    broken.write_text("Resources: [unclosed\n", encoding="utf-8")
    # WHEN a command runs with it
    argv = ["invoke", "ProcessorFunction", "-e", str(EVENTS / "processor-payload.json")]
    code = main([*argv, "--template", str(broken)])
    # THEN it says the file is not YAML, without a traceback
    err = capsys.readouterr().err
    assert code == 2 and f"{broken} is not YAML or JSON" in err and "Traceback" not in err


def test_rule_functions_work_in_rules_only(tmp_path: Path) -> None:
    # GIVEN a rule asserting Fn::Not of Fn::Contains, and a condition using Fn::Contains
    template = tmp_path / "template.yaml"
    template.write_text(
        "Parameters:\n  Days: {Type: String, Default: '1'}\n"
        "Rules:\n  NotShort:\n    Assertions:\n"
        "      - Assert: !Not [!Contains [['1', '2'], !Ref Days]]\n"
        "        AssertDescription: Days must be above 2\n"
        "Conditions:\n  Short: !Contains [['1', '2'], !Ref Days]\n"
        "Resources:\n  Topic: {Type: AWS::SNS::Topic}\n",
        encoding="utf-8",
    )
    # THEN the rule judges the parameters ...
    with pytest.raises(TemplateError, match="rule NotShort: Days must be above 2"):
        Stack.from_file(template)
    stack = Stack.from_file(template, {"Days": "3"})
    # ... and a condition cannot use a rule function, as CloudFormation's rule functions
    # "work only in the Rules section" (intrinsic-function-reference-rules.html)
    with pytest.raises(TemplateError, match="Fn::Contains is not supported"):
        stack.condition("Short")


def test_the_short_form_condition_tag_names_a_condition(tmp_path: Path) -> None:
    # GIVEN the documented `!And [!Equals [...], !Condition SomeOtherCondition]`
    # (intrinsic-function-reference-conditions.html, Fn::And, YAML)
    template = tmp_path / "template.yaml"
    template.write_text(
        "Parameters:\n  Env: {Type: String, Default: prod}\n"
        "Conditions:\n  IsProd: !Equals [!Ref Env, prod]\n"
        "  Both: !And [!Equals [!Ref Env, prod], !Condition IsProd]\n"
        "Resources:\n  Topic: {Type: AWS::SNS::Topic}\n",
        encoding="utf-8",
    )
    # THEN it reads as {"Condition": "IsProd"} and evaluates
    assert Stack.from_file(template).condition("Both") is True
    assert Stack.from_file(template, {"Env": "dev"}).condition("Both") is False


def test_globals_merge_as_sam_merges_them(tmp_path: Path) -> None:
    # GIVEN Globals and a function overriding a primitive, a map and a list, and a function
    # ignoring Globals (sam-specification-template-anatomy-globals.html, "Overridable
    # properties": the resource's primitive wins, maps merge, lists are additive; IgnoreGlobals
    # as samtranslator's Globals reads it: aws/serverless-application-model#3386, "Support
    # Ignore Globals resource attribute"; what the Globals page says of it not verified)
    template = tmp_path / "template.yaml"
    template.write_text(
        "Transform: AWS::Serverless-2016-10-31\n"
        "Globals:\n  Function:\n    Timeout: 3\n    Tags: {team: a, app: x}\n"
        "    Layers: [arn:global]\n    Environment: {Variables: {A: '1', B: '1'}}\n"
        "Resources:\n"
        "  F:\n    Type: AWS::Serverless::Function\n    Properties:\n      Timeout: 9\n"
        "      Tags: {team: b}\n      Layers: [arn:local]\n"
        "      Environment: {Variables: {B: '2'}}\n"
        "  G:\n    Type: AWS::Serverless::Function\n    IgnoreGlobals: '*'\n"
        "    Properties: {Timeout: 5}\n",
        encoding="utf-8",
    )
    stack = Stack.from_file(template)
    # THEN
    assert stack.function_properties("F") == {
        "Timeout": 9,
        "Tags": {"team": "b", "app": "x"},
        "Layers": ["arn:global", "arn:local"],
        "Environment": {"Variables": {"A": "1", "B": "2"}},
    }
    assert stack.function_properties("G") == {"Timeout": 5}


def test_a_short_form_tag_the_engine_lacks_reads_as_its_function(tmp_path: Path) -> None:
    # GIVEN a template with a tag the engine does not evaluate (!Cidr)
    template = tmp_path / "template.yaml"
    template.write_text(
        "Conditions:\n  Odd: !Equals [!Cidr [10.0.0.0/16, 2, 8], x]\n"
        "Resources:\n  Topic: {Type: AWS::SNS::Topic}\n",
        encoding="utf-8",
    )
    # WHEN it is read: every !Tag as aws-cli's yamlhelper reads it (samtranslator's
    # yaml_helper.py is its copy), not refused as YAML it cannot read
    stack = Stack.from_file(template)
    assert stack.template["Conditions"]["Odd"] == {
        "Fn::Equals": [{"Fn::Cidr": ["10.0.0.0/16", 2, 8]}, "x"]
    }
    # THEN resolving it names the function the local engine lacks
    with pytest.raises(TemplateError, match="Fn::Cidr is not supported by the local engine"):
        stack.condition("Odd")


def test_a_template_read_again_is_a_copy_of_its_own_and_a_changed_one_is_read_anew(
    tmp_path: Path,
) -> None:
    # GIVEN a template read once (its parse kept, by its bytes)
    path = tmp_path / "template.yaml"
    path.write_text("Resources:\n  Q:\n    Type: AWS::SQS::Queue\n", encoding="utf-8")
    first = load_template(path)
    # WHEN the reader changes what it got, and the template is read again
    first["Resources"]["Q"]["Type"] = "changed by its reader"
    second = load_template(path)
    # THEN the second read is the file's, not the first reader's copy
    assert second == {"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}
    # AND a file changed since is read anew
    path.write_text("Resources:\n  T:\n    Type: AWS::SNS::Topic\n", encoding="utf-8")
    assert load_template(path) == {"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}
