"""The stack's alarms, their topic and its subscriptions, and the audit's schedule, in moto.

Nothing runs them locally (no alarm fires, no schedule starts an audit): they exist so
that what reads them on AWS reads them here alike, `onceflow doctor` first. When the
engine starts, each gets its name and ARN (what Ref and GetAtt give: a topic's Ref is its
ARN, an alarm's its name) and its properties are resolved; it is made in moto by
``materialize(engine)``, which what reads them calls first (``wiring.LocalStack``). An
engine that nobody asks about its alarms so saves a client per service, about 0.1 s of
CPU each (botocore parses the service's model), at every start.

Each is made as CloudFormation and SAM make it: an alarm by PutMetricAlarm
(AWS::CloudWatch::Alarm's properties are PutMetricAlarm's), a topic by CreateTopic, a
subscription by Subscribe, and a state machine's ScheduleV2 event by CreateSchedule: SAM
generates an AWS::Scheduler::Schedule for it (SAM developer guide, "ScheduleV2"), its
logical id the machine's followed by the event's (as the template's comment on OmitName
says). moto confirms every subscription at once, an email one too; on AWS that one stays
"PendingConfirmation" until its owner confirms it (not reproduced here).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine
    from onceflow.local.template import Stack

# PutMetricAlarm's whole-number and decimal fields: a Ref to a String parameter gives text.
_WHOLE = ("EvaluationPeriods", "DatapointsToAlarm", "Period")
# The schedule's fields CreateSchedule takes as AWS::Scheduler::Schedule names them.
_SCHEDULE_FIELDS = (
    "Description",
    "ScheduleExpression",
    "ScheduleExpressionTimezone",
    "StartDate",
    "EndDate",
    "GroupName",
    "KmsKeyArn",
)

Making = Callable[["LocalEngine"], None]
# What each engine has still to make, in the order its resources were created.
_PENDING: weakref.WeakKeyDictionary[LocalEngine, list[Making]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _later(engine: LocalEngine, making: Making) -> None:
    with _LOCK:
        _PENDING.setdefault(engine, []).append(making)


def materialize(engine: LocalEngine) -> None:
    """Make in moto what the engine named at its start and has not made yet (once)."""
    with _LOCK:
        pending = _PENDING.pop(engine, [])
        for making in pending:
            making(engine)


def _topic(stack: Stack, logical_id: str, name: str, properties: Mapping[str, Any]) -> Making:
    arn = f"arn:aws:sns:{stack.region}:{stack.account_id}:{name}"
    stack.refs[logical_id] = arn
    stack.attributes[logical_id] = {"TopicArn": arn, "TopicName": name}
    attributes = {
        key: str(properties[key]) for key in ("DisplayName", "KmsMasterKeyId") if key in properties
    }

    def make(engine: LocalEngine) -> None:
        engine.client("sns").create_topic(Name=name, Attributes=attributes)

    return make


def _subscription(
    stack: Stack, logical_id: str, name: str, properties: Mapping[str, Any]
) -> Making:
    # Its ARN is the service's to choose: the name stands in for the Ref until it is made.
    stack.refs[logical_id] = name

    def make(engine: LocalEngine) -> None:
        answer = engine.client("sns").subscribe(
            TopicArn=str(properties["TopicArn"]),
            Protocol=str(properties["Protocol"]),
            Endpoint=str(properties["Endpoint"]),
            ReturnSubscriptionArn=True,
        )
        stack.refs[logical_id] = str(answer["SubscriptionArn"])

    return make


def _alarm_request(properties: Mapping[str, Any]) -> dict[str, Any]:
    request = dict(properties)
    for key in _WHOLE:
        if key in request:
            request[key] = int(request[key])
    if "Threshold" in request:
        request["Threshold"] = float(request["Threshold"])
    metrics = []
    for query in request.get("Metrics", []):
        query = dict(query)
        if "Period" in query:
            query["Period"] = int(query["Period"])
        if "MetricStat" in query:
            stat = query["MetricStat"]
            query["MetricStat"] = {**stat, "Period": int(stat["Period"])}
        metrics.append(query)
    if metrics:
        request["Metrics"] = metrics
    return request


def _alarm(stack: Stack, logical_id: str, name: str, properties: Mapping[str, Any]) -> Making:
    stack.refs[logical_id] = name
    stack.attributes[logical_id] = {
        "Arn": f"arn:aws:cloudwatch:{stack.region}:{stack.account_id}:alarm:{name}"
    }
    request = {**_alarm_request(properties), "AlarmName": name}

    def make(engine: LocalEngine) -> None:
        engine.client("cloudwatch").put_metric_alarm(**request)

    return make


Named = Callable[["Stack", str, str, Mapping[str, Any]], Making]
# Each type: the property that names it, if the template gives one, and how it is named.
CREATORS: dict[str, tuple[str, int, Named]] = {
    "AWS::SNS::Topic": ("TopicName", 256, _topic),
    "AWS::SNS::Subscription": ("", 256, _subscription),
    "AWS::CloudWatch::Alarm": ("AlarmName", 255, _alarm),
}


def create(engine: LocalEngine, logical_id: str, resource: Mapping[str, Any]) -> None:
    """Name one resource of a type in CREATORS now (its Ref and GetAtt resolve), from its
    resolved properties; materialize() makes it."""
    name_property, limit, named = CREATORS[resource["Type"]]
    stack = engine.stack
    properties = stack.resolve(resource.get("Properties", {}))
    given = properties.get(name_property) if name_property else None
    name = str(given or stack.physical_name(logical_id, limit))
    _later(engine, named(stack, logical_id, name, properties))


def schedule_events(engine: LocalEngine, state_machine: str) -> Iterator[tuple[str, str]]:
    """(logical id, schedule name) of each ScheduleV2 event of a state machine, as SAM
    generates them: the name the event gives, else one of the stack's making (OmitName)."""
    resource = engine.stack.template["Resources"][state_machine]
    for event, spec in resource.get("Properties", {}).get("Events", {}).items():
        if spec.get("Type") != "ScheduleV2":
            continue
        logical_id = f"{state_machine}{event}"
        name = spec.get("Properties", {}).get("Name")
        yield (
            logical_id,
            str(engine.stack.resolve(name) if name else engine.stack.physical_name(logical_id, 64)),
        )


