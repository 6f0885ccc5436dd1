"""The moto patches: each still fits moto, and each closes the trap it is for."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata

from onceflow.local import patches
from onceflow.local.engine import LocalEngine
from onceflow.local.patches import fidelity, hooks, registry, speedups


@pytest.fixture
def installed() -> Iterator[None]:
    """The patches in place without an engine (as the first engine installs them)."""
    state = patches.EngineState(name="unit")
    patches.install(state)
    try:
        yield
    finally:
        patches.uninstall(state)


def pins_broken() -> dict[str, list[str]]:
    """What the patches' checks find on the pinned moto: nothing, or with every speed-up
    removed on purpose (`make test-without-speedups`), each pinned speed-up's pin."""
    if os.environ.get(registry.BREAK_PINS_ENV) != "1":
        return {}
    pinned = [p.name for p in speedups.PATCHES if p.pinned is not None]
    return {name: [f"{name} changed: re-check the patch that follows it"] for name in pinned}


def test_every_patch_fits_the_pinned_moto() -> None:
    # A hook or fidelity patch that does not fit stops the engine; a speed-up that
    # does not is left out. On the pinned moto, every one fits.
    assert patches.problems() == pins_broken()


@pytest.mark.usefixtures("installed")
def test_patches_in_place_are_judged_as_they_were_before_install() -> None:
    # GIVEN the patches in place (an engine runs) WHEN they are judged again
    # THEN moto's code is judged, not the engine's replacements in its place: nothing moved
    assert patches.problems() == pins_broken()


@pytest.mark.usefixtures("installed")
def test_install_puts_every_patch_in_place() -> None:
    assert moto_jsonata._eval_jsonata is fidelity.eval_jsonata
    assert (
        moto_jsonata.encode_jsonata_variable_declarations
        is fidelity.encode_jsonata_variable_declarations
    )
    from moto.stepfunctions.parser.asl.component.intrinsic import jsonata as intrinsic

    assert "$hash" not in intrinsic._DECLARATION_BY_VARIABLE_REFERENCE
    current = patches.installed()
    assert current is not None and current.skipped == pins_broken()
    assert {p.name for p in current.patches} == {
        p.name for p in patches.PATCHES if p.name not in pins_broken()
    }


@pytest.mark.parametrize(
    ("algorithm", "name"),
    [
        ("MD5", "md5"),
        ("SHA-1", "sha1"),
        ("SHA-256", "sha256"),
        ("SHA-384", "sha384"),
        ("SHA-512", "sha512"),
    ],
)
def test_hash_is_a_real_digest(algorithm: str, name: str) -> None:
    value = fidelity.eval_jsonata(f'$hash("s3://b/k#v1", "{algorithm}")')
    assert value == hashlib.new(name, b"s3://b/k#v1").hexdigest()
    # moto's stub returned one text for every input: every hash collided.
    assert fidelity.eval_jsonata(f'$hash("a", "{algorithm}")') != fidelity.eval_jsonata(
        f'$hash("b", "{algorithm}")'
    )


def test_hash_rejects_an_unknown_algorithm() -> None:
    with pytest.raises(moto_jsonata.JSONataException, match="algorithm must be one of"):
        fidelity.eval_jsonata('$hash("a", "SHA-999")')


def test_uuid_is_unique() -> None:
    assert fidelity.eval_jsonata("$uuid()") != fidelity.eval_jsonata("$uuid()")


@pytest.mark.parametrize("value", ['a"b', "back\\slash", "new\nline", "ünïcödé", "\udc80"])
def test_string_variables_are_escaped(value: str) -> None:
    declarations = fidelity.encode_jsonata_variable_declarations({"$v": value})
    assert fidelity.eval_jsonata(f"({declarations}$v)") == value


def test_moto_unescaped_strings_break_the_expression() -> None:
    # The trap: moto writes "{value}" as is, so a quote ends the literal early.
    broken = fidelity.moto_encode_jsonata_variable_declarations({"$v": 'a"b'})
    assert broken == '$v:="a"b";'
    with pytest.raises(moto_jsonata.JSONataException, match="S0"):  # a syntax error
        fidelity.eval_jsonata(f"({broken}$v)")


def test_time_scale_zero_never_sleeps(engine: LocalEngine) -> None:
    engine.state.clock.slept.clear()
    started = time.monotonic()
    with hooks.working_for(engine.state):
        hooks._ScaledTimeModule.sleep(30)  # the retrier's time.sleep
    assert engine.state.clock.slept == [30]
    assert time.monotonic() - started < 5


