"""The command line: execute and invoke on the files in events/, and the demo."""

from __future__ import annotations

import io
import json
import re
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.cli import FRESH_STACK, main
from onceflow.harness.demo import DemoConfig, run_demo
from onceflow.local import INPUT_DEPTH_LIMIT, server
from onceflow.local.engine import RECURSION_LIMIT, LocalEngine
from tests import sam_events

EVENTS = Path(__file__).resolve().parents[2] / "events"


def test_execute_prints_the_path_taken(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["execute", "ProcessorStateMachine", "-e", str(EVENTS / "s3-object-created.json")])
    out, err = capsys.readouterr()
    assert code == 0
    assert "status: SUCCEEDED" in out
    for state in ("Claim", "Process", "MarkComplete"):
        assert state in out
    assert "ended in: Processed" in out
    assert "uploaded a sample image" in err


def test_execute_json_reports_status_output_and_states(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "execute",
            "ProcessorStateMachine",
            "-e",
            str(EVENTS / "s3-object-created-poison.json"),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["status"] == "FAILED"
    assert report["error"] == "PermanentError"
    assert [s["name"] for s in report["states"]][-1] == "DeadLettered"


def test_execute_and_show_name_the_error_a_batch_messages_fail_state_raised(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from onceflow.view import records

    monkeypatch.setenv(records.ENVIRONMENT, str(tmp_path / "records"))
    # GIVEN the batch workflow, and an upload the bundled processor cannot read
    poison = str(EVENTS / "s3-object-created-poison.json")
    overrides = ["SqsBatchMode=true", "ProcessorTimeoutSeconds=40"]
    # WHEN it runs, as the message the rule sends to the source queue, and is shown again
    code = main(["execute", "BatchProcessorStateMachine", "-e", poison, "--no-server",
                 "--parameter-overrides", *overrides])  # fmt: skip
    ran, err = capsys.readouterr()
    name = re.search(r"onceflow show (\S+)`", err)
    assert code == 0 and name is not None, ran + err
    page = tmp_path / "page.html"
    assert main(["show", name.group(1), "--html", str(page)]) == 0
    shown = capsys.readouterr().out
    # THEN the message's DeadLettered (a Fail state in LogDeadLettered's branch, whose
    # error no event of the history names) and LogDeadLettered, whose Catch took it, are
    # both caught with the Error the definition gives the Fail state, in both tables
    for out in (ran, shown):
        rows = {line.split()[2]: line for line in out.splitlines() if " EachMessage#0 " in line}
        assert rows["DeadLettered"].endswith("caught DeadLettered"), out
        assert rows["LogDeadLettered"].endswith("caught DeadLettered"), out
        assert "does not name" not in out
    # AND on the page
    assert 'data-error="(an error' not in page.read_text(encoding="utf-8")


def test_execute_invalid_event_names_the_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "execute",
            "ProcessorStateMachine",
            "-e",
            str(EVENTS / "invalid-unknown-shape.json"),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["error"] == "InvalidEvent"
    assert "unknown event shape" in report["cause"]


def test_invoke_runs_the_function_like_sam_local_invoke(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["invoke", "ProcessorFunction", "-e", str(EVENTS / "processor-payload.json")])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    assert payload["created"] is True and payload["output"].endswith(".webp")


def test_unknown_state_machine_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["execute", "Nope", "-e", str(EVENTS / "s3-object-created.json")])
    assert code == 2
    assert "no state machine 'Nope'" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["s3", "sqs"])
def test_small_demo_is_exactly_once(source: str) -> None:
    # (20 objects at seed 3: 12 duplicated deliveries and 1 lost, as 40 had 15 and 3)
    config = DemoConfig(
        objects=20, corrupt=2, seed=3, duplicate_rate=0.3, loss_rate=0.1, source=source
    )
    report = run_demo(config, progress=None)
    data = report.data
    assert data["source"] == source
    assert data["exactly_once"] is True
    assert data["objects"] == 22
    assert data["duplicate_deliveries"] > 0
    assert data["duplicates_discarded"] == data["duplicate_deliveries"]
    assert data["dead_lettered"] == 2
    assert data["objects_with_multiple_effects"] == 0
    assert data["delivered_processable_objects_without_effect"] == 0
    assert data["deliveries"] == 22 - data["lost_deliveries"] + data["duplicate_deliveries"]
    # The audit found the lost ones: every processable object took effect once.
    audit = data["audit"]
    assert data["lost_deliveries"] > 0
    assert audit["missing_resubmitted"] == data["lost_deliveries"]
    assert audit["scanned"] == 22 and audit["stuck_released"] == 0
    assert audit["ok"] + audit["missing_resubmitted"] + audit["dead_lettered_skipped"] == 22
    assert data["second_audit_resubmitted"] == 0
    assert data["effects_histogram"] == {"0": 2, "1": 20}
    assert "exactly once: OK" in report.render()


