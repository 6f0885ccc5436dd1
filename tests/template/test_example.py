"""examples/word-count deploys: SAM validates, builds and packages it, onceflow nested in it.

The example nests this repository's template.yaml by its local path, which SAM
takes ("Defining a nested application from the local file system",
serverless-sam-template-nested-applications.html) and which must go through
`sam build` or `sam package` to deploy (sam-resource-application.html, Location).
The packaging runs SAM CLI's own exporter with the upload replaced: no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from samcli.lib.package.artifact_exporter import Template
from samcli.lib.package.uploaders import Uploaders
from samcli.yamlhelper import yaml_dump, yaml_parse

from onceflow.local.template import Stack
from tests.template.translate import (
    PACKAGING_BUCKET,
    FakeS3Uploader,
    NoSigning,
    translate_template,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "word-count"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1"}
BUCKET = PACKAGING_BUCKET


def _example() -> dict[str, Any]:
    template: dict[str, Any] = yaml_parse((EXAMPLE / "template.yaml").read_text("utf-8"))
    return template


def _sam(*arguments: str, **environment: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "sam"), *arguments],
        cwd=EXAMPLE,
        env={**ENV, **environment},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_sam_validate_lint_accepts_the_example() -> None:
    # GIVEN the example's template
    # WHEN SAM validates it with cfn-lint
    result = _sam("validate", "--lint", "--region", "us-east-1")
    # THEN it is clean
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def test_the_example_nests_this_template_with_its_function_and_its_bucket() -> None:
    # GIVEN the example's nested application
    resources = _example()["Resources"]
    application = resources["Onceflow"]["Properties"]
    # THEN it is this repository's template, by a path relative to the example
    assert (EXAMPLE / application["Location"]).resolve() == ROOT / "template.yaml"
    # AND it passes the example's own function and bucket
    parameters = application["Parameters"]
    assert parameters["ProcessorFunctionArn"] == {"Fn::GetAtt": ["WordCountFunction", "Arn"]}
    assert parameters["ExistingBucketName"] == {"Ref": "UploadsBucket"}
    # AND only parameters onceflow has
    assert set(parameters) <= set(Stack.from_file(ROOT / "template.yaml").parameters)


def test_the_examples_function_fits_onceflows_processor_timeout() -> None:
    # GIVEN the example's function and the timeout onceflow allows its processor
    # (ProcessorTimeoutSeconds as the example passes it, else its default)
    function = _example()["Resources"]["WordCountFunction"]["Properties"]
    passed = _example()["Resources"]["Onceflow"]["Properties"]["Parameters"]
    default = Stack.from_file(ROOT / "template.yaml").parameters["ProcessorTimeoutSeconds"]
    allowed = int(passed.get("ProcessorTimeoutSeconds", default))
    # THEN the function's timeout is at most that (docs/processor.md), on the runtime it names
    assert int(function["Timeout"]) <= allowed
    assert function["Runtime"] == "python3.11"


@pytest.mark.slow
def test_sam_build_builds_the_example_and_the_onceflow_it_nests(tmp_path: Path) -> None:
    # GIVEN the example's source
    build = tmp_path / "build"
    # WHEN sam build runs in it (onceflow's packages as `make build` builds them)
    result = _sam("build", "--build-dir", str(build), "--no-cached", BUILD_PYTHON=sys.executable)
    # THEN the example's function is built
    assert result.returncode == 0, result.stdout + result.stderr
    assert (build / "WordCountFunction" / "word_count.py").is_file()
    # AND the built template nests the built onceflow, whose functions are built too
    built = yaml_parse((build / "template.yaml").read_text("utf-8"))
    nested = build / built["Resources"]["Onceflow"]["Properties"]["Location"]
    assert nested.is_file()
    for function in ("ProcessorFunction", "AuditFunction"):
        code = yaml_parse(nested.read_text("utf-8"))["Resources"][function]["Properties"]
        package = nested.parent / code["CodeUri"]
        assert (package / "service" / "contract.py").is_file(), function
        assert (package / "aws_lambda_powertools").is_dir(), function


def test_sam_package_uploads_onceflow_as_the_nested_stacks_template() -> None:
    # GIVEN the example packaged as `sam package` does it (uploads replaced)
    s3 = FakeS3Uploader()
    uploaders = Uploaders(s3, None)  # type: ignore[arg-type]  # no image functions
    exporter = Template("template.yaml", str(EXAMPLE), uploaders, code_signer=NoSigning())
    packaged = exporter.export()
    # THEN the application names onceflow's template, packaged in turn, by its S3 URL
    location = packaged["Resources"]["Onceflow"]["Properties"]["Location"]
    assert location.startswith(f"https://s3.amazonaws.com/{BUCKET}/")
    assert location.endswith(".template")
    # AND onceflow's own artifacts went up with it (its definitions, its readme)
    for artifact in ("statemachines/processor.asl.json", "statemachines/audit.asl.json"):
        assert str(ROOT / artifact) in s3.uploaded, artifact
    assert str(ROOT / "README.md") in s3.uploaded
    # AND the example's code is in S3 too
    code = packaged["Resources"]["WordCountFunction"]["Properties"]["CodeUri"]
    assert code.startswith(f"s3://{BUCKET}/")
    # AND SAM's translator turns the application into the nested stack CloudFormation
    # creates, with the parameters the example passes
    translated = translate_template(yaml_parse(yaml_dump(packaged)))
    stack = translated["Resources"]["Onceflow"]
    assert stack["Type"] == "AWS::CloudFormation::Stack"
    assert stack["Properties"]["TemplateURL"] == location
    assert stack["Properties"]["Parameters"]["ProcessorFunctionArn"] == {
        "Fn::GetAtt": ["WordCountFunction", "Arn"]
    }
