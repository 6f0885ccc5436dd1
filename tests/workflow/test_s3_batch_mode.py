"""SqsBatchMode for S3 (and custom) events: the rule sends each event to the stack's
source queue, and the pipe runs the batch workflow on batches of them.

The queue carries EventBridge's event as the message body (an SQS target gets the
event itself when the target names no InputPath or transformer: eb-targets.html);
Claim reads it with the same function as from the rule, so an upload keys the same
ledger row whichever path delivered it. Every failure is injected for real: a
processor that raises on a poison object, an event the rule never sent, a queue that
is gone.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    MACHINE,
    attributes,
    dlq_messages,
    idempotency_key,
    invocations,
    ledger_row,
    ledger_rows,
    output_effects,
    png_bytes,
    run_audit,
    s3_event,
    upload,
)
from tests.workflow import test_existing_bucket as existing_bucket
from tests.workflow.test_batch_mode import outcomes, queued

BATCH = "BatchProcessorStateMachine"
# SqsBatchMode alone: no SqsSource, the EXPRESS limits the template's rule asks for.
PARAMETERS = {
    "SqsBatchMode": "true",
    "ProcessorTimeoutSeconds": "40",
    "AuditRecentCutoffHours": "0",  # the audit judges objects seconds old
}
HOSTILE_KEYS = [
    "uploads/a b.png",
    "uploads/a+b.png",
    "uploads/100%25 real%.png",
    "uploads/é 😀 ü/猫.png",
    "uploads/" + "k" * (1024 - len("uploads/") - len(".png")) + ".png",  # S3's longest key
]


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(parameters=PARAMETERS, function_log=io.StringIO(), time_scale=0.0) as local:
        local.state.requests.clear()
        yield local


def deliver(engine: LocalEngine, key: str, version: str) -> None:
    """S3's Object Created event of an upload, as the default bus delivers it: in the
    batch mode the rule sends it to the queue and starts nothing."""
    started = engine.put_s3_event(engine.ref("IngestBucket"), key, version)
    assert started == [], "the rule started an execution: its target must be the queue"


def pump(engine: LocalEngine) -> list[dict[str, Any]]:
    """Run the pipe until the queue is drained; every message's outcome, in order."""
    found: list[dict[str, Any]] = []
    for arn in engine.pump_pipes():
        assert engine.wait(arn).status == "SUCCEEDED"
        found += outcomes(engine, arn).values()
    return found


# ---- the path ---------------------------------------------------------------------


def test_uploads_reach_the_batch_workflow_through_the_queue_and_are_processed_once(
    engine: LocalEngine,
) -> None:
    # GIVEN three uploads and their events, which the rule sends to the source queue
    uploads = {f"uploads/{n}.png": "" for n in range(3)}
    for key in uploads:
        uploads[key] = upload(engine, key)
        deliver(engine, key, uploads[key])
    assert len(queued(engine)) == 3
    # WHEN the pipe runs
    arns = engine.pump_pipes()
    # THEN one batch execution took all three, processed each once, and drained the queue
    assert len(arns) == 1 and len(engine.wait(arns[0]).input) == 3
    assert {o["outcome"] for o in outcomes(engine, arns[0]).values()} == {"Processed"}
    assert queued(engine) == {}
    # AND each row is keyed as the direct path keys it (bucket, key, version id)
    for key, version in uploads.items():
        row = ledger_row(engine, idempotency_key(engine, key, version))
        assert row is not None and row["status"] == "PROCESSED", key
        assert (row["source"], row["object_key"], row["version_id"]) == ("s3", key, version)
        assert "message_id" not in row  # the same row as the direct path writes
    assert output_effects(engine) == 3 and invocations(engine) == 3
    assert dlq_messages(engine) == []


