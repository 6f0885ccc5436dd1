"""The state machine definitions are generated from readable sources and must not drift from them.

statemachines/src/*.asl.yaml is what a reviewer reads; statemachines/*.asl.json is what
deploys and what the local engine runs (onceflow/asl/asl_source.py turns one into the other).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onceflow.asl import asl_source
from onceflow.asl.asl_source import SourceError, compact
from onceflow.local import jsonata_node
from onceflow.local.template import load_template

ROOT = Path(__file__).resolve().parents[2]


def _source(tmp_path: Path, text: str, name: str = "machine") -> asl_source.Source:
    (tmp_path / "src").mkdir(exist_ok=True)
    path = tmp_path / "src" / f"{name}.asl.yaml"
    path.write_text(text, encoding="utf-8")
    return asl_source.load(path)


# ---- the committed definitions ---------------------------------------------------


def test_each_definition_that_deploys_is_what_its_source_generates() -> None:
    # GIVEN the sources and the definitions the template deploys
    template = load_template(ROOT / "template.yaml")
    deployed = {
        ROOT / resource["Properties"]["DefinitionUri"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Serverless::StateMachine"
    }
    sources = asl_source.sources()
    # WHEN the committed files are checked against their sources
    command = [sys.executable, "-m", "onceflow.asl.asl_source", "--check"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    # THEN each is what its source generates, and each source's file is one the template deploys
    # (the batch machine's is generated from the processor's by onceflow/asl/batch_definition.py)
    assert result.returncode == 0, result.stdout + result.stderr
    for source in sources:
        assert asl_source.render(source) == source.target.read_text(encoding="utf-8")
    assert {s.target.name for s in sources} == {"processor.asl.json", "audit.asl.json"}
    assert {s.target for s in sources} <= deployed


def test_no_line_of_a_source_is_longer_than_120_characters() -> None:
    # GIVEN the files a reviewer reads
    paths = sorted(asl_source.SOURCES.glob("*.asl.yaml"))
    assert len(paths) == 2
    # WHEN their lines are measured
    long = {path.name: asl_source.long_lines(path, 120) for path in paths}
    # THEN every expression, comment and value fits in 120 characters
    assert long == {path.name: [] for path in paths}


def test_the_generated_json_names_its_source() -> None:
    for source in asl_source.sources():
        comment = source.target.read_text(encoding="utf-8").splitlines()[1]
        origin = (
            f"GENERATED from statemachines/src/{source.path.name} by onceflow/asl/asl_source.py"
        )
        assert comment.startswith(f'  "Comment": "{origin}')


def test_check_fails_naming_the_file_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a definition someone edited by hand instead of its source
    source = _source(tmp_path, "StartAt: A\nStates:\n  A:\n    Type: Succeed\n")
    monkeypatch.setattr(asl_source, "SOURCES", tmp_path / "src")
    source.target.write_text(asl_source.render(source).replace('"A"', '"Edited"'), "utf-8")
    # WHEN it is checked, THEN the check fails, says how to fix it, and writes nothing
    assert asl_source.main(["--check"]) == 1
    assert "run: python -m onceflow.asl.asl_source" in capsys.readouterr().err
    assert "Edited" in source.target.read_text("utf-8")
    # AND generating it again makes the check pass
    assert asl_source.main([]) == 0
    assert asl_source.main(["--check"]) == 0


# ---- laying out an expression ------------------------------------------------------


def test_each_line_break_and_comment_becomes_one_space_and_nothing_else_changes() -> None:
    # GIVEN an expression laid out over lines, with comments and spacing of its own
    laid_out = """{% ($n  :=  2; /* a comment after code */
        /* a comment on a line of its own */
        $n * 3)
    %}"""
    # WHEN it is compacted
    # THEN each run of whitespace holding a line break or a comment is one space; the rest stays
    assert compact(laid_out) == "{% ($n  :=  2; $n * 3) %}"
    assert compact("{% $a /* inline */ + 1 %}") == "{% $a + 1 %}"


def test_strings_names_and_regular_expressions_are_kept_as_written() -> None:
    # GIVEN literals that hold what would otherwise be a comment, a break or a quote
    text = """{% ['/* not a comment */', "it's", `a  b`, $match($s, /x'  "y/),
      $a / 2 / $b] %}"""
    # WHEN it is compacted, THEN only the line break changes
    assert compact(text) == (
        """{% ['/* not a comment */', "it's", `a  b`, $match($s, /x'  "y/), $a / 2 / $b] %}"""
    )


def test_a_string_continued_on_the_next_line_is_one_literal() -> None:
    # GIVEN a long message written as two literals, the second on the next line
    text = "{% $fail('the first half, '\n    /* why */\n    'the second half') & 'x' %}"
    # WHEN it is compacted, THEN they are one literal; literals on one line are left alone
    assert compact(text) == "{% $fail('the first half, the second half') & 'x' %}"
    assert compact("{% 'a' 'b' %}") == "{% 'a' 'b' %}"  # JSONata refuses this, as before


@pytest.mark.parametrize(
    "text",
    ["{% 'a message\n  that goes on' %}", "{% $match($s, /a\n b/) %}", "{% `a\nb` %}"],
    ids=["string", "regular expression", "quoted name"],
)
def test_a_line_break_inside_a_literal_is_refused(text: str) -> None:
    # WHEN a literal spans a line, THEN the source is refused: the break would change its value
    with pytest.raises(SourceError, match="line break inside"):
        compact(text)


def test_jsonata_computes_the_same_value_from_the_laid_out_and_the_compact_text() -> None:
    # GIVEN an expression laid out with comments, as the sources write them
    laid_out = """(
      /* a sum over the retries, as lockSeconds writes it */
      $reduce([1..3], function($total, $n) {
        $total + $min([2 * $power(2, $n - 1), 5]) }, 0)
      + 75 /* and a constant */
    )"""
    # WHEN jsonata 2.0.6 evaluates both texts
    # THEN it gives the same value (comments and whitespace are nothing to its tokenizer)
    value = jsonata_node.evaluate(compact(laid_out), {})
    assert value == jsonata_node.evaluate(laid_out, {}) == 2 + 4 + 5 + 75


# ---- snippets and substitutions ----------------------------------------------------------

SNIPPETS = """\
Snippets:
  # a snippet may use another, defined before or after it
  double: "{{one}} * 2"
  one: |-
    /* one */
    1
  pattern:
    - '/^(?:a'
    - '|b'    # one branch a line
    - ')$/'
---
StartAt: A
States:
  A:
    Type: Pass
    Output: |-
      {% {'n': {{double}},
        'ok': $contains('b', {{pattern}})} %}
    End: true
"""


def test_snippets_are_put_in_where_an_expression_names_them(tmp_path: Path) -> None:
    # GIVEN a source whose expression names snippets, one of them a regex a branch a line
    source = _source(tmp_path, SNIPPETS)
    # WHEN its definition is generated
    output = asl_source.generate(source)["States"]["A"]["Output"]
    # THEN each name is replaced by its snippet's text, on one line
    assert output == "{% {'n': 1 * 2, 'ok': $contains('b', /^(?:a|b)$/)} %}"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (("{{double}},", "{{triple}},"), "no snippet {{triple}}"),
        (('"{{one}} * 2"', '"{{double}} * 2"'), "snippets include each other: double -> double"),
        (("Type: Pass", "Type: Pass\n    Comment: '{{one}}'"), "for expressions"),
    ],
    ids=["unknown", "cycle", "outside an expression"],
)
def test_a_snippet_that_cannot_be_put_in_is_refused(
    tmp_path: Path, change: tuple[str, str], error: str
) -> None:
    # GIVEN a source whose snippets are named wrongly
    text = SNIPPETS.replace(*change)
    assert text != SNIPPETS
    # WHEN it is read and generated, THEN it is refused with the reason
    with pytest.raises(SourceError, match=re.escape(error)):
        asl_source.generate(_source(tmp_path, text))


def test_a_plain_substitution_is_written_unquoted_and_a_quoted_one_stays_a_string(
    tmp_path: Path,
) -> None:
    # GIVEN a retrier's numbers and a table name, both DefinitionSubstitutions
    source = _source(
        tmp_path,
        """\
StartAt: A
States:
  A:
    Type: Task
    Resource: arn:aws:states:::dynamodb:getItem
    Arguments:
      TableName: "${LedgerTableName}"
      Key: "{% {'pk': {'S': '${Prefix}' & $states.input.id}} %}"
    Retry:
      - ErrorEquals: [States.ALL]
        IntervalSeconds: ${RetryIntervalSeconds}
    End: true
""",
    )
    # WHEN the JSON is written
    text = asl_source.render(source)
    # THEN the number is unquoted (CloudFormation puts the value there), the others are strings
    assert '"IntervalSeconds": ${RetryIntervalSeconds}\n' in text
    assert '"TableName": "${LedgerTableName}"' in text
    assert "'${Prefix}' & $states.input.id" in text


# ---- one source, two machines (!machine) ------------------------------------------


def test_a_machine_value_is_the_named_machines_and_absent_from_the_other(tmp_path: Path) -> None:
    # GIVEN a source whose state and field differ by machine
    source = _source(
        tmp_path,
        "StartAt: A\n"
        "States:\n"
        "  A:\n"
        "    Type: Pass\n"
        "    Next: !machine {processor: B, batch: C}\n"
        "  B: {Type: Succeed}\n"
        "  C: !machine\n"
        "    batch: {Type: Succeed}\n",
    )
    # WHEN it is generated for each machine
    processor = asl_source.generate(source)
    batch = asl_source.generate(source, machine="batch")
    # THEN each has its own value, and a state one machine does not name is not in it
    assert processor["States"]["A"]["Next"] == "B"
    assert batch["States"]["A"]["Next"] == "C"
    assert "C" not in processor["States"]
    assert batch["States"]["C"] == {"Type": "Succeed"}


@pytest.mark.parametrize(
    "value", ["!machine {express: B}", "!machine {}", "!machine B", "!machine [B]"]
)
def test_a_machine_value_for_no_known_machine_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(SourceError, match="!machine"):
        _source(tmp_path, f"StartAt: A\nStates:\n  A: {{Type: Pass, Next: {value}}}\n")


def _machine_values(node: object, path: str = "") -> dict[str, asl_source.PerMachine]:
    if isinstance(node, asl_source.PerMachine):
        return {path: node}
    if isinstance(node, dict):
        return {p: v for k, n in node.items() for p, v in _machine_values(n, f"{path}/{k}").items()}
    if isinstance(node, list):
        return {
            p: v for i, n in enumerate(node) for p, v in _machine_values(n, f"{path}/{i}").items()
        }
    return {}


# Every place the batch workflow's per-message states differ from the processor's, by
# the difference docs/design.md names ("The SQS batch mode: the same rules, four named
# differences"); a new !machine value fails here until it is named.
DIFFERENCES = {
    # 1. a row at MaxAttempts that is not settled: the batch's delivery dead-letters it,
    # after reading the row back to tell a settled Duplicate (its message deleted)
    "/States/Claim/Catch/0/Next": "1",
    "/States/Reclaim/Comment": "1",
    "/States/Reclaim/Catch/0/Next": "1",
    "/States/ReadDuplicateRow": "1",
    "/States/SettledOrReclaim": "1",
    "/States/Duplicate": "1",
    "/States/AtMaxAttempts": "1",
    "/States/TakeOverAtMaxAttempts": "1",
    # 2. a ledger write that fails past its retries sends no DLQ message in the batch
    "/States/Claim/Catch/2/Next": "2",
    "/States/LedgerUnavailable/Comment": "2",
    # 3. the lock is capped by what a batch execution can last
    "/Snippets/lockSeconds": "3",
    # 4. an invalid message, once dead-lettered, is deleted from its source queue by the
    # batch itself (no ledger row remembers it when the whole batch fails)
    "/States/DeadLetterReason/Choices/0/Next": "4",
    "/States/DeleteInvalidMessage": "4",
}


def test_the_two_machines_differ_only_where_a_named_difference_says() -> None:
    # GIVEN the processor's source, which holds both machines' per-message states
    source = asl_source.load(asl_source.SOURCES / "processor.asl.yaml")
    # WHEN its !machine values are listed
    found = {
        **_machine_values(source.definition),
        **_machine_values(source.raw_snippets or {}),
    }
    # THEN each is one of the named differences, and every named one is there
    assert set(found) == set(DIFFERENCES)
    # AND the processor has none of the batch's own states
    processor = asl_source.generate(source)
    batch = asl_source.generate(source, machine="batch")
    own = {p.split("/")[2] for p, v in found.items() if "processor" not in v.values}
    assert own and not own & set(processor["States"])
    assert own <= set(batch["States"])


def test_no_fail_state_of_the_batch_raises_a_name_the_states_language_reserves() -> None:
    """A Fail state inside the batch's Map runs in a Parallel whose Catch must take what it
    raises. The States Language reserves error names that begin with "States." for the
    service ("Error Names": other names MUST NOT begin with it, states-language.net), and
    what AWS does with one a Fail state raises is not recorded: were it refused, as moto
    and LocalStack refuse it, the error would be States.Runtime, which no Catch takes, and
    one message would fail its whole batch. So each raises its own name, a literal; the
    message's outcome carries the code (its Catch reads it)."""
    batch = json.loads(
        re.sub(r"\$\{\w+\}", "0", (ROOT / "statemachines/batch.asl.json").read_text())
    )

    def fail_states(states: dict[str, Any]) -> list[tuple[str, Any]]:
        found = [(n, s.get("Error")) for n, s in states.items() if s["Type"] == "Fail"]
        for state in states.values():
            inner = [state.get("ItemProcessor", {}), *state.get("Branches", [])]
            found += [f for part in inner if part for f in fail_states(part["States"])]
        return found

    fails = fail_states(batch["States"])
    assert {name for name, _ in fails} >= {"Failed", "DeadLettered", "LockLost"}
    for name, error in fails:
        assert isinstance(error, str) and not error.startswith("{%"), (name, error)
        assert not error.startswith("States."), (name, error)
