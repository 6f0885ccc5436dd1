"""`onceflow diagrams`: the mermaid diagrams of docs/design.md, generated from the ASL files."""

from __future__ import annotations

import argparse
import sys

from onceflow.asl import diagram
from onceflow.cli.session import Session


def cmd_diagrams(args: argparse.Namespace, session: Session) -> int:
    try:
        return _diagrams(args)
    except ValueError as exc:  # a document without the generated blocks, or a bad ASL
        print(f"onceflow diagrams: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:  # run outside a checkout: no docs/design.md, no ASL files
        print(
            f"onceflow diagrams: no {exc.filename}: it keeps the docs/design.md of a checkout "
            "of onceflow in step with its statemachines/; run it in one",
            file=sys.stderr,
        )
        return 2


def _diagrams(args: argparse.Namespace) -> int:
    if args.check:
        stale = diagram.stale()
        for name in stale:
            print(
                f"docs/design.md: the {name} diagram differs from its ASL; "
                "run onceflow diagrams --write"
            )
        if not stale:
            names = ", ".join(diagram.MACHINES)
            print(f"docs/design.md: the diagrams ({names}) match their ASL files")
        return 1 if stale else 0
    if args.write:
        text = diagram.README.read_text(encoding="utf-8")
        fresh = diagram.render_readme(text)
        if fresh != text:
            diagram.README.write_text(fresh, encoding="utf-8")
        print("docs/design.md: diagrams " + ("rewritten" if fresh != text else "already current"))
        return 0
    for name, path in diagram.MACHINES.items():
        print(f"%% {name}: {path.relative_to(diagram.ROOT)}")
        print(diagram.mermaid(diagram.load_asl(path)))
    return 0
