"""An EventBridge rule's failed delivery, dead-lettered as EventBridge does.

AWS (EventBridge User Guide, "Event retry policy and using dead-letter queues",
eb-rule-dlq.html): "Some events are dropped or sent to a DLQ without any retry attempts.
For example, for errors that result from missing permissions to a target, or a target
resource that no longer exists, all retry attempts fail until an action is taken to
resolve the underlying issue. Rather than retrying, EventBridge sends these events
directly to the DLQ". Each DLQ message carries RULE_ARN, TARGET_ARN, ERROR_CODE (one of
the page's list: NO_PERMISSIONS, NO_RESOURCE, THROTTLING, ...), ERROR_MESSAGE,
EXHAUSTED_RETRY_CONDITION and RETRY_ATTEMPTS. EventBridge retries 5xx and 429 answers,
no other 4xx (AWS re:Post knowledge center, eventbridge-resolve-failedinvocation-errors).

The rule's role refused and its state machine deleted: tests/workflow/test_ingress.py;
its queue deleted: tests/workflow/test_s3_batch_mode.py.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from onceflow.local.errors import EngineError
from onceflow.local.template import TemplateError
from tests.helpers import attributes, load_event, upload
from tests.workflow.test_ingress import _queue_messages


def _dead_letter(engine: LocalEngine) -> dict[str, str]:
    [message] = _queue_messages(engine, "IngressDeadLetterQueue")
    return attributes(message)


@pytest.fixture
def queued_engine() -> Iterator[LocalEngine]:
    """The batch mode: the rules deliver to the source queue (an SQS target)."""
    parameters = {"SqsBatchMode": "true", "ProcessorTimeoutSeconds": "40"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local:
        yield local


def _unavailable(queue_url: str) -> Any:
    """SQS answering SendMessage to queue_url 503, as when it is briefly unavailable."""

    def fault(service: str, operation: str, body: str) -> Any:
        if service != "sqs" or operation != "SendMessage" or queue_url not in body:
            return None
        error = {"__type": "com.amazonaws.sqs#ServiceUnavailable", "message": "injected"}
        headers = {
            "x-amzn-RequestId": str(uuid.uuid4()),
            "Content-Type": "application/x-amz-json-1.0",
        }
        return 503, headers, json.dumps(error)

    return fault


def test_an_error_eventbridge_retries_is_dead_lettered_after_the_rules_retries(
    queued_engine: LocalEngine,
) -> None:
    # GIVEN the rule's target queue answering 503, an error EventBridge retries
    engine = queued_engine
    version = upload(engine, "uploads/busy.png")
    unavailable = _unavailable(engine.ref("SourceQueue"))
    engine.state.faults.append(unavailable)
    try:
        # WHEN the rule delivers the upload's event
        engine.put_s3_event(engine.ref("IngestBucket"), "uploads/busy.png", version)
    finally:
        engine.state.faults.remove(unavailable)
    # THEN it is dead-lettered after the target's RetryPolicy (the template's 185), the
    # engine taking the retries to fail as the first did
    dead = _dead_letter(engine)
    assert dead["RETRY_ATTEMPTS"] == "185"
    assert dead["ERROR_CODE"] == "ServiceUnavailable"


def _without_events_grant(engine: LocalEngine, policy_id: str) -> None:
    """The template's queue policy policy_id without its grant to EventBridge, as a
    user's template might leave it out (before the engine starts)."""
    document = engine.stack.template["Resources"][policy_id]["Properties"]["PolicyDocument"]
    statements = document["Statement"]
    statements[:] = [s for s in statements if "events.amazonaws.com" not in json.dumps(s)]


