"""`onceflow doctor` on a fresh local stack, as a newcomer runs it: it tells the truth about
the local stack (what cannot apply locally is a WARN that says so) and exits 0.

Apart from tests/workflow/test_doctor.py, whose module-wide stack holds the default
stack name these commands use.
"""

from __future__ import annotations

import io

import pytest

from onceflow import ops
from onceflow.cli import main
from onceflow.local.engine import LocalEngine
from onceflow.local.samples import prepare_event
from onceflow.local.wiring import LocalStack
from tests.helpers import load_event


def test_a_fresh_local_stack_passes_the_doctor(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a fresh local stack with the template's defaults (no AlarmEmail, no audit yet)
    # WHEN the user runs the doctor on it
    code = main(["doctor", "--no-server"])
    # THEN it exits 0: what cannot apply locally, or has not happened yet, is a WARN
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL" not in out
    assert "WARN alarms:" in out


def test_the_stand_in_for_an_existing_bucket_is_configured_as_the_doctor_expects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a local stack for a bucket of the user's (ExistingBucketName), which the engine
    # stands in for when it runs a sample event
    with LocalEngine(parameters={"ExistingBucketName": "my-uploads"}, time_scale=0.0,
                     function_log=io.StringIO(), stack_name="stand-in") as engine:  # fmt: skip
        _, notes = prepare_event(engine, load_event("s3-object-created.json"),
                                 target="ProcessorStateMachine")  # fmt: skip
        assert any("stand-in" in note for note in notes)
        # WHEN the doctor examines the stack
        findings = {f.check: f for f in ops.examine(LocalStack(engine))}
    # THEN the stand-in sends its events to EventBridge and keeps versions, as the user's must
    assert findings["bucket events"].status == ops.PASS, findings["bucket events"].detail
    assert findings["bucket versioning"].status == ops.PASS
    # AND on a fresh stack the doctor itself makes the stand-in, and says so
    code = main(["doctor", "--no-server", "--parameter-overrides",
                 "ExistingBucketName=my-uploads"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "PASS bucket events: s3://my-uploads" in captured.out
    assert "stand-in" in captured.err
