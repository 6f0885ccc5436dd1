"""The patch layer: kinds kept apart, state kept per engine, everything undone at the end.

Each test runs real executions: the processor's own ASL and handler on the engine.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.handlers import BUILTIN_HANDLERS
from moto.core import botocore_stubber
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata

from onceflow.local import patches, provisioning
from onceflow.local.engine import LocalEngine
from onceflow.local.errors import EngineError
from onceflow.local.patches import distributed_map, fidelity, hooks, registry, speedups
from tests.helpers import (
    FUNCTION,
    MACHINE,
    idempotency_key,
    invocations,
    ledger_row,
    output_effects,
    s3_event,
    upload,
)


def _transient(event: Any, context: Any) -> Any:
    from service.errors import TransientError

    raise TransientError("injected: the service is briefly unavailable")


def _throttled(service: str, operation: str, body: str) -> Any:
    if service == "dynamodb" and operation == "PutItem":
        return patches.dynamodb_error(
            "ProvisionedThroughputExceededException", "injected: throughput exceeded"
        )
    return None


def _everything_in_place() -> dict[tuple[int, str], Any]:
    """What every attribute a patch replaces holds now, by (owner, name)."""
    state = patches.EngineState(name="probe")
    installed = patches.install(state)
    try:
        touched = [(owner, name) for owner, name, _, _ in installed.installer.done]
    finally:
        patches.uninstall(state)
    return {(id(owner), name): vars(owner).get(name) for owner, name in touched}


def test_two_engines_keep_their_own_clock_log_and_faults() -> None:
    # GIVEN two engines in one process, one inside the other
    with LocalEngine(function_log=io.StringIO(), stack_name="outer") as outer:
        with LocalEngine(function_log=io.StringIO(), stack_name="inner") as inner:
            outer.state.requests.clear()
            inner.state.requests.clear()
            # WHEN the outer engine's ledger is throttled and the inner's processor
            # fails once with a transient error (a retry, so a backoff on its clock)
            outer.state.faults.append(_throttled)
            outer_version = upload(outer, "a.png")
            inner_version = upload(inner, "a.png")
            with inner.override_function(FUNCTION, _transient):
                inner_result = inner.execute(MACHINE, s3_event(inner, "a.png", inner_version))
            outer_result = outer.execute(MACHINE, s3_event(outer, "a.png", outer_version))
            # THEN the fault hit only the outer engine's claims
            assert outer_result.outcome == "LedgerUnavailable"
            assert inner_result.outcome != "LedgerUnavailable"
            assert inner_result.states_entered.count("Process") == 1  # retried inside it
            assert ledger_row(inner, idempotency_key(inner, "a.png", inner_version)) is not None
            # each engine's clock was asked for its own backoffs only: the inner
            # one's between its processor's attempts, the outer one's between its
            # throttled claims
            assert len(inner.state.clock.slept) == invocations(inner) - 1 > 0
            claims = [r for r in outer.state.requests.snapshot() if r.operation == "PutItem"]
            assert len(outer.state.clock.slept) == len(claims) - 1 > 0
            # and each log holds only its own engine's buckets and tables
            inner_buckets = {r.bucket for r in inner.state.requests.snapshot() if r.bucket}
            outer_buckets = {r.bucket for r in outer.state.requests.snapshot() if r.bucket}
            assert inner_buckets and outer_buckets and not inner_buckets & outer_buckets
            throttled = [r for r in outer.state.requests.snapshot() if r.status == 400]
            assert throttled and not [r for r in inner.state.requests.snapshot() if r.status == 400]
        # the inner engine stopped: the outer one still runs as before
        again = upload(outer, "b.png")
        outer.state.faults.clear()
        assert outer.execute(MACHINE, s3_event(outer, "b.png", again)).status == "SUCCEEDED"
        assert output_effects(outer) == 1


def test_each_engine_keeps_its_own_function_log(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two engines in one process, one inside the other, each with its own function log
    def printing(event: Any, context: Any) -> Any:
        print(f"processing {context.function_name}")
        raise RuntimeError("injected: printed, then failed")

    outer_log, inner_log = io.StringIO(), io.StringIO()
    with LocalEngine(function_log=outer_log, stack_name="outer") as outer:
        # WHEN the outer engine's function prints while the inner one runs
        with (
            LocalEngine(function_log=inner_log, stack_name="inner"),
            outer.override_function(FUNCTION, printing),
        ):
            outer.invoke(FUNCTION, {})
        # and again once the inner one stopped
        with outer.override_function(FUNCTION, printing):
            outer.invoke(FUNCTION, {})
    # THEN both lines went to the outer engine's log: none to the other's, none to stdout
    assert outer_log.getvalue().count("processing") == 2
    assert "processing" not in inner_log.getvalue()
    assert "processing" not in capsys.readouterr().out


def test_every_patch_is_undone_when_the_last_engine_stops() -> None:
    # GIVEN what moto and botocore hold with no engine running
    before = _everything_in_place()
    stubber = vars(botocore_stubber.BotocoreStubber)["__call__"]
    handlers = list(BUILTIN_HANDLERS)
    # WHEN two engines start and stop (the outer one last)
    with LocalEngine(function_log=io.StringIO(), stack_name="outer"):
        with LocalEngine(function_log=io.StringIO(), stack_name="inner"):
            assert moto_jsonata._eval_jsonata is fidelity.eval_jsonata
        # THEN the first to stop leaves them in place for the other
        assert moto_jsonata._eval_jsonata is fidelity.eval_jsonata
        assert patches.installed() is not None
    # and the last takes every one away
    assert patches.installed() is None
    assert moto_jsonata._eval_jsonata is not fidelity.eval_jsonata
    assert vars(botocore_stubber.BotocoreStubber)["__call__"] is stubber
    assert handlers == BUILTIN_HANDLERS  # the event handlers unregistered too
    assert _everything_in_place() == before


@pytest.fixture
def pins_broken(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every speed-up's pin mismatching, as after a moto upgrade that changed them all."""
    monkeypatch.setenv(registry.BREAK_PINS_ENV, "1")
    monkeypatch.setattr(registry, "_WARNED", set())
    yield


