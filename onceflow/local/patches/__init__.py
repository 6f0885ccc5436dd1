"""Every change the local engine makes to moto and botocore, by kind.

- ``hooks``: the engine's instruments (clock, request log and faults, handlers
  in-process, execution end signals), its state kept per engine;
- ``fidelity``: moto made to do what AWS does, each naming the AWS behaviour
  (``fidelity.distributed_map``: the Distributed Map's, apart;
  ``fidelity.integrations``: the Lambda, DynamoDB and SQS tasks' results;
  ``fidelity.executions``: the context object and DescribeExecution);
- ``speedups``: moto made faster, each pinned to the source it relies on and
  left out (one warning line) when that source changed;
- ``registry``: what a patch is (its name, kind, reason, test, pins) and how
  patches are put in place and taken away.

``install(state)`` puts them in place when the first engine starts and
``uninstall(state)`` takes every one away when the last engine stops. AWS's
quotas (onceflow/local/limits.py) and IAM (onceflow/local/iam.py) are installed on top of
these, per engine, and undone the same way.
"""

from __future__ import annotations

import importlib
import threading

import moto

from onceflow.local.patches import fidelity, hooks
from onceflow.local.patches.fidelity import (
    UNSUPPORTED_RESULT,
    distributed_map,
    eval_jsonata,
    executions,
    integrations,
)
from onceflow.local.patches.hooks import (
    Clock,
    EngineState,
    FaultInjector,
    RecordedRequest,
    RequestLog,
    dynamodb_error,
    sqs_error,
)
from onceflow.local.patches.registry import LOG, Installed, Patch, install_all

__all__ = [
    "UNSUPPORTED_RESULT",
    "Clock",
    "EngineState",
    "FaultInjector",
    "RecordedRequest",
    "RequestLog",
    "dynamodb_error",
    "eval_jsonata",
    "install",
    "sqs_error",
    "uninstall",
]

MOTO_VERSION = "5.2.5"  # the version every pin and check was made against


def _speedups() -> tuple[Patch, ...]:
    """The speed-ups, or none if moto moved so far that their module cannot load
    (it looks moto's code up as it loads): never the fidelity patches with them."""
    try:
        speedups = importlib.import_module("onceflow.local.patches.speedups")
    except Exception as exc:  # reported: the engine runs, slower, as moto alone runs
        LOG.warning("onceflow: every speed-up left out (%s: %s)", type(exc).__name__, exc)
        return ()
    return tuple(speedups.PATCHES)


# In this order: each later patch wraps what the earlier ones put in place (the
# request log and the atomic writes wrap the routed process_request, say).
PATCHES: tuple[Patch, ...] = (
    *_speedups(),
    *hooks.PATCHES,
    *fidelity.PATCHES,
    *distributed_map.PATCHES,
    *integrations.PATCHES,
    *executions.PATCHES,
)

_LOCK = threading.Lock()
_ENGINES: list[EngineState] = []
_INSTALLED: list[Installed] = []


def problems() -> dict[str, list[str]]:
    """Every patch that does not fit the installed moto, with why (empty: all fit)."""
    found = {p.name: p.problems() for p in PATCHES}
    return {name: listed for name, listed in found.items() if listed}


def install(state: EngineState) -> Installed:
    """Patch moto for an engine: the first engine installs, the others share."""
    with _LOCK:
        if not _INSTALLED:
            if moto.__version__ != MOTO_VERSION:
                LOG.warning(
                    "onceflow: moto is %s, the engine's patches were checked on %s",
                    moto.__version__,
                    MOTO_VERSION,
                )
            _INSTALLED.append(install_all(PATCHES))
        if not any(s is state for s in _ENGINES):
            _ENGINES.append(state)
            hooks.register(state)
        return _INSTALLED[0]


def uninstall(state: EngineState) -> None:
    """The engine has stopped; the last one takes every patch away."""
    with _LOCK:
        if not any(s is state for s in _ENGINES):
            return
        _ENGINES[:] = [s for s in _ENGINES if s is not state]
        hooks.unregister(state)
        if not _ENGINES and _INSTALLED:
            left = _INSTALLED.pop().installer.undo()
            if left:
                LOG.warning("onceflow: replaced again after the engine's patches: %s", left)


def installed() -> Installed | None:
    """What is in place now (None: no engine is running)."""
    with _LOCK:
        return _INSTALLED[0] if _INSTALLED else None
