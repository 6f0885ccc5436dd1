"""The benchmark: its pricing arithmetic on fixed inputs, and the harness on a tiny run.

Timings are measured and reported, never asserted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import pricing
from bench import run as bench
from bench.pricing import AuditUnits, Deployment
from bench.run import BaselineMeasure, IndexSpec, Model, PathMeasure, Usage

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
        "states": ["Claim", "Process", "MarkComplete"],
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
            parallel_steps=11, messages=10,
        ),
        path_measure(
            source="sqs-batch", path="duplicate", transitions=0, table_wru=20, index_wru={},
            writes=20, conditional_failures=20, rru=10.0, lambda_invocations=0,
            integration_calls=30, function_log_lines=[], parallel_steps=11, new_row=False,
            sqs_requests={"ReceiveMessage": 1, "DeleteMessage": 10}, messages=10,
        ),
        # S3's events through the queue: EventBridge's SendMessage, then the same batch.
        path_measure(
            source="s3-batch", transitions=0, table_wru=20, index_wru={"OpenWork": 20},
            writes=20, lambda_invocations=10, integration_calls=20, data_bytes=40_000,
            sqs_requests={"SendMessage": 10, "ReceiveMessage": 1, "DeleteMessage": 10},
            parallel_steps=11, messages=10,
        ),
        path_measure(
            source="s3-batch", path="duplicate", transitions=0, table_wru=20, index_wru={},
            writes=20, conditional_failures=20, rru=10.0, lambda_invocations=0,
            integration_calls=30, function_log_lines=[], parallel_steps=11, new_row=False,
            sqs_requests={"SendMessage": 10, "ReceiveMessage": 1, "DeleteMessage": 10},
            messages=10,
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
    # THEN every component appears, every one is charged, and they sum up
    assert list(lines) == list(bench.COMPONENTS)
    assert all(lines[name] > 0 for name in lines)
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
    assert bench.BASELINE_EXPIRY_SECONDS >= pricing.SEED_LONGEST_DUPLICATE_GAP_SECONDS
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
    # AND S3's events on EventBridge are charged, at $1.00 per million (not verified)
    assert standard["EventBridge events (from S3)"] == pytest.approx(1.0)
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
    # (10 sends, a receive for each message the window gathers, 10 deletes in this fixture)
    assert batch["SQS requests"] == pytest.approx((10 + 10 + 10) / 10 * 0.4)
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
        assert price.source.startswith(("https://aws.amazon.com/", "https://docs.aws.amazon.com/"))
        assert price.check
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
    assert (happy["transitions"], happy["table_wru"], happy["lambda_invocations"]) == (3, 2, 1)
    assert happy["index_wru"]["OpenWork"] == 2 and happy["index_wru"]["ObjectContent"] == 0
    assert (duplicate["transitions"], duplicate["writes"]) == (3, 2)
    assert duplicate["conditional_failures"] == 2 and duplicate["lambda_invocations"] == 0
    assert happy["new_row"] and not duplicate["new_row"]
    assert 0 < happy["row_bytes"] < 1024
    # the upload, the processor's read of it and its output are in the buckets' access
    # logs; a duplicate asks S3 nothing; an SQS message has no upload to read
    assert happy["access_log_bytes"] > paths[("sqs", "happy")]["access_log_bytes"] > 0
    assert duplicate["access_log_bytes"] == 0
    # custom events on the default bus: the same states, from every source (P12 item 3)
    events = (paths[("events", "happy")], paths[("events", "duplicate")])
    assert [p["states"] for p in events] == [
        ["Claim", "Process", "MarkComplete"],
        ["Claim", "Reclaim", "Duplicate"],
    ]
    sqs = paths[("sqs", "happy")]
    # the pipe deletes its batch (here of one) with DeleteMessageBatch
    assert sqs["sqs_requests"] == {"DeleteMessageBatch": 1, "ReceiveMessage": 1, "SendMessage": 1}
    # (both enter the same states: Claim reads the pipe's message itself)
    assert sqs["sfn_log_bytes"]["ALL"] > 0 and happy["sfn_log_bytes"]["ALL"] > 0
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
    headings = ("## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7.", "## 8.", "## Prices")
    for heading in (*headings, bench.README_HEADING):
        assert heading in text
    # AND every mode is billed as shipped: usage, fixed costs and audit add up to its all-in
    shipped = {r["mode"]: r for r in report["as_shipped"]}
    assert set(shipped) == {m.name for m in (*bench.MODES, bench.BASELINE)}
    for row in shipped.values():
        assert row["total"] == pytest.approx(row["variable"] + row["fixed"] + row["audit"])
        assert row["fixed"] > 0
    # AND the EXPRESS rows carry EXPRESS ARNs: never fewer write units than STANDARD's
    assert happy["table_wru_express"] >= happy["table_wru"]
    # (35 bytes more for each time the row names its owner: the lock, the claims)
    longer = happy["row_bytes_express"] - happy["row_bytes"]
    assert longer > 0 and longer % 35 == 0
    # AND the batch workflow was measured at two sizes, so batches that form are priced
    batch_paths = {p["path"]: p["messages"] for p in report["paths"] if p["source"] == "sqs-batch"}
    assert batch_paths == {"happy-1": 1, "happy": 10, "duplicate": 10}
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


# ---- the bill as shipped ----------------------------------------------------------


def test_batches_form_from_the_rate_and_the_batching_window() -> None:
    # GIVEN the seed's rate, 507,706 notifications in 104 hours
    rate = pricing.SEED_MESSAGES_PER_SECOND
    assert rate == pytest.approx(507_706 / (104 * 3600))
    # WHEN there is no batching window THEN a batch holds one message
    assert pricing.mean_batch(rate, 0.0, 10) == pytest.approx(1.0)
    # WHEN one message is expected in the window and batches hold two
    # THEN 1 + P(at least one more) = 2 - e^-1
    assert pricing.mean_batch(1.0, 1.0, 2) == pytest.approx(2 - math.exp(-1))
    # AND with up to 3: 1 + P(N >= 1) + P(N >= 2) = 3 - 2e^-1 - e^-1
    assert pricing.mean_batch(1.0, 1.0, 3) == pytest.approx(3 - 3 * math.exp(-1))
    # AND a long window fills the batch
    assert pricing.mean_batch(rate, 60.0, 10) == pytest.approx(10.0, rel=1e-6)


def test_a_batch_pays_its_execution_once_and_each_message_its_own() -> None:
    # GIVEN the batch workflow measured on a batch of one and on a batch of ten
    mode = bench.MODES[-1]
    ten = measures()[4]
    one = path_measure(
        path="happy-1", source="sqs-batch", transitions=0, table_wru=2, index_wru={},
        writes=2, lambda_invocations=1, integration_calls=2, data_bytes=4_000,
        sqs_requests={"SendMessage": 1, "ReceiveMessage": 1, "DeleteMessage": 1},
        parallel_steps=2, messages=1,
    )  # fmt: skip
    # WHEN a message is priced at the batches that form
    at = {b: bench.message_usage(mode, ten, "ERROR", MODEL, 0.0, one, b) for b in (1, 2, 10)}
    # THEN a batch of one pays a whole execution: its request, its receive and delete
    assert at[1].express_requests == pytest.approx(1.0)
    assert at[1].sqs_requests == pytest.approx(3.0)
    # AND a batch of two half of it, a batch of ten a tenth; its SQS requests are each
    # message's (here 10 sends, 10 receives as the window gathers them, 10 deletes)
    assert at[2].express_requests == pytest.approx(0.5)
    assert at[10].express_requests == pytest.approx(0.1)
    assert at[10].sqs_requests == pytest.approx(30 / 10)
    # AND what each message does alone does not shrink: its Lambda, its row's writes
    assert at[1].lambda_requests == at[10].lambda_requests == pytest.approx(1.0)
    assert at[1].table_wru == at[10].table_wru == pytest.approx(2.0)


def test_a_batching_window_takes_a_receive_per_message_gathered_not_one_per_batch() -> None:
    # GIVEN the batch workflow measured locally, where the pipe takes a batch with one
    # ReceiveMessage and deletes it with one DeleteMessageBatch (as the local pipe does)
    mode = bench.MODES[-1]
    one = path_measure(
        path="happy-1", source="sqs-batch", transitions=0, table_wru=2, index_wru={},
        writes=2, lambda_invocations=1, integration_calls=2, data_bytes=4_000,
        sqs_requests={"SendMessage": 1, "ReceiveMessage": 1, "DeleteMessageBatch": 1},
        parallel_steps=2, messages=1,
    )  # fmt: skip
    ten = dataclasses.replace(
        measures()[4],
        sqs_requests={"SendMessage": 10, "ReceiveMessage": 1, "DeleteMessageBatch": 1},
    )
    # WHEN a message is priced at full batches of 10
    usage = bench.message_usage(mode, ten, "ERROR", MODEL, 0.0, one, 10.0)
    # THEN on AWS the pipe gathers a batch by polling until its window closes, and a long
    # poll returns as soon as a message is there: at rates far below a poller's, one
    # receive a message, not one a batch. Each message pays its send and its receive, the
    # batch one delete: 2.1 requests a message, not the local pipe's 1.2.
    assert usage.sqs_requests == pytest.approx(1 + 1 + 1 / 10)
    # AND a batch of one pays its send, its receive and its delete
    single = bench.message_usage(mode, ten, "ERROR", MODEL, 0.0, one, 1.0)
    assert single.sqs_requests == pytest.approx(3.0)


def test_an_express_arn_makes_the_ledger_row_longer() -> None:
    # GIVEN a MarkComplete on a row 20 bytes under 1 KB, owned by a STANDARD execution ARN
    arn = "arn:aws:states:us-east-1:123456789012:execution:onceflow-Processor:run-1"
    before = {"pk": {"S": "k"}, "lock_owner": {"S": arn}, "pad": {"S": ""}}
    before["pad"]["S"] = "x" * (1004 - bench.item_size(before))
    after = {**before, "status": {"S": "DONE"}}
    assert bench.item_size(after) == 1004 + len("status") + 4
    write = bench.Write("ledger", "UpdateItem", False, 1, {}, 0, (before, after, None))
    # WHEN it is priced for an EXPRESS execution, whose ARN is 35 bytes longer
    express = bench.express_image(after)
    assert bench.item_size(express) == bench.item_size(after) + 35
    table, _ = bench.express_write_units(write, bench.TableSpec("ledger", ("pk",)))
    # THEN the write crosses 1 KB: 2 units where STANDARD pays 1
    assert bench.table_write_units("UpdateItem", before, after, None, False) == 1
    assert table == 2
    # AND a write without an ARN is left as it was
    plain = bench.Write("ledger", "PutItem", False, 1, {"OpenWork": 1}, 10)
    assert bench.express_write_units(plain, bench.TableSpec("ledger", ("pk",))) == (
        1, {"OpenWork": 1},
    )  # fmt: skip


def _with_resources(text: str, extra: str) -> str:
    head, tail = text.split("\nResources:\n", 1)
    return f"{head}\nResources:\n{extra}{tail}"


def test_fixed_costs_are_counted_from_the_template(tmp_path: Path) -> None:
    # GIVEN the project's template, and a copy with two more alarms: a metric math
    # alarm that reads two metrics, and one whose condition is false by default
    original = bench.PROJECT_ROOT / "template.yaml"
    copy = tmp_path / "template.yaml"
    copy.write_text(_with_resources(original.read_text(encoding="utf-8"), """\
  ExtraMathAlarm:
    Type: AWS::CloudWatch::Alarm
    Properties:
      ComparisonOperator: GreaterThanThreshold
      Threshold: 0
      EvaluationPeriods: 1
      Metrics:
        - {Id: sum, Expression: "a + b", ReturnData: true}
        - Id: a
          ReturnData: false
          MetricStat: {Metric: {Namespace: X, MetricName: A}, Period: 60, Stat: Sum}
        - Id: b
          ReturnData: false
          MetricStat: {Metric: {Namespace: X, MetricName: B}, Period: 60, Stat: Sum}
  ExtraAlarmOnlyWithEmail:
    Type: AWS::CloudWatch::Alarm
    Condition: HasAlarmEmail
    Properties:
      Namespace: X
      MetricName: C
      Statistic: Sum
      Period: 60
      EvaluationPeriods: 1
      Threshold: 0
      ComparisonOperator: GreaterThanThreshold