@pytest.mark.usefixtures("pins_broken")
def test_with_every_speedup_pin_broken_the_engine_runs_with_every_fidelity_patch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="onceflow.local.patches")
    with LocalEngine(function_log=io.StringIO()) as engine:
        installed = patches.installed()
        assert installed is not None
        # THEN every speed-up was left out, each with one warning line
        assert set(installed.skipped) == {p.name for p in speedups.PATCHES}
        warned = [r.getMessage() for r in caplog.records if r.name == "onceflow.local.patches"]
        assert len(warned) == len(speedups.PATCHES)
        assert all("\n" not in line and "left out" in line for line in warned)
        # and every hook and fidelity patch is in place
        kinds = {p.name for p in installed.patches}
        assert kinds == {p.name for p in patches.PATCHES if p.kind != "speedup"}
        assert {p.name for p in (*hooks.PATCHES, *fidelity.PATCHES)} <= kinds
        assert moto_jsonata._eval_jsonata is fidelity.eval_jsonata
        # and the processor behaves as it does with them: done once, a duplicate
        # discarded, a failure retried
        version = upload(engine, "slow.png")
        event = s3_event(engine, "slow.png", version)
        assert engine.execute(MACHINE, event).outcome == "Processed"
        assert engine.execute(MACHINE, event).outcome == "Duplicate"
        assert output_effects(engine) == 1
        retried = upload(engine, "retried.png")
        with engine.override_function(FUNCTION, _transient):
            failed = engine.execute(MACHINE, s3_event(engine, "retried.png", retried))
        assert failed.states_entered.count("Process") == 1
        assert engine.state.clock.slept
    # a second engine does not warn again (one line per speed-up and process)
    with LocalEngine(function_log=io.StringIO()):
        pass
    again = [r for r in caplog.records if r.name == "onceflow.local.patches"]
    assert len(again) == len(speedups.PATCHES)


