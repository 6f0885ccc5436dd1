"""Fixtures: a fresh local engine per test, with a clean request log."""

from __future__ import annotations

import gc
import io
import os
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

from onceflow.local.engine import LocalEngine
from onceflow.local.patches.registry import BREAK_PINS_ENV
from onceflow.view import page as view_page

# The whole suite on the CI machine (2 cores, 2 workers), measured at the commit
# that last changed this line; the last run on this machine is kept in pytest's cache.
REFERENCE_MINUTES = "about 6"
_STARTED = time.monotonic()


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"onceflow: the whole suite takes {REFERENCE_MINUTES} minutes on a 2-core machine"]
    cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
    last = cache.get("onceflow/minutes", None) if cache is not None else None
    if last is not None:
        lines.append(f"onceflow: its last whole run here took {last:.1f} minutes")
    return lines


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    whole = not config.option.file_or_dir  # the whole suite, not a chosen file
    cache = getattr(config, "cache", None)
    if whole and not hasattr(config, "workerinput") and cache is not None:
        cache.set("onceflow/minutes", round((time.monotonic() - _STARTED) / 60, 2))


# Seconds each file took in a whole run (the junit XML of `pytest --junitxml`: the sum of
# its tests' setup, call and teardown), the files of 5 s or more; each other file counts
# SECONDS_A_TEST for each of its tests, their mean. Measured on 27 Nov 2026 on a shared,
# loaded 2-core machine (16 minutes of wall time, about 2.8 times the CI machine's): only
# their order matters. The files whose stacks are shared since are scaled by what that
# saved each alone (its wall time or CPU: tests/workflow/test_invalid_events.py 10.4 s
# to 2.9 s, for one). Handed out in this order, the two workers of that run would have
# ended within a second of each other: the whole run is bound by its total, not by its
# longest file (75 of 1860 s).
SECONDS = {
    "tests/workflow/test_hostile_inputs.py": 75,
    "tests/unit/test_packaging.py": 59,
    "tests/workflow/test_server.py": 53,
    "tests/workflow/test_redrive.py": 52,
    "tests/workflow/test_audit_watermark.py": 51,
    "tests/workflow/test_s3_batch_mode.py": 48,
    "tests/template/test_batch_mode_template.py": 47,
    "tests/unit/test_cli.py": 45,
    "tests/unit/test_patch_layer.py": 41,
    "tests/workflow/test_audit_resubmission.py": 40,
    "tests/workflow/test_input_limit_utf8.py": 39,
    "tests/workflow/test_processor.py": 39,
    "tests/template/test_worst_case.py": 39,
    "tests/workflow/test_ingress.py": 37,
    "tests/workflow/test_batch_mode.py": 37,
    "tests/workflow/test_p11_review.py": 37,
    "tests/template/test_example.py": 37,
    "tests/workflow/test_audit_batches.py": 37,
    "tests/workflow/test_limits.py": 36,
    "tests/workflow/test_audit.py": 35,
    "tests/unit/test_chaos_queue.py": 48,  # two more modes since (express, inventory)
    "tests/workflow/test_audit_express_names.py": 34,
    "tests/workflow/test_failure_paths.py": 33,
    "tests/workflow/test_user_handler.py": 33,
    "tests/workflow/test_existing_bucket.py": 32,
    "tests/unit/test_bench.py": 29,
    "tests/template/test_s3_batch_template.py": 29,
    "tests/workflow/test_iam.py": 26,
    "tests/unit/test_chaos.py": 30,  # an inventory run since
    "tests/template/test_existing_bucket.py": 24,
    "tests/template/test_template.py": 24,
    "tests/workflow/test_audit_dead_letter.py": 15,  # its give-back fault no longer retried
    "tests/workflow/test_object_versions.py": 23,
    "tests/workflow/test_doctor.py": 22,
    "tests/workflow/test_example.py": 22,
    "tests/parity/test_replay.py": 21,
    "tests/unit/test_iam.py": 21,
    "tests/workflow/test_viewer.py": 21,
    "tests/workflow/test_p14_review.py": 20,
    "tests/workflow/test_late_notification.py": 19,
    "tests/workflow/test_batch_view.py": 18,
    "tests/workflow/test_redrive_late_unversioned.py": 17,
    "tests/upstream/test_stock_moto.py": 16,
    "tests/workflow/test_keys.py": 16,
    "tests/unit/test_patches.py": 15,
    "tests/workflow/test_transitions.py": 15,
    "tests/unit/test_hooks.py": 15,
    "tests/template/test_operate.py": 14,
    "tests/unit/test_inventory.py": 14,
    "tests/workflow/test_audit_sweep_race.py": 14,
    "tests/unit/test_distributed_map.py": 14,
    "tests/workflow/test_doctor_local.py": 12,
    "tests/parity/test_errors.py": 11,
    "tests/workflow/test_invalid_events.py": 10,
    "tests/parity/test_integrations.py": 9,
    "tests/unit/test_audit_logic.py": 9,
    "tests/unit/test_docs.py": 9,
    "tests/parity/test_definitions.py": 9,
    "tests/unit/test_limits.py": 8,
    "tests/parity/test_map.py": 8,
    "tests/unit/test_jsonata_node.py": 8,
    "tests/unit/test_template_resolution.py": 8,
    "tests/unit/test_architecture.py": 7,
    "tests/unit/test_field_errors.py": 6,
    "tests/parity/test_context.py": 6,
    "tests/parity/test_variables.py": 6,
    "tests/workflow/test_redrive_express.py": 6,
    "tests/template/test_audit_inventory.py": 6,
    "tests/unit/test_work_item.py": 6,
    "tests/template/test_guided_deploy.py": 6,
    "tests/unit/test_doctor.py": 6,
    "tests/template/test_publish.py": 6,
    "tests/workflow/test_observability.py": 5,
}
SECONDS_A_TEST = 0.11


