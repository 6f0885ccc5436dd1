"""The template deploys: SAM and cfn-lint accept it, sam build builds it, IAM covers the ASL."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onceflow.engine import LocalEngine
from onceflow.template import Stack

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCAL_RUNTIME = f"python{sys.version_info.major}.{sys.version_info.minor}"
ENV = {**os.environ, "SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": "us-east-1"}


def run(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300, check=False
    )


def test_sam_validate_lint_is_clean() -> None:
    result = run(str(BIN / "sam"), "validate", "--lint", "--region", "us-east-1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr


def test_cfn_lint_is_clean() -> None:
    result = run(str(BIN / "cfn-lint"), "template.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_sam_build_succeeds_with_the_local_runtime(tmp_path: Path) -> None:
    build_dir = tmp_path / "build"
    result = run(
        str(BIN / "sam"),
        "build",
        "--build-dir",
        str(build_dir),
        "--parameter-overrides",
        f"PythonRuntime={LOCAL_RUNTIME}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    package = build_dir / "ProcessorFunction"
    assert (package / "service" / "handlers" / "processor.py").is_file()
    assert (package / "PIL").is_dir() and (package / "aws_lambda_powertools").is_dir()
    shutil.rmtree(build_dir)


def test_deploy_default_runtime_is_a_current_lambda_python() -> None:
    stack = Stack.from_file(ROOT / "template.yaml")
    assert stack.parameters["PythonRuntime"] in {"python3.12", "python3.13"}


# Which IAM action each ASL service integration needs.
_INTEGRATION_ACTIONS = {
    "arn:aws:states:::dynamodb:putItem": ("dynamodb:PutItem", "TableName"),
    "arn:aws:states:::dynamodb:updateItem": ("dynamodb:UpdateItem", "TableName"),
    "arn:aws:states:::sqs:sendMessage": ("sqs:SendMessage", "QueueUrl"),
    "arn:aws:states:::lambda:invoke": ("lambda:InvokeFunction", "FunctionName"),
}


def _tasks(definition: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Task state, those inside Map and Parallel states included."""
    tasks = []
    for state in definition["States"].values():
        if state["Type"] == "Task":
            tasks.append(state)
        for nested in [state.get("ItemProcessor"), *state.get("Branches", [])]:
            if nested:
                tasks += _tasks(nested)
    return tasks


def _policy_statements(stack: Stack, logical_id: str) -> list[dict[str, Any]]:
    policies = stack.template["Resources"][logical_id]["Properties"]["Policies"]
    return [s for p in policies for s in stack.resolve(p)["Statement"]]


def _to_arn(engine: LocalEngine, target: str) -> str:
    if target.startswith("https://sqs."):
        name = target.rsplit("/", 1)[-1]
        return f"arn:aws:sqs:us-east-1:123456789012:{name}"
    if target.startswith("arn:"):
        return target
    return f"arn:aws:dynamodb:us-east-1:123456789012:table/{target}"


@pytest.mark.parametrize("machine", ["ProcessorStateMachine", "AuditStateMachine"])
def test_every_resource_the_asl_touches_is_granted(machine: str) -> None:
    with LocalEngine() as engine:
        text, _ = engine.state_machine_definition(machine)
        definition = json.loads(text)
        statements = _policy_statements(engine.stack, machine)
        needed = []
        for task in _tasks(definition):
            action, field = _INTEGRATION_ACTIONS[task["Resource"]]
            target = task["Arguments"][field]
            assert not str(target).startswith("{%"), "targets come from substitutions, not data"
            needed.append((action, _to_arn(engine, target)))
    assert needed, "the state machine has tasks"
    for action, arn in needed:
        granted = [
            s
            for s in statements
            if s["Effect"] == "Allow"
            and action in s["Action"]
            and arn in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        ]
        assert granted, f"{machine} needs {action} on {arn}"
    wildcard = [s for s in statements if s["Resource"] == "*"]
    assert {a.split(":")[0] for s in wildcard for a in s["Action"]} <= {"logs", "xray"}


def test_lock_timeout_outlasts_every_retry_of_the_process_task() -> None:
    p = {
        k: float(v)
        for k, v in Stack.from_file(ROOT / "template.yaml").parameters.items()
        if re.fullmatch(r"[\d.]+", v)
    }
    task_timeout = p["ProcessorTimeoutSeconds"] + 10
    backoff = sum(
        min(p["RetryIntervalSeconds"] * p["RetryBackoffRate"] ** n, p["RetryMaxDelaySeconds"])
        for n in range(int(p["RetryMaxAttempts"]))
    )
    assert p["LockTimeoutSeconds"] > task_timeout * (p["RetryMaxAttempts"] + 1) + backoff


@pytest.mark.parametrize(
    ("machine", "at_least"), [("ProcessorStateMachine", 40), ("AuditStateMachine", 8)]
)
def test_every_jsonata_expression_compiles_as_aws_reads_it(
    engine: LocalEngine, machine: str, at_least: int
) -> None:
    """Step Functions compiles each {% %} on its own; moto wraps it in ( ) first.

    So a top-level "$a := 1; $a" runs locally but fails to deploy: compile each
    expression exactly as written, after DefinitionSubstitutions.
    """
    import jsonata

    definition, _ = engine.state_machine_definition(machine)
    expressions: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and node.startswith("{%") and node.endswith("%}"):
            expressions.append(node[2:-2].strip())

    walk(json.loads(definition))
    assert len(expressions) > at_least
    for expression in expressions:
        jsonata.Jsonata(expression)  # raises on a syntax error


def test_the_audit_function_may_do_what_it_does_and_no_more() -> None:
    """Each AWS call the audit function makes, against the policy the template gives it."""
    with LocalEngine() as engine:
        statements = _policy_statements(engine.stack, "AuditFunction")
        table = engine.get_att("LedgerTable", "Arn")
        processor = engine.ref("ProcessorStateMachine")
        processor_name = engine.get_att("ProcessorStateMachine", "Name")
        needed = [
            ("s3:ListBucketVersions", engine.get_att("IngestBucket", "Arn")),
            ("s3:ListBucket", engine.get_att("IngestBucket", "Arn")),
            ("s3:GetBucketVersioning", engine.get_att("IngestBucket", "Arn")),
            ("dynamodb:BatchGetItem", table),
            ("dynamodb:UpdateItem", table),
            ("dynamodb:Query", f"{table}/index/OpenWork"),
            ("states:StartExecution", processor),
            (
                "states:DescribeExecution",
                f"arn:aws:states:us-east-1:123456789012:execution:{processor_name}:*",
            ),
            ("sqs:SendMessage", engine.get_att("DeadLetterQueue", "Arn")),
            ("s3:PutObject", engine.get_att("OutputBucket", "Arn") + "/reports/audit/*"),
        ]
    for action, arn in needed:
        assert any(
            action in s["Action"]
            and arn in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
            for s in statements
        ), f"AuditFunction needs {action} on {arn}"
    granted = {a for s in statements for a in s["Action"]}
    assert granted == {a for a, _ in needed}, "nothing beyond what it calls"
    assert all(s["Resource"] != "*" for s in statements)
