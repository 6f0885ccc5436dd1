"""`onceflow executions` and `onceflow show` on executions run by the local engine,
a deployed stack's (Step Functions on the engine, its outputs stubbed), and the
page in a real headless Chromium.
"""

from __future__ import annotations

import copy
import datetime
import html
import io
import json
import re
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from onceflow.asl import diagram
from onceflow.cli import main
from onceflow.local.engine import LocalEngine
from onceflow.view import history, records
from onceflow.view import page as view_page
from tests.chromium import Browser, find_chromium
from tests.css import rules
from tests.helpers import MACHINE, idempotency_key, load_event, s3_event, upload

PROCESSOR = diagram.graph(diagram.load_asl(diagram.MACHINES["processor"]))


@dataclass
class Ran:
    name: str
    arn: str
    status: str
    key: str | None
    path: list[str]
    outcome: str | None


# The module's recorded executions are made once (module fixtures) and each test points
# ONCEFLOW_RECORDS at the ones it reads (function fixtures): a module-wide setting would be
# overridden by the module's next one, which pytest-xdist may set up first (its workers
# run a file's tests in any order, more than one worker taking some).


@pytest.fixture(scope="module")
def _recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Ran]]:
    """Four real executions, one after another, recorded into a temporary directory."""
    folder = tmp_path_factory.mktemp("records")
    ran: dict[str, Ran] = {}
    with LocalEngine(function_log=io.StringIO()) as engine:
        version = upload(engine, "uploads/viewer.png")
        corrupt = upload(engine, "uploads/viewer-corrupt.jpg", b"not an image")
        runs = [
            ("viewer-happy", s3_event(engine, "uploads/viewer.png", version), version),
            ("viewer-duplicate", s3_event(engine, "uploads/viewer.png", version), version),
            ("viewer-poison", s3_event(engine, "uploads/viewer-corrupt.jpg", corrupt), corrupt),
            ("viewer-invalid", load_event("invalid-unknown-shape.json"), None),
        ]
        results = []
        for name, event, object_version in runs:
            result = engine.execute(MACHINE, copy.deepcopy(event), name=name)
            results.append(result)
            key = None
            if object_version is not None:
                detail = event["detail"]["object"]
                key = idempotency_key(engine, detail["key"], object_version)
            ran[name] = Ran(
                name, result.arn, result.status, key, result.states_entered, result.outcome
            )
        saved = records.save_all(engine, results, into=folder)
    assert len(saved) == 4
    return folder, ran


@pytest.fixture
def recorded(
    _recorded: tuple[Path, dict[str, Ran]], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Ran]:
    """The four executions, the records this test reads."""
    folder, ran = _recorded
    monkeypatch.setenv(records.ENVIRONMENT, str(folder))
    return ran


def rows(capsys: pytest.CaptureFixture[str], *arguments: str) -> list[dict[str, Any]]:
    assert main(["executions", "--json", *arguments]) == 0
    data: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return data


