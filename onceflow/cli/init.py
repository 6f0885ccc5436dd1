"""`onceflow init DIR`: write a SAM app that nests onceflow, in the spirit of `sam init`.

The app is examples/word-count (a bucket, a table and a function of its own, the
function following docs/processor.md's contract) with onceflow's own app copied
into DIR/onceflow/ and nested from there, so that DIR stands alone: `sam build &&
sam deploy` deploys both, and `onceflow up` / `execute` / `show` run them locally.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
from pathlib import Path

from onceflow.project import bundled_app, starter_app

# onceflow's app as the nested application needs it (statemachines/src are the sources
# of the ASL files, not read by sam or the engine), and its docs (the processor contract
# the README and the function name: docs/processor.md).
APP = ("template.yaml", "statemachines", "functions", "events", "docs")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "src", ".aws-sam", ".onceflow")
# The example's README speaks of this repository; the app gets one of its own.
SKIPPED_STARTER = shutil.ignore_patterns(
    "__pycache__", "*.pyc", ".aws-sam", ".onceflow", "README.md"
)
# Where the example nests onceflow from, and where the written app does.
EXAMPLE_LOCATION = "Location: ../../template.yaml"
NESTED = "onceflow"
# The example's stack name (samconfig.toml's stack_name and s3_prefix): the app gets its own.
EXAMPLE_STACK = "word-count"

README = """\
# {name}: your processor, run once per upload by a nested onceflow

Written by `onceflow init`. `template.yaml` holds your bucket (`UploadsBucket`), your
table (`CountsTable`) and your function (`WordCountFunction`, `src/word_count.py`,
which counts the lines and words of each `.txt` upload); onceflow, in `{nested}/`, is
nested in front of them (`ProcessorFunctionArn`, `ExistingBucketName`, `KeySuffix`).
Replace the function and the table with yours; keep the processor contract
(the work item in, a small JSON result out, `PermanentError` for input no retry fixes:
[{nested}/docs/processor.md]({nested}/docs/processor.md)). A `Handler` the engine
cannot load fails each invocation as on Lambda (`Runtime.ImportModuleError` ...), and
every command says so in one line. Libraries your function imports go in
`src/requirements.txt` (`sam build` packages them) and, for the local engine, which runs
the function in onceflow's Python, into that Python too (`pip install -r src/requirements.txt`).
What the local engine does with a nested package, a Layer, Globals, your variables and
the function's Runtime: "Your function on the local engine" in
[{nested}/docs/processor.md]({nested}/docs/processor.md).
`sam deploy` deploys the app as the stack `{stack}` (`samconfig.toml`).

Locally, no AWS account:

```bash
onceflow up                                  # in a second terminal, until Ctrl-C
printf 'one two\\nthree\\n' > /tmp/notes.txt
onceflow execute ProcessorStateMachine --upload /tmp/notes.txt --key notes/notes.txt
onceflow executions
onceflow show NAME                           # NAME: the one execute printed
onceflow doctor
```

On AWS:

```bash
sam build                                    # your function, and onceflow's
sam deploy --guided                          # CAPABILITY_IAM CAPABILITY_AUTO_EXPAND
```

`sam build` needs `make` and a `python3` with pip for onceflow's functions (their
`Makefile` fetches the wheels of their Lambda runtime), and Python 3.11 for yours
(or `--use-container`).
"""


def stack_name(directory: str) -> str:
    """The app's stack name, from its directory's: CloudFormation takes letters, digits
    and hyphens, a letter first, at most 128 characters (CreateStack, StackName)."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", directory).strip("-")
    if not name[:1].isalpha():
        name = f"app-{name}".rstrip("-")
    return name[:128].rstrip("-")


def onceflow_command() -> str:
    """How to run this onceflow from the app's directory: `onceflow` when the shell's PATH
    finds this one (an activated venv), else the path it was run by, absolute (the
    README's `~/onceflow/bin/onceflow init my-app`, `.venv/bin/onceflow`)."""
    ran = Path(sys.argv[0])
    if ran.name != "onceflow" or not ran.is_file():  # `python -m onceflow.cli`, a test
        return "onceflow"
    found = shutil.which("onceflow")
    if found is not None and Path(found).resolve() == ran.resolve():
        return "onceflow"
    return shlex.quote(str(ran.resolve()))


def cmd_init(args: argparse.Namespace, session: object) -> int:
    target = Path(args.directory)
    if target.exists() and not target.is_dir():
        raise SystemExit(f"onceflow init: {target} is a file; name a new directory")
    if target.is_dir() and any(target.iterdir()):
        raise SystemExit(f"onceflow init: {target} exists and is not empty; name a new directory")
    starter, app = starter_app(), bundled_app()
    text = (starter / "template.yaml").read_text(encoding="utf-8")
    if EXAMPLE_LOCATION not in text:  # checked before anything is written
        raise SystemExit(
            f"onceflow init: {starter / 'template.yaml'} no longer has {EXAMPLE_LOCATION}"
        )
    shutil.copytree(starter, target, ignore=SKIPPED_STARTER, dirs_exist_ok=True)
    for name in APP:
        source, destination = app / name, target / NESTED / name
        if source.is_dir():
            shutil.copytree(source, destination, ignore=SKIPPED)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    (target / "template.yaml").write_text(
        text.replace(EXAMPLE_LOCATION, f"Location: {NESTED}/template.yaml").replace(
            "nested from this repository's template", "nested from ./onceflow"
        ),
        encoding="utf-8",
    )
    config = target / "samconfig.toml"
    stack = stack_name(target.resolve().name)
    config.write_text(
        config.read_text(encoding="utf-8")
        .replace(f'"{EXAMPLE_STACK}"', f'"{stack}"')
        .replace("of the example.", "of this app."),
        encoding="utf-8",
    )
    (target / "README.md").write_text(
        README.format(name=target.resolve().name, nested=NESTED, stack=stack), encoding="utf-8"
    )
    print(f"onceflow init: wrote a SAM app in {target} (onceflow nested from {target / NESTED})")
    where = shlex.quote(str(target))  # a command the shell takes as printed
    up = f"{onceflow_command()} up"
    print(f"  cd {where} && {up}        # local; or sam build && sam deploy --guided")
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    init = commands.add_parser(
        "init",
        help="write a SAM app that nests onceflow in front of a bucket and a function of "
        "your own (like sam init)",
    )
    init.add_argument("directory", help="a new (or empty) directory")
    init.set_defaults(func=cmd_init)
