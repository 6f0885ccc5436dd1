"""What the audit resubmits on the local engine, as what, how fast, and what it counts: one
refusal or one failure never costs the report, a failed batch hides nothing (docs/audit.md).

Inputs are started as EventBridge and the pipe start them: compact JSON, UTF-8 as it is.
"""

from __future__ import annotations

import copy
import io
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from onceflow import ops
from onceflow.local.engine import DEFAULT_TEMPLATE, LocalEngine
from onceflow.local.target import LocalTarget
from onceflow.local.template import load_template
from service.logic.open_work import open_status
from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    PermanentError,
    TransientError,
    attributes,
    audit_engine,
    dlq_messages,
    ledger_row,
    load_event,
    output_effects,
    run_audit,
    upload,
    with_constants,
)
from tests.workflow.test_audit import always, history_size, processor_executions

# The largest input the processor's Claim accepts, in UTF-8 bytes.
INPUT_LIMIT = 122_880


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def custom_event(note: str) -> dict[str, Any]:
    """events/eventbridge-custom-event.json with a new id and a note in its detail."""
    event = copy.deepcopy(load_event("eventbridge-custom-event.json"))
    event["id"] = str(uuid.uuid4())
    event["detail"]["note"] = note
    return event


def at_the_limit(character: str) -> dict[str, Any]:
    """A custom event as large as the processor accepts, its note made of ``character``."""
    overhead = len(compact(custom_event("")).encode())
    return custom_event(character * ((INPUT_LIMIT - overhead) // len(character.encode())))


def start_as_eventbridge(engine: LocalEngine, event: Any) -> str:
    """StartExecution with the event's JSON as a rule's target sends it: compact UTF-8."""
    sfn = engine.client("stepfunctions")
    response = sfn.start_execution(
        stateMachineArn=engine.state_machine_arn(MACHINE),
        name=f"events-{uuid.uuid4().hex}",
        input=compact(event),
    )
    return str(response["executionArn"])


def fail_once(engine: LocalEngine, event: Any) -> str:
    """Deliver ``event`` while the processor fails transiently: a FAILED row the sweep owns."""
    with engine.override_function(FUNCTION, always(TransientError)):
        result = engine.wait(start_as_eventbridge(engine, event))
    assert result.outcome == "Failed", result.states_entered
    key = str(result.output["idempotencyKey"]) if result.output else ""
    if not key:
        key = f"event:{event['source']}:{event['id']}"
    row = ledger_row(engine, key)
    assert row is not None and row["status"] == "FAILED", row
    return key


def audit_resubmissions(engine: LocalEngine, audit_name: str) -> list[dict[str, Any]]:
    sfn = engine.client("stepfunctions")
    prefix = f"audit-{audit_name}"[:40]
    return [
        sfn.describe_execution(executionArn=e["executionArn"])
        for e in processor_executions(engine)
        if e["name"].startswith(prefix)
    ]


@pytest.fixture
def audited() -> Iterator[LocalEngine]:
    with audit_engine() as local:
        local.state.requests.clear()
        yield local


# ---- item 4: the input as it was -------------------------------------------------------


def test_a_large_accented_or_emoji_event_is_resubmitted_as_it_was_accepted(
    audited: LocalEngine,
) -> None:
    # GIVEN two custom events EventBridge and Claim accepted: 55,000 "é" (110 KB in
    # UTF-8, 330 KB as json.dumps escapes them) and emoji up to the processor's limit
    # (12 bytes each escaped); both failed and wait for the sweep
    accented = custom_event("é" * 55_000)
    emoji = at_the_limit("😀")
    assert len(compact(emoji).encode()) > INPUT_LIMIT - 4
    keys = [fail_once(audited, event) for event in (accented, emoji)]
    # WHEN the audit runs
    result = run_audit(audited)
    # THEN both were resubmitted, accepted and processed: no refusal, no error
    report = result.output
    assert report["failed_resubmitted"] == 2
    assert report["resubmit_refused"] == 0 and report["resubmit_errors"] == 0
    for key in keys:
        row = ledger_row(audited, key)
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
    assert output_effects(audited) == 2
    # AND each resubmission's input is the event as it was, no larger in UTF-8
    started = audit_resubmissions(audited, result.name)
    assert len(started) == 2
    for description in started:
        text = description["input"]
        event = json.loads(text)
        original = accented if event["id"] == accented["id"] else emoji
        assert event["detail"] == original["detail"]
        assert len(text.encode()) <= len(compact(original).encode())


def test_redrive_starts_a_large_accented_event_as_it_was_accepted(audited: LocalEngine) -> None:
    # GIVEN a 110 KB custom event of "é" dead-lettered by a processor bug, since fixed
    event = custom_event("é" * 55_000)
    with audited.override_function(FUNCTION, always(PermanentError)):
        first = audited.wait(start_as_eventbridge(audited, event))
    assert first.outcome == "DeadLettered"
    assert len(dlq_messages(audited)) == 1
    # WHEN the DLQ is redriven
    report = ops.redrive(LocalTarget(audited))
    # THEN Step Functions accepted the start and the event was processed once
    (moved,) = report.messages
    assert moved.action == "resubmitted", moved.detail
    rerun = audited.wait(str(moved.execution_arn))
    assert rerun.outcome == "Processed"
    assert rerun.input == event
    assert dlq_messages(audited) == [] and output_effects(audited) == 1


@contextmanager
def step_functions_answering(
    engine: LocalEngine, operation: str, code: str, message: str, marker: str = ""
) -> Iterator[list[str]]:
    """Step Functions answering the audit function's ``operation`` with an error (for a
    request that holds ``marker``): the audit's own client hears AWS's answer, no retry.
    Yields the requests it answered."""
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])
    answered: list[str] = []

    def answer(params: dict[str, Any], **_: Any) -> Any:
        body = params.get("body") or b""
        text = body.decode() if isinstance(body, bytes) else str(body)
        if marker not in text:
            return None
        answered.append(text)
        error = {"Code": code, "Message": message}
        response = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}
        return SimpleNamespace(status_code=400, headers={}), response

    def handler(event: dict[str, Any], context: Any) -> Any:
        from service.handlers import audit as audit_handler

        events = audit_handler._get_clients().processor._sfn.meta.events
        events.register(f"before-call.sfn.{operation}", answer, unique_id="injected")
        try:
            return real(event, context)
        finally:
            events.unregister(f"before-call.sfn.{operation}", unique_id="injected")

    with engine.override_function("AuditFunction", handler):
        yield answered