def create_schedules(engine: LocalEngine, state_machine: str, arn: str, role: str) -> None:
    """Name each ScheduleV2 event of the state machine now; materialize() makes it, with
    CreateSchedule targeting the machine."""
    stack = engine.stack
    events = stack.template["Resources"][state_machine].get("Properties", {}).get("Events", {})
    for logical_id, name in schedule_events(engine, state_machine):
        properties = stack.resolve(events[logical_id[len(state_machine) :]].get("Properties", {}))
        target: dict[str, Any] = {
            "Arn": arn,
            "RoleArn": str(properties.get("RoleArn") or role),
        }
        if "Input" in properties:
            target["Input"] = str(properties["Input"])
        if "RetryPolicy" in properties:
            target["RetryPolicy"] = {
                key: int(value) for key, value in properties["RetryPolicy"].items()
            }
        if "DeadLetterConfig" in properties:
            target["DeadLetterConfig"] = {"Arn": str(properties["DeadLetterConfig"]["Arn"])}
        request = {key: properties[key] for key in _SCHEDULE_FIELDS if key in properties}
        request.update(
            Name=name,
            State=str(properties.get("State", "ENABLED")),
            # SAM's default when the event sets none (not verified that it is OFF).
            FlexibleTimeWindow=properties.get("FlexibleTimeWindow") or {"Mode": "OFF"},
            Target=target,
        )
        stack.refs[logical_id] = name

        def make(engine: LocalEngine, request: dict[str, Any] = request) -> None:
            engine.client("scheduler").create_schedule(**request)

        _later(engine, make)