def test_a_queue_target_whose_policy_lets_eventbridge_not_send_dead_letters_at_once() -> None:
    # GIVEN the batch mode's source queue, its policy without the statement that lets the
    # rules send to it (on AWS an SQS target needs the queue's policy to let
    # events.amazonaws.com sqs:SendMessage: eb-use-resource-based.html, "Amazon SQS
    # permissions")
    parameters = {"SqsBatchMode": "true", "ProcessorTimeoutSeconds": "40"}
    engine = LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0)
    _without_events_grant(engine, "SourceQueuePolicy")
    with engine:
        version = upload(engine, "uploads/no-grant.png")
        # WHEN the rule delivers the upload's event
        engine.put_s3_event(engine.ref("IngestBucket"), "uploads/no-grant.png", version)
        # THEN the queue got nothing, and the event is in the ingress DLQ at once, as a
        # missing permission's event is (eb-rule-dlq.html)
        assert _queue_messages(engine, "SourceQueue") == []
        dead = _dead_letter(engine)
        assert dead["ERROR_CODE"] == "NO_PERMISSIONS" and dead["RETRY_ATTEMPTS"] == "0"
        assert dead["TARGET_ARN"] == engine.get_att("SourceQueue", "Arn")


def test_a_dead_letter_queue_whose_policy_lets_eventbridge_not_send_loses_the_event_loudly() -> (
    None
):
    # GIVEN the ingress DLQ's policy without its grant to the rules
    engine = LocalEngine(function_log=io.StringIO(), time_scale=0.0)
    _without_events_grant(engine, "IngressDeadLetterQueuePolicy")
    with engine:
        engine.client("stepfunctions").delete_state_machine(
            stateMachineArn=engine.ref("ProcessorStateMachine")
        )
        # WHEN a rule's delivery fails
        # THEN on AWS the event is dropped (the InvocationsFailedToBeSentToDLQ metric,
        # eb-rule-dlq.html): the engine stops the delivery saying so, not a DLQ message
        # AWS would never have written
        with pytest.raises(EngineError, match="dropped"):
            engine.put_event(load_event("eventbridge-custom-event.json"))
        assert _queue_messages(engine, "IngressDeadLetterQueue") == []


def test_a_scheduled_rule_takes_no_event_from_the_bus() -> None:
    # GIVEN a template with a rule on a schedule (ScheduleExpression, no EventPattern) that
    # starts the processor too: on AWS it runs on its schedule and matches no event
    # ("Rules with EventPatterns are triggered when a matching event is observed. Rules
    # with ScheduleExpressions self-trigger based on the given schedule.": PutRule API
    # reference)
    engine = LocalEngine(function_log=io.StringIO(), time_scale=0.0)
    role = {"Fn::GetAtt": ["IngressRole", "Arn"]}
    target = {"Id": "nightly", "Arn": {"Ref": "ProcessorStateMachine"}, "RoleArn": role}
    schedule = {"ScheduleExpression": "rate(1 day)", "State": "ENABLED", "Targets": [target]}
    engine.stack.template["Resources"]["NightlyRule"] = {
        "Type": "AWS::Events::Rule",
        "Properties": schedule,
    }
    with engine:
        version = upload(engine, "uploads/once.png")
        # WHEN an upload's event is on the default bus
        started = engine.put_s3_event(engine.ref("IngestBucket"), "uploads/once.png", version)
        # THEN only the rule whose pattern matches it starts an execution
        assert len(started) == 1


@pytest.mark.parametrize(
    "shaping",
    [
        {"Input": '{"workItem": {}}'},
        {"InputPath": "$.detail"},
        {"InputTransformer": {"InputPathsMap": {}, "InputTemplate": '{"a": 1}'}},
    ],
)
def test_a_rule_target_that_shapes_its_input_is_refused_rather_than_given_the_event(
    shaping: dict[str, Any],
) -> None:
    # GIVEN a rule whose target sends the processor a constant, a part of the event or a
    # transformed event, not the event (AWS::Events::Rule Target: Input, InputPath,
    # InputTransformer), which the engine does not emulate
    engine = LocalEngine(function_log=io.StringIO(), time_scale=0.0)
    resources = engine.stack.template["Resources"]
    resources["ObjectCreatedRule"]["Properties"]["Targets"][0].update(shaping)
    # WHEN the engine starts THEN it refuses in one line, rather than hand the processor
    # the whole event where AWS hands it something else
    with pytest.raises(TemplateError, match=f"ObjectCreatedRule.*{next(iter(shaping))}"):
        engine.start()
