"""Batch mode (SqsBatchMode) in every view: the demo's report counts messages, and
`onceflow show` draws the batch definition with a picker for its Map's iterations.

The batch demo runs as a user runs it: `onceflow up --parameter-overrides SqsSource=create
SqsBatchMode=true ProcessorTimeoutSeconds=40 AuditRecentCutoffHours=0`,
then `onceflow demo --source sqs`, which runs on that engine (here: main() with the
engine the server would hand it).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from onceflow.asl import diagram
from onceflow.asl.batch_definition import MAP_STATE
from onceflow.cli import main
from onceflow.harness.demo import DemoReport
from onceflow.local.engine import LocalEngine
from onceflow.local.server import SharedEngine
from onceflow.local.wiring import LocalPipes
from onceflow.view import executions, history, records
from tests.chromium import Browser
from tests.workflow.test_viewer import Page, _chromium, _inside

BATCH_PARAMETERS = {
    "SqsSource": "create",
    "SqsBatchMode": "true",
    "ProcessorTimeoutSeconds": "40",
    "AuditRecentCutoffHours": "0",
}
BATCH_MACHINE = "BatchProcessorStateMachine"


@dataclass
class BatchDemo:
    report: dict[str, Any]
    batches: list[records.Record]
    folder: Path
    terminal: str  # what `onceflow show` printed for the largest batch
    page_file: Path


def _run(argv: list[str], shared: SharedEngine) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv, shared=shared)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def batch_demo(tmp_path_factory: pytest.TempPathFactory) -> BatchDemo:
    """The batch demo and `onceflow show` of its largest batch, on an engine that has
    stopped by the time the tests read the records and the page (as after `onceflow up`)."""
    folder = tmp_path_factory.mktemp("batch-records")
    page_file = tmp_path_factory.mktemp("batch-page") / "batch.html"
    with (
        pytest.MonkeyPatch.context() as patch,
        LocalEngine(parameters=BATCH_PARAMETERS, function_log=io.StringIO()) as engine,
    ):
        patch.setenv(records.ENVIRONMENT, str(folder))
        shared = SharedEngine(engine, dict(BATCH_PARAMETERS))
        argv = ["demo", "--source", "sqs", "--objects", "24", "--corrupt", "1", "--seed", "3"]
        code, out = _run([*argv, "--json"], shared)
        assert code == 0, out
        # The report is the indented JSON; the engine's metric lines (one-line JSON,
        # as Lambda prints them) may come before it.
        report = json.loads(out[out.index("{\n") :])
        batches = [r for r in records.recent(folder) if r.logical_id == BATCH_MACHINE]
        assert batches, "the batch demo recorded no batch execution"
        largest = _largest(batches)
        code, shown = _run(["show", largest.name, "--html", str(page_file)], shared)
        assert code == 0, shown
    return BatchDemo(report, batches, folder, shown, page_file)


def _largest(batches: list[records.Record]) -> records.Record:
    """The batch of the most messages (Map iterations started)."""
    return max(batches, key=lambda r: sum(e["type"] == "MapIterationStarted" for e in r.events))


def _message_outcomes(batches: list[records.Record]) -> Counter[str]:
    """Each message's outcome, read from what the batch answered the pipe: the Map's
    output (one {messageId, outcome, retry} per message). A message the pipe delivered
    again (a batch kept it) counts once, as its last delivery ended."""
    last: dict[str, str] = {}
    for batch in sorted(batches, key=lambda r: r.data["startDate"]):
        for event in batch.events:
            details = event.get("stateExitedEventDetails") or {}
            if details.get("name") == MAP_STATE:
                last.update((i["messageId"], i["outcome"]) for i in json.loads(details["output"]))
    return Counter(last.values())


def test_the_batch_demo_counts_messages_duplicates_and_outcomes_per_message(
    batch_demo: BatchDemo,
) -> None:
    report = batch_demo.report
    # GIVEN a demo whose messages went to the pipe in batches
    assert len(batch_demo.batches) < report["objects"]
    # THEN it counts the messages it delivered, not the batches
    sent = report["objects"] - report["lost_deliveries"] + report["duplicate_deliveries"]
    assert report["deliveries"] == sent
    # ... each message's outcome, as the batch answered it for that message
    assert report["executions"] == dict(_message_outcomes(batch_demo.batches))
    assert "Respond" not in report["executions"]
    assert sum(report["executions"].values()) == report["deliveries"]
    # ... every duplicate message discarded as one
    assert report["duplicate_deliveries"] > 0, "pick a seed with duplicates"
    assert report["duplicates_discarded"] == report["executions"]["Duplicate"]
    assert report["duplicates_discarded"] == report["duplicate_deliveries"]
    assert report["executions"]["Processed"] == report["objects"] - report["corrupt_objects"]
    assert report["batch_executions"] == len(batch_demo.batches)
    assert report["messages_without_outcome"] == 0
    assert report["messages_left_in_queue"] == 0
    assert report["objects_processed_by_two_messages"] == 0
    assert report["exactly_once"] is True
    # ... and the printed report says so, in those words
    printed = DemoReport(report).render().splitlines()
    deliveries = next(line for line in printed if line.split()[:1] == ["deliveries"])
    assert deliveries.split()[1:] == [str(sent), "(in", str(len(batch_demo.batches)), "batches)"]
    outcomes = next(line for line in printed if "by outcome" in line)
    assert outcomes.split()[:3] == ["messages", "by", "outcome"] and "Respond" not in outcomes
    assert printed[-1] == "exactly once: OK"


def test_show_draws_the_batch_definition_not_the_processors(batch_demo: BatchDemo) -> None:
    record = _largest(batch_demo.batches)
    asl = executions.definition(record)
    batch_graph = diagram.graph(asl)
    # The definition the batch ran: its Map, the states inside it, and Respond.
    assert asl["StartAt"] == MAP_STATE and MAP_STATE in batch_graph.children
    page = Page(batch_demo.page_file.read_text(encoding="utf-8"))
    assert set(page.nodes) == set(batch_graph.states)
    markup = batch_demo.page_file.read_text(encoding="utf-8")
    assert "states the ASL does not have" not in markup
    # ... and its header counts its messages instead of naming one message's key
    assert "<dt>Iterations</dt>" in markup and "<dt>Idempotency key</dt>" not in markup
    entered = {step.name for step in history.steps(record.result())}
    assert page.having("entered") == entered


def test_each_messages_states_are_read_with_their_own_iterations_variables(
    batch_demo: BatchDemo,
) -> None:
    # GIVEN the batches, whose iterations ran at once and interleave in the history
    for batch in batch_demo.batches:
        steps = history.steps(batch.result())
        inside = [step for step in steps if step.iteration is not None]
        assert inside
        for step in inside:
            assert step.exited is not None, (batch.name, step.name, step.iteration)
            # THEN every state of a message reads the lock owner its iteration took
            # (TakeMessage: the execution and the message's index)
            owner = history.scope(steps, step.index).get("lockOwner")
            if owner is not None:
                assert owner.endswith(f"#{step.iteration[1]}"), (batch.name, step.name)


def test_show_prints_one_iteration_column_and_each_messages_outcome(
    batch_demo: BatchDemo,
) -> None:
    record = _largest(batch_demo.batches)
    lines = batch_demo.terminal.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["#"] and "state" in line)
    assert "iteration" in header.split()
    rows = [line.split() for line in lines[lines.index(header) + 1 :] if line.strip()]
    rows = [row for row in rows if row[0].isdigit()]
    # One row per state entered; each row of an iteration names it, and the rows of
    # one iteration come together (not interleaved with the others').
    assert len(rows) == len(history.steps(record.result()))
    column = header.split().index("iteration")
    seen = [row[column] for row in rows if row[column] != "-"]
    assert len(seen) == len(rows) - 2  # EachMessage and Respond run outside the Map
    blocks = [label for n, label in enumerate(seen) if n == 0 or seen[n - 1] != label]
    assert len(blocks) == len(set(seen))
    # And a line per message: its index, its outcome and its key.
    from onceflow.view import units

    messages = units.units(record.result())
    assert len(blocks) == len(messages)
    for unit in messages:
        assert unit.iteration is not None
        label = f"{unit.iteration[0]}#{unit.iteration[1]}:"
        line = next(line for line in lines if line.strip().startswith(label))
        assert unit.end_state in line and (unit.key is None or unit.key in line)


_PICK = """((value) => {
  const picker = document.querySelector("select.iteration-picker");
  picker.value = value;
  picker.dispatchEvent(new Event("change", {bubbles: true}));
  const names = (selector) => Array.from(document.querySelectorAll(selector))
    .map((n) => n.getAttribute("data-state")).sort();
  const shown = (selector) => Array.from(document.querySelectorAll(selector))
    .filter((row) => row.offsetParent !== null).length;
  const box = (node) => {
    const r = node.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
  };
  return {
    entered: names('.node[data-entered="true"]'),
    failed: names(".node.failed"),
    taken: Array.from(document.querySelectorAll(".edge.taken"))
      .map((e) => e.getAttribute("data-source") + ">" + e.getAttribute("data-target")).sort(),
    iteration: document.body.getAttribute("data-iteration"),
    selected: document.body.getAttribute("data-selected"),
    panel: document.getElementById("panel").innerText,
    stateRows: shown("table.path tbody tr"),
    eventRows: shown("table.events tbody tr"),
    options: Array.from(picker.options).map((o) => o.value),
    picker: box(picker),
    canvas: box(document.getElementById("canvas")),
    panelBox: box(document.getElementById("panel")),
    errors: document.documentElement.getAttribute("data-errors"),
  };
})"""


def test_the_page_picks_a_messages_iteration_and_shows_its_path_in_chromium(
    batch_demo: BatchDemo, tmp_path: Path
) -> None:
    from onceflow.view import units

    record = _largest(batch_demo.batches)
    reading = history.read(record.result())
    messages = units.units(record.result())
    graph = diagram.graph(executions.definition(record))
    inside: set[str] = set()  # the states nested in the Map, at any depth
    frontier = [MAP_STATE]
    while frontier:
        children = graph.children.get(frontier.pop(), [])
        inside.update(children)
        frontier += children
    outside = {step.name for step in reading.steps if step.iteration is None}
    # GIVEN the batch's page in a real Chromium at 1280 x 800
    with Browser(_chromium(), tmp_path / "profile", 1280, 800) as browser:
        browser.open(batch_demo.page_file.resolve().as_uri())
        everything = browser.evaluate(_PICK + '("")')
        # THEN the picker offers every iteration, one per message, on the first screen
        assert everything["errors"] == "[]" and browser.problems() == []
        assert everything["options"] == [
            "",
            *(str(u.iteration[1]) for u in messages if u.iteration),
        ]
        assert _inside(everything["picker"], {"left": 0, "top": 0, "right": 1280, "bottom": 800})
        # ... above the graph, which keeps most of the first screen, beside the panel
        assert everything["picker"]["bottom"] <= everything["canvas"]["top"]
        assert everything["canvas"]["bottom"] - everything["canvas"]["top"] >= 400
        assert everything["canvas"]["right"] <= everything["panelBox"]["left"] + 0.5
        assert set(everything["entered"]) == {step.name for step in reading.steps}
        for unit in messages:
            assert unit.iteration is not None
            index = unit.iteration[1]
            # WHEN one message's iteration is picked
            picked = browser.evaluate(_PICK + f'("{index}")')
            assert picked["errors"] == "[]"
            # THEN the graph shows that message's path through the ItemProcessor, and the
            # states outside the Map as they ran
            mine = [s for s in reading.steps if s.iteration == unit.iteration]
            assert set(picked["entered"]) == {s.name for s in mine} | outside
            assert set(picked["entered"]) & inside == {s.name for s in mine}
            # ... its end state selected, the panel showing this message's entry of it
            assert picked["iteration"] == f"{MAP_STATE}#{index}"
            assert picked["selected"] == unit.end_state
            end = next(s for s in mine if s.name == unit.end_state)
            assert json.dumps(end.output, indent=2).splitlines()[1].strip() in picked["panel"]
            assert "Entered 1 of" not in picked["panel"]
            # ... and only its rows (and the batch's own) in the tables
            assert picked["stateRows"] == len(mine) + len(outside)
            events = sum(1 for it in reading.event_iterations if it in (None, unit.iteration))
            assert picked["eventRows"] == events
            for source_target in picked["taken"]:
                source, target = source_target.split(">")
                if target in inside and source in inside:
                    assert source in {s.name for s in mine}
        # WHEN "all" is picked again, every message's path is back
        again = browser.evaluate(_PICK + '("")')
        assert again["entered"] == everything["entered"] and again["taken"] == everything["taken"]
        browser.screenshot(tmp_path / "batch.png")
        assert browser.problems() == []


def test_messages_the_pipe_never_ended_fail_the_verdict_though_the_audit_did_the_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN the batch stack with its pipe stopped (StopPipe), as an operator may leave it
    monkeypatch.setenv(records.ENVIRONMENT, str(tmp_path / "records"))
    with LocalEngine(parameters=BATCH_PARAMETERS, function_log=io.StringIO()) as engine:
        # StopPipe as the engine plays it (moto's Pipes knows nothing of the pipe)
        LocalPipes(engine).stop_pipe(Name=engine.pipes["SourcePipe"]["name"])
        shared = SharedEngine(engine, dict(BATCH_PARAMETERS))
        # WHEN the demo delivers its messages into the source queue
        argv = ["demo", "--source", "sqs", "--objects", "3", "--corrupt", "0", "--json"]
        code, out = _run([*argv, "--no-record"], shared)
    report = json.loads(out[out.index("{\n") :])
    # THEN it is not "exactly once": no message ended, every one is still in the queue,
    # though the audit found every object unprocessed and gave it its one effect
    assert code == 1 and report["exactly_once"] is False
    assert report["messages_without_outcome"] == report["deliveries"] == 3
    assert report["messages_left_in_queue"] == 3
    assert report["executions"] == {} and report["batch_executions"] == 0
    assert report["effects_histogram"] == {"1": 3}
    assert report["audit"]["missing_resubmitted"] == 3


def test_executions_lists_a_batch_by_its_message_count_not_one_messages_key(
    batch_demo: BatchDemo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(records.ENVIRONMENT, str(batch_demo.folder))
    assert main(["executions", "--json", "--no-server"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    for batch in batch_demo.batches:
        row = listed[batch.name]
        messages = sum(e["type"] == "MapIterationStarted" for e in batch.events)
        # A batch claimed one key per message: no one of them is the execution's key.
        assert row["idempotencyKey"] is None and row["iterations"] == messages
    assert main(["executions", "--no-server"]) == 0
    table = capsys.readouterr().out.splitlines()
    largest = _largest(batch_demo.batches)
    line = next(line for line in table if line.startswith(largest.name))
    count = sum(e["type"] == "MapIterationStarted" for e in largest.events)
    assert line.endswith(f"({count} iterations)")
