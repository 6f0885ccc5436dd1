"""The SQS batch mode in the template: the generated definition, the pipe, the queue, IAM.

AWS facts these tests hold the template to:
- REQUEST_RESPONSE invokes with StartSyncExecution and is not supported for STANDARD
  workflows; FIRE_AND_FORGET uses StartExecution (AWS::Pipes::Pipe
  PipeTargetStateMachineParameters, CloudFormation template reference). The pipe's
  role therefore needs states:StartSyncExecution on the batch workflow; the action
  name is the API's, as CDK's pipes target grants it (aws-cdk, aws-pipes-targets-alpha
  SfnStateMachine.grantPush); the Pipes permissions page's target section was not read.
- A Step Functions target receives the whole batch as one JSON array, limited by the
  262,144 characters of its input (eb-pipes-batching-concurrency.html); the pipe hides
  a batch for the queue's visibility timeout (eb-pipes-sqs.html), and a pipe execution
  lasts at most five minutes (eb-pipes-batching-concurrency.html).
- The BatchSize of an SQS source is 1 to 10000 (PipeSourceSqsQueueParameters).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onceflow.asl import END_OUTCOMES, batch_definition
from onceflow.asl.batch_definition import (
    RETRIED,
    RETRIED_WHEN,
    SETTLED,
    DefinitionError,
    parse_definition,
    render_definition,
)
from onceflow.asl.worstcase import EXPRESS_LIMIT_SECONDS, worst_case_seconds
from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.template import Stack, TemplateError
from tests.template.translate import INTEGRATION_ACTIONS, tasks, translated

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE: Path = DEFAULT_TEMPLATE
BATCH = "BatchProcessorStateMachine"
EXPRESS_LIMITS = {"ProcessorTimeoutSeconds": "40"}
BATCH_MODE = {"SqsSource": "create", "SqsBatchMode": "true", **EXPRESS_LIMITS}
STEP_FUNCTIONS_INPUT = 262_144
RECORD_OVERHEAD = 2048  # messageId, receipt handle, attributes, ARNs of one pipe record


def _array(n: int) -> int:
    """Bytes of a batch of n records besides their bodies: records, commas, brackets."""
    return n * RECORD_OVERHEAD + (n - 1) + 2


@pytest.fixture(scope="module")
def batch_engine() -> Iterator[LocalEngine]:
    with LocalEngine(
        TEMPLATE, BATCH_MODE, function_log=io.StringIO(), stack_name="batch-mode"
    ) as engine:
        yield engine


def _definition(engine: LocalEngine) -> dict[str, Any]:
    text, workflow_type = engine.state_machine_definition(BATCH)
    assert workflow_type == "EXPRESS"
    return dict(json.loads(text))


# ---- the generated definition -----------------------------------------------------


def test_the_committed_batch_definition_is_what_the_processor_generates() -> None:
    command = [sys.executable, "-m", "onceflow.asl.batch_definition", "--check"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert batch_definition.generate() == batch_definition.BATCH.read_text(encoding="utf-8")


def test_check_fails_naming_the_file_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a batch definition someone edited by hand
    stale = tmp_path / "batch.asl.json"
    stale.write_text(batch_definition.generate().replace("EachMessage", "Edited"), "utf-8")
    monkeypatch.setattr(batch_definition, "BATCH", stale)
    monkeypatch.setattr(batch_definition, "PROJECT_ROOT", tmp_path)
    # WHEN it is checked, THEN the check fails, says how to fix it, and writes nothing
    assert batch_definition.main(["--check"]) == 1
    assert "run: python -m onceflow.asl.batch_definition" in capsys.readouterr().err
    assert "Edited" in stale.read_text("utf-8")
    # AND generating it again makes the check pass
    assert batch_definition.main([]) == 0
    assert batch_definition.main(["--check"]) == 0


def test_substitutions_are_kept_verbatim_quoted_or_not() -> None:
    processor = batch_definition.PROCESSOR.read_text(encoding="utf-8")
    batch = batch_definition.BATCH.read_text(encoding="utf-8")
    # the parser gives back exactly the text it read (a number placeholder stays unquoted)
    assert render_definition(parse_definition(processor)) == processor
    names = set(re.findall(r"\$\{(\w+)\}", processor))
    # (and the source queue, which only the batch's DeleteInvalidMessage names)
    assert set(re.findall(r"\$\{(\w+)\}", batch)) == names | {"SourceQueueUrl"}
    unquoted = re.compile(r'"(\w+)": \$\{(\w+)\}')
    assert unquoted.findall(batch) == unquoted.findall(processor)
    assert unquoted.findall(batch), "the processor's retrier has unquoted numbers"


def test_every_execution_id_becomes_the_message_lock_owner() -> None:
    processor = batch_definition.PROCESSOR.read_text(encoding="utf-8")
    batch = batch_definition.BATCH.read_text(encoding="utf-8")
    uses = processor.count("$states.context.Execution.Id")
    assert uses > 5
    # Only the first state of an iteration reads it, to make the owner of its message
    assert batch.count("$states.context.Execution.Id") == 1
    # (and TakeOverAtMaxAttempts, the batch's own, writes it as the lock owner)
    assert batch.count("$lockOwner") == uses + 1
    for forbidden in ("Execution.Input", "Execution.Name", "Execution.StartTime"):
        assert forbidden not in batch


def test_every_end_state_says_whether_its_message_is_kept() -> None:
    processor = parse_definition(batch_definition.PROCESSOR.read_text(encoding="utf-8"))
    per_message = batch_definition.per_message_states()["States"]
    batch = parse_definition(batch_definition.BATCH.read_text(encoding="utf-8"))
    states = batch["States"]["EachMessage"]["ItemProcessor"]["States"]
    ends = {n for n, s in processor["States"].items() if s["Type"] in ("Succeed", "Fail")}
    fails = {n for n in ends if processor["States"][n]["Type"] == "Fail"}
    end_tasks = {n for n, s in processor["States"].items() if s.get("End") is True}
    # GIVEN every end state of the processor, THEN the batch has each under its name:
    # a Succeed state as a Succeed state; a Fail state as the same Fail state, kept,
    # inside a one-branch Parallel Log<name> whose Catch ends the message; an end Task
    # (MarkComplete) goes on to a Succeed state named by its outcome (Processed)
    assert end_tasks == set(END_OUTCOMES) == {"MarkComplete"}
    outcomes = {END_OUTCOMES[n] for n in end_tasks}
    assert {n for n, s in states.items() if s["Type"] == "Succeed"} == (ends - fails) | outcomes | {
        "MessageEnds"
    }
    for task in end_tasks:
        assert "End" not in states[task] and states[task]["Next"] == END_OUTCOMES[task]
        # its failures still lead to their named states (LockLost, LedgerUnavailable)
        caught = [c["Next"].removeprefix("Log") for c in states[task]["Catch"]]
        assert caught == [c["Next"] for c in per_message[task]["Catch"]]
        assert {"LockLost", "LedgerUnavailable"} <= set(caught)
    ends |= outcomes
    for name in fails:
        wrapper = states[f"Log{name}"]
        assert wrapper["Type"] == "Parallel"
        (branch,) = wrapper["Branches"]
        # the same state as the source writes it for the batch (LedgerUnavailable's comment
        # says what holds there: a !machine value)
        kept = per_message[name]
        assert {k: v for k, v in kept.items() if k != "Comment"} == {
            k: v for k, v in processor["States"][name].items() if k != "Comment"
        }
        # raising its own name where the source computes the error (a States.* code a
        # Fail state raises is not verified on AWS; the message's outcome carries it)
        computed = str(kept.get("Error", "")).startswith("{%")
        raised = {**kept, "Error": name} if computed else kept
        assert branch == {"StartAt": name, "States": {name: raised}}
        (catch,) = wrapper["Catch"]
        assert catch["ErrorEquals"] == ["States.ALL"] and catch["Next"] == "MessageEnds"
        assert all(s.get("Next") != name for s in states.values()), name
    for name in ends - {"Duplicate"}:
        output = states[f"Log{name}"]["Catch"][0]["Output"] if name in fails else None
        output = output or states[name]["Output"]
        assert f"'outcome': \"{name}\"" in output
        if name in RETRIED_WHEN:
            assert f"'retry': {RETRIED_WHEN[name]}" in output, name
            continue
        assert ("'retry': true" in output) == (name in RETRIED), name
        assert ("'retry': false" in output) == (name in SETTLED), name
    # AND a Fail state's Error and Cause reach the outcome through the Catch
    # (Failed computes its code: the outcome reads it where the processor's state does)
    assert "'error': $failure.code" in states["LogFailed"]["Catch"][0]["Output"]
    assert "'error': $states.errorOutput.Error" in states["LogLockLost"]["Catch"][0]["Output"]
    assert "'cause': $states.errorOutput.Cause" in states["LogFailed"]["Catch"][0]["Output"]
    # AND a refused Claim reads the row back (consistent) before any takeover: a settled
    # row is a Duplicate at once, any other goes to Reclaim, whose refusal is a Duplicate
    assert states["Claim"]["Catch"][0]["Next"] == "ReadDuplicateRow"
    read = states["ReadDuplicateRow"]
    assert read["Resource"] == "arn:aws:states:::dynamodb:getItem"
    assert read["Arguments"]["ConsistentRead"] is True
    assert read["Next"] == "SettledOrReclaim"
    choose = states["SettledOrReclaim"]
    assert [c["Next"] for c in choose["Choices"]] == ["Duplicate"]
    assert "PROCESSED" in choose["Choices"][0]["Condition"]
    assert choose["Default"] == "Reclaim"
    # AND a refused Reclaim of a row at MaxAttempts takes its lock to dead-letter it
    assert states["Reclaim"]["Catch"][0]["Next"] == "AtMaxAttempts"
    at_max = states["AtMaxAttempts"]
    assert [c["Next"] for c in at_max["Choices"]] == ["TakeOverAtMaxAttempts"]
    assert at_max["Default"] == "Duplicate"
    take_over = states["TakeOverAtMaxAttempts"]
    assert take_over["Resource"] == "arn:aws:states:::dynamodb:updateItem"
    assert "attempts >= :max_attempts" in take_over["Arguments"]["ConditionExpression"]
    assert "ADD" not in take_over["Arguments"]["UpdateExpression"]
    assert take_over["Next"] == "SendToDLQ"
    assert take_over["Catch"][0] == {
        "ErrorEquals": ["DynamoDB.ConditionalCheckFailedException"],
        "Next": "Duplicate",
    }
    # AND no ledger outage is dead-lettered: each goes to LedgerUnavailable, whose message
    # stays in the queue
    for name, state in states.items():
        for catch in state.get("Catch", []):
            if "'condition': 'LedgerUnavailable'" in str(catch.get("Assign", {})):
                assert catch["Next"] == "LogLedgerUnavailable", name
    assert "PROCESSED" in states["Duplicate"]["Output"]


def _processor() -> dict[str, Any]:
    """The source's per-message states as the batch runs them."""
    return batch_definition.per_message_states()


