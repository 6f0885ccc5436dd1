"""The audit's writes outside the ledger ask exactly these requests, and map the answers.

Step Functions (StartExecution, DescribeExecution), SQS (SendMessage) and S3
(the report, the Map Run's exported results), each request asserted whole with
a botocore Stubber.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from service.dal.workflow import (
    DeadLetters,
    Processor,
    Reports,
    StartRefused,
    compact_json,
    json_values,
)
from service.errors import PermanentError, TransientError

PROCESSOR = "arn:aws:states:us-east-1:123456789012:stateMachine:processor"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:processor:first"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/dlq"
ITEM = {"workItem": {"source": "audit", "idempotencyKey": "s3://in/a.png#v1"}}
COMPACT_ITEM = '{"workItem":{"source":"audit","idempotencyKey":"s3://in/a.png#v1"}}'


def _client(service: str) -> Any:
    return boto3.client(
        service,
        region_name="us-east-1",  # type: ignore[call-overload]
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # a stub: nothing is sent
    )


def _body(text: str) -> dict[str, Any]:
    data = text.encode()
    return {"Body": StreamingBody(io.BytesIO(data), len(data))}


# ---- Processor ----------------------------------------------------------------------


def test_a_start_names_the_execution_and_a_second_start_of_the_name_is_not_sent() -> None:
    sfn = _client("stepfunctions")
    processor = Processor(PROCESSOR, sfn)
    with Stubber(sfn) as stub:
        # GIVEN Step Functions starts the named execution
        stub.add_response(
            "start_execution",
            {"executionArn": EXECUTION, "startDate": "2026-01-01T00:00:00Z"},
            {"stateMachineArn": PROCESSOR, "name": "audit-1-abc", "input": COMPACT_ITEM},
        )
        # WHEN the audit starts it twice
        # THEN one StartExecution is sent, and only the first start counts
        assert processor.start("audit-1-abc", ITEM) is True
        assert processor.start("audit-1-abc", ITEM) is False
        stub.assert_no_pending_responses()


def test_a_name_that_ran_before_is_not_started_again() -> None:
    sfn = _client("stepfunctions")
    processor = Processor(PROCESSOR, sfn)
    with Stubber(sfn) as stub:
        # GIVEN an execution of that name ran before (another sandbox's start, a retried page)
        stub.add_client_error("start_execution", "ExecutionAlreadyExists", http_status_code=400)
        # WHEN the audit starts it THEN that is no error: it was started, not by this call
        assert processor.start("audit-1-abc", ITEM) is False
        stub.assert_no_pending_responses()


def test_a_name_the_rows_claims_hold_is_not_started_again() -> None:
    sfn = _client("stepfunctions")
    processor = Processor(PROCESSOR, sfn)
    machine = "arn:aws:states:us-east-1:123456789012:express:onceflow-processor"
    with Stubber(sfn) as stub:
        # GIVEN a row an EXPRESS execution of the name claimed (EXPRESS runs a repeated name
        # again: express-at-least-once-execution.html), and one of another name
        claims = [f"{machine}:audit-0-xyz:7f1c", f"{machine}:audit-1-abc:5e2a"]
        stub.add_response(
            "start_execution",
            {"executionArn": EXECUTION, "startDate": "2026-01-01T00:00:00Z"},
            {"stateMachineArn": PROCESSOR, "name": "audit-2-def", "input": COMPACT_ITEM},
        )
        # WHEN the audit starts the name, THEN no StartExecution is sent: the name ran
        assert processor.start("audit-1-abc", ITEM, claims) is False
        # AND a name the claims do not hold is started
        assert processor.start("audit-2-def", ITEM, claims) is True
        stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("ThrottlingException", 400, TransientError),
        ("ExecutionLimitExceeded", 400, PermanentError),
        ("AccessDeniedException", 400, PermanentError),
        ("StateMachineDoesNotExist", 400, PermanentError),
    ],
)
def test_a_refused_start_is_transient_only_when_throttled(
    code: str, status: int, error: type[Exception]
) -> None:
    sfn = _client("stepfunctions")
    with Stubber(sfn) as stub:
        # GIVEN Step Functions refuses the start
        stub.add_client_error("start_execution", code, http_status_code=status)
        # WHEN the audit starts it THEN the error is named after the refusal
        with pytest.raises(error, match=code) as raised:
            Processor(PROCESSOR, sfn).start("audit-1-abc", ITEM)
    assert type(raised.value) is error


def test_the_original_input_is_described_and_gone_executions_have_none() -> None:
    sfn = _client("stepfunctions")
    processor = Processor(PROCESSOR, sfn)
    original = {"source": "aws.s3", "detail": {"object": {"key": "a.png"}}}
    with Stubber(sfn) as stub:
        # GIVEN one execution Step Functions still has, and one it no longer does
        stub.add_response(
            "describe_execution",
            {
                "executionArn": EXECUTION,
                "stateMachineArn": PROCESSOR,
                "status": "FAILED",
                "startDate": "2026-01-01T00:00:00Z",
                "input": json.dumps(original),
            },
            {"executionArn": EXECUTION},
        )
        stub.add_client_error("describe_execution", "ExecutionDoesNotExist", http_status_code=400)
        stub.add_client_error("describe_execution", "ThrottlingException", http_status_code=400)
        # WHEN the audit asks for their inputs
        # THEN the first is its input, the second None (STANDARD keeps 90 days, EXPRESS none)
        assert processor.execution_input(EXECUTION) == original
        assert processor.execution_input(EXECUTION) is None
        # AND a throttled describe is no answer: it is retried
        with pytest.raises(TransientError, match="ThrottlingException"):
            processor.execution_input(EXECUTION)
        stub.assert_no_pending_responses()


# ---- DeadLetters ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("ThrottlingException", 400, TransientError),
        ("InternalError", 500, TransientError),
        ("AccessDenied", 403, PermanentError),
        ("KmsAccessDenied", 400, PermanentError),
    ],
)
def test_a_refused_dead_letter_is_transient_only_when_it_may_pass(
    code: str, status: int, error: type[Exception]
) -> None:
    sqs = _client("sqs")
    with Stubber(sqs) as stub:
        # GIVEN SQS refuses the message
        stub.add_client_error("send_message", code, http_status_code=status)
        # WHEN the audit dead-letters a row THEN the error says whether a retry may pass
        with pytest.raises(error, match=code) as raised:
            DeadLetters(QUEUE, sqs).send({"event": None}, {"ERROR_CODE": "LockExpired"})
    assert type(raised.value) is error


# ---- Reports --------------------------------------------------------------------------


def test_the_report_is_written_as_indented_json() -> None:
    s3 = _client("s3")
    report = {"scanned": 2, "audit": "audit-1"}
    with Stubber(s3) as stub:
        # GIVEN the report bucket takes the object
        stub.add_response(
            "put_object",
            {"ETag": '"e"'},
            {
                "Bucket": "out",
                "Key": "reports/audit/2026-01-01.json",
                "Body": json.dumps(report, indent=2).encode(),
                "ContentType": "application/json",
            },
        )
        # WHEN the audit writes it THEN it names where
        where = Reports("out", s3).put("reports/audit/2026-01-01.json", report)
        stub.assert_no_pending_responses()
    assert where == "s3://out/reports/audit/2026-01-01.json"


def test_the_watermark_is_read_bounded_and_a_missing_one_is_none() -> None:
    s3 = _client("s3")
    key = {"Bucket": "out", "Key": "reports/audit/watermark.json"}
    body = json.dumps({"versionedUntil": 5}).encode()
    huge = io.BytesIO(b"x" * 100_000)
    with Stubber(s3) as stub:
        # GIVEN the watermark, an object far larger than any watermark, no watermark
        # (NoSuchKey: the function may list the bucket), then a refusal
        stub.add_response("get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))}, key)
        stub.add_response("get_object", {"Body": StreamingBody(huge, 100_000)}, key)
        stub.add_client_error("get_object", "NoSuchKey", http_status_code=404, expected_params=key)
        stub.add_client_error(
            "get_object", "AccessDenied", http_status_code=403, expected_params=key
        )
        reports = Reports("out", s3)
        # WHEN the audit reads it THEN it has the bytes; of the large one no more than one
        # byte past the limit (never the whole object); then None; then a failure
        assert reports.read_bytes(key["Key"], 4096) == body
        assert reports.read_bytes(key["Key"], 4096) == b"x" * 4097
        assert huge.closed  # the rest is never read: the stream is closed
        assert reports.read_bytes(key["Key"], 4096) is None
        with pytest.raises(PermanentError, match="AccessDenied"):
            reports.read_bytes(key["Key"], 4096)
        stub.assert_no_pending_responses()


def test_the_map_runs_manifest_is_found_across_pages() -> None:
    s3 = _client("s3")
    prefix = "reports/audit-runs/audit-1/"
    with Stubber(s3) as stub:
        # GIVEN a listing whose manifest is on its second page
        stub.add_response(
            "list_objects_v2",
            {
                "Contents": [{"Key": f"{prefix}run/SUCCEEDED_0.json"}],
                "IsTruncated": True,
                "NextContinuationToken": "t1",
            },
            {"Bucket": "out", "Prefix": prefix},
        )
        stub.add_response(
            "list_objects_v2",
            {"Contents": [{"Key": f"{prefix}run/manifest.json"}], "IsTruncated": False},
            {"Bucket": "out", "Prefix": prefix, "ContinuationToken": "t1"},
        )
        # WHEN the report looks for it THEN it is found
        assert Reports("out", s3).find_manifest(prefix) == f"{prefix}run/manifest.json"
        stub.assert_no_pending_responses()


def test_the_map_runs_results_are_read_from_its_manifest_and_files() -> None:
    s3 = _client("s3")
    manifest = {
        "ResultFiles": {
            "SUCCEEDED": [{"Key": "run/SUCCEEDED_0.json", "Size": 1}],
            "FAILED": [{"Key": "run/FAILED_0.json", "Size": 1}],
            "PENDING": [],
        }
    }
    succeeded = [{"ExecutionArn": "arn:c1", "Status": "SUCCEEDED", "Output": '{"counts": {}}'}]
    failed = [{"ExecutionArn": "arn:c2", "Status": "FAILED", "Input": '{"Items": [1, 2]}'}]
    with Stubber(s3) as stub:
        # GIVEN the manifest and the two result files the ResultWriter exported
        for key, text in (
            ("run/manifest.json", json.dumps(manifest)),
            ("run/SUCCEEDED_0.json", json.dumps(succeeded)),
            ("run/FAILED_0.json", json.dumps(failed)),
        ):
            stub.add_response("get_object", _body(text), {"Bucket": "out", "Key": key})
        # WHEN the report reads them
        results = list(Reports("out", s3).map_run_entries("out", "run/manifest.json"))
        stub.assert_no_pending_responses()
    # THEN a succeeded child's output is parsed, a failed child's result kept whole
    assert results == [("SUCCEEDED", {"counts": {}}), ("FAILED", {"Status": "FAILED", **failed[0]})]


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [("SlowDown", 503, TransientError), ("AccessDenied", 403, PermanentError)],
)
def test_a_refused_report_call_is_transient_only_when_it_may_pass(
    code: str, status: int, error: type[Exception]
) -> None:
    s3 = _client("s3")
    reports = Reports("out", s3)
    with Stubber(s3) as stub:
        # GIVEN S3 refuses each of the report's calls
        for operation in ("put_object", "list_objects_v2", "get_object"):
            stub.add_client_error(operation, code, http_status_code=status)
        # WHEN the report writes, lists and reads THEN each error is named after the refusal
        for call in (
            lambda: reports.put("k.json", {}),
            lambda: reports.find_manifest("p/"),
            lambda: list(reports.map_run_entries("out", "m.json")),
        ):
            with pytest.raises(error, match=code) as raised:
                call()
            assert type(raised.value) is error


# ---- the input as it was (P11 item 4) ----------------------------------------------------


def test_a_start_sends_the_input_as_compact_utf8_json() -> None:
    sfn = _client("stepfunctions")
    # GIVEN an input with accented letters, an emoji, and a lone surrogate no UTF-8 holds
    execution_input = {"detail": {"note": "é😀", "odd": "\ud800"}}
    with Stubber(sfn) as stub:
        # THEN StartExecution gets it compact, each character as its UTF-8 (4 bytes for the
        # emoji, not json.dumps' 12), only the surrogate escaped
        stub.add_response(
            "start_execution",
            {"executionArn": EXECUTION, "startDate": "2026-01-01T00:00:00Z"},
            {
                "stateMachineArn": PROCESSOR,
                "name": "audit-1-abc",
                "input": '{"detail":{"note":"é😀","odd":"\\ud800"}}',
            },
        )
        # WHEN the audit starts it
        assert Processor(PROCESSOR, sfn).start("audit-1-abc", execution_input) is True
        stub.assert_no_pending_responses()
    assert compact_json({"a": "é" * 55_000}).encode() == b'{"a":"' + "é".encode() * 55_000 + b'"}'


@pytest.mark.parametrize("code", ["ValidationException", "InvalidExecutionInput"])
def test_a_start_refused_for_its_input_says_so(code: str) -> None:
    sfn = _client("stepfunctions")
    with Stubber(sfn) as stub:
        # GIVEN Step Functions refuses the input itself
        stub.add_client_error(
            "start_execution", code, "Member must have length <= 262144", http_status_code=400
        )
        # WHEN the audit starts it THEN the refusal is named, with its code and message
        with pytest.raises(StartRefused) as raised:
            Processor(PROCESSOR, sfn).start("audit-1-abc", ITEM)
    assert raised.value.code == code
    assert raised.value.reason == "Member must have length <= 262144"
    assert isinstance(raised.value, PermanentError)


def test_a_dead_letter_is_sent_as_compact_utf8_json() -> None:
    sqs = _client("sqs")
    with Stubber(sqs) as stub:
        # THEN SQS gets the body in UTF-8 as it is, U+FFFF (which SQS refuses) escaped
        stub.add_response(
            "send_message",
            {"MessageId": "m-1"},
            {
                "QueueUrl": QUEUE,
                "MessageBody": '{"event":{"note":"é\\uffff"}}',
                "MessageAttributes": {},
            },
        )
        # WHEN the audit dead-letters an event with both
        DeadLetters(QUEUE, sqs).send({"event": {"note": "é\uffff"}}, {})
        stub.assert_no_pending_responses()


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 20])
@pytest.mark.parametrize(
    "text",
    ["[]", "", '[{"a":"é😀"},{"b":[1,2]}]', ' [ 12345 , {"c": "]"} ] ', '{"a":1}\n{"b":2}\n'],
)
def test_result_files_are_read_value_by_value_in_any_chunk_size(text: str, chunk: int) -> None:
    # GIVEN a result file (a JSON array, or JSON lines) read a few bytes at a time
    body = io.BytesIO(text.encode())
    # WHEN its values are read
    values = list(json_values(body, chunk))
    # THEN they are the file's, whichever way a chunk cuts a character or a number
    if text.lstrip().startswith("["):
        assert values == json.loads(text)
    else:
        assert values == [json.loads(line) for line in text.splitlines()]