def test_concurrent_conditional_puts_have_exactly_one_winner(engine: LocalEngine) -> None:
    # The trap: moto's backends are not thread-safe and two conditional
    # PutItems on one key could both succeed. With the backend lock, one wins.
    table = engine.ref("LedgerTable")
    for trial in range(20):
        start = threading.Barrier(16)
        winners: list[int] = []
        lock = threading.Lock()

        def claim(
            worker: int,
            trial: int = trial,
            start: threading.Barrier = start,
            lock: threading.Lock = lock,
            winners: list[int] = winners,
        ) -> None:
            client = engine.client("dynamodb")
            start.wait(timeout=30)
            try:
                client.put_item(
                    TableName=table,
                    Item={"pk": {"S": f"race-{trial}"}, "owner": {"N": str(worker)}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except client.exceptions.ConditionalCheckFailedException:
                return
            with lock:
                winners.append(worker)

        threads = [threading.Thread(target=claim, args=(w,)) for w in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(winners) == 1, f"trial {trial}: {len(winners)} winners"


# ---- $parse, $decodeUrlComponent: fail where AWS fails --------------------------


def test_parse_is_json_parse() -> None:
    assert fidelity.eval_jsonata('$parse(\'{"a": [1, "x"]}\')') == {"a": [1, "x"]}
    with pytest.raises(moto_jsonata.JSONataException, match="not valid JSON"):
        fidelity.eval_jsonata("$parse('order.id')")


@pytest.mark.usefixtures("installed")
def test_moto_parse_was_eval_which_step_functions_does_not_have() -> None:
    # The trap: moto declares $parse as $eval, so a path "parses" to nothing;
    # and $eval is not available on AWS at all.
    from moto.stepfunctions.parser.asl.component.intrinsic import jsonata as intrinsic

    assert intrinsic._DECLARATION_BY_VARIABLE_REFERENCE == {}  # apply() removed them all
    with pytest.raises(moto_jsonata.JSONataException, match="T1006"):
        fidelity.eval_jsonata("$eval('1 + 1')")


@pytest.mark.parametrize(
    ("text", "decoded"),
    [("a%20b%2Bc", "a b+c"), ("caf%C3%A9", "café"), ("%E2%98%95", "☕"), ("plain", "plain")],
)
def test_decode_url_component_decodes(text: str, decoded: str) -> None:
    assert fidelity.eval_jsonata(f"$decodeUrlComponent('{text}')") == decoded


@pytest.mark.parametrize("text", ["100%zz", "a%C3%28", "%", "%E2%98"])
def test_decode_url_component_rejects_malformed_escapes(text: str) -> None:
    with pytest.raises(moto_jsonata.JSONataException, match="Malformed URL"):
        fidelity.eval_jsonata(f"$decodeUrlComponent('{text}')")


# ---- JSONata errors are States.QueryEvaluationError, catchable -----------------


def _run(engine: LocalEngine, definition: dict[str, object], execution_input: object) -> object:
    import json

    sfn = engine.client("stepfunctions")
    arn = sfn.create_state_machine(
        name=f"probe-{threading.get_ident()}-{len(json.dumps(definition))}",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/probe",
    )["stateMachineArn"]
    return engine.execute(arn, execution_input)


def _recorded(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, ...]]:
    """The arguments of each call of speedups.<name>, which still runs."""
    calls: list[tuple[Any, ...]] = []
    original = getattr(speedups, name)

    def recording(*args: Any) -> Any:
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(speedups, name, recording)
    return calls


def test_a_failed_expression_is_caught_as_query_evaluation_error(engine: LocalEngine) -> None:
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Parse",
        "States": {
            "Parse": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage",
                "Arguments": {
                    "QueueUrl": engine.ref("DeadLetterQueue"),
                    "MessageBody": "{% $string($parse($states.input.body)) %}",
                },
                "Catch": [
                    {
                        "ErrorEquals": ["States.QueryEvaluationError"],
                        "Output": "{% $states.errorOutput %}",
                        "Next": "Caught",
                    }
                ],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }
    result = _run(engine, definition, {"body": "not json"})
    assert result.status == "SUCCEEDED"  # type: ignore[attr-defined]
    assert result.output["Error"] == "States.QueryEvaluationError"  # type: ignore[attr-defined]
    assert "not valid JSON" in result.output["Cause"]  # type: ignore[attr-defined]


def test_a_failed_expression_in_a_dynamodb_tasks_arguments_is_query_evaluation_error(
    engine: LocalEngine,
) -> None:
    """Claim refuses an invalid event by failing an expression of its Arguments: on AWS a
    failed JSONata expression is States.QueryEvaluationError whichever state it is in
    (EvaluationFailedEventDetails, Step Functions API Reference); moto's DynamoDB task named
    every error that is not the service's own DynamoDB.AmazonDynamoDBException."""
    # GIVEN a putItem task whose Item raises $error
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Put",
        "States": {
            "Put": {
                "Type": "Task",
                "Resource": "arn:aws:states:::dynamodb:putItem",
                "Arguments": {
                    "TableName": engine.ref("LedgerTable"),
                    "Item": "{% $error('refused: ' & $states.input.why) %}",
                },
                "Catch": [
                    {
                        "ErrorEquals": ["States.QueryEvaluationError"],
                        "Output": "{% $states.errorOutput %}",
                        "Next": "Caught",
                    }
                ],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }
    # WHEN it runs
    result = _run(engine, definition, {"why": "no key"})
    # THEN the Catch for States.QueryEvaluationError takes it, the message in its Cause
    assert result.status == "SUCCEEDED"  # type: ignore[attr-defined]
    assert result.output["Error"] == "States.QueryEvaluationError"  # type: ignore[attr-defined]
    assert "refused: no key" in result.output["Cause"]  # type: ignore[attr-defined]


def test_a_pass_state_whose_expression_fails_records_the_evaluation_failure(
    engine: LocalEngine,
) -> None:
    # GIVEN a Pass state, inside a caught Parallel branch, whose expression throws
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Branch",
        "States": {
            "Branch": {
                "Type": "Parallel",
                "Branches": [
                    {
                        "StartAt": "ParseBody",
                        "States": {
                            "ParseBody": {
                                "Type": "Pass",
                                "Output": "{% $parse($states.input.body) %}",
                                "End": True,
                            }
                        },
                    }
                ],
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }
    # WHEN it runs on a body that is not JSON
    result = _run(engine, definition, {"body": "not json"})
    # THEN the history names the failure once, for the state that failed (the API's
    # HistoryEvent evaluationFailedEventDetails: "when a JSONata expression throws")
    assert result.status == "SUCCEEDED"  # type: ignore[attr-defined]
    failed = [e for e in result.events if e["type"] == "EvaluationFailed"]  # type: ignore[attr-defined]
    assert len(failed) == 1
    details = failed[0]["evaluationFailedEventDetails"]
    assert details["error"] == "States.QueryEvaluationError"
    assert details["state"] == "ParseBody"


def test_a_parallel_branch_failing_with_a_states_error_reaches_the_catch(
    engine: LocalEngine,
) -> None:
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Branch",
        "States": {
            "Branch": {
                "Type": "Parallel",
                "Branches": [
                    {
                        "StartAt": "Boom",
                        "States": {
                            "Boom": {"Type": "Pass", "Output": "{% $error('boom') %}", "End": True}
                        },
                    }
                ],
                "Catch": [
                    {
                        "ErrorEquals": ["States.ALL"],
                        "Output": "{% $states.errorOutput %}",
                        "Next": "Caught",
                    }
                ],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }
    result = _run(engine, definition, {})
    assert result.status == "SUCCEEDED"  # type: ignore[attr-defined]
    assert result.output["Error"] == "States.QueryEvaluationError"  # type: ignore[attr-defined]
    assert "boom" in result.output["Cause"]  # type: ignore[attr-defined]


def test_an_input_over_256_kib_is_refused(engine: LocalEngine) -> None:
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="262144"):
        engine.start_execution("ProcessorStateMachine", {"blob": "x" * 262_144})


def test_each_expression_is_parsed_once_and_evaluated_with_bindings(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compile cache: moto re-parsed $states and every variable as text each time."""
    from onceflow.local import jsonata_node

    requests: list[str] = []
    call = jsonata_node._Worker.call

    def recording(worker: jsonata_node._Worker, request: str) -> dict[str, Any]:
        requests.append(request)
        return call(worker, request)

    monkeypatch.setattr(jsonata_node._Worker, "call", recording)
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Keep",
        "States": {
            "Keep": {
                "Type": "Pass",
                "Assign": {"quote": "{% $states.input.text %}"},
                "Next": "Double",
            },
            "Double": {
                "Type": "Pass",
                "Output": "{% {'n': $states.input.n * 2, 'text': $quote & '!'} %}",
                "End": True,
            },
        },
    }
    # GIVEN each worker has compiled the definition's expressions once
    for _ in range(jsonata_node.POOL_SIZE + 1):
        first = _run(engine, definition, {"n": 1, "text": 'a "quoted" \\ text'})
    requests.clear()
    # WHEN the definition runs again
    second = _run(engine, definition, {"n": 21, "text": "plain"})
    # THEN its values are bound, and no expression text is sent (none is compiled again)
    assert first.output == {"n": 2, "text": 'a "quoted" \\ text!'}  # type: ignore[attr-defined]
    assert second.output == {"n": 42, "text": "plain!"}  # type: ignore[attr-defined]
    assert len(requests) == 2 and not any('"x":' in r for r in requests)
    assert all('"b":' in r for r in requests)


def test_one_parsed_expression_evaluates_safely_on_many_threads() -> None:
    # Many threads share a few node workers, each compiling the text once.
    expression = "$sum($map([1..200], function($i) { $i * $k })) = 20100 * $k ? $k : -1"
    results: dict[int, object] = {}

    def run(k: int) -> None:
        for _ in range(20):
            results[k] = fidelity.eval_jsonata(expression, {"k": k})

    threads = [threading.Thread(target=run, args=(k,)) for k in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {k: k for k in range(1, 9)}


def test_an_expression_compiles_as_written_as_on_aws(engine: LocalEngine) -> None:
    # moto wrapped each expression in ( ), so a top-level sequence ran locally
    # although Step Functions rejects it; compiled as written, it fails here too.
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Bad",
        "States": {"Bad": {"Type": "Pass", "Output": "{% $a := 1; $a %}", "End": True}},
    }
    result = _run(engine, definition, {})
    assert result.status == "FAILED"  # type: ignore[attr-defined]
    assert result.error == "States.QueryEvaluationError"  # type: ignore[attr-defined]


@pytest.mark.speedup
def test_moto_integrations_share_one_client_per_service(engine: LocalEngine) -> None:
    """moto built a boto3 client for every integration call; now one per (region, service)."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_dynamodb,
    )

    assert lambda_eval_utils.boto_client_for is speedups._cached_boto_client_for
    assert state_task_service_dynamodb.boto_client_for is speedups._cached_boto_client_for
    first = speedups._cached_boto_client_for("us-east-1", "dynamodb", object())
    assert speedups._cached_boto_client_for("us-east-1", "dynamodb", None) is first
    assert speedups._cached_boto_client_for("us-east-1", "sqs") is not first


def test_the_engine_shares_one_client_per_service_across_threads(engine: LocalEngine) -> None:
    import threading

    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(engine.client("s3"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4
    assert all(client is engine.client("s3") for client in seen)
    assert engine.client("sqs") is not engine.client("s3")


def test_a_definition_is_validated_once_and_a_refused_one_every_time(
    engine: LocalEngine,
) -> None:
    # GIVEN the validator the engine put in place: a remembering one over what was there
    seen: list[str] = []

    def validate(definition: str) -> None:
        seen.append(definition)
        if "Nope" in definition:
            raise ValueError("refused")

    remembering = speedups._remembering_validation(validate)
    valid = json.dumps({"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True}}})
    invalid = json.dumps({"StartAt": "A", "States": {"A": {"Type": "Nope", "End": True}}})
    # WHEN each is validated twice
    remembering(valid)
    remembering(valid)
    for _ in range(2):
        with pytest.raises(ValueError):
            remembering(invalid)
    # THEN the accepted text was validated once, the refused one each time
    assert seen == [valid, invalid, invalid]
    # AND through the engine moto refuses a bad definition every time, alike
    sfn = engine.client("stepfunctions")
    role = "arn:aws:iam::123456789012:role/any"
    errors = []
    for name in ("refused-a", "refused-b"):
        with pytest.raises(ClientError) as refused:
            sfn.create_state_machine(name=name, definition=invalid, roleArn=role)
        errors.append(refused.value.response["Error"])
    assert errors[0] == errors[1] and errors[0]["Code"] == "InvalidDefinition"
    arn = sfn.create_state_machine(name="accepted", definition=valid, roleArn=role)
    assert sfn.describe_state_machine(stateMachineArn=arn["stateMachineArn"])["definition"] == valid


def test_null_stays_null_and_undefined_stays_undefined(engine: LocalEngine) -> None:
    """JSON null is a value in JSONata: bound as null, not dropped as undefined."""
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Keep",
        "States": {
            "Keep": {
                "Type": "Pass",
                "Assign": {"a": "{% $states.input.a %}"},
                "Next": "Use",
            },
            "Use": {
                "Type": "Pass",
                "Output": "{% {'isNull': $a = null, 'exists': $exists($a), 'a': $a, "
                "'list': [$a], 'missing': $exists($states.input.b)} %}",
                "End": True,
            },
        },
    }
    result = _run(engine, definition, {"a": None})
    assert result.status == "SUCCEEDED", result.cause  # type: ignore[attr-defined]
    assert result.output == {  # type: ignore[attr-defined]
        "isNull": True,
        "exists": True,
        "a": None,
        "list": [None],
        "missing": False,
    }


def test_a_processor_returning_null_is_processed(engine: LocalEngine) -> None:
    from tests.helpers import FUNCTION, MACHINE, s3_event, upload

    version = upload(engine, "null.png")
    with engine.override_function(FUNCTION, lambda event, context: None):
        result = engine.execute(MACHINE, s3_event(engine, "null.png", version))
    assert result.outcome == "Processed"
    assert result.output["result"] is None


def test_millis_moves_on_within_an_execution() -> None:
    # The clock is read per evaluation, not frozen at the thread's first one.
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Before",
        "States": {
            "Before": {"Type": "Pass", "Assign": {"t0": "{% $millis() %}"}, "Next": "Wait"},
            "Wait": {"Type": "Wait", "Seconds": 1, "Next": "After"},
            "After": {"Type": "Pass", "Output": "{% $millis() - $t0 %}", "End": True},
        },
    }
    with LocalEngine(function_log=None, time_scale=0.3) as scaled:
        for _ in range(2):  # the second execution too (a thread's first instance lingered)
            elapsed = _run(scaled, definition, {}).output  # type: ignore[attr-defined]
            assert 200 <= elapsed < 5000


def test_plain_paths_give_what_jsonata_gives(engine: LocalEngine) -> None:
    """A variable and field names, a step into an array (JSONata maps it), undefined."""
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Read",
        "States": {
            "Read": {
                "Type": "Pass",
                "Assign": {
                    "object": "{% $states.input.a.b %}",
                    "nothing": "{% $states.input.n %}",
                    "mapped": "{% $states.input.items.x %}",
                    "text": "{% $states.input.a.t %}",
                },
                "Next": "Again",
            },
            "Again": {
                "Type": "Pass",
                "Assign": {"fromVariable": "{% $object.c %}"},  # $object undefined: fails
                "Output": "{% {'object': $object, 'nothing': $nothing, 'mapped': $mapped, "
                "'text': $text, 'fromVariable': $object.c} %}",
                "End": True,
            },
        },
    }
    data = {"a": {"b": {"c": [1, {"d": None}]}, "t": "x"}, "n": None, "items": [{"x": 1}, {"x": 2}]}
    result = _run(engine, definition, data)
    assert result.status == "SUCCEEDED", result.cause  # type: ignore[attr-defined]
    assert result.output == {  # type: ignore[attr-defined]
        "object": {"c": [1, {"d": None}]},
        "nothing": None,
        "mapped": [1, 2],  # JSONata maps the step over the array
        "text": "x",
        "fromVariable": [1, {"d": None}],
    }
    missing = _run(engine, {**definition, "StartAt": "Again"}, data)  # $object is undefined
    assert missing.status == "FAILED"  # type: ignore[attr-defined]
    assert missing.error == "States.QueryEvaluationError"  # type: ignore[attr-defined]
    assert "EvaluationFailed" in missing.event_types()  # type: ignore[attr-defined]


def test_an_expression_is_bound_only_the_variables_it_names() -> None:
    names, paths = fidelity._references("$a & $states.input.x & $states.context.Execution.Id")
    assert names == {"a", "states"}
    assert paths == {"input": {"x": None}, "context": {"Execution": {"Id": None}}}
    assert fidelity._references("$string($states)")[1] is None  # all of $states
    assert fidelity._references("$states.input.a.b & $states.input.a")[1] == {"input": {"a": None}}
    assert fidelity._references("$states.input[0].a")[1] == {"input": None}
    assert fidelity._references("$states.input.a.%.b")[1] is None  # the parent operator
    assert fidelity._references("$states.input.temp°C")[1] == {"input": {"temp°C": None}}
    assert fidelity._references("$a\v.b")[0] == {"a"}  # a vertical tab ends a name too


@pytest.mark.speedup
def test_one_parsed_program_serves_concurrent_executions_with_their_own_retries(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program is shared (as moto shares it between Map iterations); what an
    execution counts, a Retry's attempts, stays its own."""
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Try",
        "States": {
            "Try": {
                "Type": "Parallel",
                "Branches": [
                    {"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Boom"}}}
                ],
                "Retry": [{"ErrorEquals": ["Boom"], "MaxAttempts": 2, "IntervalSeconds": 1}],
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }
    import json
    from concurrent.futures import ThreadPoolExecutor

    from moto.stepfunctions.parser.asl.component.component import Component
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent

    sfn = engine.client("stepfunctions")
    arn = sfn.create_state_machine(
        name="shared-program",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/probe",
    )["stateMachineArn"]
    parses: list[int] = []
    original = speedups._original_entrypoint

    def counted(worker: object) -> object:
        parses.append(1)
        return original(worker)

    monkeypatch.setattr(speedups, "_original_entrypoint", counted)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda n: engine.execute(arn, {"n": n}), range(16)))
    assert [r.status for r in results] == ["SUCCEEDED"] * 16
    for result in results:  # the first attempt and two retries, each execution
        assert result.event_types().count("ParallelStateStarted") == 3
    assert parses == [1]  # parsed once, for all 16

    # Every component has its heap key before the first execution can race for it.
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    def heap_keys(program: object) -> list[object]:
        keys, pending, seen = [], [program], set()
        while pending:
            value = pending.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, dict):
                pending.extend(value.values())
            elif isinstance(value, list | tuple):
                pending.extend(value)
            elif isinstance(value, Component):
                if isinstance(value, EvalComponent):
                    keys.append(value._EvalComponent__heap_key)
                pending.extend(vars(value).values())
        return keys

    program, _ = AmazonStateLanguageParser.parse(json.dumps(definition))
    assert None in heap_keys(program)  # moto draws them on first use
    speedups._fix_heap_keys(program)
    keys = heap_keys(program)
    assert len(keys) > 10 and None not in keys and len(set(keys)) == len(keys)


@pytest.mark.speedup
def test_local_requests_carry_a_dummy_signature_and_the_rest_are_signed(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.awsrequest import AWSRequest

    def authorization(client: object, url: str) -> str:
        request = AWSRequest(method="POST", url=url, data=b"{}", headers={})
        client._request_signer.sign("ListTables", request)  # type: ignore[attr-defined]
        return str(request.headers["Authorization"])

    local = authorization(engine.client("dynamodb"), "https://dynamodb.us-east-1.amazonaws.com/")
    assert local.startswith("AWS4-HMAC-SHA256 Credential=")
    assert "/us-east-1/dynamodb/aws4_request" in local
    assert local.endswith("Signature=" + "0" * 64)
    request = AWSRequest(method="POST", url="https://sts.amazonaws.com/", data=b"", headers={})
    request.context = {"signing": {"region": "eu-west-1"}}
    engine.client("sts")._request_signer.sign("GetCallerIdentity", request)
    assert "/eu-west-1/sts/aws4_request" in str(request.headers["Authorization"])
    # With moto checking IAM auth, requests are signed for real.
    from moto import settings

    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0.0)
    checked = authorization(engine.client("dynamodb"), "https://dynamodb.us-east-1.amazonaws.com/")
    assert not checked.endswith("0" * 64)
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    s3 = authorization(engine.client("s3"), "https://b.s3.amazonaws.com/k")
    assert "Signature=" in s3 and not s3.endswith("0" * 64)  # S3 signs as ever
    url = engine.client("s3").generate_presigned_url(
        "get_object", Params={"Bucket": "b", "Key": "k"}
    )
    assert "Signature=" in url and "0" * 64 not in url  # a presigned URL is signed for real
    # A request to AWS (no mock answering) is signed for real.
    import boto3
    from moto.core.models import botocore_stubber

    client = boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    )
    monkeypatch.setattr(botocore_stubber, "enabled", False)
    real = authorization(client, "https://dynamodb.us-east-1.amazonaws.com/")
    assert "Signature=" in real and not real.endswith("0" * 64)


@pytest.mark.speedup
@pytest.mark.usefixtures("installed")
def test_the_user_agent_sanitiser_gives_what_botocore_gives() -> None:
    import botocore.useragent

    assert botocore.useragent.sanitize_user_agent_string_component is speedups._cached_sanitize
    for text in ("Boto3/1.0", "a b#c(d)", "md/Python#3.11"):
        for allow_hash in (True, False):
            assert speedups._cached_sanitize(text, allow_hash) == speedups._original_sanitize(
                text, allow_hash
            )


@pytest.mark.speedup
def test_a_received_messages_retention_is_judged_as_moto_judges_it(engine: LocalEngine) -> None:
    from moto.sqs.models import SQSBackend, sqs_backends

    from onceflow.local.engine import ACCOUNT_ID, REGION

    # GIVEN a queue of 60 s retention holding messages sent just now, 59 s and 61 s ago,
    # and one of moto's default retention (four days) with a message three days old
    assert SQSBackend.is_message_valid_based_on_retention_period is speedups._retention_read_once
    sqs = engine.client("sqs")
    short = sqs.create_queue(
        QueueName="retention-short", Attributes={"MessageRetentionPeriod": "60"}
    )
    default = sqs.create_queue(QueueName="retention-default")
    for url, ages in ((short["QueueUrl"], (0, 59, 61)), (default["QueueUrl"], (0, 3 * 86400))):
        for age in ages:
            sqs.send_message(QueueUrl=url, MessageBody=str(age))
    backend = sqs_backends[ACCOUNT_ID][REGION]
    judged = []
    for name in ("retention-short", "retention-default"):
        for message in backend.get_queue(name)._messages:
            message.sent_timestamp -= int(message.body) * 1000
            # WHEN the speed-up and moto's own check judge each
            ours = speedups._retention_read_once(backend, name, message)
            theirs = speedups._ORIGINAL_RETENTION_CHECK(backend, name, message)
            # THEN they agree
            assert ours == theirs, (name, message.body)
            judged.append((name, message.body, ours))
    assert judged == [
        ("retention-short", "0", True),
        ("retention-short", "59", True),
        ("retention-short", "61", False),
        ("retention-default", "0", True),
        ("retention-default", "259200", True),
    ]
    # AND a receive stops at the expired message, as moto's check makes it
    received = sqs.receive_message(QueueUrl=short["QueueUrl"], MaxNumberOfMessages=10)
    assert [m["Body"] for m in received["Messages"]] == ["0", "59"]


def test_an_execution_described_directly_matches_describe_execution(engine: LocalEngine) -> None:
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Choose",
        "States": {
            "Choose": {
                "Type": "Choice",
                "Choices": [{"Condition": "{% $states.input.fail %}", "Next": "Fail"}],
                "Default": "Done",
            },
            "Done": {"Type": "Pass", "Output": {"ok": True, "n": None}, "End": True},
            "Fail": {"Type": "Fail", "Error": "Nope", "Cause": "asked to"},
        },
    }
    sfn = engine.client("stepfunctions")
    for output in ("done", None, "{% $states.context.Execution %}"):
        definition["States"]["Done"]["Output"] = output  # type: ignore[index]
        result = _run(engine, definition, {"fail": False})
        assert result.status == "SUCCEEDED", result.cause  # type: ignore[attr-defined]
        if output != "{% $states.context.Execution %}":
            assert result.output == output  # type: ignore[attr-defined]
        else:  # its StartTime as text, as the JSONata path and AWS give it
            assert result.output["Id"] == result.arn  # type: ignore[attr-defined]
            assert isinstance(result.output["StartTime"], str)  # type: ignore[attr-defined]
    definition["States"]["Done"]["Output"] = {"ok": True, "n": None}  # type: ignore[index]
    for execution_input in ({"fail": False}, {"fail": True}):
        result = _run(engine, definition, execution_input)
        described = sfn.describe_execution(executionArn=result.arn)  # type: ignore[attr-defined]
        assert result.status == described["status"]  # type: ignore[attr-defined]
        assert result.input == json_loads(described["input"])  # type: ignore[attr-defined]
        assert result.output == json_loads(described.get("output"))  # type: ignore[attr-defined]
        assert result.error == described.get("error")  # type: ignore[attr-defined]
        assert result.cause == described.get("cause")  # type: ignore[attr-defined]
    assert result.error == "Nope"  # type: ignore[attr-defined]