def test_demo_json_through_sqs(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--source", "sqs", "--objects", "12", "--corrupt", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["source"] == "sqs" and report["exactly_once"] is True
    assert report["violations"] == []
    assert report["delivered_processable_objects_without_effect"] == 0
    assert set(report["audit"]) >= {
        "scanned",
        "skipped_recent",
        "skipped_old",
        "ok",
        "missing_resubmitted",
        "failed_resubmitted",
        "dead_lettered_skipped",
        "stuck_released",
    }


# The table of events/ in docs/local-engine.md ("Try events") and the state each one ends in
# on the local engine: file -> (end state, parameter overrides).
KEYED_BY_ORDER = ["--parameter-overrides", "IdempotencyKeyPath=orderId"]
EXPECTED_END_STATE: dict[str, tuple[str, list[str]]] = {
    "s3-object-created.json": ("Processed", []),
    "s3-object-created-unversioned.json": ("Processed", []),
    "s3-object-created-special-key.json": ("Processed", []),
    "s3-object-created-poison.json": ("DeadLettered", []),
    "sqs-s3-notification.json": ("Processed", []),
    "sqs-business-message.json": ("Processed", []),
    "eventbridge-custom-event.json": ("Processed", []),
    "work-item.json": ("Processed", []),
    "processor-payload.json": ("Processed", []),
    "invalid-unknown-shape.json": ("InvalidEvent", []),
    "invalid-s3-missing-key.json": ("InvalidEvent", []),
    "invalid-s3-missing-bucket.json": ("InvalidEvent", []),
    "invalid-s3-key-too-long.json": ("InvalidEvent", []),
    "invalid-s3-foreign-bucket.json": ("InvalidEvent", []),
    "invalid-sqs-missing-body.json": ("InvalidEvent", []),
    "invalid-sqs-body-not-json.json": ("InvalidEvent", KEYED_BY_ORDER),
    "invalid-sqs-key-path-yields-nothing.json": ("InvalidEvent", KEYED_BY_ORDER),
    "invalid-event-too-large.json": ("InvalidEvent", []),
}


# The audit's events: file -> (state machine or function, what it ends in).
AUDIT_EVENTS: dict[str, tuple[str, str]] = {
    "audit-run.json": ("AuditStateMachine", "Audited"),
    "audit-prefix.json": ("AuditStateMachine", "Audited"),
    "audit-batch.json": ("AuditFunction", "one batch's counts"),
}


def test_every_sample_event_is_listed() -> None:
    assert sorted(p.name for p in EVENTS.glob("*.json")) == sorted(
        [*EXPECTED_END_STATE, *AUDIT_EVENTS]
    )


@pytest.mark.parametrize("name", ["audit-run.json", "audit-prefix.json"])
def test_audit_events_run_the_audit(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["execute", "AuditStateMachine", "-e", str(EVENTS / name), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in report["states"]][-3:] == ["Report", "ObjectsAudited", "Audited"]
    assert report["output"]["scanned"] == 0
    assert report["output"]["prefix"] == json.loads((EVENTS / name).read_text()).get("prefix", "")


@pytest.mark.parametrize(
    ("function", "payload", "said"),
    [
        ("ProcessorFunction", None, "the payload is a JSON array, not an object"),
        ("ProcessorFunction", {"workItem": "uploads/a.png"}, "no workItem with an idempotencyKey"),
        ("AuditFunction", None, "the event is a JSON array, not an object"),
    ],
)
def test_a_function_invoked_with_what_it_is_never_sent_answers_permanent_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    function: str,
    payload: object,
    said: str,
) -> None:
    # GIVEN a file the function is never sent: the pipe's SQS messages (a JSON array, an
    # input of the processor state machine), or a work item that is not an object
    event = EVENTS / "sqs-business-message.json"
    if payload is not None:
        event = tmp_path / "payload.json"
        event.write_text(json.dumps(payload), encoding="utf-8")
    # WHEN it is invoked, as `sam local invoke -e` would invoke it
    code = main(["invoke", function, "-e", str(event), "--no-server"])
    # THEN the function refuses it as input no retry fixes (its contract's PermanentError,
    # which the state machine dead-letters), naming what it got, not with an AttributeError
    answer = json.loads(capsys.readouterr().out)
    assert code == 1
    assert answer["errorType"] == "PermanentError", answer
    assert said in answer["errorMessage"]


def test_audit_batch_event_invokes_the_audit_function(capsys: pytest.CaptureFixture[str]) -> None:
    # The sample's object is not in the (empty) local bucket: listed, it has no versions.
    assert main(["invoke", "AuditFunction", "-e", str(EVENTS / "audit-batch.json")]) == 0
    batch = json.loads(capsys.readouterr().out)
    assert batch["counts"]["scanned"] == 0 and batch["resubmittedSample"] == []


@pytest.mark.parametrize(
    ("name", "end_state", "overrides"),
    [(name, state, overrides) for name, (state, overrides) in sorted(EXPECTED_END_STATE.items())],
)
def test_sample_event_ends_where_the_docs_say(
    name: str, end_state: str, overrides: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    main(["execute", "ProcessorStateMachine", "-e", str(EVENTS / name), "--json", *overrides])
    report = json.loads(capsys.readouterr().out)
    assert report["endedIn"] == end_state


def test_docs_table_lists_every_sample_event_with_its_end_state() -> None:
    doc = (EVENTS.parent / "docs" / "local-engine.md").read_text(encoding="utf-8")
    expected = {**{n: s for n, (s, _) in EXPECTED_END_STATE.items()},
                **{n: s for n, (_, s) in AUDIT_EVENTS.items()}}  # fmt: skip
    for name, end_state in expected.items():
        row = next((line for line in doc.splitlines() if f"`{name}`" in line), None)
        assert row is not None, f"docs/local-engine.md has no row for {name}"
        assert end_state in row, f"docs/local-engine.md's row for {name} does not say {end_state}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--messages", "0"], "--messages must be at least 1"),
        (["--warmup", "-1"], "--warmup must not be negative"),
        (["--audit-keys", "0"], "--audit-keys must be at least 1"),
    ],
)
def test_bench_refuses_bad_sizes_before_it_starts(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["bench", *argv])
    assert str(refused.value) == f"onceflow bench: {message}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--concurrency", "0"], "onceflow demo: --concurrency must be at least 1"),
        (["demo", "--objects", "-5"], "onceflow demo: --objects must be at least 1"),
        (["demo", "--corrupt", "-1"], "onceflow demo: --corrupt must not be negative"),
        (["chaos", "--concurrency", "0"], "onceflow chaos: --concurrency must be at least 1"),
        (["chaos", "--duplicate-rate", "2"],
         "onceflow chaos: --duplicate-rate is a share: from 0 to 1, not 2.0"),
        (["chaos", "--lost-rate", "-0.1"],
         "onceflow chaos: --lost-rate is a share: from 0 to 1, not -0.1"),
        (["redrive", "--max", "0", "--no-server"], "onceflow redrive: --max must be at least 1"),
        (["inspect", "k", "--recent", "-1", "--no-server"],
         "onceflow inspect: --recent must not be negative"),
        (["executions", "--limit", "-1"], "onceflow executions: --limit must be at least 1"),
        (["up", "--port", "70000"], "onceflow up: --port must be from 0 to 65535"),
        (["up", "--time-scale", "-1"], "onceflow up: --time-scale must not be negative"),
    ],
)  # fmt: skip
def test_a_number_out_of_its_range_is_refused_in_one_line_before_anything_runs(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # GIVEN a count, a rate or a port no run can use (`demo --concurrency 0` ended in a
    # traceback from ThreadPoolExecutor; `demo --objects -5` reported "0 (5 corrupt)";
    # `executions --limit -1` printed all but the last)
    # WHEN the command is run THEN it refuses in one line, before it starts anything
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert str(refused.value) == message
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err


def _s3_event(**object_fields: object) -> dict[str, object]:
    event = json.loads((EVENTS / "s3-object-created.json").read_text(encoding="utf-8"))
    event["detail"]["object"].update(object_fields)
    return dict(event)


HOSTILE_FILES = [
    pytest.param(_s3_event(key="up/\ud800.png"), 1, "not valid Unicode", id="lone-surrogate-key"),
    pytest.param("\udc00x", 1, "the event is not a JSON object", id="lone-surrogate-string"),
    pytest.param(
        [{"eventSource": "aws:sqs", "messageId": "m", "body": json.dumps({"Records": ["x"]})}],
        0,
        "PROCESSED",
        id="records-not-objects",
    ),
    pytest.param(_s3_event(pad="x" * 300_000), 1, "refused the execution", id="over-256-kib"),
    pytest.param(_s3_event(size=float("inf")), 1, "send the key as a string", id="1e400"),
    # 900 levels: Step Functions' JSONata judges it (up to about 2,980 levels of objects,
    # docs/ingress.md), so it is processed like any other upload
    pytest.param(_s3_event(pad="NESTED"), 0, "Processed", id="deep-nesting"),
]


@pytest.mark.parametrize(("event", "code", "said"), HOSTILE_FILES)
def test_execute_takes_any_json_without_a_traceback(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    event: object,
    code: int,
    said: str,
) -> None:
    # GIVEN an event file a user (or a fuzzer) may hand to `onceflow execute`
    path = tmp_path / "event.json"
    text = json.dumps(event).replace("Infinity", "1e400")  # as the JSON text would carry it
    path.write_text(text.replace('"NESTED"', '{"n": ' * 900 + "1" + "}" * 900), encoding="utf-8")
    # WHEN it is executed
    try:
        result = main(["execute", "ProcessorStateMachine", "-e", str(path)])
    except SystemExit as exc:  # a clear refusal, as argparse and the CLI give
        result = 1 if isinstance(exc.code, str) else int(exc.code or 0)
        message = str(exc.code)
    else:
        message = ""
    out, err = capsys.readouterr()
    # THEN it ends with an exit code and a named outcome, never an unhandled exception
    assert result == code
    assert said in out + err + message
    assert "Traceback" not in out + err


class _ClosedPipe(io.StringIO):
    """stdout after its reader went away (onceflow diagrams | head -1)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_went_away_ends_the_command_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a stdout whose reader has closed the pipe
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    # WHEN a command prints to it, THEN it ends with status 1 and says nothing more
    assert main(["diagrams"]) == 1
    assert capsys.readouterr().err == ""


# ---- The events SAM users already have ----------------------------------------------


def test_sams_s3_put_event_is_processed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the file `sam local generate-event s3 put` writes (its default bucket and key)
    event = sam_events.write(tmp_path / "s3-put.json", "s3", "put")
    # WHEN it is executed on the processor
    code = main(["execute", "ProcessorStateMachine", "-e", str(event), "--json"])
    # THEN it is processed as the pipe would deliver it, and the notes say how
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 0 and report["endedIn"] == "Processed"
    assert "classic S3 notification (Records[].s3): run as the SQS message" in err
    assert "bucket example-bucket stands for the local stack's" in err


@pytest.mark.parametrize(
    ("function", "sample"),
    [("ProcessorFunction", "events/processor-payload.json"),
     ("AuditFunction", "events/audit-batch.json")],
)  # fmt: skip
@pytest.mark.parametrize(("service", "kind"), [("s3", "put"), ("sqs", "receive-message")])
def test_a_sam_event_invoked_on_a_function_names_the_sample(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    function: str,
    sample: str,
    service: str,
    kind: str,
) -> None:
    # GIVEN a SAM-generated S3 or SQS event, which neither function is ever sent
    event = sam_events.write(tmp_path / "event.json", service, kind)
    # WHEN it is invoked on a function
    code = main(["invoke", function, "-e", str(event)])
    # THEN it is refused, naming the sample the function takes and where the event goes
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert f"{function} is never sent" in err and sample in err
    assert "onceflow execute ProcessorStateMachine -e FILE" in err
    assert "Traceback" not in err


def test_a_foreign_bucket_says_how_the_placeholder_maps_locally(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN an event naming a bucket the local stack does not have
    event = EVENTS / "invalid-s3-foreign-bucket.json"
    # WHEN it is executed
    code = main(["execute", "ProcessorStateMachine", "-e", str(event), "--json"])
    # THEN it ends as on AWS (refused), and the note says which names stand for the bucket
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out)["states"][-1]["name"] == "InvalidEvent"
    assert "bucket someone-elses-bucket is not the local stack's" in err
    assert "amzn-s3-demo-bucket (the AWS docs' placeholder)" in err
    assert "stand for the ingest bucket onceflow-local-ingestbucket-" in err


# ---- What the commands print ------------------------------------------------------


def test_a_command_without_onceflow_up_says_it_runs_on_a_fresh_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN no `onceflow up` running (the suite's state directory holds no address)
    # WHEN a command runs on a local engine
    assert main(["execute", "ProcessorStateMachine", "-e", str(EVENTS / "work-item.json")]) == 0
    # THEN it says once that the stack is fresh and empty, and how to keep one
    err = capsys.readouterr().err
    assert err.count(FRESH_STACK) == 1
    assert "fresh, empty local stack" in FRESH_STACK and "`onceflow up`" in FRESH_STACK


@pytest.fixture
def shared() -> Iterator[server.EngineServer]:
    """The engine `onceflow up` holds, without its HTTP side: commands run on it in turn."""
    with LocalEngine(function_log=io.StringIO()) as engine:
        engine_server = server.EngineServer(engine, {}, command=main)
        try:
            yield engine_server
        finally:
            engine_server.server_close()


# Python's own renderings, which a user never should see: an object's repr, a file
# object, a dict or list as Python prints it, and a time with a space for ISO's T.
REPRS = re.compile(r"<[\w.]+ object at 0x|<_io\.|\{'|\['|\d{4}-\d\d-\d\d \d\d:\d\d")


def test_commands_print_no_python_reprs_and_iso_times(
    shared: server.EngineServer, tmp_path: Path
) -> None:
    # GIVEN one engine that has processed an object (so inspect has a ledger row)
    ran = shared.run(["execute", "ProcessorStateMachine", "-e", str(EVENTS / "work-item.json")])
    assert ran["code"] == 0, ran["stderr"]
    listed = json.loads(shared.run(["executions", "--json", "--limit", "1"])["stdout"])
    key = listed[0]["idempotencyKey"]
    commands = [
        ["execute", "ProcessorStateMachine", "-e", str(EVENTS / "s3-object-created-poison.json")],
        ["execute", "ProcessorStateMachine", "-e", str(EVENTS / "work-item.json"), "--json"],
        ["invoke", "ProcessorFunction", "-e", str(EVENTS / "processor-payload.json")],
        ["inspect", key],
        ["inspect", key, "--json"],
        ["audit"],
        ["redrive", "--dry-run"],
        ["redrive", "--undelivered", "--json"],
        ["executions"],
        ["show", ran["stderr"].split("onceflow show ")[1].split("`")[0], "--html",
         str(tmp_path / "page.html")],
        ["diagrams", "--check"],
    ]  # fmt: skip
    for argv in commands:
        # WHEN each command runs
        result = shared.run(argv)
        printed = result["stdout"] + result["stderr"]
        # THEN it ends without a traceback, and prints no Python repr or non-ISO time
        assert "Traceback" not in printed, (argv, printed)
        assert not REPRS.search(printed), (argv, REPRS.search(printed), printed)
    # AND the ledger's epoch times read as ISO 8601 beside their numbers
    inspected = shared.run(["inspect", key])["stdout"]
    assert re.search(r"created_at\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  \(\d+\)", inspected)


def test_invoke_runs_on_the_engine_of_onceflow_up_when_one_is_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN `onceflow up` running (on a thread here), its address in the state directory
    monkeypatch.setenv("ONCEFLOW_STATE_DIR", str(tmp_path))
    with LocalEngine(function_log=io.StringIO()) as engine:
        engine_server = server.EngineServer(engine, {}, command=main)
        engine_server.publish()
        thread = threading.Thread(target=engine_server.serve_forever, daemon=True)
        thread.start()
        try:
            # WHEN a function is invoked
            code = main(
                ["invoke", "ProcessorFunction", "-e", str(EVENTS / "processor-payload.json")]
            )
        finally:
            engine_server.shutdown()
            engine_server.unpublish()
            engine_server.server_close()
            thread.join(5)
    # THEN it ran there, not on a fresh stack of its own
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["created"] is True
    assert f"running on the local engine at port {engine_server.port}" in err
    assert FRESH_STACK not in err


def test_a_sample_runs_on_a_stack_over_an_existing_bucket(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a stack over a bucket it does not own (ExistingBucketName): no IngestBucket
    # WHEN the S3 sample is executed on it
    code = main([
        "execute", "ProcessorStateMachine", "-e", "events/s3-object-created.json", "--json",
        "--parameter-overrides", "ExistingBucketName=users-own-bucket",
    ])  # fmt: skip
    # THEN the placeholder bucket stands for that bucket, and the upload is processed
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["endedIn"] == "Processed"
    assert "stands for the local stack's users-own-bucket" in err


def test_executions_run_by_execute_have_names_told_apart_at_a_glance(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN two executions run one after the other without --name
    event = str(EVENTS / "eventbridge-custom-event.json")
    names = []
    for _ in range(2):
        assert main(["execute", "ProcessorStateMachine", "-e", event, "--no-server"]) == 0
        found = re.search(r"onceflow show (\S+)`", capsys.readouterr().err)
        assert found is not None
        names.append(found.group(1))
    # THEN each names its state machine first, briefly, and the two differ within
    # their first 20 characters (a unique start of a name is what `show` takes); the
    # engine's own names shared their first 41
    assert all(name.startswith("processor-") for name in names)
    assert names[0][:20] != names[1][:20]


def test_a_processor_function_arn_the_local_stack_lacks_says_how_to_run_yours(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a ProcessorFunctionArn of a function that exists only in the user's account
    arn = "arn:aws:lambda:us-east-1:123456789012:function:mine"
    # WHEN a work item is executed with it on a fresh local stack
    event = str(EVENTS / "work-item.json")
    overrides = ["--parameter-overrides", f"ProcessorFunctionArn={arn}"]
    code = main(["execute", "ProcessorStateMachine", "-e", event, *overrides, "--no-server"])
    # THEN it fails as on AWS (Lambda's ResourceNotFound), and the note before it says
    # how a function of the user's runs locally
    captured = capsys.readouterr()
    assert code == 1 and "Lambda.ResourceNotFoundException" in captured.out
    assert f"ProcessorFunctionArn {arn} is no function of the local stack" in captured.err
    assert "onceflow init" in captured.err and "examples/word-count" in captured.err


def test_upload_to_a_machine_s3_never_starts_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a file of the user's, and the audit, which no S3 event starts
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG")
    # WHEN they upload it to run through the audit
    code = main(["execute", "AuditStateMachine", "--upload", str(mine), "--no-server"])
    # THEN it is refused before anything runs, naming the machine that takes S3's event
    err = capsys.readouterr().err
    assert code == 2 and "--upload runs S3's Object Created event" in err
    assert "ProcessorStateMachine takes" in err and "Traceback" not in err


def test_the_audit_report_names_the_keys_it_lists_as_resubmitted() -> None:
    # GIVEN an audit report that resubmitted one failed upload and left no open work
    from onceflow.cli.stack_commands import render_audit

    key = "s3://bucket/neg.csv#v1"
    report = {"audit": "a1", "bucket": "bucket", "failed_resubmitted": 1, "sweep_deferred": 0,
              "resubmitted_sample": [key]}  # fmt: skip
    # WHEN it is printed
    lines = render_audit(report).splitlines()
    # THEN the key is listed under a line that says what it is, not under the last count
    at = lines.index(f"    - {key}")
    assert lines[at - 1].strip() == "resubmitted (the first keys):"
    assert "open work left to the next audit" not in lines[at - 1]


def test_the_audit_report_prints_every_count_the_audit_keeps() -> None:
    # GIVEN every count an audit report carries (the audit's own list), each a distinct value
    from onceflow.cli.stack_commands import render_audit
    from service.logic.audit import COUNT_KEYS

    report = {key: 1000 + n for n, key in enumerate(COUNT_KEYS)}
    # WHEN it is printed
    text = render_audit(report)
    # THEN each count is on a line of its own: none the audit alarms on is left out
    printed = [line.rsplit(" ", 1)[-1] for line in text.splitlines()[1:]]
    assert sorted(printed) == sorted(str(value) for value in report.values())


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"k": "caf\xe9"}', "is not UTF-8 text"),  # saved as Latin-1
        ("{not json", "is not JSON"),
        ("", "is not JSON"),
    ],
)
def test_an_event_file_that_cannot_be_read_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | str, said: str
) -> None:
    # GIVEN an event file a user saved in another encoding, or one that is not JSON
    path = tmp_path / "mine.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    # WHEN it is executed
    with pytest.raises(SystemExit) as refused:
        main(["execute", "ProcessorStateMachine", "-e", str(path), "--no-server"])
    # THEN the command names the file and what is wrong with it, in one line, before it runs
    message = str(refused.value.code)
    assert message.startswith(f"onceflow: {path} ") and said in message
    assert "\n" not in message and "Traceback" not in capsys.readouterr().err


def _nested_file(tmp_path: Path, depth: int) -> Path:
    path = tmp_path / "deep.json"
    path.write_text('{"a": ' * depth + "1" + "}" * depth, encoding="utf-8")
    return path


@pytest.mark.parametrize("depth", [1500, INPUT_DEPTH_LIMIT])
def test_an_event_file_as_deep_as_the_engine_runs_is_run_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], depth: int
) -> None:
    # GIVEN an event nested 1,500 levels deep (deeper than Python's default recursion limit,
    # within what the processor's JSONata reads: docs/ingress.md, "Deep nesting"), or as deep
    # as the engine runs (deeper than the JSONata reads)
    path = _nested_file(tmp_path, depth)
    # WHEN it is executed
    code = main(["execute", "ProcessorStateMachine", "-e", str(path), "--no-server", "--json"])
    # THEN it runs, and Claim's rules judge it: an InvalidEvent, not a refusal before the run
    assert code == 1
    assert json.loads(capsys.readouterr().out)["endedIn"] == "InvalidEvent"


def test_an_event_file_deeper_than_the_engine_runs_is_refused_by_its_start_in_one_line(
    tmp_path: Path,
) -> None:
    # GIVEN an event one level deeper than the engine runs, which Python still reads
    path = _nested_file(tmp_path, INPUT_DEPTH_LIMIT + 1)
    # WHEN it is executed THEN StartExecution refuses it, and the command says why in a line
    with pytest.raises(SystemExit) as refused:
        main(["execute", "ProcessorStateMachine", "-e", str(path), "--no-server"])
    said = str(refused.value.code)
    assert said.startswith("onceflow execute: Step Functions refused the execution: ")
    assert "(InvalidExecutionInput)" in said and "\n" not in said
    assert f"the input nests {INPUT_DEPTH_LIMIT + 1} levels deep" in said


def test_an_event_file_deeper_than_the_engine_reads_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an event nested deeper than the engine's recursion limit
    path = _nested_file(tmp_path, RECURSION_LIMIT + 100)
    # WHEN it is executed THEN it is refused in one line, with the depth the tool reads
    with pytest.raises(SystemExit) as refused:
        main(["execute", "ProcessorStateMachine", "-e", str(path), "--no-server"])
    message = str(refused.value.code)
    assert message.startswith(f"onceflow: {path} nests deeper than this tool reads")
    assert f"{RECURSION_LIMIT:,}" in message and "\n" not in message


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("Resources:\n  A: [\n", "is not YAML or JSON: line 3, column 1: did not find expected"),
        ("Resources:\n  Q:\n    Type: AWS::SQS::Queue\n",
         "no state machine 'ProcessorStateMachine'; the template has none (neither "
         "onceflow's nor an app that nests it)"),
    ],
)  # fmt: skip
def test_a_template_the_command_cannot_use_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, said: str
) -> None:
    # GIVEN a template of the user's with a YAML mistake, or one without onceflow in it
    path = tmp_path / "template.yaml"
    path.write_text(template, encoding="utf-8")
    event = Path(__file__).resolve().parents[2] / "events" / "work-item.json"
    # WHEN a command runs on it
    code = main(["execute", "ProcessorStateMachine", "-e", str(event), "-t", str(path),
                 "--no-server", "--no-record"])  # fmt: skip
    # THEN it says what is wrong in one line
    err = capsys.readouterr().err
    assert code == 2
    [line] = [line for line in err.splitlines() if not line.startswith("local: ")]
    assert said in line


def test_show_without_a_name_shows_the_current_stacks_newest_execution(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from onceflow.view import records

    monkeypatch.setenv(records.ENVIRONMENT, str(tmp_path / "records"))
    # GIVEN two executions recorded, a Processed one and then an InvalidEvent
    custom = str(EVENTS / "eventbridge-custom-event.json")
    invalid = str(EVENTS / "invalid-unknown-shape.json")
    for event in (custom, invalid):
        main(["execute", "ProcessorStateMachine", "-e", event, "--no-server"])
    names = re.findall(r"onceflow show (\S+)`", capsys.readouterr().err)
    assert len(names) == 2
    # WHEN show is given no name
    page = tmp_path / "page.html"
    code = main(["show", "--html", str(page)])
    out, err = capsys.readouterr()
    # THEN it shows the newest one, and says which it chose
    assert code == 0, out + err
    assert "the newest execution of stack " in err and names[1] in err
    assert "InvalidEvent" in out and page.is_file()
    # AND a deployed stack still wants a name, and says how to find one
    assert main(["show", "--stack-name", "my-stack"]) == 2
    assert "onceflow executions --stack-name my-stack" in capsys.readouterr().err


def test_init_prints_a_cd_the_shell_takes_for_a_directory_with_a_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a directory name with a space, as a user may pick
    target = tmp_path / "my app"
    # WHEN onceflow init writes the app there
    assert main(["init", str(target)]) == 0
    # THEN the command it tells the user to run next is one the shell reads as written
    line = next(line for line in capsys.readouterr().out.splitlines() if "&& onceflow up" in line)
    words = shlex.split(line.split("#")[0])
    assert words[:2] == ["cd", str(target)] and words[2:] == ["&&", "onceflow", "up"], line
    assert (target / "template.yaml").is_file()


def test_init_on_a_file_says_it_is_a_file_and_leaves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a file (empty) where the user names the app's directory
    target = tmp_path / "notes"
    target.write_text("", encoding="utf-8")
    # WHEN onceflow init is pointed at it THEN it refuses in one line that names a file,
    # not "exists and is not empty", and the file is as it was
    with pytest.raises(SystemExit) as refused:
        main(["init", str(target)])
    assert str(refused.value) == f"onceflow init: {target} is a file; name a new directory"
    assert target.read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("on_path", [False, True], ids=["by-its-path", "from-the-path"])
def test_init_names_the_onceflow_that_ran_it_as_the_shell_would_find_it(
    on_path: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the installed package's command, run by its path as the README has it
    # (~/onceflow/bin/onceflow init my-app) with no onceflow on the shell's PATH, or from
    # an activated venv, where the PATH's onceflow is the one running
    command = tmp_path / "venv" / "bin" / "onceflow"
    command.parent.mkdir(parents=True)
    command.write_text("#!/bin/sh\n", encoding="utf-8")
    command.chmod(0o755)
    ran_as = "onceflow" if on_path else str(command)
    monkeypatch.setattr(sys, "argv", [ran_as, "init", str(tmp_path / "my-app")])
    monkeypatch.setenv("PATH", str(command.parent if on_path else tmp_path / "empty"))
    # WHEN it writes the app
    assert main(["init", str(tmp_path / "my-app")]) == 0
    # THEN the next command it prints runs that same onceflow, as the shell finds it
    line = next(line for line in capsys.readouterr().out.splitlines() if "&& " in line)
    assert shlex.split(line.split("#")[0])[3:] == [ran_as, "up"], line


@pytest.mark.parametrize(
    ("key", "said"),
    [("", "--key is empty; S3 keys are 1 to 1024 bytes in UTF-8"),
     ("k" * 1100, "--key is 1100 bytes in UTF-8; S3 keys are 1 to 1024 bytes")],
)  # fmt: skip
def test_execute_upload_refuses_a_key_s3_refuses_in_one_line_before_it_uploads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, said: str
) -> None:
    # GIVEN a file of the user's, and a key S3 takes no object under (an empty key, which
    # botocore refused in two lines; a key over 1,024 bytes, which the local bucket took,
    # so the upload ran to an InvalidEvent no upload on AWS could make)
    notes = tmp_path / "notes.txt"
    notes.write_text("one two\n", encoding="utf-8")
    # WHEN it is run with that --key
    with pytest.raises(SystemExit) as refused:
        main(["execute", "ProcessorStateMachine", "--upload", str(notes), "--key", key,
              "--no-server"])  # fmt: skip
    # THEN it is refused in one line that says why, and nothing ran
    message = str(refused.value.code)
    assert message == f"onceflow execute: {said}" and "\n" not in message
    assert "Execution" not in capsys.readouterr().out