def test_the_generator_refuses_a_processor_it_cannot_translate() -> None:
    # A context field that would name the batch, not the message
    reads_input = _processor()
    reads_input["States"]["MarkComplete"]["Output"] = "{% $states.context.Execution.Input %}"
    with pytest.raises(DefinitionError, match=r"Execution\.Input"):
        batch_definition.batch_definition(reads_input)
    # An end Task whose outcome nobody named
    task_end = _processor()
    task_end["States"]["MarkSuperseded"]["End"] = True
    del task_end["States"]["MarkSuperseded"]["Next"]
    with pytest.raises(DefinitionError, match="MarkSuperseded is a Task: name its outcome"):
        batch_definition.batch_definition(task_end)
    # An end state nobody decided about
    new_end = _processor()
    new_end["States"]["Abandoned"] = {"Type": "Fail", "Error": "Abandoned"}
    with pytest.raises(DefinitionError, match="Abandoned is neither settled nor retried"):
        batch_definition.batch_definition(new_end)
    # JSONPath
    jsonpath = _processor()
    jsonpath["QueryLanguage"] = "JSONPath"
    with pytest.raises(DefinitionError, match="JSONata"):
        batch_definition.batch_definition(jsonpath)
    # A Duplicate that says nothing of its message
    silent = _processor()
    silent["States"]["Duplicate"]["Output"] = "{% {'status': 'DUPLICATE'} %}"
    with pytest.raises(DefinitionError, match="Duplicate makes no outcome in the batch"):
        batch_definition.batch_definition(silent)


