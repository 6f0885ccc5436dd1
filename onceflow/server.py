"""`onceflow up`: one local engine that outlives a command.

The server holds a LocalEngine (the same engine, template and patches) and
listens on 127.0.0.1. While it runs, `demo`, `execute`, `invoke`, `audit`, `redrive`,
`inspect` and the viewer send their command line to it and run there, against the one
engine, so the ledger, buckets, queues and execution histories carry over
from one command to the next. When no server is up they run self-contained,
as before.

The protocol is the command line itself: POST /run {"argv": [...]} runs
`onceflow <argv>` inside the server and answers its exit code, stdout and
stderr. Commands run one at a time (each one's output is captured). The
address is in the project's .onceflow/server.json (the project: the directory
of the template, found upward from where a command runs); a stale file (no
answer) is ignored.

The token in that file never travels. Each request carries a fresh nonce and
an HMAC of it (and of the method, path and body) under the token; each answer
carries an HMAC of the nonce and the answer. A client trusts an answer only
once it checked that proof, so another local program that took the port of a
stale server.json learns nothing and cannot answer for the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import secrets
import signal
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from onceflow.engine import EngineError, LocalEngine
from onceflow.files import private_directory, write_private
from onceflow.template import project_directory

# Commands that use the server when it is up (and no --stack-name is given).
FORWARDED = frozenset(
    {"demo", "execute", "invoke", "audit", "redrive", "inspect", "executions", "show"}
)
HOST = "127.0.0.1"
NONCE_HEADER = "X-Onceflow-Nonce"
AUTH_HEADER = "X-Onceflow-Auth"
PROOF_HEADER = "X-Onceflow-Proof"
# Nonces a server remembers to refuse a replayed request (a few per command).
_REMEMBERED_NONCES = 10_000


class ServerError(Exception):
    """A listener on the recorded port that could not prove it is `onceflow up`."""


def _mac(token: str, *parts: bytes) -> str:
    """HMAC-SHA256 under the token; the first part says what is signed (request or answer)."""
    return hmac.new(token.encode(), b"\n".join(parts), hashlib.sha256).hexdigest()


def request_mac(token: str, method: str, path: str, nonce: str, body: bytes) -> str:
    return _mac(token, b"request", method.encode(), path.encode(), nonce.encode(), body)


def answer_mac(token: str, nonce: str, status: int, body: bytes) -> str:
    return _mac(token, b"answer", nonce.encode(), str(status).encode(), body)


def signed_headers(token: str, method: str, path: str, nonce: str, body: bytes) -> dict[str, str]:
    """The headers that authenticate one request (the token itself is not among them)."""
    return {NONCE_HEADER: nonce, AUTH_HEADER: request_mac(token, method, path, nonce, body)}


def state_file(project: Path | None = None) -> Path:
    """Where `onceflow up` publishes its address: the project's .onceflow/server.json.

    The project is the given directory, else the one of the nearest template upward
    (ONCEFLOW_STATE_DIR moves it: tests use a temporary directory).
    """
    configured = os.environ.get("ONCEFLOW_STATE_DIR")
    if configured:
        return Path(configured) / "server.json"
    return (project or project_directory()) / ".onceflow" / "server.json"


# The engine of the server this process is, while it runs a forwarded command.
_shared: LocalEngine | None = None
_shared_parameters: dict[str, str] = {}
_shared_template: Path | None = None
_command_started: float | None = None


def shared_engine() -> LocalEngine | None:
    return _shared


def command_started() -> float | None:
    """When the command now running on the shared engine started (epoch seconds)."""
    return _command_started


@contextlib.contextmanager
def engine_for(
    parameters: dict[str, str],
    make: Callable[[], LocalEngine],
    template: Path | None = None,
) -> Iterator[LocalEngine]:
    """The server's engine inside a forwarded command; otherwise a fresh one for the command."""
    if _shared is None:
        with make() as engine:
            yield engine
        return
    if (
        template is not None
        and _shared_template is not None
        and template.resolve() != _shared_template.resolve()
    ):
        raise EngineError(
            f"the running local engine (onceflow up) runs {_shared_template}, not "
            f"{template}; restart it with --template {template}, or add --no-server"
        )
    different = {k: v for k, v in parameters.items() if _shared_parameters.get(k) != v}
    if different:
        raise EngineError(
            "the running local engine (onceflow up) has other template parameters than "
            f"{', '.join(f'{k}={v}' for k, v in sorted(different.items()))}; "
            "restart it with them, or add --no-server"
        )
    yield _shared


