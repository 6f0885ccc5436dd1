"""The stack an operation acts on: a Target gives its AWS clients and its outputs.

A deployed stack is found by its name (CloudFormation outputs). The local
engine's stack is a Target too (onceflow.local.target.LocalTarget, built by the
caller from its engine): the operations never import the engine, and run with
boto3 alone.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, TextIO

import boto3
from botocore.exceptions import BotoCoreError, ClientError


class OpsError(Exception):
    """An operation could not run (a missing output, an unreachable stack)."""


class Target(Protocol):
    """A stack: its clients, its outputs, and whether it is the local engine's."""

    local: bool

    def client(self, service: str) -> Any: ...

    def output(self, name: str) -> str: ...

    def wait_for_running(self, state_machine_arn: str) -> None:
        """Return once no execution of the state machine runs: the local engine waits, so
        that a command sees the effects of the executions it caused; a deployed stack
        returns at once (its executions may run for hours)."""
        ...

    def express_record(self, execution_arn: str) -> dict[str, Any] | None:
        """An EXPRESS execution's name, status and history events ("events") as its log
        records them, where DescribeExecution and GetExecutionHistory refuse one
        (InvalidArn on AWS): the local engine keeps its own record; a deployed stack's
        log group is not read here (None)."""
        ...


class DeployedTarget:
    """A deployed stack: its resources come from the stack's outputs."""

    local = False

    def express_record(self, execution_arn: str) -> dict[str, Any] | None:
        return None

    def __init__(
        self, stack_name: str, region: str | None = None, profile: str | None = None
    ) -> None:
        self.session = boto3.session.Session(region_name=region, profile_name=profile)
        self.stack_name = stack_name
        try:
            stacks = self.session.client("cloudformation").describe_stacks(StackName=stack_name)
        except (ClientError, BotoCoreError) as exc:
            raise OpsError(f"cannot read stack {stack_name}: {exc}") from exc
        outputs = stacks["Stacks"][0].get("Outputs", [])
        self._outputs = {o["OutputKey"]: o["OutputValue"] for o in outputs}
        # DescribeStacks' Parameters: each ParameterKey with the ParameterValue deployed
        # (ResolvedValue for an SSM parameter: AWS CloudFormation API reference, Parameter).
        self._parameters = {
            p["ParameterKey"]: str(p.get("ResolvedValue", p.get("ParameterValue", "")))
            for p in stacks["Stacks"][0].get("Parameters", [])
        }
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service)  # type: ignore[call-overload]
        return self._clients[service]

    def output(self, name: str) -> str:
        if name not in self._outputs:
            raise OpsError(f"stack {self.stack_name} has no output {name}; is it a onceflow stack?")
        return self._outputs[name]

    def wait_for_running(self, state_machine_arn: str) -> None:
        return None  # the operator watches a deployed stack's executions (onceflow executions)

    def parameters(self) -> dict[str, str]:
        """The stack's parameters as deployed."""
        return dict(self._parameters)

    def resources(self) -> list[dict[str, str]]:
        """Every resource of the stack: LogicalResourceId, PhysicalResourceId, ResourceType.

        ListStackResources, page by page: DescribeStackResources returns only the first
        100 resources of a stack (AWS CloudFormation API reference, DescribeStackResources).
        SAM's resources appear as what they transform into (AWS::Lambda::Function,
        AWS::StepFunctions::StateMachine, AWS::Scheduler::Schedule...).
        """
        found: list[dict[str, str]] = []
        paginator = self.client("cloudformation").get_paginator("list_stack_resources")
        for page in paginator.paginate(StackName=self.stack_name):
            found += [
                {
                    "LogicalResourceId": str(summary["LogicalResourceId"]),
                    # absent while a resource is being created, or after it failed to be
                    "PhysicalResourceId": str(summary.get("PhysicalResourceId", "")),
                    "ResourceType": str(summary["ResourceType"]),
                }
                for summary in page["StackResourceSummaries"]
            ]
        return found


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def wait_for_execution(
    target: Target, arn: str, timeout: float = 3600.0, progress: TextIO | None = None
) -> dict[str, Any]:
    """Poll until the execution ends; returns DescribeExecution's answer."""
    sfn = target.client("stepfunctions")
    deadline = time.monotonic() + timeout
    delay = 0.01 if target.local else 2.0
    while True:
        description: dict[str, Any] = sfn.describe_execution(executionArn=arn)
        if description["status"] != "RUNNING":
            return description
        if time.monotonic() > deadline:
            raise OpsError(f"{arn} still running after {timeout:.0f}s")
        if progress is not None and not target.local:
            progress.write(".")
            progress.flush()
        time.sleep(delay)
        delay = min(delay * 2, 0.1 if target.local else 10.0)
