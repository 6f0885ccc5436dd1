"""What a patch is, and how patches go in and out (docs/local-engine.md, "The engine's
patches": which stop the engine, which are left out)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import boto3
from botocore.handlers import BUILTIN_HANDLERS

from onceflow.local.errors import EngineError

# limit: AWS's quotas (onceflow/local/limits/); iam: the template's roles
# (onceflow/local/iam.py); meter: the bench's DynamoDB meter.
Kind = Literal["hook", "fidelity", "limit", "iam", "meter", "speedup"]

# 1: every speed-up's pin mismatches, as after a moto upgrade (`make test-without-speedups`).
BREAK_PINS_ENV = "ONCEFLOW_BREAK_SPEEDUP_PINS"

LOG = logging.getLogger("onceflow.local.patches")
_WARNED: set[str] = set()


def _name(owner: Any) -> str:
    return str(getattr(owner, "__qualname__", getattr(owner, "__name__", owner)))


def gone(owner: Any, *names: str) -> list[str]:
    """What a patch replaces on owner that owner no longer defines itself (moved or renamed)."""
    return [f"{_name(owner)}.{name} is gone" for name in names if name not in vars(owner)]


@functools.cache
def source(owner: Any) -> str:
    """inspect.getsource of a function, class or module, read once per object: every engine
    start checks the same ones (a speed-up, measured: docs/local-engine.md). An object put
    in its place, as a test or a moto release does, is read anew."""
    return inspect.getsource(owner)


def takes(function: Any, *parameters: str) -> list[str]:
    """A function a patch delegates to, if its leading parameters are no longer these."""
    found = tuple(inspect.signature(function).parameters)[: len(parameters)]
    now, was = ", ".join(found), ", ".join(parameters)
    return [] if found == parameters else [f"{_name(function)} now takes ({now}), not ({was})"]


def emits(function: Any, *events: str) -> list[str]:
    """botocore events a hook is registered on that function no longer emits."""
    text = source(function)
    return [f"{_name(function)} no longer emits {e}" for e in events if f"{e}." not in text]


def lacks(function: Any, *texts: str) -> list[str]:
    """Text a patch relies on that the source of function (or class, or module) no longer has."""
    text = source(function)
    return [f"{_name(function)} no longer has {t!r}" for t in texts if t not in text]


def _checked(check: Callable[[], Sequence[str]], failed: str) -> list[str]:
    try:
        return list(check())
    except Exception as exc:  # moto moved so far the check itself fails
        return [f"{failed} ({type(exc).__name__}: {exc})"]


@dataclass(frozen=True)
class Patch:
    """One change to moto or botocore (docs/local-engine.md, "The engine's patches"); a
    speed-up's ``pinned`` sources had this ``sha256`` when it was checked against them."""

    name: str
    kind: Kind
    why: str
    test: str
    install: Callable[[Installer], None]
    fits: Callable[[], list[str]] = list
    pinned: Callable[[], Sequence[Any]] | None = None
    sha256: str = ""

    def moved(self) -> list[str]:
        """What the fits check finds moved (a check that fails is a problem too)."""
        return _checked(self.fits, "its check failed")

    def pinned_sha256(self) -> str:
        sources = self.pinned() if self.pinned else ()
        return hashlib.sha256(b"".join(source(x).encode() for x in sources)).hexdigest()

    def _pin_changed(self) -> list[str]:
        if os.environ.get(BREAK_PINS_ENV) != "1" and self.pinned_sha256() == self.sha256:
            return []
        return [f"{self.name} changed: re-check the patch that follows it"]

    def problems(self) -> list[str]:
        """What moved, and the pinned source if it changed (or is gone)."""
        pin = _checked(self._pin_changed, "its pin's check failed") if self.pinned else []
        return [*self.moved(), *pin]


class DoesNotFit(EngineError, RuntimeError):
    """moto or botocore moved what a patch needs: the engine does not start (a command
    prints the one line, no traceback)."""


_ABSENT = object()


@dataclass
class Installer:
    """Puts replacements and botocore event handlers in place, remembering what to undo."""

    done: list[tuple[Any, str, Any, Any]] = field(default_factory=list)
    registered: list[tuple[str, Any, Any]] = field(default_factory=list)

    def register(self, event: str, handler: Callable[..., Any]) -> None:
        """handler on botocore's event after those there, for every session made from now
        on and boto3's default one (docs/local-engine.md, "The engine's patches")."""
        BUILTIN_HANDLERS.append((event, handler))
        session = boto3.DEFAULT_SESSION
        if session is not None:
            session.events.register(event, handler)
        self.registered.append((event, handler, session))

    def replace(self, owner: Any, name: str, value: Any) -> Any:
        """owner.name = value; returns what owner.name gave before (to delegate to)."""
        before_raw = vars(owner).get(name, _ABSENT)
        before = getattr(owner, name, None)
        setattr(owner, name, value)
        self.done.append((owner, name, before_raw, vars(owner).get(name)))
        return before

    def undo(self) -> list[str]:
        """Put back what was there, newest first; returns what was replaced again since."""
        while self.registered:
            event, handler, session = self.registered.pop()
            BUILTIN_HANDLERS.remove((event, handler))
            # and from a default session made since, which took them from BUILTIN_HANDLERS:
            # kept, it would have them twice once they are registered again
            for made in (session, boto3.DEFAULT_SESSION):
                if made is not None:
                    made.events.unregister(event, handler)
        left: list[str] = []
        while self.done:
            owner, name, before_raw, ours = self.done.pop()
            if vars(owner).get(name, _ABSENT) is not ours:
                left.append(f"{_name(owner)}.{name}")
            elif before_raw is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, before_raw)
        return left


@dataclass
class Installed:
    """What install() put in place: the patches and the speed-ups it left out."""

    patches: list[Patch]
    skipped: dict[str, list[str]]  # speed-up name: why it was left out
    installer: Installer


# What a user runs to get the pinned versions back, from a checkout or an installed wheel.
REMEDY = (
    "(install the pinned versions: `make setup` in a checkout; an installed onceflow: "
    "install it again with its [local] extra, which pins them)"
)
LOCK = threading.RLock()  # held while patches go in or out (and by patches.install)


def install_all(patches: Sequence[Patch], versions: str = "") -> Installed:
    """Install patches in order: hooks and fidelity patches must fit, speed-ups may not;
    with versions other than the pinned ones (as "moto 9.9.9 (pinned 5.2.5)"), every one."""
    with LOCK:
        found = {p.name: p.problems() for p in patches}
        moved = "; ".join(f"{p.name}: {m}" for p in patches for m in p.moved()) if versions else ""
        if moved:
            raise DoesNotFit(f"the local engine does not fit {versions}: {moved} {REMEDY}")
        required = [f"{p.name}: {m}" for p in patches if p.kind != "speedup" for m in found[p.name]]
        if required:
            raise DoesNotFit(
                "onceflow's engine patches no longer fit this moto (a hook or a fidelity "
                "patch; the engine would not behave as AWS does): " + "; ".join(required)
            )
        installed = Installed([], {name: f for name, f in found.items() if f}, Installer())
        for patch in patches:
            if patch.name not in installed.skipped:
                try:
                    patch.install(installed.installer)
                except BaseException:  # nothing half-installed is left behind
                    installed.installer.undo()
                    raise
                installed.patches.append(patch)
            elif patch.name not in _WARNED:  # one line per speed-up and process
                _WARNED.add(patch.name)
                LOG.warning("onceflow: speed-up '%s' left out (%s); moto's own code runs instead",
                            patch.name, installed.skipped[patch.name][0])  # fmt: skip
        return installed
