"""State fields AWS cannot use: the state fails where, and in the words, AWS records.

Recordings: LocalStack's test_base_scenarios snapshot (github.com/localstack/localstack,
tests/aws/services/stepfunctions/v2/scenarios/, validated on AWS).
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any

from moto.stepfunctions.parser.api import HistoryEventType
from moto.stepfunctions.parser.asl.component.common.error_name import failure_event
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.common.timeouts.heartbeat import HeartbeatSecondsPath
from moto.stepfunctions.parser.asl.component.common.timeouts.timeout import TimeoutSecondsPath
from moto.stepfunctions.parser.asl.component.state import state
from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.reader_config.max_items_decl import (  # noqa: E501
    MaxItemsPath,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor import (  # noqa: E501
    DistributedItemProcessor,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iterator.distributed_iterator import (  # noqa: E501
    DistributedIterator,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import timestamp
from moto.stepfunctions.parser.asl.utils import encoding, json_path
from moto.stepfunctions.parser.asl.utils.json_path import NoSuchJsonPathError

from onceflow.local.patches.fidelity import failure
from onceflow.local.patches.registry import Installer, Patch, gone, lacks

_TESTS = "tests/unit/test_field_errors.py::"


# A JSONata Timestamp not ISO-8601 (moto: States.Runtime, its cause "... == 2016-...").
def _timestamp_failure(self: Any, env: Any, timestamp_str: str) -> Any:
    cause = "The Timestamp field cannot be parsed as an ISO-8601 extended offset date-time "
    error, event = StatesErrorNameType.StatesQueryEvaluationError, HistoryEventType.EvaluationFailed
    return failure(env, error, event, f"{cause}format string: {timestamp_str}", "Timestamp")


# Seconds paths read at the state's entry (moto: in the attempt, an undecorated
# ExecutionFailed first).
_SECONDS_PATHS = (TimeoutSecondsPath, HeartbeatSecondsPath)


def _seconds_read_first(original: Any) -> Any:
    @functools.wraps(original)
    def _eval_state(self: Any, env: Any) -> None:
        for field in (self.timeout, self.heartbeat):
            if isinstance(field, _SECONDS_PATHS):
                field.eval(env=env)
                env.stack.pop()
        original(self, env)

    return _eval_state


# "... could not be found in the input '<input>'": AWS writes the input without spaces.
_NAMING_THE_INPUT = (json_path, string_expression, state)  # each uses to_json_str for it


def _compact_json(value: Any, separators: tuple[str, str] | None = None) -> str:
    return encoding.to_json_str(value, separators or (",", ":"))


# A Distributed Map's MaxItemsPath judged before its Map Run (moto: in it).
_DISTRIBUTED = (DistributedItemProcessor, DistributedIterator)  # not their base: other
# patches read the base's _eval_body source


def _an_integer(value: Any) -> bool:
    return type(value) is int or (isinstance(value, str) and value.strip().lstrip("+-").isdigit())


def _max_items_judged_first(original: Any) -> Any:
    @functools.wraps(original)
    def _eval_body(self: Any, env: Any) -> None:
        config = getattr(env.stack[-1].item_reader, "reader_config", None)
        decl = getattr(config, "max_items_decl", None)
        if isinstance(decl, MaxItemsPath):
            env.stack.append(env.stack[-2])  # the Map's input, where moto's reader reads it
            try:
                decl.string_sampler.eval(env=env)
            except NoSuchJsonPathError:
                env.stack.append(0)  # moto's reader reports it, in the Map Run, as before
            value = env.stack.pop()
            env.stack.pop()
        if isinstance(decl, MaxItemsPath) and not _an_integer(value):
            text = value if isinstance(value, str) else _compact_json(value)
            path = decl.string_sampler.literal_value
            cause = f'The MaxItemsPath field refers to value "{text}" which is not a valid integer: {path}'  # noqa: E501
            error, event = StatesErrorNameType.StatesRuntime, HistoryEventType.ExecutionFailed
            raise failure_event.FailureEventException(failure(env, error, event, cause))
        original(self, env)

    return _eval_body


# "Invalid path '$.a.b' : ..." worded as Jayway JsonPath words it (moto: "No results for
# path: $['a.b']" whatever was missing).
_DOTTED = re.compile(r"\$(?:\.[\w-]+)+")


def _jayway(missing: NoSuchJsonPathError) -> str | None:
    if not _DOTTED.fullmatch(missing.json_path):
        return None
    steps, node = missing.json_path[2:].split("."), missing.data
    for index, step in enumerate(steps):
        if not isinstance(node, dict):
            return None  # Jayway words this otherwise (not reproduced)
        if step not in node:
            if index == len(steps) - 1:
                return "No results for path: $" + "".join(f"['{s}']" for s in steps)
            return "Missing property in path $" + "".join(f"['{s}']" for s in steps[: index + 1])
        node = node[step]
    return None


def _jayway_worded(original: Any) -> Any:
    """A failure built while a JSONPath found nothing words it as Jayway does."""

    def __init__(self: Any, env: Any, *args: Any, **kwargs: Any) -> None:
        original(self, env, *args, **kwargs)
        missing = sys.exc_info()[1]  # moto builds the event while handling what went wrong
        details: Any = next(iter((self.event_details or {}).values()), {})
        if isinstance(missing, NoSuchJsonPathError) and (words := _jayway(missing)):
            moto_words = f"No results for path: $['{missing.json_path[2:]}']"
            details["cause"] = str(details.get("cause", "")).replace(moto_words, words)

    return __init__


def _install(installer: Installer) -> None:
    event = failure_event.FailureEvent
    installer.replace(event, "__init__", _jayway_worded(event.__init__))
    for component in _DISTRIBUTED:
        installer.replace(component, "_eval_body", _max_items_judged_first(component._eval_body))
    for module in _NAMING_THE_INPUT:
        installer.replace(module, "to_json_str", _compact_json)
    installer.replace(timestamp.Timestamp, "_create_failure_event", _timestamp_failure)
    read_first = _seconds_read_first(ExecutionState._eval_state)
    installer.replace(ExecutionState, "_eval_state", read_first)


def _fits() -> list[str]:
    return [
        *(m for module in _NAMING_THE_INPUT for m in gone(module, "to_json_str")),
        *lacks(json_path.NoSuchJsonPathError, "could not be found in the input '{data_json_str}'"),
        *gone(timestamp.Timestamp, "_create_failure_event", "_get_wait_seconds"),
        *lacks(timestamp.Timestamp._get_wait_seconds, "self._create_failure_event(env,"),
        *gone(ExecutionState, "_eval_state"),
        *lacks(ExecutionState.__init__, "self.timeout: Timeout", "self.heartbeat:"),
        *lacks(DistributedItemProcessor._eval_body, "eval_input.item_reader"),
        *lacks(MaxItemsPath, "self.string_sampler = string_sampler"),
    ]


PATCHES = (
    Patch(
        name="state fields AWS cannot use fail as AWS records",
        kind="fidelity",
        why="A JSONata Wait Timestamp that is not an ISO-8601 date-time fails the state "
        "with States.QueryEvaluationError, one EvaluationFailed (location Timestamp) and "
        '"The Timestamp field cannot be parsed as an ISO-8601 extended offset date-time '
        'format string: <value>" (recorded: test_wait_timestamp_jsonata[NO_T, NO_Z, '
        "INVALID_DATE, INVALID_TIME, INVALID_ISO]); a TimeoutSecondsPath or "
        "HeartbeatSecondsPath that finds nothing ends the execution at the Task's entry, "
        "one ExecutionFailed with States.Runtime (recorded: test_invalid_jsonpath[ST."
        "INVALID_JSONPATH_IN_TIMEOUTSECONDSPATH, _HEARTBEATSECONDSPATH]), which no Catch "
        "on States.ALL takes ('Handling errors in Step Functions workflows'; with a Catch "
        "not recorded); a Distributed Map's MaxItemsPath that is not an integer fails it "
        "after MapStateStarted, before any Map Run, with States.Runtime 'The MaxItemsPath "
        'field refers to value "1.5" which is not a valid integer: $.MaxItems\' (recorded: '
        "test_map_item_reader_csv_max_items_paths[1.5]); a path missing a step "
        "before its last reads \"Missing property in path $['no']\" (recorded: "
        "test_catch_states_runtime, where no Catch takes an OutputPath's States.Runtime); "
        "a path that finds nothing names the input as JSON without spaces, "
        "'... could not be found in the input '{\"flagged\":false}'' (an AWS console's, AWS "
        "Step Functions workshop, 'Check the workflow'; masked in test_invalid_jsonpath). "
        "moto failed the Wait with States.Runtime and no EvaluationFailed, read the seconds "
        "in the task's attempt, where a Catch took it, failed the Map Run with "
        'States.ItemReaderFailed, wrote "No results for '
        "path: $['no.such.result.path']\" and spaced the input's JSON.",
        test=_TESTS + "test_a_jsonata_wait_timestamp_that_is_not_iso_8601_is_an_evaluation_failure",
        install=_install,
        fits=_fits,
    ),
)
