"""`pip install .` (not editable) gives a working `onceflow`, run from anywhere in a project.

SLOW (about 15 s): builds the wheel from a copy of the project, installs it into a
new virtual environment and runs the installed command in other directories. No
network: the wheel is built with this venv's setuptools (--no-build-isolation), and
installed without its dependencies, which the new venv reads from this venv's
site-packages (a .pth file written after the install, so pip never sees them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What a clone holds that a wheel is not built from, or that another run left.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", ".onceflow", ".aws-sam", "__pycache__", "*.egg-info", "build", "dist",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", "bench",
)  # fmt: skip

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the installed `onceflow`, a copy of the project, the environment to run it in)."""
    work = tmp_path_factory.mktemp("packaging")
    project = work / "project"
    shutil.copytree(ROOT, project, ignore=NOT_COPIED)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONCEFLOW_", "PYTHON"))}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", "."],
        project,
        env,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (project / "dist").glob("onceflow-*.whl")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    done = _run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
                work, env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                work, env).stdout.strip()  # fmt: skip
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "zz-dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return venv / "bin" / "onceflow", project, env


def test_the_wheel_holds_every_package_and_the_files_read_at_run_time(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    # GIVEN the installed package
    command, project, env = installed
    # WHEN its location and its jsonata worker's files are asked for
    probe = (
        "import json, onceflow, onceflow.local.patches, onceflow.local.jsonata_node as j; "
        "print(json.dumps([onceflow.__file__, str(j.WORKER_SCRIPT), "
        "(j.JS_DIR / 'node_modules' / 'jsonata' / 'package.json').is_file()]))"
    )
    answer = _run([str(command.parent / "python"), "-c", probe], project.parent, env)
    # THEN it is the installed copy, not the checkout, and it carries jsonata itself
    assert answer.returncode == 0, answer.stderr
    where, worker, jsonata = json.loads(answer.stdout)
    assert Path(where).is_relative_to(command.parent.parent) and Path(worker).is_file()
    assert jsonata is True
    # AND every module and every file beside them (scripts, styles) made it into the wheel
    source = project / "onceflow"
    shipped = {
        path.relative_to(source)
        for path in source.rglob("*")
        if path.is_file() and "node_modules" not in path.parts and "__pycache__" not in path.parts
    }
    missing = [str(p) for p in sorted(shipped) if not (Path(where).parent / p).is_file()]
    assert missing == []


def test_the_installed_command_runs_in_a_subdirectory_of_a_project(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    # GIVEN the installed command and a user standing in functions/ of a project
    command, project, env = installed
    here = project / "functions"
    # WHEN they ask for help, and execute a sample event named relative to where they stand
    helped = _run([str(command), "--help"], here, env)
    ran = _run(
        [str(command), "execute", "ProcessorStateMachine", "-e", "../events/work-item.json"],
        here,
        env,
    )
    # THEN both work: the template, the ASL and the handlers are the project's
    assert helped.returncode == 0 and "usage: onceflow" in helped.stdout
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "status: SUCCEEDED" in ran.stdout and "Processed" in ran.stdout
    assert f"local: using {project.resolve() / 'template.yaml'}" in ran.stderr
    # AND what it keeps (the execution record) goes to the project's .onceflow/
    assert list((project / ".onceflow" / "executions").glob("*.json"))


def test_the_installed_command_outside_any_project_says_what_to_do(
    installed: tuple[Path, Path, dict[str, str]],
) -> None:
    # GIVEN a directory with no template.yaml in it or above it, and an event file there
    command, project, env = installed
    outside = project.parent / "elsewhere"
    outside.mkdir()
    shutil.copy(project / "events" / "processor-payload.json", outside / "event.json")
    # WHEN a command that needs the local stack runs there
    ran = _run([str(command), "invoke", "ProcessorFunction", "-e", "event.json"], outside, env)
    # THEN it stops with a message that says where it looked and what to do
    assert ran.returncode == 2
    assert "no template.yaml / template.yml / template.json in" in ran.stderr
    assert "Traceback" not in ran.stderr