def starts_refused(engine: LocalEngine, marker: str) -> Any:
    """StartExecution refusing any input holding ``marker`` as it refuses one over its limit."""
    return step_functions_answering(
        engine,
        "StartExecution",
        "ValidationException",
        "1 validation error detected: Value at 'input' failed to satisfy "
        "constraint: Member must have length less than or equal to 262144",
        marker,
    )


def test_a_refused_resubmission_is_dead_lettered_with_its_reason_and_the_sweep_goes_on(
    audited: LocalEngine,
) -> None:
    # GIVEN two failed custom events, and Step Functions refusing to start the first again
    refused, fine = custom_event("refuse-me"), custom_event("fine")
    refused_key, fine_key = (fail_once(audited, e) for e in (refused, fine))
    with starts_refused(audited, "refuse-me"):
        # WHEN the audit runs
        result = run_audit(audited)
    # THEN the audit succeeded and reported both
    report = result.output
    assert report["resubmit_refused"] == 1 and report["failed_resubmitted"] == 1
    assert report["failed_dead_lettered"] == 1
    # AND the refused one is dead-lettered with the refusal, its event whole
    (message,) = dlq_messages(audited)
    attrs = attributes(message)
    assert attrs["IDEMPOTENCY_KEY"] == refused_key
    assert attrs["ERROR_CODE"] == "ValidationException"
    assert attrs["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    assert "StartExecution refused the audit's resubmission" in attrs["ERROR_MESSAGE"]
    assert json.loads(message["Body"])["event"]["detail"] == refused["detail"]
    row = ledger_row(audited, refused_key)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    assert "open_status" not in row
    # AND the sweep went on to the other, which was processed
    row = ledger_row(audited, fine_key)
    assert row is not None and row["status"] == "PROCESSED"
    # AND a dead-lettered row is not tried again
    again = run_audit(audited).output
    assert again["resubmit_refused"] == 0 and len(dlq_messages(audited)) == 1


def _query_refused(service: str, operation: str, body: str) -> Any:
    if service != "dynamodb" or operation != "Query" or "OpenWork" not in body:
        return None
    body = json.dumps(
        {
            "__type": "com.amazonaws.dynamodb.v20120810#AccessDeniedException",
            "message": "injected: not authorized to perform dynamodb:Query on OpenWork",
        }
    )
    headers = {"x-amzn-RequestId": str(uuid.uuid4()), "Content-Type": "application/x-amz-json-1.0"}
    return 400, headers, body


def test_a_sweep_that_fails_past_its_retries_still_gets_its_report(audited: LocalEngine) -> None:
    # GIVEN a lost upload the walk will find, and an index the sweep cannot read
    s3 = audited.client("s3")
    s3.put_object(Bucket=audited.ref("IngestBucket"), Key="lost.png", Body=b"x")
    audited.state.faults.append(_query_refused)
    try:
        result = audited.execute(AUDIT, {})
    finally:
        audited.state.faults.remove(_query_refused)
    audited.wait_for_running(MACHINE)
    # THEN the run failed, after the report, and says why
    assert result.status == "FAILED" and result.error == "AuditSweepFailed"
    assert result.states_entered[-3:] == ["Report", "ObjectsAudited", "OpenWorkNotSwept"]
    assert "AccessDeniedException" in str(result.cause)
    report_key = f"reports/audit/{time.strftime('%Y-%m-%d', time.gmtime())}.json"
    body = s3.get_object(Bucket=audited.ref("OutputBucket"), Key=report_key)["Body"].read()
    stored = json.loads(body)
    # AND the report counts what the walk did, and names the sweep's failure
    assert stored["missing_resubmitted"] == 1
    assert "AccessDeniedException" in stored["sweep_error"]


# ---- item 5: a sweep whose history does not grow with the open rows, paced ----------


def _expired_failed_rows(engine: LocalEngine, count: int, prefix: str) -> None:
    """``count`` FAILED message rows in the open-work index whose TTL has passed (DynamoDB
    deletes expired rows up to days late): the sweep reads each and leaves it, an expired
    row counting as absent."""
    table = engine.ref("LedgerTable")
    dynamodb = engine.client("dynamodb")
    requests = []
    for n in range(count):
        pk = f"sqs:{prefix}-{n:04d}"
        item = {
            "pk": {"S": pk},
            "status": {"S": "FAILED"},
            "open_status": {"S": open_status("FAILED", pk)},
            "lock_owner": {"S": f"arn:aws:states:us-east-1:123456789012:execution:p:{prefix}{n}"},
            "lock_expires_at": {"N": "1000"},
            "attempts": {"N": "1"},
            "expires_at": {"N": "1000"},
        }
        requests.append({"PutRequest": {"Item": item}})
    for start in range(0, len(requests), 25):
        dynamodb.batch_write_item(RequestItems={table: requests[start : start + 25]})


def test_the_sweeps_history_does_not_grow_with_the_number_of_open_rows() -> None:
    with audit_engine() as engine:
        # GIVEN 50 open rows (one page of 200), then 500 (three pages)
        _expired_failed_rows(engine, 50, "small")
        small = run_audit(engine)
        _expired_failed_rows(engine, 450, "large")
        large = run_audit(engine)
        # THEN both sweeps took one call, and the audits' histories are the same length
        assert small.states_entered.count("SweepLocks") == 1
        assert large.states_entered.count("SweepLocks") == 1
        assert history_size(engine, large.arn) == history_size(engine, small.arn)
        assert large.output["failed_resubmitted"] == 0 and large.output["sweep_deferred"] == 0


def test_the_sweeps_resubmissions_keep_to_audit_resubmits_per_second() -> None:
    with with_constants(audit_engine(), AuditResubmitsPerSecond="5") as engine:
        # GIVEN six failed custom events, which only the sweep retries
        for n in range(6):
            fail_once(engine, custom_event(f"paced {n}"))
        # WHEN the audit runs at 5 resubmissions a second
        result = run_audit(engine)
        # THEN it resubmitted all six, the first and the last at least a second apart
        assert result.output["failed_resubmitted"] == 6
        starts = sorted(d["startDate"] for d in audit_resubmissions(engine, result.name))
        assert len(starts) == 6
        assert (starts[-1] - starts[0]).total_seconds() >= 0.95


# ---- item 6: messages and events resubmitted from their row (EXPRESS, batch mode) ---


def describe_refused(engine: LocalEngine) -> Any:
    """DescribeExecution answering as for an EXPRESS execution, which AWS does not serve
    (API_DescribeExecution.html; the error code is not verified); the local engine serves
    every execution. Yields the requests the audit made."""
    return step_functions_answering(
        engine, "DescribeExecution", "ExecutionDoesNotExist", "Execution Does Not Exist"
    )


EXPRESS = {"WorkflowType": "EXPRESS", "ProcessorTimeoutSeconds": "40"}


def test_under_express_a_failed_custom_event_is_resubmitted_from_its_row() -> None:
    with audit_engine(**EXPRESS) as engine:
        # GIVEN a custom event whose EXPRESS execution failed
        event = custom_event("express é")
        key = fail_once(engine, event)
        # WHEN the audit runs, DescribeExecution serving no EXPRESS execution
        with describe_refused(engine) as asked:
            report = run_audit(engine).output
        # THEN it resubmitted the event from the row, without asking for the execution
        assert report["failed_resubmitted"] == 1 and report["resubmit_errors"] == 0
        assert asked == []
        row = ledger_row(engine, key)
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
        assert json.loads(row["original_event"])["detail"] == event["detail"]
        assert output_effects(engine) == 1


BATCH_MODE = {
    "SqsSource": "create",
    "SqsBatchMode": "true",
    "ProcessorTimeoutSeconds": "40",
    "IdempotencyKeyPath": "orderId",
}


def test_a_failed_batch_mode_message_is_resubmitted_to_the_processor_from_its_row() -> None:
    with audit_engine(**BATCH_MODE) as engine:
        # GIVEN a message whose work failed in an EXPRESS batch, then left the queue
        sqs = engine.client("sqs")
        url = engine.ref("SourceQueue")
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"orderId": "o-9", "n": "é"}))
        with engine.override_function(FUNCTION, always(TransientError)):
            engine.pump_pipes()
        row = ledger_row(engine, "sqs:o-9")
        assert row is not None and row["status"] == "FAILED" and "#" in row["lock_owner"]
        # (batch rows are in the open-work index, as the processor's: P11 item 1)
        assert row["open_status"] == open_status("FAILED", "sqs:o-9")
        sqs.purge_queue(QueueUrl=url)
        # WHEN the audit runs
        result = run_audit(engine)
        # THEN the message was resubmitted to the processor as the pipe's array of one record
        assert result.output["failed_resubmitted"] == 1
        assert result.output["resubmit_errors"] == 0
        (started,) = audit_resubmissions(engine, result.name)
        (record,) = json.loads(started["input"])
        assert json.loads(record["body"]) == {"orderId": "o-9", "n": "é"}
        row = ledger_row(engine, "sqs:o-9")
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
        assert output_effects(engine) == 1


