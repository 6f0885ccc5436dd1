"""`onceflow up`: one local engine that outlives a command (docs/local-engine.md, "One
engine for many commands"). It runs the command lines forwarded to it (forwarding.py) one at a
time with ``command`` (the CLI's main, passed in: this module does not import the CLI).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import secrets
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from onceflow.local import forwarding
from onceflow.local.engine import LocalEngine
from onceflow.local.errors import EngineError
from onceflow.local.lambdas import FUNCTION_OUTPUT
from onceflow.project import private_directory, project_directory, stack_label, write_private

_REMEMBERED_NONCES = 10_000  # to refuse a replayed request (a few per command)


@dataclass(frozen=True)
class SharedEngine:
    """The engine of the `onceflow up` a command was sent to, as the command gets it."""

    engine: LocalEngine
    parameters: dict[str, str] = field(default_factory=dict)
    template: Path | None = None
    started: float = 0.0  # when the command began (epoch seconds)
    stack: str = ""  # the name its records give the stack (project.stack_label)


# A command: the command line (argv) and the engine it runs on; returns its exit code.
Command = Callable[[list[str], SharedEngine], int]


@contextlib.contextmanager
def engine_for(
    shared: SharedEngine | None,
    parameters: dict[str, str],
    make: Callable[[], LocalEngine],
    template: Path | None = None,
) -> Iterator[LocalEngine]:
    """The server's engine for a forwarded command; otherwise a fresh one for the command."""
    if shared is None:
        with make() as engine:
            yield engine
        return
    if template and shared.template and template.resolve() != shared.template.resolve():
        raise EngineError(
            f"the running local engine (onceflow up) runs {shared.template}, not "
            f"{template}; restart it with --template {template}, or add --no-server"
        )
    different = {k: v for k, v in parameters.items() if shared.parameters.get(k) != v}
    if different:
        raise EngineError(
            "the running local engine (onceflow up) has other template parameters than "
            f"{', '.join(f'{k}={v}' for k, v in sorted(different.items()))}; "
            "restart it with them, or add --no-server"
        )
    yield shared.engine


