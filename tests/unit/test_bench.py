"""The benchmark harness on a small run: it measures and reports (timings are not asserted)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from onceflow import bench


def test_a_small_bench_reports_the_four_tables(tmp_path: Path) -> None:
    report = bench.run_bench(messages=4, audit_keys=120, concurrency=2, rounds=3, warmup=2)
    paths = {p["path"]: p for p in report["paths"]}
    # Counted from the histories and the request log: exact, not timed.
    assert (paths["happy"]["transitions"], paths["happy"]["dynamodb_writes"]) == (5, 2)
    assert paths["happy"]["lambda_invocations"] == 1
    assert (paths["duplicate"]["transitions"], paths["duplicate"]["dynamodb_writes"]) == (4, 2)
    assert paths["duplicate"]["lambda_invocations"] == 0
    assert paths["retry"]["transitions"] == 6 and paths["retry"]["lambda_invocations"] == 2
    assert paths["dead-letter"]["sqs_messages"] == 1
    baseline = {p["path"]: p for p in report["baseline_paths"]}
    assert baseline["happy"]["dynamodb_writes"] == 2
    assert baseline["duplicate"]["dynamodb_writes"] == 1
    assert report["audit"]["scanned"] == 120
    for rates in report["throughput_per_second"].values():
        assert len(rates["happy_rounds"]) == len(rates["duplicate_rounds"]) == 3
        assert rates["happy"] == sorted(rates["happy_rounds"])[1]  # the median round
        assert rates["happy_best"] == max(rates["happy_rounds"]) > 0
        assert rates["duplicate"] == sorted(rates["duplicate_rounds"])[1] > 0
        if sys.platform == "linux":  # /proc/stat: the CPU steal meanwhile, per round
            assert len(rates["steal_cores_rounds"]) == 3
            assert all(0 <= cores <= os.cpu_count() for cores in rates["steal_cores_rounds"])
    with pytest.raises(ValueError):
        bench.run_bench(messages=4, audit_keys=0)
    json_path, md_path = bench.write(report, tmp_path)
    assert json.loads(json_path.read_text())["targets"] == report["targets"]
    text = md_path.read_text()
    for heading in ("## 1.", "## 2.", "## 3.", "## 4."):
        assert heading in text
    assert "rounds (happy; steal)" in text
