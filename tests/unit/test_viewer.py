"""The execution viewer without an engine: layout, the page's markup and escaping, records."""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import json
import os
import re
import subprocess
from html.parser import HTMLParser
from importlib import resources
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import pytest

from onceflow.asl import diagram
from onceflow.local import jsonata_node
from onceflow.view import executions, page, records, text
from onceflow.view.history import UNNAMED
from onceflow.view.history import scope as scope_of
from onceflow.view.history import steps as read_steps
from onceflow.view.layout import Box, layout
from onceflow.view.page import page as html_page
from onceflow.view.records import AmbiguousError, Record, RecordError
from onceflow.view.trace import trace
from tests.css import css_problems

T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:onceflow-processor"


class Elements(HTMLParser):
    """Every start tag with its (unescaped) attributes, and the text of <script> and <style>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self.styles: list[str] = []
        self._script: dict[str, str] | None = None
        self._style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.tags.append((tag, values))
        if tag == "script":
            self._script = values
            self.scripts.append((values, ""))
        elif tag == "style":
            self._style = True
            self.styles.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None
        elif tag == "style":
            self._style = False

    def handle_data(self, data: str) -> None:
        if self._style:
            self.styles[-1] += data
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def having(self, attribute: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.tags if attribute in attrs]


def parse(page: str) -> Elements:
    elements = Elements()
    elements.feed(page)
    return elements


def history(
    path: list[tuple[str, str, Any, Any]], failure: str | None = None
) -> list[dict[str, Any]]:
    """A GetExecutionHistory-shaped list: (state, type, input, output) entered in order."""
    events: list[dict[str, Any]] = []
    clock = iter(T0 + datetime.timedelta(milliseconds=10 * n) for n in range(1000))

    def add(kind: str, **details: Any) -> None:
        event: dict[str, Any] = {"timestamp": next(clock), "type": kind, "id": len(events) + 1}
        event.update(details)
        events.append(event)

    add("ExecutionStarted", executionStartedEventDetails={"input": "{}"})
    for name, kind, state_input, state_output in path:
        add(
            f"{kind}StateEntered",
            stateEnteredEventDetails={"name": name, "input": json.dumps(state_input)},
        )
        if name == "Claim":
            parameters = {"TableName": "ledger", "Item": {"pk": {"S": "s3://b/k#v1"}}}
            add(
                "TaskScheduled",
                taskScheduledEventDetails={
                    "resourceType": "dynamodb",
                    "resource": "putItem",
                    "parameters": json.dumps(parameters),
                },
            )
        if state_output is not None:
            add(
                f"{kind}StateExited",
                stateExitedEventDetails={"name": name, "output": json.dumps(state_output)},
            )
    if failure:
        add("ExecutionFailed", executionFailedEventDetails={"error": failure, "cause": "it broke"})
    else:
        add("ExecutionSucceeded", executionSucceededEventDetails={"output": "{}"})
    return events


def record(
    name: str, events: list[dict[str, Any]], status: str = "SUCCEEDED", start: Any = T0
) -> Record:
    return Record(
        {
            "executionArn": f"arn:aws:states:us-east-1:123456789012:execution:m:{name}",
            "name": name,
            "stateMachineArn": MACHINE_ARN,
            "logicalId": "ProcessorStateMachine",
            "status": status,
            "startDate": start,
            "stopDate": start + datetime.timedelta(seconds=1),
            "input": {},
            "output": None,
            "error": "Boom" if status == "FAILED" else None,
            "cause": None,
            "events": events,
        }
    )


HAPPY = [
    ("Claim", "Task", {"a": 1}, {}),
    ("Process", "Task", {}, {"created": True}),
    ("MarkComplete", "Task", {"created": True}, {"status": "PROCESSED"}),
]


# ---- layout -----------------------------------------------------------------


def _overlap(a: Box, b: Box) -> bool:
    return a.x < b.x + b.w and b.x < a.x + a.w and a.y < b.y + b.h and b.y < a.y + a.h


@pytest.mark.parametrize("machine", sorted(diagram.MACHINES))
def test_layout_boxes_every_state_without_overlap_and_nests_map_and_parallel(
    machine: str,
) -> None:
    graph = diagram.graph(diagram.load_asl(diagram.MACHINES[machine]))
    drawn = layout(graph)
    assert set(graph.states) <= set(drawn.boxes)
    scopes = [graph.top, *graph.children.values()]
    for scope in scopes:
        for a, b in combinations(scope, 2):
            assert not _overlap(drawn.boxes[a], drawn.boxes[b]), (a, b)
    for parent, children in graph.children.items():
        outer = drawn.boxes[parent]
        assert outer.compound
        for child in children:
            inner = drawn.boxes[child]
            assert outer.x < inner.x and inner.x + inner.w < outer.x + outer.w, child
            assert outer.y < inner.y and inner.y + inner.h < outer.y + outer.h, child
    for box in drawn.boxes.values():
        assert box.x >= 0 and box.x + box.w <= drawn.width
        assert box.y >= 0 and box.y + box.h <= drawn.height


@pytest.mark.parametrize("machine", sorted(diagram.MACHINES))
def test_layout_routes_every_transition_from_its_source_to_its_target(machine: str) -> None:
    graph = diagram.graph(diagram.load_asl(diagram.MACHINES[machine]))
    drawn = layout(graph)
    routed = sorted(route.index for route in drawn.routes)
    assert routed == [-1, *range(len(graph.edges))]  # -1: from the start marker

    def on_border(point: tuple[float, float], box: Box) -> bool:
        x, y = point
        return box.x <= x <= box.x + box.w and y in (box.y, box.y + box.h)

    for route in drawn.routes:
        if route.index < 0:
            continue
        edge = graph.edges[route.index]
        assert on_border(route.points[0], drawn.boxes[edge.source]), edge
        assert on_border(route.points[-1], drawn.boxes[edge.target]), edge
        if edge.label:
            assert route.label_at is not None and " ".join(route.label) == edge.label


# ---- the page -----------------------------------------------------------------


def processor_page(execution: Record) -> tuple[diagram.Graph, str]:
    asl = diagram.load_asl(diagram.MACHINES["processor"])
    return diagram.graph(asl), html_page(execution, asl)


def test_page_has_a_node_per_state_an_edge_per_transition_and_the_path_marked() -> None:
    graph, page = processor_page(record("happy", history(HAPPY)))
    elements = parse(page)
    nodes = [a for a in elements.having("data-state") if "node" in a.get("class", "").split()]
    assert sorted(a["data-state"] for a in nodes) == sorted(graph.states)
    entered = {a["data-state"] for a in nodes if a["data-entered"] == "true"}
    assert entered == {name for name, *_ in HAPPY}
    assert all("entered" in a["class"].split() for a in nodes if a["data-state"] in entered)
    edges = [a for a in elements.having("data-source") if "edge" in a["class"].split()]
    assert len(edges) == len(graph.edges) + 1  # and the start marker's
    catches = [a for a in edges if "catch" in a["class"].split()]
    assert len(catches) == sum(edge.kind == "catch" for edge in graph.edges)
    taken = {(a["data-source"], a["data-target"]) for a in edges if "taken" in a["class"].split()}
    path = [name for name, *_ in HAPPY]
    assert taken == {("", "Claim"), *pairwise(path)}
    # the history says which edge was taken, so no edge is ambiguous
    ambiguous = [a for a in edges if "ambiguous" in a["class"].split()]
    assert ambiguous == []
    assert "Permanent failure, or MaxAttempts reached" in html.unescape(page)
    assert not [a for a in nodes if "failed" in a["class"].split()]


def test_page_marks_the_failed_state_and_the_caught_error() -> None:
    path = [
        ("Normalize", "Choice", {}, {}),
        ("Claim", "Task", {}, {}),
        ("Process", "Task", {}, {"Error": "PermanentError"}),
        ("MarkFailed", "Task", {}, {}),
        ("ShouldDeadLetter", "Choice", {}, {}),
        ("SendToDLQ", "Task", {}, {}),
        ("DeadLetterReason", "Choice", {}, {}),
        ("MarkDeadLettered", "Task", {}, {}),
        ("DeadLettered", "Fail", {}, None),
    ]
    events = history(path, failure="PermanentError")
    # Process failed, and its Catch moved on to MarkFailed.
    at = next(
        i
        for i, e in enumerate(events)
        if e.get("stateExitedEventDetails", {}).get("name") == "Process"
    )
    events.insert(
        at,
        {
            "timestamp": events[at]["timestamp"],
            "type": "TaskFailed",
            "taskFailedEventDetails": {"error": "PermanentError", "cause": "unreadable"},
        },
    )
    _, page = processor_page(record("poison", events, status="FAILED"))
    nodes = {a["data-state"]: a["class"].split() for a in parse(page).having("data-entered")}
    assert [name for name, classes in nodes.items() if "failed" in classes] == ["DeadLettered"]
    assert [name for name, classes in nodes.items() if "caught" in classes] == ["Process"]
    edges = parse(page).having("data-source")
    taken = [a for a in edges if "taken" in a["class"].split()]
    assert any(
        a["data-source"] == "Process" and a["data-target"] == "MarkFailed" and "catch" in a["class"]
        for a in taken
    )


def test_page_escapes_state_names_and_payloads() -> None:
    hostile = "</script><script>alert(\"x\")</script><b a='1'>&amp;"
    name = 'Odd <State> & "quoted"'
    asl = {
        "StartAt": name,
        "States": {
            name: {"Type": "Pass", "Comment": hostile, "Next": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }
    events = history(
        [(name, "Pass", {"text": hostile}, {"text": hostile}), ("Done", "Succeed", {}, {})]
    )
    page = html_page(record(hostile, events), asl)
    assert "<script>alert" not in page
    assert "<State>" not in page and "<b a=" not in page
    elements = parse(page)
    assert {a["data-state"] for a in elements.having("data-entered")} == {name, "Done"}
    (data,) = [text for attrs, text in elements.scripts if attrs.get("id") == "execution-data"]
    decoded = json.loads(data)
    assert decoded["states"][name]["entries"][0]["input"] == {"text": hostile}
    assert decoded["path"] == [name, "Done"]


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_page_inlines_its_package_css_and_js_and_its_policy_allows_exactly_them() -> None:
    # GIVEN the page's CSS and JavaScript as the package ships them (package data)
    shipped = {
        name: resources.files("onceflow.view").joinpath("static", name).read_text("utf-8")
        for name in ("guard.js", "viewer.css", "viewer.js")
    }
    # WHEN an execution's page is rendered
    _, page = processor_page(record("happy", history(HAPPY)))
    elements = parse(page)
    # THEN its style and its two scripts are those files, in that order, each allowed by
    # its hash, and the policy allows nothing else: no other source, nothing fetched
    (policy,) = [
        a["content"] for _, a in elements.tags if a.get("http-equiv") == "Content-Security-Policy"
    ]
    inline = [script for attrs, script in elements.scripts if "type" not in attrs]
    assert inline == [shipped["guard.js"], shipped["viewer.js"]]
    assert elements.styles == [shipped["viewer.css"]]
    assert policy == (
        "default-src 'none'; img-src data:; "
        f"style-src {_hash(shipped['viewer.css'])}; "
        f"script-src {_hash(shipped['guard.js'])} {_hash(shipped['viewer.js'])}"
    )
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers
    assert not re.search(r"<[a-z]+[^>]*\sstyle=", page)  # no style attributes either


def _node_check(path: Path) -> subprocess.CompletedProcess[str]:
    node = jsonata_node.node_executable()
    return subprocess.run(
        [str(node), "--check", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("name", ["guard.js", "viewer.js"])
def test_the_pages_javascript_passes_node_check(name: str, tmp_path: Path) -> None:
    # GIVEN one of the page's scripts, and a copy of it with a syntax error
    script = resources.files("onceflow.view").joinpath("static", name)
    broken = tmp_path / name
    broken.write_text(script.read_text("utf-8").replace("function", "function (", 1))
    # WHEN node checks their syntax
    good, bad = _node_check(Path(str(script))), _node_check(broken)
    # THEN the script passes, and the check does catch the broken copy
    assert good.returncode == 0, good.stderr
    assert bad.returncode != 0 and "SyntaxError" in bad.stderr


def test_the_pages_css_is_well_formed() -> None:
    # GIVEN the page's style sheet, and copies with the faults a hand edit brings
    css = resources.files("onceflow.view").joinpath("static", "viewer.css").read_text("utf-8")
    faults = {
        "an unclosed rule": css.replace("}", "", 1),
        "an unknown at-rule": "@import url(x.css);\n" + css,
        "a declaration without a colon": css.replace("margin: 0;", "margin 0;", 1),
        "an empty rule": css + "\n.empty { }\n",
    }
    # WHEN each is checked
    # THEN the sheet has no problem, and each faulty copy has one
    assert css_problems(css) == []
    for fault, faulty in faults.items():
        assert css_problems(faulty), fault


# ---- what the history says ----------------------------------------------------


def test_idempotency_key_and_end_state_come_from_the_history() -> None:
    events = history(HAPPY)
    assert executions.idempotency_key(events) == "s3://b/k#v1"
    assert executions.end_state(events) == "Processed"
    invalid = history([("Normalize", "Choice", {}, {}), ("InvalidEvent", "Fail", {}, None)])
    assert executions.idempotency_key(invalid) is None
    assert executions.end_state(invalid) == "InvalidEvent"
    assert executions.summary(record("bad", invalid))["idempotencyKey"] is None
    table = text.render_table([executions.summary(record("bad", invalid, status="FAILED"))])
    assert table.splitlines()[1].split()[-2:] == ["InvalidEvent", "-"]


def test_terminal_rendering_lists_the_states_in_order_with_the_key() -> None:
    lines = text.terminal(record("happy", history(HAPPY))).splitlines()
    assert lines[0] == "Execution happy"
    assert "  idempotency key: s3://b/k#v1" in lines
    rows = [line.split()[1] for line in lines if re.match(r"\s+\d+\s+\w", line)]
    assert rows == [name for name, *_ in HAPPY]


# ---- records ------------------------------------------------------------------


def test_records_round_trip_with_datetimes_and_find_by_name_arn_and_prefix(
    tmp_path: Path,
) -> None:
    for n, name in enumerate(["run-alpha", "run-beta", "other"]):
        start = T0 + datetime.timedelta(minutes=n)
        records.write(record(name, history(HAPPY), start=start).data, tmp_path)
    assert [r.name for r in records.recent(tmp_path)] == ["other", "run-beta", "run-alpha"]
    found = records.find("run-a", tmp_path)
    assert found.name == "run-alpha"
    assert found.start == T0 and found.events[1]["timestamp"] == T0 + datetime.timedelta(
        milliseconds=10
    )
    assert records.find(found.arn, tmp_path).name == "run-alpha"
    with pytest.raises(RecordError, match="no recorded execution"):
        records.find(found.arn.replace(":m:", ":elsewhere:"), tmp_path)
    with pytest.raises(RecordError, match="no recorded execution named 'nope'"):
        records.find("nope", tmp_path)
    with pytest.raises(AmbiguousError) as ambiguous:
        records.find("run-", tmp_path)
    assert sorted(ambiguous.value.candidates) == ["run-alpha", "run-beta"]
    assert "run-alpha" in str(ambiguous.value) and "run-beta" in str(ambiguous.value)


def test_an_express_record_is_found_by_its_arn_and_a_machine_arn_is_no_execution(
    tmp_path: Path,
) -> None:
    # An EXPRESS execution's ARN is ...:express:<machine>:<name>:<id> (LocalStack's
    # test_express_sync snapshot); a state machine's has no execution name at all.
    data = record("fast", history(HAPPY)).data
    data["executionArn"] = MACHINE_ARN.replace(":stateMachine:", ":express:") + ":fast:1f2e-3d4c"
    records.write(data, tmp_path)
    assert records.arn_parts(data["executionArn"]) == (MACHINE_ARN, "fast")
    assert records.find(data["executionArn"], tmp_path).name == "fast"
    with pytest.raises(RecordError, match="not an execution's ARN"):
        records.find(MACHINE_ARN, tmp_path)


def test_record_files_are_named_safely_and_pruned_oldest_first(tmp_path: Path) -> None:
    assert records.file_name("plain-name_1") == "plain-name_1.json"
    unsafe = records.file_name("../../etc/passwd")
    assert "/" not in unsafe and not unsafe.startswith(".")
    assert records.file_name("a/b") != records.file_name("a_b")
    # Two state machines may each run an execution of one name: two files.
    assert records.file_name("x", "arn:1") != records.file_name("x", "arn:2")
    for n in range(5):
        records.write(record(f"r{n}", [], start=T0 + datetime.timedelta(hours=n)).data, tmp_path)
    assert records.prune(tmp_path, keep=2) == 3
    kept = sorted(p.name for p in tmp_path.iterdir())
    machine = record("r4", [], start=T0).data["stateMachineArn"]
    assert kept == [records.file_name("r3", machine), records.file_name("r4", machine)]
    assert kept[0].startswith("r3@") and kept[1].startswith("r4@")
    newest = tmp_path / kept[1]
    assert os.stat(newest).st_mtime == (T0 + datetime.timedelta(hours=4)).timestamp()


def test_a_file_that_is_not_a_record_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(RecordError, match="cannot read the execution record"):
        records.find("broken", tmp_path)


def test_one_name_in_two_state_machines_keeps_both_records(tmp_path: Path) -> None:
    first = record("same", []).data
    second = {
        **record("same", [], start=T0 + datetime.timedelta(hours=1)).data,
        "stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:audit",
        "executionArn": "arn:aws:states:us-east-1:123456789012:execution:audit:same",
        "logicalId": "AuditStateMachine",
    }
    records.write(first, tmp_path)
    records.write(second, tmp_path)
    assert len(list(tmp_path.iterdir())) == 2
    with pytest.raises(AmbiguousError) as ambiguous:
        records.find("same", tmp_path)
    assert len(ambiguous.value.candidates) == 2
    found = records.find(str(second["executionArn"]), tmp_path)
    assert found.data["logicalId"] == "AuditStateMachine"


# Two Map iterations interleaved, as AWS writes them (ids and previousEventId
# from a local run of the audit with two prefixes, when its walk was an inline
# Map): neither iteration went from MoreObjects back to AuditPage, though the
# two iterations' events alternate.
_INTERLEAVED = [
    (1, 0, "ExecutionStarted", None),
    (2, 0, "PassStateEntered", "Plan"),
    (3, 2, "PassStateExited", "Plan"),
    (4, 3, "MapStateEntered", "AuditObjects"),
    (5, 4, "MapStateStarted", None),
    (6, 5, "MapIterationStarted", None),  # iteration 0
    (7, 6, "TaskStateEntered", "AuditPage"),
    (8, 7, "TaskScheduled", None),
    (9, 8, "TaskSucceeded", None),
    (10, 9, "TaskStateExited", "AuditPage"),
    (11, 10, "ChoiceStateEntered", "MoreObjects"),
    (12, 5, "MapIterationStarted", None),  # iteration 1
    (13, 12, "TaskStateEntered", "AuditPage"),
    (14, 11, "ChoiceStateExited", "MoreObjects"),
    (15, 14, "SucceedStateEntered", "PrefixAudited"),
    (16, 13, "TaskScheduled", None),
    (17, 16, "TaskSucceeded", None),
    (18, 17, "TaskStateExited", "AuditPage"),
    (19, 18, "ChoiceStateEntered", "MoreObjects"),
    (20, 15, "SucceedStateExited", "PrefixAudited"),
    (21, 19, "ChoiceStateExited", "MoreObjects"),
    (22, 21, "SucceedStateEntered", "PrefixAudited"),
    (23, 22, "SucceedStateExited", "PrefixAudited"),
    (24, 23, "MapStateExited", "AuditObjects"),
    (25, 24, "TaskStateEntered", "SweepLocks"),
]


def _chained(rows: list[tuple[int, int, str, str | None]]) -> list[dict[str, Any]]:
    events = []
    for event_id, previous, kind, name in rows:
        event: dict[str, Any] = {
            "id": event_id,
            "previousEventId": previous,
            "type": kind,
            "timestamp": T0 + datetime.timedelta(milliseconds=event_id),
        }
        if kind.endswith("StateEntered"):
            event["stateEnteredEventDetails"] = {"name": name, "input": "{}"}
        elif kind.endswith("StateExited"):
            event["stateExitedEventDetails"] = {"name": name, "output": "{}"}
        events.append(event)
    return events


# An inline Map whose iterations loop (the audit's shape before its Distributed Map).
_LOOPING_MAP = {
    "StartAt": "Plan",
    "States": {
        "Plan": {"Type": "Pass", "Next": "AuditObjects"},
        "AuditObjects": {
            "Type": "Map",
            "ItemProcessor": {
                "StartAt": "AuditPage",
                "States": {
                    "AuditPage": {"Type": "Task", "Resource": "x", "Next": "MoreObjects"},
                    "MoreObjects": {
                        "Type": "Choice",
                        "Choices": [{"Condition": "{% true %}", "Next": "AuditPage"}],
                        "Default": "PrefixAudited",
                    },
                    "PrefixAudited": {"Type": "Succeed"},
                },
            },
            "Next": "SweepLocks",
        },
        "SweepLocks": {"Type": "Task", "Resource": "x", "End": True},
    },
}


def test_interleaved_map_iterations_mark_only_the_transitions_each_took() -> None:
    graph = diagram.graph(_LOOPING_MAP)
    traced = trace(graph, record("interleaved", _chained(_INTERLEAVED)))
    taken = {(graph.edges[i].source, graph.edges[i].target) for i in traced.taken}
    assert ("AuditPage", "MoreObjects") in taken
    assert ("MoreObjects", "PrefixAudited") in taken
    assert ("AuditObjects", "SweepLocks") in taken and ("Plan", "AuditObjects") in taken
    assert ("MoreObjects", "AuditPage") not in taken, "no iteration had a second page"
    # The same events without the chain: consecutive states would claim it.
    unchained = [
        {k: v for k, v in e.items() if k != "previousEventId"} for e in _chained(_INTERLEAVED)
    ]
    fallback = trace(graph, record("unchained", unchained))
    assert ("MoreObjects", "AuditPage") in {
        (graph.edges[i].source, graph.edges[i].target) for i in fallback.taken
    }


def test_an_error_in_one_iteration_is_that_iterations_state() -> None:
    rows = [
        (1, 0, "ExecutionStarted", None),
        (2, 0, "MapStateEntered", "AuditObjects"),
        (3, 2, "MapStateStarted", None),
        (4, 3, "MapIterationStarted", None),  # iteration 0
        (5, 4, "TaskStateEntered", "AuditPage"),
        (6, 5, "TaskStateExited", "AuditPage"),
        (7, 6, "ChoiceStateEntered", "MoreObjects"),
        (8, 3, "MapIterationStarted", None),  # iteration 1
        (9, 8, "TaskStateEntered", "AuditPage"),
        (10, 7, "ChoiceStateExited", "MoreObjects"),
        (11, 10, "SucceedStateEntered", "PrefixAudited"),  # last entered: iteration 0's
        (12, 9, "TaskScheduled", None),
        (13, 12, "TaskFailed", None),  # iteration 1's page fails once, then succeeds
        (14, 13, "TaskScheduled", None),
        (15, 14, "TaskSucceeded", None),
        (16, 15, "TaskStateExited", "AuditPage"),
    ]
    events = _chained(rows)
    events[12]["taskFailedEventDetails"] = {"error": "Lambda.TooManyRequestsException"}
    steps = read_steps(record("errors", events).result())
    with_errors = [(step.name, step.entered) for step in steps if step.errors]
    assert with_errors == [("AuditPage", events[8]["timestamp"])]


# ---- a caught error inside a Parallel or a Map, and the variables ------------------


def _events(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """(id, previous id, type, state name or None, extra fields) as a chained history."""
    events = []
    for event_id, previous, kind, name, *extra in rows:
        event: dict[str, Any] = {
            "id": event_id,
            "previousEventId": previous,
            "type": kind,
            "timestamp": T0 + datetime.timedelta(milliseconds=event_id),
        }
        if kind.endswith("StateEntered"):
            event["stateEnteredEventDetails"] = {"name": name, "input": "{}"}
        elif kind.endswith("StateExited"):
            event["stateExitedEventDetails"] = {"name": name, "output": "{}"}
        for fields in extra:
            for key, value in fields.items():
                event.setdefault(key, {}).update(value)
        events.append(event)
    return events


def _assigned(**variables: Any) -> dict[str, Any]:
    # As the history carries them: each value as JSON text.
    encoded = {name: json.dumps(value) for name, value in variables.items()}
    return {"stateExitedEventDetails": {"assignedVariables": encoded}}


_EVALUATION_FAILED = {
    "evaluationFailedEventDetails": {
        "error": "States.QueryEvaluationError",
        "cause": "the body is not JSON",
        "state": "ParseMessage",
    }
}


# A definition with a Parallel whose branch fails and whose Catch moves on: the shape the
# processor had for an SQS message before P12 (ReadMessage, ParseMessage).
_READ_MESSAGE: dict[str, Any] = {
    "QueryLanguage": "JSONata",
    "StartAt": "Normalize",
    "States": {
        "Normalize": {"Type": "Choice", "Choices": [], "Default": "ReadMessage"},
        "ReadMessage": {
            "Type": "Parallel",
            "Branches": [
                {
                    "StartAt": "ParseMessage",
                    "States": {"ParseMessage": {"Type": "Pass", "End": True}},
                }
            ],
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "UnreadableMessage"}],
            "End": True,
        },
        "UnreadableMessage": {
            "Type": "Choice",
            "Choices": [],
            "Default": "DescribeUnreadableMessage",
        },
        "DescribeUnreadableMessage": {"Type": "Pass", "Next": "SendToDLQ"},
        "SendToDLQ": {"Type": "Pass", "Next": "DeadLetterReason"},
        "DeadLetterReason": {"Type": "Choice", "Choices": [], "Default": "InvalidEvent"},
        "InvalidEvent": {"Type": "Fail", "Error": "X"},
    },
}


def _unreadable_message(named: bool) -> list[dict[str, Any]]:
    """The processor's path for an SQS message it cannot read: ParseMessage fails inside
    ReadMessage's branch, ReadMessage's Catch moves on. With `named`, an EvaluationFailed
    event names the error (as the Step Functions API documents for a JSONata error);
    without, the branch's failure shows only as ParallelStateFailed."""
    failed = [(7, 6, "EvaluationFailed", None, _EVALUATION_FAILED)] if named else []
    after = 7 if named else 6
    return _events(
        [
            (1, 0, "ExecutionStarted", None),
            (2, 0, "ChoiceStateEntered", "Normalize"),
            (3, 2, "ChoiceStateExited", "Normalize", _assigned(event=[{"body": "x"}], attempt=0)),
            (4, 3, "ParallelStateEntered", "ReadMessage"),
            (5, 4, "ParallelStateStarted", None),
            (6, 5, "PassStateEntered", "ParseMessage"),
            *failed,
            (8, after, "ParallelStateFailed", None),
            (9, 8, "ParallelStateExited", "ReadMessage", _assigned(readError="not JSON")),
            (10, 9, "ChoiceStateEntered", "UnreadableMessage"),
            (11, 10, "ChoiceStateExited", "UnreadableMessage"),
            (12, 11, "PassStateEntered", "DescribeUnreadableMessage"),
            (13, 12, "PassStateExited", "DescribeUnreadableMessage", _assigned(held=False)),
            (14, 13, "TaskStateEntered", "SendToDLQ"),
            (15, 14, "TaskStateExited", "SendToDLQ"),
            (16, 15, "ChoiceStateEntered", "DeadLetterReason"),
            (17, 16, "ChoiceStateExited", "DeadLetterReason"),
            (18, 17, "FailStateEntered", "InvalidEvent"),
            (19, 18, "ExecutionFailed", None, {"executionFailedEventDetails": {"error": "X"}}),
        ]
    )