# ---- parameters and rules ----------------------------------------------------


def test_batch_mode_is_refused_without_the_express_limits() -> None:
    # The batch workflow is EXPRESS: the five-minute rule applies to it
    with pytest.raises(TemplateError, match="ExpressFitsInFiveMinutes"):
        Stack.from_file(TEMPLATE, {"SqsSource": "create", "SqsBatchMode": "true"})
    # Without an SQS source the stack makes its own queue for the S3 and custom events
    # (tests/template/test_s3_batch_template.py)
    assert Stack.from_file(TEMPLATE, {"SqsBatchMode": "true", **EXPRESS_LIMITS}).resource_enabled(
        "SourceQueue"
    )
    # The default keeps today's pipe: no EXPRESS rule for a STANDARD processor
    Stack.from_file(TEMPLATE, {"SqsSource": "create"})


def test_the_batch_size_is_the_pipes_largest() -> None:
    # GIVEN the constant that was the parameter SqsBatchSize (docs/operate.md, Constants)
    constants = Stack.from_file(TEMPLATE).template["Mappings"]["Constants"]["Values"]
    # THEN it is the largest batch an SQS pipe source reads, which the window fills
    assert constants["SqsBatchSize"] == "10"
    stack = Stack.from_file(TEMPLATE, BATCH_MODE)
    pipe = stack.template["Resources"]["SourcePipe"]["Properties"]
    size = pipe["SourceParameters"]["SqsQueueParameters"]["BatchSize"]
    assert stack.resolve(size) == "10"


