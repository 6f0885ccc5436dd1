"""The benchmark: its pricing arithmetic on fixed inputs, and the harness on a tiny run.

Timings are measured and reported, never asserted.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from onceflow.harness import bench
from onceflow.harness.bench import BaselineMeasure, IndexSpec, Model, PathMeasure, Usage

OPEN_WORK = IndexSpec("OpenWork", ("open_status", "lock_expires_at"), "ALL")
OBJECT_CONTENT = IndexSpec("ObjectContent", ("object_ref",), "INCLUDE", ("etag", "status"))
TABLE_KEYS = ("pk",)
MODEL = Model()  # the stated defaults: 200 ms of work, 10 ms a call, 5 ms an invocation


def claimed(**extra: Any) -> dict[str, Any]:
    return {
        "pk": {"S": "s3://bucket/uploads/cat.png#v1"},
        "status": {"S": "PROCESSING"},
        "open_status": {"S": "PROCESSING#a"},
        "lock_expires_at": {"N": "1795470276"},
        "lock_owner": {"S": "arn:aws:states:us-east-1:123456789012:execution:m:e"},
        **extra,
    }


def path_measure(**overrides: Any) -> PathMeasure:
    """A happy S3 path as the bench counts it (5 states, 2 writes, OpenWork in and out)."""
    values: dict[str, Any] = {
        "path": "happy",
        "source": "s3",
        "status": "SUCCEEDED",
        "states": ["Normalize", "Claim", "Process", "MarkComplete", "Processed"],
        "transitions": 5,
        "table_wru": 2,
        "index_wru": {"ObjectContent": 0, "OpenWork": 2},
        "conditional_failures": 0,
        "writes": 2,
        "rru": 0.0,
        "lambda_invocations": 1,
        "integration_calls": 2,
        "sqs_requests": {},
        "wait_seconds": 0.0,
        "sfn_log_events": {"ALL": ["x" * 374] * 20, "ERROR": []},
        "express_log_events": {"ALL": ["x" * 474] * 20, "ERROR": []},
        "function_log_lines": ["y" * 974],
        "data_bytes": 2_000,
        "parallel_steps": 0,
        "row_bytes": 982,
    }
    values.update(overrides)
    return PathMeasure(**values)


def measures() -> list[PathMeasure]:
    sqs = {"SendMessage": 1, "ReceiveMessage": 1, "DeleteMessage": 1}
    return [
        path_measure(),
        path_measure(
            path="duplicate", transitions=4, index_wru={}, conditional_failures=2,
            lambda_invocations=0, integration_calls=2, function_log_lines=[], new_row=False,
        ),
        path_measure(source="sqs", transitions=7, sqs_requests=sqs, parallel_steps=1),
        path_measure(
            source="sqs", path="duplicate", transitions=6, index_wru={},
            conditional_failures=2, lambda_invocations=0, function_log_lines=[],
            sqs_requests={"ReceiveMessage": 1, "DeleteMessage": 1}, parallel_steps=1,
            new_row=False,
        ),
        # One batch of 10 (the measures of one execution): 10 claims, calls, rows.
        path_measure(
            source="sqs-batch", transitions=0, table_wru=20, index_wru={"OpenWork": 20},
            writes=20, lambda_invocations=10, integration_calls=20, data_bytes=40_000,
            sqs_requests={"SendMessage": 10, "ReceiveMessage": 1, "DeleteMessage": 10},
            parallel_steps=11,
        ),
        path_measure(
            source="sqs-batch", path="duplicate", transitions=0, table_wru=20, index_wru={},
            writes=20, conditional_failures=20, rru=10.0, lambda_invocations=0,
            integration_calls=30, function_log_lines=[], parallel_steps=11, new_row=False,
            sqs_requests={"ReceiveMessage": 1, "DeleteMessage": 10},
        ),
    ]  # fmt: skip


def baseline_measures() -> list[BaselineMeasure]:
    return [
        BaselineMeasure("happy", 2.0, 0.0, 2.0, ["p" * 517], ["e" * 241], 231, did_work=True),
        BaselineMeasure("duplicate", 1.0, 0.0, 1.0, [], [], 231, did_work=False, new_row=False),
    ]


def audit() -> dict[str, dict[str, Any]]:
    return {level: {"s3": 1.9e-6, "sqs": 2e-9} for level in ("ALL", "ERROR")}


def test_item_size_follows_the_documented_rules() -> None:
    # GIVEN an item of each kind of attribute
    item = {
        "pk": {"S": "abc"},  # 2 + 3
        "n": {"N": "123.45"},  # 1 + (5 digits: 3) + 1
        "b": {"BOOL": True},  # 1 + 1
        "l": {"L": [{"S": "x"}, {"N": "1"}]},  # 1 + 3 + (1 + 1) + (1 + 2)
        "m": {"M": {"k": {"S": "vv"}}},  # 1 + 3 + (1 + 1 + 2)
    }
    # WHEN it is measured THEN names and values add up, with the List/Map overheads
    assert bench.item_size(item) == 5 + 5 + 2 + 9 + 8
    # and numbers count significant digits only
    assert [bench.number_size(n) for n in ("0.00100", "-1200", "100", "7")] == [2, 2, 2, 2]


def test_writes_are_charged_per_started_kb_and_failed_conditions_too() -> None:
    # GIVEN an existing row of 1,500 bytes and a smaller one a Claim tries to write
    existing = {"pk": {"S": "k"}, "blob": {"S": "x" * 1490}}
    attempted = {"pk": {"S": "k"}, "status": {"S": "PROCESSING"}}
    # WHEN the Claim's condition fails THEN it is charged the larger item: 2 units
    assert bench.table_write_units("PutItem", existing, None, attempted, failed=True) == 2
    # WHEN an update grows an item past 1 KB THEN the larger image counts
    small = {"pk": {"S": "k"}}
    assert bench.table_write_units("UpdateItem", small, existing, None, failed=False) == 2
    # WHEN a write fails on a missing item THEN it still costs the minimum
    assert bench.table_write_units("UpdateItem", None, None, None, failed=True) == 1
    assert bench.write_units(1024) == 1 and bench.write_units(1025) == 2
    # AND reads are per started 4 KB, halved when eventually consistent
    assert bench.read_units(4097) == 1.0 and bench.read_units(4097, consistent=True) == 2


def test_index_writes_of_the_ledger_paths() -> None:
    # GIVEN a Claim (the row enters OpenWork), then MarkComplete (it leaves)
    done = {k: v for k, v in claimed().items() if k != "open_status"} | {
        "status": {"S": "PROCESSED"}
    }
    # THEN each is one OpenWork write; a versioned upload never enters ObjectContent
    assert bench.index_write_units(None, claimed(), OPEN_WORK, TABLE_KEYS) == 1
    assert bench.index_write_units(claimed(), done, OPEN_WORK, TABLE_KEYS) == 1
    assert bench.index_write_units(None, claimed(), OBJECT_CONTENT, TABLE_KEYS) == 0
    # GIVEN an upload without a version id THEN it enters ObjectContent too
    unversioned = claimed(object_ref={"S": "s3://bucket/uploads/cat.png"})
    assert bench.index_write_units(None, unversioned, OBJECT_CONTENT, TABLE_KEYS) == 1
    # WHEN the index key changes (PROCESSING -> FAILED) THEN out and in: 2 writes
    failed = claimed(open_status={"S": "FAILED#a"})
    assert bench.index_write_units(claimed(), failed, OPEN_WORK, TABLE_KEYS) == 2
    # WHEN only a projected attribute changes THEN 1; one not projected THEN 0
    processed = unversioned | {"status": {"S": "PROCESSED"}}
    relocked = unversioned | {"lock_owner": {"S": "another"}}
    assert bench.index_write_units(unversioned, processed, OBJECT_CONTENT, TABLE_KEYS) == 1
    assert bench.index_write_units(unversioned, relocked, OBJECT_CONTENT, TABLE_KEYS) == 0


def test_the_bill_lists_every_component_and_sums_to_its_total() -> None:
    # GIVEN a usage of one unit of everything
    usage = Usage(**{name: 1.0 for name in Usage.__dataclass_fields__})
    # WHEN it is billed
    lines = bench.bill(usage)
    # THEN every component appears, every priced one is charged, and they sum up
    assert list(lines) == list(bench.COMPONENTS)
    free = {"EventBridge events (from S3)"}
    assert all(lines[name] > 0 for name in lines if name not in free)
    assert bench.total(lines) == pytest.approx(sum(lines.values()))
    # AND the arithmetic is the price list's: 5 transitions at $0.025 per 1,000
    assert bench.bill(Usage(transitions=5))["Step Functions transitions"] == pytest.approx(
        5 * 0.025 / 1000
    )
    assert bench.total(bench.bill(Usage(transitions=5))) == pytest.approx(0.000125)


def test_express_is_billed_in_100_ms_and_64_mb_steps() -> None:
    # GIVEN the happy path: two DynamoDB calls and a 205 ms invocation
    # THEN 225 ms is billed as 300 ms, and a 57 KB definition fits 64 MB
    assert bench.express_billed_seconds(0.225) == pytest.approx(0.3)
    assert bench.express_billed_seconds(0.3) == pytest.approx(0.3)
    assert bench.express_billed_seconds(0.0) == pytest.approx(0.1)
    assert bench.express_billed_gb(57_000, 2_000, 0) == pytest.approx(64 / 1024)
    # AND 20 MB of data in one Parallel step takes a second chunk (50 + 20 > 64 MB)
    assert bench.express_billed_gb(57_000, 20 * 1024 * 1024, 1) == pytest.approx(128 / 1024)


def test_xray_samples_the_first_request_each_second_and_five_percent() -> None:
    assert bench.xray_sampled_share(0.5) == 1.0
    assert bench.xray_sampled_share(1.0) == 1.0
    assert bench.xray_sampled_share(21.0) == pytest.approx(2 / 21)


def test_the_baseline_keeps_its_rows_past_the_seeds_longest_duplicate_gap() -> None:
    # GIVEN the baseline's happy path (231-byte idempotency rows)
    usage = bench.baseline_usage(baseline_measures()[0], MODEL)
    # THEN its expiry covers 22,162 s and its table holds that long of rows
    assert bench.BASELINE_EXPIRY_SECONDS >= bench.SEED_LONGEST_DUPLICATE_GAP_SECONDS
    held_months = bench.BASELINE_EXPIRY_SECONDS / 86_400 / bench.DAYS_PER_MONTH
    assert usage.stored_byte_months == pytest.approx((231 + 100) * held_months)
    assert bench.bill(usage)["DynamoDB storage"] > 0
    # AND one invocation per 10 messages; S3's send, and a receive and delete per batch
    assert usage.lambda_requests == pytest.approx(0.1)
    assert usage.sqs_requests == pytest.approx(1.2)
    # AND its invocation: 10 x (200 ms of work + 2 DynamoDB calls) + 5 ms, in 1 ms steps
    assert usage.lambda_gb_seconds == pytest.approx(2.205 / 10)


def test_every_mode_is_priced_with_its_ratio_to_the_baseline() -> None:
    # WHEN the fixed paths are priced
    rows = bench.price_modes(measures(), baseline_measures(), audit(), MODEL)
    # THEN every mode appears at both log levels, the unbuilt one without numbers
    names = [m.name for m in bench.MODES] + [bench.BASELINE.name]
    assert sorted((r["mode"], r["level"]) for r in rows) == sorted(
        (n, lvl) for n in names for lvl in ("ALL", "ERROR")
    )
    assert all(r["built"] for r in rows)
    for row in (r for r in rows if r["built"]):
        happy = row["components_per_million"]["happy"]
        assert list(happy) == list(bench.COMPONENTS)
        assert sum(happy.values()) == pytest.approx(row["usd_per_million"]["happy"])
    by = {(r["mode"], r["level"]): r for r in rows}
    assert by[(bench.BASELINE.name, "ALL")]["ratio_to_baseline"] == pytest.approx(1.0)
    # AND STANDARD pays 5 transitions a message, EXPRESS none but a request
    standard = by[("STANDARD, S3 via EventBridge", "ALL")]["components_per_million"]["happy"]
    express = by[("EXPRESS, S3 via EventBridge", "ALL")]["components_per_million"]["happy"]
    assert standard["Step Functions transitions"] == pytest.approx(125.0)
    assert express["Step Functions transitions"] == 0
    assert express["Step Functions EXPRESS requests"] == pytest.approx(1.0)
    # AND the index writes and the audit are on the bill
    assert standard["DynamoDB writes, indexes"] == pytest.approx(2 * 0.625)
    assert standard["Audit, amortised"] == pytest.approx(1.9)
    # AND a duplicate writes no row: it stores nothing, here or in the baseline
    for mode in ("EXPRESS, S3 via EventBridge", bench.BASELINE.name):
        duplicate = by[(mode, "ALL")]["components_per_million"]["duplicate"]
        assert duplicate["DynamoDB storage"] == 0 == duplicate["DynamoDB point-in-time recovery"]
        # and the audit, paid once per upload, is not paid again
        assert duplicate["Audit, amortised"] == 0
    # AND a batch of 10 shares its execution, not what each message pays alone
    batch = by[(bench.MODES[-1].name, "ALL")]["components_per_million"]["happy"]
    single = by[("EXPRESS, SQS via pipe", "ALL")]["components_per_million"]["happy"]
    assert batch["Step Functions EXPRESS requests"] == pytest.approx(0.1)
    assert batch["Lambda requests"] == pytest.approx(single["Lambda requests"])
    assert batch["DynamoDB writes, table"] == pytest.approx(single["DynamoDB writes, table"])
    assert batch["DynamoDB storage"] == pytest.approx(single["DynamoDB storage"])
    assert batch["EventBridge Pipes requests"] == pytest.approx(0.4)  # per event
    assert batch["SQS requests"] == pytest.approx((10 + 1 + 10) / 10 * 0.4)
    # AND at ERROR the happy path logs nothing from the state machine
    quiet = by[("EXPRESS, S3 via EventBridge", "ERROR")]["components_per_million"]["happy"]
    assert quiet["CloudWatch Logs, state machine"] == 0
    assert express["CloudWatch Logs, state machine"] > 0


def test_the_ceilings_name_a_quota_for_every_mode() -> None:
    # WHEN the ceilings of the fixed paths are worked out
    rows = bench.mode_ceilings(measures(), baseline_measures(), MODEL)
    # THEN every built mode names the quota that binds first, with its page
    assert [r["mode"] for r in rows] == [m.name for m in bench.MODES] + [bench.BASELINE.name]
    for row in rows:
        if not row["built"]:
            assert row["note"] == "not built yet" and row["quotas"] == []
            continue
        assert row["binding"] == row["quotas"][0]
        assert row["binding"]["source"].startswith("https://docs.aws.amazon.com/")
        rates = [q["messages_per_second"] for q in row["quotas"]]
        assert rates == sorted(rates)
    by = {r["mode"]: r["binding"] for r in rows if r["built"]}
    # AND STANDARD binds at 300 a second (StartExecution; 5 transitions tie at 1,500/s)
    assert by["STANDARD, S3 via EventBridge"]["messages_per_second"] == pytest.approx(300)
    # AND the SQS path's 7 transitions bind first: 1,500 / 7
    standard_sqs = by["STANDARD, SQS via pipe"]
    assert "StateTransition" in standard_sqs["quota"]
    assert standard_sqs["messages_per_second"] == pytest.approx(1500 / 7)
    # AND EXPRESS binds at Lambda concurrency: 1,000 / 0.205 s, the batch mode too
    for mode in ("EXPRESS, S3 via EventBridge", bench.MODES[-1].name):
        assert "Lambda" in by[mode]["quota"]
        assert by[mode]["messages_per_second"] == pytest.approx(1000 / 0.205)


def test_state_machine_logs_at_error_keep_only_error_events_and_no_data() -> None:
    # GIVEN a duplicate's history: the Claim's condition fails (a TaskFailed)
    events = [
        {"id": 1, "type": "ExecutionStarted", "executionStartedEventDetails": {"input": "{}"}},
        {"id": 2, "type": "TaskFailed", "previousEventId": 1,
         "taskFailedEventDetails": {"error": "DynamoDB.ConditionalCheckFailedException",
                                    "cause": "The conditional request failed"}},
        {"id": 3, "type": "SucceedStateExited", "stateExitedEventDetails": {"output": "{}"}},
    ]  # fmt: skip
    arn = "arn:aws:states:us-east-1:123456789012:execution:m:e"
    # WHEN they are logged at ERROR THEN only the TaskFailed is, without execution data
    (record,) = bench.log_records(events, arn, "ERROR")
    assert json.loads(record)["type"] == "TaskFailed"
    # WHEN logged at ALL THEN all three, and an input is not in the log
    records = bench.log_records(events, arn, "ALL")
    assert len(records) == 3 and "input" not in json.loads(records[0])["details"]
    # AND an EXPRESS execution's ARN, in every event, is longer
    assert bench.log_bytes(bench.log_records(events, bench._express_arn(arn), "ALL")) > (
        bench.log_bytes(records)
    )
    assert bench.log_bytes(["abc"]) == 3 + bench.LOG_EVENT_OVERHEAD_BYTES


def test_every_price_and_quota_names_its_source() -> None:
    for price in bench.PRICES.values():
        assert price.source.startswith("https://aws.amazon.com/") and price.check
        assert price.check.startswith(("read:", "not verified"))
    for quota in bench.QUOTAS.values():
        assert quota.source.startswith("https://docs.aws.amazon.com/")
    assert bench.busiest_shard_share(f"key-{n}" for n in range(16_000)) < 0.07


def test_a_small_bench_reports_every_table(tmp_path: Path) -> None:
    # GIVEN / WHEN a tiny run of the whole harness on the local engine
    report = bench.run_bench(messages=4, audit_keys=120, concurrency=2, rounds=3, warmup=2)
    paths = {(p["source"], p["path"]): p for p in report["paths"]}
    # THEN the counts, from histories, requests and the DynamoDB meter, are exact
    happy, duplicate = paths[("s3", "happy")], paths[("s3", "duplicate")]
    assert (happy["transitions"], happy["table_wru"], happy["lambda_invocations"]) == (5, 2, 1)
    assert happy["index_wru"]["OpenWork"] == 2 and happy["index_wru"]["ObjectContent"] == 0
    assert (duplicate["transitions"], duplicate["writes"]) == (4, 2)
    assert duplicate["conditional_failures"] == 2 and duplicate["lambda_invocations"] == 0
    assert happy["new_row"] and not duplicate["new_row"]
    assert 0 < happy["row_bytes"] < 1024
    sqs = paths[("sqs", "happy")]
    # the pipe deletes its batch (here of one) with DeleteMessageBatch
    assert sqs["sqs_requests"] == {"DeleteMessageBatch": 1, "ReceiveMessage": 1, "SendMessage": 1}
    assert sqs["sfn_log_bytes"]["ALL"] > happy["sfn_log_bytes"]["ALL"] > 0
    assert happy["sfn_log_bytes"]["ERROR"] == 0 < duplicate["sfn_log_bytes"]["ERROR"]
    baseline = {p["path"]: p for p in report["baseline_paths"]}
    assert (baseline["happy"]["table_wru"], baseline["duplicate"]["table_wru"]) == (2, 1)
    assert report["audit"]["scanned"] == 120
    assert {m["mode"] for m in report["modes"]} == {m.name for m in (*bench.MODES, bench.BASELINE)}
    assert all(c["quotas"] for c in report["ceilings"] if c["built"])
    for rates in report["throughput_per_second"].values():
        assert len(rates["happy_rounds"]) == len(rates["duplicate_rounds"]) == 3
        assert rates["happy"] == sorted(rates["happy_rounds"])[1]  # the median round
        assert rates["happy_best"] == max(rates["happy_rounds"]) > 0
        if sys.platform == "linux":  # /proc/stat: the CPU steal meanwhile, per round
            assert all(0 <= c <= (os.cpu_count() or 1) for c in rates["steal_cores_rounds"])
    with pytest.raises(ValueError):
        bench.run_bench(messages=4, audit_keys=0)
    json_path, md_path = bench.write(report, tmp_path)
    assert json.loads(json_path.read_text())["targets"] == report["targets"]
    text = md_path.read_text()
    for heading in ("## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7.", "## Prices"):
        assert heading in text
    assert "not built yet" not in text and "x baseline" in text
    assert math.isfinite(report["modes"][0]["usd_per_million"]["happy"])


def test_a_run_is_embedded_in_the_docs_page_between_its_markers(tmp_path: Path) -> None:
    # GIVEN a page with prose around the markers, and a run with headings
    page = tmp_path / "benchmarks.md"
    page.write_text(
        f"# Benchmarks\n\nBefore.\n\n{bench.PAGE_START}\nold run\n{bench.PAGE_END}\n\nAfter.\n",
        encoding="utf-8",
    )
    # WHEN the run is embedded
    bench.embed("## 1. Throughput\n\n| a |\n", page)
    # THEN only what lies between the markers changed, its headings one level down
    assert page.read_text(encoding="utf-8") == (
        f"# Benchmarks\n\nBefore.\n\n{bench.PAGE_START}\n### 1. Throughput\n\n| a |\n"
        f"{bench.PAGE_END}\n\nAfter.\n"
    )
    # AND a page without the markers is refused, unchanged
    bare = tmp_path / "bare.md"
    bare.write_text("# Nothing here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="markers"):
        bench.embed("## 1.\n", bare)
    assert bare.read_text(encoding="utf-8") == "# Nothing here\n"