def json_loads(text: str | None) -> object:
    import json

    return json.loads(text) if text else None


def test_a_plain_path_gives_what_jsonata_gives_and_refuses_what_it_refuses(
    engine: LocalEngine,
) -> None:
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Keep",
        "States": {
            "Keep": {"Type": "Pass", "Assign": {"café": 1}, "Next": "Read"},
            "Read": {
                "Type": "Pass",
                "Output": {
                    "direct": "{% $states.context.Execution %}",  # read directly
                    "jsonata": "{% ($e := $states.context.Execution; $e) %}",  # by JSONata
                    "unicode": "{% $café %}",
                    "unicodeSum": "{% $café + 1 %}",
                },
                "End": True,
            },
        },
    }
    result = _run(engine, definition, {"a": {"true": 1}})
    assert result.status == "SUCCEEDED", result.cause  # type: ignore[attr-defined]
    output = result.output  # type: ignore[attr-defined]
    assert output["direct"] == output["jsonata"]  # a datetime inside is text either way
    assert isinstance(output["direct"]["StartTime"], str)
    assert output["unicode"] == 1 and output["unicodeSum"] == 2
    literal = {
        "QueryLanguage": "JSONata",
        "StartAt": "Step",
        "States": {"Step": {"Type": "Pass", "Output": "{% $states.input.a.true %}", "End": True}},
    }
    refused = _run(engine, literal, {"a": {"true": 1}})
    assert refused.status == "FAILED"  # type: ignore[attr-defined]
    assert refused.error == "States.QueryEvaluationError"  # type: ignore[attr-defined]


