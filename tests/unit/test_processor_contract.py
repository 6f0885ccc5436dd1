"""The processor contract (service/contract.py) is what the state machines do.

The Process state of the processor and of the SQS batch workflow builds the input, retries
and catches the errors by name and keeps the result: each test reads the deployed
definitions and holds one clause of the contract to them, so neither can move alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service import errors
from service.contract import (
    RESULT_MAX_CHARACTERS,
    RETRIED_ERRORS,
    THROTTLED,
    THROTTLED_RETRIES,
    CallToken,
    ErrorName,
    ProcessorInput,
)
from service.handlers.processor import work_item_of
from service.model import WorkItem


def _keys(typed: Any) -> set[str]:
    """A TypedDict's keys, read without evaluating its annotations: the engine's in-process
    Lambda runtime swaps the service modules in sys.modules, where get_type_hints looks."""
    return set(typed.__required_keys__) | set(typed.__optional_keys__)


ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = ["processor", "batch"]


def _definition(name: str) -> dict[str, Any]:
    """A deployed definition, DefinitionSubstitutions left in place (a bare ${Name} is a number)."""
    text = (ROOT / "statemachines" / f"{name}.asl.json").read_text(encoding="utf-8")
    definition: dict[str, Any] = json.loads(re.sub(r'(?<!")\$\{\w+\}(?!")', "0", text))
    return definition


def _states(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state, those of Parallel branches and Map iterations included."""
    for name, state in states.items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from _states(branch["States"])
        if "ItemProcessor" in state:
            yield from _states(state["ItemProcessor"]["States"])


def _state(name: str, state_name: str) -> dict[str, Any]:
    (state,) = [s for n, s in _states(_definition(name)["States"]) if n == state_name]
    return state


def _expression(value: str) -> str:
    """The JSONata inside "{% ... %}"."""
    match = re.fullmatch(r"\{%\s*(.*?)\s*%\}", value, re.DOTALL)
    assert match is not None, value
    return match.group(1)


@pytest.mark.parametrize("name", DEFINITIONS)
def test_the_process_state_sends_exactly_the_contracts_input(name: str) -> None:
    # GIVEN the Process state of a deployed definition
    payload = _state(name, "Process")["Arguments"]["Payload"]
    # THEN it sends the contract's fields, no more and no fewer
    assert set(payload) == _keys(ProcessorInput) == ProcessorInput.__required_keys__
    # AND the work item is the claimed one, the attempt the claims so far
    assert _expression(payload["workItem"]) == "$workItem"
    assert _expression(payload["attempt"]) == "$attempt"


@pytest.mark.parametrize("name", DEFINITIONS)
def test_the_call_token_is_the_lock_token_the_attempt_and_the_retry(name: str) -> None:
    # GIVEN the Process state's lock token and call token expressions
    payload = _state(name, "Process")["Arguments"]["Payload"]
    lock_token = _expression(payload["lockToken"])
    # THEN the call token is built as CallToken writes it: <lockToken>#<attempt>.<retry>
    expected = f"{lock_token} & '#' & $attempt & '.' & $states.context.State.RetryCount"
    assert _expression(payload["callToken"]) == expected
    # AND the lock token is the claim's lock owner, the one Claim writes
    claim = json.dumps(_state(name, "Claim")["Arguments"]["Item"])
    assert f"'lock_owner': {{'S': {lock_token}}}" in claim


def test_a_call_token_parses_back_to_its_parts() -> None:
    # GIVEN the call tokens of the processor and of the batch workflow's third message
    arn = "arn:aws:states:us-east-1:123456789012:execution:onceflow-processor:events-1"
    # WHEN they are parsed
    single = CallToken.parse(f"{arn}#2.1")
    batched = CallToken.parse(f"{arn}#3#1.0")
    # THEN the lock token keeps its own '#', and each writes itself back as it came
    assert single == CallToken(arn, 2, 1) and str(single) == f"{arn}#2.1"
    assert batched == CallToken(f"{arn}#3", 1, 0) and str(batched) == f"{arn}#3#1.0"
    with pytest.raises(ValueError, match="not a call token"):
        CallToken.parse(arn)


