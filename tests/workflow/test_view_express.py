"""`onceflow show --stack-name` on a stack whose processor is EXPRESS: Step Functions lists
none of its executions (ListExecutions: StateMachineTypeNotSupported) and describes none
(DescribeExecution: InvalidArn), both recorded in LocalStack's test_sfn_api_express
snapshot; the engine answers the same (onceflow/local/patches/fidelity/executions.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from onceflow.local.engine import LocalEngine
from onceflow.local.target import LocalTarget
from onceflow.view import executions as viewer
from onceflow.view.records import RecordError
from tests.helpers import (
    FUNCTION,
    MACHINE,
    TransientError,
    audit_engine,
    run_audit,
    s3_event,
    upload,
)
from tests.workflow.test_audit import always


@pytest.fixture(scope="module")
def express() -> Iterator[LocalEngine]:
    with audit_engine(WorkflowType="EXPRESS", ProcessorTimeoutSeconds="40") as engine:
        yield engine


def test_an_audit_execution_is_found_by_its_name_prefix_beside_an_express_processor(
    express: LocalEngine,
) -> None:
    # GIVEN a stack whose processor is EXPRESS, and an audit that ran
    audit = run_audit(express)
    # WHEN the audit's execution is looked up by a prefix of its name
    record = viewer.find_deployed(LocalTarget(express), audit.name[:-4])
    # THEN it is found: the processor, which cannot be listed, is passed over
    assert record.arn == audit.arn and record.status == "SUCCEEDED"
    # AND by its whole name
    assert viewer.find_deployed(LocalTarget(express), audit.name).arn == audit.arn


def test_an_express_execution_is_refused_with_where_its_record_is(express: LocalEngine) -> None:
    # GIVEN an EXPRESS processor execution
    version = upload(express, "view/express.png")
    with express.override_function(FUNCTION, always(TransientError)):
        ran = express.execute(MACHINE, s3_event(express, "view/express.png", version))
    assert ":express:" in ran.arn
    # WHEN it is looked up by its ARN, or by its name
    for query in (ran.arn, ran.name):
        with pytest.raises((viewer.StackError, RecordError)) as refused:
            viewer.find_deployed(LocalTarget(express), query)
        # THEN the reader is told why and where to look, not Step Functions' bare refusal
        assert "EXPRESS" in str(refused.value), str(refused.value)
        assert "log" in str(refused.value)