def test_work_the_sweep_cannot_resubmit_is_counted_for_its_alarm() -> None:
    log = io.StringIO()
    parameters = {"AuditRecentCutoffHours": "0", **EXPRESS}
    with LocalEngine(parameters=parameters, function_log=log, time_scale=0.0) as engine:
        # GIVEN a failed EXPRESS execution's row from before Claim kept the event
        key = fail_once(engine, custom_event("claimed before the upgrade"))
        engine.client("dynamodb").update_item(
            TableName=engine.ref("LedgerTable"),
            Key={"pk": {"S": key}},
            UpdateExpression="REMOVE original_event",
        )
        # WHEN the audit runs (DescribeExecution serves no EXPRESS execution)
        with describe_refused(engine) as asked:
            report = run_audit(engine).output
        # THEN the row is counted as a resubmit error and left for the next audit
        assert len(asked) == 1 and report["resubmit_errors"] == 1
        row = ledger_row(engine, key)
        assert row is not None and row["status"] == "FAILED" and "open_status" in row
    # AND the report's metric is the one AuditResubmitErrorsAlarm watches, above its threshold
    measured = [
        r["AuditResubmitErrors"]
        for r in map(json.loads, filter(None, log.getvalue().splitlines()))
        if "AuditResubmitErrors" in r
    ]
    assert measured == [[1.0]]
    alarm = load_template(DEFAULT_TEMPLATE)["Resources"]["AuditResubmitErrorsAlarm"]["Properties"]
    assert alarm["MetricName"] == "AuditResubmitErrors" and alarm["Threshold"] == 0
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "onceflow"}]


