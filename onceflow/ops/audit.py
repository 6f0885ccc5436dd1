"""`onceflow audit`: start the audit state machine on a stack, wait for it, read its report."""

from __future__ import annotations

import json
import time
from typing import Any, TextIO

from onceflow.ops.target import OpsError, Target, wait_for_execution

# The audit's counts, as `onceflow audit` and the demo print them.
AUDIT_LABELS = (
    ("scanned", "object versions scanned"),
    ("skipped_recent", "skipped, too recent"),
    ("skipped_old", "skipped, older than retention"),
    ("skipped_audited", "skipped, judged by an earlier audit"),
    ("ok", "processed already"),
    ("in_progress", "in progress"),
    ("missing_resubmitted", "missing, resubmitted"),
    ("failed_resubmitted", "failed, resubmitted"),
    ("dead_lettered_skipped", "dead-lettered, skipped"),
    ("superseded_skipped", "replaced before processing, skipped"),
    ("stuck_released", "stuck locks released"),
    ("stuck_dead_lettered", "stuck at max attempts, dead-lettered"),
    ("stuck_left_alone", "stuck locks renewed meanwhile"),
    ("failed_dead_lettered", "failed at max attempts, dead-lettered"),
    ("resubmit_errors", "could not be resubmitted"),
    ("resubmit_refused", "resubmission refused, dead-lettered"),
    ("resubmit_deferred", "resubmissions left to the next audit"),
    ("sweep_deferred", "open work left to the next audit"),
    ("failed_batches", "failed batches, walked again later"),
    ("unaudited_objects", "objects those batches left unjudged"),
    ("unreadable_rows", "unreadable ledger rows, left as is"),
    ("reindexed", "open work put back in its index"),
)


def run_audit(
    target: Target,
    prefix: str | None = None,
    name: str | None = None,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Start the audit state machine, wait for it, return its report.

    ``prefix``: audit only the objects under this key prefix (the run lists
    them instead of reading an inventory report). Locally, also wait for the
    processor executions it started, so that the caller sees their effects.
    """
    sfn = target.client("stepfunctions")
    audit_input = {"prefix": prefix} if prefix else {}
    kwargs: dict[str, Any] = {
        "stateMachineArn": target.output("AuditStateMachineArn"),
        "input": json.dumps(audit_input),
        "name": name or f"audit-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**6:06d}",
    }
    arn = sfn.start_execution(**kwargs)["executionArn"]
    if progress is not None:
        progress.write(f"audit: started {arn}\n")
    description = wait_for_execution(target, arn, progress=progress)
    if description["status"] != "SUCCEEDED":
        raise OpsError(
            f"the audit {description['status']}: {description.get('error')}: "
            f"{description.get('cause')}"
        )
    report: dict[str, Any] = json.loads(description["output"])
    target.wait_for_running(target.output("ProcessorStateMachineArn"))
    return report
