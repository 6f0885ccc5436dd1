"""One audit starts a key's resubmission once, whatever the processor's workflow type.

The audit names a resubmission after the run and the key (resubmission_name). STANDARD
refuses a second start of a name that ran (ExecutionAlreadyExists, API_StartExecution.html:
"idempotent for STANDARD workflows"); EXPRESS starts it again ("Starting multiple workflows
with the same name results in concurrent executions": express-at-least-once-execution.html;
the engine does too, onceflow/local/patches/fidelity/express_arn.py). The ledger's claims say
which names took a row, under either type: the audit reads them before it starts a name.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from onceflow.local.engine import LocalEngine
from tests.helpers import (
    AUDIT,
    FUNCTION,
    MACHINE,
    TransientError,
    audit_engine,
    dlq_messages,
    idempotency_key,
    ledger_row,
    ledger_rows,
    output_effects,
    png_bytes,
    run_audit,
    upload,
)
from tests.workflow.test_audit import always
from tests.workflow.test_object_versions import put, suspend_versioning

TYPES = {
    "STANDARD": {},
    "EXPRESS": {"WorkflowType": "EXPRESS", "ProcessorTimeoutSeconds": "40"},
}


def resubmissions(engine: LocalEngine, audit_name: str) -> list[dict[str, Any]]:
    """The processor executions an audit started (the engine's record: ListExecutions
    refuses an EXPRESS machine, as AWS does)."""
    prefix = f"audit-{audit_name}"[:40]
    return [e for e in engine.list_executions(MACHINE) if e["name"].startswith(prefix)]


def batch_then(engine: LocalEngine, after: type[Exception] | None) -> Any:
    """The real audit function, except that each batch call waits for the executions it
    started to end, then (its first call only) raises ``after``, an error the batch's Retry
    lists: the batch is retried with its resubmissions already made.

    Each batch call leaves its sandbox behind (the module's clients, and with them the names
    the Processor remembers it started): on AWS the Map's children run in sandboxes of
    their own, and a call that timed out is retried in a new one."""
    real = engine.runtime.load(engine.runtime.functions[engine.function_name("AuditFunction")])
    sandbox = sys.modules[real.__module__]
    calls = {"batch": 0}

    def handler(event: dict[str, Any], context: Any) -> Any:
        result = real(event, context)
        if event.get("action") == "batch":
            calls["batch"] += 1
            engine.wait_for_running(MACHINE)
            sandbox._clients = None
            if after is not None and calls["batch"] == 1:
                raise after("injected: the batch failed after its resubmissions")
        return result

    return handler


@pytest.mark.parametrize("workflow_type", TYPES)
def test_the_sweep_does_not_start_again_what_the_walk_of_its_audit_started(
    workflow_type: str,
) -> None:
    with audit_engine(**TYPES[workflow_type]) as engine:
        # GIVEN a lost upload, and a processor failing every call
        version = upload(engine, "lost/express.png")
        pk = idempotency_key(engine, "lost/express.png", version)
        # WHEN the audit's walk resubmits it, that execution fails, then the sweep runs
        with (
            engine.override_function(FUNCTION, always(TransientError)),
            engine.override_function("AuditFunction", batch_then(engine, None)),
        ):
            result = run_audit(engine)
        # THEN the key was started once in this audit: one execution, one attempt
        assert len(resubmissions(engine, result.name)) == 1
        row = ledger_row(engine, pk)
        assert row is not None and row["status"] == "FAILED" and row["attempts"] == "1"
        # AND counted once, as missing (the sweep's start was the walk's)
        assert result.output["missing_resubmitted"] == 1
        assert result.output["failed_resubmitted"] == 0
        assert dlq_messages(engine) == []
        # AND the next audit retries it: one effect
        again = run_audit(engine)
        assert len(resubmissions(engine, again.name)) == 1
        row = ledger_row(engine, pk)
        assert row is not None and row["status"] == "PROCESSED" and row["attempts"] == "2"
        assert output_effects(engine) == 1


@pytest.mark.parametrize("versioning", ["Enabled", "Suspended"])
@pytest.mark.parametrize("workflow_type", TYPES)
def test_a_retried_batch_starts_its_resubmissions_once(workflow_type: str, versioning: str) -> None:
    with audit_engine(**TYPES[workflow_type]) as engine:
        # GIVEN a lost upload (with a version id, or without one: its row is then found
        # through the ObjectContent index, which keeps no claims), and a processor failing
        # every call
        if versioning == "Suspended":
            suspend_versioning(engine)
            put(engine, png_bytes(), "lost/retried.png")
        else:
            upload(engine, "lost/retried.png")
        # WHEN the batch that resubmitted it fails with an error its Retry lists, and runs again
        with (
            engine.override_function(FUNCTION, always(TransientError)),
            engine.override_function("AuditFunction", batch_then(engine, TransientError)),
        ):
            result = engine.execute(AUDIT, {})
        assert result.status == "SUCCEEDED", (result.error, result.cause)
        engine.wait_for_running(MACHINE)
        # THEN the retry and the sweep started nothing more: one execution, one attempt,
        # no DLQ message (three starts would have spent MaxAttempts and dead-lettered it)
        assert len(resubmissions(engine, result.name)) == 1
        (row,) = ledger_rows(engine)
        assert row["status"] == "FAILED" and row["attempts"] == "1"
        assert row["source"] == "audit"
        assert dlq_messages(engine) == []
        # AND the key is counted once (the retried batch found it FAILED: as STANDARD's
        # ExecutionAlreadyExists, a start of its own name counts)
        counts = result.output
        assert counts["missing_resubmitted"] + counts["failed_resubmitted"] == 1
        assert counts["failed_batches"] == 0
