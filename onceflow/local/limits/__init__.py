"""AWS's quotas, enforced where and as AWS enforces them (moto is kinder), one module per
service; their PATCHES go into the engine's patch registry. docs/local-engine.md ("AWS
limits on the local engine") lists the limits with the pages they come from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceflow.local.limits import dynamodb, eventbridge, lambda_timeout, sqs, states
from onceflow.local.limits.states import EXPRESS_DURATION_LIMIT, execution_limits

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

__all__ = ["EXPRESS_DURATION_LIMIT", "PATCHES", "execution_limits", "install", "uninstall"]
PATCHES = (*states.PATCHES, *dynamodb.PATCHES, *sqs.PATCHES, *eventbridge.PATCHES)


def install(engine: LocalEngine) -> None:
    """Give engine its Lambda timeouts (idempotent; the moto patches are in the
    registry, put in place by patches.install())."""
    if not isinstance(vars(engine.runtime).get("invoke"), lambda_timeout.TimedInvoke):
        engine.runtime.invoke = lambda_timeout.TimedInvoke(engine)  # type: ignore[method-assign]


def uninstall(engine: LocalEngine) -> None:
    """Take them away again (idempotent)."""
    vars(engine.runtime).pop("invoke", None)
