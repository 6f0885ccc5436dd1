"""template.yaml as CloudFormation receives it: translated by the SAM transform."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import boto3
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@functools.cache
def _sam_template() -> dict[str, Any]:
    template: dict[str, Any] = yaml_parse(TEMPLATE.read_text(encoding="utf-8"))
    # The transform takes S3 locations only; sam package puts the local code there.
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "DefinitionUri"):
            if isinstance(properties.get(key), str):
                properties[key] = {"Bucket": "bucket", "Key": properties[key]}
    return template


def translated(parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The CloudFormation template the SAM transform makes of template.yaml."""
    return translate_template(copy.deepcopy(_sam_template()), parameters)


def translate_template(
    template: dict[str, Any], parameters: dict[str, str] | None = None
) -> dict[str, Any]:
    """The CloudFormation template the SAM transform makes of a SAM template (changed)."""
    translator = Translator(
        None, Parser(), boto_session=boto3.session.Session(region_name="us-east-1")
    )
    result: dict[str, Any] = translator.translate(
        template,
        parameter_values=dict(parameters or {}),
        # Every policy is written out in the template: no managed policy name to look up.
        get_managed_policy_map=dict,
    )
    return result


def resources_of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


# Which IAM action each ASL service integration of the state machines needs.
INTEGRATION_ACTIONS = {
    "arn:aws:states:::dynamodb:putItem": ("dynamodb:PutItem", "TableName"),
    "arn:aws:states:::dynamodb:updateItem": ("dynamodb:UpdateItem", "TableName"),
    "arn:aws:states:::dynamodb:getItem": ("dynamodb:GetItem", "TableName"),
    "arn:aws:states:::sqs:sendMessage": ("sqs:SendMessage", "QueueUrl"),
    "arn:aws:states:::aws-sdk:sqs:deleteMessage": ("sqs:DeleteMessage", "QueueUrl"),
    "arn:aws:states:::lambda:invoke": ("lambda:InvokeFunction", "FunctionName"),
}


def tasks(definition: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Task state, those inside Map and Parallel states included."""
    found = []
    for state in definition["States"].values():
        if state["Type"] == "Task":
            found.append(state)
        for nested in [state.get("ItemProcessor"), *state.get("Branches", [])]:
            if nested:
                found += tasks(nested)
    return found


# ---- `sam package`, offline --------------------------------------------------------

PACKAGING_BUCKET = "packaging-bucket"


class FakeS3Uploader:
    """What `sam package` would upload, for SAM CLI's own exporter: each local artifact
    to s3://PACKAGING_BUCKET/<name>, recorded, with no network."""

    bucket_name = PACKAGING_BUCKET
    prefix = None

    def __init__(self) -> None:
        self.uploaded: list[str] = []

    def upload_with_dedup(
        self, file_name: str, extension: str | None = None, precomputed_md5: str | None = None
    ) -> str:
        self.uploaded.append(file_name)
        return f"s3://{PACKAGING_BUCKET}/{Path(file_name).name}-{len(self.uploaded)}"

    def upload(self, file_name: str, remote_path: str) -> str:
        self.uploaded.append(file_name)
        return f"s3://{PACKAGING_BUCKET}/{remote_path}"

    def to_path_style_s3_url(self, key: str, version: str | None = None) -> str:
        return f"https://s3.amazonaws.com/{PACKAGING_BUCKET}/{key}"


class NoSigning:
    """No code signing configured, as `sam package` without --signing-profiles."""

    def should_sign_package(self, resource: str) -> bool:
        return False
