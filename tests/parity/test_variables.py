"""Variables: what Assign stores, as AWS recorded it."""

from __future__ import annotations

from tests.parity.conftest import Run, events_of


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
