"""`pip install` of the built wheel gives a working `onceflow`, as a user gets it.

SLOW (about a minute): builds the package as a user does, `python -m build` (the sdist,
then the wheel from the sdist) in a copy of the project as a clone has it (no
node_modules: jsonata is fetched by the build from its lock file), makes fresh virtual
environments and installs the wheel into them with its dependencies resolved by pip,
then runs the installed command from a directory unrelated to any project. The [local]
install is the README's own: its commands, run as written in another copy of the clone
by a python3 of no venv (its pip builds the wheel and installs it). No network:
pip reads only the wheels `make setup` downloaded into .venv/wheels (the pins of
requirements/dev.txt, and setuptools to build with), with no index, and npm only the
cache `make setup`'s `npm ci` filled (offline); nothing of this venv reaches the new ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".venv" / "wheels"
README = ROOT / "README.md"
# What a clone holds that a wheel is not built from, or that another run left.
# node_modules too: a clone has only jsonata's package-lock.json (make setup installs it).
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", ".onceflow", ".aws-sam", "__pycache__", "*.egg-info", "build", "dist",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", "bench", "node_modules",
)  # fmt: skip
# What the installed package must carry to run outside any checkout (besides its modules).
CARRIED = (
    "onceflow/app/template.yaml",
    "onceflow/app/statemachines/processor.asl.json",
    "onceflow/app/statemachines/batch.asl.json",
    "onceflow/app/statemachines/audit.asl.json",
    "onceflow/app/functions/service/handlers/__init__.py",
    "onceflow/app/events/s3-object-created.json",
    "onceflow/app/starter/template.yaml",
    "onceflow/app/starter/src/word_count.py",
    "onceflow/local/jsonata_js/worker.js",
    "onceflow/local/jsonata_js/node_modules/jsonata/jsonata.js",
    "onceflow/local/jsonata_js/node_modules/jsonata/package.json",
    "onceflow/view/static/viewer.js",
)

pytestmark = pytest.mark.slow


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _pins(lines: list[str]) -> dict[str, str]:
    """name -> version of `name[extras]==version` lines (names normalised as pip does)."""
    pins = {}
    for line in lines:
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^]]*\])?==(\S+)$", line.strip())
        if match:
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(3)
    return pins


def test_the_declared_dependencies_are_pinned_as_requirements_dev_txt_pins_them() -> None:
    # GIVEN the dependencies pyproject.toml declares, the core's and the [local] extra's
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["local"]]
    # WHEN they are read beside the development lock
    pins = _pins(declared)
    locked = _pins((ROOT / "requirements" / "dev.txt").read_text(encoding="utf-8").splitlines())
    # THEN each is pinned, at the version the tests run with
    assert len(pins) == len(declared)
    assert {name: locked.get(name) for name in pins} == pins
    # AND the core stays light: boto3 and the template reader, nothing of the engine
    assert sorted(_pins(project["dependencies"])) == ["boto3", "pyyaml"]
    # AND what the engine's patches were made against (moto and botocore) is pinned for the
    # [local] user too, not left to float within boto3's range: pip gives them the code
    # the tests ran, and the engine, which reads these pins from the installed metadata,
    # can say when the code under it is not that (onceflow/local/patches, other_versions)
    assert {"moto", "botocore"} <= set(_pins(project["optional-dependencies"]["local"]))


def _offline(env: dict[str, str]) -> dict[str, str]:
    """`env` with pip and npm reading only what `make setup` fetched: pip the wheels of
    WHEELS, no index; npm the cache its `npm ci` filled (read before HOME changes)."""
    npm_cache = os.environ.get("NPM_CONFIG_CACHE") or str(Path.home() / ".npm")
    return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELS),
            "NPM_CONFIG_CACHE": npm_cache, "NPM_CONFIG_OFFLINE": "true"}  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the wheel, a work directory, the environment of a user outside any project)."""
    if not (WHEELS.is_dir() and any(WHEELS.glob("*.whl"))):
        pytest.fail(f"no wheels in {WHEELS}: run `make setup`, which downloads them")
    work = tmp_path_factory.mktemp("packaging")
    project = work / "project"
    shutil.copytree(ROOT, project, ignore=NOT_COPIED)
    home = work / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ONCEFLOW_", "PYTHON", "PIP_", "VIRTUAL_ENV", "XDG_"))
    }
    building = _offline(env)
    env["HOME"] = str(home)  # records, pages and pip's settings are this user's
    env["PIP_CONFIG_FILE"] = os.devnull  # only the wheels named below: no index, no cache
    building.update(HOME=env["HOME"], PIP_CONFIG_FILE=os.devnull)
    # `python -m build`, as the user types it; its build environment is installed by pip,
    # which reads the wheels of WHEELS from the environment, no index.
    done = _run([sys.executable, "-m", "build", "--outdir", "dist", "."], project, building)
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = (project / "dist").glob("onceflow-*.whl")
    [sdist] = (project / "dist").glob("onceflow-*.tar.gz")
    assert sdist.name.startswith("onceflow-0")
    return wheel, work, env