# ---- moto's URL tables and JSONPaths ---------------------------------------------


def _s3_backend() -> object:
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    return get_backend("s3")[DEFAULT_ACCOUNT_ID]["aws"]


@pytest.mark.speedup
def test_a_url_table_is_built_once_and_follows_the_settings(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []
    build = speedups._original_urls

    def counting(backend: object) -> dict[str, object]:
        built.append(backend)
        return build(backend)

    monkeypatch.setattr(speedups, "_URLS", {})
    monkeypatch.setattr(speedups, "_original_urls", counting)
    s3 = _s3_backend()
    tables = [s3.urls for _ in range(3)]  # type: ignore[attr-defined]
    assert len(built) == 1
    assert tables[0] == tables[2] == build(s3)
    assert not any("custom.example" in url for url in tables[0])

    # moto reloads its S3 urls for MOTO_S3_CUSTOM_ENDPOINTS: a new setting, a new table.
    monkeypatch.setenv("MOTO_S3_CUSTOM_ENDPOINTS", "https://s3.custom.example")
    custom = s3.urls  # type: ignore[attr-defined]
    assert len(built) == 2
    assert any("custom.example" in url for url in custom)
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url="https://s3.custom.example",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = engine.ref("IngestBucket")
    client.put_object(Bucket=bucket, Key="custom/endpoint.txt", Body=b"reached")
    body = engine.client("s3").get_object(Bucket=bucket, Key="custom/endpoint.txt")["Body"]
    assert body.read() == b"reached"
    monkeypatch.delenv("MOTO_S3_CUSTOM_ENDPOINTS")
    assert s3.urls == tables[0]  # type: ignore[attr-defined]
    assert len(built) == 2


_INPUT = {
    "detail": {"object": {"key": "a/b.png", "size": 3, "version-id": "v1"}, "bucket": "in"},
    "Records": [{"eventName": "ObjectCreated:Put", "s3": {"object": {"key": "r.png"}}}, {}],
    "a": {"true": 1},
    "temp°C": 20,
    "price$usd": 4,
    'a"x"': 2,
}


@pytest.mark.parametrize(
    "expression",
    [
        "$states.context.Execution.Id",
        "$states.context.Execution.Input.detail.object.key & '/' & $states.context.Execution.Id",
        "$count($states.input.Records)",
        "$states.input.Records.eventName",
        "$states.input.Records[0].s3.object.key",
        "$keys($states.context.Execution)",
        "$states.input.detail.object.`version-id`",
        "($i := $states.input; $i.detail.object.size)",
        "$states.input.detail.object.%.bucket",
        "$states.input.missing.deeper",
        "$exists($states.input.detail.object.etag)",
        "$string($states.input)",
        "$states.input.a.true",
        "$states.input.detail.object.size + $states.context.Execution.Input.detail.object.size",
        "$states.input.detail.object.key & $workItem.key",
        "$states.input.temp°C",  # a name goes on past letters and digits
        "$states.context.Execution.Input.temp°C",
        "$states.input.price$usd",
        '$states.input.a"x"',  # a quote inside a name is part of it
        "$temp° + $states.input.price$usd",
        "$states.input.%.context.Execution.Id",  # the parent operator climbs to $states
        "$states.input.detail.%.%",
    ],
)
@pytest.mark.usefixtures("installed")
def test_an_expression_bound_only_the_parts_it_reads_gives_what_the_whole_gives(
    expression: str,
) -> None:
    import datetime
    from types import SimpleNamespace

    states = {
        "input": _INPUT,
        "context": {
            "Execution": {
                "Id": "arn:aws:states:us-east-1:123456789012:execution:m:e",
                "Input": _INPUT,
                "StartTime": datetime.datetime(2026, 11, 22, tzinfo=datetime.UTC),
            },
            "State": {"Name": "Claim", "RetryCount": 0},
        },
    }
    env = SimpleNamespace(
        variable_store=SimpleNamespace(
            _outer_scope={"workItem": {"key": "k"}, "temp°": 7}, _inner_scope={}
        ),
        states=SimpleNamespace(_states_data=states),
    )
    whole = {"states": states, "workItem": {"key": "k"}, "temp°": 7}

    def evaluate(bindings: dict[str, object]) -> object:
        try:
            return ("value", fidelity.eval_jsonata(expression, bindings))
        except moto_jsonata.JSONataException as exc:
            return ("error", exc.details)

    picked = evaluate(fidelity._bindings(expression, env))
    assert picked == evaluate(whole)


# UpdateItems run in order on one item; some of them fail, as moto alone fails them.
_UPDATES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    (
        "SET a = :one, l = :list, m = :map, ss = :ss",
        {},
        {
            ":one": {"N": "1"},
            ":list": {"L": [{"S": "x"}]},
            ":map": {"M": {}},
            ":ss": {"SS": ["p", "q"]},
        },
    ),
    (
        "SET #n = :s, c = if_not_exists(c, :one) + :one ADD tally :one",
        {"#n": "name"},
        {":s": {"S": "text"}, ":one": {"N": "1"}},
    ),
    (
        "SET l = list_append(if_not_exists(l, :list), :list), m.part = :map REMOVE a",
        {},
        {":list": {"L": [{"N": "2"}, {"N": "3"}]}, ":map": {"M": {"k": {"S": "v"}}}},
    ),
    ("SET m.nope.deeper = :one", {}, {":one": {"N": "1"}}),  # invalid document path
    (
        "SET m.part.k2 = :one, c = c - :one DELETE ss :gone",
        {},
        {":one": {"N": "1"}, ":gone": {"SS": ["p"]}},
    ),
    ("SET a = :one SET b = :one", {}, {":one": {"N": "1"}}),  # two SET sections
    ("SET a = :one, a = :two", {}, {":one": {"N": "1"}, ":two": {"N": "2"}}),  # a path twice
    ("SET m.part = :one, m.part.k = :one", {}, {":one": {"N": "1"}}),  # overlapping paths
    ("SET a = :absent", {}, {}),  # a value nobody gave
    ("SET pk = :s", {}, {":s": {"S": "other"}}),  # the key
    ("SET open_status = :one", {}, {":one": {"N": "1"}}),  # an index key of the wrong type
    ("SET c = c + :s", {}, {":s": {"S": "text"}}),  # a number plus a text
    ("REMOVE l[1], l[0], gone ADD tally :one", {}, {":one": {"N": "5"}}),
]


