"""AWS's limits on the local engine: each fails here where and as it fails on AWS.

Every test injects the limit for real (a handler that pages forever or sleeps
past its Timeout, a payload over the quota, a number DynamoDB cannot store) and
asserts the status, error, cause and history, or the service's own error. The
AWS page each behaviour comes from is named in onceflow/local/limits/ and docs/local-engine.md.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.models import stepfunctions_parser_backends

from onceflow.local import limits
from onceflow.local.engine import ACCOUNT_ID, REGION, LocalEngine
from tests.helpers import FUNCTION, audit_engine

ROLE = "arn:aws:iam::123456789012:role/limits-probe"


def _machine(
    engine: LocalEngine, name: str, definition: dict[str, Any], kind: str = "STANDARD"
) -> str:
    return str(
        engine.client("stepfunctions").create_state_machine(
            name=name, definition=json.dumps(definition), roleArn=ROLE, type=kind
        )["stateMachineArn"]
    )


def _invoke_task(engine: LocalEngine, **fields: Any) -> dict[str, Any]:
    """A lambda:invoke Task of the template's processor function (JSONata)."""
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "Arguments": {
            "FunctionName": engine.get_att(FUNCTION, "Arn"),
            "Payload": "{% $states.input %}",
        },
        "Output": "{% $states.result.Payload %}",
        **fields,
    }


def _last_events(engine: LocalEngine, arn: str, n: int = 2) -> list[dict[str, Any]]:
    """The last n history events, newest first.

    Read from the local backend: moto answers GetExecutionHistory with the whole
    history in one page (no maxResults, no reverseOrder), and botocore takes
    seconds to parse 25,000 events.
    """
    backend = stepfunctions_parser_backends[ACCOUNT_ID][REGION]
    events = backend.get_execution_history(arn)["events"]
    return [dict(event) for event in reversed(events[-n:])]


def _error_code(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    error = raised.value.response["Error"]
    return str(error["Code"]), str(error["Message"])


# ---- Step Functions: 25,000 events in one execution's history ------------------


@pytest.fixture
def audited() -> Iterator[LocalEngine]:
    with audit_engine() as local:
        yield local


@pytest.mark.slow
def _counting_loop(iterations: int) -> dict[str, Any]:
    """A Pass/Choice loop: 4 events per turn; with ExecutionStarted and the final
    Succeed state and ExecutionSucceeded, 4 * iterations + 4 events in all."""
    return {
        "QueryLanguage": "JSONata",
        "StartAt": "Count",
        "States": {
            "Count": {
                "Type": "Pass",
                "Output": "{% {'n': $states.input.n + 1} %}",
                "Next": "More",
            },
            "More": {
                "Type": "Choice",
                "Choices": [
                    {"Condition": f"{{% $states.input.n < {iterations} %}}", "Next": "Count"}
                ],
                "Default": "Done",
            },
            "Done": {"Type": "Succeed"},
        },
    }


@pytest.mark.slow
def test_an_execution_whose_25000th_event_is_execution_succeeded_succeeds(
    engine: LocalEngine,
) -> None:
    # GIVEN a loop whose history is exactly 25,000 events, and one a turn longer
    exact = _machine(engine, "exactly-25000", _counting_loop(6_249))
    longer = _machine(engine, "one-turn-more", _counting_loop(6_250))
    # WHEN both run
    fits = engine.execute(exact, {"n": 0}, timeout=300)
    over = engine.execute(longer, {"n": 0}, timeout=300)
    # THEN the first ends with ExecutionSucceeded as event 25,000 (AWS lets it);
    # the second fails there
    assert fits.status == "SUCCEEDED", (fits.error, fits.cause)
    [last] = _last_events(engine, fits.arn, 1)
    assert (last["id"], last["type"]) == (25_000, "ExecutionSucceeded")
    assert over.status == "FAILED"
    assert over.error == "States.Runtime"
    [last] = _last_events(engine, over.arn, 1)
    assert (last["id"], last["type"]) == (25_000, "ExecutionFailed")


# ---- Step Functions: 256 KiB per state, in UTF-8 bytes ---------------------------


def _returning(payload: Any) -> Any:
    def handler(event: Any, context: Any) -> Any:
        return payload

    return handler


def test_a_task_result_is_measured_in_utf8_bytes(engine: LocalEngine) -> None:
    # GIVEN a function that returns 120,000 "é": 240,000 bytes of UTF-8, 720,000
    # characters of ASCII-escaped JSON (what moto measured)
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Work",
        "States": {"Work": _invoke_task(engine, End=True)},
    }
    arn = _machine(engine, "utf8-result", definition)
    with engine.override_function(FUNCTION, _returning({"text": "é" * 120_000})):
        # WHEN the Task takes it as its result
        result = engine.execute(arn, {})
    # THEN it fits in 256 KiB, as on AWS
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output == {"text": "é" * 120_000}