def test_a_fidelity_patch_that_no_longer_fits_stops_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a fidelity patch whose moto code moved
    target = fidelity.PATCHES[0]  # the JSONata evaluator
    moved = dataclasses.replace(target, fits=lambda: ["moto's code moved"])
    replaced = tuple(moved if p is target else p for p in patches.PATCHES)
    assert moved in replaced
    monkeypatch.setattr(patches, "PATCHES", replaced)
    # WHEN an engine starts THEN it refuses, naming the patch, and leaves nothing behind
    with pytest.raises(RuntimeError, match=f"{moved.name}: moto's code moved"):
        LocalEngine(function_log=io.StringIO()).start()
    assert patches.installed() is None
    assert moto_jsonata._eval_jsonata is not fidelity.eval_jsonata


class _Owner:
    def step(self) -> str:
        return "self.output_path"


def test_a_fits_check_reads_the_source_now_in_place_not_what_it_read_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a check that found its text in a method (its source now read once)
    assert registry.lacks(_Owner.step, "self.output_path") == []

    # WHEN another function is put in its place, as a moto release or a test does
    def step(self: Any) -> str:
        return "moved"

    monkeypatch.setattr(_Owner, "step", step)
    # THEN the check reads the one in place now, and finds the text gone
    [moved] = registry.lacks(_Owner.step, "self.output_path")
    assert moved.endswith("step no longer has 'self.output_path'")


def test_another_moto_whose_every_fits_check_passes_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import moto

    # GIVEN moto reports a version other than requirements/dev.txt's pin, its code as before
    assert patches.pinned()["moto"] == moto.__version__
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    # WHEN an engine starts THEN every fits check passes, so it runs an execution
    with LocalEngine(function_log=io.StringIO()) as engine:
        assert patches.installed() is not None
        result = engine.execute(MACHINE, s3_event(engine, "a.png", upload(engine, "a.png")))
        assert result.status == "SUCCEEDED"
    assert patches.installed() is None


def test_another_moto_that_moved_what_a_patch_needs_stops_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import moto
    from moto.stepfunctions.parser.asl.component.program import program

    # GIVEN another moto version, one that no longer has what the limits replace
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    monkeypatch.delattr(program.Program, "eval")
    # WHEN an engine starts THEN it stops with one line naming the version and what moved
    with pytest.raises(RuntimeError) as raised:
        LocalEngine(function_log=io.StringIO()).start()
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith("the local engine does not fit moto 9.9.9 (pinned ")
    assert "Step Functions history and duration: Program.eval is gone" in line
    # AND the remedy serves a checkout and an installed package alike
    assert line.endswith(
        "(install the pinned versions: `make setup` in a checkout; an installed onceflow: "
        "install it again with its [local] extra, which pins them)"
    )
    assert patches.installed() is None


def test_each_fidelity_patch_names_the_aws_behaviour_and_its_test() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent.parent
    for patch in (*fidelity.PATCHES, *hooks.PATCHES, *speedups.PATCHES):
        path, _, name = patch.test.partition("::")
        text = (root / path).read_text()
        assert not name or f"def {name}(" in text, f"{patch.name}: {patch.test} is not a test"
    fidelity_patches = [p for p in patches.PATCHES if p.kind == "fidelity"]
    assert set(fidelity.PATCHES) <= set(fidelity_patches)
    for patch in fidelity_patches:
        assert len(patch.why) > 80, f"{patch.name} does not say which AWS behaviour it is"


def test_each_fidelity_patch_has_its_reproduction_against_stock_moto() -> None:
    from tests.upstream import test_stock_moto as upstream

    fidelity_patches = {p.name for p in patches.PATCHES if p.kind == "fidelity"}
    # GIVEN the reproductions kept for upstream reports THEN every fidelity patch has
    # one (or says why it cannot), and none names a patch that is gone
    missing = fidelity_patches - set(upstream.REPRODUCED) - set(upstream.UNREPRODUCIBLE)
    assert not missing, f"no reproduction against stock moto: {sorted(missing)}"
    assert set(upstream.REPRODUCED) | set(upstream.UNREPRODUCIBLE) <= fidelity_patches
    for where in upstream.REPRODUCED.values():
        assert hasattr(upstream, where.split("::")[1]), where


