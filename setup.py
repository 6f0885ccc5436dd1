"""The wheel carries the SAM app itself (template.yaml, statemachines/, functions/, events/)
and the starter app `onceflow init` writes (examples/word-count), under onceflow/app/.

They live at the top of the repository, where `sam build` and `sam deploy` read them;
this step copies them into the package as it is built, so an installed onceflow runs
the same template, ASL and handlers outside any checkout (onceflow/project.py,
bundled_app). Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# What the app is made of, relative to the repository, and what a copy leaves out.
APP = ("template.yaml", "samconfig.toml", "statemachines", "functions", "events")
STARTER = Path("examples") / "word-count"
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "src", ".aws-sam", ".onceflow")


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


setup(cmdclass={"build_py": BuildWithApp})