@pytest.mark.parametrize("first", ["queue", "direct"])
def test_a_duplicate_through_the_other_path_is_a_duplicate(engine: LocalEngine, first: str) -> None:
    # GIVEN an upload delivered once through one path (the direct one: the rule before a
    # switch to the batch mode, or the audit's resubmission)
    version = upload(engine, "uploads/twice.png")
    event = s3_event(engine, "uploads/twice.png", version)
    pk = idempotency_key(engine, "uploads/twice.png", version)

    def through_queue() -> str:
        engine.client("sqs").send_message(
            QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps(event)
        )
        [outcome] = pump(engine)
        return str(outcome["outcome"])

    def direct() -> str:
        return str(engine.execute(MACHINE, event).outcome)

    paths = {"queue": through_queue, "direct": direct}
    second = "direct" if first == "queue" else "queue"
    # WHEN it is delivered again through the other
    assert paths[first]() == "Processed"
    assert paths[second]() == "Duplicate"
    # THEN one effect, one processor call, one row, and the queue holds nothing
    assert output_effects(engine) == 1 and invocations(engine) == 1
    assert [r["pk"] for r in ledger_rows(engine)] == [pk]
    assert queued(engine) == {} and dlq_messages(engine) == []


def test_duplicates_in_one_batch_and_in_the_next_make_one_effect(engine: LocalEngine) -> None:
    # GIVEN an upload whose event arrives twice at once (one batch), then once more later
    version = upload(engine, "uploads/dup.png")
    deliver(engine, "uploads/dup.png", version)
    deliver(engine, "uploads/dup.png", version)
    first = pump(engine)
    deliver(engine, "uploads/dup.png", version)
    later = pump(engine)
    # THEN one was processed and the other was its duplicate; a duplicate of work still
    # in flight stays in the queue (retry) and comes back with the later one, settled
    assert sorted(o["outcome"] for o in first) == ["Duplicate", "Processed"]
    kept = [o for o in first if o["retry"]]
    assert len(later) == 1 + len(kept)
    assert all(o["outcome"] == "Duplicate" and not o["retry"] for o in later)
    assert output_effects(engine) == 1 and queued(engine) == {}


def test_hostile_keys_key_the_same_row_through_the_queue_as_directly(
    engine: LocalEngine,
) -> None:
    # (one stack for every key: they were a test each, each starting an engine; a wrong
    # one is reported by its key, with the others)
    wrong = {}
    for n, key in enumerate(HOSTILE_KEYS, start=1):
        # GIVEN an upload whose key S3 URL-encodes in its event (a space as +)
        version = upload(engine, key)
        deliver(engine, key, version)
        # WHEN the pipe runs it, then the same upload's event starts the processor directly
        [outcome] = pump(engine)
        direct = engine.execute(MACHINE, s3_event(engine, _encoded(key), version))
        # THEN the queue's row names the key as S3 holds it, and the direct one is its
        # duplicate: one effect and one row more for each key
        row = ledger_row(engine, idempotency_key(engine, key, version)) or {}
        found = (
            outcome["outcome"],
            row.get("object_key") == key,
            row.get("status"),
            direct.outcome,
            output_effects(engine),
            len(ledger_rows(engine)),
        )
        if found != ("Processed", True, "PROCESSED", "Duplicate", n, n):
            wrong[key[:40]] = found
    assert wrong == {}


def _encoded(key: str) -> str:
    """A key as S3's events carry it (the engine's put_s3_event encodes alike)."""
    from urllib.parse import quote_plus

    return quote_plus(key, safe="/")


# ---- what goes wrong ----------------------------------------------------------------


