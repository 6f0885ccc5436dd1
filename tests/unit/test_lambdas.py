"""The in-process Lambda runtime: what running handlers on threads must not break."""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from onceflow.local import lambdas


def _race(invocation: Callable[[int], None], threads_count: int) -> None:
    """Run invocation(0..n-1) on n threads, switching between them as often as Python can."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=invocation, args=(n,)) for n in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)


def test_concurrent_invocations_sharing_a_powertools_logger_lose_no_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Several invocations changing one Logger's keys while others log: each line whole.

    Without the guard, a line formatted while another thread adds or removes a
    key raises "dictionary changed size during iteration", which logging
    prints as "--- Logging error ---" and drops the line.
    """
    from aws_lambda_powertools import Logger

    lambdas.guard_powertools()
    stream = io.StringIO()
    logger = Logger(service="onceflow-race-probe", stream=stream, level="INFO")
    logger.append_keys(**{f"base{j}": j for j in range(200)})  # a long iteration to race
    lines_per_thread, threads_count = 300, 8

    def invocation(n: int) -> None:
        for i in range(lines_per_thread):
            logger.append_keys(**{f"k{n}_{i % 7}": i})
            logger.info("line")
            logger.remove_keys([f"k{n}_{i % 7}"])

    _race(invocation, threads_count)
    assert "Logging error" not in capsys.readouterr().err
    assert stream.getvalue().count('"message":"line"') == lines_per_thread * threads_count


def test_the_guard_is_installed_once() -> None:
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
        AmazonCloudWatchEMFProvider,
    )

    lambdas.guard_powertools()
    assert lambdas.guard_powertools() == []
    for name in lambdas._FORMATTER_STEPS:
        assert getattr(LambdaPowertoolsFormatter, name).onceflow_guarded
    for name in lambdas._METRICS_STEPS:
        assert getattr(AmazonCloudWatchEMFProvider, name).onceflow_guarded


def test_concurrent_invocations_sharing_powertools_metrics_neither_fail_nor_lose_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each invocation adds metrics and flushes at its end, on one shared Metrics.

    Without the guard, a flush serialising the set while another invocation
    adds to it raises "dictionary changed size during iteration": the
    invocation fails after its work is done.
    """
    import json
    import warnings

    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    lambdas.guard_powertools()
    metrics = Metrics(namespace="onceflow-race-probe", service="probe")
    errors: list[BaseException] = []
    rounds, per_round, threads_count = 150, 10, 8

    def invocation(n: int) -> None:
        for _ in range(rounds):
            try:
                for j in range(per_round):
                    metrics.add_metric(name=f"m{n}_{j}", unit=MetricUnit.Count, value=1)
                metrics.flush_metrics()
            except Exception as exc:  # collected, and asserted below
                errors.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an invocation finding its set flushed by another
        _race(invocation, threads_count)
    assert errors == []
    counted = 0
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{"):
            blob = json.loads(line)
            # only this probe's namespace: an engine another test left running on this
            # worker may print its own functions' metrics here meanwhile
            for directive in blob.get("_aws", {}).get("CloudWatchMetrics", []):
                if directive["Namespace"] != "onceflow-race-probe":
                    continue
                for metric in directive["Metrics"]:
                    value = blob[metric["Name"]]
                    counted += len(value) if isinstance(value, list) else int(value)
    assert counted == rounds * per_round * threads_count  # each metric flushed once


def test_a_cold_start_forgets_the_modules_and_the_logger_an_earlier_engine_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_lambda_powertools import Logger

    monkeypatch.syspath_prepend(str(tmp_path))  # where load() puts the code root, undone

    # GIVEN a function whose module was imported, and its service's logger configured
    (tmp_path / "probe_handler.py").write_text("def handler(event, context):\n    return 1\n")
    service = f"onceflow-cold-start-probe-{id(tmp_path)}"
    spec = lambdas.FunctionSpec(
        "Probe", "probe", "arn:aws:lambda:us-east-1:123456789012:function:probe", tmp_path,
        "probe_handler.handler", 3.0, 128, {"POWERTOOLS_SERVICE_NAME": service},
    )  # fmt: skip
    runtime = lambdas.InProcessRuntime()
    runtime.register(spec)
    assert runtime.invoke("probe", {}) == (1, None)
    Logger(service=service, level="DEBUG")
    assert "probe_handler" in sys.modules
    # WHEN a new engine's cold start comes
    runtime.cold_start()
    # THEN the module is imported afresh and a new Logger takes its own level
    assert "probe_handler" not in sys.modules
    assert Logger(service=service, level="WARNING").log_level == logging.WARNING
