"""`onceflow up`: one local engine across commands; commands run self-contained without it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow import server
from onceflow.cli import main
from onceflow.engine import LocalEngine

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
        engine_server = server.EngineServer(engine, parameters)
        engine_server.publish()
        thread = threading.Thread(target=engine_server.serve_forever, daemon=True)
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
    assert server.running() is not None
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


def test_no_server_runs_a_fresh_engine(up: server.EngineServer) -> None:
    assert _onceflow(*EXECUTE).returncode == 0
    alone = _onceflow(*EXECUTE, "--no-server")
    assert alone.returncode == 0, alone.stderr
    assert "Processed" in alone.stdout and "Duplicate" not in alone.stdout
    assert up.commands == 1


def test_other_parameters_are_refused_by_the_running_engine(
    up: server.EngineServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*EXECUTE, "--parameter-overrides", "MaxAttempts=5"]) == 2
    assert "MaxAttempts=5" in capsys.readouterr().err


def test_without_a_server_each_command_has_its_own_engine(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert server.running() is None
    for _ in range(2):
        assert main(EXECUTE) == 0
        out = capsys.readouterr().out
        assert "Processed" in out and "Duplicate" not in out


def test_a_stale_address_file_is_ignored(state_dir: Path) -> None:
    (state_dir / "server.json").write_text(
        json.dumps({"port": 9, "token": "x", "pid": 1}), encoding="utf-8"
    )
    assert server.running() is None
    (state_dir / "server.json").write_text("{not json", encoding="utf-8")
    assert server.running() is None


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
        engine.execute(
            "ProcessorStateMachine", s3_event(engine, "mine/bad.png", version)
        ).states_entered[-1]
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
    from onceflow import cli

    def boom(args: object) -> int:
        raise RuntimeError("injected: a bug in a command")

    monkeypatch.setattr(cli, "cmd_inspect", boom)
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
        while server.running() is None:
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
    assert server.running() is None