def test_a_lost_event_is_found_by_the_audit_and_its_late_arrival_is_a_duplicate(
    engine: LocalEngine,
) -> None:
    # GIVEN two uploads; the event of one never reaches the queue
    kept = upload(engine, "uploads/kept.png")
    lost = upload(engine, "uploads/lost.png")
    deliver(engine, "uploads/kept.png", kept)
    pump(engine)
    # WHEN the audit runs
    report = run_audit(engine).output
    # THEN it resubmitted the lost one alone, and it was processed
    assert report["missing_resubmitted"] == 1
    assert report["resubmitted_sample"] == [idempotency_key(engine, "uploads/lost.png", lost)]
    row = ledger_row(engine, idempotency_key(engine, "uploads/lost.png", lost))
    assert row is not None and row["status"] == "PROCESSED"
    # AND when the lost event turns up after all, the batch workflow finds it done
    deliver(engine, "uploads/lost.png", lost)
    assert [o["outcome"] for o in pump(engine)] == ["Duplicate"]
    assert output_effects(engine) == 2 and queued(engine) == {}


def test_a_poison_object_is_dead_lettered_once_however_often_its_event_comes(
    engine: LocalEngine,
) -> None:
    # GIVEN an upload the bundled processor cannot read (not an image: a PermanentError)
    version = upload(engine, "uploads/poison.png", b"not an image")
    # WHEN its event comes through the queue three times
    seen = []
    for _ in range(3):
        deliver(engine, "uploads/poison.png", version)
        seen += [o["outcome"] for o in pump(engine)]
    # THEN it was dead-lettered once, every message settled, the row marked so
    assert seen[0] == "DeadLettered" and seen[1:] == ["Duplicate", "Duplicate"]
    [message] = dlq_messages(engine)
    pk = idempotency_key(engine, "uploads/poison.png", version)
    assert attributes(message)["IDEMPOTENCY_KEY"] == pk
    assert attributes(message)["EXHAUSTED_RETRY_CONDITION"] == "PermanentError"
    row = ledger_row(engine, pk)
    assert row is not None and row["status"] == "FAILED" and "dead_lettered_at" in row
    assert queued(engine) == {} and output_effects(engine) == 0
    # AND the audit does not take it back
    assert run_audit(engine).output["missing_resubmitted"] == 0
    assert len(dlq_messages(engine)) == 1


def test_an_event_for_another_bucket_in_the_queue_is_an_invalid_event(
    engine: LocalEngine,
) -> None:
    # GIVEN an EventBridge S3 event of a bucket this stack does not process, in the queue
    event = s3_event(engine, "uploads/x.png", "v1")
    event["detail"]["bucket"]["name"] = "someone-elses-bucket"
    engine.client("sqs").send_message(
        QueueUrl=engine.ref("SourceQueue"), MessageBody=json.dumps(event)
    )
    # WHEN the pipe runs it
    [outcome] = pump(engine)
    # THEN the same check as the direct path refused it: no row, no call, one DLQ message
    assert outcome["outcome"] == "InvalidEvent" and not outcome["retry"]
    assert ledger_rows(engine) == [] and invocations(engine) == 0
    [message] = dlq_messages(engine)
    assert "someone-elses-bucket is not the ingest bucket" in attributes(message)["ERROR_MESSAGE"]
    assert queued(engine) == {}


def test_an_event_the_queue_cannot_take_goes_to_the_ingress_dlq(engine: LocalEngine) -> None:
    # GIVEN the source queue is gone (deleted by hand)
    sqs = engine.client("sqs")
    sqs.delete_queue(QueueUrl=engine.ref("SourceQueue"))
    # WHEN an upload's event arrives
    version = upload(engine, "uploads/nowhere.png")
    engine.put_s3_event(engine.ref("IngestBucket"), "uploads/nowhere.png", version)
    # THEN EventBridge dead-letters it on the rule's ingress DLQ, with its reason
    [message] = sqs.receive_message(
        QueueUrl=engine.ref("IngressDeadLetterQueue"),
        MessageAttributeNames=["All"],
        MaxNumberOfMessages=10,
    )["Messages"]
    assert json.loads(message["Body"])["detail"]["object"]["key"] == "uploads/nowhere.png"
    # at once, without a retry: a target "that no longer exists" (eb-rule-dlq.html)
    assert attributes(message)["ERROR_CODE"] == "NO_RESOURCE"
    assert attributes(message)["RETRY_ATTEMPTS"] == "0"
    queue = engine.get_att("SourceQueue", "QueueName")
    assert attributes(message)["TARGET_ARN"].endswith(f":{queue}")


