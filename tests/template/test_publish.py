"""The template is publishable: `sam package` then `sam publish` to the AWS Serverless
Application Repository (P10 item 4).

The metadata rules are those of the SAM guide's "AWS SAM template Metadata section
properties" (serverless-sam-template-publishing-applications-metadata-properties.html):
Name, Description and Author are required, with their lengths and patterns; no intrinsic
functions; LicenseUrl and ReadmeUrl are local files that `sam package` uploads, and must be
S3 references in what `sam publish` sends. Packaging and publishing run through SAM CLI's
own code (its artifact exporter and its vendored serverlessrepo publisher), with the S3
upload and the Serverless Application Repository client replaced, so no network is used.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import boto3
from botocore.stub import ANY, Stubber
from samcli.lib.package.artifact_exporter import Template
from samcli.lib.package.uploaders import Uploaders
from samcli.lib.utils.resources import AWS_SERVERLESSREPO_APPLICATION
from samcli.vendor.serverlessrepo import publish_application
from samcli.yamlhelper import yaml_dump, yaml_parse

from tests.template.translate import (
    PACKAGING_BUCKET,
    FakeS3Uploader,
    NoSigning,
    translate_template,
)

ROOT = Path(__file__).resolve().parents[2]
BUCKET = PACKAGING_BUCKET


def _metadata() -> dict[str, Any]:
    template = yaml_parse((ROOT / "template.yaml").read_text(encoding="utf-8"))
    metadata: dict[str, Any] = template["Metadata"][AWS_SERVERLESSREPO_APPLICATION]
    return metadata


def _packaged() -> tuple[dict[str, Any], FakeS3Uploader]:
    s3 = FakeS3Uploader()
    uploaders = Uploaders(s3, None)  # type: ignore[arg-type]  # no image functions
    exported = Template("template.yaml", str(ROOT), uploaders, code_signer=NoSigning()).export()
    return exported, s3


def test_the_metadata_is_complete_and_keeps_the_repositorys_rules() -> None:
    # GIVEN the template's AWS::ServerlessRepo::Application metadata
    meta = _metadata()
    # THEN the required properties are there, within their lengths and patterns
    assert re.fullmatch(r"[a-zA-Z0-9\-]+", meta["Name"]) and len(meta["Name"]) <= 140
    assert 1 <= len(meta["Description"]) <= 256
    assert re.fullmatch(r"^[a-z0-9](([a-z0-9]|-(?!-))*[a-z0-9])?$", meta["Author"])
    assert len(meta["Author"]) <= 127
    assert len(meta["Labels"]) <= 10
    assert all(re.fullmatch(r"^[a-zA-Z0-9+\-_:\/@]+$", label) for label in meta["Labels"])
    # AND the license is the project's, named by its SPDX id, in a file that exists
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["SpdxLicenseId"] == project["license"]["text"] == "Apache-2.0"
    assert "Apache License" in (ROOT / meta["LicenseUrl"]).read_text(encoding="utf-8")
    assert (ROOT / meta["ReadmeUrl"]).is_file()
    # AND the version is a semantic version, the package's own
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["SemanticVersion"])
    assert meta["SemanticVersion"] == project["version"]
    # AND no value is an intrinsic function (the metadata key does not support them)
    assert all(isinstance(v, (str, list)) for v in meta.values())
    assert not any(isinstance(v, str) and v.startswith("!") for v in meta.values())


def test_the_packaged_template_carries_s3_references_and_still_translates() -> None:
    # GIVEN the template packaged as `sam package` does it (uploads replaced)
    packaged, s3 = _packaged()
    meta = packaged["Metadata"][AWS_SERVERLESSREPO_APPLICATION]
    # THEN the license and the readme were uploaded and are S3 references now
    assert str(ROOT / "LICENSE") in s3.uploaded and str(ROOT / "README.md") in s3.uploaded
    assert meta["LicenseUrl"].startswith(f"s3://{BUCKET}/")
    assert meta["ReadmeUrl"].startswith(f"s3://{BUCKET}/")
    # AND every function's code and every definition is in S3, none left local
    resources = packaged["Resources"]
    for logical_id, resource in resources.items():
        props = resource.get("Properties", {})
        for key in ("CodeUri", "DefinitionUri"):
            if key in props:
                value = props[key]
                assert isinstance(value, dict) or str(value).startswith("s3://"), logical_id
    # AND SAM's translator turns the packaged form into CloudFormation
    translated = translate_template(yaml_parse(yaml_dump(packaged)))
    assert translated["Resources"]["ProcessorStateMachine"]["Type"] == (
        "AWS::StepFunctions::StateMachine"
    )
    assert "AWS::ServerlessRepo::Application" not in translated.get("Resources", {})


def test_sam_publish_sends_the_metadata_and_the_template_to_the_repository() -> None:
    # GIVEN the packaged template, and a repository client that expects one new
    # application with the template's metadata (SAR's CreateApplication)
    packaged, _ = _packaged()
    meta = _metadata()
    client = boto3.client("serverlessrepo", region_name="us-east-1")
    arn = "arn:aws:serverlessrepo:us-east-1:123456789012:applications/onceflow"
    sent: dict[str, Any] = {}

    def capture(params: dict[str, Any], **_: Any) -> None:
        sent.update(params)

    client.meta.events.register("provide-client-params.serverlessrepo.CreateApplication", capture)
    with Stubber(client) as stub:
        stub.add_response(
            "create_application",
            {"ApplicationId": arn},
            {
                "Author": meta["Author"],
                "Description": meta["Description"],
                "HomePageUrl": meta["HomePageUrl"],
                "Labels": meta["Labels"],
                "LicenseUrl": ANY,
                "Name": meta["Name"],
                "ReadmeUrl": ANY,
                "SemanticVersion": meta["SemanticVersion"],
                "SourceCodeUrl": meta["SourceCodeUrl"],
                "SpdxLicenseId": meta["SpdxLicenseId"],
                "TemplateBody": ANY,
            },
        )
        # WHEN SAM CLI's publisher publishes it
        result = publish_application(yaml_dump(packaged), sar_client=client)
        stub.assert_no_pending_responses()
    # THEN the application was created from S3 references and the packaged template,
    # without the metadata key (the publisher strips it)
    assert result["application_id"] == arn
    assert result["actions"] == ["CREATE_APPLICATION"]
    assert sent["LicenseUrl"].startswith(f"s3://{BUCKET}/")
    assert sent["ReadmeUrl"].startswith(f"s3://{BUCKET}/")
    body = yaml_parse(sent["TemplateBody"])
    assert AWS_SERVERLESSREPO_APPLICATION not in body.get("Metadata", {})
    assert body["Resources"].keys() == packaged["Resources"].keys()