def test_every_parameter_set_the_express_rule_allows_fits_in_five_minutes(
    batch_engine: LocalEngine,
) -> None:
    # GIVEN the largest values the rule allows and the largest of those it leaves free
    rule = Stack.from_file(TEMPLATE).template["Rules"]["ExpressFitsInFiveMinutes"]
    largest = {}
    for assertion in rule["Assertions"]:
        values, ref = assertion["Assert"]["Fn::Contains"]
        largest[ref["Ref"]] = max((str(v) for v in values), key=int)
    parameters = {**BATCH_MODE, **largest}
    with LocalEngine(
        TEMPLATE, parameters, function_log=io.StringIO(), stack_name="batch-worst-case"
    ) as engine:
        definition = _definition(engine)
    # WHEN the worst case of one message is computed (every message of a batch runs at once)
    each = definition["States"]["EachMessage"]
    assert each["MaxConcurrency"] >= 10
    worst = worst_case_seconds(each["ItemProcessor"])
    # THEN it stays under five minutes
    assert 0 < worst < EXPRESS_LIMIT_SECONDS, worst


def test_the_receive_budget_exceeds_max_attempts() -> None:
    """Each attempt takes one receive and one more dead-letters a row whose last attempt
    died (P11): a budget at or below MaxAttempts would move unsettled work to the source
    DLQ. Both are constants now (once the rule SourceQueueCoversMaxAttempts)."""
    stack = Stack.from_file(TEMPLATE, BATCH_MODE)
    queue = stack.template["Resources"]["SourceQueue"]["Properties"]
    receives = int(stack.resolve(queue["RedrivePolicy"]["maxReceiveCount"]))
    assert receives >= int(stack.setting("MaxAttempts")) + 1


def test_the_created_queue_hides_a_batch_six_times_its_longest_run_and_past_its_lock(
    batch_engine: LocalEngine,
) -> None:
    """AWS asks an SQS source's visibility timeout to be at least six times what its
    consumer may take, so that a throttled invocation can be retried (Lambda,
    services-sqs-configure.html; the Pipes SQS page names no figure). A pipe's
    synchronous EXPRESS target runs up to five minutes."""
    attributes = batch_engine.client("sqs").get_queue_attributes(
        QueueUrl=batch_engine.ref("SourceQueue"), AttributeNames=["VisibilityTimeout"]
    )["Attributes"]
    visibility = int(attributes["VisibilityTimeout"])
    assert visibility >= 6 * EXPRESS_LIMIT_SECONDS
    # AND the batch's lock is capped below it (tests/workflow/test_batch_mode.py measures
    # the lock a claim writes)
    states = _definition(batch_engine)["States"]["EachMessage"]["ItemProcessor"]["States"]
    (lock,) = [
        c["Assign"]["lockSeconds"]
        for c in states["Claim"]["Catch"]
        if "lockSeconds" in c.get("Assign", {})
    ]
    assert lock.endswith(", 300 + (40 + 10) + 60]) %}")
    assert lock[3:-3] in states["Claim"]["Arguments"]["Item"]  # Claim's own lock
    assert visibility > 300 + (40 + 10) + 60


# ---- the pipe, the queue and the roles as deployed ------------------------------------


def _statements(engine: LocalEngine, logical_id: str) -> list[dict[str, Any]]:
    resource = engine.stack.template["Resources"][logical_id]["Properties"]
    policies = resource["Policies"]
    documents = [p.get("PolicyDocument", p) for p in policies]
    return [s for d in engine.stack.resolve(documents) for s in d["Statement"]]


