"""A fixed selection of AWS recordings, replayed on the engine: none may run kinder locally.

The selection (recorded_selection.json, written by
`python -m tests.parity.replay --filter ... --export tests/parity/recorded_selection.json`)
holds recordings of LocalStack's Step Functions suite (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/, Apache-2.0; each test `@markers.aws.validated`, its
snapshot what real AWS answered, written through the snapshot transformers its test
registered) in the features onceflow's state machines use: JSONata Output/Assign/Arguments,
Map Items (inline, ItemReader with ItemBatcher, tolerance), Retry/Catch of a Lambda that
raises in a Task, Map and Parallel, Fail, Choice, undefined references; and the API suites'
answers to the calls onceflow makes (test_sfn_api*: StartExecution, DescribeExecution,
ListExecutions, GetExecutionHistory, StopExecution, DescribeStateMachine(ForExecution),
CreateStateMachine; tests/parity/api.py). The full replay, over every recording, is the
command line.

The other tests hold the comparison honest: a placeholder on AWS's side matches only what
the local value at that place is replaced by, a case runs on an engine of its own, and a
test the stand-ins cannot read is not replayed.
"""

from __future__ import annotations

import ast
import datetime
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.parity import api, recordings, snapshot
from tests.parity.recordings import ROLE, Case, prepare
from tests.parity.replay import Outcome, Replayer, compare, load_cases, written_as_recorded

SELECTION = Path(__file__).with_name("recorded_selection.json")
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:statemachine_x:0f7c1d2e"


def test_no_recorded_behaviour_runs_kinder_locally_and_what_matched_still_matches() -> None:
    cases = load_cases(SELECTION)
    replayer = Replayer()
    outcomes = {case.key: (case, replayer.replay(case)) for case in cases}
    kinder = [f"{key}: {o.diff[:2]}" for key, (_, o) in outcomes.items() if o.kind == "kinder"]
    assert not kinder
    regressed = [
        f"{key}: {o.diff[:2]}"
        for key, (case, o) in outcomes.items()
        if case.expected == "same" and o.verdict != "same"
    ]
    assert not regressed
    assert sum(case.expected == "same" for case in cases) >= 12
    answers = [c for c in cases if isinstance(c, api.ApiCase) and c.expected == "same"]
    assert len(answers) >= 20


# ---- the API suites' answers -----------------------------------------------------------


def _answered(written: dict[str, Any], raised: str = "") -> api.LocalRun:
    return api.LocalRun(written, {}, [], [], raised)


_REFUSED = {"Error": {"Code": "ValidationException", "Message": "m"}, "message": "m"}


def test_an_api_call_aws_refused_and_the_engine_answered_is_kinder() -> None:
    """In the body: pytest.raises saw no error, the run stopped there (DID NOT RAISE)."""
    recorded = {"listed": {"executions": []}, "refused": _REFUSED}
    stopped = _answered({"listed": {"executions": []}}, "Failed: DID NOT RAISE <class ...>")
    assert api.compare(recorded, stopped)[0] == "kinder"
    answered = _answered({"listed": {"executions": []}, "refused": {"executions": []}})
    assert api.compare(recorded, answered)[0] == "kinder"
    assert api.compare({"refused": {"executions": []}}, _answered({"refused": _REFUSED}))[0] == (
        "harsher"
    )
    raised = _answered({}, "ClientError: An error occurred (InvalidArn) ...")
    assert api.compare({"described": {"name": "x"}}, raised)[0] == "harsher"


def test_a_field_aws_answered_only_after_the_recording_is_left_out_of_it() -> None:
    """DescribeStateMachine's encryptionConfiguration: in no recording before 2024-11-20."""
    recorded = {"described": {"name": "n"}}
    local = {"described": {"name": "n", "encryptionConfiguration": {"type": "AWS_OWNED_KEY"}}}
    assert api.compare(recorded, _answered(dict(local)), "2024-06-11") == ("", [])
    kind, diff = api.compare(recorded, _answered(dict(local)), "2024-11-20")
    assert kind == "value"
    assert diff == [
        'described.encryptionConfiguration: AWS missing, local {"type": "AWS_OWNED_KEY"}'
    ]


