"""Files the local engine writes that hold message bodies or a token: this user's only.

Execution records and pages carry whole events (message bodies, object keys);
server.json carries the token of `onceflow up`. Each file is created 0600 and
each directory created for one 0700, whatever the umask.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


def private_directory(path: Path) -> Path:
    """Create a directory and its missing parents 0700; an existing one is left as it is."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIRECTORY_MODE)
        except FileExistsError:
            continue  # another process made it meanwhile: its mode is its own
        # mkdir's mode passes through the umask; this one must not.
        os.chmod(directory, DIRECTORY_MODE)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write a file 0600, in whole: written aside, then renamed, so no reader sees half."""
    temporary = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    descriptor = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE
    )
    try:
        # The umask can only remove bits; a file that existed (a crashed writer's) keeps its mode.
        os.fchmod(descriptor, FILE_MODE)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            descriptor = -1
            handle.write(text)
        temporary.replace(path)
    finally:
        if descriptor != -1:
            os.close(descriptor)
        temporary.unlink(missing_ok=True)
    return path