def test_the_pipe_runs_the_batch_workflow_synchronously(batch_engine: LocalEngine) -> None:
    [pipe] = batch_engine.pipes.values()
    batch = batch_engine.ref(BATCH)
    assert pipe["Target"] == batch
    assert pipe["TargetParameters"]["StepFunctionStateMachineParameters"] == {
        "InvocationType": "REQUEST_RESPONSE"
    }
    assert str(pipe["SourceParameters"]["SqsQueueParameters"]["BatchSize"]) == "10"
    allowed = [s for s in _statements(batch_engine, "PipeRole") if s["Effect"] == "Allow"]
    starts = [s for s in allowed if str(s["Action"]).startswith("states:")]
    assert starts == [{"Effect": "Allow", "Action": "states:StartSyncExecution", "Resource": batch}]
    # The queue hides a batch longer than the five minutes a synchronous run may take
    attributes = batch_engine.client("sqs").get_queue_attributes(
        QueueUrl=batch_engine.ref("SourceQueue"), AttributeNames=["All"]
    )["Attributes"]
    assert int(attributes["VisibilityTimeout"]) > 300
    largest = int(attributes["MaximumMessageSize"])
    assert 10 * 2 * largest + _array(10) <= STEP_FUNCTIONS_INPUT


def test_the_default_pipe_is_unchanged() -> None:
    parameters = {"SqsSource": "create"}
    with LocalEngine(
        TEMPLATE, parameters, function_log=io.StringIO(), stack_name="default-pipe"
    ) as engine:
        [pipe] = engine.pipes.values()
        assert pipe["Target"] == engine.ref("ProcessorStateMachine")
        assert pipe["TargetParameters"]["StepFunctionStateMachineParameters"] == {
            "InvocationType": "FIRE_AND_FORGET"
        }
        assert str(pipe["SourceParameters"]["SqsQueueParameters"]["BatchSize"]) == "1"
        assert engine.ref(BATCH) == ""  # not created
        attributes = engine.client("sqs").get_queue_attributes(
            QueueUrl=engine.ref("SourceQueue"), AttributeNames=["All"]
        )["Attributes"]
        assert (attributes["VisibilityTimeout"], attributes["MaximumMessageSize"]) == (
            "60",
            "65536",
        )
        starts = [
            s
            for s in _statements(engine, "PipeRole")
            if str(s.get("Action", "")).startswith("states:")
        ]
        assert [s["Action"] for s in starts] == ["states:StartExecution"]


def test_each_batch_size_gets_the_largest_message_a_whole_batch_fits() -> None:
    queue = Stack.from_file(TEMPLATE).template["Resources"]["SourceQueue"]["Properties"]
    _, chosen, single = queue["MaximumMessageSize"]["Fn::If"]
    index, sizes = chosen["Fn::Select"]
    assert index == {"Fn::FindInMap": ["Constants", "Values", "SqsBatchSize"]}
    sizes = [int(size) for size in sizes]  # strings in the template (checkov)
    assert single == 65536 == sizes[1]  # one message: today's limit
    for n in range(1, 11):
        # each body JSON-escaped to at most twice its size, plus the record around it
        fits = (STEP_FUNCTIONS_INPUT - _array(n)) // (2 * n) // 1024 * 1024
        assert sizes[n] == min(65536, fits), n
        assert n * (2 * sizes[n]) + _array(n) <= STEP_FUNCTIONS_INPUT


def test_every_resource_the_batch_workflow_touches_is_granted(batch_engine: LocalEngine) -> None:
    definition = _definition(batch_engine)
    statements = _statements(batch_engine, BATCH)
    table = batch_engine.get_att("LedgerTable", "Arn")
    arns = {
        batch_engine.ref("LedgerTable"): table,
        batch_engine.ref("DeadLetterQueue"): batch_engine.get_att("DeadLetterQueue", "Arn"),
        batch_engine.ref("SourceQueue"): batch_engine.get_att("SourceQueue", "Arn"),
    }
    found = tasks(definition)
    assert {t["Resource"] for t in found} == set(INTEGRATION_ACTIONS)
    for task in found:
        action, field = INTEGRATION_ACTIONS[task["Resource"]]
        target = str(task["Arguments"][field])
        assert not target.startswith("{%"), "targets come from substitutions, not data"
        arn = arns.get(target, target)
        assert any(
            s["Effect"] == "Allow"
            and action in s["Action"]
            and arn in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
            for s in statements
        ), f"{BATCH} needs {action} on {arn}"
    wildcard = [s for s in statements if s["Resource"] == "*"]
    assert {a.split(":")[0] for s in wildcard for a in s["Action"]} <= {"logs", "xray"}