def test_the_wheel_built_from_a_clone_carries_the_app_jsonata_and_the_viewer(
    built: tuple[Path, Path, dict[str, str]],
) -> None:
    # GIVEN the wheel `python -m build` made from the sdist of a clone (no node_modules)
    wheel, _, _ = built
    # WHEN its files are listed
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    # THEN it carries the SAM app, the starter app, jsonata 2.0.6 and the viewer's files
    assert [name for name in CARRIED if name not in names] == []
    jsonata = json.loads(
        zipfile.ZipFile(wheel).read("onceflow/local/jsonata_js/node_modules/jsonata/package.json")
    )
    assert jsonata["version"] == "2.0.6"
    # AND every page of docs/ that onceflow's messages and help name (docs/NAME.md)
    named = {
        match
        for source in (ROOT / "onceflow").rglob("*.py")
        for match in re.findall(r"docs/[a-z-]+\.md", source.read_text(encoding="utf-8"))
    }
    assert "docs/doctor.md" in named
    assert sorted(n for n in named if f"onceflow/app/{n}" not in names) == []
    # AND nothing a build or a run leaves behind
    assert not [n for n in names if "__pycache__" in n or "/.aws-sam/" in n or "/.onceflow/" in n]


def _install(built: tuple[Path, Path, dict[str, str]], name: str, extra: str) -> Path:
    """A fresh venv with the wheel installed by pip, dependencies resolved from WHEELS."""
    wheel, work, env = built
    venv = work / name
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    assert made.returncode == 0, made.stderr
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]
    done = _run(
        [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-index",
         "--find-links", str(WHEELS), f"{wheel}{extra}"],
        work,
        env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin" / "onceflow"


def readme_install() -> str:
    """The README's install commands, as a reader copies them: the bash block of the
    paragraph "Or install the package"."""
    text = README.read_text(encoding="utf-8")
    paragraph = text.split("**Or install the package**", 1)[-1].split("\n**", 1)[0]
    block = re.search(r"```bash\n(.*?)```", paragraph, re.S)
    assert block is not None, "the README's 'Or install the package' gives no command to copy"
    return block.group(1)


@pytest.fixture(scope="module")
def local_command(built: tuple[Path, Path, dict[str, str]]) -> Path:
    """`onceflow` installed with the [local] extra by the README's own commands, run as
    written in a fresh copy of the project as a clone has it, by a python3 of no venv.
    Installed once for the tests that run it (each in a directory of its own)."""
    _, work, env = built
    clone = work / "clone"
    shutil.copytree(ROOT, clone, ignore=NOT_COPIED)
    # the reader's python3: the interpreter this venv was made from, not the venv's
    path = work / "path"
    path.mkdir()
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (path / "python3").symlink_to(Path(sys.base_prefix) / "bin" / python)
    reader = {**_offline(env), "PATH": f"{path}{os.pathsep}{env['PATH']}"}
    done = _run(["bash", "-euo", "pipefail", "-c", readme_install()], clone, reader)
    assert done.returncode == 0, readme_install() + done.stdout + done.stderr
    command = Path(env["HOME"]) / "onceflow" / "bin" / "onceflow"
    assert command.is_file(), f"the README's commands installed no {command}"
    return command


def _elsewhere(work: Path, name: str) -> Path:
    """A directory with no template.yaml in it or above it."""
    directory = work / name
    directory.mkdir()
    assert not any((d / "template.yaml").exists() for d in (directory, *directory.parents))
    return directory


def test_the_core_installs_alone_and_runs_the_commands_that_need_no_engine(
    built: tuple[Path, Path, dict[str, str]],
) -> None:
    # GIVEN `pip install onceflow` without the [local] extra
    command = _install(built, "core", "")
    _, work, env = built
    here = _elsewhere(work, "core-user")
    # WHEN the user asks for help, lists local executions, and runs a local-engine command
    helped = _run([str(command), "--help"], here, env)
    listed = _run([str(command), "executions"], here, env)
    engine = _run([str(command), "execute", "ProcessorStateMachine", "-e", "x.json"], here, env)
    # THEN the first two work, and the third says which extra to install, in one line: of
    # the wheel the user installed, into this environment (not a package of that name an
    # index may have)
    wheel, _, _ = built
    assert helped.returncode == 0 and "usage: onceflow" in helped.stdout, helped.stderr
    assert listed.returncode == 0 and "no executions" in listed.stdout, listed.stderr
    assert engine.returncode == 2 and "Traceback" not in engine.stderr
    python = command.parent / "python"
    assert f"{python} -m pip install '{wheel}[local]'" in engine.stderr, engine.stderr


def test_the_local_extra_runs_the_quick_start_from_an_unrelated_directory(
    built: tuple[Path, Path, dict[str, str]], local_command: Path
) -> None:
    # GIVEN `pip install onceflow[local]` and a user in a directory of no project
    command = local_command
    _, work, env = built
    here = _elsewhere(work, "local-user")
    # WHEN they run the quick start: help, the demo, one event, then show it
    helped = _run([str(command), "--help"], here, env)
    demo = _run([str(command), "demo", "--objects", "6", "--corrupt", "1"], here, env)
    # (events/ as the README names it: the package's samples, outside any project)
    sample = "events/s3-object-created.json"
    ran = _run([str(command), "execute", "ProcessorStateMachine", "-e", sample], here, env)
    name = re.search(r"onceflow show (\S+)`", ran.stderr)
    assert name is not None, ran.stdout + ran.stderr
    shown = _run([str(command), "show", name.group(1)], here, env)
    benched = _run([str(command), "bench", "--messages", "1"], here, env)
    # THEN each works on the app the package carries
    assert helped.returncode == 0 and "usage: onceflow" in helped.stdout
    # (and the help says where the docs/NAME.md its messages name are)
    docs = re.search(r"docs/NAME\.md[^/]*?(/\S+/docs)\b", " ".join(helped.stdout.split()))
    assert docs is not None, helped.stdout
    assert (Path(docs.group(1)) / "doctor.md").is_file()
    assert demo.returncode == 0 and "exactly once: OK" in demo.stdout, demo.stdout + demo.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "status: SUCCEEDED" in ran.stdout and "Processed" in ran.stdout
    assert "onceflow's own app runs" in ran.stderr
    assert shown.returncode == 0, shown.stderr
    assert "MarkComplete" in shown.stdout
    # AND what they keep goes to their state directory, not into the installed package
    state = Path(env["HOME"]) / ".local" / "state" / "onceflow"
    assert list((state / "executions").glob("*.json"))
    page = Path(shown.stdout.rsplit("html: ", 1)[1].strip())
    assert page.is_file() and page.is_relative_to(state)
    site = command.parent.parent / "lib"
    assert not list(site.rglob(".onceflow"))
    # AND the benchmark is not in the package: the command says where it runs, in one line
    assert not list(site.rglob("bench/run.py"))
    assert benched.returncode != 0 and "Traceback" not in benched.stderr, benched.stderr
    assert "clone of the repository" in benched.stderr


def test_init_from_the_installed_package_writes_an_app_of_the_users(
    built: tuple[Path, Path, dict[str, str]], local_command: Path
) -> None:
    # GIVEN the installed [local] package
    command = local_command
    _, work, env = built
    here = _elsewhere(work, "init-user")
    (here / "notes.txt").write_text("one two\nthree\n", encoding="utf-8")
    # WHEN the user writes a starter app and runs their own file through it
    written = _run([str(command), "init", "my-app"], here, env)
    ran = _run([str(command), "execute", "ProcessorStateMachine", "--upload", "../notes.txt"],
               here / "my-app", env)  # fmt: skip
    # THEN the app's own function counted the file, on the app's own template
    assert written.returncode == 0, written.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert '"lines": 2' in ran.stdout and '"words": 3' in ran.stdout
    assert "onceflow's own app" not in ran.stderr
    # AND the contract its README and its function name is in the app it wrote
    readme = (here / "my-app" / "README.md").read_text(encoding="utf-8")
    assert "onceflow/docs/processor.md" in readme
    assert (here / "my-app" / "onceflow" / "docs" / "processor.md").is_file()
