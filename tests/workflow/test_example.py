"""examples/word-count on the local engine: its own function, run by the onceflow it nests.

The engine reads the example's template, creates its bucket, table and function,
then the nested onceflow stack with the parameters the example passes
(ProcessorFunctionArn, ExistingBucketName, KeySuffix). An upload to the example's
bucket is announced by S3's event (``LocalEngine.put_s3_event``) and reaches the
nested stack's rule, as on AWS.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from onceflow.cli import main
from onceflow.local.engine import LocalEngine
from onceflow.local.template import TemplateError
from service.contract import CallToken
from tests.helpers import attributes, dlq_messages, invocations, ledger_row

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "word-count"
HAPPY_PATH = ["Claim", "Process", "MarkComplete"]
DUPLICATE_PATH = ["Claim", "Reclaim", "Duplicate"]
TEXT = b"one two\nthree four five\n"  # 2 lines, 5 words


@pytest.fixture(scope="module")
def example() -> Iterator[LocalEngine]:
    with LocalEngine(EXAMPLE / "template.yaml", function_log=io.StringIO()) as engine:
        yield engine


def upload(engine: LocalEngine, key: str, body: bytes = TEXT) -> str:
    """An upload to the example's own bucket; its version id."""
    assert engine.parent is not None
    bucket = engine.parent.ref("UploadsBucket")
    return str(engine.client("s3").put_object(Bucket=bucket, Key=key, Body=body)["VersionId"])


def deliver(engine: LocalEngine, key: str, version: str) -> list[str]:
    """S3's Object Created event of the upload, as the default bus delivers it."""
    assert engine.parent is not None
    return engine.put_s3_event(engine.parent.ref("UploadsBucket"), key, version)


def counts(engine: LocalEngine) -> dict[str, dict[str, Any]]:
    """The example's effect: its table's items, by idempotency key."""
    assert engine.parent is not None
    table = engine.parent.ref("CountsTable")
    items = engine.client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["pk"]["S"]: {k: next(iter(v.values())) for k, v in i.items()} for i in items}


def key_of(engine: LocalEngine, key: str, version: str) -> str:
    assert engine.parent is not None
    return f"s3://{engine.parent.ref('UploadsBucket')}/{key}#{version}"


def test_onceflow_runs_with_the_parameters_the_example_passes(example: LocalEngine) -> None:
    # GIVEN the example's template on the engine
    assert example.parent is not None
    # THEN the nested stack got the example's function and bucket
    function = example.parent.get_att("WordCountFunction", "Arn")
    bucket = example.parent.ref("UploadsBucket")
    assert example.stack.parameters["ProcessorFunctionArn"] == function
    assert example.stack.parameters["ExistingBucketName"] == bucket
    assert example.outputs()["ProcessorFunctionArn"] == function
    assert example.outputs()["IngestBucketName"] == bucket
    # AND it made neither a bundled processor nor an ingest bucket of its own
    assert example.ref("ProcessorFunction") == "" and example.ref("IngestBucket") == ""
    # AND the example reads the nested stack's outputs as CloudFormation gives them
    assert example.parent.get_att("Onceflow", "Outputs.LedgerTableName") == example.ref(
        "LedgerTable"
    )


def test_an_upload_is_counted_once_by_the_examples_own_function(example: LocalEngine) -> None:
    # GIVEN a text file uploaded to the example's bucket
    version = upload(example, "notes/first.txt")
    before = invocations(example)
    # WHEN S3 announces it
    (arn,) = deliver(example, "notes/first.txt", version)
    result = example.wait(arn)
    # THEN onceflow processed it with the example's function, whose counts are the result
    assert result.states_entered == HAPPY_PATH
    assert result.output["result"] == {"lines": 2, "words": 5}
    assert [i.function for i in example.runtime.invocations[before:]] == [
        example.function_name("WordCountFunction")
    ]
    # AND the effect is the function's: one item in its table, written by the claim's first call
    pk = key_of(example, "notes/first.txt", version)
    item = counts(example)[pk]
    assert (item["object_key"], item["lines"], item["words"]) == ("notes/first.txt", "2", "5")
    assert CallToken.parse(item["call_token"]) == CallToken(result.arn, 1, 0)
    # AND the ledger row is PROCESSED and keeps the function's result
    row = ledger_row(example, pk)
    assert row is not None and row["status"] == "PROCESSED"
    assert row["result"] == '{"lines":2,"words":5}'