# ---- item 8: a failed batch hides no lost work -------------------------------------


def dies_after_resubmitting(engine: LocalEngine) -> Any:
    """The real audit function, except that a batch dies after it has done its work, with an
    error the batch's Retry does not list: once the executions it started have claimed their
    rows (the report reads the claims back; one started a moment before the batch died and
    not yet claimed when the report runs is counted by no report, docs/audit.md)."""
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])

    def handler(event: dict[str, Any], context: Any) -> Any:
        result = real(event, context)
        if event.get("action") == "batch":
            engine.wait_for_running(MACHINE)
            raise RuntimeError("injected: the batch died after resubmitting")
        return result

    return handler


def test_lost_uploads_a_failed_batch_resubmitted_are_counted_as_missing(
    audited: LocalEngine,
) -> None:
    # GIVEN three uploads whose events were lost, and a batch that dies after resubmitting
    for n in range(3):
        upload(audited, f"lost/{n}.png")
    with audited.override_function("AuditFunction", dies_after_resubmitting(audited)):
        first = audited.execute(AUDIT, {})
    audited.wait_for_running(MACHINE)
    # THEN the walk failed (its one batch failed), and the report still counts the lost work
    assert first.status == "FAILED" and first.error == "AuditWalkFailed"
    s3 = audited.client("s3")
    report_key = f"reports/audit/{time.strftime('%Y-%m-%d', time.gmtime())}.json"
    body = s3.get_object(Bucket=audited.ref("OutputBucket"), Key=report_key)["Body"].read()
    stored = json.loads(body)
    assert stored["failed_batches"] == 1 and stored["unaudited_objects"] == 3
    assert stored["missing_resubmitted"] == 3
    assert len(stored["resubmitted_sample"]) == 3
    # AND the work was done once; the next audit finds it done
    assert output_effects(audited) == 3
    second = run_audit(audited).output
    assert second["ok"] == 3 and second["missing_resubmitted"] == 0