def _history(status: str, error: str | None) -> list[dict[str, object]]:
    events: list[dict[str, object]] = [
        {"id": 1, "previousEventId": 0, "type": "ExecutionStarted"},
    ]
    if error:
        events.append({"id": 2, "type": "TaskFailed", "taskFailedEventDetails": {"error": error}})
    events.append({"id": len(events) + 1, "type": status})
    return events


def test_the_replay_calls_a_local_success_where_aws_failed_kinder() -> None:
    """The class the test above relies on: AWS failed (States.DataLimitExceeded, say), the
    local run succeeded."""
    aws = _history("ExecutionFailed", "States.DataLimitExceeded")
    local = _history("ExecutionSucceeded", None)
    assert compare(aws, local)[0] == "kinder"
    assert compare(local, aws)[0] == "harsher"
    caught_on_aws = _history("ExecutionSucceeded", "States.DataLimitExceeded")
    assert compare(caught_on_aws, local)[0] == "kinder"
    assert compare(aws, aws) == ("", [])


# ---- the local history goes through the recording's transformers ----------------------


def _started(role: str, context_name: str, request_ids: list[str]) -> list[dict[str, Any]]:
    """A local history: its role, the execution name a state read from the context
    object, and the request ids of task results."""
    output = {"Name": context_name, "Results": [{"RequestId": r} for r in request_ids]}
    return [
        {
            "id": 1,
            "previousEventId": 0,
            "timestamp": datetime.datetime(2026, 11, 27, 9, 0, tzinfo=datetime.UTC),
            "type": "ExecutionStarted",
            "executionStartedEventDetails": {"input": "{}", "roleArn": role},
        },
        {
            "id": 2,
            "previousEventId": 1,
            "timestamp": datetime.datetime(2026, 11, 27, 9, 0, 1, tzinfo=datetime.UTC),
            "type": "ExecutionSucceeded",
            "executionSucceededEventDetails": {"output": json.dumps(output)},
        },
    ]


# What AWS's recording holds for the same run (placeholders as LocalStack wrote them).
_RECORDED = [
    {
        "executionStartedEventDetails": {"input": {}, "roleArn": "snf_role_arn"},
        "id": 1,
        "previousEventId": 0,
        "timestamp": "timestamp",
        "type": "ExecutionStarted",
    },
    {
        "executionSucceededEventDetails": {
            "output": {
                "Name": "<ExecArnPart_0idx>",
                "Results": [{"RequestId": "<uuid:1>"}, {"RequestId": "<uuid:1>"}],
            }
        },
        "id": 2,
        "previousEventId": 1,
        "timestamp": "timestamp",
        "type": "ExecutionSucceeded",
    },
]
_SPECS = [
    *snapshot.fixtures(),
    *snapshot.create_state_machine_with_iam_role(ROLE, "statemachine_x"),
    *snapshot.launch_and_record_execution(),
]
_REQUEST = "4a1b9a52-6c40-4fb4-9a0f-2f6f1d0e9a11"


def test_a_local_history_written_through_the_recordings_transformers_matches_it() -> None:
    local = _started(ROLE, "0f7c1d2e", [_REQUEST, _REQUEST])
    assert compare(_RECORDED, written_as_recorded(local, _SPECS, EXECUTION)) == ("", [])


