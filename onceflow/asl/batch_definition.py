"""statemachines/batch.asl.json, assembled from the per-message states of
statemachines/src/processor.asl.yaml.

Every rule (claim, reclaim, fenced writes, dead-lettering, outcomes) is written
once, in processor.asl.yaml, for both machines. Where the batch workflow differs,
the source says so at the rule, ``!machine {processor: A, batch: B}``
(onceflow/asl/asl_source.py), and docs/design.md names each difference ("The SQS
batch mode: the same rules, four named differences"). This module adds only the
batch's frame, the same for every rule, and applies two mechanical changes:

- The frame. The batch state machine (SqsBatchMode) runs the per-message states
  for each message of an SQS batch that EventBridge Pipes hands over synchronously
  (REQUEST_RESPONSE) and answers with
  ``{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}``, so that the
  pipe deletes only the messages whose outcome is in the ledger. For Step
  Functions targets a pipe reads a partial failure from this payload, and for SQS
  the itemIdentifier is the messageId (EventBridge, "Amazon EventBridge Pipes
  batching and concurrency",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-batching-concurrency.html).
  The pipe always sends a JSON array, even for one message (same page); each
  element is the SQS record of
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-sqs.html.
  An inline Map (``EachMessage``) runs over the array; ItemSelector hands each
  iteration the message and its index from the Map's context
  (input-output-itemselector.html documents ``$$.Map.Item.Value`` in JSONPath;
  LocalStack recorded ``$states.context.Map.Item.Value`` in a JSONata ItemSelector,
  test_base_scenarios snapshot, test_map_state_item_selector[..._JSONATA], and
  ``$$.Map.Item.Index`` in JSONPath, its map_state_item_selector template: the
  JSONata ``$states.context.Map.Item.Index`` itself is not verified).
- A lock owner per message. Each iteration first takes a lock owner of its own,
  the execution's ARN and the message's index, and every
  ``$states.context.Execution.Id`` of the per-message states becomes that owner:
  two messages of one batch never share a lock owner, a fencing token or a call
  token.
- Outcomes. In an inline Map "any iteration failure causes the Map state to fail" and
  then "all iterations stop" (ProcessorConfig, Step Functions developer guide,
  https://docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html), and so
  the execution fails, the whole batch with it. Each end state ends the iteration with
  the output ``{messageId, outcome, retry, error?, cause?}``: a Succeed state stays a
  Succeed state; a Fail state runs inside a one-branch Parallel (``Log<name>``) whose
  Catch makes that output from its Error (or, where the processor computes it, the
  code it computes: the Fail state then raises its own name, never a ``States.`` one)
  and Cause, so the Fail state is still entered, and logged at level ERROR, under its
  own name (the template's failure metrics count it). ``retry`` is true (the message
  stays in the queue) for every outcome that is not settled. Duplicate makes its own
  outcome in the source (settled only when the row it reads back is PROCESSED or
  dead-lettered). An uncaught error, a crash or the five-minute limit fails the whole
  execution, and the pipe then retries the whole batch
  (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-error-troubleshooting.html).

The file keeps the source's ``${Param}`` DefinitionSubstitutions verbatim, quoted
or not (``"IntervalSeconds": ${RetryIntervalSeconds}``).

    python -m onceflow.asl.batch_definition          # writes the file
    python -m onceflow.asl.batch_definition --check  # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from onceflow.asl import END_OUTCOMES, asl_source

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout these tools write in
PROCESSOR = PROJECT_ROOT / "statemachines" / "processor.asl.json"
SOURCE = PROJECT_ROOT / "statemachines" / "src" / "processor.asl.yaml"
BATCH = PROJECT_ROOT / "statemachines" / "batch.asl.json"

MAP_STATE = "EachMessage"
FIRST_STATE = "TakeMessage"
RESPOND_STATE = "Respond"
DUPLICATE = "Duplicate"
OWNER = "lockOwner"
MESSAGE_ID = "messageId"
RECEIPT_HANDLE = "receiptHandle"
LEDGER_UNAVAILABLE = "LedgerUnavailable"
LOG_PREFIX = "Log"  # the Parallel a processor Fail state runs in
MESSAGE_ENDS = "MessageEnds"
MAX_CONCURRENCY = 10  # SqsBatchSize is at most 10: every message of a batch runs at once

EXECUTION_ID = "$states.context.Execution.Id"
# What the copied states may still read of the context once Execution.Id is
# replaced. Execution.Input or Execution.Name would name the whole batch, not
# the message: the generator refuses a processor that starts reading them.
ALLOWED_CONTEXT = frozenset({"$states.context.StateMachine.Id", "$states.context.State.RetryCount"})

# The processor's terminal states, by what the pipe must do with the message.
# Settled: the outcome is in the ledger (or, for a message no row can be made
# of, its DLQ message was sent): the message is deleted.
SETTLED = frozenset({"Processed", "Superseded", "Ignored", "DeadLettered", "InvalidEvent"})
# Not settled: the message stays in the queue and comes back.
RETRIED = frozenset({"LockLost", "Failed", "DeadLetterFailed", "LedgerUnavailable"})
# A retried end state that is settled on some paths: the message stays only while
# this holds. LedgerUnavailable after the DLQ message was sent (MarkDeadLettered
# failed, its failure a MaximumRetryAttempts or PermanentError) is settled.
RETRIED_WHEN = {LEDGER_UNAVAILABLE: "$failure.condition = 'LedgerUnavailable'"}
# End states that make their own outcome in the source (a !machine batch value).
OWN_OUTCOME = frozenset({DUPLICATE})

_SUBSTITUTION = re.compile(r"\$\{(\w+)\}")
_MARK = "@@onceflow-substitution:{}@@"
_MARKED = re.compile(r'"@@onceflow-substitution:(\w+)@@"')
_CONTEXT = re.compile(r"\$states\.context(?:\.[A-Za-z]+)+")


class DefinitionError(Exception):
    """The processor's definition is not one the batch definition can be made from."""


