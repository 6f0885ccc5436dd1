"""Stock moto: no engine, none of onceflow's patches, for the upstream reproductions.

Each test in tests/upstream is the minimal reproduction an upstream report to moto
would carry for one fidelity patch (its ``upstream`` field names it): it asserts
what stock moto does today, where AWS does otherwise. A moto release that fixes
one makes its test fail: then the patch can go.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from onceflow.local import patches

ROLE = "arn:aws:iam::123456789012:role/upstream"
Run = Callable[..., dict[str, Any]]


@pytest.fixture
def sfn() -> Iterator[Any]:
    """A Step Functions client of stock moto (executions run: execute_state_machine)."""
    assert patches.installed() is None, "an engine is running: moto is not stock"
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.client("stepfunctions", region_name="us-east-1")


@pytest.fixture
def run(sfn: Any) -> Run:
    """Run a definition on stock moto; DescribeExecution of its end, with the history."""

    def run_definition(definition: dict[str, Any], execution_input: Any = None,
                       kind: str = "STANDARD") -> dict[str, Any]:  # fmt: skip
        machine = sfn.create_state_machine(
            name=f"m{time.monotonic_ns()}", definition=json.dumps(definition), roleArn=ROLE,
            type=kind,
        )["stateMachineArn"]  # fmt: skip
        arn = sfn.start_execution(
            stateMachineArn=machine, name=f"e{time.monotonic_ns()}",
            input=json.dumps({} if execution_input is None else execution_input),
        )["executionArn"]  # fmt: skip
        deadline = time.monotonic() + 20
        while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the execution did not end"
            time.sleep(0.05)
        described["events"] = sfn.get_execution_history(executionArn=arn)["events"]
        return dict(described)

    return run_definition


@pytest.fixture(autouse=True)
def _fresh_parser() -> Iterator[None]:
    """moto keeps the query language of the scope it parses on its preprocessor's class:
    a refused definition leaves it there (see test_stock_moto), for every later parse."""
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    yield
    Preprocessor._query_language_per_scope.clear()
