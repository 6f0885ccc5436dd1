"""statemachines/batch.asl.json, generated from statemachines/processor.asl.json.

The per-message pipeline is written once, in the processor. The batch state
machine (SqsBatchMode) runs it for each message of an SQS batch that
EventBridge Pipes hands over synchronously (REQUEST_RESPONSE) and answers with
``{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}``, so that the
pipe deletes only the messages whose outcome is in the ledger:

- For Step Functions targets a pipe reads a partial failure from this payload,
  and for SQS the itemIdentifier is the messageId (EventBridge, "Amazon
  EventBridge Pipes batching and concurrency",
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-batching-concurrency.html).
- The pipe always sends a JSON array, even for one message (same page); each
  element is the SQS record of
  https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-sqs.html.

The generated definition is an inline Map (``EachMessage``) over the array;
ItemSelector hands each iteration the message and its index from the Map's
context (input-output-itemselector.html documents ``$$.Map.Item.Value`` in
JSONPath; the JSONata spelling ``$states.context.Map.Item.Index`` is not
verified in the AWS text). Each iteration first takes a lock owner of its
own, the execution's ARN and the message's index, then runs the processor's
states, copied, with every
``$states.context.Execution.Id`` replaced by that owner: two messages of one
batch never share a lock owner, a fencing token or a call token.

Terminal states change, because in an inline Map "any iteration failure causes
the Map state to fail" and then "all iterations stop" (ProcessorConfig, Step
Functions developer guide,
https://docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html),
and so the execution fails, the whole batch with it. Each ends the
iteration with the output ``{messageId, outcome, retry, error?, cause?}``: a
Succeed state stays a Succeed state; a Fail state runs inside a one-branch
Parallel (``Log<name>``) whose Catch makes that output from its Error and
Cause, so the Fail state is still entered, and logged at level ERROR, under
its own name (the template's failure metrics count it). ``retry``
is true (the message stays in the queue) for every outcome that is not
settled; Duplicate is settled only when the row is PROCESSED or
dead-lettered, which it reads back (the dynamodb:getItem integration,
ConsistentRead; its role needs dynamodb:GetItem,
https://docs.aws.amazon.com/step-functions/latest/dg/dynamo-iam.html): see
DUPLICATE_COMMENT. An uncaught error, a crash or the five-minute limit fails
the whole execution, and the pipe then retries the whole batch
(https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-error-troubleshooting.html).

Rows go into the OpenWork index as the processor writes them: the queue does
not always bring a message back (its receive budget, its retention, a pipe
stopped for good), and the audit's sweep finds through the index what it no
longer can (P11).

Three rules differ from the processor's, each because the queue keeps a message
until its outcome is settled (docs/design.md, "The SQS batch mode"):

- A row at MaxAttempts that is not settled (FAILED and not dead-lettered, or
  PROCESSING with an expired lock) is dead-lettered by its next delivery
  (AT_MAX_ATTEMPTS, TAKE_OVER): the lock is taken with a conditional write, the
  DLQ message sent, then the fenced MarkDeadLettered. Otherwise such a message
  would come back as an unsettled Duplicate until the queue's receive budget
  moves it to the source DLQ. The single-message processor leaves such a row to
  the audit's sweep: its delivery is consumed either way, and its duplicate path
  stays Claim, Reclaim, Duplicate.
- A ledger write that fails past its retries (LedgerUnavailable) before any DLQ
  message was sent sends none and keeps the message: the queue carries the work,
  and one unit of work never has both a DLQ message and a message that comes
  back (which could finish it and leave the DLQ alarm firing for finished work).
  After the DLQ message was sent (MarkDeadLettered failing) the message is
  deleted: the DLQ message carries it.
- The lock is capped by the EXPRESS limit (BATCH_LOCK_CAP): no state of a batch
  execution runs after five minutes, nor its last Process call after the task's
  timeout, so a longer LockTimeoutSeconds would only make a message whose
  execution died wait more receives; the created queue's visibility timeout
  (1800 s) is longer, so such a message finds the lock expired on its next receive.

The file keeps the processor's ``${Param}`` DefinitionSubstitutions verbatim,
quoted or not (``"IntervalSeconds": ${RetryIntervalSeconds}``).

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

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout these tools write in
PROCESSOR = PROJECT_ROOT / "statemachines" / "processor.asl.json"
BATCH = PROJECT_ROOT / "statemachines" / "batch.asl.json"

MAP_STATE = "EachMessage"
FIRST_STATE = "TakeMessage"
RESPOND_STATE = "Respond"
READ_DUPLICATE = "ReadDuplicateRow"
SETTLED_OR_RECLAIM = "SettledOrReclaim"
RECLAIM = "Reclaim"
DUPLICATE = "Duplicate"
OWNER = "lockOwner"
MESSAGE_ID = "messageId"
DUPLICATE_ROW = "duplicateRow"
AT_MAX_ATTEMPTS = "AtMaxAttempts"
TAKE_OVER = "TakeOverAtMaxAttempts"
SEND_TO_DLQ = "SendToDLQ"
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
# End states whose processor comment does not hold in the batch.
BATCH_COMMENTS = {
    LEDGER_UNAVAILABLE: (
        "Alarmed. A ledger write failed past its retries (throttling, a validation error). "
        "Before any DLQ message was sent, none is: the message stays in the queue and "
        "carries the work, and a row this execution held comes back when its lock expires. "
        "When MarkDeadLettered failed, the DLQ message exists and carries it."
    )
}

DUPLICATE_COMMENT = (
    "Claim was refused: the row exists. It is read back (consistent) before any takeover is "
    "tried: a PROCESSED or dead-lettered row is a settled duplicate, at the cost of one "
    "refused write and this read (P8 item 5); any other row goes to Reclaim."
)
SETTLED_OR_RECLAIM_COMMENT = (
    "Only a PROCESSED or dead-lettered row is settled. Any other (FAILED, PROCESSING, at "
    "MaxAttempts) may be taken over by Reclaim; if Reclaim is refused, a row at MaxAttempts "
    "is taken to be dead-lettered (AtMaxAttempts), and any other is held by another live "
    "lock: the message must stay, for if that execution crashes this copy is what brings "
    "the work back."
)
AT_MAX_ATTEMPTS_COMMENT = (
    "Reclaim was refused. A row at MaxAttempts is never reclaimed: unless another live lock "
    "holds it, this delivery dead-letters it (P11), or the message would come back as an "
    "unsettled Duplicate until the queue's receive budget ran out."
)
TAKE_OVER_COMMENT = (
    "A row at MaxAttempts, FAILED and not dead-lettered (its DLQ message was never sent) or "
    "PROCESSING under an expired lock (its execution died): take the lock with a conditional "
    "write (no attempt is added: the work is not run again), then send the DLQ message and "
    "mark the row dead-lettered, fenced, as the processor does. Refused: another live lock "
    "holds it (or it was settled meanwhile), a Duplicate."
)
# The takeover's DLQ message says what the audit's would (functions/service/logic/
# audit.py: stuck_dead_letter_message, failed_dead_letter_message): LockExpired for a
# stuck row; for a FAILED row the failure its last_error names (for one whose DLQ
# send failed, the failure it was being dead-lettered for) and that last_error.
TAKE_OVER_FAILURE = (
    "{% ($old := $states.result.Attributes; $n := $old.attempts.N;"
    " $last := $exists($old.last_error.S) ? $old.last_error.S : '';"
    " $old.status.S = 'PROCESSING' ? {'code': 'LockExpired', 'condition': 'MaximumRetryAttempts',"
    " 'message': 'LockExpired: the lock of ' & ($exists($old.lock_owner.S) ? $old.lock_owner.S"
    " : 'an unknown execution') & ' expired with the work unfinished, after ' & $n"
    " & ' attempt(s)'} :"
    " ($undelivered := $match($last, /^DeadLetterFailed: [\\s\\S]*? \\(dead-lettering"
    " ([A-Za-z0-9_.-]+): /);"
    " $named := $match($last, /^([A-Za-z0-9_.-]+):/);"
    " $code := $count($undelivered) > 0 ? $undelivered[0].groups[0] :"
    " ($count($named) > 0 ? $named[0].groups[0] : 'Unknown');"
    " {'code': $code, 'condition': $code = 'PermanentError' ? 'PermanentError'"
    " : 'MaximumRetryAttempts', 'message': $substring($length($last) > 0 ? $last"
    " : $code & ': failed ' & $n & ' time(s)', 0, 1000)})) %}"
)
# The batch's lock is at most the EXPRESS limit (300 s), then the longest a Process call
# started just before it may still run (the task's timeout, the function's + 10 s), and a
# margin: the processor's lock (LockTimeoutSeconds or the worst case, the longer) capped.
BATCH_LOCK_CAP = "300 + (${ProcessorTimeoutSeconds} + 10) + 60"

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
    (``Log<name>``) whose Catch ends the iteration: the Fail state keeps its name, its
    Error and its Cause, and Step Functions logs its FailStateEntered at level ERROR
    as for the processor (cw-logs.html), so the failure metrics count a batch's
    failures at the batch mode's default log level, ERROR.
    """
    comment = BATCH_COMMENTS.get(name, state.get("Comment"))
    if name in BATCH_COMMENTS:
        state = {**state, "Comment": comment}
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
    caught = _outcome(
        name,
        RETRIED_WHEN.get(name, retry),
        [("error", "$states.errorOutput.Error"), ("cause", "$states.errorOutput.Cause")],
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
            "Branches": [{"StartAt": name, "States": {name: copy.deepcopy(state)}}],
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


def _duplicate_states(processor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A refused Claim reads the row back before Reclaim is tried; Duplicate deletes the
    message only when the row is settled."""
    claim = processor["States"].get("Claim")
    if claim is None or claim.get("Resource") != "arn:aws:states:::dynamodb:putItem":
        raise DefinitionError("the processor has no Claim (dynamodb:putItem) to read the table of")
    refused = [c for c in claim.get("Catch", []) if c.get("Next") == RECLAIM]
    if [c["ErrorEquals"] for c in refused] != [["DynamoDB.ConditionalCheckFailedException"]]:
        raise DefinitionError("Claim no longer goes to Reclaim on a refused condition alone")
    retriers = [r for r in claim.get("Retry", []) if "States.ALL" not in r["ErrorEquals"]]
    read = {
        "Type": "Task",
        "Comment": DUPLICATE_COMMENT,
        "Resource": "arn:aws:states:::dynamodb:getItem",
        "Arguments": {
            "TableName": claim["Arguments"]["TableName"],
            "Key": {"pk": {"S": "{% $workItem.idempotencyKey %}"}},
            "ConsistentRead": True,
            "ProjectionExpression": "#status, dead_lettered_at, attempts",
            "ExpressionAttributeNames": {"#status": "status"},
        },
        "Assign": {
            DUPLICATE_ROW: (
                "{% ($item := $states.result.Item; {'status': $exists($item.status.S) ? "
                "$item.status.S : null, 'deadLettered': $exists($item.dead_lettered_at), "
                "'attempts': $exists($item.attempts.N) ? $number($item.attempts.N) : 0}) %}"
            )
        },
        "Retry": copy.deepcopy(retriers),
        "Catch": [
            {
                "ErrorEquals": ["States.ALL"],
                "Assign": {
                    DUPLICATE_ROW: (
                        "{% {'status': null, 'deadLettered': false, 'attempts': 0, "
                        "'error': $states.errorOutput.Error} %}"
                    )
                },
                "Next": DUPLICATE,
            }
        ],
        "Next": SETTLED_OR_RECLAIM,
    }
    settled = f"(${DUPLICATE_ROW}.status = 'PROCESSED' or ${DUPLICATE_ROW}.deadLettered = true)"
    choose = {
        "Type": "Choice",
        "Comment": SETTLED_OR_RECLAIM_COMMENT,
        "Choices": [{"Condition": "{% " + settled + " %}", "Next": DUPLICATE}],
        "Default": RECLAIM,
    }
    duplicate = {
        "Type": "Succeed",
        "Comment": (
            "Deleted only when the row is PROCESSED or dead-lettered; otherwise (held by "
            "another live lock, unreadable) the message stays in the queue."
        ),
        "Output": (
            "{% {'messageId': $"
            + MESSAGE_ID
            + ", 'outcome': 'Duplicate', 'retry': $not"
            + settled
            + ", 'ledgerStatus': $"
            + DUPLICATE_ROW
            + ".status, 'deadLettered': $"
            + DUPLICATE_ROW
            + ".deadLettered, 'error': $"
            + DUPLICATE_ROW
            + ".error} %}"
        ),
    }
    return {
        READ_DUPLICATE: read,
        SETTLED_OR_RECLAIM: choose,
        DUPLICATE: duplicate,
        **_dead_letter_at_max_attempts(processor),
    }


def _dead_letter_at_max_attempts(processor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A refused Reclaim of a row at MaxAttempts: take the lock, then dead-letter it."""
    reclaim = processor["States"][RECLAIM]
    arguments = reclaim["Arguments"]
    values = arguments["ExpressionAttributeValues"]
    if "':max_attempts': {'N': '${MaxAttempts}'}" not in values or ":lock_expires_at" not in values:
        raise DefinitionError("Reclaim no longer writes the lock as batch_definition.py expects")
    unavailable = [
        c
        for c in reclaim.get("Catch", [])
        if "'condition': 'LedgerUnavailable'" in str(c.get("Assign", {}).get("failure", ""))
    ]
    if len(unavailable) != 1:
        raise DefinitionError("Reclaim no longer names LedgerUnavailable as expected")
    failure = unavailable[0]["Assign"]["failure"].replace(
        "Reclaim failed: ", TAKE_OVER + " failed: "
    )
    choose = {
        "Type": "Choice",
        "Comment": AT_MAX_ATTEMPTS_COMMENT,
        "Choices": [
            {
                "Condition": "{% $" + DUPLICATE_ROW + ".attempts >= ${MaxAttempts} %}",
                "Next": TAKE_OVER,
            }
        ],
        "Default": DUPLICATE,
    }
    take_over = {
        "Type": "Task",
        "Comment": TAKE_OVER_COMMENT,
        "Resource": "arn:aws:states:::dynamodb:updateItem",
        "Arguments": {
            "TableName": arguments["TableName"],
            "Key": copy.deepcopy(arguments["Key"]),
            "UpdateExpression": (
                "SET #status = :processing, open_status = :open, lock_owner = :owner, "
                "lock_expires_at = :lock_expires_at, updated_at = :now_ms"
            ),
            "ConditionExpression": (
                "attribute_exists(pk) AND attribute_not_exists(dead_lettered_at) "
                "AND attempts >= :max_attempts AND (#status = :failed "
                "OR (#status = :processing AND lock_expires_at < :now))"
            ),
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": (
                "{% (($nowMs := $millis(); $now := $floor($nowMs / 1000); "
                "{':processing': {'S': 'PROCESSING'}, "
                "':open': {'S': 'PROCESSING#' & "
                + _SHARD.format(key="$workItem.idempotencyKey")
                + "}, ':failed': {'S': 'FAILED'}, "
                "':owner': {'S': $" + OWNER + "}, "
                "':lock_expires_at': {'N': $string($now + $lockSeconds)}, "
                "':now': {'N': $string($now)}, ':now_ms': {'N': $string($nowMs)}, "
                "':max_attempts': {'N': '${MaxAttempts}'}})) %}"
            ),
            "ReturnValues": "ALL_OLD",
        },
        "Assign": {
            "attempt": "{% $number($states.result.Attributes.attempts.N) %}",
            "held": True,
            "failure": TAKE_OVER_FAILURE,
        },
        "Retry": copy.deepcopy(reclaim.get("Retry", [])),
        "Catch": [
            {"ErrorEquals": ["DynamoDB.ConditionalCheckFailedException"], "Next": DUPLICATE},
            # Nothing sent yet: the message stays, as for every ledger outage in the batch.
            {
                "ErrorEquals": ["States.ALL"],
                "Assign": {"failure": failure},
                "Next": LEDGER_UNAVAILABLE,
            },
        ],
        "Next": SEND_TO_DLQ,
    }
    return {AT_MAX_ATTEMPTS: choose, TAKE_OVER: take_over}


_SHARD = "$lowercase($substring($hash({key}, 'MD5'), 0, 1))"  # OpenWork's, as the processor's


def _without_dead_letter_on_ledger_outage(
    states: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Every catch that would dead-letter a LedgerUnavailable goes to LedgerUnavailable
    itself: the message stays in the queue and carries the work, no DLQ message is sent."""
    out = {}
    rerouted = 0
    for name, state in states.items():
        state = copy.deepcopy(state)
        for rule in state.get("Catch", []):
            failure = str(rule.get("Assign", {}).get("failure", ""))
            if "'condition': 'LedgerUnavailable'" in failure and rule.get("Next") == SEND_TO_DLQ:
                rule["Next"] = LEDGER_UNAVAILABLE
                rerouted += 1
        out[name] = state
    if rerouted == 0:
        raise DefinitionError(
            "no ledger write of the processor dead-letters a LedgerUnavailable any more: "
            "update batch_definition.py"
        )
    return out


def _with_batch_lock(states: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every assignment of lockSeconds capped at BATCH_LOCK_CAP."""
    out = {}
    replaced = 0
    for name, state in states.items():
        state = copy.deepcopy(state)
        for holder in [state, *state.get("Choices", [])]:
            lock = holder.get("Assign", {}).get("lockSeconds")
            if lock is not None:
                if not (lock.startswith("{%") and lock.endswith("%}")):
                    raise DefinitionError(f"{name} assigns lockSeconds without an expression")
                inner = lock[2:-2].strip()
                holder["Assign"]["lockSeconds"] = (
                    "{% $min([(" + inner + "), " + BATCH_LOCK_CAP + "]) %}"
                )
                replaced += 1
        out[name] = state
    if replaced == 0:
        raise DefinitionError(
            "the processor no longer assigns lockSeconds: update batch_definition.py"
        )
    return out


def _iteration_states(processor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    states: dict[str, dict[str, Any]] = processor["States"]
    taken = {
        FIRST_STATE,
        READ_DUPLICATE,
        SETTLED_OR_RECLAIM,
        AT_MAX_ATTEMPTS,
        TAKE_OVER,
        MESSAGE_ENDS,
    } & set(states)
    taken |= {LOG_PREFIX + n for n in states} & set(states)
    if taken:
        raise DefinitionError(f"the processor already has states named {sorted(taken)}")
    missing = {DUPLICATE, SEND_TO_DLQ, LEDGER_UNAVAILABLE} - set(states)
    if missing:
        raise DefinitionError(f"the processor has no state {sorted(missing)}")
    unknown = {
        use
        for text in _strings(states)
        for use in _CONTEXT.findall(text)
        if use not in ALLOWED_CONTEXT | {EXECUTION_ID}
    }
    if unknown:
        raise DefinitionError(
            f"the processor reads {sorted(unknown)} of the context; in a batch that names the "
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
        },
        "Output": "{% [$states.input.record] %}",
        "Next": processor["StartAt"],
    }
    out: dict[str, dict[str, Any]] = {FIRST_STATE: first}
    duplicate_states = _duplicate_states(processor)
    fails: set[str] = set()
    for name, state in _with_batch_lock(_without_dead_letter_on_ledger_outage(states)).items():
        state = _map_strings(state, lambda s: s.replace(EXECUTION_ID, f"${OWNER}"))
        state = _redirect(state, RECLAIM, READ_DUPLICATE)
        if name == RECLAIM:
            state = _redirect(state, DUPLICATE, AT_MAX_ATTEMPTS)
            state["Comment"] = (
                f"{state.get('Comment', '')} In the batch a refused Reclaim goes to "
                f"{AT_MAX_ATTEMPTS}: a row at the maximum is this delivery's to dead-letter."
            ).strip()
        if name == DUPLICATE:
            out.update(duplicate_states)
            continue
        ends = state["Type"] in ("Succeed", "Fail") or state.get("End") is True
        if ends:
            if name not in SETTLED | RETRIED:
                raise DefinitionError(
                    f"the processor's end state {name} is neither settled nor retried: "
                    "add it to SETTLED or RETRIED in onceflow/asl/batch_definition.py"
                )
            if state["Type"] not in ("Succeed", "Fail"):
                raise DefinitionError(f"the processor's end state {name} is a {state['Type']}")
            ends_as = _terminal(name, state)
            out.update(ends_as)
            fails.update(n for n in ends_as if n != name)
            continue
        out[name] = state
    for name in fails:
        for other, state in out.items():
            out[other] = _redirect(state, name[len(LOG_PREFIX) :], name)
    if fails:
        out[MESSAGE_ENDS] = _message_ends()
    leftover = [name for name, s in out.items() if name != FIRST_STATE and EXECUTION_ID in str(s)]
    if leftover:
        raise DefinitionError(f"Execution.Id left in {leftover}")
    return out


def batch_definition(processor: dict[str, Any]) -> dict[str, Any]:
    """The batch state machine made of the processor's definition (parsed)."""
    if processor.get("QueryLanguage") != "JSONata":
        raise DefinitionError("the processor must be written in JSONata")
    return {
        "Comment": (
            "GENERATED by onceflow/asl/batch_definition.py from processor.asl.json: do not edit. "
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
                    "States": _iteration_states(processor),
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


def generate(processor_path: Path = PROCESSOR) -> str:
    """The text of statemachines/batch.asl.json for the processor at processor_path."""
    processor = parse_definition(processor_path.read_text(encoding="utf-8"))
    return render_definition(batch_definition(processor))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onceflow.asl.batch_definition",
        description="Write statemachines/batch.asl.json, generated from processor.asl.json.",
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
                f"{BATCH.relative_to(PROJECT_ROOT)} is not what processor.asl.json generates; "
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
