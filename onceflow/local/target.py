"""The local engine's stack as the operations see it: an onceflow.ops Target, by its shape,
built by the caller from its engine (docs/architecture.md, ops/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onceflow.local.errors import EngineError

if TYPE_CHECKING:
    from onceflow.local.engine import LocalEngine


class LocalTarget:
    """The embedded engine's stack."""

    local = True

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self._outputs = engine.outputs()

    def client(self, service: str) -> Any:
        return self.engine.client(service)

    def output(self, name: str) -> str:
        if name not in self._outputs:
            raise EngineError(f"the template has no output {name}")
        return self._outputs[name]

    def wait_for_running(self, state_machine_arn: str) -> None:
        """Wait for the executions an operation caused (the audit's resubmissions)."""
        self.engine.wait_for_running(state_machine_arn)

    def express_record(self, execution_arn: str) -> dict[str, Any] | None:
        """An execution's record with its history events, which DescribeExecution and
        GetExecutionHistory refuse for an EXPRESS one, as AWS does (its log group has them)."""
        from onceflow.local import executions

        record = executions.describe(self.engine, execution_arn)
        events = executions.history(execution_arn)
        if events:
            record["startDate"] = events[0]["timestamp"]
        return {**record, "events": events}
