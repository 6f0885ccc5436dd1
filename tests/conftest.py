"""Fixtures: a fresh local engine per test, with a clean request log."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from onceflow import patches
from onceflow.engine import LocalEngine


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as local:
        patches.REQUEST_LOG.clear()
        patches.CLOCK.slept.clear()
        yield local
