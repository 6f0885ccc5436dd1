"""The local engine's stack as `onceflow doctor` reads it (docs/doctor.md, "Locally"): what
ListStackResources and DescribeStacks would say, and the services the engine plays itself:
EventBridge's rules and the SQS pipe are the engine's own (moto's rules cannot start a state
machine, and moto delivers every upload to them itself: tests/unit/test_ingress_moto).
onceflow.ops never imports this module.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError
from moto.events.models import EventPattern as Pattern

from onceflow.local import ingress, monitoring
from onceflow.local.target import LocalTarget

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine

# What SAM's resources are once transformed, as ListStackResources lists them.
_DEPLOYED_TYPES = {
    "AWS::Serverless::Function": "AWS::Lambda::Function",
    "AWS::Serverless::StateMachine": "AWS::StepFunctions::StateMachine",
    "AWS::Serverless::Application": "AWS::CloudFormation::Stack",
}


def _named(
    kept: Mapping[str, dict[str, Any]], name: str, operation: str, missing: str
) -> tuple[str, dict[str, Any]]:
    """The rule or pipe of that name, or the ResourceNotFoundException AWS answers."""
    for logical_id, item in kept.items():
        if item["name"] == name:
            return logical_id, item
    message = missing.format(name)
    raise ClientError(
        {"Error": {"Code": "ResourceNotFoundException", "Message": message}}, operation
    )


class LocalRules:
    """EventBridge's rule APIs over the engine's rules (LocalEngine.rules), default bus."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine

    def _rule(self, name: str, operation: str) -> dict[str, Any]:
        missing = "Rule {} does not exist on EventBus default."
        return _named(self.engine.rules, name, operation, missing)[1]

    def describe_rule(self, Name: str, EventBusName: str = "default") -> dict[str, Any]:
        rule = self._rule(Name, "DescribeRule")
        return {
            "Name": Name,
            "Arn": ingress.rule_arn(Name),
            "EventPattern": json.dumps(rule.get("EventPattern", {})),
            "State": rule.get("State", "ENABLED"),
            "Description": rule.get("Description", ""),
            "EventBusName": EventBusName,
        }

    def list_targets_by_rule(self, Rule: str, EventBusName: str = "default") -> dict[str, Any]:
        # A Ref to a String parameter is text; AWS answers numbers (RetryPolicy).
        targets = self._rule(Rule, "ListTargetsByRule").get("Targets", [])
        return {"Targets": monitoring.numbers(targets)}

    def enable_rule(self, Name: str, EventBusName: str = "default") -> dict[str, Any]:
        self._rule(Name, "EnableRule")["State"] = "ENABLED"
        return {}

    def disable_rule(self, Name: str, EventBusName: str = "default") -> dict[str, Any]:
        self._rule(Name, "DisableRule")["State"] = "DISABLED"
        return {}

    def put_targets(
        self, Rule: str, Targets: list[dict[str, Any]], EventBusName: str = "default"
    ) -> dict[str, Any]:
        """Add or replace targets by Id, as PutTargets does."""
        rule = self._rule(Rule, "PutTargets")
        given = {t["Id"]: copy.deepcopy(t) for t in Targets}
        kept = [t for t in rule.get("Targets", []) if t["Id"] not in given]
        rule["Targets"] = kept + list(given.values())
        return {"FailedEntryCount": 0, "FailedEntries": []}

    def test_event_pattern(self, EventPattern: str, Event: str) -> dict[str, Any]:
        """Matched as the engine delivers (moto's own TestEventPattern is not implemented)."""
        return {"Result": bool(Pattern.load(EventPattern).matches_event(json.loads(Event)))}