def test_a_duplicate_delivery_is_absorbed_without_calling_the_function(
    example: LocalEngine,
) -> None:
    # GIVEN an upload already counted
    version = upload(example, "notes/twice.txt")
    (first,) = deliver(example, "notes/twice.txt", version)
    assert example.wait(first).states_entered == HAPPY_PATH
    before = invocations(example)
    # WHEN its event arrives again
    (second,) = deliver(example, "notes/twice.txt", version)
    result = example.wait(second)
    # THEN it is a Duplicate: the function is not called, the table holds one item for it
    assert result.states_entered == DUPLICATE_PATH
    assert invocations(example) == before
    pk = key_of(example, "notes/twice.txt", version)
    assert [k for k in counts(example) if k == pk] == [pk]
    assert CallToken.parse(counts(example)[pk]["call_token"]).lock_token == first


def test_an_upload_outside_the_examples_suffix_starts_nothing(example: LocalEngine) -> None:
    # GIVEN an upload that is not a .txt file (the example passes KeySuffix .txt)
    version = upload(example, "notes/readme.md")
    # WHEN S3 announces it
    started = deliver(example, "notes/readme.md", version)
    # THEN the nested stack's rule does not match it
    assert started == []
    assert key_of(example, "notes/readme.md", version) not in counts(example)


