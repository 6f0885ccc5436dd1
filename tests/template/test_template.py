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

from onceflow.local.engine import LocalEngine
from onceflow.local.template import Stack, TemplateError, coerce_parameter
from tests.template.translate import INTEGRATION_ACTIONS, resources_of_type, tasks, translated

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
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


def test_two_stacks_in_one_account_do_not_share_a_schedule_name() -> None:
    """Scheduler names are unique per account and group: a fixed one fails the second stack."""
    # GIVEN the template as the SAM transform hands it to CloudFormation
    template = translated()
    # WHEN we look at the audit's schedule
    (schedule,) = resources_of_type(template, "AWS::Scheduler::Schedule").values()
    # THEN it carries no Name, so CloudFormation gives it one of its own per stack
    assert "Name" not in schedule["Properties"]
    assert schedule["Properties"]["Target"]["Arn"] == {"Ref": "AuditStateMachine"}


# The whole-number parameters and the range each takes. CloudFormation's Number
# type takes 1.5 too, which Lambda, Step Functions or EventBridge then refuse
# halfway through the deploy; so they are Strings that only a range matches.
WHOLE_NUMBERS = {
    "RetentionDays": (1, 36500),
    "ProcessorTimeoutSeconds": (3, 890),
    "AuditRecentCutoffHours": (0, 168),
}


def _deployed_parameters() -> dict[str, dict[str, Any]]:
    parameters: dict[str, dict[str, Any]] = translated()["Parameters"]
    return parameters


def test_every_number_parameter_is_a_whole_number() -> None:
    # GIVEN the parameters CloudFormation receives
    parameters = _deployed_parameters()
    # WHEN we list those a number goes into
    numeric = {
        name
        for name, spec in parameters.items()
        if spec["Type"] == "Number" or re.fullmatch(r"\d+", str(spec.get("Default", "")))
    }
    # THEN each is one of the whole numbers (the backoff rate, a fraction, is a constant)
    assert numeric == set(WHOLE_NUMBERS)


@pytest.mark.parametrize(("name", "bounds"), sorted(WHOLE_NUMBERS.items()))
def test_whole_number_parameters_refuse_what_the_deploy_would_fail_on(
    name: str, bounds: tuple[int, int]
) -> None:
    # GIVEN the parameter as CloudFormation receives it, and the range it stands for
    spec = _deployed_parameters()[name]
    low, high = bounds
    assert spec["Type"] == "String" and "MinValue" not in spec
    assert f"from {low} to {high}" in spec["ConstraintDescription"]
    # WHEN values are checked as CloudFormation checks them (the local engine does the same)
    accepted = [str(low), str(high), spec["Default"]]
    refused = {"1.5", f"{low}.0", "abc", "", " 1", "1e3", "-1", "+1", f"0{low}", str(high + 1)}
    if low > 0:
        refused.add(str(low - 1))
    # THEN whole numbers in range pass, as they are
    for value in accepted:
        assert coerce_parameter(name, spec, value) == value
    # AND anything else is refused with an error that names the parameter and the rule
    for value in sorted(refused):
        with pytest.raises(TemplateError) as refusal:
            coerce_parameter(name, spec, value)
        assert f"parameter {name}={value!r}" in str(refusal.value)
        assert spec["ConstraintDescription"] in str(refusal.value)
    # AND the pattern agrees with the range at every whole number near either end
    pattern = re.compile(spec["AllowedPattern"])
    for number in [*range(max(0, low - 100), low + 2000), *range(max(0, high - 2000), high + 100)]:
        assert bool(pattern.fullmatch(str(number))) == (low <= number <= high), number


FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:resize_images-2"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        (FUNCTION, True),
        (f"{FUNCTION}:live", True),
        (f"{FUNCTION}:7", True),
        (f"{FUNCTION}:$LATEST", True),
        ("arn:aws-cn:lambda:cn-north-1:123456789012:function:mine", True),
        ("resize_images-2", False),  # a bare name: the dashboard and IAM need the ARN
        ("123456789012:function:resize_images-2", False),
        ("arn:aws:lambda:us-east-1:1:function:mine", False),
        ("arn:aws:lambda:us-east-1:123456789012:function:", False),
        (f"{FUNCTION}:", False),
        (f"{FUNCTION}:live:extra", False),
        ("arn:aws:lambda:us-east-1:123456789012:layer:mine:1", False),
        ("arn:aws:states:us-east-1:123456789012:stateMachine:mine", False),
        (f" {FUNCTION}", False),
    ],
)
def test_processor_function_arn_is_empty_or_a_whole_function_arn(
    value: str, accepted: bool
) -> None:
    # GIVEN the parameter as CloudFormation receives it
    spec = _deployed_parameters()["ProcessorFunctionArn"]
    # WHEN the value is checked
    # THEN only a full Lambda function ARN (with or without a qualifier) or nothing passes
    if accepted:
        assert coerce_parameter("ProcessorFunctionArn", spec, value) == value
    else:
        with pytest.raises(TemplateError, match="parameter ProcessorFunctionArn="):
            coerce_parameter("ProcessorFunctionArn", spec, value)


def test_constants_reach_the_asl_and_functions_as_numbers() -> None:
    """The Mappings' constants are strings, as the parameters' Refs were: check they still
    land as JSON numbers where the ASL expects one."""
    # GIVEN the template's constants (Mappings) and its defaults
    constants = Stack.from_file(ROOT / "template.yaml").template["Mappings"]["Constants"]["Values"]
    # WHEN the local engine builds the stack
    with LocalEngine() as engine:
        processor = json.loads(engine.state_machine_definition("ProcessorStateMachine")[0])
        audit = json.loads(engine.state_machine_definition("AuditStateMachine")[0])
        function = engine.stack.function_properties("AuditFunction")
    # THEN the retry of the Process task and the audit's concurrency are JSON numbers
    retries = [
        (r.get("IntervalSeconds"), r.get("MaxAttempts"), r.get("MaxDelaySeconds"))
        for r in processor["States"]["Process"]["Retry"]
    ]
    interval, ceiling = (
        int(constants["RetryIntervalSeconds"]),
        int(constants["RetryMaxDelaySeconds"]),
    )
    assert (interval, 3, ceiling) in retries  # ProcessRetries: 3 under STANDARD
    maps = [s for s in audit["States"].values() if s["Type"] == "Map"]
    assert maps and all(s["MaxConcurrency"] == int(constants["AuditMaxConcurrency"]) for s in maps)
    tolerated = int(constants["AuditToleratedFailurePercentage"])
    assert all(s["ToleratedFailurePercentage"] == tolerated for s in maps)
    assert function["Environment"]["Variables"]["MAX_ATTEMPTS"] == constants["MaxAttempts"]


def _deployed_runtime() -> str:
    runtime = Stack.from_file(ROOT / "template.yaml").template["Globals"]["Function"]["Runtime"]
    assert isinstance(runtime, str) and re.fullmatch(r"python3\.\d+", runtime), runtime
    return runtime


def _elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an ELF file"
    return int.from_bytes(header[18:20], "little")


def _wheel_tag_fits(tag: str, version: str) -> bool:
    """Pure Python, or CPython `version` (e.g. "313") on manylinux x86_64."""
    python_tag, abi_tag, platform = tag.split("-")
    if platform == "any":
        return abi_tag == "none" and python_tag.startswith("py")
    return (
        python_tag == f"cp{version}"
        and abi_tag in (f"cp{version}", "abi3")
        and re.fullmatch(r"manylinux(1|2010|2014|_2_\d+)_x86_64", platform) is not None
    )