@pytest.mark.parametrize("name", DEFINITIONS)
def test_the_retries_are_the_contracts(name: str) -> None:
    # GIVEN the Process state's Retry
    retry = _state(name, "Process")["Retry"]
    # THEN the first retries the contract's errors, TransientError among them
    assert tuple(retry[0]["ErrorEquals"]) == RETRIED_ERRORS
    assert ErrorName.TRANSIENT in retry[0]["ErrorEquals"]
    # AND throttling is retried on its own, as many times as the contract says
    assert retry[1]["ErrorEquals"] == [THROTTLED]
    assert retry[1]["MaxAttempts"] == THROTTLED_RETRIES
    # AND neither retries the errors that must end the claim at once
    retried = {e for r in retry for e in r["ErrorEquals"]}
    assert not retried & {ErrorName.PERMANENT, ErrorName.SUPERSEDED, "States.ALL"}


@pytest.mark.parametrize("name", DEFINITIONS)
def test_superseded_is_caught_by_name_and_permanent_dead_letters_at_once(name: str) -> None:
    # GIVEN the Process state's Catch
    superseded, everything = _state(name, "Process")["Catch"]
    # THEN ObjectSuperseded ends the work as superseded, before the catch-all
    assert superseded["ErrorEquals"] == [ErrorName.SUPERSEDED]
    assert superseded["Next"] == "MarkSuperseded"
    # AND every other error is recorded, PermanentError with the condition that
    # dead-letters it whatever the attempt
    assert everything["ErrorEquals"] == ["States.ALL"]
    assert everything["Next"] == "MarkFailed"
    condition = everything["Assign"]["failure"]
    assert f"$e.Error = '{ErrorName.PERMANENT}' ? '{ErrorName.PERMANENT}'" in condition


def test_the_bundled_errors_carry_the_contracts_names() -> None:
    # GIVEN the bundled processor's error classes
    # THEN each is named as the contract names it (Lambda's errorType is the class name)
    assert errors.TransientError.__name__ == ErrorName.TRANSIENT
    assert errors.PermanentError.__name__ == ErrorName.PERMANENT
    assert errors.ObjectSuperseded.__name__ == ErrorName.SUPERSEDED


@pytest.mark.parametrize("name", DEFINITIONS)
def test_the_result_is_kept_up_to_the_contracts_length(name: str) -> None:
    # GIVEN MarkComplete, which keeps the function's result in the ledger row
    values = _state(name, "MarkComplete")["Arguments"]["ExpressionAttributeValues"]
    # THEN the result's JSON text is kept up to the contract's length, a marker beyond it
    assert (
        f"':result': {{'S': $length($text) <= {RESULT_MAX_CHARACTERS} ? $text "
        """: '{"truncated":true}'}""" in values
    )


def test_every_field_a_work_item_is_built_with_is_the_models() -> None:
    # GIVEN every work item the processor's projection builds ('item': {...}, the work item
    # Claim's rules check and its Assign keeps)
    source = (ROOT / "statemachines" / "src" / "processor.asl.yaml").read_text(encoding="utf-8")
    built = set()
    for start in [m.end() for m in re.finditer(r"'item': (?:\$merge\(\[)?\{", source)]:
        depth, end = 1, start
        while depth:
            depth += {"{": 1, "}": -1}.get(source[end], 0)
            end += 1
        built |= set(re.findall(r"'(\w+)':", source[start:end]))
    # THEN each of their fields is one the model's WorkItem names
    assert {"idempotencyKey", "bucket", "key", "payload", "detailType"} <= built
    assert built <= _keys(WorkItem)


def test_the_sample_payload_is_the_contracts_input() -> None:
    # GIVEN events/processor-payload.json, the payload `sam local invoke` and
    # `onceflow invoke ProcessorFunction` send the bundled processor
    payload = json.loads((ROOT / "events" / "processor-payload.json").read_text("utf-8"))
    # THEN it has the contract's fields and a call token of the claim it names
    assert set(payload) == _keys(ProcessorInput)
    token = CallToken.parse(payload["callToken"])
    assert (token.lock_token, token.attempt) == (payload["lockToken"], payload["attempt"])
    # AND the bundled processor reads its work item
    assert work_item_of(payload) == payload["workItem"]