@pytest.mark.parametrize(
    ("named", "error"), [(True, "States.QueryEvaluationError"), (False, UNNAMED)]
)
def test_an_error_caught_around_a_parallel_branch_is_caught_in_the_table_and_the_page(
    named: bool, error: str
) -> None:
    # GIVEN an SQS message whose body ReadMessage's branch could not parse
    execution = record("unreadable", _unreadable_message(named), status="FAILED")
    # WHEN the terminal table and the page are made
    table = text.terminal(execution).splitlines()
    graph, page = diagram.graph(_READ_MESSAGE), html_page(execution, _READ_MESSAGE)
    # THEN the state that failed in the branch and the Parallel whose Catch took the
    # error are both caught, with the error's name (or, when no event names it, saying so)
    column = next(line for line in table if line.endswith("outcome")).index("outcome")
    outcome = {line.split()[1]: line[column:] for line in table if re.match(r"\s+\d", line)}
    assert outcome["ParseMessage"] == outcome["ReadMessage"] == f"caught {error}"
    assert outcome["InvalidEvent"] == "failed: X"
    nodes = {a["data-state"]: a for a in parse(page).having("data-entered")}
    caught = {name for name, a in nodes.items() if "caught" in a["class"].split()}
    assert caught == {"ReadMessage", "ParseMessage"}
    assert nodes["ReadMessage"]["data-error"] == nodes["ParseMessage"]["data-error"] == error
    assert "data-error" not in nodes["Normalize"]
    # ... and the transition out of ReadMessage is its Catch
    traced = trace(graph, execution)
    taken = {
        (graph.edges[i].source, graph.edges[i].target, graph.edges[i].kind) for i in traced.taken
    }
    assert ("ReadMessage", "UnreadableMessage", "catch") in taken