def _skip_speedup_tests(items: list[pytest.Item]) -> None:
    """With every speed-up removed on purpose (`make test-without-speedups`), a test of a
    speed-up itself has nothing to test: it is skipped, and says why. Every other test runs
    on moto's own code."""
    if os.environ.get(BREAK_PINS_ENV) != "1":
        return
    why = f"tests a speed-up itself, and every speed-up is removed ({BREAK_PINS_ENV}=1)"
    for item in items:
        if item.get_closest_marker("speedup") is not None:
            item.add_marker(pytest.mark.skip(reason=why))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist's workers: the files longest first, each file's tests in their order.

    --dist loadfile (pyproject.toml) gives a worker a whole file; with
    --no-loadscope-reorder it hands the files out in this order, each to the worker that
    runs out of work first. Longest first, the last files handed out are short, so the
    two workers end close together (by default pytest-xdist hands out the files with the
    most tests first: a long file of few tests came last and ran alone).
    """
    _skip_speedup_tests(items)
    if not hasattr(config, "workerinput"):
        return  # a run without workers keeps pytest's order
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def seconds(path: str) -> float:
        return SECONDS.get(path, SECONDS_A_TEST * len(files[path]))

    items[:] = [item for path in sorted(files, key=seconds, reverse=True) for item in files[path]]


# Between files, the heap the tests leave alive is frozen (`gc.freeze()`, after a
# collection): the garbage collector then scans only what the next file makes. An engine
# freezes its heap while it runs and unfreezes it at stop (docs/local-engine.md,
# speed-ups), so between tests each full collection scanned the whole heap (moto's and
# botocore's models, every test module: about a million objects in a long run, 0.4 s a
# collection, 41 of them in four workflow files: a third of their CPU). Frozen, an engine
# leaves the heap as it is (engine._freeze_heap). And a full collection waits for 20
# younger ones, not 10 (GC_THRESHOLD). Those four files alone (s3_batch_mode, batch_mode,
# processor, redrive), serially: 45.5 to 48 s of CPU before, 39.5 s after; peak memory
# 570 MB before, 530 MB after. (The threshold alone saved as much CPU but took 1.3 GB at
# 20 and 1.6 GB at 30: the frozen heap is what keeps the memory down.) Garbage among
# frozen objects is collected when the frozen heap has grown by half: it is thawed and
# collected whole.
GC_THRESHOLD = 20


def pytest_configure(config: pytest.Config) -> None:
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_THRESHOLD)


_FROZEN = {"whole": 0}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    if nextitem is not None and nextitem.path == item.path and _FROZEN["whole"]:
        return  # within a file (counting the frozen heap walks it)
    if gc.get_freeze_count() > 1.5 * _FROZEN["whole"] + 100_000:
        gc.unfreeze()
        _FROZEN["whole"] = 0
    gc.collect()
    gc.freeze()
    if not _FROZEN["whole"]:
        _FROZEN["whole"] = gc.get_freeze_count()


@pytest.fixture
def thawed_heap() -> None:
    """The heap as in a process that froze nothing (the freeze between files undone)."""
    gc.unfreeze()
    _FROZEN["whole"] = 0  # frozen again whole after the test's file


@pytest.fixture(scope="session")
def _state_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Records, pages and the `onceflow up` address stay out of the project's .onceflow/
    while modules' fixtures run (they may run commands before any test does)."""
    root = tmp_path_factory.mktemp("onceflow-state")
    with pytest.MonkeyPatch.context() as patch:
        _point_state_at(patch, root / "session")
        yield root


_TESTS = count()


@pytest.fixture(autouse=True)
def _private_state(_state_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's own records, pages and `onceflow up` address (a directory made only
    when a command writes there): no test reads what another left, whichever order the
    workers run them in. A test's own fixtures can still point them elsewhere."""
    _point_state_at(monkeypatch, _state_root / f"test-{next(_TESTS)}")


def _point_state_at(patch: pytest.MonkeyPatch, state: Path) -> None:
    patch.setenv("ONCEFLOW_RECORDS", str(state / "executions"))
    patch.setenv("ONCEFLOW_STATE_DIR", str(state))
    # `onceflow show` without --html writes under the project's .onceflow/show (read
    # once, at import)
    patch.setattr(view_page, "SHOW_DIRECTORY", state / "show")


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as local:
        local.state.requests.clear()
        local.state.clock.slept.clear()
        yield local