class _Handler(BaseHTTPRequestHandler):
    server: EngineServer

    def log_message(self, format: str, *args: Any) -> None:
        self.server.log(f"{self.address_string()} {format % args}")

    def _answer(self, status: int, body: dict[str, Any], nonce: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if nonce is not None:
            self.send_header(PROOF_HEADER, answer_mac(self.server.token, nonce, status, data))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self, body: bytes) -> str | None:
        """The request's nonce when its HMAC holds and the nonce is new; else answer 403."""
        nonce = self.headers.get(NONCE_HEADER, "")
        expected = request_mac(self.server.token, self.command, self.path, nonce, body)
        if (
            len(nonce) < 32
            or not hmac.compare_digest(self.headers.get(AUTH_HEADER, ""), expected)
            or not self.server.fresh(nonce)
        ):
            self._answer(403, {"error": "the request is not signed with this server's token"})
            return None
        return nonce

    def do_GET(self) -> None:
        nonce = self._authorised(b"")
        if nonce is None:
            return
        if self.path == "/health":
            self._answer(200, self.server.describe(), nonce)
        else:
            self._answer(404, {"error": f"no {self.path}"}, nonce)

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= 1 << 20:
            self._answer(400, {"error": "bad Content-Length"})
            return
        body = self.rfile.read(length)
        nonce = self._authorised(body)
        if nonce is None:
            return
        if self.path != "/run":
            self._answer(404, {"error": f"no {self.path}"}, nonce)
            return
        try:
            request = json.loads(body or b"{}")
            argv = request["argv"]
            cwd = request.get("cwd")
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ValueError("argv must be a list of strings")
            if cwd is not None and not Path(cwd).is_dir():
                raise ValueError(f"no directory {cwd}")
        except (ValueError, KeyError, TypeError) as exc:
            self._answer(400, {"error": f"bad request: {exc}"}, nonce)
            return
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
    ) -> None:
        super().__init__((HOST, port), _Handler)
        self.engine = engine
        self.parameters = dict(parameters)
        self.template = Path(template).resolve() if template is not None else None
        # Its address goes to the template's project (else the one found from here).
        self.project = project_directory(self.template) if self.template is not None else None
        self.token = secrets.token_hex(16)
        self.started = time.time()
        self.commands = 0
        self._lock = threading.Lock()
        self._log = log
        self._nonces: dict[str, None] = {}  # insertion-ordered: oldest first
        self._nonces_lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def log(self, text: str) -> None:
        if self._log is not None:
            self._log(text)

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
        """Run `onceflow <argv>` here, against this engine; one command at a time.

        It runs in the client's directory, so relative paths (events, the
        template) mean what they meant where the command was typed.
        """
        from onceflow import cli

        global _shared, _shared_parameters, _shared_template, _command_started
        out, err = io.StringIO(), io.StringIO()
        with self._lock:
            _shared, _shared_parameters = self.engine, self.parameters
            _shared_template, _command_started = self.template, time.time()
            previous = os.getcwd()
            try:
                os.chdir(cwd or previous)
                with _command_stdout(out), contextlib.redirect_stderr(err):
                    code = cli.main(argv)
            except SystemExit as exc:  # argparse, or a command that exits with a message
                # What Python's own exit would make of it.
                code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
                if not isinstance(exc.code, int) and exc.code is not None:
                    err.write(f"{exc.code}\n")
            except Exception:  # reported to the client, as the command would print it alone
                err.write(traceback.format_exc())
                code = 1
            finally:
                os.chdir(previous)
                _shared, _shared_parameters = None, {}
                _shared_template, _command_started = None, None
                self.commands += 1
        self.log(f"onceflow {' '.join(argv)} -> exit {code}")
        return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}

    def publish(self) -> Path:
        """Write the address and token where clients look for them (readable by this user only)."""
        path = state_file(self.project)
        private_directory(path.parent)
        # The token lets a command run here: 0600 from the moment the file exists.
        write_private(path, json.dumps({**self.describe(), "token": self.token}))
        return path

    def unpublish(self) -> None:
        path = state_file(self.project)
        with contextlib.suppress(FileNotFoundError):
            current = json.loads(path.read_text(encoding="utf-8"))
            if current.get("token") == self.token:
                path.unlink()


@contextlib.contextmanager
def _command_stdout(out: io.StringIO) -> Iterator[None]:
    """Capture the command's stdout, leaving the functions' output where it goes.

    The engine has put its FunctionOutput router on sys.stdout (function
    threads write to the function log); replacing sys.stdout would send the
    functions' lines, and any Logger imported meanwhile, to the command.
    """
    from onceflow.lambdas import FUNCTION_OUTPUT

    saved_stdout, saved_passthrough = sys.stdout, FUNCTION_OUTPUT.passthrough
    FUNCTION_OUTPUT.passthrough = out
    sys.stdout = FUNCTION_OUTPUT
    try:
        yield
    finally:
        sys.stdout, FUNCTION_OUTPUT.passthrough = saved_stdout, saved_passthrough


