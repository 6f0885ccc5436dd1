"""Bring your own function, as a new user does: `onceflow init`, then the app's template
and its code made theirs (a nested package, a data file beside the code, a Layer, Globals,
their own Powertools service), then `onceflow execute --upload FILE` on it.

What each test expects is what AWS Lambda's Python runtime does with the same template
after `sam build` (sources cited where each is asserted); where the engine cannot do the
same in its one process, it refuses in one line that says why and what to do.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from onceflow.cli import main
from onceflow.local import server
from onceflow.local.engine import LocalEngine

TEXT = b"the cat and the hat\nsat\n"  # 6 words, 3 of them stop words ("the" twice, "and")
STARTER_HANDLER = "      Handler: word_count.handler\n"
FUNCTION_ENV = "          COUNTS_TABLE: !Ref CountsTable\n"

# The user's function: a nested package (no __init__.py: a namespace package, as Python 3
# and Lambda's runtime import it), a data file beside its code, a library from a Layer,
# /tmp, the context object and its environment, Powertools' Logger with their service.
MAIN = """\
import os
from pathlib import Path

from aws_lambda_powertools import Logger

import wordlib  # from the Layer (/opt/python on Lambda)
from app.lib.words import count

logger = Logger()
STOP = (Path(__file__).parent.parent / "data" / "stopwords.txt").read_text().split()
ROOT_STOP = Path(os.environ["LAMBDA_TASK_ROOT"], "app", "data", "stopwords.txt").read_text()


def handler(event, context):
    scratch = Path("/tmp") / f"{context.aws_request_id}.txt"
    scratch.write_text("scratch")
    remaining = context.get_remaining_time_in_millis()
    return {
        "words": count(event["workItem"], STOP),
        "layer": wordlib.NAME,
        "same_data": ROOT_STOP.split() == STOP,
        "tmp": scratch.read_text(),
        "service": logger.service,
        "level": logger.log_level,
        "env_service": os.environ["POWERTOOLS_SERVICE_NAME"],
        "greeting": os.environ.get("GREETING"),
        "verbose": os.environ.get("VERBOSE"),
        "table": os.environ.get("COUNTS_TABLE"),
        "function_name": context.function_name,
        "env_function_name": os.environ["AWS_LAMBDA_FUNCTION_NAME"],
        "memory": context.memory_limit_in_mb,
        "remaining": remaining,
        "request_id": context.aws_request_id,
        "version": context.function_version,
        "identity": context.identity.cognito_identity_id,
        "client_context": context.client_context,
    }
"""
WORDS = """\
import boto3

s3 = boto3.client("s3")


def count(item, stop):
    body = s3.get_object(Bucket=item["bucket"], Key=item["key"], VersionId=item["versionId"])
    return len([w for w in body["Body"].read().decode().split() if w not in stop])
"""
GLOBALS = """\
Globals:
  Function:
    Timeout: 10
    MemorySize: 256
    Environment:
      Variables:
        GREETING: hello
        VERBOSE: yes
        COUNTS_TABLE: not-this-one
        POWERTOOLS_SERVICE_NAME: word-count

Resources:
"""
LAYER = """\
  WordsLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: layer/
      CompatibleRuntimes: [python3.11]

"""


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An app as `onceflow init` writes it, made the user's: their function, Layer, Globals."""
    where = tmp_path_factory.mktemp("own") / "my-app"
    assert main(["init", str(where)]) == 0
    (where / "src" / "word_count.py").unlink()
    for path, text in {
        "src/app/handlers/main.py": MAIN,
        "src/app/lib/words.py": WORDS,
        "src/app/data/stopwords.txt": "the\nand\n",
        "layer/python/wordlib.py": "NAME = 'from the layer'\n",
    }.items():
        (where / path).parent.mkdir(parents=True, exist_ok=True)
        (where / path).write_text(text, encoding="utf-8")
    _changed(where, STARTER_HANDLER, "      Handler: app/handlers/main.handler\n"
             "      Layers: [!Ref WordsLayer]\n")  # fmt: skip
    _changed(where, "Resources:\n", GLOBALS + LAYER)
    return where


def _changed(app: Path, old: str, new: str) -> None:
    """The app's template with its one text ``old`` (which must be there) made ``new``."""
    template = app / "template.yaml"
    text = template.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    template.write_text(text.replace(old, new), encoding="utf-8")


