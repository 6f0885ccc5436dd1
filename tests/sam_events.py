"""The events SAM users already have: what `sam local generate-event` prints.

Made by the aws-sam-cli pinned in requirements/dev.txt, not copied into events/,
so a SAM release that changes a shape shows up here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SAM = Path(sys.executable).parent / "sam"


def generate(service: str, event: str, *options: str) -> Any:
    """`sam local generate-event SERVICE EVENT OPTIONS...`, parsed."""
    done = subprocess.run(
        [str(SAM), "local", "generate-event", service, event, *options],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
        check=True,
    )
    return json.loads(done.stdout)


def write(path: Path, service: str, event: str, *options: str) -> Path:
    """The generated event as a file, for `onceflow ... -e`."""
    path.write_text(json.dumps(generate(service, event, *options), indent=2), encoding="utf-8")
    return path