def test_a_batch_counts_only_the_resubmissions_whose_start_succeeded(
    audited: LocalEngine,
) -> None:
    # GIVEN three lost uploads, and Step Functions throttling the start of one
    versions = {key: upload(audited, key) for key in ("a.png", "b.png", "throttled.png")}
    with step_functions_answering(
        audited, "StartExecution", "ThrottlingException", "Rate exceeded", "throttled.png"
    ) as refused:
        report = run_audit(audited).output
    # THEN the two that started are resubmitted, the third an error, the batch not failed
    assert len(refused) >= 1
    assert report["missing_resubmitted"] == 2 and report["resubmit_errors"] == 1
    assert report["failed_batches"] == 0
    throttled = f"s3://{audited.ref('IngestBucket')}/throttled.png#{versions['throttled.png']}"
    assert throttled not in report["resubmitted_sample"]
    # AND the next audit finds the third still missing and resubmits it
    again = run_audit(audited).output
    assert again["missing_resubmitted"] == 1 and again["ok"] == 2


def test_a_sweep_call_whose_time_is_up_goes_on_from_the_row_it_stopped_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The function's AUDIT_SWEEP_CALL_SECONDS, as an operator sets it: 5 s a call
    monkeypatch.setenv("AUDIT_SWEEP_CALL_SECONDS", "5")
    with with_constants(audit_engine(), AuditResubmitsPerSecond="1") as engine:
        # GIVEN eight failed custom events, more than one call starts at one a second
        keys = [fail_once(engine, custom_event(f"resumed {n}")) for n in range(8)]
        # WHEN the audit runs
        result = run_audit(engine)
        # THEN the sweep took more than one call, within one page of the index
        assert result.states_entered.count("SweepLocks") >= 2
        # AND each row was resubmitted once, none skipped, none twice
        assert result.output["failed_resubmitted"] == 8
        assert len(audit_resubmissions(engine, result.name)) == 8
        for key in keys:
            row = ledger_row(engine, key)
            assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"


def test_inspect_under_express_reads_the_claim_from_the_engine_record() -> None:
    with audit_engine(**EXPRESS) as engine:
        # GIVEN a custom event whose EXPRESS processor execution failed
        key = fail_once(engine, custom_event("inspect express"))
        # WHEN the key is inspected
        found = ops.inspect_key(LocalTarget(engine), key)
        # THEN ListExecutions refuses the EXPRESS processor, as on AWS
        # (StateMachineTypeNotSupported): the report says so and scans none
        assert found["note"] == "an EXPRESS processor's executions are not listed: see its logs"
        assert found["executions_scanned"] == 0
        # and the claim (DescribeExecution and GetExecutionHistory refuse it) comes from
        # the engine's own record, with its path, as its log group holds it on AWS
        [claimed] = found["executions"]
        ended = engine.wait(claimed["executionArn"])
        assert (claimed["role"], claimed["status"]) == ("claimed", ended.status)
        assert claimed["startDate"]
        assert claimed["path"] == ended.states_entered
        assert claimed["path"][-1] == "Failed"


def test_executions_of_an_express_processor_are_not_listed_on_a_stack() -> None:
    from onceflow.view import executions as viewer

    with audit_engine(**EXPRESS) as engine:
        # GIVEN an EXPRESS processor that ran once
        fail_once(engine, custom_event("listed express"))
        # WHEN its executions are listed as on a deployed stack (ListExecutions)
        with pytest.raises(viewer.StackError) as refused:
            viewer.list_deployed(LocalTarget(engine), 10)
        # THEN they are refused as AWS refuses them, and the reader is sent to the logs
        assert "This operation is not supported by this type of state machine" in str(refused.value)
        assert str(refused.value).endswith("it is EXPRESS, its executions are in its logs")
