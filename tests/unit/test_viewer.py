"""The execution viewer without an engine: layout, the page's markup and escaping, records."""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import json
import os
import re
from html.parser import HTMLParser
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import pytest

from onceflow import diagram, records, viewer
from onceflow.records import AmbiguousError, Record, RecordError

T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:onceflow-processor"


class Elements(HTMLParser):
    """Every start tag with its (unescaped) attributes, and the text of <script> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._script: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.tags.append((tag, values))
        if tag == "script":
            self._script = values
            self.scripts.append((values, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._script = None

    def handle_data(self, data: str) -> None:
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
    ("Normalize", "Choice", {"a": 1}, {"a": 1}),
    ("Claim", "Task", {"a": 1}, {}),
    ("Process", "Task", {}, {"created": True}),
    ("MarkComplete", "Task", {"created": True}, {}),
    ("Processed", "Succeed", {}, {"status": "PROCESSED"}),
]


# ---- layout -----------------------------------------------------------------


def _overlap(a: viewer.Box, b: viewer.Box) -> bool:
    return a.x < b.x + b.w and b.x < a.x + a.w and a.y < b.y + b.h and b.y < a.y + a.h


@pytest.mark.parametrize("machine", sorted(diagram.MACHINES))
def test_layout_boxes_every_state_without_overlap_and_nests_map_and_parallel(
    machine: str,
) -> None:
    graph = diagram.graph(diagram.load_asl(diagram.MACHINES[machine]))
    drawn = viewer.layout(graph)
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
    drawn = viewer.layout(graph)
    routed = sorted(route.index for route in drawn.routes)
    assert routed == [-1, *range(len(graph.edges))]  # -1: from the start marker

    def on_border(point: tuple[float, float], box: viewer.Box) -> bool:
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
    return diagram.graph(asl), viewer.page(execution, asl)


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
    assert taken == {("", "Normalize"), *pairwise(path)}
    # Normalize has one rule into Claim (every event shape is read by one expression):
    # the history says which edge was taken, so no edge is ambiguous.
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
    page = viewer.page(record(hostile, events), asl)
    assert "<script>alert" not in page
    assert "<State>" not in page and "<b a=" not in page
    elements = parse(page)
    assert {a["data-state"] for a in elements.having("data-entered")} == {name, "Done"}
    (data,) = [text for attrs, text in elements.scripts if attrs.get("id") == "execution-data"]
    decoded = json.loads(data)
    assert decoded["states"][name]["entries"][0]["input"] == {"text": hostile}
    assert decoded["path"] == [name, "Done"]


def test_page_is_self_contained_and_its_policy_allows_exactly_its_own_scripts() -> None:
    _, page = processor_page(record("happy", history(HAPPY)))
    elements = parse(page)
    (policy,) = [
        a["content"] for _, a in elements.tags if a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert "default-src 'none'" in policy
    inline = [text for attrs, text in elements.scripts if "type" not in attrs]
    assert len(inline) == 2
    for text in inline:
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers


# ---- what the history says ----------------------------------------------------


def test_idempotency_key_and_end_state_come_from_the_history() -> None:
    events = history(HAPPY)
    assert viewer.idempotency_key(events) == "s3://b/k#v1"
    assert viewer.end_state(events) == "Processed"
    invalid = history([("Normalize", "Choice", {}, {}), ("InvalidEvent", "Fail", {}, None)])
    assert viewer.idempotency_key(invalid) is None
    assert viewer.end_state(invalid) == "InvalidEvent"
    assert viewer.summary(record("bad", invalid))["idempotencyKey"] is None
    table = viewer.render_table([viewer.summary(record("bad", invalid, status="FAILED"))])
    assert table.splitlines()[1].split()[-2:] == ["InvalidEvent", "-"]


def test_terminal_rendering_lists_the_states_in_order_with_the_key() -> None:
    text = viewer.terminal(record("happy", history(HAPPY)))
    lines = text.splitlines()
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
    traced = viewer.trace(graph, record("interleaved", _chained(_INTERLEAVED)))
    taken = {(graph.edges[i].source, graph.edges[i].target) for i in traced.taken}
    assert ("AuditPage", "MoreObjects") in taken
    assert ("MoreObjects", "PrefixAudited") in taken
    assert ("AuditObjects", "SweepLocks") in taken and ("Plan", "AuditObjects") in taken
    assert ("MoreObjects", "AuditPage") not in taken, "no iteration had a second page"
    # The same events without the chain: consecutive states would claim it.
    unchained = [
        {k: v for k, v in e.items() if k != "previousEventId"} for e in _chained(_INTERLEAVED)
    ]
    fallback = viewer.trace(graph, record("unchained", unchained))
    assert ("MoreObjects", "AuditPage") in {
        (graph.edges[i].source, graph.edges[i].target) for i in fallback.taken
    }


def test_an_error_in_one_iteration_is_that_iterations_state() -> None:
    from onceflow import history

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
    steps = history.steps(record("errors", events).result())
    with_errors = [(step.name, step.entered) for step in steps if step.errors]
    assert with_errors == [("AuditPage", events[8]["timestamp"])]