def test_the_local_engine_doc_lists_the_patches_the_code_has() -> None:
    from pathlib import Path

    from onceflow.local.patches import __main__ as table

    doc = Path(__file__).resolve().parent.parent.parent / "docs" / "local-engine.md"
    assert table.main(["--check", str(doc)]) == 0
    assert all(f"| {p.name} |" in doc.read_text() for p in patches.PATCHES)


@pytest.mark.speedup
def test_a_speedup_whose_check_itself_fails_is_left_out_and_says_why() -> None:
    def moved() -> list[str]:
        raise AttributeError("module 'moto...' has no attribute 'gone'")

    broken = dataclasses.replace(speedups.PATCHES[0], fits=moved)
    assert broken.problems() == [
        "its check failed (AttributeError: module 'moto...' has no attribute 'gone')"
    ]


def test_speedups_that_cannot_load_leave_the_fidelity_patches_in_place(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sys

    # GIVEN a moto so changed that the speed-up module cannot even load
    monkeypatch.setitem(sys.modules, "onceflow.local.patches.speedups", None)  # import fails
    caplog.set_level(logging.WARNING, logger="onceflow.local.patches")
    left = patches._speedups()
    # THEN no speed-up, one line saying so, and the engine runs on its fidelity patches
    assert left == ()
    assert [r.getMessage() for r in caplog.records][-1].startswith(
        "onceflow: every speed-up left out (ModuleNotFoundError"
    )
    monkeypatch.setattr(
        patches, "PATCHES", (*hooks.PATCHES, *fidelity.PATCHES, *distributed_map.PATCHES)
    )
    with LocalEngine(function_log=io.StringIO()) as engine:
        version = upload(engine, "a.png")
        assert engine.execute(MACHINE, s3_event(engine, "a.png", version)).status == "SUCCEEDED"
        assert moto_jsonata._eval_jsonata is fidelity.eval_jsonata


def test_what_another_replaced_after_the_engine_is_left_to_it_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN an engine whose JSONata evaluator someone else replaces while it runs
    motos = moto_jsonata._eval_jsonata

    def theirs(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    caplog.set_level(logging.WARNING, logger="onceflow.local.patches")
    try:
        with LocalEngine(function_log=io.StringIO()):
            moto_jsonata._eval_jsonata = theirs
        # WHEN the engine stops THEN their replacement stays (putting moto's back would
        # undo theirs) and the warning names it
        assert moto_jsonata._eval_jsonata is theirs
        assert "replaced again after the engine's patches" in caplog.text
        assert "_eval_jsonata" in caplog.text
    finally:
        moto_jsonata._eval_jsonata = motos


def test_a_start_interrupted_by_ctrl_c_is_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN provisioning interrupted (Ctrl-C) halfway through an engine's start
    def interrupted(engine: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(provisioning, "create_all", interrupted)
    # WHEN the start fails THEN nothing it put in place is left behind
    with pytest.raises(KeyboardInterrupt):
        LocalEngine(function_log=io.StringIO()).start()
    assert patches.installed() is None
    assert moto_jsonata._eval_jsonata is not fidelity.eval_jsonata


def test_an_install_that_fails_halfway_leaves_nothing_behind() -> None:
    # GIVEN two patches, the second of which fails while it installs
    class Target:
        value = "moto's"

    def first(installer: registry.Installer) -> None:
        installer.replace(Target, "value", "ours")

    def second(installer: registry.Installer) -> None:
        raise RuntimeError("injected: this patch cannot go in")

    made = [
        registry.Patch(name=name, kind="fidelity", why="-", test="-", install=install, fits=list)
        for name, install in (("first", first), ("second", second))
    ]
    # WHEN they are installed THEN the failure is raised and the first is undone
    with pytest.raises(RuntimeError, match="cannot go in"):
        registry.install_all(made)
    assert Target.value == "moto's"


def test_an_engine_started_again_is_refused_with_what_to_do() -> None:
    # GIVEN an engine that ran and stopped (its resources went with moto's state)
    engine = LocalEngine(function_log=io.StringIO())
    with engine:
        pass
    # WHEN it is started again THEN it says so plainly, and nothing is left in place
    with pytest.raises(EngineError, match="starts once: make a new LocalEngine"):
        engine.start()
    assert patches.installed() is None