# ---- ${Param} placeholders outside JSON strings --------------------------------


def parse_definition(text: str) -> dict[str, Any]:
    """A definition with DefinitionSubstitutions, parsed: an unquoted ``${Name}`` (a
    number once substituted) becomes a marker string; one inside a string stays as it is."""
    if "@@onceflow-substitution:" in text:
        raise DefinitionError("the definition already holds the generator's marker text")
    out: list[str] = []
    position, in_string = 0, False
    while position < len(text):
        char = text[position]
        if in_string:
            if char == "\\":
                out.append(text[position : position + 2])
                position += 2
                continue
            in_string = char != '"'
            out.append(char)
            position += 1
            continue
        if char == '"':
            in_string = True
        match = _SUBSTITUTION.match(text, position)
        if match is not None:
            out.append(json.dumps(_MARK.format(match.group(1))))
            position = match.end()
            continue
        out.append(char)
        position += 1
    parsed = json.loads("".join(out))
    if not isinstance(parsed, dict):
        raise DefinitionError("a state machine definition is a JSON object")
    return parsed


def render_definition(definition: dict[str, Any]) -> str:
    """The definition as the file holds it: two-space JSON, markers back to ``${Name}``."""
    text = json.dumps(definition, indent=2, ensure_ascii=False) + "\n"
    return _MARKED.sub(lambda m: "${" + m.group(1) + "}", text)


# ---- the batch definition --------------------------------------------------------


def _map_strings(node: Any, change: Callable[[str], str]) -> Any:
    if isinstance(node, dict):
        return {key: _map_strings(value, change) for key, value in node.items()}
    if isinstance(node, list):
        return [_map_strings(value, change) for value in node]
    if isinstance(node, str):
        return change(node)
    return node


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return [node] if isinstance(node, str) else []


def _outcome(name: str, retry: bool | str, extra: Sequence[tuple[str, str]] = ()) -> str:
    """The output that ends a message's iteration; retry is a boolean or an expression."""
    fields = [
        ("messageId", f"${MESSAGE_ID}"),
        ("outcome", json.dumps(name)),
        ("retry", retry if isinstance(retry, str) else "true" if retry else "false"),
        *extra,
    ]
    return "{% {" + ", ".join(f"'{key}': {value}" for key, value in fields) + "} %}"


