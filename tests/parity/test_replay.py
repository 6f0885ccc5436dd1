"""A fixed selection of AWS recordings, replayed on the engine: none may run kinder locally.

The selection (recorded_selection.json, written by
`python -m tests.parity.replay --filter ... --export tests/parity/recorded_selection.json`)
holds recordings of LocalStack's Step Functions suite (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/, Apache-2.0; each test `@markers.aws.validated`, its
snapshot what real AWS answered) in the features onceflow's state machines use: JSONata
Output/Assign/Arguments, Map Items (inline, ItemReader with ItemBatcher, tolerance),
Retry/Catch of a Lambda that raises in a Task, Map and Parallel, Fail, Choice, undefined
references. The full replay, over every recording, is the command line.
"""

from __future__ import annotations

from pathlib import Path

from onceflow.local.engine import LocalEngine
from tests.parity.replay import Replayer, compare, load_cases, normalise

SELECTION = Path(__file__).with_name("recorded_selection.json")


def test_no_recorded_behaviour_runs_kinder_locally_and_what_matched_still_matches(
    engine: LocalEngine,
) -> None:
    cases = load_cases(SELECTION)
    replayer = Replayer(engine)
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
    assert compare(normalise(aws), normalise(local))[0] == "kinder"
    assert compare(normalise(local), normalise(aws))[0] == "harsher"
    caught_on_aws = _history("ExecutionSucceeded", "States.DataLimitExceeded")
    assert compare(normalise(caught_on_aws), normalise(local))[0] == "kinder"
    assert compare(normalise(aws), normalise(aws)) == ("", [])
