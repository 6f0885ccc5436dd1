"""Environment variables parsed once into validated settings objects."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from service.errors import ConfigurationError


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is required")
    return value


@dataclass(frozen=True)
class ProcessorSettings:
    """Where the bundled image processor writes, and how large."""

    output_bucket: str
    output_prefix: str
    max_dimension: int
    record_prefix: str = "records/"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProcessorSettings:
        raw_dimension = _required(env, "OUTPUT_MAX_DIMENSION")
        try:
            max_dimension = int(raw_dimension)
        except ValueError:
            raise ConfigurationError(
                f"OUTPUT_MAX_DIMENSION must be an integer, not {raw_dimension!r}"
            ) from None
        if max_dimension < 16:
            raise ConfigurationError("OUTPUT_MAX_DIMENSION must be at least 16")
        return cls(
            output_bucket=_required(env, "OUTPUT_BUCKET"),
            output_prefix=env.get("OUTPUT_PREFIX", "processed/"),
            max_dimension=max_dimension,
            record_prefix=env.get("RECORD_PREFIX", "records/"),
        )


@lru_cache(maxsize=1)
def processor_settings() -> ProcessorSettings:
    return ProcessorSettings.from_env(os.environ)