def _branch_ending_in_a_fail_state(error: str) -> dict[str, Any]:
    """The batch workflow's shape for a message it dead-letters: a Parallel whose one
    branch is a Fail state (its Error the message's end state), and whose Catch moves on."""
    return {
        "QueryLanguage": "JSONata",
        "StartAt": "LogDeadLettered",
        "States": {
            "LogDeadLettered": {
                "Type": "Parallel",
                "Branches": [
                    {
                        "StartAt": "DeadLettered",
                        "States": {
                            "DeadLettered": {"Type": "Fail", "Error": error, "Cause": "dlq"}
                        },
                    }
                ],
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "MessageEnds"}],
                "End": True,
            },
            "MessageEnds": {"Type": "Succeed"},
        },
    }


@pytest.mark.parametrize(
    ("error", "shown"),
    [("DeadLettered", "DeadLettered"), ("{% $outcome %}", UNNAMED)],
)
def test_a_fail_state_in_a_branch_is_caught_with_the_error_its_definition_names(
    error: str, shown: str
) -> None:
    # GIVEN a branch that ended in a Fail state, whose error no event of the history
    # names (AWS's ParallelStateFailed carries no details), and the Parallel's Catch
    definition = _branch_ending_in_a_fail_state(error)
    events = _events(
        [
            (1, 0, "ExecutionStarted", None),
            (2, 1, "ParallelStateEntered", "LogDeadLettered"),
            (3, 2, "ParallelStateStarted", None),
            (4, 3, "FailStateEntered", "DeadLettered"),
            (5, 4, "ParallelStateFailed", None),
            (6, 5, "ParallelStateExited", "LogDeadLettered"),
            (7, 6, "SucceedStateEntered", "MessageEnds"),
            (8, 7, "SucceedStateExited", "MessageEnds"),
            (9, 8, "ExecutionSucceeded", None),
        ]
    )
    execution = record("dead-lettered", events)
    # WHEN the terminal table and the page are made with the definition it ran
    table = text.terminal(execution, definition).splitlines()
    page = html_page(execution, definition)
    # THEN the Fail state and the Parallel are caught with the Fail state's Error, the
    # one the Catch matched ("Fail": a Fail state stops the execution, or here the
    # branch, with its Error); an Error only known as it runs (JSONata) stays unnamed
    column = next(line for line in table if line.endswith("outcome")).index("outcome")
    outcome = {line.split()[1]: line[column:] for line in table if re.match(r"\s+\d", line)}
    assert outcome["DeadLettered"] == outcome["LogDeadLettered"] == f"caught {shown}"
    nodes = {a["data-state"]: a for a in parse(page).having("data-entered")}
    assert nodes["DeadLettered"]["data-error"] == nodes["LogDeadLettered"]["data-error"] == shown


