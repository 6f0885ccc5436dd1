"""Headless Chromium driven through the DevTools protocol over a pipe (no port, no
extra package): open a page at a given viewport, evaluate script, click where a person
would, take a screenshot.

Chromium reads protocol messages on its file descriptor 3 and writes them on 4, each a
JSON object ended by a NUL byte (--remote-debugging-pipe). The flags keep it off this
machine's closed network (no background fetches, no component updates).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class ProtocolError(Exception):
    """Chromium answered a command with an error, or did not answer in time."""


class Browser:
    """One Chromium, one page (a tab) in it, at width x height CSS pixels."""

    def __init__(self, executable: str, profile: Path, width: int, height: int) -> None:
        self._to_chromium_read, self._to_chromium = os.pipe()
        self._from_chromium, self._from_chromium_write = os.pipe()
        # Above 4, so that putting one end on 3 or 4 overwrites neither.
        for name in ("_to_chromium_read", "_from_chromium_write"):
            low = getattr(self, name)
            setattr(self, name, fcntl.fcntl(low, fcntl.F_DUPFD, 10))
            os.close(low)
        # bash (dash takes one-digit descriptors only) puts the pipe's ends on 3 and 4,
        # where Chromium looks for them.
        command = (
            f'exec "$0" "$@" 3<&{self._to_chromium_read} 4>&{self._from_chromium_write} '
            f"{self._to_chromium_read}<&- {self._from_chromium_write}>&-"
        )
        self.process = subprocess.Popen(
            [
                "bash",
                "-c",
                command,
                executable,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(self._to_chromium_read, self._from_chromium_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(self._to_chromium_read)
        os.close(self._from_chromium_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.command("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.command("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # ---- the protocol ----

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_chromium], [], [], left)
            if ready:
                chunk = os.read(self._from_chromium, 1 << 20)
                if not chunk:
                    raise ProtocolError(f"Chromium closed the pipe (exit {self.process.poll()})")
                self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def command(
        self, method: str, session: str | None = None, timeout: float = 30, **params: Any
    ) -> dict[str, Any]:
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            request["sessionId"] = session
        os.write(self._to_chromium, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise ProtocolError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        """A command to the page."""
        return self.command(method, self.session, timeout, **params)

    def wait_for(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for n, event in enumerate(self.events):
                if event.get("method") == method:
                    del self.events[n]
                    return event
            self.events.append(self._message(deadline))

    # ---- what a test does with a page ----

    def open(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in answer:
            raise ProtocolError(f"the script threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def click(self, x: float, y: float) -> None:
        """A left click at (x, y) in CSS pixels of the viewport, as a mouse makes it."""
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def problems(self) -> list[str]:
        """Exceptions, console errors and log errors the page produced so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params.get("exceptionDetails", {}).get("text")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(" ".join(str(a.get("value")) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(str(params["entry"].get("text")))
        return found

    def close(self) -> None:
        # Chromium may close the pipe before it answers: the wait below makes sure it ended.
        with contextlib.suppress(ProtocolError, OSError):
            self.command("Browser.close", timeout=10)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)
        os.close(self._to_chromium)
        os.close(self._from_chromium)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
