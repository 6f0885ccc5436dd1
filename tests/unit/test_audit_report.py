"""The audit's report reads the Map Run's exported results a child at a time (P11 item 5).

S3's answers come from a botocore Stubber; the memory the report takes is measured with
tracemalloc while it reads a result file of several megabytes.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from typing import Any

import boto3
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from service.dal.workflow import Reports
from service.settings import AuditSettings
from service.usecases import audit

SETTINGS = AuditSettings(
    ingest_bucket="in",
    ledger_table="ledger",
    open_work_index="OpenWork",
    processor_arn="arn:aws:states:us-east-1:123456789012:stateMachine:processor",
    dead_letter_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/dlq",
    report_bucket="out",
    report_prefix="reports/audit/",
    max_attempts=3,
    recent_cutoff_seconds=0,
    retention_seconds=30 * 86400,
    stuck_margin_seconds=0,
)
CHILDREN = 8000


def _s3() -> Any:
    return boto3.client(
        "s3",
        region_name="us-east-1",  # type: ignore[call-overload]
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # a stub: nothing is sent
    )


def _body(data: bytes) -> dict[str, Any]:
    return {"Body": StreamingBody(io.BytesIO(data), len(data))}


def _results() -> bytes:
    """One exported result file of CHILDREN succeeded batches, about 1 KB each."""
    output = {"counts": {"scanned": 1000, "ok": 999, "missing_resubmitted": 1}, "pad": "x" * 900}
    children = [
        {"ExecutionArn": f"arn:child:{n}", "Status": "SUCCEEDED", "Output": json.dumps(output)}
        for n in range(CHILDREN)
    ]
    return json.dumps(children).encode()


def test_the_report_sums_a_large_map_run_without_holding_its_results() -> None:
    s3 = _s3()
    clients = audit.Clients.__new__(audit.Clients)
    clients.reports = Reports("out", s3)
    results = _results()
    manifest = {"ResultFiles": {"SUCCEEDED": [{"Key": "run/SUCCEEDED_0.json", "Size": 1}]}}
    with Stubber(s3) as stub:
        # GIVEN the Map Run's manifest and its one result file of several megabytes
        stub.add_response(
            "get_object",
            _body(json.dumps(manifest).encode()),
            {"Bucket": "out", "Key": "run/manifest.json"},
        )
        stub.add_response(
            "get_object", _body(results), {"Bucket": "out", "Key": "run/SUCCEEDED_0.json"}
        )
        stub.add_response(
            "put_object", {}, {"Bucket": "out", "Key": ANY, "Body": ANY, "ContentType": ANY}
        )
        # WHEN the report sums it
        tracemalloc.start()
        try:
            report = audit.report(
                SETTINGS,
                clients,
                audit_id="audit-1",
                started_at_ms=1_800_000_000_000,
                objects={"results": {"Bucket": "out", "Key": "run/manifest.json"}},
                locks={},
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        stub.assert_no_pending_responses()
    # THEN every batch is counted
    assert report["batches"] == CHILDREN
    assert report["scanned"] == 1000 * CHILDREN and report["missing_resubmitted"] == CHILDREN
    # AND it never held the file: a copy of it, decoded or parsed, would be larger than this
    assert peak < len(results) / 3, (peak, len(results))