def test_the_functions_permanent_error_dead_letters_the_upload_at_once(
    example: LocalEngine,
) -> None:
    # GIVEN a .txt upload that is not UTF-8 text
    version = upload(example, "notes/binary.txt", b"\xff\xfe\x00 not text")
    before = invocations(example)
    # WHEN S3 announces it
    (arn,) = deliver(example, "notes/binary.txt", version)
    result = example.wait(arn)
    # THEN the function's PermanentError dead-lettered it after one call, with no effect
    assert result.outcome == "DeadLettered"
    assert invocations(example) == before + 1
    pk = key_of(example, "notes/binary.txt", version)
    assert pk not in counts(example)
    (message,) = [m for m in dlq_messages(example) if attributes(m)["IDEMPOTENCY_KEY"] == pk]
    assert attributes(message)["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    assert "is not UTF-8 text" in attributes(message)["ERROR_MESSAGE"]


def test_content_replaced_before_it_was_read_ends_superseded(example: LocalEngine) -> None:
    # GIVEN work for an upload without a version id whose key now holds other content
    assert example.parent is not None
    bucket = example.parent.ref("UploadsBucket")
    upload(example, "notes/replaced.txt")
    item = {"bucket": bucket, "key": "notes/replaced.txt", "versionId": "null"}
    item |= {"sequencer": "0A1B", "etag": "d41d8cd98f00b204e9800998ecf8427e"}
    # WHEN it is processed (a direct work item, as the audit resubmits one)
    result = example.execute("ProcessorStateMachine", {"workItem": item})
    # THEN the function's ObjectSuperseded ended it in Superseded, with no effect and no DLQ
    assert result.outcome == "Superseded"
    assert "holds other content now" in result.output["result"]["reason"]
    pk = f"s3://{bucket}/notes/replaced.txt#0A1B"
    assert pk not in counts(example)
    assert not [m for m in dlq_messages(example) if attributes(m)["IDEMPOTENCY_KEY"] == pk]


def test_the_examples_function_runs_as_its_own_role(example: LocalEngine) -> None:
    # GIVEN the example function's role without its grant on the counts table
    statements = [
        s for s in example.access.statements("WordCountFunction") if s.get("Sid") != "RecordCounts"
    ]
    version = upload(example, "notes/denied.txt")
    before = invocations(example)
    # WHEN an upload is processed
    with example.access.override("WordCountFunction", statements):
        (arn,) = deliver(example, "notes/denied.txt", version)
        result = example.wait(arn)
    # THEN DynamoDB refused the write: not retried (not a TransientError), the row
    # FAILED and open for the next claim, no effect
    assert result.outcome == "Failed"
    assert "AccessDeniedException" in (result.cause or "")
    assert invocations(example) == before + 1
    pk = key_of(example, "notes/denied.txt", version)
    assert pk not in counts(example)
    row = ledger_row(example, pk)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" not in row


@pytest.mark.parametrize(
    ("locations", "why"),
    [
        (
            [{"ApplicationId": "arn:aws:serverlessrepo:us-east-1:123456789012:applications/x"}],
            "is not a local template",
        ),
        (["https://s3.amazonaws.com/bucket/onceflow.template"], "is not a local template"),
        (["../../template.yaml", "../../template.yaml"], "runs one nested application"),
    ],
    ids=["serverless-application-repository", "s3-url", "two-applications"],
)
def test_a_nested_application_the_engine_cannot_run_is_refused(
    tmp_path: Path, locations: list[Any], why: str
) -> None:
    # GIVEN a parent template whose nested applications the local engine does not run
    resources = {
        f"App{n}": {"Type": "AWS::Serverless::Application", "Properties": {"Location": where}}
        for n, where in enumerate(locations)
    }
    template = tmp_path / "template.yaml"
    template.write_text(yaml.safe_dump({"Resources": resources}), encoding="utf-8")
    # WHEN the engine reads it
    # THEN it says why, before anything is created
    with pytest.raises(TemplateError, match=why):
        LocalEngine(template)


# ---- the walkthrough: the commands a user types in examples/word-count ---------------


def _onceflow_in(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command typed in a terminal standing in `directory`."""
    return subprocess.run(
        [sys.executable, "-m", "onceflow.cli", *argv],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_users_own_file_runs_through_the_examples_function_and_shows(tmp_path: Path) -> None:
    # GIVEN a user in the example's directory (no statemachines/ of its own there) with a
    # text file of their own
    notes = tmp_path / "notes.txt"
    notes.write_bytes(TEXT)
    # WHEN they run it through the processor, then show the execution
    ran = _onceflow_in(EXAMPLE, "execute", "ProcessorStateMachine", "--upload", str(notes),
                       "--no-server", "--json")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    name = re.search(r"onceflow show (\S+)`", ran.stderr)
    assert name is not None, ran.stderr
    page = tmp_path / "page.html"
    shown = _onceflow_in(EXAMPLE, "show", name.group(1), "--html", str(page), "--no-server")
    # THEN it was uploaded to the stack's bucket, and the example's function counted it
    result = json.loads(ran.stdout)
    assert [state["name"] for state in result["states"]] == HAPPY_PATH
    assert result["output"]["result"] == {"lines": 2, "words": 5}
    assert "uploaded notes.txt to s3://" in ran.stderr
    # AND the page draws the definition the nested processor ran, with its path
    assert shown.returncode == 0, shown.stderr
    html = page.read_text(encoding="utf-8")
    for state in HAPPY_PATH:
        assert state in html


def test_upload_and_an_event_file_are_one_or_the_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(EXAMPLE)
    with pytest.raises(SystemExit):
        main(["execute", "ProcessorStateMachine", "--no-server"])
    assert "one of the arguments -e/--event --upload is required" in capsys.readouterr().err


def test_onceflow_init_writes_an_app_that_runs_locally_and_validates(tmp_path: Path) -> None:
    # GIVEN a new directory outside any project
    app = tmp_path / "my-app"
    # WHEN the user writes a starter app there and runs their own file through it
    written = _onceflow_in(tmp_path, "init", str(app))
    notes = tmp_path / "notes.txt"
    notes.write_bytes(TEXT)
    ran = _onceflow_in(app, "execute", "ProcessorStateMachine", "--upload", str(notes),
                       "--key", "in/notes.txt", "--json", "--no-record", "--no-server")  # fmt: skip
    # THEN the app stands alone: its template nests the onceflow copied beside it
    assert written.returncode == 0, written.stderr
    assert "Location: onceflow/template.yaml" in (app / "template.yaml").read_text("utf-8")
    for needed in ("template.yaml", "statemachines/processor.asl.json",
                   "functions/service/contract.py", "functions/Makefile"):  # fmt: skip
        assert (app / "onceflow" / needed).is_file(), needed
    # AND the local engine runs its function on the user's file, on the app's template
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert [state["name"] for state in result["states"]] == HAPPY_PATH
    assert result["output"]["result"] == {"lines": 2, "words": 5}
    assert "onceflow's own app" not in ran.stderr
    # AND SAM accepts its template as it stands
    validated = subprocess.run(
        [str(Path(sys.executable).parent / "sam"), "validate", "--lint", "--region", "us-east-1"],
        cwd=app,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    # AND a second init into it is refused, naming the directory
    again = _onceflow_in(tmp_path, "init", str(app))
    assert again.returncode != 0 and "exists and is not empty" in again.stderr
