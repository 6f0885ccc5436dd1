"""The project a command serves, and what onceflow keeps in it.

The project is the directory of its template.yaml, found upward from where a
command runs (like `sam`, and like git finds its repository). Its .onceflow/
keeps what commands leave for later ones: execution records and pages, the
address of `onceflow up`. Those files hold message bodies or a token: each is
created 0600, and each directory created for one 0700, whatever the umask.

Every package may use this module; it uses nothing of onceflow.
"""

from __future__ import annotations

import datetime
import os
import secrets
import threading
from pathlib import Path

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


class TemplateNotFound(Exception):
    """No template.yaml in the directory a command ran in, nor in any directory above it."""


# The names `sam` looks for in the current directory, in its order ("it looks for a
# template.[yaml|yml] file in your current working directory by default",
# serverless-sam-cli-using-validate.html; aws-sam-cli's get_or_default_template_file_name
# in samcli/commands/_utils/options.py tries template.yaml, template.yml, template.json).
TEMPLATE_NAMES = ("template.yaml", "template.yml", "template.json")


def find_template(start: Path | None = None) -> Path:
    """The template a command uses when it is given none: the nearest one upward.

    `sam` reads template.[yaml|yml|json] from the current directory only; onceflow
    also walks up (as git finds its repository), so a command typed in events/ or
    functions/ uses the project's template. The first directory that holds one wins.
    """
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        for name in TEMPLATE_NAMES:
            candidate = directory / name
            if candidate.is_file():
                return candidate
    raise TemplateNotFound(
        f"no {' / '.join(TEMPLATE_NAMES)} in {here} or any directory above it: run onceflow "
        "inside the project (the directory of its template.yaml, or below it), or name the "
        "template with --template"
    )


def bundled_app() -> Path:
    """onceflow's own SAM app (template.yaml, statemachines/, functions/, events/, docs/): the copy
    an installed wheel carries in onceflow/app/ (setup.py), else this checkout's."""
    package = Path(__file__).resolve().parent
    packaged = package / "app"
    return packaged if (packaged / "template.yaml").is_file() else package.parent


def docs_directory() -> Path:
    """Where the docs/NAME.md that messages and help name are: the bundled app's docs/ (the
    wheel carries them in app/docs, setup.py), else this checkout's."""
    return bundled_app() / "docs"


def starter_app() -> Path:
    """The app `onceflow init` writes: examples/word-count (the wheel's copy: app/starter)."""
    app = bundled_app()
    packaged = app / "starter"
    return packaged if packaged.is_dir() else app / "examples" / "word-count"


def template_or_bundled(start: Path | None = None) -> Path:
    """The nearest template upward, else the bundled app's (outside any project)."""
    try:
        return find_template(start)
    except TemplateNotFound:
        return bundled_app() / "template.yaml"


def default_project() -> Path:
    """The project a command serves by default: the one it runs in (the nearest template's
    directory upward), else onceflow's own app (bundled_app)."""
    try:
        return project_directory()
    except TemplateNotFound:
        return bundled_app()


def user_state_directory() -> Path:
    """Where onceflow keeps its state outside any project: $XDG_STATE_HOME/onceflow
    (default ~/.local/state/onceflow, the XDG Base Directory specification's place for
    state that persists between runs), never inside the installed package."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "onceflow"


def state_directory(project: Path | None = None) -> Path:
    """What commands keep for later ones (records, pages, the `onceflow up` address): the
    project's .onceflow/, or the user's state directory when the project is the bundled
    app of an installed package (site-packages is no place for a user's records)."""
    if project is None:
        try:
            project = project_directory()
        except TemplateNotFound:
            return user_state_directory()
    installed = Path(__file__).resolve().parent / "app"
    if project.resolve() == installed:
        return user_state_directory()
    return project / ".onceflow"


def project_directory(template: Path | None = None) -> Path:
    """The directory of the project: the template's (the nearest one upward when not given).

    Its .onceflow/ holds what the commands keep between runs (execution records,
    pages, the address of `onceflow up`). CodeUri and DefinitionUri are read
    relative to it: "the relative path is relative to your template's location"
    (AWS CloudFormation User Guide, using-cfn-cli-package.html).
    """
    return (template if template is not None else find_template()).resolve().parent


def stack_label(kind: str) -> str:
    """A name for one local stack, unique on this machine: `up-...` for the one `onceflow up`
    keeps, `own-...` for the fresh one a command runs alone; its start time, then a nonce
    (two commands may start in one second)."""
    started = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{kind}-{started}-{secrets.token_hex(2)}"


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