def _terminal(name: str, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A processor end state as the batch's states: ends the iteration with an output that
    says what the pipe must do.

    A Succeed state stays a Succeed state of the same name (logged at level ALL).
    A Fail state would fail the whole Map, so it runs inside a one-branch Parallel
    (``Log<name>``) whose Catch ends the iteration: the Fail state keeps its name and its
    Cause, and its Error unless that is computed (then it raises its own name, and the
    outcome carries the code), and Step Functions logs its FailStateEntered at level ERROR
    as for the processor (cw-logs.html), so the failure metrics count a batch's
    failures at the batch mode's default log level, ERROR.
    """
    comment = state.get("Comment")
    if state["Type"] != "Fail":
        why = "In the batch: settled, the message is deleted."
        return {
            name: {
                "Type": "Succeed",
                "Comment": f"{comment} {why}" if comment else why,
                "Output": _outcome(name, False),
            }
        }
    retry = name in RETRIED
    # The Fail state raises its own name, a literal: one computed at run time may be a code
    # the States Language reserves ("States.", states-language.net, Error Names), and what
    # AWS does with one a Fail state raises is not recorded (moto and LocalStack refuse it
    # as States.Runtime, which no Catch takes: the whole batch would fail). The outcome
    # carries the code, read where the processor's Fail state reads it.
    inner, error = copy.deepcopy(state), state.get("Error", name)
    code = error[2:-2].strip() if error.startswith("{%") else "$states.errorOutput.Error"
    inner["Error"] = name if error.startswith("{%") else error
    caught = _outcome(
        name,
        RETRIED_WHEN.get(name, retry),
        [("error", code), ("cause", "$states.errorOutput.Cause")],
    )
    stays = (
        f"the message stays in the queue while {RETRIED_WHEN[name]}, and is deleted otherwise."
        if name in RETRIED_WHEN
        else "the message stays in the queue."
        if retry
        else "the message is deleted."
    )
    why = (
        f"In the batch a Fail state would fail the whole Map: {name} runs inside this "
        "Parallel, whose Catch ends the message's iteration; " + stays
    )
    return {
        LOG_PREFIX + name: {
            "Type": "Parallel",
            "Comment": f"{comment} {why}" if comment else why,
            "Branches": [{"StartAt": name, "States": {name: inner}}],
            "Catch": [{"ErrorEquals": ["States.ALL"], "Output": caught, "Next": MESSAGE_ENDS}],
            "Next": MESSAGE_ENDS,
        }
    }


def _message_ends() -> dict[str, Any]:
    return {
        "Type": "Succeed",
        "Comment": (
            "The end of a message that ended in a Fail state of the processor: its outcome, "
            "made by the Catch of that state's Parallel."
        ),
        "Output": "{% $states.input %}",
    }


def _redirect(state: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The state with every transition to old pointing at new instead."""
    state = copy.deepcopy(state)
    for key in ("Next", "Default"):
        if state.get(key) == old:
            state[key] = new
    for rule in [*state.get("Choices", []), *state.get("Catch", [])]:
        if rule.get("Next") == old:
            rule["Next"] = new
    return state


def _iteration_states(per_message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The states of one message's iteration: the lock owner's first state, then the
    per-message states with the owner for the execution and each end made an outcome."""
    states: dict[str, dict[str, Any]] = per_message["States"]
    taken = {FIRST_STATE, MESSAGE_ENDS} & set(states)
    taken |= {LOG_PREFIX + n for n in states} & set(states)
    if taken:
        raise DefinitionError(f"the source already has states named {sorted(taken)}")
    unknown = {
        use
        for text in _strings(states)
        for use in _CONTEXT.findall(text)
        if use not in ALLOWED_CONTEXT | {EXECUTION_ID}
    }
    if unknown:
        raise DefinitionError(
            f"the source reads {sorted(unknown)} of the context; in a batch that names the "
            "whole batch, not the message: decide what it must be in batch_definition.py"
        )
    first = {
        "Type": "Pass",
        "Comment": (
            "This message's lock owner, the execution and the message's index: two messages "
            "of one batch never share a lock owner, a fencing token or a call token. The "
            "processor's states read [record], the array the pipe sends with one message."
        ),
        "Assign": {
            OWNER: "{% $states.context.Execution.Id & '#' & $string($states.input.index) %}",
            MESSAGE_ID: (
                "{% $type($states.input.record.messageId) = 'string' ? "
                "$states.input.record.messageId : null %}"
            ),
            # What DeleteInvalidMessage deletes the message by: this delivery's receipt
            # handle (eb-pipes-sqs.html's record; null when the record has none).
            RECEIPT_HANDLE: (
                "{% $type($states.input.record.receiptHandle) = 'string' ? "
                "$states.input.record.receiptHandle : null %}"
            ),
        },
        "Output": "{% [$states.input.record] %}",
        "Next": per_message["StartAt"],
    }
    out: dict[str, dict[str, Any]] = {FIRST_STATE: first}
    fails: set[str] = set()
    for name, state in states.items():
        state = _map_strings(state, lambda s: s.replace(EXECUTION_ID, f"${OWNER}"))
        ends = state["Type"] in ("Succeed", "Fail") or state.get("End") is True
        if not ends:
            out[name] = state
            continue
        if name in OWN_OUTCOME:
            if "'outcome':" not in str(state.get("Output", "")):
                raise DefinitionError(f"{name} makes no outcome in the batch: give it one")
            out[name] = state
            continue
        if state["Type"] not in ("Succeed", "Fail") and name not in END_OUTCOMES:
            raise DefinitionError(
                f"the processor's end state {name} is a {state['Type']}: name its outcome "
                "in onceflow.asl.END_OUTCOMES"
            )
        if name in END_OUTCOMES:
            # A Task that ends the processor (MarkComplete) goes on, in the batch, to a
            # Succeed state named by its outcome: that ends the message's iteration with
            # the outcome, logged as SucceedStateEntered (the dashboard's batch count).
            ends_at = END_OUTCOMES[name]
            if ends_at in states or ends_at not in SETTLED:
                raise DefinitionError(f"{name}'s outcome {ends_at} is a state or not settled")
            task = {k: v for k, v in state.items() if k not in ("End", "Output")}
            out[name] = {**task, "Next": ends_at}
            out.update(_terminal(ends_at, {"Type": "Succeed"}))
            continue
        if name not in SETTLED | RETRIED:
            raise DefinitionError(
                f"the processor's end state {name} is neither settled nor retried: "
                "add it to SETTLED or RETRIED in onceflow/asl/batch_definition.py"
            )
        ends_as = _terminal(name, state)
        out.update(ends_as)
        fails.update(n for n in ends_as if n != name)
    for name in fails:
        for other, state in out.items():
            out[other] = _redirect(state, name[len(LOG_PREFIX) :], name)
    if fails:
        out[MESSAGE_ENDS] = _message_ends()
    leftover = [name for name, s in out.items() if name != FIRST_STATE and EXECUTION_ID in str(s)]
    if leftover:
        raise DefinitionError(f"Execution.Id left in {leftover}")
    return out


def batch_definition(per_message: dict[str, Any]) -> dict[str, Any]:
    """The batch state machine made of the per-message states (processor.asl.yaml as the
    batch runs it: ``asl_source.generate(source, machine="batch")``)."""
    if per_message.get("QueryLanguage") != "JSONata":
        raise DefinitionError("the processor must be written in JSONata")
    return {
        "Comment": (
            "GENERATED by onceflow/asl/batch_definition.py from statemachines/src/"
            "processor.asl.yaml: do not edit. "
            "onceflow SQS batch mode: the processor's pipeline for each message of a batch "
            "from EventBridge Pipes (REQUEST_RESPONSE); returns batchItemFailures, the messages "
            "whose outcome is not settled in the ledger, so only those stay in the queue."
        ),
        "QueryLanguage": "JSONata",
        "StartAt": MAP_STATE,
        "States": {
            MAP_STATE: {
                "Type": "Map",
                "Comment": (
                    "The pipe sends a JSON array, even for one message. Each iteration gets "
                    "the message and its index in the batch."
                ),
                "Items": "{% $states.input %}",
                "ItemSelector": {
                    "record": "{% $states.context.Map.Item.Value %}",
                    "index": "{% $states.context.Map.Item.Index %}",
                },
                "MaxConcurrency": MAX_CONCURRENCY,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": FIRST_STATE,
                    "States": _iteration_states(per_message),
                },
                "Next": RESPOND_STATE,
            },
            RESPOND_STATE: {
                "Type": "Succeed",
                "Comment": (
                    "What the pipe reads: every message not known to be settled (retry is not "
                    "false) by its messageId; the rest is deleted. A null messageId makes the "
                    "pipe retry the whole batch."
                ),
                "Output": (
                    "{% {'batchItemFailures': [$states.input[$not(retry = false)]"
                    ".{'itemIdentifier': messageId}]} %}"
                ),
            },
        },
    }


def per_message_states(source: Path = SOURCE) -> dict[str, Any]:
    """The source's definition as the batch runs each message (``!machine`` batch values)."""
    return asl_source.generate(asl_source.load(source), machine="batch")


def generate(source: Path = SOURCE) -> str:
    """The text of statemachines/batch.asl.json for the source at source."""
    return render_definition(batch_definition(per_message_states(source)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onceflow.asl.batch_definition",
        description="Write statemachines/batch.asl.json from statemachines/src/processor.asl.yaml.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file differs"
    )
    args = parser.parse_args(argv)
    text = generate()
    current = BATCH.read_text(encoding="utf-8") if BATCH.exists() else None
    if args.check:
        if current != text:
            print(
                f"{BATCH.relative_to(PROJECT_ROOT)} is not what processor.asl.yaml generates; "
                "run: python -m onceflow.asl.batch_definition",
                file=sys.stderr,
            )
            return 1
        print(f"{BATCH.relative_to(PROJECT_ROOT)} is up to date")
        return 0
    if current != text:
        BATCH.write_text(text, encoding="utf-8")
        print(f"wrote {BATCH.relative_to(PROJECT_ROOT)}")
    else:
        print(f"{BATCH.relative_to(PROJECT_ROOT)} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
