"""Your own function, as `onceflow init` writes it and as a user then breaks it: a Handler
that names no module, no function, or a module that does not compile.

Lambda deploys such a function and answers every invocation with its Python runtime's
error (aws-lambda-python-runtime-interface-client, awslambdaric/bootstrap.py,
_get_handler: Runtime.ImportModuleError "Unable to import module 'M': ...",
Runtime.HandlerNotFound "Handler 'F' missing on module 'M'", Runtime.UserCodeSyntaxError
"Syntax error in module 'M': ..."), and tries the import again at the next invocation.
The engine does the same: the execution fails as on AWS, the work stays in the ledger
(FAILED, nothing lost), the command says so in one line, and once the code is fixed the
same work is processed.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.cli import main
from onceflow.cli.session import _unloadable_handler_note
from onceflow.local.engine import LocalEngine
from tests.helpers import ledger_row

TEXT = b"one two\nthree four five\n"  # 2 lines, 5 words
STARTER_HANDLER = "Handler: word_count.handler"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An app as `onceflow init` writes it."""
    where = tmp_path_factory.mktemp("user") / "my-app"
    assert main(["init", str(where)]) == 0
    return where


def _with_handler(app: Path, handler: str, tmp_path: Path) -> Path:
    """A copy of the app whose function's Handler is ``handler``."""
    copy = tmp_path / "app"
    copy.mkdir()
    for entry in app.iterdir():
        (copy / entry.name).symlink_to(entry)
    (copy / "template.yaml").unlink()
    (copy / "src").unlink()
    (copy / "src").mkdir()
    for module in (app / "src").iterdir():
        (copy / "src" / module.name).write_bytes(module.read_bytes())
    text = (app / "template.yaml").read_text(encoding="utf-8")
    assert STARTER_HANDLER in text
    (copy / "template.yaml").write_text(
        text.replace(STARTER_HANDLER, f"Handler: {handler}"), encoding="utf-8"
    )
    return copy


def _run_own_file(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    machine: str = "ProcessorStateMachine",
) -> tuple[int, str, str]:
    """`onceflow execute MACHINE --upload notes.txt --json` run in the app, as its user
    would: (exit code, stdout, stderr)."""
    notes = tmp_path / "notes.txt"
    notes.write_bytes(TEXT)
    monkeypatch.chdir(app)
    code = main(["execute", machine, "--upload", str(notes), "--json",
                 "--no-record", "--no-server"])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def _changed(app: Path, old: str, new: str) -> None:
    """The app's template with its one text ``old`` (which must be there) made ``new``."""
    template = app / "template.yaml"
    text = template.read_text(encoding="utf-8")
    assert old in text
    template.write_text(text.replace(old, new), encoding="utf-8")


BROKEN = [
    ("nope.handler", "Runtime.ImportModuleError",
     "Unable to import module 'nope': No module named 'nope'"),
    ("word_count.nothing", "Runtime.HandlerNotFound",
     "Handler 'nothing' missing on module 'word_count'"),
    ("broken.handler", "Runtime.UserCodeSyntaxError", "Syntax error in module 'broken': "),
]  # fmt: skip


@pytest.mark.parametrize(("handler", "error", "message"), BROKEN)
def test_a_handler_that_cannot_load_fails_its_execution_as_lambda_does_in_one_line(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handler: str,
    error: str,
    message: str,
) -> None:
    # GIVEN the user's app with a Handler that cannot be loaded
    mine = _with_handler(app, handler, tmp_path)
    (mine / "src" / "broken.py").write_text("def handler(event, context:\n", encoding="utf-8")
    # WHEN they run their own file through it
    code, out, err = _run_own_file(mine, tmp_path, monkeypatch, capsys)
    # THEN the execution fails with the Python runtime's error, its work marked FAILED
    result = json.loads(out)
    assert code == 1
    assert result["error"] == error and message in result["cause"]
    names = [state["name"] for state in result["states"]]
    assert names[:3] == ["Claim", "Process", "MarkFailed"] and "MarkComplete" not in names
    # AND the command said what is wrong in one line, without a traceback
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert handler in line and error in line and message in line


