"""S3 objects answer as AWS answers them: encrypted by default, with their checksum's type.

"Amazon S3 now applies server-side encryption with Amazon S3 managed keys (SSE-S3) as the
base level of encryption for every bucket ... all new object uploads to Amazon S3 are
automatically encrypted" (S3 User Guide, UsingServerSideEncryption.html, since January 5,
2023): PutObject, GetObject and HeadObject answer ServerSideEncryption AES256. A PutObject
sent with a checksum answers its ChecksumType, FULL_OBJECT. Step Functions'
aws-sdk:s3:getObject does not ask for the checksum (no ChecksumMode): its result has none.
Recorded: LocalStack's test_aws_sdk_task_service snapshot (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/services/), test_s3_put_object[str, dict, list, bool,
num] and test_s3_get_object[empty_str, str, empty_binary, binary, bytearray], 2025-11-06.
"""

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
    put, answer = _Backend.put_object, _Response.put_object
    client_for = vars(aws_sdk)["boto_client_for"]  # the speed-ups' cached one, if installed

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

    installer.replace(_Backend, "put_object", put_object)
    installer.replace(_Response, "put_object", put_object_answer)
    installer.replace(aws_sdk, "boto_client_for", boto_client_for)


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
        why="Every new S3 object is encrypted with SSE-S3 unless told otherwise: PutObject, "
        "GetObject and HeadObject answer ServerSideEncryption AES256 (S3 User Guide, "
        "UsingServerSideEncryption.html, since January 2023); a PutObject with a checksum "
        "answers ChecksumType FULL_OBJECT; Step Functions' aws-sdk:s3:getObject answers no "
        "checksum (recorded: test_s3_put_object[*], test_s3_get_object[*]). moto answered no "
        "encryption, no ChecksumType, and its Step Functions client asked for the checksum.",
        test="tests/upstream/test_stock_moto.py::test_an_s3_object_is_encrypted_by_default",
        install=_install,
        fits=_fits,
    ),
)