"""), encoding="utf-8")  # fmt: skip
    # WHEN both are read as deployed with defaults
    shipped = pricing.read_deployment(original)
    more = pricing.read_deployment(copy)
    # THEN the copy has one more alarm, billed for the two metrics it reads ($0.20 a month)
    assert len(more.alarms) == len(shipped.alarms) + 1
    assert ("ExtraMathAlarm", 2) in more.alarms
    assert all(name != "ExtraAlarmOnlyWithEmail" for name, _ in more.alarms)
    rates = {"Processed": 1.0}
    extra = sum(i.usd for i in pricing.monthly_items(more, rates)) - sum(
        i.usd for i in pricing.monthly_items(shipped, rates)
    )
    assert extra == pytest.approx(0.20)
    # AND what the template deploys is there: its daily audit schedule, and the dashboard
    # only with Observability "full" (the default ships the alarms alone)
    assert shipped.schedules and not shipped.dashboards
    assert pricing.read_deployment(original, {"Observability": "full"}).dashboards
    # AND a mode's parameters are bound as CloudFormation binds them: the SQS source's
    # alarms (its DLQ, its pipe, its oldest message) come with it
    sqs = pricing.read_deployment(original, {"SqsSource": "create"})
    added = {name for name, _ in sqs.alarms} - {name for name, _ in shipped.alarms}
    assert added == {
        "SourceDeadLetterQueueAlarm",
        "SourcePipeFailedAlarm",
        "SourceQueueNotDrainingAlarm",
    }


def test_the_monthly_bill_of_a_deployment_by_hand() -> None:
    # GIVEN an alarm on one metric, one on three, a dashboard, two metric filters and a
    # daily schedule; Processed at one a second, Duplicate never
    deployment = Deployment(
        {}, [("A", 1), ("B", 3)], ["Dashboard"],
        [("ProcessedFilter", "SucceedStateEntered", ("Processed",)),
         ("DuplicateFilter", "SucceedStateEntered", ("Duplicate",))],
        [("Audit", "rate(1 day)")], 1, 0.0, "ALL", "ERROR",
    )  # fmt: skip
    # WHEN its fixed bill is made at ALL, with a function sending 2 EMF metrics an invocation
    items = pricing.monthly_items(
        deployment, {"Processed": 1.0}, [pricing.MetricSource("fn", 2, 3600.0)]
    )
    # THEN 4 alarm metrics at $0.10, $3 of dashboard, 3 metrics sent every hour at $0.30,
    # and 30.4 scheduler invocations at $1 per million
    runs = pricing.DAYS_PER_MONTH
    assert sum(i.usd for i in items) == pytest.approx(0.4 + 3.0 + 0.9 + runs * 1e-6)
    # AND at ERROR a Succeed state is not logged: its filter's metric is never sent
    quiet = pricing.monthly_items(deployment, {"Processed": 1.0}, batch_mode=True)
    assert {i.source: i.usd for i in quiet}["ProcessedFilter"] == 0
    # AND a metric sent by events arriving at random, once an hour on average, is billed
    # for the hours that have one: 1 - e^-1 of them
    assert pricing.metric_hours_share(1.0) == pytest.approx(1 - math.exp(-1))
    # AND $5 a month over one message a second is $5 / 2,629,800 a message
    assert pricing.amortised(5.0, 1.0) == pytest.approx(5.0 / (365.25 / 12 * 86_400))


def test_the_audit_grows_with_the_bucket_and_inventory_replaces_the_listing() -> None:
    # GIVEN an audit's costs: $0.01 a run, 4e-8 an object reached (1e-8 of it LIST
    # requests), 6e-8 an object checked, 8e-7 an Inventory run's reads
    units = AuditUnits(0.01, 4e-8, 6e-8, 1e-8, 8e-7)
    # WHEN a bucket has taken one upload a second for a year (30-day window, 12 h cutoff)
    day = pricing.audit_day(units, 1.0, 365.0, 30.0, 12.0)
    # THEN the walk reaches every object, and checks two days of them (those since the
    # last run's watermark, and its margin), not the 29.5 days of the window
    assert day.listed_keys == pytest.approx(86_400 * 365)
    assert day.checked_keys == pytest.approx(86_400 * 2)
    usd = 0.01 + 86_400 * 365 * 4e-8 + 86_400 * 2 * 6e-8
    assert day.usd == pytest.approx(usd)
    assert day.per_million_uploads == pytest.approx(usd / 86_400 * 1e6)
    # AND with a daily Inventory every object costs its price ($0.0025 per million), its
    # streaming by SelectWindow, and its row's share of the reports the output bucket keeps
    # (3 daily reports, each listing it, at $0.023 per GB-month); only the two days of the
    # window reach a child (no LIST)
    stored = 3 * pricing.INVENTORY_ROW_GZIP_BYTES / 1024**3 * 0.023 / pricing.DAYS_PER_MONTH
    per_row = 2.5e-9 + pricing.SELECT_GB_SECONDS_PER_ROW * 0.0000166667 + stored
    window_row = 4e-8 - 1e-8 + 6e-8
    inventory = 0.01 + 8e-7 + 86_400 * 365 * per_row + 86_400 * 2 * window_row
    assert day.usd_inventory == pytest.approx(inventory)
    # AND it pays once what listing an object costs covers the inventory run's reads
    assert pricing.inventory_break_even_keys(units) == pytest.approx(8e-7 / (4e-8 - per_row))
    # (the model's margin is the audit's)
    from service.logic.audit import WATERMARK_MARGIN_SECONDS

    assert pricing.AUDIT_WATERMARK_MARGIN_DAYS * 86_400 == WATERMARK_MARGIN_SECONDS
    # AND an older bucket costs more per upload: the audit grows with the bucket's age
    older = pricing.audit_day(units, 1.0, 3 * 365.0, 30.0, 12.0)
    assert older.per_million_uploads > day.per_million_uploads


def test_the_inventory_reports_kept_are_the_templates_and_their_rows_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the template's lifecycle rule on the output bucket's inventory/ prefix: a daily
    # report is read while at most 2 days old, a weekly one 8 (AUDIT_INVENTORY_MAX_AGE_HOURS),
    # so the reports are kept a day longer than that and no more
    rules = load_template_rules()
    kept = next(r for r in rules if r.get("Prefix") == "inventory/")
    assert kept["ExpirationInDays"] == {"Fn::If": ["WeeklyInventory", 9, 3]}
    # THEN the bill (a daily report: AuditInventory auto) keeps them as long as the template
    assert pricing.INVENTORY_REPORTS_KEPT_DAYS == 3
    # AND a report's row is measured: a gzip'd CSV row of the template's columns (bucket,
    # key, version id, latest, delete marker, size, date, ETag), random ids compressing badly
    assert 60 < pricing.INVENTORY_ROW_GZIP_BYTES < 150
    # AND what a report of an object costs to keep is on the audit's bill: 3 x its bytes
    units = AuditUnits(0.0, 0.0, 0.0, 0.0, 0.0)
    day = pricing.audit_day(units, 1.0, 1000.0, 30.0, 12.0)
    monkeypatch.setattr(pricing, "INVENTORY_REPORTS_KEPT_DAYS", 0)
    unkept = pricing.audit_day(units, 1.0, 1000.0, 30.0, 12.0)
    listed = 86_400 * 1000.0
    stored = listed * 3 * pricing.INVENTORY_ROW_GZIP_BYTES / 1024**3 * 0.023
    assert day.usd_inventory - unkept.usd_inventory == pytest.approx(
        stored / pricing.DAYS_PER_MONTH
    )


def load_template_rules() -> list[dict[str, Any]]:
    from onceflow.local.template import load_template

    template = load_template(bench.PROJECT_ROOT / "template.yaml")
    output = template["Resources"]["OutputBucket"]["Properties"]
    rules: list[dict[str, Any]] = output["LifecycleConfiguration"]["Rules"]
    return rules


def test_the_batch_mode_is_bounded_by_synchronous_executions_not_the_start_rate() -> None:
    # GIVEN the batch workflow, started by the pipe with StartSyncExecution
    load = bench.mode_load(bench.MODES[-1], measures()[4], MODEL)
    # THEN it takes nothing from the EXPRESS StartExecution refill
    assert load.express_starts == 0
    # AND holds a synchronous execution for the batch's run: a concurrency quota
    quotas = {q["quota"]: q for q in bench.ceilings(load)}
    sync = next(q for name, q in quotas.items() if "StartSyncExecution" in name)
    assert sync["unit"] == "concurrent" and sync["per_message"] == pytest.approx(
        load.express_sync_seconds
    )


def test_emf_metrics_are_counted_from_the_log() -> None:
    # GIVEN a function's log: an EMF blob with two metrics, a plain line, an EMF blob
    # with one of them again
    blob = {
        "_aws": {"Timestamp": 0, "CloudWatchMetrics": [
            {"Namespace": "onceflow/s", "Dimensions": [["service"]],
             "Metrics": [{"Name": "OutputWritten"}, {"Name": "PermanentError"}]}]},
        "service": "onceflow", "OutputWritten": [1], "PermanentError": [1],
    }  # fmt: skip
    again = {**blob, "_aws": {"Timestamp": 1, "CloudWatchMetrics": [
        {"Namespace": "onceflow/s", "Dimensions": [["service"]],
         "Metrics": [{"Name": "OutputWritten"}]}]}}  # fmt: skip
    lines = [json.dumps(blob), '{"message": "processed"}', json.dumps(again)]
    # THEN two distinct metrics are sent
    assert len(pricing.emf_metrics(lines)) == 2


def test_the_as_shipped_bill_adds_fixed_costs_and_the_audit_to_usage() -> None:
    # GIVEN the fixed paths, an audit, and every mode deployed from the template
    units = AuditUnits(0.01, 4e-8, 6e-8, 1e-8, 8e-7)
    deployments = {
        m.name: bench.mode_deployment(bench.PROJECT_ROOT / "template.yaml", m) for m in bench.MODES
    }
    metered = bench.Metered(processor=1, audit=9, baseline=1)
    # WHEN each is billed as shipped
    # (each batch workflow measured on a batch of one too, as the bench does)
    ones = [
        path_measure(
            path="happy-1", source=source, transitions=0, table_wru=2, index_wru={"OpenWork": 2},
            writes=2, lambda_invocations=1, integration_calls=2, data_bytes=4_000,
            sqs_requests={"SendMessage": 1, "ReceiveMessage": 1, "DeleteMessage": 1},
            parallel_steps=2, messages=1,
        )
        for source in ("sqs-batch", "s3-batch")
    ]  # fmt: skip
    rows = {
        r["mode"]: r
        for r in bench.bill_as_shipped(
            measures() + ones, baseline_measures(), units, MODEL, deployments, metered
        )
    }
    base = rows[bench.BASELINE.name]
    for mode in bench.MODES:
        row = rows[mode.name]
        # THEN usage, fixed costs and the audit make the all-in, against the baseline's all-in
        assert row["total"] == pytest.approx(row["variable"] + row["fixed"] + row["audit"])
        assert row["ratio_to_baseline"] == pytest.approx(row["total"] / base["total"])
        # AND the fixed costs are the template's monthly bill over the month's messages
        per_month = pricing.SEED_MESSAGES_PER_SECOND * pricing.SECONDS_PER_MONTH
        assert row["fixed"] == pytest.approx(row["fixed_usd_per_month"] / per_month * 1e6)
        # AND at a tenth of the volume each message carries about ten times as much of them
        low = row["volumes"]["0.1"]
        assert low["fixed"] > 9 * row["fixed"]
    # AND each batch mode is priced at the batches its template's window forms at the
    # seed's rate, while the flattering full batches are printed beside, never instead
    for mode in (bench.MODES[-1], bench.S3_BATCH_MODE):
        batch = rows[mode.name]
        window = deployments[mode.name].pipe_window_seconds
        assert batch["window_seconds"] == window > 0
        assert batch["batch"] == pytest.approx(
            pricing.mean_batch(pricing.SEED_MESSAGES_PER_SECOND, window, 10)
        )
        assert batch["batch"] < batch["flattering"]["batch"] == 10
        assert batch["flattering"]["total"] < batch["total"]
        # AND beside it the bill if the pipe's pollers share the arrivals as Lambda's five
        # do (how many a pipe runs: not verified): each gathers a fifth of them, smaller
        # batches, a dearer message
        shared = batch["pollers_split"]
        assert shared["pollers"] == 5
        assert shared["batch"] == pytest.approx(
            pricing.mean_batch(pricing.SEED_MESSAGES_PER_SECOND / 5, window, 10)
        )
        assert shared["batch"] < batch["batch"] and shared["total"] > batch["total"]
        assert shared["ratio_to_baseline"] == pytest.approx(shared["total"] / base["total"])
    assert rows["STANDARD, S3 via EventBridge"]["pollers_split"] is None
    # AND the S3 modes pay S3's events, and show the bill without them beside
    for name in ("STANDARD, S3 via EventBridge", bench.S3_BATCH_MODE.name):
        s3 = rows[name]
        assert s3["s3_events_free_total"] == pytest.approx(
            s3["total"] - 1.0 * (1 - 0.0003), rel=1e-3
        )


def test_as_shipped_the_s3_modes_audit_reads_the_inventory_the_default_configures() -> None:
    # GIVEN an audit whose listing costs far more than an Inventory's rows, and every mode
    # deployed from the template with its defaults (AuditInventory auto)
    units = AuditUnits(0.01, 4e-8, 6e-8, 1e-8, 8e-7)
    template = bench.PROJECT_ROOT / "template.yaml"
    deployments = {m.name: bench.mode_deployment(template, m) for m in bench.MODES}
    metered = bench.Metered(processor=1, audit=9, baseline=1)
    # THEN every mode's stack configures the daily Inventory on its own bucket
    assert all(d.audit_inventory for d in deployments.values())
    # AND on an existing bucket the audit reads the Inventory its owner adds (the stack
    # grants the delivery; until then it lists), while AuditInventory none lists
    existing = {"ExistingBucketName": "customer-uploads"}
    assert pricing.read_deployment(template, existing).audit_inventory
    assert not pricing.read_deployment(template, {"AuditInventory": "none"}).audit_inventory

    def rows(with_inventory: bool) -> dict[str, dict[str, Any]]:
        chosen = {
            name: dataclasses.replace(d, audit_inventory=with_inventory)
            for name, d in deployments.items()
        }
        return {
            r["mode"]: r
            for r in bench.bill_as_shipped(
                measures(), baseline_measures(), units, MODEL, chosen, metered
            )
        }

    shipped, listed = rows(True), rows(False)
    # WHEN the S3 modes are billed as shipped, THEN their audit is the Inventory's, a month old
    at = dataclasses.replace(MODEL, messages_per_day=pricing.SEED_MESSAGES_PER_DAY)
    day = pricing.audit_day(
        units, at.messages_per_second, pricing.DAYS_PER_MONTH, MODEL.retention_days, 12.0
    )
    for mode in bench.MODES:
        if mode.source in ("s3", "s3-batch"):
            share = 1 - pricing.SEED_DUPLICATE_SHARE
            assert shipped[mode.name]["audit"] == pytest.approx(
                day.per_million_uploads_inventory * share
            )
            assert listed[mode.name]["audit"] == pytest.approx(day.per_million_uploads * share)
            assert shipped[mode.name]["total"] < listed[mode.name]["total"]
        else:
            # AND an SQS mode's audit walks no bucket: the same either way
            assert shipped[mode.name]["audit"] == pytest.approx(listed[mode.name]["audit"])


def test_the_readme_carries_the_stored_runs_bill_table() -> None:
    # GIVEN the run `onceflow bench` stored, and the README
    stored = (bench.PROJECT_ROOT / "bench" / "results.md").read_text(encoding="utf-8")
    readme = (bench.PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index(bench.README_START) + len(bench.README_START)
    # THEN the README's cost table is that run's, number for number
    assert readme[start : readme.index(bench.README_END)].strip() == bench.readme_section(stored), (
        "`onceflow bench` (its default --out) copies its bill table into the README"
    )


def test_embedding_a_run_in_the_docs_page_updates_the_readme_beside_it(tmp_path: Path) -> None:
    # GIVEN a project with a docs page and a README, each with its markers
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "benchmarks.md"
    page.write_text(f"{bench.PAGE_START}\n{bench.PAGE_END}\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# App\n\n{bench.README_START}\nold\n{bench.README_END}\n\n## Next\n", encoding="utf-8"
    )
    run = f"## 1. Throughput\n\nfast\n\n{bench.README_HEADING}\n\n| mode | $/M |\n\n## Targets\n"
    # WHEN a run is embedded in the page
    bench.embed(run, page)
    # THEN the README's table is the run's, and the rest of the README is untouched
    assert readme.read_text(encoding="utf-8") == (
        f"# App\n\n{bench.README_START}\n| mode | $/M |\n{bench.README_END}\n\n## Next\n"
    )
    # AND a README without the markers is refused by embed_readme, unchanged
    bare = tmp_path / "bare.md"
    bare.write_text("# Nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="markers"):
        bench.embed_readme(run, bare)
    assert bare.read_text(encoding="utf-8") == "# Nothing\n"


def test_standard_at_the_floor_of_its_shape_is_a_target_per_source_and_path() -> None:
    # GIVEN S3's paths at 3 and 4 transitions, no SQS duplicate measured, and the
    # custom events' paths (the third source the processor takes) at 3
    paths = [
        {"source": "s3", "path": "happy", "transitions": 3},
        {"source": "s3", "path": "duplicate", "transitions": 4},
        {"source": "sqs", "path": "happy", "transitions": 3},
        {"source": "events", "path": "happy", "transitions": 3},
        {"source": "events", "path": "duplicate", "transitions": 3},
    ]
    # WHEN the P12 item 3 targets are judged
    targets = bench.standard_floor_targets(paths)
    # THEN each source's each path is judged at 3, and what was not measured says so
    assert list(targets.values()) == [True, False, True, None, True, True]
    assert "STANDARD duplicate path from events at most 3 transitions (P12 item 3)" in targets


def test_the_batch_size_and_window_are_read_from_the_pipe(tmp_path: Path) -> None:
    # GIVEN a template whose pipe batches 10 messages with a 5-second window, when the
    # parameter turns it on
    template = tmp_path / "template.yaml"
    template.write_text("""\
