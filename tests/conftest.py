"""Fixtures: a fresh local engine per test, with a clean request log."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow import patches
from onceflow.engine import LocalEngine


@pytest.fixture(autouse=True, scope="session")
def _private_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Records and the `onceflow up` address stay out of the project's .onceflow/.

    Session-wide, so a module's own fixtures can still point them elsewhere.
    """
    state = tmp_path_factory.mktemp("onceflow-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ONCEFLOW_RECORDS", str(state / "executions"))
        patch.setenv("ONCEFLOW_STATE_DIR", str(Path(state)))
        yield


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as local:
        patches.REQUEST_LOG.clear()
        patches.CLOCK.slept.clear()
        yield local