def _outcome(call: Callable[..., Any], **arguments: Any) -> tuple[str, Any]:
    """("ok", what the call returned), or the error as a caller sees it."""
    from botocore.exceptions import ClientError

    try:
        result = call(**arguments)
    except ClientError as exc:
        return exc.response["Error"]["Code"], exc.response["Error"]["Message"]
    except (KeyError, ValueError) as exc:  # moto lets these escape as they are
        return type(exc).__name__, str(exc)
    return "ok", result


def _run_updates(ddb: Any, table: str, key: str) -> list[tuple[str, Any]]:
    outcomes = []
    for expression, names, values in _UPDATES:
        arguments: dict[str, Any] = {}
        if values:
            arguments["ExpressionAttributeValues"] = values
        if names:
            arguments["ExpressionAttributeNames"] = names
        kind, found = _outcome(
            ddb.update_item,
            TableName=table,
            Key={"pk": {"S": key}},
            UpdateExpression=expression,
            ReturnValues="ALL_NEW",
            **arguments,
        )
        if kind == "ok":
            found = {k: v for k, v in found["Attributes"].items() if k != "pk"}
        outcomes.append((kind, found))
    return outcomes


@pytest.mark.speedup
def test_update_items_validate_and_apply_as_moto_alone_does(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.dynamodb.parsing import validators

    ddb = engine.client("dynamodb")
    table = engine.ref("LedgerTable")
    plain_copies = _recorded(monkeypatch, "_copy_plain_tree")
    patched = _run_updates(ddb, table, "probe/validator-patched")
    assert len(plain_copies) >= len(_UPDATES)  # the plain copy, not copy.deepcopy, ran

    monkeypatch.setattr(validators, "deepcopy", copy.deepcopy)
    alone = _run_updates(ddb, table, "probe/validator-moto")

    assert patched == alone
    kinds = [kind for kind, _ in patched]
    assert kinds.count("ok") == 5 and kinds.count("ValidationException") == len(_UPDATES) - 5
    assert len({message for kind, message in patched if kind != "ok"}) == len(_UPDATES) - 5
    assert patched[-1][1]["tally"] == {"N": "6"} and patched[-1][1]["l"] == {"L": [{"N": "3"}]}


def _shape(node: Any) -> Any:
    from moto.dynamodb.parsing.ast_nodes import Node

    if not isinstance(node, Node):
        return node
    return (type(node).__name__, node.type, [_shape(child) for child in node.children or []])


def _pairs(original: Any, copied: Any) -> Iterator[tuple[Any, Any]]:
    from moto.dynamodb.parsing.ast_nodes import Node

    yield original, copied
    for a, b in zip(original.children or [], copied.children or [], strict=True):
        if isinstance(a, Node):
            assert b.parent is copied
            yield from _pairs(a, b)


@pytest.mark.usefixtures("installed")
def test_the_validator_copies_a_plain_tree_as_deepcopy_does_and_anything_else_with_deepcopy() -> (
    None
):
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    text = "SET a.b[1] = list_append(:x, #y), c = c + :one REMOVE d[2] ADD e :one DELETE f :s"
    tree = UpdateExpressionParser.make(text)
    copied = speedups._validator_deepcopy(tree)
    assert _shape(copied) == _shape(copy.deepcopy(tree)) == _shape(tree)
    assert copied.parent is None
    for original, new in _pairs(tree, copied):
        assert new is not original and type(new) is type(original)
        assert new.children is None or new.children is not original.children
    copied.children[0].children.clear()  # the copy is the validator's to rewrite
    assert _shape(tree) == _shape(UpdateExpressionParser.make(text))

    odd = UpdateExpressionParser.make(text)
    odd.children[0].extra = [1]  # an attribute moto's nodes do not have
    with pytest.raises(speedups._NotPlain):
        speedups._copy_plain_tree(odd)
    copied_odd = speedups._validator_deepcopy(odd)
    assert (
        copied_odd.children[0].extra == [1]
        and copied_odd.children[0].extra is not odd.children[0].extra
    )

    shared = UpdateExpressionParser.make(text)
    shared.children.append(shared.children[0])  # one node reached twice
    with pytest.raises(speedups._NotPlain):
        speedups._copy_plain_tree(shared)
    copied_shared = speedups._validator_deepcopy(shared)
    assert copied_shared.children[0] is copied_shared.children[-1]  # as deepcopy keeps it

    value = {"L": [1, [2]]}
    assert (
        speedups._validator_deepcopy(value) == value
        and speedups._validator_deepcopy(value) is not value
    )


# ConditionExpressions checked against one item; some hold, some do not, some are invalid.
_CONDITIONS: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("attribute_not_exists(pk) OR expires_at < :now", {}, {":now": {"N": "5"}}),
    ("attribute_not_exists(pk) OR expires_at < :now", {}, {":now": {"N": "2"}}),
    (
        "lock_owner = :owner AND #s = :processing",
        {"#s": "status"},
        {":owner": {"S": "o"}, ":processing": {"S": "PROCESSING"}},
    ),
    (
        "attribute_exists(pk) AND attribute_not_exists(dead_lettered_at) AND "
        "((#s = :failed AND attempts < :max) OR (#s = :processing AND lock_expires_at < :now))",
        {"#s": "status"},
        {
            ":failed": {"S": "FAILED"},
            ":max": {"N": "3"},
            ":processing": {"S": "PROCESSING"},
            ":now": {"N": "9"},
        },
    ),
    ("size(tags) > :n AND begins_with(lock_owner, :p)", {}, {":n": {"N": "1"}, ":p": {"S": "o"}}),
    (
        "a IN (:x, :y) AND b BETWEEN :lo AND :hi",
        {},
        {":x": {"N": "1"}, ":y": {"N": "2"}, ":lo": {"N": "4"}, ":hi": {"N": "6"}},
    ),
    ("NOT contains(l, :x)", {}, {":x": {"S": "p"}}),
    ("#nobody = :x", {"#other": "a"}, {":x": {"N": "1"}}),  # a name nobody gave
    ("status = :x", {}, {":x": {"N": "1"}}),  # a reserved word
    ("a = = :x", {}, {":x": {"N": "1"}}),  # not an expression
    ("a = :nobody", {}, {":x": {"N": "1"}}),  # a value nobody gave
    ("(a = :x))", {}, {":x": {"N": "1"}}),  # unbalanced
]