def _impostor(port: Any, why: str, path: Path) -> ServerError:
    return ServerError(
        f"the program listening on {HOST}:{port} (the port {path} names) could not prove "
        f"it is the onceflow up that wrote that file ({why}); the token was never sent to it "
        f"and its answer is ignored. If onceflow up is not running, delete {path}; or add "
        "--no-server."
    )


def _request(state: dict[str, Any], method: str, path: str, body: Any = None) -> Any:
    """One signed request; its answer only once the answer proves the token."""
    data = b"" if body is None else json.dumps(body).encode()
    token = str(state["token"])
    nonce = secrets.token_hex(16)
    request = urllib.request.Request(
        f"http://{HOST}:{int(state['port'])}{path}",
        data=data if body is not None else None,
        method=method,
        headers={
            **signed_headers(token, method, path, nonce, data),
            "Content-Type": "application/json",
        },
    )
    timeout = None if path == "/run" else 2
    try:
        # The URL is always http://127.0.0.1:<port>, never a caller's scheme.
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status, proof, answer = (
                response.status,
                response.headers.get(PROOF_HEADER),
                response.read(),
            )
    except urllib.error.HTTPError as exc:
        status, proof, answer = exc.code, exc.headers.get(PROOF_HEADER), exc.read()
    if not proof or not hmac.compare_digest(proof, answer_mac(token, nonce, status, answer)):
        raise _impostor(
            state["port"], f"HTTP {status} without a valid {PROOF_HEADER}", Path(state["file"])
        )
    if status != 200:
        said = answer.decode("utf-8", "replace")
        raise ServerError(f"the local engine (onceflow up) answered HTTP {status}: {said}")
    return json.loads(answer)


def running(project: Path | None = None) -> dict[str, Any] | None:
    """The project's running server's description, or None (no state file, or nobody listens).

    Raises ServerError when something listens on the recorded port but cannot
    prove it knows the token: a stale file whose port another program took.
    """
    path = state_file(project)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        port, token = int(state["port"]), str(state["token"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # a half-written or foreign file: treat as no server
    if not 0 < port < 65536 or not token:
        return None
    try:
        health = _request({"port": port, "token": token, "file": str(path)}, "GET", "/health")
    except ConnectionRefusedError:
        return None  # stale: the server that wrote it is gone and nobody took its port
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None
        raise _impostor(port, f"{exc.reason}", path) from exc
    except (OSError, ValueError) as exc:
        raise _impostor(port, f"{type(exc).__name__}: {exc}", path) from exc
    if not isinstance(health, dict):
        raise _impostor(port, "its answer is not a description", path)
    return {**health, "port": port, "token": token, "file": str(path)}


def forward(state: dict[str, Any], argv: list[str]) -> int:
    """Run the command on the server; print what it printed; return its exit code."""
    try:
        answer = _request(state, "POST", "/run", {"argv": argv, "cwd": os.getcwd()})
    except ServerError as exc:
        print(f"onceflow: {exc}", file=sys.stderr)
        return 2
    except (OSError, urllib.error.URLError, ValueError) as exc:
        print(
            f"onceflow: the local engine (onceflow up, port {state['port']}) did not answer "
            f"the command: {exc}",
            file=sys.stderr,
        )
        return 2
    # Progress and notes (stderr) came first there; the result (stdout) last.
    sys.stderr.write(answer["stderr"])
    sys.stderr.flush()
    sys.stdout.write(answer["stdout"])
    return int(answer["code"])


def serve(
    template: Path,
    parameters: dict[str, str],
    port: int,
    time_scale: float,
    ready: Callable[[EngineServer], None] | None = None,
) -> int:
    """`onceflow up`: start the engine and serve until interrupted."""
    try:
        existing = running(project_directory(template))
    except ServerError as exc:
        # Not a onceflow server: this one publishes a new address over the stale file.
        print(f"onceflow up: {exc}", file=sys.stderr)
        existing = None
    if existing is not None:
        print(
            f"onceflow up: a local engine is already up (pid {existing['pid']}, "
            f"port {existing['port']})",
            file=sys.stderr,
        )
        return 2
    with LocalEngine(
        template, parameters, time_scale=time_scale, function_log=io.StringIO()
    ) as engine:
        console = sys.stderr  # not the command's stderr, captured while one runs
        server = EngineServer(
            engine,
            parameters,
            port,
            log=lambda text: print(text, file=console),
            template=template,
        )
        path = server.publish()
        print(
            f"onceflow: local engine up on http://{HOST}:{server.port} (pid {os.getpid()}); "
            f"address in {path}. Commands use it until you stop it (Ctrl-C).",
            file=sys.stderr,
            flush=True,
        )
        if ready is not None:
            ready(server)

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        # Ctrl-C, and `kill` (SIGTERM), stop it cleanly; a shell that started it
        # in the background may have left SIGINT ignored.
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            print("onceflow: stopping the local engine", file=sys.stderr)
        finally:
            server.unpublish()
            server.server_close()
    return 0