def test_executions_lists_them_newest_first_with_status_key_and_end_state(
    recorded: dict[str, Ran], capsys: pytest.CaptureFixture[str]
) -> None:
    listed = rows(capsys)
    assert [row["name"] for row in listed] == list(reversed(recorded))
    for row in listed:
        ran = recorded[row["name"]]
        assert row["status"] == ran.status
        assert row["idempotencyKey"] == ran.key
        assert row["endState"] == ran.outcome
        assert row["executionArn"] == ran.arn
        assert row["durationMs"] > 0
    assert [r.status for r in recorded.values()] == ["SUCCEEDED", "SUCCEEDED", "FAILED", "FAILED"]
    assert recorded["viewer-happy"].key == recorded["viewer-duplicate"].key
    assert recorded["viewer-invalid"].key is None  # it never reached Claim
    # The table: the same, and "-" for no key.
    assert main(["executions"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["name", "stack", "status"]
    invalid = next(line for line in table if line.startswith("viewer-invalid"))
    assert invalid.split()[-2:] == ["InvalidEvent", "-"]
    poison = next(line for line in table if line.startswith("viewer-poison"))
    assert poison.split()[2] == "FAILED"
    assert poison.endswith(str(recorded["viewer-poison"].key))


def test_executions_filters_by_status_and_limits(
    recorded: dict[str, Ran], capsys: pytest.CaptureFixture[str]
) -> None:
    assert [r["name"] for r in rows(capsys, "--status", "FAILED")] == [
        "viewer-invalid",
        "viewer-poison",
    ]
    assert [r["name"] for r in rows(capsys, "--limit", "1")] == ["viewer-invalid"]
    assert rows(capsys, "--machine", "audit") == []


class Page(HTMLParser):
    """The state nodes and edges of a page, by their data attributes and classes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.nodes: dict[str, dict[str, str]] = {}
        self.edges: list[dict[str, str]] = []
        self.body: dict[str, str] = {}
        self.root: dict[str, str] = {}
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        classes = values.get("class", "").split()
        if tag == "g" and "node" in classes:
            self.nodes[values["data-state"]] = values
        elif tag == "g" and "edge" in classes:
            self.edges.append(values)
        elif tag == "body":
            self.body = values
        elif tag == "html":
            self.root = values

    def having(self, css_class: str) -> set[str]:
        return {n for n, a in self.nodes.items() if css_class in a["class"].split()}

    def taken(self) -> set[tuple[str, str, str]]:
        return {
            (e["data-source"], e["data-target"], e["class"].split()[1])
            for e in self.edges
            if "taken" in e["class"].split()
        }


EXPECTED = {
    # name: (failed states, caught states, a transition that must be the Catch)
    "viewer-happy": (set(), set(), None),
    "viewer-duplicate": (set(), {"Claim", "Reclaim"}, ("Claim", "Reclaim")),
    "viewer-poison": ({"DeadLettered"}, {"Process"}, ("Process", "MarkFailed")),
    "viewer-invalid": ({"InvalidEvent"}, {"Claim"}, ("Claim", "UnreadableEvent")),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_show_prints_the_path_and_writes_a_page_with_exactly_it_highlighted(
    name: str, recorded: dict[str, Ran], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ran = recorded[name]
    page_file = tmp_path / "page.html"
    assert main(["show", name, "--html", str(page_file)]) == 0
    out = capsys.readouterr().out
    # The terminal: the states in the order entered, then where the page is.
    lines = out.splitlines()
    assert lines[0] == f"Execution {name}"
    assert f"  status: {ran.status}" in "\n".join(lines)
    assert f"  idempotency key: {ran.key or '-'}" in lines
    states = [line.split()[1] for line in lines if re.match(r"\s+\d+\s+\w+\s+\w+", line)]
    assert states == ran.path
    assert lines[-1] == f"html: {page_file}"
    page = Page(page_file.read_text(encoding="utf-8"))
    assert set(page.nodes) == set(PROCESSOR.states)
    entered = {n for n, a in page.nodes.items() if a["data-entered"] == "true"}
    assert entered == set(ran.path)
    assert page.having("entered") == set(ran.path)
    failed, caught, catch = EXPECTED[name]
    assert page.having("failed") == failed
    assert page.having("caught") == caught
    taken = page.taken()
    assert {(s, t) for s, t, _ in taken} == {("", ran.path[0]), *pairwise(ran.path)}
    if catch is not None:
        assert (*catch, "catch") in taken
    assert page.body["data-status"] == ran.status


def test_show_finds_by_arn_and_unique_prefix_and_rejects_the_rest(
    recorded: dict[str, Ran], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "p.html"
    assert main(["show", recorded["viewer-poison"].arn, "--html", str(out)]) == 0
    assert capsys.readouterr().out.startswith("Execution viewer-poison\n")
    assert main(["show", "viewer-po", "--html", str(out)]) == 0
    assert capsys.readouterr().out.startswith("Execution viewer-poison\n")
    assert main(["show", "viewer-", "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is the start of 4 executions' names" in err
    assert all(name in err for name in recorded)
    assert main(["show", "nope", "--html", str(out)]) == 2
    assert "no recorded execution named 'nope'" in capsys.readouterr().err
    elsewhere = recorded["viewer-poison"].arn.replace("processorstatemachine", "other")
    assert main(["show", elsewhere, "--html", str(out)]) == 2
    assert "no recorded execution" in capsys.readouterr().err


def test_show_writes_the_page_under_onceflow_show_by_default(
    recorded: dict[str, Ran],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(view_page, "SHOW_DIRECTORY", tmp_path / "show")
    assert main(["show", "viewer-happy"]) == 0
    written = tmp_path / "show" / "viewer-happy.html"
    assert capsys.readouterr().out.splitlines()[-1] == f"html: {written}"
    assert written.is_file()


# ---- a deployed stack -----------------------------------------------------------


def test_executions_and_show_on_a_deployed_stack(
    engine: LocalEngine,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Step Functions is the engine's (moto); only CloudFormation's DescribeStacks is stubbed."""
    version = upload(engine, "uploads/deployed.png")
    first = engine.execute(MACHINE, s3_event(engine, "uploads/deployed.png", version), name="d-1")
    second = engine.execute(MACHINE, s3_event(engine, "uploads/deployed.png", version), name="d-2")
    outputs = engine.outputs()
    capsys.readouterr()  # what the functions printed (their metrics)
    real_client = boto3.session.Session.client

    def client(self: boto3.session.Session, service: str, *args: Any, **kwargs: Any) -> Any:
        made = real_client(self, service, *args, **kwargs)  # type: ignore[call-overload]
        if service == "cloudformation":
            stubber = Stubber(made)
            stack = {
                "StackName": "onceflow-test",
                "CreationTime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
                "StackStatus": "CREATE_COMPLETE",
                "Outputs": [
                    {"OutputKey": key, "OutputValue": outputs[key]}
                    for key in ("ProcessorStateMachineArn", "AuditStateMachineArn")
                ],
            }
            stubber.add_response(
                "describe_stacks", {"Stacks": [stack]}, {"StackName": "onceflow-test"}
            )
            stubber.activate()
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    monkeypatch.setenv(records.ENVIRONMENT, str(tmp_path / "no-records"))
    stack = ["--stack-name", "onceflow-test", "--region", "us-east-1"]
    listed = rows(capsys, *stack)
    assert {row["name"] for row in listed} == {"d-1", "d-2"}
    by_name = {row["name"]: row for row in listed}
    key = idempotency_key(engine, "uploads/deployed.png", version)
    assert by_name["d-1"]["idempotencyKey"] == by_name["d-2"]["idempotencyKey"] == key
    assert by_name["d-1"]["endState"] == first.outcome == "Processed"
    assert by_name["d-2"]["endState"] == second.outcome == "Duplicate"
    assert len(rows(capsys, *stack, "--limit", "1")) == 1
    page_file = tmp_path / "deployed.html"
    assert main(["show", "d-2", *stack, "--html", str(page_file)]) == 0
    assert capsys.readouterr().out.startswith("Execution d-2\n")
    page = Page(page_file.read_text(encoding="utf-8"))
    assert set(page.nodes) == set(PROCESSOR.states)  # from the deployed definition
    assert page.having("entered") == set(second.states_entered)
    assert main(["show", "nope", *stack]) == 2
    assert "no execution named 'nope'" in capsys.readouterr().err


# ---- the demo's executions in a real browser --------------------------------------


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, records.Record]:
    """`onceflow demo` (small), then `onceflow show` on one of its failed executions."""
    folder = tmp_path_factory.mktemp("demo-records")
    page_file = tmp_path_factory.mktemp("demo-page") / "failed.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(records.ENVIRONMENT, str(folder))
        assert main(["demo", "--objects", "6", "--corrupt", "1", "--json"]) == 0
        failed = [r for r in records.recent(folder) if r.status == "FAILED"]
        assert failed, "the demo's corrupt file should have failed"
        assert main(["show", failed[0].name, "--html", str(page_file)]) == 0
    return page_file, failed[0]


def test_the_demo_records_its_executions_and_show_renders_one(
    demo_page: tuple[Path, records.Record],
) -> None:
    page_file, failed = demo_page
    page = Page(page_file.read_text(encoding="utf-8"))
    path = failed.result().states_entered
    assert path[-1] == "DeadLettered"
    assert page.having("entered") == set(path)
    assert page.having("failed") == {"DeadLettered"}


def _chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip(
            "chromium is not installed: no chromium, chromium-browser or google-chrome on PATH "
            "(apt-get install chromium; .ci/run installs it)"
        )
    return found


def _render(browser: str, url: str, profile: Path) -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and the console messages Chromium logged."""
    completed = subprocess.run(
        [
            browser,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-extensions",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    console = [line for line in completed.stderr.splitlines() if ":CONSOLE" in line]
    return completed.stdout, console


def _panel(dom: str) -> tuple[str, str]:
    """The side panel's data-state, and its text."""
    match = re.search(r'<aside id="panel"[^>]*data-state="([^"]*)"[^>]*>(.*?)</aside>', dom, re.S)
    assert match, "the panel shows no state"
    return html.unescape(match.group(1)), html.unescape(re.sub(r"<[^>]+>", "\n", match.group(2)))


def _pre(dom: str, css_class: str) -> Any:
    match = re.search(rf'<pre class="json {css_class}">(.*?)</pre>', dom, re.S)
    assert match, f"no {css_class} in the panel"
    return json.loads(html.unescape(match.group(1)))


def test_the_page_in_headless_chromium_loads_with_the_path_highlighted_and_no_errors(
    demo_page: tuple[Path, records.Record], tmp_path: Path
) -> None:
    browser = _chromium()
    page_file, failed = demo_page
    steps = {step.name: step for step in _steps(failed)}
    path = failed.result().states_entered
    url = page_file.resolve().as_uri()

    dom, console = _render(browser, url, tmp_path / "profile")
    page = Page(dom)
    assert console == []
    assert page.root["data-errors"] == "[]"
    assert page.body["data-ready"] == "true"  # the page's script ran to its end
    assert '<svg id="graph"' in dom
    assert set(page.nodes) == set(PROCESSOR.states)
    assert page.body["data-node-count"] == str(len(PROCESSOR.states))
    assert page.having("entered") == set(path)
    assert page.body["data-highlighted-count"] == str(len(set(path)))
    taken = [edge for edge in page.edges if "taken" in edge["class"].split()]
    assert page.body["data-taken-count"] == str(len(taken)) and len(taken) >= len(path)
    assert page.having("failed") == {"DeadLettered"}
    # As the console does, it opens on the failed state: its input and the error.
    state, text = _panel(dom)
    assert state == "DeadLettered" and "selected" in page.nodes["DeadLettered"]["class"]
    assert "failed: PermanentError" in text
    assert _pre(dom, "input") == steps["DeadLettered"].input

    # A state picked (as a click does): its input and output, as JSON.
    dom, console = _render(browser, url + "#state=Claim", tmp_path / "profile")
    assert console == [] and Page(dom).root["data-errors"] == "[]"
    state, text = _panel(dom)
    assert state == "Claim"
    assert _pre(dom, "input") == steps["Claim"].input
    assert _pre(dom, "output") == steps["Claim"].output

    dom, _ = _render(browser, url + "#state=Duplicate", tmp_path / "profile")
    state, text = _panel(dom)
    assert state == "Duplicate" and "not entered" in text


def test_the_browser_check_does_see_script_errors(
    demo_page: tuple[Path, records.Record], tmp_path: Path
) -> None:
    """A page with a script error fails the checks above (so their passing means something)."""
    browser = _chromium()
    page_file, _ = demo_page
    text = page_file.read_text(encoding="utf-8")
    broken = tmp_path / "broken.html"
    # Data the page's script cannot parse: it throws.
    broken.write_text(text.replace('id="execution-data">{', 'id="execution-data">{,', 1))
    dom, console = _render(browser, broken.resolve().as_uri(), tmp_path / "profile")
    page = Page(dom)
    assert "data-ready" not in page.body
    assert "JSON" in page.root["data-errors"]
    assert any("Uncaught" in line for line in console)


def _steps(record: records.Record) -> list[Any]:
    return history.steps(record.result())


# ---- a caught error, and the page at the console's level -----------------------------------


@pytest.fixture(scope="module")
def _unreadable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQS message whose body is not JSON while the key is read from the body
    (IdempotencyKeyPath): Claim's rules refuse it and its Catch takes the message to the
    DLQ. Recorded; the records' directory."""
    folder = tmp_path_factory.mktemp("unreadable-records")
    parameters = {"IdempotencyKeyPath": "orderId"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        result = engine.execute(
            MACHINE, load_event("invalid-sqs-body-not-json.json"), name="viewer-unreadable"
        )
        records.save_all(engine, [result], into=folder)
    assert "UnreadableEvent" in result.states_entered and result.status == "FAILED"
    return folder


@pytest.fixture
def unreadable(_unreadable: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Where this test's `onceflow show` of that execution writes its page."""
    monkeypatch.setenv(records.ENVIRONMENT, str(_unreadable))
    return tmp_path / "unreadable.html"


def test_show_marks_the_state_whose_catch_took_the_error(
    unreadable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the recorded execution of an SQS message whose body could not be read
    # WHEN `onceflow show` prints it and writes its page
    assert main(["show", "viewer-unreadable", "--html", str(unreadable)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # THEN the terminal table says Claim caught the error
    column = next(line for line in lines if line.endswith("outcome")).index("outcome")
    outcome = {line.split()[1]: line[column:] for line in lines if re.match(r"\s+\d+\s", line)}
    assert outcome["Claim"] == "caught States.QueryEvaluationError"
    error = outcome["Claim"].removeprefix("caught ")
    # ... and the page marks it caught (not entered-and-fine), with that error
    page = Page(unreadable.read_text(encoding="utf-8"))
    assert page.having("caught") == {"Claim"}
    assert html.unescape(page.nodes["Claim"]["data-error"]) == error
    assert page.having("failed") == {"InvalidEvent"}


# Where everything is on the first screen, as the browser laid it out.
_MEASURE = """(() => {
  const box = (node) => {
    const r = node.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
  };
  const canvas = document.getElementById("canvas");
  const c = canvas.getBoundingClientRect();
  const nodes = (selector) => Array.from(document.querySelectorAll(selector)).map((n) => {
    const rect = n.querySelector("rect");
    const style = getComputedStyle(rect);
    return {name: n.getAttribute("data-state"), ...box(rect), stroke: style.stroke,
            fill: style.fill};
  });
  return {
    viewport: {width: innerWidth, height: innerHeight},
    header: box(document.querySelector("header")),
    toolbar: box(document.querySelector(".toolbar")),
    pane: box(document.getElementById("graph-pane")),
    // the canvas's visible area, scroll bars left out
    canvas: {left: c.left, top: c.top, right: c.left + canvas.clientWidth,
             bottom: c.top + canvas.clientHeight},
    panel: box(document.getElementById("panel")),
    buttons: Object.fromEntries(Array.from(document.querySelectorAll("[data-action]"))
      .map((b) => [b.getAttribute("data-action"), box(b)])),
    entered: nodes('.node[data-entered="true"]'),
    caught: nodes(".node.caught"),
    scale: Number(document.body.getAttribute("data-scale")),
    fit: document.body.getAttribute("data-fit"),
    selected: document.body.getAttribute("data-selected"),
    panelText: document.getElementById("panel").innerText,
    errors: document.documentElement.getAttribute("data-errors"),
  };
})()"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and (b["top"] < a["bottom"])
    )


def _inside(inner: dict[str, float], outer: dict[str, float], slack: float = 0.5) -> bool:
    return (
        inner["left"] >= outer["left"] - slack
        and inner["right"] <= outer["right"] + slack
        and inner["top"] >= outer["top"] - slack
        and inner["bottom"] <= outer["bottom"] + slack
    )


def _rgb(colour: str) -> str:
    """#e07700 as a computed style gives it: rgb(224, 119, 0)."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def _centre(area: dict[str, float]) -> tuple[float, float]:
    return (area["left"] + area["right"]) / 2, (area["top"] + area["bottom"]) / 2


def test_the_page_at_1280x800_lays_graph_and_detail_side_by_side_with_the_path_in_view(
    unreadable: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "viewer-unreadable", "--html", str(unreadable)]) == 0
    capsys.readouterr()
    style = next(rule for rule in rules(view_page.static("viewer.css")) if rule.selector == ":root")
    colours = dict(style.declarations)
    # GIVEN the page in a real Chromium whose viewport is 1280 x 800 CSS pixels
    with Browser(_chromium(), tmp_path / "profile", 1280, 800) as browser:
        browser.open(unreadable.resolve().as_uri())
        # WHEN it has loaded
        first = browser.evaluate(_MEASURE)
        browser.screenshot(tmp_path / "first.png")  # kept with the test's files
        # THEN the header, the graph's toolbar and canvas, and the detail panel are all on
        # the first screen, the graph and the detail side by side, none over another
        assert first["viewport"] == {"width": 1280, "height": 800}
        assert first["errors"] == "[]" and browser.problems() == []
        screen = {"left": 0, "top": 0, "right": 1280, "bottom": 800}
        parts = ["header", "toolbar", "canvas", "panel"]
        for part in parts:
            assert _inside(first[part], screen), part
        for n, part in enumerate(parts):
            for other in parts[n + 1 :]:
                assert not _overlap(first[part], first[other]), (part, other)
        assert first["pane"]["right"] <= first["panel"]["left"] + 0.5
        assert first["pane"]["top"] == first["panel"]["top"]  # one row: side by side
        assert first["canvas"]["right"] - first["canvas"]["left"] >= 600
        assert first["canvas"]["bottom"] - first["canvas"]["top"] >= 400
        for action, button in first["buttons"].items():
            assert _inside(button, first["toolbar"]), action
        # ... the whole path fitted into the graph's visible area
        assert first["fit"] == "path" and len(first["entered"]) == len(PATH_UNREADABLE)
        for node in first["entered"]:
            assert _inside(node, first["canvas"]), node["name"]
        # ... the caught states drawn in the caught colour (orange), the selected one
        # (the failed end state) excepted, which has the selection's outline
        assert {n["name"] for n in first["caught"]} == {"Claim"}
        parse = next(n for n in first["caught"] if n["name"] == "Claim")
        assert parse["stroke"] == _rgb(colours["--caught-line"])
        assert parse["fill"] == _rgb(colours["--caught"])

        # WHEN the zoom-in button is clicked, as a mouse does
        browser.click(*_centre(first["buttons"]["zoom-in"]))
        zoomed = browser.evaluate(_MEASURE)
        # THEN the graph is drawn larger by the zoom step
        assert zoomed["scale"] == pytest.approx(first["scale"] * 1.25, rel=1e-3)
        before = {n["name"]: n["right"] - n["left"] for n in first["entered"]}
        for node in zoomed["entered"]:
            width = node["right"] - node["left"]
            assert width == pytest.approx(before[node["name"]] * 1.25, rel=0.02), node["name"]

        # WHEN "Fit path" is clicked again
        browser.click(*_centre(zoomed["buttons"]["fit"]))
        fitted = browser.evaluate(_MEASURE)
        # THEN the path is back in view, at the first scale
        assert fitted["scale"] == pytest.approx(first["scale"], rel=1e-3)
        for node in fitted["entered"]:
            assert _inside(node, fitted["canvas"]), node["name"]

        # WHEN the caught state is clicked
        parse = next(n for n in fitted["entered"] if n["name"] == "Claim")
        browser.click(*_centre(parse))
        picked = browser.evaluate(_MEASURE)
        # THEN the panel shows it, with the error it caught
        assert picked["selected"] == "Claim"
        assert "Caught error: " in picked["panelText"]
        assert browser.problems() == []


PATH_UNREADABLE = {
    "Claim",
    "UnreadableEvent",
    "DescribeInvalidEvent",
    "SendToDLQ",
    "DeadLetterReason",
    "InvalidEvent",
}


def test_every_rule_of_the_pages_css_is_one_chromium_takes(tmp_path: Path) -> None:
    # GIVEN each selector and declaration of the page's style sheet
    sheet = rules(view_page.static("viewer.css"))
    selectors = sorted({part.strip() for rule in sheet for part in rule.selector.split(",")})
    declarations = sorted({pair for rule in sheet for pair in rule.declarations})
    # WHEN Chromium is asked whether it supports them
    with Browser(_chromium(), tmp_path / "profile", 800, 600) as browser:
        browser.open("about:blank")
        unknown_selectors = browser.evaluate(
            f"{json.dumps(selectors)}.filter((s) => !CSS.supports(`selector(${{s}})`))"
        )
        unknown = browser.evaluate(
            f"{json.dumps(declarations)}.filter(([name, value]) => !CSS.supports(name, value))"
        )
    # THEN it supports every one (a typo in a property or a value would be dropped silently)
    assert len(selectors) > 20 and len(declarations) > 100
    assert unknown_selectors == [] and unknown == []


def test_the_panel_shows_the_variables_the_work_item_travels_in(
    demo_page: tuple[Path, records.Record], tmp_path: Path
) -> None:
    # GIVEN the demo's failed execution, where Process's input is Claim's PutItem result
    # (no attributes: only the SDK's metadata, as AWS's results carry it) and the work
    # item travels in variables
    page_file, failed = demo_page
    steps = _steps(failed)
    process = next(step for step in steps if step.name == "Process")
    assert set(process.input) <= {"SdkHttpMetadata", "SdkResponseMetadata"}
    expected = history.scope(steps, process.index)
    assert "workItem" in expected
    # WHEN Process is picked in the page
    with Browser(_chromium(), tmp_path / "profile", 1280, 800) as browser:
        browser.open(page_file.resolve().as_uri() + "#state=Process")
        shown = browser.evaluate(
            "[document.body.getAttribute('data-selected'),"
            " document.querySelector('#panel pre.variables-scope').textContent,"
            " document.querySelector('#panel .variables-assigned').textContent]"
        )
    # THEN its panel shows the variables in scope when it was entered, as the history has
    # them, and what it assigned
    assert shown[0] == "Process"
    assert json.loads(shown[1]) == json.loads(json.dumps(expected))
    assigned = shown[2] if shown[2] == "none" else json.loads(shown[2])
    assert assigned == (process.assigned or "none")
