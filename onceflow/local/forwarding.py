"""Commands sent to a running `onceflow up` (server.py): its address file, the signed protocol
(docs/local-engine.md, "One engine for many commands": the token never travels, a fresh nonce
and HMACs both ways), the client. This side imports no engine (and no moto): every command
checks here first.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import urllib.error
import urllib.request
from http.client import HTTPException
from pathlib import Path
from typing import Any

from onceflow.project import state_directory

# Commands that use the server when it is up (and no --stack-name is given).
FORWARDED = frozenset(
    {"demo", "execute", "invoke", "audit", "redrive", "inspect", "executions", "show", "doctor"}
)
HOST = "127.0.0.1"
NONCE_HEADER = "X-Onceflow-Nonce"
AUTH_HEADER = "X-Onceflow-Auth"
PROOF_HEADER = "X-Onceflow-Proof"


class ServerError(Exception):
    """A listener on the recorded port that could not prove it is `onceflow up`."""


def _mac(token: str, *parts: str | bytes) -> str:
    """HMAC-SHA256 under the token; the first part says what is signed (request or answer)."""
    data = b"\n".join(p if isinstance(p, bytes) else p.encode() for p in parts)
    return hmac.new(token.encode(), data, hashlib.sha256).hexdigest()


def request_mac(token: str, method: str, path: str, nonce: str, body: bytes) -> str:
    return _mac(token, "request", method, path, nonce, body)


def answer_mac(token: str, nonce: str, status: int, body: bytes) -> str:
    return _mac(token, "answer", nonce, str(status), body)


def matches(given: str, mac: str) -> bool:
    """A received MAC is the expected one. Compared as bytes: a header may hold non-ASCII
    characters (HTTP carries ISO-8859-1), on which compare_digest raises TypeError."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), mac.encode())


def signed_headers(token: str, method: str, path: str, nonce: str, body: bytes) -> dict[str, str]:
    """The headers that authenticate one request (the token itself is not among them)."""
    return {NONCE_HEADER: nonce, AUTH_HEADER: request_mac(token, method, path, nonce, body)}


def state_file(project: Path | None = None) -> Path:
    """The project's .onceflow/server.json (the project: the given directory, else the
    nearest template's upward); ONCEFLOW_STATE_DIR moves it (tests use a temporary one)."""
    configured = os.environ.get("ONCEFLOW_STATE_DIR")
    return (Path(configured) if configured else state_directory(project)) / "server.json"


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
    token, nonce = str(state["token"]), secrets.token_hex(16)
    request = urllib.request.Request(
        f"http://{HOST}:{int(state['port'])}{path}",
        data=data if body is not None else None,
        method=method,
        headers={
            **signed_headers(token, method, path, nonce, data),
            "Content-Type": "application/json",
        },
    )
    try:
        # Always http://127.0.0.1:<port>, never a caller's scheme.
        with urllib.request.urlopen(request, timeout=None if path == "/run" else 2) as response:  # noqa: S310
            status, headers, answer = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, headers, answer = exc.code, exc.headers, exc.read()
    if not matches(headers.get(PROOF_HEADER, ""), answer_mac(token, nonce, status, answer)):
        why = f"HTTP {status} without a valid {PROOF_HEADER}"
        raise _impostor(state["port"], why, Path(state["file"]))
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
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None  # no file, or a half-written or foreign one: no server
    if not 0 < port < 65536 or not token:
        return None
    try:
        health = _request({"port": port, "token": token, "file": str(path)}, "GET", "/health")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None  # stale: its server is gone and nobody took its port
        raise _impostor(port, f"{exc.reason}", path) from exc
    except (OSError, ValueError, HTTPException) as exc:  # another protocol: BadStatusLine
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
    except (OSError, ValueError, HTTPException) as exc:  # URLError is an OSError
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