def test_a_state_output_of_exactly_256_kib_fits_and_one_byte_more_does_not(
    engine: LocalEngine,
) -> None:
    # GIVEN Pass states whose output is {"t":"xx..."}: 262,144 bytes, then 262,145
    def machine(n: int) -> str:
        definition = {
            "QueryLanguage": "JSONata",
            "StartAt": "Fill",
            "States": {
                "Fill": {
                    "Type": "Pass",
                    "Output": f"{{% {{'t': $pad('', {n}, 'x')}} %}}",
                    "End": True,
                }
            },
        }
        return _machine(engine, f"fill-{n}", definition)

    # WHEN each runs
    fits = engine.execute(machine(262_144 - 8), {})
    over = engine.execute(machine(262_144 - 7), {})
    # THEN the quota is "at most 262,144 bytes": the first succeeds, the second
    # fails with States.DataLimitExceeded
    assert fits.status == "SUCCEEDED", (fits.error, fits.cause)
    assert len(json.dumps(fits.output, separators=(",", ":"))) == 262_144
    assert over.status == "FAILED"
    assert over.error == "States.DataLimitExceeded"


def test_a_state_holding_a_lone_surrogate_is_sized_without_breaking(engine: LocalEngine) -> None:
    # GIVEN a Pass state whose output is a bare string with a lone surrogate
    # (JSON text carries it escaped; moto's own size check raised on it)
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Echo",
        "States": {"Echo": {"Type": "Pass", "Output": "{% $states.input.s %}", "End": True}},
    }
    arn = _machine(engine, "lone-surrogate", definition)
    # WHEN it runs
    result = engine.execute(arn, {"s": "a\ud800b"})
    # THEN it succeeds with the text as it came
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output == "a\ud800b"


def test_a_catch_that_names_data_limit_exceeded_catches_it(engine: LocalEngine) -> None:
    # GIVEN the same Task, whose Catch names States.DataLimitExceeded
    task = _invoke_task(
        engine,
        Catch=[{"ErrorEquals": ["States.DataLimitExceeded"], "Next": "Caught"}],
        End=True,
    )
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Work",
        "States": {"Work": task, "Caught": {"Type": "Succeed"}},
    }
    arn = _machine(engine, "named-data-limit", definition)
    with engine.override_function(FUNCTION, _returning({"text": "é" * 140_000})):
        # WHEN it runs
        result = engine.execute(arn, {})
    # THEN the Catch takes it
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.outcome == "Caught"


def test_task_arguments_over_256_kib_fail_before_the_function_is_called(
    engine: LocalEngine,
) -> None:
    # GIVEN a state input of 150,000 bytes that the Task's Arguments double
    calls: list[Any] = []

    def handler(event: Any, context: Any) -> Any:
        calls.append(event)
        return {}

    task = _invoke_task(engine, End=True)
    task["Arguments"]["Payload"] = "{% $states.input.text & $states.input.text %}"
    definition = {"QueryLanguage": "JSONata", "StartAt": "Work", "States": {"Work": task}}
    arn = _machine(engine, "large-arguments", definition)
    with engine.override_function(FUNCTION, handler):
        # WHEN it runs
        result = engine.execute(arn, {"text": "x" * 150_000})
    # THEN, as AWS does when the input after Parameters processing is over the
    # quota, the Task fails with States.DataLimitExceeded and nothing is invoked
    assert result.status == "FAILED"
    assert result.error == "States.DataLimitExceeded"
    assert calls == []
    assert "TaskScheduled" not in result.event_types()


