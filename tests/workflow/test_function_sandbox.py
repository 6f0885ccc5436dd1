"""Your function imports from its own package only, as in its own sandbox on Lambda.

onceflow's functions (service/...) are in onceflow's package, not in yours: on Lambda
your function's Python finds /var/task (its CodeUri, built), /opt/python (its Layers)
and the runtime's libraries ("Layer paths for each Lambda runtime",
packaging-layers.html), so an import of onceflow's `service` fails there with
Runtime.ImportModuleError (awslambdaric's bootstrap.py, _get_handler). A local run must
not pass where the deployed function fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from onceflow.cli import main


def test_your_function_importing_onceflows_own_modules_fails_to_load_as_on_lambda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an app `onceflow init` made, whose function reuses onceflow's error class (it
    # is in the nested onceflow's CodeUri, which the engine loads in the same Python)
    app = tmp_path / "my-app"
    assert main(["init", str(app)]) == 0
    handler = app / "src" / "word_count.py"
    handler.write_text(
        handler.read_text().replace("import os\n", "import os\nimport service.errors\n")
    )
    (tmp_path / "event.json").write_text("{}")
    # (this test process has onceflow's functions/ on its path, pyproject's pythonpath; the
    # CLI's has not)
    functions = str(Path(__file__).resolve().parents[2] / "functions")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if str(Path(p).resolve()) != functions])
    capsys.readouterr()
    # WHEN the user invokes it (as sam local invoke -e does)
    monkeypatch.chdir(app)
    code = main(["invoke", "WordCountFunction", "-e", str(tmp_path / "event.json"), "--no-server"])
    out, err = capsys.readouterr()
    payload = json.loads(out)
    # THEN it fails to load as it does in its own sandbox on Lambda
    assert code == 1
    assert payload["errorType"] == "Runtime.ImportModuleError"
    assert payload["errorMessage"] == (
        "Unable to import module 'word_count': No module named 'service'"
    )
    # AND the line says whose package holds it, not to pip install a library of that name
    assert "pip install service" not in err
    assert "'service' is in another function's package (onceflow-" in err


@pytest.mark.parametrize(
    "left_out", ["      Runtime: python3.11\n", "      Handler: word_count.handler\n"]
)
def test_a_function_without_its_runtime_or_handler_is_refused_as_lambda_refuses_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    left_out: str,
) -> None:
    # GIVEN an app whose Zip function leaves out its Runtime (or Handler), with no Globals
    # to give one
    app = tmp_path / "my-app"
    assert main(["init", str(app)]) == 0
    template = app / "template.yaml"
    assert left_out in template.read_text()
    template.write_text(template.read_text().replace(left_out, ""))
    (tmp_path / "event.json").write_text("{}")
    capsys.readouterr()
    # WHEN the user invokes it
    monkeypatch.chdir(app)
    code = main(["invoke", "WordCountFunction", "-e", str(tmp_path / "event.json"), "--no-server"])
    # THEN it is refused before anything runs, as CreateFunction refuses it on a deploy
    # (InvalidParameterValueException, "Runtime and Handler are mandatory parameters for
    # functions created with deployment packages.": pipe-cd/pipecd#1400), not run as a
    # Python the engine picked
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert "Runtime and Handler are mandatory parameters" in line


@pytest.mark.parametrize(
    ("setting", "refusal"),
    [
        (
            "      Timeout: 901\n",
            "Value '901' at 'timeout' failed to satisfy constraint: Member must have value "
            "less than or equal to 900",
        ),
        (
            "      Timeout: 30\n      MemorySize: 64\n",
            "Value '64' at 'memorySize' failed to satisfy constraint: Member must have value "
            "greater than or equal to 128",
        ),
    ],
)
def test_a_timeout_or_memory_lambda_refuses_is_refused_as_lambda_refuses_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setting: str,
    refusal: str,
) -> None:
    # GIVEN an app whose function asks for more than 900 s (or less than 128 MB)
    app = tmp_path / "my-app"
    assert main(["init", str(app)]) == 0
    template = app / "template.yaml"
    template.write_text(template.read_text().replace("      Timeout: 30\n", setting))
    (tmp_path / "event.json").write_text("{}")
    capsys.readouterr()
    # WHEN the user invokes it
    monkeypatch.chdir(app)
    code = main(["invoke", "WordCountFunction", "-e", str(tmp_path / "event.json"), "--no-server"])
    # THEN it is refused before anything runs, as CreateFunction refuses it on a deploy
    # (ValidationException: "1 validation error detected: Value '3000' at 'timeout' failed
    # to satisfy constraint: Member must have value less than or equal to 900",
    # covidatlas/li#575; Timeout 1-900 s, MemorySize 128-10,240 MB: CreateFunction API
    # reference), not run with it
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert f"ValidationException: 1 validation error detected: {refusal}" in line


def test_variables_over_lambdas_4_kb_are_refused_as_lambda_refuses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an app whose function's variables take more than 4 KB
    app = tmp_path / "my-app"
    assert main(["init", str(app)]) == 0
    template = app / "template.yaml"
    own = "          COUNTS_TABLE: !Ref CountsTable\n"
    template.write_text(template.read_text().replace(own, own + f"          BIG: {'x' * 4096}\n"))
    (tmp_path / "event.json").write_text("{}")
    capsys.readouterr()
    # WHEN the user invokes it
    monkeypatch.chdir(app)
    code = main(["invoke", "WordCountFunction", "-e", str(tmp_path / "event.json"), "--no-server"])
    # THEN it is refused as CreateFunction refuses it (InvalidParameterValueException, "Lambda
    # was unable to configure your environment variables because the environment variables
    # you have provided exceeded the 4KB limit. String measured: {...}": the variables as
    # compact JSON, github-aws-runners/terraform-aws-github-runner#3594; the quota: 4 KB,
    # not adjustable, Lambda quotas page), not run
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert "exceeded the 4KB limit. String measured: {" in line
