"""The bundled processor's logic and settings, without AWS."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from service.errors import ConfigurationError, PermanentError
from service.logic.images import downscale_to_webp, output_key
from service.settings import ProcessorSettings
from tests.helpers import png_bytes


def test_downscale_fits_the_longest_side_and_encodes_webp() -> None:
    rendition = downscale_to_webp(png_bytes(400, 100), max_dimension=200)
    assert (rendition.width, rendition.height) == (200, 50)
    with Image.open(io.BytesIO(rendition.body)) as image:
        assert image.format == "WEBP"


def test_small_images_are_not_enlarged() -> None:
    rendition = downscale_to_webp(png_bytes(40, 30), max_dimension=200)
    assert (rendition.width, rendition.height) == (40, 30)


@pytest.mark.parametrize("data", [b"", b"plain text", png_bytes()[:40]])
def test_unreadable_input_is_a_permanent_error(data: bytes) -> None:
    with pytest.raises(PermanentError, match="not a readable image"):
        downscale_to_webp(data, max_dimension=200)


def test_output_key_is_deterministic_and_bounded() -> None:
    long_key = "s3://b/" + "x" * 1024 + "#v1"
    assert output_key("processed/", long_key) == output_key("processed/", long_key)
    assert output_key("processed/", long_key) != output_key("processed/", long_key + "2")
    assert len(output_key("processed/", long_key)) < 100


def test_settings_parse_the_environment() -> None:
    settings = ProcessorSettings.from_env(
        {"OUTPUT_BUCKET": "out", "OUTPUT_MAX_DIMENSION": "512", "OUTPUT_PREFIX": "p/"}
    )
    assert settings == ProcessorSettings("out", "p/", 512)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OUTPUT_MAX_DIMENSION": "512"}, "OUTPUT_BUCKET is required"),
        ({"OUTPUT_BUCKET": "out", "OUTPUT_MAX_DIMENSION": "big"}, "must be an integer"),
        ({"OUTPUT_BUCKET": "out", "OUTPUT_MAX_DIMENSION": "4"}, "at least 16"),
    ],
)
def test_bad_settings_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ProcessorSettings.from_env(env)
