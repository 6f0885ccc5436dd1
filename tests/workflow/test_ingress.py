"""Ingress: the EventBridge rules, the SQS pipe, idempotency keys per source, key decoding."""

from __future__ import annotations

import copy
import hashlib
import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote_plus

import pytest

from onceflow.local.engine import LocalEngine
from onceflow.local.samples import WrongEvent, prepare_event
from onceflow.local.template import TemplateError
from tests import sam_events
from tests.helpers import (
    MACHINE,
    attributes,
    dlq_messages,
    idempotency_key,
    ledger_row,
    ledger_rows,
    load_event,
    output_effects,
    s3_event,
    upload,
)


@pytest.fixture
def sqs_engine() -> Iterator[LocalEngine]:
    """The stack with a created source queue and SQS messages keyed by orderId."""
    parameters = {"SqsSource": "create", "IdempotencyKeyPath": "orderId"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as local:
        local.state.requests.clear()
        yield local


def _results(engine: LocalEngine, arns: list[str]) -> list[Any]:
    return [engine.wait(arn) for arn in arns]


def _queue_messages(engine: LocalEngine, logical_id: str) -> list[dict[str, Any]]:
    response = engine.client("sqs").receive_message(
        QueueUrl=engine.ref(logical_id),
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=0,
    )
    return list(response.get("Messages", []))


# ---- EventBridge: S3 Object Created -------------------------------------------


def test_object_created_rule_starts_the_processor(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/rule.png")
    [result] = _results(engine, engine.put_event(s3_event(engine, "uploads/rule.png", version)))
    assert result.outcome == "Processed"
    assert ledger_row(engine, idempotency_key(engine, "uploads/rule.png", version))["status"] == (
        "PROCESSED"
    )


def test_rule_ignores_other_buckets_and_other_events(engine: LocalEngine) -> None:
    other = s3_event(engine, "uploads/x.png", "v1")
    other["detail"]["bucket"]["name"] = "someone-elses-bucket"
    deleted = {**s3_event(engine, "uploads/x.png", "v1"), "detail-type": "Object Deleted"}
    assert engine.put_event(other) == []
    assert engine.put_event(deleted) == []


def test_a_deleted_target_sends_the_event_to_the_ingress_dlq(engine: LocalEngine) -> None:
    event = s3_event(engine, "uploads/lost.png", "v1")
    engine.client("stepfunctions").delete_state_machine(stateMachineArn=engine.ref(MACHINE))
    assert engine.put_event(event) == []
    [message] = _queue_messages(engine, "IngressDeadLetterQueue")
    assert json.loads(message["Body"]) == event  # nothing lost: the event itself
    attrs = attributes(message)
    # at once, without a retry: a target "that no longer exists" (eb-rule-dlq.html;
    # tests/workflow/test_rule_dead_letter.py)
    assert attrs["ERROR_CODE"] == "NO_RESOURCE" and attrs["RETRY_ATTEMPTS"] == "0"
    assert attrs["RULE_ARN"] == engine.get_att("ObjectCreatedRule", "Arn")
    assert attrs["TARGET_ARN"] == engine.ref(MACHINE)


def test_an_event_over_the_execution_input_limit_goes_to_the_ingress_dlq(
    engine: LocalEngine,
) -> None:
    event = engine_custom_event(engine, {"appointmentId": "a-1", "notes": "x" * 300_000})
    assert engine.put_event(event) == []  # Step Functions refuses inputs over 256 KiB
    [message] = _queue_messages(engine, "IngressDeadLetterQueue")
    assert attributes(message)["ERROR_CODE"] == "ValidationException"
    assert json.loads(message["Body"]) == event
    assert ledger_rows(engine) == []


# ---- EventBridge: custom events -----------------------------------------------


def engine_custom_event(engine: LocalEngine, detail: dict[str, Any]) -> dict[str, Any]:
    event = copy.deepcopy(load_event("eventbridge-custom-event.json"))
    event["detail"] = detail
    return event


def test_custom_events_are_keyed_on_the_event_id(engine: LocalEngine) -> None:
    event = load_event("eventbridge-custom-event.json")
    first = engine.wait(engine.put_event(event)[0])
    again = engine.wait(engine.put_event(event)[0])
    assert first.outcome == "Processed"
    assert again.outcome == "Duplicate"
    assert first.output["idempotencyKey"] == f"event:onceflow.work:{event['id']}"
    assert output_effects(engine) == 1


def test_custom_events_keyed_on_a_detail_path_discard_a_resend_with_a_new_id() -> None:
    parameters = {"CustomEventKeyPath": "appointmentId"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO()) as engine:
        engine.state.requests.clear()
        detail = {"appointmentId": "appt-9", "slot": "09:30"}
        [arn] = engine.put_custom_event("onceflow.work", "Appointment Requested", detail)
        first = engine.wait(arn)
        [arn] = engine.put_custom_event("onceflow.work", "Appointment Requested", detail)
        resent = engine.wait(arn)
        assert first.outcome == "Processed"
        assert resent.outcome == "Duplicate"  # one appointment, not two
        assert first.output["idempotencyKey"] == "event:onceflow.work:appt-9"
        assert output_effects(engine) == 1


# ---- SQS through the pipe -----------------------------------------------------


def _send(engine: LocalEngine, body: Any) -> None:
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("SourceQueue"),
        MessageBody=body if isinstance(body, str) else json.dumps(body),
    )


def test_pipe_discards_a_resent_business_message(sqs_engine: LocalEngine) -> None:
    order = {"orderId": "order-1001", "giftCards": 1}
    _send(sqs_engine, order)
    _send(sqs_engine, order)  # the producer re-sends: a new messageId, the same order
    results = _results(sqs_engine, sqs_engine.pump_pipes())
    assert sorted(r.outcome for r in results) == ["Duplicate", "Processed"]
    processed = next(r for r in results if r.outcome == "Processed")
    assert processed.output["idempotencyKey"] == "sqs:order-1001"
    assert output_effects(sqs_engine) == 1  # one gift card
    assert _queue_messages(sqs_engine, "SourceQueue") == []  # both deleted after the start
    row = ledger_row(sqs_engine, "sqs:order-1001")
    assert row is not None and row["status"] == "PROCESSED" and "message_id" in row


def test_without_a_key_path_each_message_id_is_its_own_unit_of_work(engine: LocalEngine) -> None:
    event = load_event("sqs-business-message.json")
    resent = copy.deepcopy(event)
    resent[0]["messageId"] = "another-message-id"
    first, second = engine.execute(MACHINE, event), engine.execute(MACHINE, resent)
    # The documented weakness of the messageId fallback: a re-send is new work.
    assert first.outcome == second.outcome == "Processed"
    assert output_effects(engine) == 2
    assert engine.execute(MACHINE, event).outcome == "Duplicate"


def test_pipe_carries_classic_s3_notifications(sqs_engine: LocalEngine) -> None:
    key = "uploads/from queue/photo 1+1.png"
    version = upload(sqs_engine, key)
    body = json.loads(load_event("sqs-s3-notification.json")[0]["body"])
    obj = body["Records"][0]["s3"]
    obj["bucket"]["name"] = sqs_engine.ref("IngestBucket")
    obj["object"].update({"key": quote_plus(key, safe="/"), "versionId": version})
    _send(sqs_engine, body)
    _send(sqs_engine, body)  # SQS delivers at least once
    results = _results(sqs_engine, sqs_engine.pump_pipes())
    assert sorted(r.outcome for r in results) == ["Duplicate", "Processed"]
    assert ledger_row(sqs_engine, idempotency_key(sqs_engine, key, version))["status"] == (
        "PROCESSED"
    )
    assert output_effects(sqs_engine) == 1


def test_the_s3_test_message_is_ignored(sqs_engine: LocalEngine) -> None:
    _send(sqs_engine, {"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})
    [result] = _results(sqs_engine, sqs_engine.pump_pipes())
    assert result.status == "SUCCEEDED"
    assert result.outcome == "Ignored"
    assert ledger_rows(sqs_engine) == [] and dlq_messages(sqs_engine) == []


def test_created_queue_refuses_messages_the_processor_could_not_take(
    sqs_engine: LocalEngine,
) -> None:
    with pytest.raises(Exception, match=r"MessageTooLong|InvalidParameterValue"):
        _send(sqs_engine, {"orderId": "big", "blob": "x" * 70_000})


def test_a_message_the_pipe_cannot_start_goes_to_the_source_dlq(sqs_engine: LocalEngine) -> None:
    # An existing queue may take up to 1 MiB; Step Functions takes 256 KiB.
    sqs = sqs_engine.client("sqs")
    sqs.set_queue_attributes(
        QueueUrl=sqs_engine.ref("SourceQueue"), Attributes={"MaximumMessageSize": "1048576"}
    )
    _send(sqs_engine, {"orderId": "big", "blob": "x" * 300_000})
    assert sqs_engine.pump_pipes() == []
    [message] = _queue_messages(sqs_engine, "SourceDeadLetterQueue")
    assert json.loads(message["Body"])["orderId"] == "big"  # intact: nothing lost
    assert _queue_messages(sqs_engine, "SourceQueue") == []
    assert ledger_rows(sqs_engine) == []


# ---- Idempotency keys: overwrite vs duplicate -----------------------------------


def test_versioned_overwrite_is_new_work_and_a_redelivery_is_a_duplicate(
    engine: LocalEngine,
) -> None:
    first = upload(engine, "uploads/same-key.png")
    second = upload(engine, "uploads/same-key.png")  # an overwrite: a new version
    outcomes = [
        engine.execute(MACHINE, s3_event(engine, "uploads/same-key.png", v)).outcome
        for v in (first, second, first)
    ]
    assert outcomes == ["Processed", "Processed", "Duplicate"]
    assert output_effects(engine) == 2


def test_unversioned_overwrite_is_new_work_and_a_redelivery_is_a_duplicate(
    engine: LocalEngine,
) -> None:
    upload(engine, "uploads/plain.png")
    # Without a version id the processor reads only the content the event names.
    etag = engine.client("s3").head_object(
        Bucket=engine.ref("IngestBucket"), Key="uploads/plain.png"
    )["ETag"]

    def event(sequencer: str) -> dict[str, Any]:
        e = copy.deepcopy(load_event("s3-object-created-unversioned.json"))
        e["detail"]["bucket"]["name"] = engine.ref("IngestBucket")
        e["detail"]["object"].update(
            {"key": "uploads/plain.png", "sequencer": sequencer, "etag": etag.strip('"')}
        )
        return e

    results = [engine.execute(MACHINE, event(s)) for s in ("0A01", "0A02", "0A01")]
    assert [r.outcome for r in results] == ["Processed", "Processed", "Duplicate"]
    assert results[0].output["idempotencyKey"].endswith("/uploads/plain.png#0A01")
    assert output_effects(engine) == 2


# ---- Object keys, decoded for each format ----------------------------------------

KEYS = {
    "space": "uploads/with space.png",
    "plus": "uploads/a+b.png",
    "percent": "uploads/100% done.png",
    "unicode": "uploads/café ☕ 日本.png",
    "quote-backslash": 'uploads/quote"back\\slash.png',
    "1024-bytes": "uploads/abcd" + "é" * 504 + ".png",  # 12 + 504 * 2 + 4 bytes
}


def test_keys_are_decoded_to_the_object_s3_holds(engine: LocalEngine) -> None:
    # (one stack for every key in both forms, each uploaded anew: they were a test each,
    # each starting an engine for one execution; a wrong one is reported by name)
    assert len(KEYS["1024-bytes"].encode("utf-8")) == 1024
    wrong = {}
    for form in ("eventbridge", "sqs-notification"):
        for name, key in KEYS.items():
            effects = output_effects(engine)
            version = upload(engine, key)
            encoded = quote_plus(key, safe="/")  # what S3 writes into its events
            if form == "eventbridge":
                event: Any = s3_event(engine, encoded, version)
            else:
                event = load_event("sqs-s3-notification.json")
                body = json.loads(event[0]["body"])
                body["Records"][0]["s3"]["bucket"]["name"] = engine.ref("IngestBucket")
                body["Records"][0]["s3"]["object"].update({"key": encoded, "versionId": version})
                event[0]["body"] = json.dumps(body)
            result = engine.execute(MACHINE, event)
            found = (
                result.outcome,
                result.output and result.output.get("idempotencyKey"),
                output_effects(engine) - effects,  # the processor read it under its real key
            )
            if found != ("Processed", idempotency_key(engine, key, version), 1):
                wrong[f"{form}-{name}"] = (found, result.cause)
    assert wrong == {}


def test_fields_of_the_wrong_type_never_reach_the_ledger_write(engine: LocalEngine) -> None:
    # A malformed size or a null version id must not make Claim fail (the pipe
    # has deleted the message by then): they are left out of the ledger row.
    key = "uploads/odd-fields.png"
    upload(engine, key)
    event = load_event("sqs-s3-notification.json")
    body = json.loads(event[0]["body"])
    body["Records"][0]["s3"]["bucket"]["name"] = engine.ref("IngestBucket")
    body["Records"][0]["s3"]["object"].update(
        {"key": key, "size": "big", "versionId": None, "eTag": 7, "sequencer": "0B01"}
    )
    event[0]["body"] = json.dumps(body)
    result = engine.execute(MACHINE, event)
    assert result.outcome == "Processed", result.cause
    row = ledger_row(engine, f"s3://{engine.ref('IngestBucket')}/{key}#0B01")
    assert row is not None and "size" not in row and "etag" not in row


def test_a_direct_work_item_keys_on_strings_only(engine: LocalEngine) -> None:
    version = upload(engine, "uploads/direct.png")
    item = {"bucket": engine.ref("IngestBucket"), "key": "uploads/direct.png"}
    result = engine.execute(
        MACHINE, {"workItem": {**item, "versionId": version, "idempotencyKey": 5}}
    )
    assert result.outcome == "Processed", result.cause
    assert result.output["idempotencyKey"] == idempotency_key(engine, "uploads/direct.png", version)


# ---- The events SAM users already have (sam local generate-event) ------------------


def _run_as_the_cli_does(engine: LocalEngine, event: Any) -> Any:
    prepared, _ = prepare_event(engine, event, target=MACHINE)
    return engine.execute(MACHINE, prepared)


def test_a_prepared_messages_md5_of_body_is_its_new_bodys(engine: LocalEngine) -> None:
    # GIVEN the sample SQS message of an S3 notification, and a classic notification
    for event in (load_event("sqs-s3-notification.json"), sam_events.generate("s3", "put")):
        # WHEN it is prepared for this stack (its bucket and version change in the body)
        prepared, _ = prepare_event(engine, copy.deepcopy(event), target=MACHINE)
        (message,) = prepared
        assert engine.ref("IngestBucket") in message["body"]
        # THEN md5OfBody is the MD5 of the body it now has, in UTF-8, as SQS computes it
        # (API_ReceiveMessage.html: MD5OfBody, "An MD5 digest of the non-URL-encoded
        # message body string")
        digest = hashlib.md5(message["body"].encode("utf-8"), usedforsecurity=False)
        assert message["md5OfBody"] == digest.hexdigest()


def test_sams_s3_put_event_is_the_same_work_item_as_the_eventbridge_event(
    engine: LocalEngine,
) -> None:
    # GIVEN `sam local generate-event s3 put`: a classic notification of an object
    # without a version id, in SAM's placeholder bucket
    notification = sam_events.generate("s3", "put")
    assert notification["Records"][0]["s3"]["bucket"]["name"] == "example-bucket"
    # WHEN it runs on the processor as the local CLI runs it (as the pipe delivers it)
    event, notes = prepare_event(engine, notification, target=MACHINE)
    first = engine.execute(MACHINE, event)
    # THEN it is processed, keyed on the object and its sequencer
    assert first.outcome == "Processed", first.cause
    s3 = json.loads(event[0]["body"])["Records"][0]["s3"]
    assert first.output["idempotencyKey"] == (
        f"s3://{engine.ref('IngestBucket')}/test/key#{s3['object']['sequencer']}"
    )
    assert any("example-bucket stands for" in note for note in notes)
    # WHEN EventBridge then delivers the Object Created event of the same object
    created = copy.deepcopy(load_event("s3-object-created-unversioned.json"))
    created["detail"]["bucket"]["name"] = engine.ref("IngestBucket")
    created["detail"]["object"].update(
        {"key": "test/key", "etag": s3["object"]["eTag"], "sequencer": s3["object"]["sequencer"]}
    )
    again = engine.execute(MACHINE, created)
    # THEN it is the same work item: the same key, discarded as a duplicate
    assert again.outcome == "Duplicate"
    assert again.output["idempotencyKey"] == first.output["idempotencyKey"]
    assert output_effects(engine) == 1


def test_sams_sqs_event_is_read_as_the_pipes_messages(sqs_engine: LocalEngine) -> None:
    # GIVEN `sam local generate-event sqs receive-message` carrying an order
    event = sam_events.generate("sqs", "receive-message", "--body", '{\\"orderId\\": \\"o-7\\"}')
    # WHEN it runs on the processor, and a resend of the order with another messageId
    first = _run_as_the_cli_does(sqs_engine, event)
    event["Records"][0]["messageId"] = "another-message-id"
    resent = _run_as_the_cli_does(sqs_engine, event)
    # THEN its record was the pipe's message: keyed on the order, once
    assert first.outcome == "Processed", first.cause
    assert first.output["idempotencyKey"] == "sqs:o-7"
    assert resent.outcome == "Duplicate"
    assert output_effects(sqs_engine) == 1


def test_sams_sqs_event_with_several_records_names_the_sample(engine: LocalEngine) -> None:
    # GIVEN a Lambda-style SQS event holding two messages
    event = sam_events.generate("sqs", "receive-message")
    event["Records"].append({**event["Records"][0], "messageId": "second"})
    # WHEN it is prepared for the processor (one message per execution)
    # THEN it is refused with the sample that shows one message
    with pytest.raises(WrongEvent, match=r"2 records.*events/sqs-s3-notification\.json"):
        prepare_event(engine, event, target=MACHINE)


# ---- The roles EventBridge and the pipe act as -----------------------------------


def _without_start(engine: LocalEngine, role_id: str) -> None:
    """The template's role_id without the statement that lets it start the processor, as
    a user's template might leave it out (before the engine starts)."""
    for policy in engine.stack.template["Resources"][role_id]["Properties"]["Policies"]:
        statements = policy["PolicyDocument"]["Statement"]
        statements[:] = [s for s in statements if "states:" not in json.dumps(s.get("Action"))]


def test_a_rule_whose_role_may_not_start_the_processor_dead_letters_the_event() -> None:
    # GIVEN a template whose rules' role (IngressRole) lacks states:StartExecution
    engine = LocalEngine(function_log=io.StringIO())
    _without_start(engine, "IngressRole")
    with engine:
        version = upload(engine, "uploads/no-role.png")
        event = s3_event(engine, "uploads/no-role.png", version)
        # WHEN the rule delivers an upload
        assert engine.put_event(event) == []
        # THEN nothing starts, and the event is in the ingress DLQ, whole (not lost)
        [message] = _queue_messages(engine, "IngressDeadLetterQueue")
        assert json.loads(message["Body"]) == event
        # at once, without a retry: "missing permissions to a target" (eb-rule-dlq.html;
        # tests/workflow/test_rule_dead_letter.py)
        assert attributes(message)["ERROR_CODE"] == "NO_PERMISSIONS"
        assert attributes(message)["RETRY_ATTEMPTS"] == "0"
        assert "states:StartExecution" in attributes(message)["ERROR_MESSAGE"]
        assert ledger_rows(engine) == []


def test_a_pipe_whose_role_may_not_start_the_processor_leaves_the_message_for_its_dlq() -> None:
    # GIVEN a template whose pipe role lacks states:StartExecution
    parameters = {"SqsSource": "create", "IdempotencyKeyPath": "orderId"}
    engine = LocalEngine(parameters=parameters, function_log=io.StringIO())
    _without_start(engine, "PipeRole")
    with engine:
        _send(engine, {"orderId": "no-role"})
        # WHEN the pipe polls THEN nothing starts, and the message, retried, ends in the
        # source queue's DLQ (its redrive policy), intact
        assert engine.pump_pipes() == []
        [message] = _queue_messages(engine, "SourceDeadLetterQueue")
        assert json.loads(message["Body"])["orderId"] == "no-role"
        assert ledger_rows(engine) == []


@pytest.mark.parametrize("action", ["ReceiveMessage", "DeleteMessage", "GetQueueAttributes"])
def test_a_pipe_whose_role_may_not_read_its_queue_is_refused_at_start(action: str) -> None:
    # GIVEN a template whose pipe role lacks one of the SQS source's three permissions
    # (eb-pipes-permissions.html, "Amazon SQS execution role permissions")
    parameters = {"SqsSource": "create", "IdempotencyKeyPath": "orderId"}
    engine = LocalEngine(parameters=parameters, function_log=io.StringIO())
    for policy in engine.stack.template["Resources"]["PipeRole"]["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            if isinstance(statement.get("Action"), list) and f"sqs:{action}" in statement["Action"]:
                statement["Action"].remove(f"sqs:{action}")
    # WHEN the engine starts THEN it is refused as AWS fails to create such a pipe
    # (CREATE_FAILED: "The provided customer role does not have permissions to call
    # ReceiveMessage on SQS"), naming the pipe and the call
    with pytest.raises(TemplateError, match=rf"SourcePipe: .*permissions to call {action} on SQS"):
        engine.start()
