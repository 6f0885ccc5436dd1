"""Every change the local engine makes to moto and botocore, each a ``registry.Patch``
(docs/local-engine.md, "The engine's patches"), put in place while an engine runs."""

from __future__ import annotations

import importlib
import re
from importlib import metadata
from pathlib import Path

import botocore
import moto

from onceflow.local.patches import fidelity, hooks
from onceflow.local.patches.fidelity import (
    api_answers,
    distributed_map,
    eval_jsonata,
    executions,
    express_arn,
    integrations,
    paths,
    s3_inventory,
    s3_objects,
)
from onceflow.local.patches.hooks import Clock, EngineState, dynamodb_error, sqs_error
from onceflow.local.patches.registry import LOCK, LOG, Installed, Patch, install_all

__all__ = ["Clock", "EngineState", "dynamodb_error", "eval_jsonata", "install", "sqs_error",
           "uninstall"]  # fmt: skip

# The lock file `make setup` installs: the versions every patch was made against.
_LOCK_FILE = Path(__file__).resolve().parents[3] / "requirements" / "dev.txt"


def pinned() -> dict[str, str]:
    """{"moto": version, "botocore": version} as the project pins them."""
    if _LOCK_FILE.exists():
        lines = _LOCK_FILE.read_text().splitlines()
    else:  # installed from the wheel: pyproject's [local] requirement
        lines = [r.split(";")[0] for r in metadata.requires("onceflow") or []]
    pins = re.findall(r"^\s*(moto|botocore)(?:\[[^]]*\])?==([^\s;#]+)", "\n".join(lines), re.M)
    return dict(reversed(pins))  # the first pin of each


def other_versions() -> str:
    """moto and botocore where they are not the pinned versions ("" where both are)."""
    pins, installed = pinned(), {"moto": moto.__version__, "botocore": botocore.__version__}
    return ", ".join(
        f"{n} {v} (pinned {pins[n]})" for n, v in installed.items() if pins.get(n, v) != v
    )


def _speedups() -> tuple[Patch, ...]:
    """The speed-ups, or none (one warning) if moto moved so far their module cannot load."""
    try:
        speedups = importlib.import_module("onceflow.local.patches.speedups")
    except Exception as exc:  # reported: the engine runs, slower, as moto alone runs
        LOG.warning("onceflow: every speed-up left out (%s: %s)", type(exc).__name__, exc)
        return ()
    return tuple(speedups.PATCHES)


def _all() -> tuple[Patch, ...]:
    """PATCHES, every patch in order: each wraps what earlier ones put in place, or fills
    the hooks' Stages. Built on first use (limits and iam import this), or as a test set it."""
    if "PATCHES" not in globals():
        from onceflow.local import iam, lambdas, limits

        # iam last: a state's work runs as its machine's role, inside the limits
        kinds = (hooks, lambdas, fidelity, distributed_map, integrations, executions, api_answers,
                 express_arn, s3_inventory, s3_objects, paths, limits, iam)  # fmt: skip
        globals()["PATCHES"] = (*_speedups(), *(p for kind in kinds for p in kind.PATCHES))
    patches: tuple[Patch, ...] = globals()["PATCHES"]
    return patches


def __getattr__(name: str) -> tuple[Patch, ...]:
    if name != "PATCHES":
        raise AttributeError(name)
    return _all()


_INSTALLED: list[Installed] = []


def problems() -> dict[str, list[str]]:
    """Every patch that does not fit the installed moto, with why (empty: all fit). While
    an engine runs, moto's code is replaced: the answer is what install judged before."""
    with LOCK:
        if _INSTALLED:
            return dict(_INSTALLED[0].skipped)
        return {p.name: found for p in _all() if (found := p.problems())}


def install(state: EngineState) -> Installed:
    """Patch moto for an engine: the first engine installs, the others share."""
    with LOCK:
        if not _INSTALLED:
            _INSTALLED.append(install_all(_all(), other_versions()))
        if not any(s is state for s in hooks.RUNNING):
            hooks.RUNNING.append(state)
        return _INSTALLED[0]


def uninstall(state: EngineState) -> None:
    """The engine has stopped; the last one takes every patch away."""
    with LOCK:  # installed exactly while an engine runs
        hooks.RUNNING[:] = [s for s in hooks.RUNNING if s is not state]
        if not hooks.RUNNING and _INSTALLED:
            left = _INSTALLED.pop().installer.undo()
            if left:
                LOG.warning("onceflow: replaced again after the engine's patches: %s", left)


def installed() -> Installed | None:
    """What is in place now (None: no engine is running)."""
    with LOCK:
        return _INSTALLED[0] if _INSTALLED else None