def _glibc(tag: str) -> tuple[int, int]:
    """The glibc a wheel tag needs; manylinux2014 is 2.17, which every Lambda Python has."""
    platform = tag.split("-")[2]
    if platform == "any":
        return (0, 0)
    legacy = {"manylinux1_x86_64": 5, "manylinux2010_x86_64": 12, "manylinux2014_x86_64": 17}
    if platform in legacy:
        return (2, legacy[platform])
    major, minor = re.findall(r"manylinux_(\d+)_(\d+)_", platform)[0]
    return (int(major), int(minor))


@pytest.mark.slow
def test_sam_build_packages_binaries_for_the_deployed_runtime(tmp_path: Path) -> None:
    """This machine's Python is not the deployed one, and there is no Docker: the build
    must still install the wheels of the deployed runtime, not of the Python running it."""
    # GIVEN the runtime template.yaml deploys, and its CPython tags
    runtime = _deployed_runtime()
    version = runtime.removeprefix("python").replace(".", "")
    build_dir = tmp_path / "build"
    # WHEN sam build runs as `make build` runs it: no parameter override, no container
    result = subprocess.run(
        [str(BIN / "sam"), "build", "--build-dir", str(build_dir), "--no-cached"],
        cwd=ROOT,
        env={**ENV, "BUILD_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # THEN both packages hold the code and its dependencies
    assert result.returncode == 0, result.stdout + result.stderr
    for function in ("ProcessorFunction", "AuditFunction"):
        package = build_dir / function
        assert (package / "service" / "handlers" / "processor.py").is_file(), function
        assert (package / "PIL").is_dir() and (package / "aws_lambda_powertools").is_dir()
        assert not list(package.glob("service/**/__pycache__")), "no bytecode of the build's Python"
        # AND every extension module is for the deployed CPython on x86_64 Linux
        modules = [p for p in package.rglob("*.so") if ".cpython-" in p.name or ".abi3." in p.name]
        assert any(p.parent.name == "PIL" for p in modules), "Pillow's binary modules are there"
        for module in modules:
            suffixes = (f".cpython-{version}-x86_64-linux-gnu.so", ".abi3.so")
            assert module.name.endswith(suffixes), module
        # AND every shared object is an x86-64 ELF file (e_machine 62, EM_X86_64)
        for binary in [p for p in package.rglob("*.so*") if p.is_file()]:
            assert _elf_machine(binary) == 62, binary
        # AND every wheel installed was one for that runtime on manylinux x86_64, or pure Python
        wheels = list(package.glob("*.dist-info/WHEEL"))
        assert len(wheels) >= 3, wheels
        for wheel in wheels:
            tags = re.findall(r"^Tag: (\S+)$", wheel.read_text(encoding="utf-8"), re.MULTILINE)
            assert tags and all(_wheel_tag_fits(tag, version) for tag in tags), (wheel, tags)
            # A wheel may name several platforms; one must be old enough for Lambda.
            assert any(_glibc(tag) <= (2, 17) for tag in tags), (wheel, tags)
    shutil.rmtree(build_dir)


def test_the_deployed_runtime_is_fixed_in_the_template_not_a_parameter() -> None:
    """A runtime chosen at deploy time could differ from the one the package was built for."""
    # GIVEN the template as the local engine and sam read it
    stack = Stack.from_file(ROOT / "template.yaml")
    # WHEN we look for a runtime parameter
    # THEN there is none, and Globals names a current Lambda Python
    assert "PythonRuntime" not in stack.parameters
    assert _deployed_runtime() in {"python3.12", "python3.13"}


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
        for task in tasks(definition):
            action, field = INTEGRATION_ACTIONS[task["Resource"]]
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


@pytest.mark.parametrize("workflow", ["STANDARD", "EXPRESS"])
def test_lock_timeout_outlasts_every_retry_of_the_process_task(workflow: str) -> None:
    # GIVEN the constants and the retries the workflow type gets, at the default timeout
    stack = Stack.from_file(ROOT / "template.yaml")
    c = {k: float(v) for k, v in stack.template["Mappings"]["Constants"]["Values"].items()}
    retries = int(stack.template["Mappings"]["ProcessRetries"][workflow]["RetryMaxAttempts"])
    task_timeout = float(stack.parameters["ProcessorTimeoutSeconds"]) + 10
    # WHEN the Process task's worst case is added up
    backoff = sum(
        min(c["RetryIntervalSeconds"] * c["RetryBackoffRate"] ** n, c["RetryMaxDelaySeconds"])
        for n in range(retries)
    )
    # THEN the lock's floor outlasts it (the ASL raises the lock above it for longer timeouts)
    assert c["LockTimeoutSeconds"] > task_timeout * (retries + 1) + backoff


@pytest.mark.parametrize(
    ("machine", "at_least"), [("ProcessorStateMachine", 40), ("AuditStateMachine", 8)]
)
def test_every_jsonata_expression_compiles_as_aws_reads_it(
    engine: LocalEngine, machine: str, at_least: int
) -> None:
    """Step Functions compiles each {% %} on its own; moto wraps it in ( ) first.

    So a top-level "$a := 1; $a" runs locally but fails to deploy: compile each
    expression exactly as written, after DefinitionSubstitutions, with jsonata
    2.0.6 (evaluated without $states, so only a syntax error, code S..., counts).
    """
    from onceflow.local import jsonata_node

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
        try:
            jsonata_node.evaluate(expression, cache=False)
        except jsonata_node.JsonataError as exc:
            assert not (exc.code or "").startswith("S"), f"{expression!r}: {exc}"
        except jsonata_node.UnsupportedResult:
            pass  # it compiled


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
            ("dynamodb:Query", f"{table}/index/ObjectContent"),
            ("states:StartExecution", processor),
            (
                "states:DescribeExecution",
                f"arn:aws:states:us-east-1:123456789012:execution:{processor_name}:*",
            ),
            ("sqs:SendMessage", engine.get_att("DeadLetterQueue", "Arn")),
            ("s3:PutObject", engine.get_att("OutputBucket", "Arn") + "/reports/audit/*"),
            # The Distributed Map's exported results, and where inventory reports arrive.
            ("s3:GetObject", engine.get_att("OutputBucket", "Arn") + "/reports/audit-runs/*"),
            ("s3:ListBucket", engine.get_att("OutputBucket", "Arn")),
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


def _inventory_max_age_hours() -> Any:
    from tests.template.translate import translated

    for resource in translated()["Resources"].values():
        variables = resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if "AUDIT_INVENTORY_MAX_AGE_HOURS" in variables:
            return variables["AUDIT_INVENTORY_MAX_AGE_HOURS"]["Fn::If"][1]
    raise AssertionError("no function reads AUDIT_INVENTORY_MAX_AGE_HOURS")


def test_the_audits_results_and_inventory_reports_do_not_pile_up() -> None:
    from tests.template.translate import translated

    rules = translated()["Resources"]["OutputBucket"]["Properties"]["LifecycleConfiguration"]
    by_prefix = {r["Prefix"]: r for r in rules["Rules"]}
    # Only what the audit writes expires: outputs and audit reports stay
    assert set(by_prefix) == {"reports/audit-runs/", "inventory/"}
    assert by_prefix["reports/audit-runs/"]["ExpirationInDays"] == 30
    # A report is kept a day longer than the audit reads it (48 h Daily, 192 h Weekly:
    # AUDIT_INVENTORY_MAX_AGE_HOURS), and no longer: each day kept stores every object's row
    _, *kept_days = by_prefix["inventory/"]["ExpirationInDays"]["Fn::If"]
    condition, *read_hours = _inventory_max_age_hours()["Fn::If"]
    assert condition == "WeeklyInventory" and kept_days == [9, 3]
    margins = [days * 24 - int(hours) for days, hours in zip(kept_days, read_hours, strict=True)]
    assert margins == [24, 24]
    assert all(r["Status"] == "Enabled" for r in rules["Rules"])