def test_assigned_variables_over_256_kib_fail(engine: LocalEngine) -> None:
    # GIVEN a Pass state that assigns two variables of 140,000 bytes each
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Keep",
        "States": {
            "Keep": {
                "Type": "Pass",
                "Assign": {"a": "{% $states.input.text %}", "b": "{% $states.input.text %}"},
                "Next": "Done",
            },
            "Done": {"Type": "Succeed"},
        },
    }
    arn = _machine(engine, "large-assign", definition)
    # WHEN it runs
    result = engine.execute(arn, {"text": "y" * 140_000})
    # THEN the state's assignments are over 256 KiB: States.DataLimitExceeded
    assert result.status == "FAILED"
    assert result.error == "States.DataLimitExceeded"
    assert "Done" not in result.states_entered


# ---- Step Functions: EXPRESS executions stop at five minutes -------------------


def _express_then_task(engine: LocalEngine, name: str, wait: int, kind: str = "EXPRESS") -> str:
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Hold",
        "States": {
            "Hold": {"Type": "Wait", "Seconds": wait, "Next": "Work"},
            "Work": _invoke_task(engine, End=True),
        },
    }
    return _machine(engine, name, definition, kind)


def test_an_express_execution_times_out_at_five_minutes_on_the_engine_clock(
    engine: LocalEngine,
) -> None:
    # GIVEN an EXPRESS machine that waits 400 s (no real time at time scale 0),
    # then calls a function; and the same machine as STANDARD
    calls: list[Any] = []

    def handler(event: Any, context: Any) -> Any:
        calls.append(event)
        return {}

    express = _express_then_task(engine, "express-wait", 400)
    standard = _express_then_task(engine, "standard-wait", 400, "STANDARD")
    with engine.override_function(FUNCTION, handler):
        # WHEN each runs
        timed_out = engine.execute(express, {})
        fine = engine.execute(standard, {})
    # THEN the EXPRESS one times out with States.Timeout at 300 s, before the Task;
    # the STANDARD one (a year to run) does not
    assert timed_out.status == "TIMED_OUT"
    assert timed_out.error == "States.Timeout"
    [last] = _last_events(engine, timed_out.arn, 1)
    assert last["type"] == "ExecutionTimedOut"
    assert last["executionTimedOutEventDetails"]["error"] == "States.Timeout"
    assert "Work" not in timed_out.states_entered
    assert fine.status == "SUCCEEDED"
    assert len(calls) == 1  # the STANDARD execution's only


def test_express_retry_backoff_counts_toward_the_five_minutes(engine: LocalEngine) -> None:
    # GIVEN an EXPRESS Task that always fails and retries after 100, 200, 400 s
    calls: list[float] = []

    def failing(event: Any, context: Any) -> Any:
        calls.append(time.monotonic())
        raise RuntimeError("still down")

    task = _invoke_task(
        engine,
        Retry=[
            {
                "ErrorEquals": ["RuntimeError"],
                "IntervalSeconds": 100,
                "MaxAttempts": 5,
                "BackoffRate": 2,
            }
        ],
        End=True,
    )
    definition = {"QueryLanguage": "JSONata", "StartAt": "Work", "States": {"Work": task}}
    arn = _machine(engine, "express-retries", definition, "EXPRESS")
    with engine.override_function(FUNCTION, failing):
        # WHEN it runs at time scale 0
        result = engine.execute(arn, {})
    # THEN attempts at 0 and 100 s, and the backoff to 300 s ends it: TIMED_OUT
    # (without the limit, 6 attempts and a FAILED execution)
    assert result.status == "TIMED_OUT"
    assert result.error == "States.Timeout"
    assert len(calls) == 2
    first, second = engine.state.clock.slept[-2:]  # the second cut short at the deadline
    assert first == 100 and 199 < second < 200


def test_express_real_time_adds_to_engine_time(engine: LocalEngine) -> None:
    # GIVEN an EXPRESS machine that waits 299 s on the engine's clock, then calls
    # a function that really works for 2 s
    returned = threading.Event()

    def slow(event: Any, context: Any) -> Any:
        time.sleep(2)
        returned.set()
        return {"done": True}

    arn = _express_then_task(engine, "express-real", 299)
    with engine.override_function(FUNCTION, slow):
        # WHEN it runs
        result = engine.execute(arn, {})
        assert returned.wait(10)
    # THEN the five minutes pass during the call: TIMED_OUT, and the function's
    # late return is marked (its caller had gone)
    assert result.status == "TIMED_OUT"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not engine.runtime.invocations:
        time.sleep(0.05)
    [record] = engine.runtime.invocations
    assert isinstance(record, limits.lambda_timeout.TimedInvocation)
    assert record.caller_gone and not record.timed_out


