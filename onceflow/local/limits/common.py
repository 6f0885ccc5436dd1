"""Sizes the limits of several services count in: UTF-8 text and binary values."""

from __future__ import annotations

import base64
import binascii
from typing import Any


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
