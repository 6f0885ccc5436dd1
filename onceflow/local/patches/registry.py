"""What a patch is, and how patches are installed and taken away again.

Three kinds, in three modules:

- ``hooks``: the engine's own instruments (its clock, its request log and
  injected faults, handlers run in-process, a signal when an execution ends).
  The engine cannot run without them.
- ``fidelity``: each makes moto do what AWS does where moto does otherwise,
  names that AWS behaviour and the test that holds the engine to it. The
  engine cannot be trusted without them.
- ``speedups``: each makes moto do the same thing faster. Each is pinned to
  the sha256 of the moto (or botocore) source it follows or relies on.

A hook or a fidelity patch that no longer fits the installed moto stops the
engine with the reason. A speed-up whose pin or checks do not match is left
out with one warning line and the engine runs without it, as moto alone runs.
"""

from __future__ import annotations

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

# hook: the engine's instruments; fidelity: moto made to do what AWS does; limit:
# AWS's quotas (onceflow/local/limits/); iam: the template's roles
# (onceflow/local/iam.py); meter: the bench's DynamoDB meter; speedup: moto faster.
Kind = Literal["hook", "fidelity", "limit", "iam", "meter", "speedup"]

# Set to 1 to make every speed-up's pin mismatch on purpose, as a moto upgrade
# that changed all of them would (`make test-without-speedups`).
BREAK_PINS_ENV = "ONCEFLOW_BREAK_SPEEDUP_PINS"


LOG = logging.getLogger("onceflow.local.patches")
_WARNED: set[str] = set()


@dataclass(frozen=True)
class Pin:
    """moto code a speed-up follows step by step or relies on in detail, with the
    sha256 of its source when the speed-up was checked against it."""

    what: str
    sources: Callable[[], Sequence[Any]]
    sha256: str

    def actual(self) -> str:
        return source_sha256(self.sources())

    def matches(self) -> bool:
        if os.environ.get(BREAK_PINS_ENV) == "1":
            return False
        return self.actual() == self.sha256


def source_sha256(sources: Sequence[Any]) -> str:
    return hashlib.sha256(b"".join(inspect.getsource(x).encode() for x in sources)).hexdigest()


def _fits_always() -> list[str]:
    return []


def gone(owner: Any, *names: str) -> list[str]:
    """What a patch replaces on owner that owner no longer defines itself (moved or renamed)."""
    where = getattr(owner, "__qualname__", getattr(owner, "__name__", str(owner)))
    return [f"{where}.{name} is gone" for name in names if name not in vars(owner)]


def takes(function: Any, *parameters: str) -> list[str]:
    """A function a patch delegates to, if its leading parameters are no longer these."""
    found = list(inspect.signature(function).parameters)[: len(parameters)]
    if found == list(parameters):
        return []
    now, was = ", ".join(found), ", ".join(parameters)
    return [f"{function.__qualname__} now takes ({now}), not ({was})"]


def emits(function: Any, *events: str) -> list[str]:
    """botocore events a hook is registered on that function no longer emits."""
    source = inspect.getsource(function)
    return [f"{function.__qualname__} no longer emits {e}" for e in events if f"{e}." not in source]


@dataclass(frozen=True)
class Patch:
    """One change to moto or botocore.

    ``why`` is, for a fidelity patch, the AWS behaviour it reproduces (with the
    AWS page that says so); for a speed-up, what it saves; for a hook, what the
    engine needs it for. ``test`` names the test that holds it to that.
    ``fits`` lists what moto no longer has that the patch needs (empty: fits).
    """

    name: str
    kind: Kind
    why: str
    test: str
    install: Callable[[Installer], None]
    fits: Callable[[], list[str]] = _fits_always
    pins: tuple[Pin, ...] = ()

    def moved(self) -> list[str]:
        """What moto no longer has that the patch needs (its fits check, without pins)."""
        try:
            return list(self.fits())
        except Exception as exc:  # moto moved so far the check itself fails: a problem too
            return [f"its check failed ({type(exc).__name__}: {exc})"]

    def problems(self) -> list[str]:
        """What moved, and each pin whose source changed."""
        found = self.moved()
        try:
            changed = [pin.what for pin in self.pins if not pin.matches()]
        except Exception as exc:  # the pinned source is gone: a problem too
            return [*found, f"its pin's check failed ({type(exc).__name__}: {exc})"]
        return found + [f"{what} changed: re-check the patch that follows it" for what in changed]


_ABSENT = object()


@dataclass
class Installer:
    """Puts replacements in place and registers botocore event handlers, and
    remembers what was there, to undo it."""

    done: list[tuple[Any, str, Any, Any]] = field(default_factory=list)
    registered: list[tuple[str, Any, Any]] = field(default_factory=list)

    def register(self, event: str, handler: Callable[..., Any]) -> None:
        """handler on botocore's event, after the handlers already there, for every
        session made from now on (botocore's BUILTIN_HANDLERS, where moto registers
        its BotocoreStubber) and for boto3's default session if one exists."""
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
        """Put back what was there, newest first; returns what could not be (something
        replaced it again after us and is still there)."""
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
                left.append(f"{getattr(owner, '__name__', owner)!s}.{name}")
                continue
            if before_raw is _ABSENT:
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


_LOCK = threading.RLock()


def install_all(patches: Sequence[Patch]) -> Installed:
    """Install patches in order: hooks and fidelity patches must fit, speed-ups may not."""
    with _LOCK:
        required = [
            f"{p.name}: {problem}"
            for p in patches
            if p.kind != "speedup"
            for problem in p.problems()
        ]
        if required:
            raise RuntimeError(
                "onceflow's engine patches no longer fit this moto (a hook or a fidelity "
                "patch; the engine would not behave as AWS does): " + "; ".join(required)
            )
        installer = Installer()
        installed: list[Patch] = []
        skipped: dict[str, list[str]] = {}
        for patch in patches:
            if patch.kind == "speedup":
                problems = patch.problems()
                if problems:
                    skipped[patch.name] = problems
                    if patch.name not in _WARNED:  # one line per speed-up and process
                        _WARNED.add(patch.name)
                        LOG.warning(
                            "onceflow: speed-up '%s' left out (%s); moto's own code runs instead",
                            patch.name,
                            problems[0],
                        )
                    continue
            patch.install(installer)
            installed.append(patch)
        return Installed(installed, skipped, installer)