# ---- Lambda: each function's Timeout -------------------------------------------


@pytest.fixture
def short_timeout() -> Iterator[LocalEngine]:
    """The processor function with Timeout 3 (ProcessorTimeoutSeconds=3)."""
    with LocalEngine(
        parameters={"ProcessorTimeoutSeconds": "3"}, function_log=io.StringIO(), time_scale=0.0
    ) as local:
        yield local


def test_an_invocation_past_its_timeout_fails_with_sandbox_timedout(
    short_timeout: LocalEngine,
) -> None:
    engine = short_timeout
    engine.runtime.invocations.clear()
    finished = threading.Event()

    def slow(event: Any, context: Any) -> Any:
        time.sleep(3.5)
        finished.set()
        return {"late": True}

    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Work",
        "States": {"Work": _invoke_task(engine, End=True)},
    }
    arn = _machine(engine, "timed-out-function", definition)
    # GIVEN a function with Timeout 3 whose handler takes 3.5 s
    with engine.override_function(FUNCTION, slow):
        # WHEN a Task invokes it
        started = time.monotonic()
        result = engine.execute(arn, {})
        waited = time.monotonic() - started
        assert finished.wait(5)
    # THEN the Task fails as Lambda's timeout makes it fail, at the Timeout
    assert result.status == "FAILED"
    assert result.error == "Sandbox.Timedout"
    cause = json.loads(result.cause or "{}")
    assert cause["errorType"] == "Sandbox.Timedout"
    assert cause["errorMessage"].startswith("RequestId: ")
    assert cause["errorMessage"].endswith(" Error: Task timed out after 3.00 seconds")
    assert waited < 3.4
    # ... and the handler that ran on is recorded and logged: locally it finished,
    # on AWS the sandbox would have stopped it at 3 s
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not getattr(
        engine.runtime.invocations[-1], "finished_after_timeout", False
    ):
        time.sleep(0.05)
    [record] = engine.runtime.invocations
    assert isinstance(record, limits.lambda_timeout.TimedInvocation)
    assert record.timed_out and record.finished_after_timeout
    assert record.error_type == "Sandbox.Timedout"
    log = engine.function_log.getvalue()  # type: ignore[union-attr]
    assert "Task timed out after 3.00 seconds" in log
    assert "ran on after its Timeout of 3 s" in log


def test_the_lambda_api_reports_the_timeout(short_timeout: LocalEngine) -> None:
    # GIVEN the same function, invoked directly through the Lambda API
    def slow(event: Any, context: Any) -> Any:
        time.sleep(3.2)
        return {}

    with short_timeout.override_function(FUNCTION, slow):
        # WHEN it runs past its Timeout
        payload, error = short_timeout.invoke(FUNCTION, {})
    # THEN Lambda's answer is an unhandled Sandbox.Timedout
    assert error == "Sandbox.Timedout"
    assert set(payload) == {"errorMessage", "errorType"}
    assert payload["errorMessage"].endswith("Task timed out after 3.00 seconds")