_MAP_WITH_CATCH = {
    "StartAt": "Items",
    "States": {
        "Items": {
            "Type": "Map",
            "ItemProcessor": {
                "StartAt": "Check",
                "States": {"Check": {"Type": "Pass", "End": True}},
            },
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Handled"}],
            "Next": "Done",
        },
        "Handled": {"Type": "Succeed"},
        "Done": {"Type": "Succeed"},
    },
}


def test_an_iteration_that_failed_makes_its_state_and_the_map_caught() -> None:
    # GIVEN a Map whose second iteration failed in Check, with no event naming the error,
    # and whose Catch moved on to Handled
    events = _events(
        [
            (1, 0, "ExecutionStarted", None),
            (2, 0, "MapStateEntered", "Items"),
            (3, 2, "MapStateStarted", None),
            (4, 3, "MapIterationStarted", None),
            (5, 4, "PassStateEntered", "Check"),
            (6, 5, "PassStateExited", "Check"),
            (7, 6, "MapIterationSucceeded", None),
            (8, 3, "MapIterationStarted", None),
            (9, 8, "PassStateEntered", "Check"),
            (10, 9, "MapIterationFailed", None),
            (11, 10, "MapStateFailed", None),
            (12, 11, "MapStateExited", "Items"),
            (13, 12, "SucceedStateEntered", "Handled"),
            (14, 13, "SucceedStateExited", "Handled"),
            (15, 14, "ExecutionSucceeded", None),
        ]
    )
    execution = record("map", events)
    # WHEN it is read
    steps = read_steps(execution.result())
    traced = trace(diagram.graph(_MAP_WITH_CATCH), execution)
    # THEN the first iteration's Check is ok, the second's is caught, so is the Map
    assert [(s.name, s.outcome) for s in steps] == [
        ("Items", f"caught {UNNAMED}"),
        ("Check", "ok"),
        ("Check", f"caught {UNNAMED}"),
        ("Handled", "ok"),
    ]
    assert traced.caught == {"Items", "Check"} and traced.failed == set()


