"""How long the audit waits before it judges an upload without a version id."""

from __future__ import annotations

import pytest

from service.errors import ConfigurationError
from service.settings import AuditSettings
from tests.unit.test_audit_logic import ENV


def test_the_wait_is_the_longest_any_configured_source_holds_an_event() -> None:
    # GIVEN EventBridge's retries only (no SQS source over the user's bucket)
    assert AuditSettings.from_env(ENV).late_event_seconds == 86400
    # WHEN an SQS source can hold a notification for 28.5 days (the template's value)
    sqs = AuditSettings.from_env({**ENV, "SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS": "2462400"})
    # THEN the audit waits the longer of the two
    assert sqs.late_event_seconds == 2462400
    # AND the stack without one sends 0, which leaves EventBridge's
    none = AuditSettings.from_env({**ENV, "SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS": "0"})
    assert none.late_event_seconds == 86400


def test_a_wait_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS"):
        AuditSettings.from_env({**ENV, "SOURCE_QUEUE_MAX_EVENT_AGE_SECONDS": "two weeks"})