def test_a_dependency_of_your_function_missing_here_is_named_with_how_to_install_it(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the user's function importing a library that onceflow's Python does not have,
    # listed in the function's requirements.txt (sam build packages it for Lambda)
    mine = _with_handler(app, "needs.handler", tmp_path)
    (mine / "src" / "needs.py").write_text(
        "import onceflow_absent_library\n\n\ndef handler(event, context):\n    return {}\n",
        encoding="utf-8",
    )
    (mine / "src" / "requirements.txt").write_text("onceflow-absent-library\n", encoding="utf-8")
    # WHEN they run their own file through it
    code, _, err = _run_own_file(mine, tmp_path, monkeypatch, capsys)
    # THEN it fails as on a Lambda package without it, and the line says how to run it here:
    # the engine runs the function in the Python onceflow is installed in
    assert code == 1
    [line] = [line for line in err.splitlines() if "WordCountFunction" in line]
    assert "No module named 'onceflow_absent_library'" in line
    assert f"-m pip install -r {mine / 'src' / 'requirements.txt'}" in line


@pytest.fixture
def broken_engine(app: Path, tmp_path: Path) -> Iterator[tuple[LocalEngine, Path]]:
    """The app on an engine that stays up (as `onceflow up` keeps it), its Handler naming a
    module the user has not written yet."""
    mine = _with_handler(app, "counter.handler", tmp_path)
    with LocalEngine(mine / "template.yaml", function_log=io.StringIO()) as engine:
        yield engine, mine


def test_work_that_met_an_unloadable_handler_is_processed_once_the_code_is_fixed(
    broken_engine: tuple[LocalEngine, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an upload delivered while the function's module is missing
    engine, mine = broken_engine
    assert engine.parent is not None
    bucket = engine.parent.ref("UploadsBucket")
    version = engine.client("s3").put_object(Bucket=bucket, Key="n.txt", Body=TEXT)["VersionId"]
    [failed] = engine.put_s3_event(bucket, "n.txt", version)
    key = f"s3://{bucket}/n.txt#{version}"
    first = engine.wait(failed)
    assert first.status == "FAILED" and first.error == "Runtime.ImportModuleError"
    row = ledger_row(engine, key)
    assert row is not None and row["status"] == "FAILED"
    assert "Runtime.ImportModuleError" in row["last_error"]
    [why] = engine.runtime.load_errors.values()
    assert (
        why
        == "Runtime.ImportModuleError: Unable to import module 'counter': No module named 'counter'"
    )
    # (a command sent to this engine, as to `onceflow up`, says it in one line)
    _unloadable_handler_note(engine)
    [said] = capsys.readouterr().err.splitlines()
    assert "WordCountFunction (Handler counter.handler" in said and why in said
    # WHEN the user writes the module and the same upload is delivered again
    (mine / "src" / "counter.py").write_bytes((mine / "src" / "word_count.py").read_bytes())
    # (the next command no longer says it: it tries the import again)
    _unloadable_handler_note(engine)
    assert capsys.readouterr().err == ""
    [again] = engine.put_s3_event(bucket, "n.txt", version)
    # THEN the function loads at this invocation, as Lambda's next init does, and counts it
    second = engine.wait(again)
    assert second.status == "SUCCEEDED" and second.states_entered[-1] == "MarkComplete"
    assert second.output["result"] == {"lines": 2, "words": 5}
    row = ledger_row(engine, key)
    assert row is not None and row["status"] == "PROCESSED"
    assert engine.runtime.load_errors == {}
    assert re.fullmatch(r"\d+", str(row["attempts"])) and int(row["attempts"]) == 2


def test_your_own_file_goes_through_the_batch_workflow_in_the_batch_mode(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the user's app with onceflow nested in the batch mode (S3 through the queue)
    mine = _with_handler(app, "word_count.handler", tmp_path)
    nested = "        KeySuffix: .txt\n"
    batch = '        SqsBatchMode: "true"\n        ProcessorTimeoutSeconds: 40\n'
    _changed(mine, nested, nested + batch)
    # WHEN they run their own file through the workflow that takes uploads in that mode
    code, out, err = _run_own_file(
        mine, tmp_path, monkeypatch, capsys, machine="BatchProcessorStateMachine"
    )
    # THEN it was uploaded and ran as the message the rule sends to the source queue
    assert code == 0, err
    assert "uploaded notes.txt to s3://" in err
    result = json.loads(out)
    assert result["status"] == "SUCCEEDED" and result["output"] == {"batchItemFailures": []}
    names = {state["name"] for state in result["states"]}
    assert {"Process", "MarkComplete"} <= names


@pytest.mark.parametrize(
    ("directory", "stack"),
    [("my-app", "my-app"), ("2nd_app.v2", "app-2nd-app-v2"), ("Photos", "Photos")],
)
def test_init_names_the_stack_after_the_app_not_the_example(
    tmp_path: Path, directory: str, stack: str
) -> None:
    # GIVEN a directory for a new app
    where = tmp_path / directory
    # WHEN the user writes the starter app there
    assert main(["init", str(where)]) == 0
    # THEN `sam deploy` deploys it as a stack of its own name (a valid CloudFormation
    # stack name: a letter first, then letters, digits and hyphens), not as word-count
    config = (where / "samconfig.toml").read_text(encoding="utf-8")
    assert f'stack_name = "{stack}"' in config and f's3_prefix = "{stack}"' in config
    assert "word-count" not in config


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (("Runtime: python3.11", "Runtime: nodejs20.x"),
         "WordCountFunction: Runtime nodejs20.x: the local engine runs Python functions only"),
        (("Handler: word_count.handler", "PackageType: Image\n      ImageUri: my-image:1"),
         "WordCountFunction: PackageType Image: the local engine runs Python functions only"),
        (("CodeUri: src/", "CodeUri: sources/"),
         "WordCountFunction: CodeUri sources/ is not a directory"),
    ],
)  # fmt: skip
def test_a_function_the_engine_cannot_run_is_refused_in_one_line(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: tuple[str, str],
    said: str,
) -> None:
    # GIVEN the user's app whose function is not a Python zip package (Lambda runs it; the
    # engine, which imports Python handlers in its own process, cannot)
    mine = _with_handler(app, "word_count.handler", tmp_path)
    _changed(mine, *change)
    monkeypatch.chdir(mine)
    # WHEN they run a command on it
    code = main(["execute", "ProcessorStateMachine", "-e", str(mine / "onceflow" / "events" /
                 "s3-object-created-poison.json"), "--no-record", "--no-server"])  # fmt: skip
    err = capsys.readouterr().err
    # THEN it is refused before anything runs, in one line that names the function and why
    # (not a Python import error it would not have on Lambda, nor a traceback)
    assert code == 2
    assert "Traceback" not in err and "ImportModuleError" not in err
    assert said in err


def test_the_demo_in_your_app_runs_onceflows_own_and_says_so(
    app: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user in their app, whose template nests onceflow around a function of theirs
    monkeypatch.chdir(app)
    # WHEN they run the demo the README shows
    code = main(["demo", "--objects", "4", "--corrupt", "1", "--no-record", "--json"])
    out, err = capsys.readouterr()
    # THEN it runs on onceflow's own app (the images it uploads are for its processor, and
    # its report judges that processor's effects), says so in one line, and is exactly once
    assert code == 0, err
    assert json.loads(out)["exactly_once"] is True
    [said] = [line for line in err.splitlines() if "the demo runs onceflow's own app" in line]
    assert str(app / "template.yaml") in said


def test_your_own_file_under_a_key_the_stack_does_not_process_is_refused_before_upload(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the user's app, which processes *.txt (KeySuffix), and a CSV file of theirs
    numbers = tmp_path / "numbers.csv"
    numbers.write_bytes(b"1,2,3\n")
    monkeypatch.chdir(app)
    # WHEN they run it through the processor under its own name
    code = main(["execute", "ProcessorStateMachine", "--upload", str(numbers), "--no-record",
                 "--no-server"])  # fmt: skip
    out, err = capsys.readouterr()
    # THEN nothing runs (on AWS the rule's filter starts nothing for that upload, and no
    # dead letter is made): one line says which keys the stack takes, and how to name one
    assert code == 2 and out == ""
    [line] = [line for line in err.splitlines() if not line.startswith("local: ")]
    assert "numbers.csv" in line and "KeySuffix '.txt'" in line and "--key" in line
    assert "uploaded" not in err


def test_your_functions_own_powertools_service_name_is_its_own_as_on_lambda(
    app: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN the user's function setting Powertools' service name, which onceflow's Globals
    # set for its own functions to another value ('onceflow'), and logging with Powertools
    mine = _with_handler(app, "word_count.handler", tmp_path)
    mine_env = "          COUNTS_TABLE: !Ref CountsTable\n"
    _changed(mine, mine_env, mine_env + "          POWERTOOLS_SERVICE_NAME: word-count\n")
    code = mine / "src" / "word_count.py"
    code.write_text(
        code.read_text(encoding="utf-8").replace(
            "def handler(event: dict[str, Any], context: Any) -> dict[str, int]:\n",
            "from aws_lambda_powertools import Logger\n\nlogger = Logger()\n\n\n"
            "def handler(event: dict[str, Any], context: Any) -> dict[str, int]:\n"
            "    logger.info('counting', extra={'env': os.environ['POWERTOOLS_SERVICE_NAME']})\n",
        ),
        encoding="utf-8",
    )
    # WHEN they run their own file through it with the functions' logs shown (-v)
    notes = tmp_path / "notes.txt"
    notes.write_bytes(TEXT)
    monkeypatch.chdir(mine)
    exit_code = main(["execute", "ProcessorStateMachine", "--upload", str(notes), "--no-record",
                      "--no-server", "-v"])  # fmt: skip
    err = capsys.readouterr().err
    # THEN it runs, as on Lambda, where each function has its own environment: its log
    # line names its service, in its Logger and in the variable it reads
    assert exit_code == 0, err
    [line] = [json.loads(x) for x in err.splitlines() if '"counting"' in x]
    assert line["service"] == "word-count" and line["env"] == "word-count"


def test_a_parameter_of_the_nested_onceflow_given_to_your_app_says_where_it_goes(
    app: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the user's app, whose template nests onceflow as the application Onceflow
    monkeypatch.chdir(app)
    # WHEN they override one of onceflow's parameters on the command line (as the docs do
    # for onceflow's own app)
    code = main(["execute", "ProcessorStateMachine", "-e", "onceflow/events/work-item.json",
                 "--parameter-overrides", "AuditRecentCutoffHours=0", "--no-server",
                 "--no-record"])  # fmt: skip
    err = capsys.readouterr().err
    # THEN it is refused, as sam deploy's overrides reach only the parent template, in one
    # line that says where that parameter is set: the application's Parameters
    assert code == 2
    [line] = [line for line in err.splitlines() if "AuditRecentCutoffHours" in line]
    assert "unknown parameters: AuditRecentCutoffHours" in line
    assert "a parameter of the nested application Onceflow" in line
    assert "Onceflow's Parameters" in line
