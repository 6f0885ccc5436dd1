"""Downscale an image to WebP, and name its output deterministically."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from service.errors import PermanentError

# Refuse decompression bombs: Pillow warns above this and we treat it as poison.
MAX_PIXELS = 64_000_000


@dataclass(frozen=True)
class Rendition:
    """An encoded output image and its size in pixels."""

    body: bytes
    width: int
    height: int


def output_key(prefix: str, idempotency_key: str, suffix: str = ".webp") -> str:
    """One unit of work, one output key: a retry or a takeover writes the same key.

    The idempotency key can be longer than an S3 key may be, so it is hashed.
    """
    digest = hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()
    return f"{prefix}{digest}{suffix}"


def downscale_to_webp(data: bytes, max_dimension: int) -> Rendition:
    """Fit the image within max_dimension x max_dimension and encode it as WebP.

    Raises PermanentError when the bytes are not an image Pillow can read.
    """
    try:
        with Image.open(io.BytesIO(data)) as probe:
            if probe.width * probe.height > MAX_PIXELS:
                raise PermanentError(
                    f"image of {probe.width}x{probe.height} pixels exceeds {MAX_PIXELS}"
                )
            probe.verify()
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            converted = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    except PermanentError:
        raise
    except UnidentifiedImageError as exc:
        # Pillow's message names the stream it read (a BytesIO's repr): not the reader's business.
        raise PermanentError("not a readable image: not in a format Pillow reads") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise PermanentError(f"not a readable image: {exc}") from exc
    converted.thumbnail((max_dimension, max_dimension))
    out = io.BytesIO()
    converted.save(out, format="WEBP", quality=80)
    return Rendition(out.getvalue(), converted.width, converted.height)