def test_an_invocation_still_running_when_its_task_times_out_is_recorded(
    short_timeout: LocalEngine,
) -> None:
    engine = short_timeout
    engine.runtime.invocations.clear()
    effects: list[str] = []
    returned = threading.Event()

    def slower_than_the_task(event: Any, context: Any) -> Any:
        time.sleep(2)
        effects.append("written")  # a side effect the Task no longer waits for
        returned.set()
        return {"ok": True}

    # GIVEN a Task whose TimeoutSeconds (1) is shorter than its function's Timeout (3)
    task = _invoke_task(engine, TimeoutSeconds=1, End=True)
    definition = {"QueryLanguage": "JSONata", "StartAt": "Work", "States": {"Work": task}}
    arn = _machine(engine, "task-timeout", definition)
    with engine.override_function(FUNCTION, slower_than_the_task):
        # WHEN the Task times out while the function runs on
        result = engine.execute(arn, {})
        assert returned.wait(5)
    # THEN the Task fails with States.Timeout; the function ran on and its effect
    # happened (as on AWS), and that is flagged and logged, not silently kept
    assert result.status == "FAILED"
    assert result.error == "States.Timeout"
    assert effects == ["written"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not engine.runtime.invocations:
        time.sleep(0.05)
    [record] = engine.runtime.invocations
    assert isinstance(record, limits.lambda_timeout.TimedInvocation)
    assert record.caller_gone and not record.timed_out
    assert "returned after the Task that called it had ended" in engine.function_log.getvalue()  # type: ignore[union-attr]


# ---- services: one engine for the checks on DynamoDB, SQS and EventBridge --------
# (no execution runs in these; each test uses keys and queues of its own)


@pytest.fixture(scope="module")
def services() -> Iterator[LocalEngine]:
    with LocalEngine(function_log=io.StringIO(), stack_name="limits-services") as local:
        yield local


# ---- DynamoDB: item size, key size, numbers --------------------------------------


def _table(services: LocalEngine) -> str:
    return services.ref("LedgerTable")


def test_an_item_is_sized_as_dynamodb_sizes_it(services: LocalEngine) -> None:
    ddb = services.client("dynamodb")
    # GIVEN items of 409,000 bytes (a string; moto refused above 405,000) and of
    # 420,000 bytes by AWS's arithmetic (a list of 140,000 numbers: 3 bytes each
    # with the element overhead; moto counted 1)
    fits = {"pk": {"S": "big"}, "b": {"S": "x" * 409_000}}
    numbers = {"pk": {"S": "numbers"}, "l": {"L": [{"N": "1"}] * 140_000}}
    # WHEN they are put
    ddb.put_item(TableName=_table(services), Item=fits)
    code, message = _error_code(ddb.put_item, TableName=_table(services), Item=numbers)
    # THEN the first is stored (under 400 KB), the second refused as DynamoDB refuses it
    stored = ddb.get_item(TableName=_table(services), Key={"pk": {"S": "big"}})["Item"]
    assert len(stored["b"]["S"]) == 409_000
    assert (code, message) == (
        "ValidationException",
        "Item size has exceeded the maximum allowed size",
    )
    assert limits.dynamodb.item_size(numbers) == 2 + 7 + 1 + 3 + 140_000 * 3


def test_an_update_is_sized_by_the_item_it_leaves(services: LocalEngine) -> None:
    ddb = services.client("dynamodb")
    table = _table(services)
    ddb.put_item(TableName=table, Item={"pk": {"S": "row"}, "a": {"S": "x" * 300_000}})
    # GIVEN a 300,000-byte item
    # WHEN its attribute is replaced by another 300,000 bytes, then 200,000 are added
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "row"}},
        UpdateExpression="SET a = :v",
        ExpressionAttributeValues={":v": {"S": "z" * 300_000}},
    )
    code, message = _error_code(
        ddb.update_item,
        TableName=table,
        Key={"pk": {"S": "row"}},
        UpdateExpression="SET c = :v",
        ExpressionAttributeValues={":v": {"S": "y" * 200_000}},
    )
    # THEN the replacement fits (moto counted the old and new values together);
    # the addition does not, with UpdateItem's own message, and nothing changed
    assert (code, message) == (
        "ValidationException",
        "Item size to update has exceeded the maximum allowed size",
    )
    item = ddb.get_item(TableName=table, Key={"pk": {"S": "row"}})["Item"]
    assert item["a"]["S"] == "z" * 300_000 and "c" not in item


def test_partition_keys_over_2048_bytes_are_refused(services: LocalEngine) -> None:
    # (moto enforces this already; this keeps it covered) GIVEN keys of 2,048 and
    # 2,050 bytes (1,025 "é")
    ddb = services.client("dynamodb")
    table = _table(services)
    ddb.put_item(TableName=table, Item={"pk": {"S": "k" * 2048}})
    # WHEN the longer one is put, or updated
    put = _error_code(ddb.put_item, TableName=table, Item={"pk": {"S": "é" * 1025}})
    update = _error_code(
        ddb.update_item,
        TableName=table,
        Key={"pk": {"S": "é" * 1025}},
        UpdateExpression="SET a = :v",
        ExpressionAttributeValues={":v": {"S": "1"}},
    )
    # THEN DynamoDB's ValidationException
    expected = (
        "ValidationException",
        "One or more parameter values were invalid: Size of hashkey has exceeded the maximum "
        "size limit of2048 bytes",
    )
    assert put == expected and update == expected