class LocalPipes:
    """EventBridge Pipes' APIs over the engine's pipes (LocalEngine.pipes). A pipe's
    state is its DesiredState (the template's, else RUNNING): locally it gets there at once."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine

    def _pipe(self, name: str, operation: str) -> tuple[str, dict[str, Any]]:
        return _named(self.engine.pipes, name, operation, "Pipe {} does not exist.")

    def describe_pipe(self, Name: str) -> dict[str, Any]:
        logical_id, pipe = self._pipe(Name, "DescribePipe")
        keys = ("Description", "RoleArn", "Source", "Target", "TargetParameters")
        state = str(pipe.get("DesiredState", "RUNNING"))
        return {
            **{key: copy.deepcopy(pipe[key]) for key in keys if key in pipe},
            "Name": Name,
            "Arn": self.engine.stack.attributes[logical_id]["Arn"],
            "DesiredState": state,
            "CurrentState": state,
            # BatchSize and MaximumBatchingWindowInSeconds: numbers, as AWS answers them
            "SourceParameters": monitoring.numbers(pipe.get("SourceParameters", {})),
        }

    def _set_state(self, name: str, state: str, operation: str) -> dict[str, Any]:
        self._pipe(name, operation)[1]["DesiredState"] = state
        return {"Name": name, "DesiredState": state, "CurrentState": state}

    def stop_pipe(self, Name: str) -> dict[str, Any]:
        return self._set_state(Name, "STOPPED", "StopPipe")

    def start_pipe(self, Name: str) -> dict[str, Any]:
        return self._set_state(Name, "RUNNING", "StartPipe")

    def update_pipe(
        self,
        Name: str,
        RoleArn: str,
        SourceParameters: Mapping[str, Any] | None = None,
        TargetParameters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """UpdatePipe: each parameters group given (SqsQueueParameters, ...) replaces the
        pipe's as one, its fields left out back to their defaults (UpdatePipe API reference:
        "updated atomically as one and override existing values")."""
        _, pipe = self._pipe(Name, "UpdatePipe")
        pipe["RoleArn"] = RoleArn
        for key, given in (
            ("SourceParameters", SourceParameters),
            ("TargetParameters", TargetParameters),
        ):
            for group, values in (given or {}).items():
                pipe.setdefault(key, {})[group] = copy.deepcopy(values)
        return {"Name": Name}


class LocalBucketNotifications:
    """The engine's S3 client, but GetBucketNotificationConfiguration says whether the
    bucket sends its events to EventBridge, as S3 does (moto keeps it, and leaves it out)."""

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.s3 = engine.client("s3")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def get_bucket_notification_configuration(self, Bucket: str) -> dict[str, Any]:
        answer = dict(self.s3.get_bucket_notification_configuration(Bucket=Bucket))
        if ingress.sends_to_eventbridge(Bucket):
            answer["EventBridgeConfiguration"] = {}
        return answer


class LocalStack(LocalTarget):
    """The engine's stack as `onceflow doctor` reads it (onceflow.ops.doctor.DoctorTarget)."""

    def __init__(self, engine: LocalEngine) -> None:
        super().__init__(engine)
        monitoring.materialize(engine)  # the alarms, their topic, the schedules: in moto now
        self.stack_name = engine.stack.stack_name
        self._played: dict[str, Any] = {
            "events": LocalRules(engine),
            "pipes": LocalPipes(engine),
            "s3": LocalBucketNotifications(engine),
        }

    def client(self, service: str) -> Any:
        return self._played.get(service) or super().client(service)

    def parameters(self) -> dict[str, str]:
        return dict(self.engine.stack.parameters)

    def resources(self) -> list[dict[str, str]]:
        """The resources the engine made, as ListStackResources lists a deployed stack's:
        SAM's by what they become, a state machine's schedules after it."""
        stack = self.engine.stack
        found: list[dict[str, str]] = []
        for logical_id, resource in stack.template["Resources"].items():
            physical_id = stack.refs.get(logical_id)
            if not physical_id:
                continue  # its Condition is false: not created
            kind = str(resource["Type"])
            rows = [(logical_id, physical_id, _DEPLOYED_TYPES.get(kind, kind))]
            if kind == "AWS::Serverless::StateMachine":
                rows += [
                    (schedule, name, "AWS::Scheduler::Schedule")
                    for schedule, name, _ in monitoring.schedule_events(self.engine, logical_id)
                ]
            keys = ("LogicalResourceId", "PhysicalResourceId", "ResourceType")
            found += [dict(zip(keys, row, strict=True)) for row in rows]
        return found
