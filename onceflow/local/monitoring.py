"""The stack's alarms, their topic and its subscriptions, and the audit's schedule, in moto.

Nothing runs them locally: they exist so that `onceflow doctor` reads them as on AWS
(docs/doctor.md, "Locally"). Each is named at the engine's start and made when first read
(``materialize``): about 50 ms of CPU, a quarter of a warm engine start's 200 (medians of
6, this template), that an engine nobody asks saves. moto confirms an email subscription at once;
on AWS it stays "PendingConfirmation" until confirmed (not reproduced).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# Fields a Ref to a String parameter gives as text where the API takes a number.
_WHOLE = {"EvaluationPeriods", "DatapointsToAlarm", "Period", "MaximumEventAgeInSeconds"}
_WHOLE |= {"MaximumRetryAttempts", "BatchSize", "MaximumBatchingWindowInSeconds"}
_WHOLE |= {"ReadUnitsPerSecond", "WriteUnitsPerSecond"}
_SCHEDULE_FIELDS = (
    "Description", "ScheduleExpression", "ScheduleExpressionTimezone", "StartDate", "EndDate",
    "GroupName", "KmsKeyArn",
)  # fmt: skip
_LOCK = threading.Lock()


def numbers(value: Any) -> Any:
    """value with every field of _WHOLE a whole number and Threshold a decimal, at any depth."""
    if isinstance(value, list):
        return [numbers(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    convert = {**dict.fromkeys(_WHOLE, int), "Threshold": float}
    return {k: convert[k](v) if k in convert else numbers(v) for k, v in value.items()}


def _later(
    engine: LocalEngine, service: str, operation: str, request: dict[str, Any], ref: str = ""
) -> None:
    """ref: the logical id whose Ref the answer's SubscriptionArn becomes."""
    with _LOCK:
        engine.unmade.append((service, operation, request, ref))


def materialize(engine: LocalEngine) -> None:
    """Make in moto what the engine named at its start and has not made yet (once)."""
    with _LOCK:
        unmade, engine.unmade = engine.unmade, []
        for service, operation, request, ref in unmade:
            answer = getattr(engine.client(service), operation)(**request)
            if ref:  # a subscription's ARN is the service's: its name stood in for it
                engine.stack.refs[ref] = str(answer["SubscriptionArn"])


def create(engine: LocalEngine, logical_id: str, name: str, props: dict[str, Any]) -> None:
    """Name one resource of a type in CREATORS now (its Ref and GetAtt resolve), from its
    resolved properties; materialize() makes it."""
    stack = engine.stack
    kind = stack.template["Resources"][logical_id]["Type"]
    stack.refs[logical_id] = name
    if kind == "AWS::SNS::Topic":
        arn = f"arn:aws:sns:{stack.region}:{stack.account_id}:{name}"
        stack.refs[logical_id] = arn
        stack.attributes[logical_id] = {"TopicArn": arn, "TopicName": name}
        attributes = {k: str(props[k]) for k in ("DisplayName", "KmsMasterKeyId") if k in props}
        _later(engine, "sns", "create_topic", {"Name": name, "Attributes": attributes})
    elif kind == "AWS::SNS::Subscription":
        request = {k: str(props[k]) for k in ("TopicArn", "Protocol", "Endpoint")}
        _later(engine, "sns", "subscribe", {**request, "ReturnSubscriptionArn": True}, logical_id)
    else:
        arn = f"arn:aws:cloudwatch:{stack.region}:{stack.account_id}:alarm:{name}"
        stack.attributes[logical_id] = {"Arn": arn}
        _later(engine, "cloudwatch", "put_metric_alarm", {**numbers(props), "AlarmName": name})


# Each type: the property that names it (if the template gives one), the name's limit.
CREATORS = {
    "AWS::SNS::Topic": ("TopicName", 256, create),
    "AWS::SNS::Subscription": ("", 256, create),
    "AWS::CloudWatch::Alarm": ("AlarmName", 255, create),
}


def schedule_events(
    engine: LocalEngine, state_machine: str
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(logical id, schedule name, resolved properties) of each ScheduleV2 event of a state
    machine, as SAM generates them (SAM developer guide, "ScheduleV2": an
    AWS::Scheduler::Schedule whose logical id is the machine's then the event's), named as the
    event names it, else as the stack names it (OmitName)."""
    resource = engine.stack.template["Resources"][state_machine]
    for event, spec in resource.get("Properties", {}).get("Events", {}).items():
        if spec.get("Type") == "ScheduleV2":
            logical_id = f"{state_machine}{event}"
            props = engine.stack.resolve(spec.get("Properties", {}))
            name = props.get("Name") or engine.stack.physical_name(logical_id, 64)
            yield logical_id, str(name), props


def create_schedules(engine: LocalEngine, state_machine: str, arn: str, role: str) -> None:
    """Name each ScheduleV2 event of the state machine now; materialize() makes it, with
    CreateSchedule targeting the machine."""
    for logical_id, name, props in schedule_events(engine, state_machine):
        target: dict[str, Any] = {"Arn": arn, "RoleArn": str(props.get("RoleArn") or role)}
        if "Input" in props:
            target["Input"] = str(props["Input"])
        if "RetryPolicy" in props:
            target["RetryPolicy"] = numbers(props["RetryPolicy"])
        if "DeadLetterConfig" in props:
            target["DeadLetterConfig"] = {"Arn": str(props["DeadLetterConfig"]["Arn"])}
        request = {key: props[key] for key in _SCHEDULE_FIELDS if key in props}
        request.update(
            Name=name,
            State=str(props.get("State", "ENABLED")),
            # SAM's default when the event sets none: aws-sam-translator's
            # eventsources/scheduler.py, DEFAULT_FLEXIBLE_TIME_WINDOW = {"Mode": "OFF"}.
            FlexibleTimeWindow=props.get("FlexibleTimeWindow") or {"Mode": "OFF"},
            Target=target,
        )
        engine.stack.refs[logical_id] = name
        _later(engine, "scheduler", "create_schedule", request)