def test_a_key_over_its_size_is_refused_by_reads_and_deletes_too(services: LocalEngine) -> None:
    # AWS refuses an oversized key in GetItem, BatchGetItem and DeleteItem as in PutItem
    # (captured with the AWS CLI: ExtendDB/extenddb#194, "fix: primary key size limit";
    # moto checked writes only, and answered a read as if the item were missing).
    # GIVEN a key of 1,025 "é" (2,050 bytes), and one of 683 "中" (2,049 bytes)
    ddb = services.client("dynamodb")
    table = _table(services)
    expected = (
        "ValidationException",
        "One or more parameter values were invalid: Size of hashkey has exceeded the maximum "
        "size limit of2048 bytes",
    )
    for key in ({"pk": {"S": "é" * 1025}}, {"pk": {"S": "中" * 683}}):
        # WHEN it is read, read in a batch, or deleted THEN DynamoDB's ValidationException
        assert _error_code(ddb.get_item, TableName=table, Key=key) == expected
        batch = {table: {"Keys": [{"pk": {"S": "fine"}}, key]}}
        assert _error_code(ddb.batch_get_item, RequestItems=batch) == expected
        assert _error_code(ddb.delete_item, TableName=table, Key=key) == expected
    # AND a key of exactly 2,048 bytes (1,024 "é") is read as usual
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": {"S": "é" * 1024}})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"L": [{"N": "1E+126"}]}, limits.dynamodb._NUMBER_OVERFLOW),
        ({"M": {"n": {"N": "-1E+126"}}}, limits.dynamodb._NUMBER_OVERFLOW),
        ({"N": "1" * 39}, limits.dynamodb._NUMBER_DIGITS),
        ({"NS": ["1", "1E-131"]}, limits.dynamodb._NUMBER_UNDERFLOW),
    ],
)
def test_numbers_dynamodb_cannot_store_are_refused_anywhere_in_an_item(
    services: LocalEngine, value: dict[str, Any], message: str
) -> None:
    ddb = services.client("dynamodb")
    # GIVEN a number out of DynamoDB's range or precision, at any depth
    # WHEN it is put
    code, found = _error_code(
        ddb.put_item, TableName=_table(services), Item={"pk": {"S": "n"}, "v": value}
    )
    # THEN DynamoDB's ValidationException, and no item
    assert (code, found) == ("ValidationException", message)
    assert "Item" not in ddb.get_item(TableName=_table(services), Key={"pk": {"S": "n"}})


def test_update_values_are_checked_as_numbers_too(services: LocalEngine) -> None:
    ddb = services.client("dynamodb")
    # GIVEN an UpdateItem whose value is 1E-131 (below 1E-130)
    # WHEN it runs
    code, message = _error_code(
        ddb.update_item,
        TableName=_table(services),
        Key={"pk": {"S": "tiny"}},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "1E-131"}},
    )
    # THEN the underflow error; 38 digits and the range's ends still pass
    assert (code, message) == ("ValidationException", limits.dynamodb._NUMBER_UNDERFLOW)
    for fine in ("1" * 38, "9.9999999999999999999999999999999999999E+125", "1E-130", "0"):
        ddb.update_item(
            TableName=_table(services),
            Key={"pk": {"S": "tiny"}},
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"N": fine}},
        )


def test_a_top_level_underflow_stays_refused(services: LocalEngine) -> None:
    # (moto enforces this already) GIVEN a number below 1E-130 at the top level
    ddb = services.client("dynamodb")
    # WHEN it is put  THEN the underflow error
    assert _error_code(
        ddb.put_item, TableName=_table(services), Item={"pk": {"S": "u"}, "v": {"N": "1E-131"}}
    ) == ("ValidationException", limits.dynamodb._NUMBER_UNDERFLOW)


# ---- SQS: message size in bytes, valid characters --------------------------------


def _queue(services: LocalEngine, name: str, **attributes: str) -> str:
    return str(
        services.client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    )


def test_a_message_is_sized_in_utf8_bytes_with_its_attributes(services: LocalEngine) -> None:
    sqs = services.client("sqs")
    url = _queue(services, "small-messages", MaximumMessageSize="65536")
    # GIVEN a queue of 64 KiB messages (as the template's source queue)
    # WHEN a body of 40,000 "é" (80,000 bytes), and an ASCII body that fits only
    # without its attribute, are sent
    body = _error_code(sqs.send_message, QueueUrl=url, MessageBody="é" * 40_000)
    attribute = _error_code(
        sqs.send_message,
        QueueUrl=url,
        MessageBody="x" * 65_000,
        MessageAttributes={"note": {"DataType": "String", "StringValue": "y" * 1_000}},
    )
    # THEN both are refused as SQS refuses them; a message that fits goes through
    expected = (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 65536 bytes.",
    )
    assert body == expected and attribute == expected
    sqs.send_message(QueueUrl=url, MessageBody="é" * 32_000)


