"""The in-process Lambda runtime: what running handlers on threads must not break."""

from __future__ import annotations

import io
import sys
import threading

import pytest

from onceflow import lambdas


def test_concurrent_invocations_sharing_a_powertools_logger_lose_no_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Several invocations changing one Logger's keys while others log: each line whole.

    Without the guard, a line formatted while another thread adds or removes a
    key raises "dictionary changed size during iteration", which logging
    prints as "--- Logging error ---" and drops the line.
    """
    from aws_lambda_powertools import Logger

    lambdas.guard_powertools_formatter()
    stream = io.StringIO()
    logger = Logger(service="onceflow-race-probe", stream=stream, level="INFO")
    logger.append_keys(**{f"base{j}": j for j in range(200)})  # a long iteration to race
    lines_per_thread, threads_count = 300, 8

    def invocation(n: int) -> None:
        for i in range(lines_per_thread):
            logger.append_keys(**{f"k{n}_{i % 7}": i})
            logger.info("line")
            logger.remove_keys([f"k{n}_{i % 7}"])

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=invocation, args=(n,)) for n in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert "Logging error" not in capsys.readouterr().err
    assert stream.getvalue().count('"message":"line"') == lines_per_thread * threads_count


def test_the_guard_is_installed_once() -> None:
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    lambdas.guard_powertools_formatter()
    assert lambdas.guard_powertools_formatter() == []
    for name in lambdas._FORMATTER_STEPS:
        assert getattr(LambdaPowertoolsFormatter, name).onceflow_guarded