Parameters:
  Window: {Type: String, Default: "none"}
Conditions:
  HasWindow: !Not [!Equals [!Ref Window, "none"]]
Resources:
  SourcePipe:
    Type: AWS::Pipes::Pipe
    Properties:
      SourceParameters:
        SqsQueueParameters:
          BatchSize: 10
          MaximumBatchingWindowInSeconds: !If [HasWindow, !Ref Window, !Ref AWS::NoValue]
""", encoding="utf-8")  # fmt: skip
    # WHEN it is read as deployed with its default, then with a window of 5 seconds
    default = pricing.read_deployment(template)
    windowed = pricing.read_deployment(template, {"Window": "5"})
    # THEN the default has no window, and the other batches for 5 seconds
    assert (default.pipe_batch_size, default.pipe_window_seconds) == (10, 0.0)
    assert (windowed.pipe_batch_size, windowed.pipe_window_seconds) == (10, 5.0)
    # AND at the seed's rate that window forms batches of 7.5 on average, not 1
    rate = pricing.SEED_MESSAGES_PER_SECOND
    assert pricing.mean_batch(rate, windowed.pipe_window_seconds, 10) == pytest.approx(
        7.47, abs=0.01
    )


def test_the_audit_pays_a_transition_per_child_and_a_read_per_checked_object() -> None:
    # GIVEN an audit over no objects (the plan, a lock sweep, the report) and one over
    # 1,000 objects: one Distributed Map child, two LIST requests, ten BatchGetItems
    def run(keys: int, batches: int, requests: dict[str, int], rru: float) -> bench.AuditMeasure:
        return bench.AuditMeasure(
            keys=keys, seconds=1.0, scanned=keys, transitions=8, batches=batches,
            history_events=31, lambda_invocations=3 + batches, requests=requests, rru=rru,
            sfn_log_events={"ALL": [], "ERROR": []}, function_log_lines=[],
        )  # fmt: skip

    fixed = run(0, 0, {"dynamodb:Query": 2, "s3:PutObject": 1}, 0.0)
    walked = run(
        1000, 1,
        {"dynamodb:Query": 2, "s3:PutObject": 1, "s3:ListObjects": 2, "dynamodb:BatchGetItem": 10},
        500.0,
    )  # fmt: skip
    # WHEN the run is billed THEN the child is a state transition, $0.025 per 1,000
    lines = bench.bill(bench.audit_usage(walked, "ALL", MODEL))
    assert lines["Step Functions Distributed Map children"] == pytest.approx(0.025 / 1000)
    # WHEN its parts are worked out
    units = bench.audit_units(fixed, walked, "ALL", MODEL)
    gb_second = 0.0000166667 * MODEL.audit_memory_gb
    # THEN checking an object is its half read unit and its share of a BatchGetItem's 10 ms
    assert units.per_checked_key == pytest.approx(0.5 * 0.125e-6 + 10 / 1000 * 0.010 * gb_second)
    # AND the listing is two LIST requests per 1,000 objects, and their 10 ms each
    assert units.listing_per_key == pytest.approx(2 / 1000 * (0.005e-3 + 0.010 * gb_second))
    # AND an object reached pays at least its share of the child's transition and request
    assert units.per_listed_key > 0.025e-3 / 1000 + 1e-6 / 1000


def test_the_functions_logs_are_measured_at_the_templates_level() -> None:
    # GIVEN the bench's engine, whose functions run at WARNING outside the measurements
    # (function_log_level overrides POWERTOOLS_LOG_LEVEL in their environment)
    import io

    from onceflow.local import ingress
    from onceflow.local.engine import LocalEngine

    log = io.StringIO()
    with LocalEngine(function_log=log, function_log_level="WARNING") as engine:
        # WHEN one work item is processed at the level the bench measures the functions at
        level = bench.template_log_level(engine)
        start = log.tell()
        with bench._function_log_level(level):
            for arn in ingress.put_custom_event(engine, "onceflow.work", "W", {"orderId": "o-1"}):
                assert engine.wait(arn, 60).status == "SUCCEEDED"
        globals_ = engine.stack.template["Globals"]["Function"]["Environment"]["Variables"]
    # THEN it is the level the template deploys (Globals' POWERTOOLS_LOG_LEVEL), not the
    # engine's override, and the processor's INFO line is in what the bill counts
    assert level == globals_["POWERTOOLS_LOG_LEVEL"] == "INFO"
    lines = [json.loads(line) for line in log.getvalue()[start:].splitlines() if line[:1] == "{"]
    assert any(line.get("message") == "processed" for line in lines)


def test_server_access_logs_are_stored_for_the_requests_to_the_logging_buckets() -> None:
    # GIVEN what a happy path asks S3 and SQS: the processor reads the upload from the
    # ingest bucket and writes its output to the output bucket (both log their requests
    # to the access log bucket), a read of a bucket that does not log, and an SQS send
    from onceflow.local.patches.hooks import RecordedRequest

    read = RecordedRequest("s3", "GetObject", 200, bucket="ingest", key="uploads/a b.png")
    write = RecordedRequest("s3", "PutObject", 200, bucket="output", key="processed/x.webp")
    elsewhere = RecordedRequest("s3", "GetObject", 200, bucket="elsewhere", key="k")
    send = RecordedRequest("sqs", "SendMessage", 200)
    # WHEN the bytes of their server access log records are counted
    logged = bench.access_log_bytes([read, write, elsewhere, send], {"ingest", "output"})
    # THEN one newline-delimited record for each request to a bucket that logs, no more
    records = [bench.access_log_record(r) for r in (read, write)]
    assert logged == sum(len(r.encode()) + 1 for r in records)
    # AND a record is AWS's: the bucket, the operation, the key URL-encoded and the
    # request-URI that repeats it (LogFormat.html); a longer key lengthens both
    assert (
        records[0].split(" ")[1] == "ingest" and " REST.GET.OBJECT uploads/a%20b.png " in records[0]
    )
    longer = RecordedRequest("s3", "GetObject", 200, bucket="ingest", key="uploads/a b.pngxx")
    assert len(bench.access_log_record(longer)) == len(records[0]) + 4
    # AND the logs are billed as S3 Standard storage for as long as the template keeps
    # them: 90 days, and the noncurrent day the versioned log bucket adds
    resources = bench.load_template(bench.PROJECT_ROOT / "template.yaml")["Resources"]
    assert bench.access_log_days(resources) == 91
    lines = bench.bill(Usage(access_log_byte_months=bench.GB))
    assert lines["S3 server access logs (storage)"] == pytest.approx(0.023)


def test_the_bill_as_shipped_pays_for_the_traces_recorded_not_for_reading_them() -> None:
    # GIVEN a million traces recorded (the stack reads none: retrieving or scanning
    # one is an operator's console or API call, $0.50 per million, which nothing
    # deployed makes, on onceflow's side or the baseline's)
    usage = Usage(xray_traces=1_000_000)
    # WHEN billed THEN only the recording, $5.00 per million (xray/pricing)
    assert bench.bill(usage)["X-Ray"] == pytest.approx(5.00)