def test_each_state_shows_the_variables_it_assigned_and_those_in_scope() -> None:
    # GIVEN a history where Normalize assigns, a state inside ReadMessage's branch assigns
    # a variable of its own, and ReadMessage assigns the work item
    events = _events(
        [
            (1, 0, "ExecutionStarted", None),
            (2, 0, "ChoiceStateEntered", "Normalize"),
            (3, 2, "ChoiceStateExited", "Normalize", _assigned(attempt=0, held=False)),
            (4, 3, "ParallelStateEntered", "ReadMessage"),
            (5, 4, "ParallelStateStarted", None),
            (6, 5, "PassStateEntered", "ParseMessage"),
            (7, 6, "PassStateExited", "ParseMessage", _assigned(inner="branch only")),
            (8, 7, "ParallelStateSucceeded", None),
            (9, 8, "ParallelStateExited", "ReadMessage", _assigned(workItem={"key": "k"})),
            (10, 9, "TaskStateEntered", "Claim"),
            (11, 10, "TaskStateExited", "Claim", _assigned(attempt=1, held=True)),
            (12, 11, "TaskStateEntered", "Process"),
        ]
    )
    # WHEN it is read
    steps = read_steps(record("variables", events).result())
    in_scope = {step.name: scope_of(steps, step.index) for step in steps}
    # THEN each state's assignments are decoded, a branch sees the outer variables, what
    # a branch assigns stays in it, and later assignments replace earlier ones
    assert steps[-1].name == "Process" and steps[3].assigned == {"attempt": 1, "held": True}
    assert in_scope["Normalize"] == {}
    assert in_scope["ReadMessage"] == in_scope["ParseMessage"] == {"attempt": 0, "held": False}
    assert in_scope["Claim"] == {"attempt": 0, "held": False, "workItem": {"key": "k"}}
    assert in_scope["Process"] == {"attempt": 1, "held": True, "workItem": {"key": "k"}}
    # ... and the page carries what its script needs to show the same
    _, page = processor_page(record("variables", events))
    (data,) = [t for attrs, t in parse(page).scripts if attrs.get("id") == "execution-data"]
    carried = json.loads(data)["steps"]
    assert [tuple(s["scopeFrom"] or ()) for s in carried] == [
        tuple(step.scope_from or ()) for step in steps
    ]
    assert carried[2]["assigned"] == {"inner": "branch only"}