@pytest.mark.parametrize(
    ("role", "name", "request_ids", "wrong"),
    [
        # A role the run was not given: the role's transformer does not reach it.
        (
            "arn:aws:iam::123456789012:role/another",
            "0f7c1d2e",
            [_REQUEST, _REQUEST],
            '#1 ExecutionStarted.executionStartedEventDetails.roleArn: AWS "snf_role_arn", '
            'local "arn:<partition>:iam::111111111111:role/another"',
        ),
        # The context object names another execution than the one that ran.
        (
            ROLE,
            "some-other-name",
            [_REQUEST, _REQUEST],
            "#2 ExecutionSucceeded.executionSucceededEventDetails.output.Name: AWS "
            '"<ExecArnPart_0idx>", local "some-other-name"',
        ),
        # Two request ids where AWS answered one twice: numbered placeholders differ.
        (
            ROLE,
            "0f7c1d2e",
            [_REQUEST, "9d3e4c1a-0b2f-4e5d-8a7b-6c5d4e3f2a1b"],
            "#2 ExecutionSucceeded.executionSucceededEventDetails.output.Results: AWS "
            '[{"RequestId": "<uuid:1>"}, {"RequestId": "<uuid:1>"}], local [{"RequestId": '
            '"<uuid:1>"}, {"RequestId": "<uuid:2>"}]',
        ),
    ],
    ids=["role", "context-name", "uuid-numbering"],
)
def test_a_wrong_local_value_at_a_transformed_field_is_still_reported(
    role: str, name: str, request_ids: list[str], wrong: str
) -> None:
    local = written_as_recorded(_started(role, name, request_ids), _SPECS, EXECUTION)
    kind, diff = compare(_RECORDED, local)
    assert kind == "value"
    assert diff == [wrong]


def test_a_placeholder_is_not_what_the_local_side_is_compared_with() -> None:
    """AWS's placeholders are never read as "anything": a local value that is itself a
    placeholder of another transformer differs."""
    local = _started(ROLE, "<ArnPart_0idx>", [_REQUEST, _REQUEST])
    kind, diff = compare(_RECORDED, written_as_recorded(local, _SPECS, EXECUTION))
    assert (kind, len(diff)) == ("value", 1)
    assert "output.Name" in diff[0]


def test_recordings_made_before_localstacks_feb_2025_list_keep_sdk_request_ids_as_uuids() -> None:
    """stepfunctions_api as of the recording's date: before LocalStack's commit 35cd175c4
    SdkResponseMetadata.RequestId was left to the uuid transformer (<uuid:1>), after it
    it is written "RequestId"."""
    task = {"SdkResponseMetadata": {"RequestId": _REQUEST}}
    observed = {"h": {"events": [{"output": json.dumps(task)}]}}
    run = snapshot.Run(EXECUTION, [])
    old = snapshot.fixtures(recorded=datetime.date(2024, 9, 11))
    new = snapshot.fixtures(recorded=datetime.date(2025, 3, 1))
    written_old = snapshot.transform(observed, old, run)["h"]["events"][0]["output"]
    written_new = snapshot.transform(observed, new, run)["h"]["events"][0]["output"]
    assert written_old == {"SdkResponseMetadata": {"RequestId": "<uuid:1>"}}
    assert written_new == {"SdkResponseMetadata": {"RequestId": "RequestId"}}


# ---- each case on an engine of its own --------------------------------------------------


def _case(definition: dict[str, Any], setup: list[dict[str, Any]]) -> Case:
    return Case(
        key="local::isolation",
        snapshot="v2/local.snapshot.json",
        definition=definition,
        input={},
        recorded=[],
        machine_name="statemachine_isolation",
        setup=setup,
        transformers=[s.to_json() for s in snapshot.fixtures()],
    )


def test_a_case_does_not_see_what_an_earlier_case_made() -> None:
    """LocalStack's test_list_secrets recorded an empty SecretList: an earlier replay's
    createSecret must not show in a later one's listSecrets."""
    create = {
        "service": "secretsmanager",
        "operation": "create_secret",
        "params": {"Name": "left-behind", "SecretString": "x"},
    }
    listing = {
        "StartAt": "List",
        "States": {
            "List": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:secretsmanager:listSecrets",
                "End": True,
            }
        },
    }
    replayer = Replayer()
    outcome = Outcome("local::isolation", "v2/local.snapshot.json", "same")
    seen_first = replayer.local_history(_case(listing, [create]), outcome)
    seen_after = replayer.local_history(_case(listing, []), outcome)
    assert seen_first is not None and seen_after is not None
    assert "left-behind" in json.dumps(seen_first)
    assert "left-behind" not in json.dumps(seen_after)