class _Handler(BaseHTTPRequestHandler):
    server: EngineServer

    def log_message(self, format: str, *args: Any) -> None:
        self.server.log(f"{self.address_string()} {format % args}")

    def _answer(self, status: int, body: dict[str, Any], nonce: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if nonce is not None:  # the proof that this server knows the token
            proof = forwarding.answer_mac(self.server.token, nonce, status, data)
            self.send_header(forwarding.PROOF_HEADER, proof)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length", "0")
        if not length.isdecimal() or int(length) > 1 << 20:
            self._answer(400, {"error": "bad Content-Length"})
        else:
            self._handle(self.rfile.read(int(length)))

    do_GET = do_POST  # a GET's body: empty, as the client sends it

    def _handle(self, body: bytes) -> None:
        """Answer a request whose HMAC holds and whose nonce is new; else 403."""
        nonce = self.headers.get(forwarding.NONCE_HEADER, "")
        expected = forwarding.request_mac(self.server.token, self.command, self.path, nonce, body)
        given = self.headers.get(forwarding.AUTH_HEADER, "")
        if (
            len(nonce) < 32
            or not forwarding.matches(given, expected)
            or not self.server.fresh(nonce)
        ):
            refused = "the request is not signed with this server's token"
            return self._answer(403, {"error": refused})
        if (self.command, self.path) == ("GET", "/health"):
            return self._answer(200, self.server.describe(), nonce)
        if (self.command, self.path) != ("POST", "/run"):
            return self._answer(404, {"error": f"no {self.path}"}, nonce)
        try:
            request = json.loads(body or b"{}")
            argv, cwd = request["argv"], request.get("cwd")
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ValueError("argv must be a list of strings")
            if cwd is not None and not Path(cwd).is_dir():
                raise ValueError(f"no directory {cwd}")
        except (ValueError, KeyError, TypeError) as exc:
            return self._answer(400, {"error": f"bad request: {exc}"}, nonce)
        self._answer(200, self.server.run(argv, cwd), nonce)


class EngineServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that runs onceflow commands against one LocalEngine."""

    daemon_threads = True

    def __init__(
        self,
        engine: LocalEngine,
        parameters: dict[str, str],
        port: int = 0,
        log: Callable[[str], None] | None = None,
        template: Path | None = None,
        *,
        command: Command,
    ) -> None:
        super().__init__((forwarding.HOST, port), _Handler)
        self.engine = engine
        self.command = command  # runs one command line: the CLI's main
        self.parameters = dict(parameters)
        self.template = Path(template).resolve() if template is not None else None
        # Its address goes to the template's project (else the one found from here).
        self.project = project_directory(self.template) if self.template is not None else None
        self.token = secrets.token_hex(16)
        self.started = time.time()
        self.stack = stack_label("up")
        self.commands = 0
        self.log: Callable[[str], None] = log or (lambda text: None)
        self._lock = threading.Lock()  # one command at a time
        self._nonces: dict[str, None] = {}  # insertion-ordered: oldest first
        self._nonces_lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def fresh(self, nonce: str) -> bool:
        """True the first time a nonce is seen: a captured request cannot be sent again."""
        with self._nonces_lock:
            if nonce in self._nonces:
                return False
            self._nonces[nonce] = None
            if len(self._nonces) > _REMEMBERED_NONCES:
                del self._nonces[next(iter(self._nonces))]
            return True

    def describe(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "port": self.port,
            "parameters": self.parameters,
            "started": self.started,
            "commands": self.commands,
        }

    def run(self, argv: list[str], cwd: str | None = None) -> dict[str, Any]:
        """Run `onceflow <argv>` on this engine, one command at a time, in the client's
        directory (cwd): relative paths mean what they meant where it was typed."""
        out, err = io.StringIO(), io.StringIO()
        with self._lock:
            started = time.time()
            shared = SharedEngine(self.engine, self.parameters, self.template, started, self.stack)
            previous, saved = os.getcwd(), (sys.stdout, FUNCTION_OUTPUT.passthrough)
            try:
                os.chdir(cwd or previous)
                # The command's stdout captured, the functions' output left where it goes:
                # FUNCTION_OUTPUT on sys.stdout sends function threads' lines to the function
                # log; replacing sys.stdout would send them (and any Logger imported
                # meanwhile) to the command.
                FUNCTION_OUTPUT.passthrough, sys.stdout = out, FUNCTION_OUTPUT
                with contextlib.redirect_stderr(err):
                    code = self.command(argv, shared)
            except SystemExit as exc:  # argparse, or a command that exits with a message:
                # what Python's own exit would make of it
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
                if code and not isinstance(exc.code, int):
                    err.write(f"{exc.code}\n")
            except Exception:  # reported to the client, as the command would print it alone
                err.write(traceback.format_exc())
                code = 1
            finally:
                sys.stdout, FUNCTION_OUTPUT.passthrough = saved
                os.chdir(previous)
                self.commands += 1
        self.log(f"onceflow {' '.join(argv)} -> exit {code}")
        return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    def publish(self) -> Path:
        """Write the address and token where clients look for them (readable by this user only)."""
        path = forwarding.state_file(self.project)
        private_directory(path.parent)
        # The token lets a command run here: 0600 from the moment the file exists.
        write_private(path, json.dumps({**self.describe(), "token": self.token}))
        return path

    def unpublish(self) -> None:
        path = forwarding.state_file(self.project)
        with contextlib.suppress(FileNotFoundError):
            current = json.loads(path.read_text(encoding="utf-8"))
            if current.get("token") == self.token:
                path.unlink()


def serve(
    template: Path,
    parameters: dict[str, str],
    port: int,
    time_scale: float,
    *,
    command: Command,
) -> int:
    """`onceflow up`: start the engine and serve ``command`` (the CLI's main) until stopped."""
    say = functools.partial(print, file=sys.stderr, flush=True)  # not a command's, captured
    try:
        existing = forwarding.running(project_directory(template))
    except forwarding.ServerError as exc:  # not onceflow up: this one publishes over the stale file
        say(f"onceflow up: {exc}")
        existing = None
    if existing is not None:
        where = f"pid {existing['pid']}, port {existing['port']}"
        say(f"onceflow up: a local engine is already up ({where})")
        return 2
    with LocalEngine(
        template, parameters, time_scale=time_scale, function_log=io.StringIO()
    ) as engine:
        server = EngineServer(engine, parameters, port, say, template, command=command)
        path = server.publish()
        say(
            f"onceflow: local engine up on http://{forwarding.HOST}:{server.port} (pid "
            f"{os.getpid()}); address in {path}. Commands use it until you stop it (Ctrl-C)."
        )
        # Ctrl-C, and `kill` (SIGTERM), stop it cleanly (KeyboardInterrupt); a shell that
        # started it in the background may have left SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            say("onceflow: stopping the local engine")
        finally:
            server.unpublish()
            server.server_close()
    return 0
