"""Print the table of the engine's patches (docs/local-engine.md), or check a file holds it.

python -m onceflow.local.patches            # the table, as markdown
python -m onceflow.local.patches --check docs/local-engine.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onceflow.local.patches import PATCHES

_KINDS = {"fidelity": "fidelity", "limit": "AWS quota", "iam": "IAM", "hook": "engine hook",
          "meter": "bench meter", "speedup": "speed-up"}  # fmt: skip


def block() -> str:
    """The table between its markers, the kinds in _KINDS' order."""
    rows = [
        "<!-- patches:start (python -m onceflow.local.patches) -->",
        "| Kind | Patch | Why (fidelity: the AWS behaviour it reproduces) | Test |",
        "|---|---|---|---|",
    ]
    for patch in sorted(PATCHES, key=lambda p: list(_KINDS).index(p.kind)):
        why = " ".join(patch.why.split()).replace("|", "\\|")
        rows.append(f"| {_KINDS[patch.kind]} | {patch.name} | {why} | `{patch.test}` |")
    return "\n".join([*rows, "<!-- patches:end -->"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onceflow.local.patches", description=__doc__)
    parser.add_argument("--check", type=Path, help="fail unless this file holds the table")
    args = parser.parse_args(argv)
    if args.check is None:
        print(block())
    elif block() not in args.check.read_text():
        print(f"{args.check}: the patch table differs from the code; paste in the output of "
              "python -m onceflow.local.patches", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
