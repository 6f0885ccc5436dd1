"""The context object and DescribeExecution, as AWS recorded them."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from onceflow.local.engine import LocalEngine
from tests.parity.conftest import ROLE, Run


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """One stack for the module (an engine start was most of each test's time): each test's
    state machines have names of their own, and it lists, describes and reads only their
    executions."""
    with LocalEngine(function_log=io.StringIO()) as local:
        yield local


# github.com/localstack/localstack, tests/aws/services/stepfunctions/v2/
ISO_8601_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def test_the_context_object_has_redrive_count_and_an_iso_8601_start_time(run: Run) -> None:
    """Recorded: context_object/test_context_object.snapshot.json, TestSnfBase::test_variable:
    $$.Execution holds Id, Input, StartTime, Name, RoleArn and RedriveCount (0);
    StartTime is ISO 8601 ("Context object" page: "StartTime": ISO 8601, as in
    2019-03-26T20:14:13.192Z)."""
    result = run(
        {"Read": {"Type": "Pass", "Output": "{% $states.context.Execution %}", "End": True}},
        {"input-value": 0},
    )
    execution = result.output
    assert list(execution) == ["Id", "Input", "StartTime", "Name", "RoleArn", "RedriveCount"]
    assert execution["RedriveCount"] == 0
    assert execution["Input"] == {"input-value": 0}
    assert ISO_8601_UTC.match(execution["StartTime"]), execution["StartTime"]


def _described(engine: LocalEngine, definition: dict[str, object]) -> dict[str, object]:
    sfn = engine.client("stepfunctions")
    arn = sfn.create_state_machine(
        name=f"described-{len(json.dumps(definition))}",
        definition=json.dumps(definition),
        roleArn=ROLE,
    )["stateMachineArn"]
    execution = engine.execute(arn, {})
    described = dict(sfn.describe_execution(executionArn=execution.arn))
    described.pop("ResponseMetadata")
    return described


def test_describe_execution_answers_input_details_and_the_redrive_fields(
    engine: LocalEngine,
) -> None:
    """Recorded: test_sfn_api.snapshot.json, TestSnfApi::test_describe_execution (a
    succeeded execution: inputDetails {"included": true}, redriveCount 0,
    redriveStatus NOT_REDRIVABLE, "Execution is SUCCEEDED and cannot be redriven");
    base/test_base.snapshot.json, TestSnfBase::test_state_fail (a failed one:
    REDRIVABLE, no reason)."""
    succeeded = _described(engine, {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    assert succeeded["inputDetails"] == {"included": True}
    assert succeeded["redriveCount"] == 0
    assert succeeded["redriveStatus"] == "NOT_REDRIVABLE"
    assert succeeded["redriveStatusReason"] == "Execution is SUCCEEDED and cannot be redriven"
    failed = _described(
        engine, {"StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "SomeFailure"}}}
    )
    assert failed["inputDetails"] == {"included": True}
    assert (failed["redriveCount"], failed["redriveStatus"]) == (0, "REDRIVABLE")
    assert "redriveStatusReason" not in failed


def test_an_express_execution_has_awss_arn(run: Run, engine: LocalEngine) -> None:
    """Recorded: test_express_async.snapshot.json, TestExpressAsync::test_base: an EXPRESS
    execution's ARN, and its context object's Execution.Id, read
    arn:<partition>:states:<region>:<account>:express:<machine>:<name>:<id>."""
    result = run({"P": {"Type": "Pass", "Output": "{% $states.context.Execution %}", "End": True}},
                 kind="EXPRESS")  # fmt: skip
    parts = result.arn.split(":")
    assert parts[5] == "express" and len(parts) == 9
    assert parts[6].startswith("parity-") and parts[7] == result.output["Name"]
    assert re.fullmatch(r"[0-9a-f-]{36}", parts[8])
    assert result.output["Id"] == result.arn
    # (a STANDARD execution keeps arn:...:execution:<machine>:<name>)
    standard = run({"P": {"Type": "Pass", "End": True}})
    assert standard.arn.split(":")[5] == "execution" and len(standard.arn.split(":")) == 8


def test_an_express_execution_name_can_be_started_again(engine: LocalEngine) -> None:
    """AWS: an asynchronous EXPRESS workflow's "Idempotency is not automatically managed.
    Starting multiple workflows with the same name results in concurrent executions"
    (Step Functions developer guide, "Execution guarantees",
    express-at-least-once-execution.html); a STANDARD one refuses the name
    (ExecutionAlreadyExists) once its first execution has ended."""
    sfn = engine.client("stepfunctions")
    definition = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    machines = {
        kind: sfn.create_state_machine(
            name=f"again-{kind.lower()}", definition=definition, roleArn=ROLE, type=kind
        )["stateMachineArn"]
        for kind in ("EXPRESS", "STANDARD")
    }
    first = engine.execute(machines["EXPRESS"], {"n": 1}, name="same")
    second = engine.execute(machines["EXPRESS"], {"n": 2}, name="same")
    assert (first.status, second.status) == ("SUCCEEDED", "SUCCEEDED")
    assert first.arn != second.arn and first.arn.split(":")[6:8] == ["again-express", "same"]
    assert engine.execute(machines["STANDARD"], {"n": 1}, name="same").status == "SUCCEEDED"
    with pytest.raises(ClientError) as refused:
        sfn.start_execution(stateMachineArn=machines["STANDARD"], name="same", input="{}")
    assert refused.value.response["Error"]["Code"] == "ExecutionAlreadyExists"


def test_describe_execution_refuses_an_express_execution(run: Run, engine: LocalEngine) -> None:
    """Recorded: test_sfn_api_express.snapshot.json,
    TestSfnApiExpress::test_start_async_describe_history_execution: DescribeExecution
    and StopExecution of an EXPRESS execution answer InvalidArn, "Invalid Arn:
    'Resource type not valid in this context: express'" (HTTP 400). The engine's own
    record of the execution (its result) is what a local reader has instead."""
    result = run({"P": {"Type": "Pass", "End": True}}, kind="EXPRESS")
    assert result.status == "SUCCEEDED"
    sfn = engine.client("stepfunctions")
    for call in (sfn.describe_execution, sfn.stop_execution):
        with pytest.raises(ClientError) as refused:
            call(executionArn=result.arn)
        error = refused.value.response["Error"]
        assert (error["Code"], error["Message"]) == (
            "InvalidArn",
            "Invalid Arn: 'Resource type not valid in this context: express'",
        )
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_history_and_listing_refuse_an_express_execution(run: Run, engine: LocalEngine) -> None:
    """Recorded: test_sfn_api_express.snapshot.json,
    TestSfnApiExpress::test_start_async_describe_history_execution: GetExecutionHistory
    of an EXPRESS execution answers InvalidArn, "Invalid Arn: 'Resource type not valid
    in this context: express'", and ListExecutions of an EXPRESS state machine answers
    StateMachineTypeNotSupported, "This operation is not supported by this type of state
    machine" (both HTTP 400). The engine's own record is what a local reader has instead:
    the result's events are still there."""
    result = run({"P": {"Type": "Pass", "End": True}}, kind="EXPRESS")
    assert result.status == "SUCCEEDED"
    assert result.event_types()[-1] == "ExecutionSucceeded"
    sfn = engine.client("stepfunctions")
    machine = result.arn.split(":")[6]
    machine_arn = f"arn:aws:states:us-east-1:123456789012:stateMachine:{machine}"
    refusals = (
        (
            lambda: sfn.get_execution_history(executionArn=result.arn),
            ("InvalidArn", "Invalid Arn: 'Resource type not valid in this context: express'"),
        ),
        (
            lambda: sfn.list_executions(stateMachineArn=machine_arn),
            (
                "StateMachineTypeNotSupported",
                "This operation is not supported by this type of state machine",
            ),
        ),
    )
    for call, expected in refusals:
        with pytest.raises(ClientError) as refused:
            call()
        error = refused.value.response["Error"]
        assert (error["Code"], error["Message"]) == expected
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # A STANDARD machine's are still listed and read.
    standard = run({"P": {"Type": "Pass", "End": True}})
    standard_machine = standard.arn.split(":")[6]
    listed = sfn.list_executions(
        stateMachineArn=f"arn:aws:states:us-east-1:123456789012:stateMachine:{standard_machine}"
    )["executions"]
    assert [e["executionArn"] for e in listed] == [standard.arn]
    assert sfn.get_execution_history(executionArn=standard.arn)["events"]


@pytest.mark.parametrize("kind", ["STANDARD", "EXPRESS"])
def test_an_unnamed_execution_is_named_by_a_uuid(engine: LocalEngine, kind: str) -> None:
    """StartExecution API reference, name: "If you don't provide a name for the execution,
    Step Functions automatically generates a universally unique identifier (UUID) as the
    execution name." Two unnamed starts are two executions, not one named 'None'."""
    sfn = engine.client("stepfunctions")
    definition = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    machine = sfn.create_state_machine(
        name=f"unnamed-{kind.lower()}", definition=definition, roleArn=ROLE, type=kind
    )["stateMachineArn"]
    arns = [sfn.start_execution(stateMachineArn=machine)["executionArn"] for _ in range(2)]
    names = [arn.split(":")[7] for arn in arns]
    assert all(re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", n) for n in names), names
    assert names[0] != names[1]
    if kind == "STANDARD":
        described = sfn.describe_execution(executionArn=arns[0])
        assert described["name"] == names[0]


# StartExecution's name (API reference, StartExecution, Request Parameters: name): "A name
# must not contain: white space; brackets < > { } [ ]; wildcard characters ? *; special
# characters " # % \ ^ | ~ ` $ & , ; : /; control characters (U+0000-001F, U+007F-009F,
# U+FFFE-FFFF); surrogates (U+D800-DFFF); invalid characters (U+10FFFF)", length 1 to 80.
REFUSED_NAMES = [
    *(f"run{c}1" for c in ' <>{}[]?*"#%\\^|~`$&,;:/'),
    "run\t1", "run\n1", "\x00run", "run\x1f", "run\x7f", "run\x9f", "run\ufffe", "run\uffff",
]  # fmt: skip


def test_start_execution_refuses_a_name_aws_refuses(engine: LocalEngine) -> None:
    """Refused with InvalidName: the characters the API reference lists (the error code is
    the API reference's; its message "Invalid Name: '<name>'" is the one AWS recorded for
    CreateActivity, test_sfn_api_activities.snapshot.json, test_create_activity_invalid_name:
    for StartExecution not verified). Over 80 characters: a ValidationException."""
    sfn = engine.client("stepfunctions")
    arn = sfn.create_state_machine(
        name="named-executions",
        definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        roleArn=ROLE,
    )["stateMachineArn"]
    for name in REFUSED_NAMES:
        with pytest.raises(ClientError) as refused:
            sfn.start_execution(stateMachineArn=arn, name=name, input="{}")
        error = refused.value.response["Error"]
        assert (error["Code"], error["Message"]) == ("InvalidName", f"Invalid Name: '{name}'")
    with pytest.raises(ClientError) as too_long:
        sfn.start_execution(stateMachineArn=arn, name="n" * 81, input="{}")
    assert too_long.value.response["Error"]["Code"] == "ValidationException"
    assert "Member must have length less than or equal to 80" in str(too_long.value)
    # the longest name, and every character the list leaves (CloudWatch Logs' safe set too)
    for name in ("n" * 80, "audit-20261128T101500-000123", "é.+=@!'()_-😀"):
        started = sfn.start_execution(stateMachineArn=arn, name=name, input="{}")
        assert engine.wait(started["executionArn"], timeout=30).status == "SUCCEEDED"