def test_a_queue_the_user_brings_is_the_one_an_invalid_message_is_deleted_from() -> None:
    # GIVEN the batch mode over a queue the stack does not own (SqsSource=<ARN>)
    arn = "arn:aws:sqs:eu-west-1:210987654321:orders"
    stack = Stack.from_file(
        DEFAULT_TEMPLATE, {**BATCH_MODE, "SqsSource": arn, "RetentionDays": "30"}
    )
    machine = stack.template["Resources"][BATCH]["Properties"]
    # WHEN DeleteInvalidMessage's queue and the role's grants are resolved
    url = stack.resolve(machine["DefinitionSubstitutions"]["SourceQueueUrl"])
    granted = [
        stack.resolve(s)
        for p in machine["Policies"]
        for s in p.get("PolicyDocument", p)["Statement"]
        if isinstance(s, dict) and "sqs:DeleteMessage" in s.get("Action", [])
    ]
    # THEN it is that queue's URL, as SQS writes it (https://sqs.REGION.amazonaws.com/
    # ACCOUNT/NAME), and the role may delete from that queue alone
    assert url == "https://sqs.eu-west-1.amazonaws.com/210987654321/orders"
    assert [s["Resource"] for s in granted] == [arn]


def test_every_jsonata_expression_compiles_as_aws_reads_it(batch_engine: LocalEngine) -> None:
    """Each {% %} on its own, after substitution, with jsonata 2.0.6 (see test_template)."""
    from onceflow.local import jsonata_node

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

    walk(_definition(batch_engine))
    assert len(expressions) > 50
    for expression in expressions:
        try:
            jsonata_node.evaluate(expression, cache=False)
        except jsonata_node.JsonataError as exc:
            assert not (exc.code or "").startswith("S"), f"{expression!r}: {exc}"
        except jsonata_node.UnsupportedResult:
            pass  # it compiled


# ---- what deploys ------------------------------------------------------------


def test_sam_translates_batch_mode_into_an_express_machine_and_a_synchronous_pipe() -> None:
    resources = translated(BATCH_MODE)["Resources"]
    machine = resources[BATCH]
    assert machine["Type"] == "AWS::StepFunctions::StateMachine"
    assert machine["Condition"] == "UseSqsBatchMode"
    assert machine["Properties"]["StateMachineType"] == "EXPRESS"
    assert machine["Properties"]["DefinitionS3Location"]["Key"] == "statemachines/batch.asl.json"
    processor = resources["ProcessorStateMachine"]["Properties"]
    assert machine["Properties"]["TracingConfiguration"] == processor["TracingConfiguration"]
    # AND the same substitutions but the retries (the batch workflow is always EXPRESS)
    # and the source queue's URL (DeleteInvalidMessage), the one the pipe reads
    substitutions = dict(machine["Properties"]["DefinitionSubstitutions"])
    assert substitutions.pop("RetryMaxAttempts") == {
        "Fn::FindInMap": ["ProcessRetries", "EXPRESS", "RetryMaxAttempts"]
    }
    queue_url = substitutions.pop("SourceQueueUrl")
    assert queue_url["Fn::If"][:2] == ["CreateSourceQueue", {"Ref": "SourceQueue"}]
    assert substitutions == {
        k: v for k, v in processor["DefinitionSubstitutions"].items() if k != "RetryMaxAttempts"
    }
    # AND it logs to the processor's log group (its metric filters), at its own level
    logging = machine["Properties"]["LoggingConfiguration"]
    assert logging["Destinations"] == processor["LoggingConfiguration"]["Destinations"]
    assert logging["Level"] == {"Fn::If": ["FullObservability", "ALL", "ERROR"]}
    role = json.dumps(resources[f"{BATCH}Role"]["Properties"]["Policies"])
    assert "dynamodb:GetItem" in role
    pipe = resources["SourcePipe"]["Properties"]
    assert pipe["TargetParameters"]["StepFunctionStateMachineParameters"]["InvocationType"] == {
        "Fn::If": ["UseSqsBatchMode", "REQUEST_RESPONSE", "FIRE_AND_FORGET"]
    }


def test_cfn_lint_accepts_batch_mode() -> None:
    parameters = [f"{k}={v}" for k, v in BATCH_MODE.items()]
    command = [str(Path(sys.executable).parent / "cfn-lint"), str(TEMPLATE), "--parameters"]
    result = subprocess.run(
        [*command, *parameters], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
