"""S3 answers as AWS answers: objects encrypted by default, with their checksum's type,
every response with S3's two request ids, listings URL-encoded when asked."""

from __future__ import annotations

import base64
import os
from typing import Any
from urllib.parse import quote

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
# What S3 URL-encodes when asked, as botocore decodes it (handlers.py, decode_list_object_*):
# the answer's fields, and its lists' fields; ListObjectsV2's keys, prefixes moto encodes.
_ENCODED = {
    "ListObjectVersions": (
        ("KeyMarker", "NextKeyMarker", "Prefix", "Delimiter"),
        (("Versions", "Key"), ("DeleteMarkers", "Key"), ("CommonPrefixes", "Prefix")),
    ),
    "ListObjectsV2": (("StartAfter", "Delimiter"), ()),
}


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

    def send_response(cls: Any, response: Any) -> Any:
        status, headers, body = send(response)
        # moto: the JSON services' x-amzn-requestid, which botocore reads as RequestId alone
        headers["x-amz-request-id"] = (
            headers.pop("x-amzn-requestid", None) or os.urandom(8).hex().upper()
        )
        headers["x-amz-id-2"] = base64.b64encode(os.urandom(48)).decode()
        return status, headers, body

    put = installer.replace(_Backend, "put_object", put_object)
    send = installer.replace(_Response, "_send_response", classmethod(send_response))
    answer = installer.replace(_Response, "put_object", put_object_answer)
    # the speed-ups' cached client, if installed
    client_for = installer.replace(aws_sdk, "boto_client_for", boto_client_for)


def _fits() -> list[str]:
    return [
        *takes(_Backend.put_object, "self", "bucket_name", "key_name"),
        *lacks(_Backend.put_object, "encryption=encryption", "bucket.encryption"),
        *lacks(_Response.put_object, "self._get_checksum(response_headers)", "return 200,"),
        *gone(aws_sdk, "boto_client_for"),
        *lacks(_Response._send_response, "cls._enrich_response(headers, body)"),
        *lacks(ClientMeta, "self._client_config = client_config"),
    ]


def _install_encoding(installer: Installer) -> None:
    def serialized(self: Any, action_result: Any) -> Any:
        fields = _ENCODED.get(self.data.get("Action"))
        answer = action_result.result
        url = self.querystring.get("encoding-type", [None])[0] == "url"
        if fields is not None and url and isinstance(answer, dict):
            top, lists = fields
            for name in (n for n in top if answer.get(n)):
                answer[name] = quote(answer[name])
            for group, name in lists:
                for member in answer.get(group) or ():
                    member[name] = quote(member[name])
            answer["EncodingType"] = "url"
        return serialize(self, action_result)

    serialize = installer.replace(_Response, "serialized", serialized)


def _encoding_fits() -> list[str]:
    return [
        *takes(_Response.serialized, "self", "action_result"),
        *lacks(_Response.list_object_versions, '"Key": key.name', '"ListObjectVersions"'),
        *lacks(_Response.list_objects_v2, '"StartAfter"] = start_after', '"ListObjectsV2"'),
        *lacks(_Response.list_objects_v2, '"Key": key.safe_name(encoding_type)'),
    ]


PATCHES = (
    Patch(
        name="S3 objects encrypted by default, with their checksum type and request ids",
        kind="fidelity",
        why="SSE-S3 is every bucket's base level of encryption: \"all new object uploads "
        'to Amazon S3 are automatically encrypted" (S3 User Guide, '
        "UsingServerSideEncryption.html, since January 5, 2023): PutObject, GetObject and "
        "HeadObject answer ServerSideEncryption AES256; a PutObject sent with a checksum "
        "answers ChecksumType FULL_OBJECT; Step Functions' aws-sdk:s3:getObject asks for no "
        "checksum (no ChecksumMode) and answers none (recorded 2025-11-06: LocalStack's "
        "test_aws_sdk_task_service snapshot, tests/aws/services/stepfunctions/v2/services/, "
        "test_s3_put_object[str, dict, list, bool, num], test_s3_get_object[empty_str, str, "
        "empty_binary, binary, bytearray]). Every S3 response carries x-amz-request-id and "
        "x-amz-id-2 (S3 API reference, Common Response Headers), so an aws-sdk task's S3 error "
        "names both: '(Service: S3, Status Code: 404, Request ID: ..., Extended Request ID: "
        "...)' (recorded: LocalStack's test_aws_sdk snapshot, test_s3_no_such_key, "
        "test_no_such_bucket). moto answered no encryption, no ChecksumType, its Step "
        "Functions client asked for the checksum, and it sent x-amzn-requestid alone.",
        test="tests/upstream/test_stock_moto.py::test_an_s3_object_is_encrypted_by_default",
        install=_install,
        fits=_fits,
    ),
    Patch(
        name="S3 listings URL-encoded when asked",
        kind="fidelity",
        why="Asked for EncodingType=url, which botocore sends with every ListObjectVersions "
        "and ListObjectsV2 and decodes (botocore handlers.py, set_list_objects_encoding_type_"
        "url, decode_list_object_versions, decode_list_object_v2), S3 answers every key, "
        "marker, prefix, delimiter and StartAfter URL-encoded, with EncodingType url (S3 API "
        "reference, ListObjectVersions and ListObjectsV2: EncodingType, 'characters with an "
        "ASCII value from 0 to 10' that XML 1.0 cannot hold). moto ignored it in "
        "ListObjectVersions and answered a 500 for a key holding one (ctl\\x01.png), and in "
        "ListObjectsV2 sent StartAfter and Delimiter unencoded, which botocore decoded "
        "('a%2B' came back 'a+').",
        test="tests/unit/test_patches.py::test_listings_url_encode_what_xml_cannot_hold_as_s3_does",
        install=_install_encoding,
        fits=_encoding_fits,
    ),
)
