"""What the limits of several services share: UTF-8 and binary sizes, and a patch
that replaces moto attributes."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from onceflow.local.patches.registry import Installer, Patch, gone

ORIGINAL: dict[Any, Any] = {}  # each replacement: what it replaced, to delegate to


def utf8(text: Any) -> int:
    return len(str(text).encode("utf-8", "surrogatepass"))


def binary_size(value: Any) -> int:
    """Bytes of a binary value: as given, or its base64 text decoded."""
    if isinstance(value, bytes | bytearray):
        return len(value)
    try:
        return len(base64.b64decode(str(value), validate=False))
    except (binascii.Error, ValueError):
        return len(str(value))


def limit(
    name: str, why: str, test: str, *targets: tuple[Any, str, Any], fits: Callable[[], list[str]]
) -> Patch:
    """A limit patch that replaces targets (owner, attribute, replacement), keeping what
    each replaced in ORIGINAL; its fits check names what moto lost, and what fits adds."""

    def install(installer: Installer) -> None:
        for owner, attribute, value in targets:
            ORIGINAL[value] = installer.replace(owner, attribute, value)

    def moved() -> list[str]:
        return [*(p for owner, attribute, _ in targets for p in gone(owner, attribute)), *fits()]

    return Patch(name=name, kind="limit", why=why, test=test, install=install, fits=moved)