def _run_conditions(ddb: Any, table: str, key: str) -> list[tuple[str, str]]:
    ddb.put_item(
        TableName=table,
        Item={
            "pk": {"S": key},
            "status": {"S": "PROCESSING"},
            "lock_owner": {"S": "o"},
            "lock_expires_at": {"N": "8"},
            "expires_at": {"N": "3"},
            "attempts": {"N": "1"},
            "tags": {"SS": ["t1", "t2"]},
            "l": {"L": [{"S": "q"}]},
            "a": {"N": "2"},
            "b": {"N": "5"},
        },
    )
    outcomes = []
    for n, (condition, names, values) in enumerate(_CONDITIONS):
        probe = {":probe": {"N": str(n)}}
        arguments: dict[str, Any] = {"ExpressionAttributeValues": {**values, **probe}}
        if names:
            arguments["ExpressionAttributeNames"] = names
        kind, found = _outcome(
            ddb.update_item,
            TableName=table,
            Key={"pk": {"S": key}},
            UpdateExpression="SET probe = :probe",
            ConditionExpression=condition,
            **arguments,
        )
        outcomes.append((kind, "" if kind == "ok" else found))
    return outcomes


@pytest.mark.speedup
def test_condition_expressions_are_lexed_once_and_judged_as_moto_alone_judges_them(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    ddb = engine.client("dynamodb")
    table = engine.ref("LedgerTable")
    assert ConditionExpressionParser._lex_condition_expression is speedups._cached_lex_condition
    lexed = _recorded(monkeypatch, "_original_lex_condition")
    patched = _run_conditions(ddb, table, "probe/conditions-patched")
    patched_again = _run_conditions(ddb, table, "probe/conditions-again")
    texts = [parser.condition_expression for (parser,) in lexed]
    assert len(texts) == len(set(texts))  # each text lexed once, whatever ran it before
    for tokens in speedups._CONDITION_TOKENS.values():
        assert all(token.children == [] for token in tokens)  # read only, as it was lexed

    monkeypatch.setattr(
        ConditionExpressionParser, "_lex_condition_expression", speedups._original_lex_condition
    )
    alone = _run_conditions(ddb, table, "probe/conditions-moto")

    assert patched == patched_again == alone
    assert [kind for kind, _ in patched] == [
        "ok",
        "ConditionalCheckFailedException",
        *["ok"] * 5,
        "KeyError",
        "ValidationException",
        "ValueError",
        "KeyError",
        "ValueError",
    ]


def test_every_parsed_update_expression_is_a_plain_tree() -> None:
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    for expression, _, _ in _UPDATES:
        tree = UpdateExpressionParser.make(expression)
        assert _shape(speedups._copy_plain_tree(tree)) == _shape(tree)  # copied, no fallback


@pytest.mark.parametrize("speedup", [p.name for p in speedups.PATCHES])
def test_every_speedup_is_pinned_to_the_source_it_follows(speedup: str) -> None:
    (patch,) = [p for p in speedups.PATCHES if p.name == speedup]
    assert patch.kind == "speedup" and patch.pinned is not None
    assert patch.pinned_sha256() == patch.sha256  # the moto it was checked against
    broken = dataclasses.replace(patch, sha256="0" * 64)  # as if moto's source had changed
    assert broken.problems() == [f"{speedup} changed: re-check the patch that follows it"]


def test_list_object_versions_from_a_key_marker_drops_no_version(engine: LocalEngine) -> None:
    # GIVEN keys before, at and after a marker, one of them with two versions
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    for key in ("img/1.pn", "img/1.png", "img/2.png", "img/2.png", "img/3.png"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    # WHEN versions are listed from a marker that is no key, and from one that is
    from_gap = s3.list_object_versions(Bucket=bucket, KeyMarker="img/1.pna")["Versions"]
    from_key = s3.list_object_versions(Bucket=bucket, KeyMarker="img/1.png")["Versions"]
    # THEN every version after the marker is listed (moto dropped the first), once,
    # and paging by NextKeyMarker/NextVersionIdMarker still reads each version once
    assert [v["Key"] for v in from_gap] == ["img/1.png", "img/2.png", "img/2.png", "img/3.png"]
    assert [v["Key"] for v in from_key] == ["img/2.png", "img/2.png", "img/3.png"]
    seen: list[str] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": 2}
    while True:
        page = s3.list_object_versions(**kwargs)
        seen += [v["VersionId"] for v in page.get("Versions", [])]
        if not page["IsTruncated"]:
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    assert len(seen) == len(set(seen)) == 5


HOSTILE_KEYS = ("ctl\x01.png", "a b+c%20d.png", "del\x7f\ttab.png", "é/x.png")


def test_listings_url_encode_what_xml_cannot_hold_as_s3_does(engine: LocalEngine) -> None:
    # GIVEN a versioned bucket with keys XML 1.0 cannot hold, or that URL decoding garbles,
    # one of them deleted (a delete marker)
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    for key in HOSTILE_KEYS:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3.delete_object(Bucket=bucket, Key="a b+c%20d.png")
    # WHEN their versions are listed a page of one at a time, from marker to marker
    # (botocore asks for EncodingType=url and decodes what S3 encoded)
    listed: list[str] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "MaxKeys": 1}
    while True:
        page = s3.list_object_versions(**kwargs)
        assert page["EncodingType"] == "url"  # moto: none, and a 500 for ctl\x01.png
        listed += [v["Key"] for v in page.get("Versions", [])]
        listed += [f"marker:{m['Key']}" for m in page.get("DeleteMarkers", [])]
        if not page["IsTruncated"]:
            break
        kwargs.update(KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"])
    # THEN each version and the delete marker are listed once, under their own keys
    assert sorted(listed) == sorted([*HOSTILE_KEYS, "marker:a b+c%20d.png"])
    # ... and what the answers echo reads back as sent, in both listings
    echoed = s3.list_object_versions(Bucket=bucket, Prefix="ctl\x01", Delimiter="+")
    assert (echoed["Prefix"], echoed["Delimiter"]) == ("ctl\x01", "+")
    assert [v["Key"] for v in echoed["Versions"]] == ["ctl\x01.png"]
    grouped = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["é/"]
    current = s3.list_objects_v2(Bucket=bucket, StartAfter="a%2B", Delimiter="+")
    assert (current["StartAfter"], current["Delimiter"]) == ("a%2B", "+")  # moto: "a+", " "
    assert [o["Key"] for o in current["Contents"]] == ["ctl\x01.png", "del\x7f\ttab.png", "é/x.png"]


def test_versions_listed_under_a_prefix_are_what_moto_lists(engine: LocalEngine) -> None:
    # GIVEN keys under a prefix and around it, overwritten and deleted ones among them
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    for key in ("a/1", "a/2", "a/2", "a/3", "a-b/1", "a0", "b/1", "a/"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    s3.delete_object(Bucket=bucket, Key="a/3")
    from moto.s3.models import s3_backends

    from onceflow.local.engine import ACCOUNT_ID

    backend = s3_backends[ACCOUNT_ID]["aws"]
    a2 = backend.get_bucket(bucket).keys.getlist("a/2")
    (ab1,) = backend.get_bucket(bucket).keys.getlist("a-b/1")
    # WHEN the speed-up and moto's own code list them, from the start and resuming
    cases = [
        {"prefix": "a/"},
        {"prefix": "a/", "max_keys": 2},
        {"prefix": "a/", "key_marker": "a/2", "version_id_marker": a2[-1].version_id},
        {"prefix": "a/", "key_marker": "a0", "version_id_marker": "x"},
        # resuming from a key outside the prefix (as the KeyMarker fidelity patch does)
        {"prefix": "a/", "key_marker": "a-b/1", "version_id_marker": ab1.version_id},
        {"prefix": "a", "delimiter": "/"},
        {"prefix": "a/", "key_marker": "a/1"},  # no version id: moto's own code runs
        # a page of the whole bucket from a marker: none of the keys before it
        {"key_marker": "a/2", "version_id_marker": a2[-1].version_id, "max_keys": 3},
        {"key_marker": "a/2", "version_id_marker": a2[0].version_id},
        {"key_marker": "a-b/1", "version_id_marker": ab1.version_id, "delimiter": "/"},
        {"key_marker": "a/2", "version_id_marker": "no such version"},
        {"key_marker": "a0"},  # no version id: moto's own code runs
    ]
    for case in cases:
        ours = speedups._prefixed_list_object_versions(backend, bucket, **case)
        theirs = speedups._ORIGINAL_LIST_OBJECT_VERSIONS(backend, bucket, **case)
        # THEN each lists the same versions, delete markers, prefixes and next markers
        assert _listed(ours) == _listed(theirs), case


def _listed(result: Any) -> Any:
    versions, prefixes, markers, next_key, next_version = result
    return (
        [(v.name, v.version_id, v.is_latest) for v in versions],
        prefixes,
        [(m.name, m.version_id) for m in markers],
        next_key,
        next_version,
    )


def test_a_state_name_used_twice_is_an_invalid_definition(engine: LocalEngine) -> None:
    from botocore.exceptions import ClientError

    # GIVEN a definition whose Map processor reuses a name from the top level
    definition = {
        "StartAt": "Work",
        "States": {
            "Work": {
                "Type": "Map",
                "ItemProcessor": {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}},
                "Next": "Done",
            },
            "Done": {"Type": "Succeed"},
        },
    }
    sfn = engine.client("stepfunctions")
    role = "arn:aws:iam::123456789012:role/onceflow-test"
    # WHEN it is created, THEN it is refused as AWS refuses it
    with pytest.raises(ClientError) as refused:
        sfn.create_state_machine(name="twice", definition=json.dumps(definition), roleArn=role)
    assert refused.value.response["Error"]["Code"] == "InvalidDefinition"
    assert "DUPLICATE_STATE_NAME: Duplicate State name: Done" in str(refused.value)
    # AND the same machine with distinct names is taken
    processor = definition["States"]["Work"]["ItemProcessor"]  # type: ignore[index]
    processor["StartAt"] = "ItemDone"
    processor["States"] = {"ItemDone": {"Type": "Succeed"}}
    sfn.create_state_machine(name="once", definition=json.dumps(definition), roleArn=role)


# ---- history events linked as AWS links them --------------------------------------


def _by_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_a_distributed_maps_exit_follows_its_map_run_start(engine: LocalEngine) -> None:
    """Recorded on AWS since November 2024 (LocalStack's test_base_scenarios snapshot,
    test_map_state_nested_config_distributed: MapRunStarted #6, MapRunSucceeded #7 after
    #6, MapStateSucceeded #8 after #7, MapStateExited #9 after #6)."""
    # GIVEN a Distributed Map of two items
    processor = {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                 "StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}  # fmt: skip
    definition = {"QueryLanguage": "JSONata", "StartAt": "Map", "States": {"Map": {
        "Type": "Map", "Items": [1, 2], "ItemProcessor": processor, "End": True}}}  # fmt: skip
    # WHEN it runs
    result: Any = _run(engine, definition, {})
    # THEN its success follows the Map Run's, its exit the Map Run's start
    assert result.status == "SUCCEEDED"
    [started] = _by_type(result.events, "MapRunStarted")
    [run_succeeded] = _by_type(result.events, "MapRunSucceeded")
    [succeeded] = _by_type(result.events, "MapStateSucceeded")
    [exited] = _by_type(result.events, "MapStateExited")
    assert run_succeeded["previousEventId"] == started["id"]
    assert succeeded["previousEventId"] == run_succeeded["id"]
    assert exited["previousEventId"] == started["id"]
    assert _by_type(result.events, "ExecutionSucceeded")[0]["previousEventId"] == exited["id"]


def test_a_failure_cause_names_the_event_its_state_was_entered_at(engine: LocalEngine) -> None:
    """Recorded on AWS: every "entered at the event id #N" of LocalStack's snapshots (109)
    names the state's StateEntered event, also when events followed it (test_base_scenarios,
    test_catch_states_runtime: 'RaiseRuntime' entered at #2, failed after #5)."""
    # GIVEN a Map whose OutputPath finds nothing once its iteration ran
    processor = {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}
    definition = {"StartAt": "Map", "States": {"Map": {"Type": "Map", "ItemsPath": "$.items",
        "OutputPath": "$.no.such", "ItemProcessor": processor, "End": True}}}  # fmt: skip
    # WHEN it runs
    result: Any = _run(engine, definition, {"items": [1]})
    # THEN the cause names the MapStateEntered event, not the last one before the failure
    [entered] = _by_type(result.events, "MapStateEntered")
    assert (result.status, result.error) == ("FAILED", "States.Runtime")
    assert f"'Map' (entered at the event id #{entered['id']})." in result.cause
    assert entered["id"] == 2 and len(result.events) > 4


def test_a_map_iteration_failing_with_a_states_error_fails_the_map_with_it(
    engine: LocalEngine,
) -> None:
    """Recorded on AWS: LocalStack's test_error_output snapshot,
    test_map_catch_error[MAP_CATCH_ERROR_OUTPUT_WITH_RETRY]: an iteration's
    States.QueryEvaluationError fails the Map and the execution with it."""
    # GIVEN a Map whose iteration's expression throws, with a Catch
    boom = {"Type": "Pass", "Output": "{% $error('boom') %}", "End": True}
    processor = {"StartAt": "P", "States": {"P": boom}}
    definition = {"QueryLanguage": "JSONata", "StartAt": "Map", "States": {
        "Map": {"Type": "Map", "Items": "{% $states.input.items %}", "ItemProcessor": processor,
                "Catch": [{"ErrorEquals": ["States.QueryEvaluationError"],
                           "Output": "{% $states.errorOutput %}", "Next": "Caught"}], "End": True},
        "Caught": {"Type": "Succeed"}}}  # fmt: skip
    # WHEN it runs, THEN its Catch takes the iteration's error
    caught: Any = _run(engine, definition, {"items": [1]})
    assert caught.status == "SUCCEEDED"
    assert caught.output["Error"] == "States.QueryEvaluationError"
    assert "'P' (entered at the event id #5)" in caught.output["Cause"]
    assert "boom" in caught.output["Cause"]


def test_a_retried_parallel_follows_the_failure_not_the_abort(engine: LocalEngine) -> None:
    """Recorded on AWS: a branch's TaskStateAborted is followed by nothing (LocalStack's
    test_error_output snapshot, PARALLEL_CATCH_ERROR_OUTPUT_WITH_RETRY: the retry's
    ParallelStateStarted #9 follows TaskFailed #7, not TaskStateAborted #8;
    test_callback, SQS_PARALLEL_WAIT_FOR_TASK_TOKEN: ParallelStateFailed #10 follows #8,
    TaskStateAborted #9 follows #8)."""
    # GIVEN a retried Parallel whose branch's Task fails
    task = {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage", "End": True,
            "Arguments": {"QueueUrl": "q", "MessageBody": "{% $error('boom') %}"}}  # fmt: skip
    definition = {"QueryLanguage": "JSONata", "StartAt": "Par", "States": {"Par": {
        "Type": "Parallel", "Branches": [{"StartAt": "T", "States": {"T": task}}],
        "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 1}], "End": True}}}  # fmt: skip
    # WHEN it runs
    result: Any = _run(engine, definition, {})
    # THEN what comes after each abort follows what the abort follows
    by_id = {e["id"]: e for e in result.events}
    aborts = _by_type(result.events, "TaskStateAborted")
    assert len(aborts) == 2
    for abort in aborts:
        after = by_id[abort["id"] + 1]
        assert after["type"] in ("ParallelStateStarted", "ParallelStateFailed")
        assert after["previousEventId"] == abort["previousEventId"]
