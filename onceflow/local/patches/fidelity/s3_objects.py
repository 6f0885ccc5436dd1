"""S3 objects answer as AWS answers them: encrypted by default, with their checksum's type."""

from __future__ import annotations

from typing import Any

from botocore.client import ClientMeta
from botocore.config import Config
from moto.s3 import models as s3_models
from moto.s3 import responses as s3_responses
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_aws_sdk as aws_sdk,
)

from onceflow.local.patches.registry import Installer, Patch, gone, lacks, takes

_Backend, _Response = s3_models.S3Backend, s3_responses.S3Response
_NO_CHECKSUM_MODE = Config(response_checksum_validation="when_required")


def _install(installer: Installer) -> None:
    def put_object(self: Any, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
        # moto left an object put without encryption, in a bucket without its own, plain
        if not kwargs.get("encryption") and not self.get_bucket(bucket_name).encryption:
            kwargs["encryption"] = "AES256"
        return put(self, bucket_name, key_name, *args, **kwargs)

    def put_object_answer(self: Any) -> Any:
        status, headers, body = answer(self)
        if any(h.startswith("x-amz-checksum-") for h in headers):  # moto: no type
            headers.setdefault("x-amz-checksum-type", "FULL_OBJECT")
        return status, headers, body

    def boto_client_for(region: str, service: str, *args: Any, **kwargs: Any) -> Any:
        client = client_for(region, service, *args, **kwargs)
        meta: Any = client.meta
        if service == "s3":  # botocore asks for the checksum unless told not to
            meta._client_config = meta.config.merge(_NO_CHECKSUM_MODE)
        return client

    put = installer.replace(_Backend, "put_object", put_object)
    answer = installer.replace(_Response, "put_object", put_object_answer)
    # the speed-ups' cached client, if installed
    client_for = installer.replace(aws_sdk, "boto_client_for", boto_client_for)


def _fits() -> list[str]:
    return [
        *takes(_Backend.put_object, "self", "bucket_name", "key_name"),
        *lacks(_Backend.put_object, "encryption=encryption", "bucket.encryption"),
        *lacks(_Response.put_object, "self._get_checksum(response_headers)", "return 200,"),
        *gone(aws_sdk, "boto_client_for"),
        *lacks(ClientMeta, "self._client_config = client_config"),
    ]


PATCHES = (
    Patch(
        name="S3 objects encrypted by default, with their checksum type",
        kind="fidelity",
        why="SSE-S3 is every bucket's base level of encryption: \"all new object uploads "
        'to Amazon S3 are automatically encrypted" (S3 User Guide, '
        "UsingServerSideEncryption.html, since January 5, 2023): PutObject, GetObject and "
        "HeadObject answer ServerSideEncryption AES256; a PutObject sent with a checksum "
        "answers ChecksumType FULL_OBJECT; Step Functions' aws-sdk:s3:getObject asks for no "
        "checksum (no ChecksumMode) and answers none (recorded 2025-11-06: LocalStack's "
        "test_aws_sdk_task_service snapshot, tests/aws/services/stepfunctions/v2/services/, "
        "test_s3_put_object[str, dict, list, bool, num], test_s3_get_object[empty_str, str, "
        "empty_binary, binary, bytearray]). moto answered no encryption, no ChecksumType, and "
        "its Step Functions client asked for the checksum.",
        test="tests/upstream/test_stock_moto.py::test_an_s3_object_is_encrypted_by_default",
        install=_install,
        fits=_fits,
    ),
)