@pytest.mark.parametrize("bad", ["\x00", "\x01", "\x0b", "\x1f", "\ufffe", "\uffff"])
def test_characters_outside_xml_are_refused_in_bodies_and_attributes(
    services: LocalEngine, bad: str
) -> None:
    sqs = services.client("sqs")
    url = _queue(services, "characters")
    # GIVEN a character SQS does not accept
    # WHEN it is in the body, or in a string attribute
    body = _error_code(sqs.send_message, QueueUrl=url, MessageBody=f"a{bad}b")
    attribute = _error_code(
        sqs.send_message,
        QueueUrl=url,
        MessageBody="fine",
        MessageAttributes={"a": {"DataType": "String", "StringValue": f"x{bad}"}},
    )
    # THEN InvalidMessageContents, naming the character
    assert body == (
        "InvalidMessageContents",
        f"Invalid binary character '#x{ord(bad):X}' was found in the message body, the set of "
        "allowed characters is #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | "
        "[#x10000-#x10FFFF].",
    )
    assert attribute[0] == "InvalidMessageContents"
    # ... while tab, newline, carriage return and characters beyond the BMP pass
    sqs.send_message(QueueUrl=url, MessageBody="\t\n\r é \U0001f600")


def test_a_batch_is_sized_in_bytes(services: LocalEngine) -> None:
    sqs = services.client("sqs")
    url = _queue(services, "batches")
    # GIVEN two messages of 300,000 "é" each: 1,200,000 bytes, 600,000 characters
    entries = [{"Id": str(n), "MessageBody": "é" * 300_000} for n in range(2)]
    # WHEN they are sent in one batch
    code, message = _error_code(sqs.send_message_batch, QueueUrl=url, Entries=entries)
    # THEN the batch is over SQS's 1 MiB
    assert code.endswith("BatchRequestTooLong")  # moto's own code for it, as before
    assert "1200000 bytes" in message


def test_a_message_over_one_mib_stays_refused(services: LocalEngine) -> None:
    # (moto enforces this already for ASCII) GIVEN a queue with the default
    # MaximumMessageSize (1 MiB) WHEN 1,048,577 bytes are sent THEN it is refused
    sqs = services.client("sqs")
    url = _queue(services, "default-size")
    code, _ = _error_code(sqs.send_message, QueueUrl=url, MessageBody="x" * 1_048_577)
    assert code == "InvalidParameterValue"


# ---- EventBridge: PutEvents entry size -------------------------------------------


def test_a_custom_event_over_the_entry_limit_is_refused_by_put_events(
    services: LocalEngine,
) -> None:
    # GIVEN a custom event whose Detail is 1 MiB of JSON
    detail = {"blob": "x" * (1024 * 1024)}
    # WHEN it is put on the bus
    with pytest.raises(ClientError) as raised:
        services.put_custom_event("onceflow.work", "Appointment Requested", detail)
    # THEN PutEvents refuses the request, and no execution starts
    assert raised.value.response["Error"] == {
        "Code": "ValidationException",
        "Message": "Total size of the entries in the request is over the limit.",
    }
    sfn = services.client("stepfunctions")
    assert (
        sfn.list_executions(stateMachineArn=services.ref("ProcessorStateMachine"))["executions"]
        == []
    )


def test_put_events_sizes_entries_as_eventbridge_does(services: LocalEngine) -> None:
    events = services.client("events")
    # GIVEN entries that fit alone but not together (600,000 bytes of "é" each)
    entry = {
        "Source": "s",
        "DetailType": "d",
        "Detail": json.dumps({"a": "é" * 300_000}, ensure_ascii=False),
    }
    # WHEN they are put in one request
    code, message = _error_code(events.put_events, Entries=[entry, entry])
    # THEN the request is refused; one alone goes through
    assert (code, message) == (
        "ValidationException",
        "Total size of the entries in the request is over the limit.",
    )
    assert events.put_events(Entries=[entry])["FailedEntryCount"] == 0