# ---- what the stand-ins cannot read is not replayed -------------------------------------


def _prepared(body: str, arguments: str) -> Any:
    source = textwrap.dedent(
        f"""
        import json
        from localstack.testing.pytest.stepfunctions.utils import create_and_record_execution
        from localstack_snapshot.snapshots.transformer import RegexTransformer


        class TestX:
            def test_x(self, aws_client, create_state_machine_iam_role, create_state_machine,
                       sfn_snapshot, {arguments}):
                definition = json.dumps({{"StartAt": "P", "States": {{"P": {{"Type": "Pass",
                                        "End": True}}}}}})
        """
    )
    source += textwrap.indent(textwrap.dedent(body), " " * 8)
    tree = ast.parse(source)
    [owner] = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    [function] = [n for n in owner.body if isinstance(n, ast.FunctionDef)]
    return prepare(Path("/nonexistent"), Path("/nonexistent/test_x.py"), tree, function, "", {})


_RUN = """
create_and_record_execution(aws_client, create_state_machine_iam_role, create_state_machine,
                            sfn_snapshot, definition, exec_input)
"""


def test_a_value_of_an_unknown_fixture_never_becomes_text_in_the_input() -> None:
    """The repr of a stand-in once reached an input ('<..._Anything object at ...>arn'):
    now the statement that builds it is passed over and the test ran nothing readable."""
    with pytest.raises(recordings.StandIn):
        str(recordings._Anything())
    prepared = _prepared(
        'exec_input = json.dumps({"Arn": f"{some_fixture}suffix"})' + _RUN, "some_fixture"
    )
    assert isinstance(prepared, str)


def test_the_helpers_transformers_are_recorded_in_their_order() -> None:
    prepared = _prepared(
        'sfn_snapshot.add_transformer(RegexTransformer("abc", "<abc>"))\n'
        'exec_input = json.dumps({"a": 1})' + _RUN,
        "unused",
    )
    assert not isinstance(prepared, str)
    recorder, ran = prepared
    added = recorder.transformers[len(snapshot.fixtures()) :]
    assert [(s.kind, s.b) for s in added] == [
        ("regex", "<abc>"),
        ("regex", "snf_role_arn"),
        ("regex", "Extended Request ID: <extended_request_id>"),
        ("regex", "Request ID: <request_id>"),
        ("regex", "<ArnPart_0idx>"),
        ("execution_arn", ""),
        ("map_run_arns", ""),
    ]
    assert added[4].a == ran.machine_name
    assert ran.input == '{"a": 1}'


def test_a_transformer_the_stand_ins_cannot_build_makes_the_recording_unreplayable() -> None:
    prepared = _prepared(
        "sfn_snapshot.add_transformer(RegexTransformer(undefined_name, '<x>'))\n"
        'exec_input = json.dumps({"a": 1})' + _RUN,
        "unused",
    )
    assert isinstance(prepared, str)
    assert "transformer" in prepared


def test_an_empty_local_value_at_a_reference_transformer_shows_at_its_field() -> None:
    """LogResult (Lambda's LogType Tail) is a reference transformer's: AWS's is written
    <LogResult:1>; an empty local one stays empty there, not spread through the answer."""
    observed = {"h": {"events": [{"output": json.dumps({"LogResult": "", "Other": "abc"})}]}}
    specs = [*snapshot.fixtures(), snapshot.Spec("jsonpath", "$..LogResult", "LogResult")]
    written = snapshot.transform(observed, specs, snapshot.Run(EXECUTION, []))
    assert written["h"]["events"][0]["output"] == {"LogResult": "", "Other": "abc"}