class Rows(HTMLParser):
    """The cells of one table (by its class), row by row, with each row's attributes."""

    def __init__(self, page: str, table: str) -> None:
        super().__init__()
        self.table, self.inside = table, False
        self.rows: list[tuple[dict[str, str], list[str]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "table":
            self.inside = values.get("class") == self.table
        elif self.inside and tag == "tr":
            self.rows.append((values, []))
        elif self.inside and tag in ("td", "th"):
            self.rows[-1][1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False

    def handle_data(self, data: str) -> None:
        if self.inside and self.rows and self.rows[-1][1]:
            self.rows[-1][1][-1] += data


def test_the_events_table_lists_every_event_like_the_console() -> None:
    # GIVEN the happy path's history
    events = history(HAPPY)
    # WHEN its page is made
    _, page = processor_page(record("happy", events))
    # THEN the Events table has a row per event: id, type, the state it belongs to, the
    # resource a task called, the time since the start and the ISO 8601 timestamp
    (header, *rows) = [(a, [c.strip() for c in cells]) for a, cells in Rows(page, "events").rows]
    assert header[1] == ["ID", "type", "step", "resource", "started after", "timestamp"]
    assert [cells[0] for _, cells in rows] == [str(e["id"]) for e in events]
    assert [cells[1] for _, cells in rows] == [e["type"] for e in events]
    by_type = {cells[1]: (attrs, cells) for attrs, cells in rows}
    attrs, scheduled = by_type["TaskScheduled"]
    assert scheduled[2] == attrs["data-state"] == "Claim"
    assert scheduled[3] == "dynamodb:putItem"
    start = events[0]["timestamp"]
    for (_, cells), event in zip(rows, events, strict=True):
        elapsed = (event["timestamp"] - start).total_seconds() * 1000
        assert cells[4] == f"{elapsed:.0f} ms"
        assert cells[5] == event["timestamp"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert by_type["ExecutionStarted"][1][2] == "-"  # the execution's own event


def test_show_writes_the_page_as_name_html_as_the_readme_says(tmp_path: Path) -> None:
    # GIVEN an execution whose name is a safe file name, and one whose name is not
    plain = record("run-1", [])
    odd = record("run/2", [])
    # WHEN their pages' paths are chosen
    # THEN the first is NAME.html; the second's unsafe character is replaced, with a hash
    # of the name so that two names never share a page
    assert page.html_path(plain, tmp_path) == tmp_path / "run-1.html"
    other = page.html_path(odd, tmp_path)
    assert other.parent == tmp_path and other.name.startswith("run_2.")
    assert other.suffix == ".html" and "/" not in other.name


def test_executions_lists_the_records_around_one_it_cannot_read_and_keeps_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from onceflow.cli import main

    monkeypatch.setenv(records.ENVIRONMENT, str(tmp_path))
    # GIVEN two records, and a file in their folder that is no record (hand-edited, or
    # left by another tool), newer than both
    for n in range(2):
        records.write(record(f"r{n}", [], start=T0 + datetime.timedelta(hours=n)).data, tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    # WHEN the user lists the executions
    code = main(["executions", "--all", "--json"])
    out, err = capsys.readouterr()
    # THEN both records are listed, the file is named in one line, and it is left as it was
    # (it made the whole command fail: "cannot read the execution record ...")
    assert code == 0, err
    assert sorted(row["name"] for row in json.loads(out)) == ["r0", "r1"]
    assert f"local: skipped {broken}: " in err and "Traceback" not in err
    assert broken.read_text(encoding="utf-8") == "{not json"


def test_a_record_pruned_while_the_records_are_read_is_passed_over(tmp_path: Path) -> None:
    # GIVEN three records, listed by a reader
    for n in range(3):
        records.write(record(f"r{n}", [], start=T0 + datetime.timedelta(hours=n)).data, tmp_path)
    reading = records.recent(tmp_path)
    assert next(reading).name == "r2"
    # WHEN another command prunes the next one before the reader gets to it
    (tmp_path / records.file_name("r1", record("r1", []).data["stateMachineArn"])).unlink()
    # THEN the reader goes on to the one after it, as if it had never been listed
    assert [r.name for r in reading] == ["r0"]