def _execute(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *flags: str,
    on_up: bool = False,
) -> tuple[int, dict[str, Any], str]:
    """`onceflow execute ProcessorStateMachine --upload notes.txt --json` in the app, as its
    user runs it (on a stack of its own, or on_up the running `onceflow up`'s): (exit
    code, the JSON it printed, stderr)."""
    notes = tmp_path / "notes.txt"
    notes.write_bytes(TEXT)
    monkeypatch.chdir(app)
    own = [] if on_up else ["--no-server"]
    code = main(["execute", "ProcessorStateMachine", "--upload", str(notes), "--json",
                 "--no-record", *own, *flags])  # fmt: skip
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_your_own_function_runs_as_lambda_runs_it(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's app: a handler in a nested package, a data file, a Layer, Globals
    # WHEN they run their own file through it
    code, result, err = _execute(app, tmp_path, monkeypatch, capsys)
    # THEN it was processed, by their code
    assert code == 0, err
    assert result["status"] == "SUCCEEDED", result
    got = result["output"]["result"]
    assert got["words"] == 3 and got["same_data"] is True and got["tmp"] == "scratch"
    # the Layer's python/ is on the import path ("Layer paths for each Lambda runtime",
    # packaging-layers.html: python, python/lib/python3.x/site-packages)
    assert got["layer"] == "from the layer"
    # Globals merged as SAM merges them (samtranslator's Globals: the function's own
    # Timeout and variable win, the rest come from Globals)
    assert got["greeting"] == "hello" and got["table"] not in (None, "not-this-one")
    # a YAML boolean (yes, true) is the text "true", as CloudFormation passes it (its YAML
    # reads yes as true: ASFHyP3/hyp3#2061; a boolean property arrives as "true" or
    # "false": medmunds/aws-cfn-ses-domain#10), not Python's "True"
    assert got["verbose"] == "true"
    assert 10_000 < got["remaining"] <= 30_000  # the function's Timeout: 30, not Globals' 10
    # the context as awslambdaric's LambdaContext gives it: memory_limit_in_mb is the text
    # of AWS_LAMBDA_FUNCTION_MEMORY_SIZE, an identity without ids, no client context
    assert got["memory"] == "256"
    assert got["function_name"] == got["env_function_name"]
    assert "WordCountFunction".lower() in got["function_name"].lower()
    assert got["version"] == "$LATEST" and got["identity"] is None
    assert got["client_context"] is None and len(got["request_id"]) == 36
    # their POWERTOOLS_SERVICE_NAME is theirs, as each function's environment is on Lambda
    assert got["service"] == got["env_service"] == "word-count"


def test_a_verbose_run_leaves_no_log_level_to_the_next_run(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a run with the functions' logs at DEBUG (-v), then one without
    code, verbose, err = _execute(app, tmp_path, monkeypatch, capsys, "-v")
    assert code == 0, err
    code, quiet, err = _execute(app, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    # THEN each run's Logger of the user's service has that run's level, not the earlier
    # engine's (Powertools configures a service's logger once per process)
    assert verbose["output"]["result"]["level"] == logging.DEBUG
    assert quiet["output"]["result"]["level"] == logging.INFO
    assert quiet["output"]["result"]["service"] == "word-count"


def test_a_layer_sam_builds_from_sources_is_put_under_python(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a Layer whose ContentUri holds the module itself and a BuildMethod: sam build
    # puts what it builds under python/ (samcli's workflow_config.get_layer_subfolder)
    mine = tmp_path / "built-layer"
    _copy(app, mine)
    (mine / "layer" / "python" / "wordlib.py").rename(mine / "layer" / "wordlib.py")
    (mine / "layer" / "python").rmdir()
    _changed(mine, "      CompatibleRuntimes: [python3.11]\n",
             "      CompatibleRuntimes: [python3.11]\n    Metadata:\n"
             "      BuildMethod: python3.11\n")  # fmt: skip
    # WHEN they run their file through it
    code, result, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN the layer's module was imported as on Lambda
    assert code == 0, err
    assert result["output"]["result"]["layer"] == "from the layer"
    # AND WHEN the layer's module needs a library its requirements.txt lists (which sam
    # build installs into the layer) and this Python lacks
    (mine / "layer" / "requirements.txt").write_text("onceflow-absent-library\n")
    wordlib = mine / "layer" / "wordlib.py"
    wordlib.write_text("import onceflow_absent_library  # noqa\n" + wordlib.read_text())
    code, _, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN the line names the pip command with the layer's requirements
    assert code == 1
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert f"-m pip install -r {mine / 'layer' / 'requirements.txt'}" in line


def _copy(app: Path, to: Path) -> None:
    shutil.copytree(app, to, ignore=shutil.ignore_patterns("__pycache__", ".onceflow"))


def test_a_top_level_module_named_like_one_of_onceflows_is_refused_in_one_line(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's function laid out as the Handler Cookbook lays it out: a package
    # named service (service/handlers/...), which is also the name of onceflow's own
    mine = tmp_path / "cookbook"
    _copy(app, mine)
    (mine / "src" / "app").rename(mine / "src" / "service")
    main_py = mine / "src" / "service" / "handlers" / "main.py"
    main_py.write_text(
        main_py.read_text().replace("from app.lib", "from service.lib"), encoding="utf-8"
    )
    _changed(mine, "app/handlers/main.handler", "service.handlers.main.handler")
    # WHEN they run it
    code, _, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN on Lambda each function has its own sandbox, so both run; the engine imports
    # every function in one Python, where one name is one module: it refuses before
    # anything runs, in one line naming both and what to do, not with a wrong module
    assert code == 2
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if "'service'" in line]
    assert "WordCountFunction" in line and "rename" in line
    assert str(mine / "src" / "service") in line


def test_a_runtime_newer_than_the_engines_python_is_said_when_it_fails_to_load(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a python3.13 function (arm64) written with syntax this Python may not have
    mine = tmp_path / "newer"
    _copy(app, mine)
    _changed(mine, "Runtime: python3.11", "Runtime: python3.13")
    _changed(mine, "Architectures: [x86_64]", "Architectures: [arm64]")
    main_py = mine / "src" / "app" / "handlers" / "main.py"
    if sys.version_info >= (3, 12):
        pytest.skip("this Python has Python 3.12's syntax")
    newer = "type Words = list[str]  # PEP 695, Python 3.12\n"
    main_py.write_text(main_py.read_text() + newer, encoding="utf-8")
    # WHEN they run it
    code, _, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN it fails as a syntax error would, and the line says which Python runs it here
    assert code == 1
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert "Runtime.UserCodeSyntaxError" in line
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "its Runtime is python3.13" in line and f"Python {version}" in line


def test_a_library_your_handler_imports_when_called_missing_here_is_named_with_pip(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's handler importing a library only when it is called, listed in its
    # requirements.txt (sam build installs it into the package Lambda runs)
    mine = tmp_path / "lazy"
    _copy(app, mine)
    main_py = mine / "src" / "app" / "handlers" / "main.py"
    main_py.write_text(
        main_py.read_text().replace(
            "def handler(event, context):\n",
            "def handler(event, context):\n    import onceflow_absent_library  # noqa\n",
        ),
        encoding="utf-8",
    )
    (mine / "src" / "requirements.txt").write_text("onceflow-absent-library\n")
    # (and a public Layer, which the engine cannot fetch: Powertools' own, which it has)
    public = (
        "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python311-x86_64:7"
    )
    _changed(mine, "Layers: [!Ref WordsLayer]", f"Layers: [!Ref WordsLayer, {public}]")
    # WHEN they run their file through it
    code, result, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN it fails as a package without it does on Lambda, and one line says how to
    # install it where the engine runs the function
    assert code == 1 and result["error"] == "ModuleNotFoundError"
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert "No module named 'onceflow_absent_library'" in line
    assert f"{sys.executable} -m pip install -r {mine / 'src' / 'requirements.txt'}" in line
    assert f"or from its Layers {public}" in line


def test_a_variable_lambda_reserves_is_refused_as_lambda_refuses_it(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's function setting AWS_REGION, which Lambda sets itself
    mine = tmp_path / "reserved"
    _copy(app, mine)
    _changed(mine, FUNCTION_ENV, FUNCTION_ENV + "          AWS_REGION: eu-west-1\n")
    # WHEN they run it
    code, _, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN it is refused before anything runs, as CreateFunction refuses it on a deploy
    # (InvalidParameterValueException; configuration-envvars.html, reserved variables)
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert (
        "contains reserved keys" in line
        and "Reserved keys used in this request: AWS_REGION" in line
    )


def test_an_error_raised_in_a_layer_names_its_file_where_lambda_keeps_it(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's Layer raising for their function
    mine = tmp_path / "raising-layer"
    _copy(app, mine)
    wordlib = mine / "layer" / "python" / "wordlib.py"
    wordlib.write_text("def boom():\n    raise ValueError('from the layer')\n")
    main_py = mine / "src" / "app" / "handlers" / "main.py"
    main_py.write_text(
        main_py.read_text().replace(
            "def handler(event, context):\n", "def handler(event, context):\n    wordlib.boom()\n"
        )
    )
    event = tmp_path / "event.json"
    event.write_text("{}")
    # WHEN they invoke their function (as sam local invoke -e does)
    monkeypatch.chdir(mine)
    code = main(["invoke", "WordCountFunction", "-e", str(event), "--no-server"])
    payload = json.loads(capsys.readouterr().out)
    # THEN the error's stackTrace names the layer's file under /opt/python, as the Python
    # runtime writes it there, and the function's own under /var/task
    assert code == 1 and payload["errorType"] == "ValueError"
    trace = payload["stackTrace"]
    assert any('File "/opt/python/wordlib.py"' in frame for frame in trace), trace
    assert any('File "/var/task/app/handlers/main.py"' in frame for frame in trace), trace


def test_a_dotted_handler_of_a_nested_package_runs_as_the_slashed_one(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the Handler written with dots (awslambdaric's _get_handler reads "/" as ".")
    mine = tmp_path / "dotted"
    _copy(app, mine)
    _changed(mine, "app/handlers/main.handler", "app.handlers.main.handler")
    # WHEN they run their file through it
    code, result, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN their handler ran
    assert code == 0, err
    assert result["output"]["result"]["words"] == 3


def test_a_variable_left_without_a_value_is_refused_as_cloudformation_refuses_it(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's function with a variable written without a value (YAML null)
    mine = tmp_path / "null"
    _copy(app, mine)
    _changed(mine, FUNCTION_ENV, FUNCTION_ENV + "          FEATURE_FLAG:\n")
    # WHEN they run it
    code, _, err = _execute(mine, tmp_path, monkeypatch, capsys)
    # THEN it is refused, as CloudFormation refuses the template ("'null' values are not
    # allowed in templates", cfn-lint#38), not run with the text "None"
    assert code == 2 and "Traceback" not in err
    [line] = [line for line in err.splitlines() if "FEATURE_FLAG" in line]
    assert "WordCountFunction" in line and "'null' values are not allowed in templates" in line


def test_code_changed_while_onceflow_up_runs_is_loaded_at_the_next_command(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN `onceflow up` running the user's app, and a first run of their file on it
    mine = tmp_path / "up"
    _copy(app, mine)
    monkeypatch.setenv("ONCEFLOW_STATE_DIR", str(tmp_path / "state"))
    with LocalEngine(mine / "template.yaml") as engine:
        up = server.EngineServer(engine, {}, template=mine / "template.yaml", command=main)
        up.publish()
        thread = threading.Thread(target=up.serve_forever, kwargs={"poll_interval": 0.2})
        thread.start()
        try:
            code, first, err = _execute(mine, tmp_path, monkeypatch, capsys, on_up=True)
            assert code == 0, err
            # WHEN the user changes their function, as they do between two tries
            main_py = mine / "src" / "app" / "handlers" / "main.py"
            main_py.write_text(
                main_py.read_text().replace('"words": count(', '"words": 100 + count(')
            )
            code, second, err = _execute(mine, tmp_path, monkeypatch, capsys, on_up=True)
        finally:
            up.shutdown()
            up.unpublish()
            up.server_close()
            thread.join(5)
    # THEN the next command runs the changed code (sam local invoke reads the code at each
    # invocation; on AWS the change is a new deployment), and says it loaded it afresh
    assert code == 0, err
    assert first["output"]["result"]["words"] == 3
    assert second["output"]["result"]["words"] == 103
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert "changed" in line and "loaded afresh" in line


def test_what_your_module_prints_as_it_loads_goes_to_the_function_log(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's module printing as it is imported (its init, on Lambda: its log)
    mine = tmp_path / "chatty"
    _copy(app, mine)
    main_py = mine / "src" / "app" / "handlers" / "main.py"
    main_py.write_text("print('loading my function')\n" + main_py.read_text())
    # WHEN they run their file with --json, then with the functions' logs shown (-v)
    code, result, err = _execute(mine, tmp_path, monkeypatch, capsys)
    verbose_code, _, verbose_err = _execute(mine, tmp_path, monkeypatch, capsys, "-v")
    # THEN the JSON on stdout is whole (the line is not the command's output), and the
    # line is in the function log -v shows
    assert code == 0 and result["status"] == "SUCCEEDED", err
    assert "loading my function" not in err
    assert verbose_code == 0 and "loading my function" in verbose_err


GREETER = """\
import os
import threading


def handler(event, context):
    seen = {}
    worker = threading.Thread(target=lambda: seen.update(
        service=os.environ.get("POWERTOOLS_SERVICE_NAME"),
        name=os.environ.get("AWS_LAMBDA_FUNCTION_NAME"),
    ))
    worker.start()
    worker.join()
    return {"own": os.environ["POWERTOOLS_SERVICE_NAME"], "thread": seen}
"""
GREETER_FUNCTION = """\
  GreeterFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: src/
      Handler: greeter.handler
      Runtime: python3.11
      Environment:
        Variables:
          POWERTOOLS_SERVICE_NAME: greeter

  Onceflow:
"""


def test_a_thread_a_handler_starts_never_sees_another_functions_value(
    app: Path, tmp_path: Path
) -> None:
    # GIVEN a second function of the user's, created after WordCountFunction, that gives
    # POWERTOOLS_SERVICE_NAME its own value, and whose handler reads it on a thread it starts
    mine = tmp_path / "two-functions"
    _copy(app, mine)
    (mine / "src" / "greeter.py").write_text(GREETER, encoding="utf-8")
    _changed(mine, "  Onceflow:\n", GREETER_FUNCTION)
    with LocalEngine(mine / "template.yaml", function_log=None, time_scale=0.0) as engine:
        [name] = [n for n in engine.runtime.functions if "greeter" in n.lower()]
        # WHEN it is invoked
        answer, error_type = engine.runtime.invoke(name, {})
    # THEN the handler sees its own value; the thread it started sees the process's
    # environment, which holds no value the functions disagree on: never another
    # function's (Lambda would show the thread the function's own; the engine cannot)
    assert error_type is None, answer
    assert answer["own"] == "greeter"
    assert answer["thread"]["service"] not in ("word-count", "onceflow")
    assert answer["thread"]["name"] in (None, name)


def test_a_file_that_vanishes_or_a_dangling_link_does_not_break_onceflow_up(
    app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN `onceflow up` running the user's app, and a first run of their file on it
    mine = tmp_path / "up-link"
    _copy(app, mine)
    monkeypatch.setenv("ONCEFLOW_STATE_DIR", str(tmp_path / "state"))
    with LocalEngine(mine / "template.yaml") as engine:
        up = server.EngineServer(engine, {}, template=mine / "template.yaml", command=main)
        up.publish()
        thread = threading.Thread(target=up.serve_forever, kwargs={"poll_interval": 0.2})
        thread.start()
        try:
            code, first, err = _execute(mine, tmp_path, monkeypatch, capsys, on_up=True)
            assert code == 0, err
            # WHEN the code root holds a link to a file that is gone (an editor's lock
            # file, a file renamed away mid-save: os.walk lists it, it cannot be read)
            (mine / "src" / ".#main.py").symlink_to(tmp_path / "gone")
            (mine / "src" / "app" / "#main.py#").symlink_to(tmp_path / "gone-too")
            code, second, err = _execute(mine, tmp_path, monkeypatch, capsys, on_up=True)
        finally:
            up.shutdown()
            up.unpublish()
            up.server_close()
            thread.join(5)
    # THEN the next command runs as the first did
    assert code == 0, err
    assert second["output"]["result"]["words"] == first["output"]["result"]["words"] == 3
