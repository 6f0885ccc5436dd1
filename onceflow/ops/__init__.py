"""Operations on a stack: run the audit, redrive the DLQ, inspect a key, check its wiring.

Each works on a Target (target.py): a deployed stack found by its name, or the
local engine's stack, which the caller builds from its engine. They use only
the AWS APIs an operator's credentials would, with boto3 alone (no moto, nothing
of onceflow.local), so the local run and the deployed run are the same code.
"""

from onceflow.ops.audit import AUDIT_LABELS, run_audit
from onceflow.ops.doctor import FAIL, PASS, WARN, DoctorTarget, Finding, examine
from onceflow.ops.inspect import inspect_key
from onceflow.ops.redrive import (
    KEPT_CLAIMS,
    QUEUES,
    Redriven,
    RedriveReport,
    open_status,
    redrive,
    redrive_undelivered,
    undelivered_name,
    unversioned_upload_time,
)
from onceflow.ops.target import DeployedTarget, OpsError, Target, wait_for_execution

__all__ = [
    "AUDIT_LABELS",
    "FAIL",
    "KEPT_CLAIMS",
    "PASS",
    "QUEUES",
    "WARN",
    "DeployedTarget",
    "DoctorTarget",
    "Finding",
    "OpsError",
    "RedriveReport",
    "Redriven",
    "Target",
    "examine",
    "inspect_key",
    "open_status",
    "redrive",
    "redrive_undelivered",
    "run_audit",
    "undelivered_name",
    "unversioned_upload_time",
    "wait_for_execution",
]
