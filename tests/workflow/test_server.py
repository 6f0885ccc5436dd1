"""`onceflow up`: one local engine across commands; commands run self-contained without it."""

from __future__ import annotations

import contextlib
import json
import os
import socketserver
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from onceflow.cli import main
from onceflow.local import forwarding, server
from onceflow.local.engine import LocalEngine

EVENTS = Path(__file__).resolve().parents[2] / "events"
CUSTOM = str(EVENTS / "eventbridge-custom-event.json")
EXECUTE = ["execute", "ProcessorStateMachine", "-e", CUSTOM, "--no-record"]


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ONCEFLOW_STATE_DIR", str(tmp_path))
    return tmp_path


@contextlib.contextmanager
def _serving(parameters: dict[str, str]) -> Iterator[server.EngineServer]:
    """What `onceflow up` runs, on a thread of this process."""
    with LocalEngine(parameters=parameters) as engine:
        engine_server = server.EngineServer(engine, parameters, command=main)
        engine_server.publish()
        # polling as `onceflow up` does (server.py: serve_forever(poll_interval=0.2)); the
        # default, 0.5 s, kept each test's shutdown waiting for up to half a second
        thread = threading.Thread(
            target=engine_server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        thread.start()
        try:
            yield engine_server
        finally:
            engine_server.shutdown()
            engine_server.unpublish()
            engine_server.server_close()
            thread.join(5)


@pytest.fixture
def up(state_dir: Path) -> Iterator[server.EngineServer]:
    with _serving({}) as engine_server:
        yield engine_server


def _onceflow(*argv: str) -> subprocess.CompletedProcess[str]:
    """A command typed in another terminal: its own process, the same state directory."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from onceflow.cli import main; sys.exit(main())",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def test_commands_share_the_running_engine(up: server.EngineServer) -> None:
    assert forwarding.running() is not None
    first = _onceflow(*EXECUTE)
    assert first.returncode == 0, first.stderr
    assert "Processed" in first.stdout and "Duplicate" not in first.stdout
    assert "running on the local engine" in first.stderr
    # The same event again, from another process: the server's ledger remembers it.
    second = _onceflow(*EXECUTE)
    assert second.returncode == 0, second.stderr
    assert "Duplicate" in second.stdout and "Reclaim" in second.stdout
    assert up.commands == 2
    rows = up.engine.client("dynamodb").scan(TableName=up.engine.ref("LedgerTable"))["Items"]
    assert len(rows) == 1 and rows[0]["status"]["S"] == "PROCESSED"


@pytest.mark.parametrize(
    "sample", ["s3-object-created.json", "sqs-s3-notification.json"], ids=["eventbridge", "sqs"]
)
def test_the_same_s3_event_twice_on_the_running_engine_is_a_duplicate(
    up: server.EngineServer, sample: str
) -> None:
    # GIVEN onceflow up, and a sample S3 event whose version id is a real account's
    execute = ["execute", "ProcessorStateMachine", "-e", str(EVENTS / sample), "--no-record"]
    # WHEN it runs twice, as a user runs the quick start's command twice
    first = _onceflow(*execute)
    second = _onceflow(*execute)
    # THEN the first uploads the sample object and is processed; the second names the
    # version the first uploaded, so it is that upload's duplicate
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "Processed" in first.stdout and "uploaded a sample" in first.stderr
    assert "Duplicate" in second.stdout and "Processed" not in second.stdout
    assert "uploaded a sample" not in second.stderr
    assert "the version the sample uploaded earlier" in second.stderr
    engine = up.engine
    versions = engine.client("s3").list_object_versions(Bucket=engine.ingest_bucket())
    assert len(versions.get("Versions", [])) == 1
    rows = engine.client("dynamodb").scan(TableName=engine.ref("LedgerTable"))["Items"]
    assert [row["status"]["S"] for row in rows] == ["PROCESSED"]


def test_executions_lists_the_running_stacks_records_and_names_each_ones_stack(
    up: server.EngineServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (records of this test's own: the session's hold other tests' too)
    monkeypatch.setenv("ONCEFLOW_RECORDS", str(tmp_path / "executions"))
    # GIVEN the same event twice on onceflow up, then once with --no-server
    execute = ["execute", "ProcessorStateMachine", "-e", CUSTOM]
    for _ in range(2):
        assert _onceflow(*execute).returncode == 0
    alone = _onceflow(*execute, "--no-server")
    # THEN --no-server ran a fresh engine: the event the server's ledger holds was
    # processed again there, and the server ran the first two commands only
    # (this was test_no_server_runs_a_fresh_engine, which started a second engine in a
    # process of its own for the same run)
    assert alone.returncode == 0, alone.stderr
    assert "Processed" in alone.stdout and "Duplicate" not in alone.stdout
    assert up.commands == 2
    # WHEN the user lists the executions, then all of them
    listed = _onceflow("executions", "--json")
    every = _onceflow("executions", "--json", "--all")
    table = _onceflow("executions")
    # THEN by default only the running stack's two show: Processed, then its Duplicate
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [row["endState"] for row in rows] == ["Duplicate", "Processed"]
    assert len({row["stack"] for row in rows}) == 1 and rows[0]["stack"].startswith("up-")
    # AND --all adds the throwaway stack's, named as another stack
    all_rows = json.loads(every.stdout)
    assert len(all_rows) == 3
    others = [row for row in all_rows if row["stack"] != rows[0]["stack"]]
    assert [row["endState"] for row in others] == ["Processed"]
    assert others[0]["stack"].startswith("own-")
    # AND the table has a stack column and says how to see the others
    assert table.stdout.splitlines()[0].split()[:2] == ["name", "stack"]
    assert "--all" in table.stderr


def test_a_command_on_the_running_engine_records_only_its_own_execution(
    up: server.EngineServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ONCEFLOW_RECORDS", str(tmp_path / "executions"))
    execute = ["execute", "ProcessorStateMachine", "-e", CUSTOM]
    # GIVEN onceflow up, and an event executed on it (twice: the first loads the functions)
    for _ in range(2):
        assert main(execute) == 0
    capsys.readouterr()
    # WHEN another execution follows within the second (as a script runs them)
    assert main(execute) == 0
    out, err = capsys.readouterr()
    # THEN it records and names its own execution, not the one before it too ("2
    # execution(s) recorded" for one run: the records went back a second before it)
    assert "Duplicate" in out
    ran = out.splitlines()[0].removeprefix("Execution ")
    assert f"local: recorded; see it with `onceflow show {ran}`" in err, err


def test_other_parameters_are_refused_by_the_running_engine(
    up: server.EngineServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*EXECUTE, "--parameter-overrides", "MaxAttempts=5"]) == 2
    assert "MaxAttempts=5" in capsys.readouterr().err


def test_without_a_server_each_command_has_its_own_engine(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert forwarding.running() is None
    for _ in range(2):
        assert main(EXECUTE) == 0
        out = capsys.readouterr().out
        assert "Processed" in out and "Duplicate" not in out


def test_a_stale_address_file_is_ignored(state_dir: Path) -> None:
    (state_dir / "server.json").write_text(
        json.dumps({"port": 9, "token": "x", "pid": 1}), encoding="utf-8"
    )
    assert forwarding.running() is None
    (state_dir / "server.json").write_text("{not json", encoding="utf-8")
    assert forwarding.running() is None


def test_the_server_wants_its_token(up: server.EngineServer) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{up.port}/run",
        data=json.dumps({"argv": ["execute", "ProcessorStateMachine"]}).encode(),
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
    assert up.commands == 0


@pytest.fixture
def up_for_demos(state_dir: Path) -> Iterator[server.EngineServer]:
    with _serving({"AuditRecentCutoffHours": "0"}) as engine_server:
        yield engine_server


def test_demos_on_the_running_engine_judge_only_their_own_objects(
    up_for_demos: server.EngineServer,
) -> None:
    engine = up_for_demos.engine
    # Something of the user's already on the stack: a poison upload, dead-lettered.
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    version = s3.put_object(Bucket=bucket, Key="mine/bad.png", Body=b"not an image")["VersionId"]
    from tests.helpers import s3_event

    assert (
        engine.execute("ProcessorStateMachine", s3_event(engine, "mine/bad.png", version)).outcome
        == "DeadLettered"
    )
    reports = []
    for seed in ("3", "4"):
        run = _onceflow(
            "demo", "--objects", "10", "--corrupt", "1", "--seed", seed, "--json", "--no-record"
        )
        assert run.returncode == 0, run.stderr
        assert "on the local engine of onceflow up" in run.stderr
        reports.append(json.loads(run.stdout))
    for report in reports:
        assert report["exactly_once"] is True, report["violations"]
        assert report["dead_lettered"] == 1  # its own corrupt file, not the user's
        assert report["second_audit_resubmitted"] == 0
    # Both runs and the user's object live on in the one engine.
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    runs = {o["Key"].split("/")[1] for o in listed if o["Key"].startswith("runs/")}
    assert len(runs) == 2 and any(o["Key"] == "mine/bad.png" for o in listed)
    messages = engine.client("sqs").receive_message(
        QueueUrl=engine.ref("DeadLetterQueue"), MaxNumberOfMessages=10, WaitTimeSeconds=0
    )["Messages"]
    assert len(messages) == 3, "the demos left every dead letter in place, the user's too"


def test_a_demo_runs_alone_when_the_running_engine_lacks_its_parameters(
    up: server.EngineServer,
) -> None:
    run = _onceflow("demo", "--objects", "4", "--corrupt", "0", "--json", "--no-record")
    assert run.returncode == 0, run.stderr
    assert "lacks AuditRecentCutoffHours=0" in run.stderr
    assert json.loads(run.stdout)["exactly_once"] is True
    assert up.commands == 0, "nothing ran on the server"


def test_a_command_that_breaks_on_the_server_reports_like_one_run_alone(
    up: server.EngineServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = _onceflow("execute", "ProcessorStateMachine", "-e", "/no/such/event.json")
    alone = _onceflow(
        "execute", "ProcessorStateMachine", "-e", "/no/such/event.json", "--no-server"
    )
    assert missing.returncode == alone.returncode != 0
    assert "/no/such/event.json" in missing.stderr
    # An unexpected exception inside the server comes back as the traceback, exit 1.
    answer = up.run(["executions", "--limit", "not-a-number"])
    assert answer["code"] == 2 and "invalid int value" in answer["stderr"]
    from onceflow.cli import stack_commands

    def boom(args: object, session: object) -> int:
        raise RuntimeError("injected: a bug in a command")

    monkeypatch.setattr(stack_commands, "cmd_inspect", boom)
    broken = up.run(["inspect", "s3://b/k#v"])
    assert broken["code"] == 1
    assert "RuntimeError: injected: a bug in a command" in broken["stderr"]
    # The server still runs commands afterwards.
    assert up.run(list(EXECUTE))["code"] == 0


def test_onceflow_up_serves_until_terminated_and_cleans_up(state_dir: Path) -> None:
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from onceflow.cli import main; sys.exit(main())", "up"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 60
        while forwarding.running() is None:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "onceflow up did not come up"
            time.sleep(0.2)
        run = _onceflow(*EXECUTE)
        assert run.returncode == 0 and "running on the local engine" in run.stderr
        again = _onceflow(*EXECUTE)
        assert "Duplicate" in again.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "stopping the local engine" in err
    assert not (state_dir / "server.json").exists()
    assert forwarding.running() is None


class _Impostor(ThreadingHTTPServer):
    """Some other local program that took the port a stale server.json names.

    It answers like `onceflow up` would (a health page, a cheerful command
    result) but does not know the token; it keeps every request it is sent.
    """

    daemon_threads = True

    def __init__(self, proof: str) -> None:
        self.received: list[bytes] = []
        impostor = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return None  # a quiet impostor

            def _answer(self, body: dict[str, object]) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                payload = self.rfile.read(length) if length else b""
                impostor.received.append(bytes(self.headers) + payload)
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                # A proof it cannot compute: it does not know the token.
                self.send_header("X-Onceflow-Proof", proof)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer({"pid": 1, "port": impostor.server_address[1], "parameters": {}})

            def do_POST(self) -> None:
                self._answer({"code": 0, "stdout": "exactly once: OK\n", "stderr": ""})

        super().__init__((forwarding.HOST, 0), Handler)


def _execute_against(listener: socketserver.TCPServer, state_dir: Path, token: str) -> int:
    """`onceflow execute` while listener holds the port a stale server.json names."""
    thread = threading.Thread(target=listener.serve_forever, daemon=True)
    thread.start()
    port = listener.server_address[1]
    (state_dir / "server.json").write_text(
        json.dumps({"port": port, "token": token, "pid": 1}), encoding="utf-8"
    )
    try:
        return main(EXECUTE)
    finally:
        listener.shutdown()
        listener.server_close()
        thread.join(5)


# A proof header of non-ASCII characters (HTTP carries them as ISO-8859-1 bytes) too:
# hmac.compare_digest raises TypeError on a str holding them.
@pytest.mark.parametrize("proof", ["0" * 64, "\u00e9" * 64], ids=["ascii", "non-ascii"])
def test_a_listener_that_cannot_prove_the_token_gets_nothing_and_is_refused(
    state_dir: Path, capsys: pytest.CaptureFixture[str], proof: str
) -> None:
    # GIVEN a stale server.json whose port another local program now listens on
    impostor = _Impostor(proof)
    token = "4f6e6365666c6f772d746f6b656e2121"
    # WHEN a command looks for `onceflow up`
    code = _execute_against(impostor, state_dir, token)
    # THEN it refuses with a clear error and a non-zero exit, prints nothing of the impostor's
    out, err = capsys.readouterr()
    assert code == 2
    assert "exactly once: OK" not in out
    assert "could not prove" in err and "server.json" in err
    # AND the token never reached the impostor, in any header or body
    assert impostor.received, "the client did ask the listener"
    assert all(token.encode() not in request for request in impostor.received)


def test_a_listener_that_speaks_another_protocol_is_refused_not_a_crash(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a stale server.json whose port a program speaking another protocol now holds
    class Greeter(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    listener = socketserver.ThreadingTCPServer((forwarding.HOST, 0), Greeter)
    # WHEN a command looks for `onceflow up`
    code = _execute_against(listener, state_dir, "4f6e" * 8)
    # THEN it refuses with the impostor's error and exit 2 (http.client's BadStatusLine
    # is no OSError: it was a traceback)
    assert code == 2
    assert "could not prove" in capsys.readouterr().err


def test_the_server_answers_only_a_request_authenticated_with_its_token(
    up: server.EngineServer,
) -> None:
    # GIVEN the running server, and a request signed with a wrong token
    forged = forwarding.signed_headers("0" * 32, "GET", "/health", "n" * 32, b"")
    request = urllib.request.Request(
        f"http://127.0.0.1:{up.port}/health", headers=forged, method="GET"
    )
    # WHEN it is sent, THEN it is refused
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
    # AND the token itself, sent as a header, is no credential either
    request = urllib.request.Request(
        f"http://127.0.0.1:{up.port}/health",
        headers={"X-Onceflow-Token": up.token},
        method="GET",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403


def test_a_non_ascii_auth_header_is_refused_not_a_crash(up: server.EngineServer) -> None:
    # GIVEN a request whose auth header holds non-ASCII characters (HTTP carries them as
    # ISO-8859-1 bytes; hmac.compare_digest refuses a non-ASCII str with TypeError)
    url = f"http://127.0.0.1:{up.port}/health"
    for forged in ("\u00e9" * 64, "\u00f0\u009f\u0098\u0080" * 16):
        headers = {forwarding.NONCE_HEADER: "a" * 32, forwarding.AUTH_HEADER: forged}
        # WHEN it is sent, THEN it is refused with 403, as any request not signed with the token
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5)
        assert refused.value.code == 403
    # AND the server still answers a signed request
    signed = forwarding.signed_headers(up.token, "GET", "/health", "s" * 32, b"")
    with urllib.request.urlopen(urllib.request.Request(url, headers=signed), timeout=5) as ok:
        assert ok.status == 200


def test_a_replayed_request_is_refused(up: server.EngineServer) -> None:
    # GIVEN a request correctly signed once
    headers = forwarding.signed_headers(up.token, "GET", "/health", "r" * 32, b"")
    url = f"http://127.0.0.1:{up.port}/health"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as ok:
        assert ok.status == 200
    # WHEN someone who saw it sends it again, THEN the server refuses it
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5)
    assert refused.value.code == 403


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_records_pages_and_the_address_file_are_this_users_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN state and record directories that do not exist yet, and a permissive umask
    state = tmp_path / "state" / "nested"
    recorded = tmp_path / "records" / "executions"
    monkeypatch.setenv("ONCEFLOW_STATE_DIR", str(state))
    monkeypatch.setenv("ONCEFLOW_RECORDS", str(recorded))
    page = tmp_path / "pages" / "run.html"
    previous = os.umask(0o022)
    try:
        # WHEN an execution is run, recorded and shown, and `onceflow up` publishes its address
        assert main(["execute", "ProcessorStateMachine", "-e", CUSTOM, "--no-server"]) == 0
        (record,) = list(recorded.glob("*.json"))
        definitions = list((recorded / "definitions").iterdir())  # one per state machine
        assert main(["show", record.stem.split("@")[0], "--html", str(page)]) == 0
        with LocalEngine(parameters={}) as engine:
            published = server.EngineServer(engine, {}, command=main).publish()
            published_mode = _mode(published)
    finally:
        os.umask(previous)
    # THEN the files (they hold message bodies, or the token) are 0600
    assert _mode(record) == 0o600
    assert definitions and all(_mode(kept) == 0o600 for kept in definitions)
    assert _mode(page) == 0o600
    assert published_mode == 0o600
    # AND the directories created for them are 0700
    for directory in (recorded, recorded / "definitions", recorded.parent, page.parent, state,
                      state.parent):  # fmt: skip
        assert _mode(directory) == 0o700, directory
