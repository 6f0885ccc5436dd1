"""AWS's quotas, enforced where and as AWS enforces them, one module per service:
states (Step Functions), lambda_timeout, dynamodb, sqs, eventbridge.

moto is kinder than AWS (no 25,000-event history, ASCII-escaped sizes, no five
minutes for EXPRESS, no function Timeout, DynamoDB numbers, SQS bodies and EventBridge
entries AWS refuses), so a local run could pass only thanks to it. Each module's
PATCHES go into the engine's patch registry; docs/local-engine.md ("AWS limits on
the local engine") lists the limits with the pages they come from.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from onceflow.local.limits import dynamodb, eventbridge, lambda_timeout, sqs, states
from onceflow.local.limits.states import EXPRESS_DURATION_LIMIT, execution_limits

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

__all__ = ["EXPRESS_DURATION_LIMIT", "PATCHES", "execution_limits", "install", "uninstall"]
PATCHES = (*states.PATCHES, *lambda_timeout.PATCHES, *dynamodb.PATCHES, *sqs.PATCHES,
           *eventbridge.PATCHES)  # fmt: skip
_LOCK = threading.Lock()
_ENGINES: list[LocalEngine] = []


def install(engine: LocalEngine) -> None:
    """Give engine its Lambda timeouts (idempotent; the moto patches are in the
    registry, put in place by patches.install())."""
    with _LOCK:
        if any(e is engine for e in _ENGINES):
            return
        _ENGINES.append(engine)
    engine.runtime.invoke = lambda_timeout.TimedInvoke(engine)  # type: ignore[method-assign]


def uninstall(engine: LocalEngine) -> None:
    """Take them away again (idempotent)."""
    with _LOCK:
        if any(e is engine for e in _ENGINES):
            _ENGINES[:] = [e for e in _ENGINES if e is not engine]
            vars(engine.runtime).pop("invoke", None)


def installed() -> bool:
    return bool(_ENGINES)