def test_custom_events_go_through_the_queue_keyed_as_directly(engine: LocalEngine) -> None:
    # GIVEN the configured custom event, which the batch mode also sends to the queue
    assert engine.put_custom_event("onceflow.work", "Work", {"order": 7}) == []
    [body] = queued(engine).values()
    event = json.loads(body)
    # WHEN the pipe runs it, and the same event then starts the processor directly
    [outcome] = pump(engine)
    direct = engine.execute(MACHINE, event)
    # THEN it was processed once, under the key the direct path gives it
    assert outcome["outcome"] == "Processed"
    assert [r["pk"] for r in ledger_rows(engine)] == [f"event:onceflow.work:{event['id']}"]
    assert direct.outcome == "Duplicate" and invocations(engine) == 1


# ---- the user's bucket, versioned or not ----------------------------------------------


@pytest.fixture(params=["Enabled", None], ids=["versioned", "unversioned"])
def users_bucket(request: pytest.FixtureRequest) -> Iterator[LocalEngine]:
    parameters = {**existing_bucket.PARAMETERS, **PARAMETERS, "RetentionDays": "30"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local:
        existing_bucket.make_users_bucket(local, request.param)
        existing_bucket.turn_on_eventbridge(local)
        yield local


def test_the_users_bucket_under_its_filter_exactly_once_through_the_queue(
    users_bucket: LocalEngine,
) -> None:
    bucket = existing_bucket.BUCKET
    under, outside, lost = existing_bucket.UNDER, existing_bucket.OUTSIDE, existing_bucket.LOST
    # GIVEN uploads under and outside KeyPrefix/KeySuffix; every event sent (the first
    # twice), but LOST's
    for key in [*under, lost, *outside]:
        version = existing_bucket.put(users_bucket, key)
        if key != lost:
            assert users_bucket.put_s3_event(bucket, key, version) == []
    users_bucket.put_s3_event(bucket, under[0])
    # THEN the rule's filter let only the keys under it into the queue
    bodies = list(queued(users_bucket).values())
    assert len(bodies) == len(under) + 1
    # WHEN the pipe runs (twice: a duplicate of work in flight comes back once settled),
    # and one of those events then starts the processor directly
    pump(users_bucket)
    assert {o["outcome"] for o in pump(users_bucket)} <= {"Duplicate"}
    direct = users_bucket.execute(MACHINE, json.loads(bodies[-1]))
    # THEN that is a duplicate (versioned: keyed by version id; unversioned: by sequencer),
    # and each object has one effect
    assert direct.outcome == "Duplicate"
    assert existing_bucket.effects_by_object(users_bucket) == Counter(dict.fromkeys(under, 1))
    # WHEN the audit runs once the queue can no longer hold LOST's event (28.5 days)
    existing_bucket.age_uploads(users_bucket, days=29)
    report = run_audit(users_bucket).output
    # THEN it resubmitted LOST alone, and every object under the filter has one effect
    assert report["missing_resubmitted"] == 1
    effects = existing_bucket.effects_by_object(users_bucket)
    assert effects == Counter(dict.fromkeys([*under, lost], 1))
    assert dlq_messages(users_bucket) == [] and queued(users_bucket) == {}


def test_the_same_png_twice_is_two_uploads(engine: LocalEngine) -> None:
    # GIVEN the same bytes uploaded twice under one key (two versions: new work each)
    first = upload(engine, "uploads/same.png", png_bytes())
    second = upload(engine, "uploads/same.png", png_bytes())
    deliver(engine, "uploads/same.png", first)
    deliver(engine, "uploads/same.png", second)
    # THEN both are processed: the key holds the version
    outcomes_seen = sorted(o["outcome"] for o in pump(engine))
    assert outcomes_seen in (["Processed", "Processed"], ["Processed", "Superseded"])
    assert len(ledger_rows(engine)) == 2


# ---- onceflow doctor ------------------------------------------------------------------


def test_doctor_expects_the_rules_to_target_the_queue_and_says_how_to_fix_it() -> None:
    from onceflow import ops
    from onceflow.local.wiring import LocalStack

    # GIVEN a healthy stack in the batch mode for S3 (a stack name of its own)
    # (AlarmEmail: a subscribed destination for the alarms, which moto confirms at once)
    parameters = {**PARAMETERS, "AlarmEmail": "ops@example.com"}
    with LocalEngine(
        parameters=parameters, function_log=io.StringIO(), time_scale=0.0, stack_name="s3batch"
    ) as engine:
        stack = LocalStack(engine)
        ops.run_audit(stack)
        assert [f for f in ops.examine(stack) if f.status != ops.PASS] == []
        rule = str(engine.rules["ObjectCreatedRule"]["name"])
        # WHEN the rule's target is pointed back at the processor (as before the mode)
        events = stack.client("events")
        [target] = events.list_targets_by_rule(Rule=rule)["Targets"]
        events.put_targets(
            Rule=rule, Targets=[{**target, "Arn": stack.output("ProcessorStateMachineArn")}]
        )
        # THEN that is the one FAIL, naming the queue the rule should send to
        [failed] = [f for f in ops.examine(stack) if f.status == ops.FAIL]
        assert failed.check == "rule ObjectCreatedRule"
        assert "does not target the source queue" in failed.detail
        assert engine.get_att("SourceQueue", "QueueName") in failed.detail


def test_a_custom_event_over_the_queues_largest_message_goes_to_the_ingress_dlq(
    engine: LocalEngine,
) -> None:
    # GIVEN the created queue's largest message in the batch mode (a whole batch must
    # fit Step Functions' 256 KiB input: 11 KiB at SqsBatchSize 10)
    sqs = engine.client("sqs")
    limit = int(
        sqs.get_queue_attributes(
            QueueUrl=engine.ref("SourceQueue"), AttributeNames=["MaximumMessageSize"]
        )["Attributes"]["MaximumMessageSize"]
    )
    assert limit == 11_264
    # WHEN a custom event larger than that is put on the bus
    engine.put_custom_event("onceflow.work", "Work", {"blob": "x" * limit})
    # THEN SQS refuses it, and EventBridge dead-letters it on the ingress DLQ, alarmed
    assert queued(engine) == {}
    [message] = sqs.receive_message(
        QueueUrl=engine.ref("IngressDeadLetterQueue"), MessageAttributeNames=["All"]
    )["Messages"]
    assert json.loads(message["Body"])["detail"]["blob"] == "x" * limit
    assert attributes(message)["RULE_ARN"].endswith(str(engine.rules["CustomEventRule"]["name"]))


def test_onceflow_execute_runs_an_eventbridge_sample_as_the_queues_message(
    engine: LocalEngine,
) -> None:
    from onceflow.local.samples import prepare_event
    from tests.helpers import load_event

    # GIVEN events/s3-object-created.json, given to the batch workflow (as `onceflow
    # execute BatchProcessorStateMachine -e` does)
    event, notes = prepare_event(engine, load_event("s3-object-created.json"), target=BATCH)
    # THEN it runs as the one message the rule sends to the queue, its body the event
    [message] = event
    body = json.loads(message["body"])
    assert body["source"] == "aws.s3" and message["eventSource"] == "aws:sqs"
    assert notes[-1].startswith("an EventBridge event: run as the message")
    result = engine.execute(BATCH, event)
    assert [o["outcome"] for o in outcomes(engine, result.arn).values()] == ["Processed"]
    version = body["detail"]["object"]["version-id"]
    row = ledger_row(engine, idempotency_key(engine, "uploads/cat.png", version))
    assert row is not None and row["status"] == "PROCESSED"
