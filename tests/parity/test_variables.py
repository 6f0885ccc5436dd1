"""Variables: what Assign stores, as AWS recorded it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.parity.conftest import Run, events_of


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    """One stack for the module (an engine start was most of each test's time): each test
    runs state machines of its own (`run` names each anew) and reads only their executions."""
    with LocalEngine(function_log=io.StringIO()) as local:
        yield local


def test_an_assigned_string_literal_holds_its_characters_not_their_json_escapes(
    run: Run,
) -> None:
    """Recorded: assign/test_assign_base.snapshot.json,
    TestAssignBase::test_base_cases[BASE_CONSTANT_LITERALS] (github.com/localstack/localstack,
    tests/aws/services/stepfunctions/v2/): a literal in Assign is stored as the string
    the definition's JSON holds ("constant string" is assigned as "\\"constant string\\"",
    its JSON text). JSON decodes \\" to " and \\\\ to \\: the variable holds those
    characters, so `$q = '"'` is true."""
    result = run(
        {
            "Keep": {
                "Type": "Pass",
                "Assign": {"q": '"', "b": "\\", "lit": 'say "hi" \\ there', "n": {"in": 'a"b'}},
                "Next": "Read",
            },
            "Read": {
                "Type": "Pass",
                "Output": {
                    "quote": "{% $q = '\"' %}",
                    "backslash": "{% $b = '\\\\' %}",
                    "lit": "{% $lit %}",
                    "n": "{% $n %}",
                },
                "End": True,
            },
        }
    )
    assert result.output == {
        "quote": True,
        "backslash": True,
        "lit": 'say "hi" \\ there',
        "n": {"in": 'a"b'},
    }
    [kept, _] = events_of(result, "PassStateExited")
    assert kept["assignedVariables"]["q"] == '"\\""'


def _inner_pass(name: str) -> dict[str, Any]:
    return {name: {"Type": "Pass", "Assign": {"innerX": "{% $x %}"}, "End": True}}


def test_a_map_iteration_reads_outer_variables_and_keeps_its_own(run: Run) -> None:
    """Recorded: assign/test_assign_base.snapshot.json, TestAssignBase::
    test_base_cases[BASE_SCOPE_MAP] (the same machine in JSONPath): each iteration reads
    the outer $x (innerX is 42 in every one); after the Map, $x is still 42 and the
    Map's output is its items."""
    result = run(
        {
            "State0": {"Type": "Pass", "Assign": {"x": 42, "items": [1, 2, 3]}, "Next": "State1"},
            "State1": {
                "Type": "Map",
                "Items": "{% $items %}",
                "MaxConcurrency": 1,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "Inner",
                    "States": _inner_pass("Inner"),
                },
                "Next": "State2",
            },
            "State2": {"Type": "Pass", "Assign": {"final": "{% $x %}"}, "End": True},
        }
    )
    assert result.output == [1, 2, 3]
    exited = events_of(result, "PassStateExited")
    assert [e["assignedVariables"] for e in exited] == [
        {"x": "42", "items": "[1,2,3]"},
        {"innerX": "42"},
        {"innerX": "42"},
        {"innerX": "42"},
        {"final": "42"},
    ]


def test_parallel_branches_read_outer_variables(run: Run) -> None:
    """Recorded: assign/test_assign_base.snapshot.json, TestAssignBase::
    test_base_parallel_cases[BASE_SCOPE_PARALLEL]: every branch reads the outer $x;
    the Parallel's output is each branch's output."""
    branches = [{"StartAt": name, "States": _inner_pass(name)} for name in ("B1", "B21", "B31")]
    result = run(
        {
            "State0": {"Type": "Pass", "Assign": {"x": 42}, "Next": "State1"},
            "State1": {"Type": "Parallel", "Branches": branches, "End": True},
        }
    )
    assert result.output == [{}, {}, {}]
    inner = [e["assignedVariables"] for e in events_of(result, "PassStateExited")[1:]]
    assert inner == [{"innerX": "42"}] * 3


# Recorded: assign/test_assign_reference_variables.snapshot.json,
# test_state_assign_evaluation_order[BASE_EVALUATION_ORDER_PASS_STATE] (validated on AWS).
_EVALUATION_ORDER = {
    "State0": {
        "Type": "Pass",
        "Result": {"theQuestion": "What is the answer to life the universe and everything?"},
        "Assign": {"question.$": "$.theQuestion", "answer": 42},
        "Next": "State1",
    },
    "State1": {
        "Type": "Pass",
        "InputPath": "$answer",
        "ResultPath": "$.theAnswer",
        "OutputPath": "$answer",
        "Assign": {"answer": "<omitted>"},
        "End": True,
    },
}


def test_an_output_path_reads_the_variable_as_the_state_found_it(run: Run) -> None:
    """Recorded (above): State1 assigns answer "<omitted>" and its OutputPath $answer
    outputs 42, the value it had when State1 was entered; the assignment is recorded."""
    result = run(_EVALUATION_ORDER, query_language="JSONPath")
    assert result.output == 42
    assert events_of(result, "PassStateExited")[1]["assignedVariables"] == {"answer": '"<omitted>"'}


def test_output_and_assign_read_the_variables_as_the_state_found_them(run: Run) -> None:
    """The recording above, in JSONata (AWS's 'Passing data between states with
    variables': Assign and Output are evaluated with the values the state was entered
    with; the JSONata form itself not recorded): B's Output and its Assign of y read
    x = 1, the value A assigned; C reads B's assignments."""
    result = run(
        {
            "A": {"Type": "Pass", "Assign": {"x": 1}, "Next": "B"},
            "B": {
                "Type": "Pass",
                "Assign": {"x": 2, "y": "{% $x %}"},
                "Output": {"x": "{% $x %}"},
                "Next": "C",
            },
            "C": {
                "Type": "Pass",
                "Output": {"b": "{% $states.input %}", "x": "{% $x %}", "y": "{% $y %}"},
                "End": True,
            },
        }
    )
    assert result.output == {"b": {"x": 1}, "x": 2, "y": 1}
