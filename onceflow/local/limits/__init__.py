"""AWS's quotas, enforced by the local engine where and as AWS enforces them, one
module per service: states (Step Functions), lambda_timeout, dynamodb, sqs, eventbridge.

moto is kinder than AWS: it never ends an execution at 25,000 history events,
counts a state's size as ASCII-escaped JSON, lets an EXPRESS execution run past
five minutes, lets a handler run past its function's Timeout, and takes DynamoDB
numbers, SQS bodies and EventBridge entries that AWS refuses. A local run that
passes only because of that would fail on AWS. Each module's PATCHES go into the
engine's one patch registry (onceflow.local.patches), each with a fits check naming
what it needs of moto; docs/local-engine.md ("AWS limits on the local engine") lists
the limits with the pages they come from.

``install(engine)`` gives an engine its Lambda timeouts and its sized custom events
and ``uninstall(engine)`` takes them away. Both are idempotent.
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
    """Enforce the limits for this engine (their moto patches are in the registry,
    PATCHES, put in place by patches.install() with the others)."""
    with _LOCK:
        if any(e is engine for e in _ENGINES):
            return
        _ENGINES.append(engine)
    engine.runtime.invoke = lambda_timeout.TimedInvoke(engine)  # type: ignore[method-assign]
    engine.put_custom_event = eventbridge.sized_custom_events(engine.put_custom_event)  # type: ignore[method-assign]


def uninstall(engine: LocalEngine) -> None:
    """Stop enforcing them for this engine (patches.uninstall() takes the moto patches)."""
    with _LOCK:
        if not any(e is engine for e in _ENGINES):
            return
        _ENGINES[:] = [e for e in _ENGINES if e is not engine]
        vars(engine.runtime).pop("invoke", None)
        vars(engine).pop("put_custom_event", None)


def installed() -> bool:
    return bool(_ENGINES)
