"""Where moto does otherwise than AWS, these make it do what AWS does.

Each patch below names the AWS behaviour it reproduces, with the page that
documents it, and the test that holds the engine to it (see ``PATCHES`` at
the end). AWS's quotas (sizes, history, durations, timeouts) are enforced by
onceflow/local/limits/ and IAM by onceflow/local/iam.py, installed the same way.
The Distributed Map's are apart, in ``distributed_map``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NoReturn
from urllib.parse import urlsplit

from moto.core.exceptions import AWSError
from moto.core.utils import unix_time_millis
from moto.s3 import models as s3_models
from moto.stepfunctions import exceptions as sfn_exceptions
from moto.stepfunctions.parser import models as sfn_parser_models
from moto.stepfunctions.parser.api import (
    EvaluationFailedEventDetails,
    HistoryEventType,
    InvalidDefinition,
)
from moto.stepfunctions.parser.asl.component.common.assign.assign_template_value_terminal import (
    AssignTemplateValueTerminalLit,
)
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.intrinsic import (
    jsonata as intrinsic_jsonata,
)
from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_map import state_map
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import (
    branch_worker,
    branches_decl,
)
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.eval import states as eval_states
from moto.stepfunctions.parser.asl.eval import variable_store
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramError
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.asl.parse import preprocessor as asl_preprocessor

from onceflow.local import jsonata_node
from onceflow.local.patches import hooks
from onceflow.local.patches.hooks import stubber_fits
from onceflow.local.patches.registry import Installer, Patch

# --------------------------------------------------------------------------
# JSONata: moto leaves its evaluator unset (it expects a JVM). Every expression
# is evaluated by jsonata 2.0.6 in node, the library and version Step Functions
# runs, with the functions Step Functions adds ($hash, $uuid, $random with a
# seed, $partition, $range, $parse) and without $eval (onceflow/local/jsonata_node.py).
# --------------------------------------------------------------------------

UNSUPPORTED_RESULT = "returned an unsupported result type"


def eval_jsonata(expression: str, bindings: dict[str, Any] | None = None) -> Any:
    """Evaluate one expression with the reference library (moto's hook expects a JVM).

    With bindings, the expression is one from a definition: compiled once and
    cached. Without, it is moto's composed text (its fallback path), which
    embeds the data: never cached. Undefined is None here, as moto's hook
    returns it (moto then asks $exists to tell it from null).
    """
    try:
        result = jsonata_node.evaluate(expression, bindings, cache=bindings is not None)
    except jsonata_node.JsonataError as exc:  # moto turns this into States.QueryEvaluationError
        raise moto_jsonata.JSONataException(exc.code or "UNKNOWN", str(exc)) from exc
    except jsonata_node.UnsupportedResult as exc:
        raise moto_jsonata.JSONataException(
            "UNKNOWN", f"The JSONata expression '{expression}' {UNSUPPORTED_RESULT}."
        ) from exc
    return None if result is jsonata_node.UNDEFINED else result


moto_encode_jsonata_variable_declarations = moto_jsonata.encode_jsonata_variable_declarations


def encode_jsonata_variable_declarations(bindings: dict[str, Any]) -> str:
    """moto writes string values as ``"{value}"`` unescaped; JSON-encode them."""
    parts = []
    for reference, value in bindings.items():
        literal = json.dumps(value, separators=(",", ":"), default=str)
        parts.append(f"{reference}:={literal};")
    return "".join(parts)


# --------------------------------------------------------------------------
# A JSONata expression that fails (bad input to $parse, $error(), a type
# error) is States.QueryEvaluationError on AWS, which Catch can handle. moto
# lets the raw exception escape, which ends the execution as an uncatchable
# States.Runtime (and inside a Parallel branch, as a crash of the branch).
# --------------------------------------------------------------------------

_original_jsonata_eval_body = string_expression.StringJSONata._eval_body


# Where JSONata's tokenizer ends a name: whitespace or a one-character operator
# (jsonata.js 2.0.6's, checked by tests/unit/test_jsonata_node.py). Anything
# else goes on with the name: "temp°C", "price$usd" and 'a"b"' are each one name.
_NAME_ENDS = frozenset(" \t\n\r\v!#%&()*+,-./:;<=>?@[]^{|}~")
_NAME_CHAR = "[^" + re.escape("".join(sorted(_NAME_ENDS))) + "]"
# A field step: a name that does not start as a number, a string, a quoted
# name or a variable would.
_STEP = "[^" + re.escape("".join(sorted(_NAME_ENDS)) + "0123456789\"'`$") + "]" + _NAME_CHAR + "*"
_VARIABLE = re.compile(rf"\$({_NAME_CHAR}*)((?:\.{_STEP})*)")
# Words JSONata reads as literals or operators, never as a field step.
_NOT_STEPS = frozenset({"true", "false", "null", "and", "or", "in", "function"})
# The parts of $states an expression reads: {field: {field: ...}}, where None
# is the whole value at that point.
StatesPaths = Mapping[str, "StatesPaths | None"]


def _frozen(paths: dict[str, Any]) -> StatesPaths:
    return MappingProxyType({k: None if v is None else _frozen(v) for k, v in paths.items()})


@functools.lru_cache(maxsize=4096)
def _references(expression: str) -> tuple[frozenset[str], StatesPaths | None]:
    """(variables an expression may read, the parts of $states it reads or None for all).

    A superset is harmless (a name in a string literal binds a value nobody
    reads); what is left out is undefined, so a name is only left out when
    it does not occur in the text at all. Of $states, "$states.context.Execution.Id"
    needs only that field; a path that goes on in any other way (a predicate,
    a quoted name, a function) gets the whole value where its plain steps end,
    and any use of JSONata's parent operator (%) gets all of $states. Names
    end where JSONata's tokenizer ends them.
    """
    names: set[str] = set()
    paths: dict[str, Any] | None = None if "%" in expression else {}
    for match in _VARIABLE.finditer(expression):
        name, chain = match.group(1), match.group(2)
        names.add(name)
        if name != "states" or paths is None:
            continue
        steps = chain.split(".")[1:]
        for n, step in enumerate(steps):
            if step in _NOT_STEPS:
                steps = steps[:n]
                break
        if not steps:
            paths = None  # all of $states
            continue
        node = paths
        for n, step in enumerate(steps):
            if step in node and node[step] is None:
                break  # the whole value is bound already
            if n == len(steps) - 1:
                node[step] = None
            else:
                node = node.setdefault(step, {})
    return frozenset(names), (None if paths is None else _frozen(paths))


def _pick(value: Mapping[str, Any], paths: StatesPaths) -> dict[str, Any]:
    """The parts of value the paths name (a value that is not an object: whole)."""
    picked = {}
    for step, deeper in paths.items():
        if step in value:
            part = value[step]
            picked[step] = part if deeper is None or type(part) is not dict else _pick(part, deeper)
    return picked


def _bindings(expression: str, env: Any) -> dict[str, Any]:
    """The variables and $states the expression reads (only those: each is sent to
    node as JSON text, and $states holds the input twice, up to 256 KiB each)."""
    names, paths = _references(expression)
    store = env.variable_store
    bindings: dict[str, Any] = {}
    for scope in (store._outer_scope, store._inner_scope):  # inner shadows outer
        for name in names.intersection(scope):
            bindings[name] = scope[name]
    if "states" in names:
        states = env.states._states_data
        bindings["states"] = states if paths is None else _pick(states, paths)
    return bindings


FIELD = "_onceflow_field"  # where an expression sits: "Arguments/FunctionName", "Output"


def _described(component: Any, expression: str) -> str:
    """The expression as AWS's causes name it, with the field it sits in."""
    field = getattr(component, FIELD, None)
    where = f" specified for the field '{field}'" if field else ""
    return f"The JSONata expression '{expression}'{where}"


def _evaluation_failure(component: Any, env: Any, cause: str) -> FailureEventException:
    """States.QueryEvaluationError as Step Functions writes it: one EvaluationFailed
    event, written by the state, with the field's location when it is known."""
    error_name = StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError)
    details = EvaluationFailedEventDetails(cause=cause, error=error_name.error_name)
    if getattr(component, FIELD, None):
        details["location"] = getattr(component, FIELD)
    return FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=error_name,
            event_type=HistoryEventType.EvaluationFailed,
            event_details=EventDetails(evaluationFailedEventDetails=details),  # type: ignore[typeddict-item]
        )
    )


def _refuse(component: Any, env: Any, expression: str, what: str) -> NoReturn:
    """Fail the state as Step Functions does for a result it cannot use."""
    raise _evaluation_failure(component, env, f"{_described(component, expression)} {what}.")


# Results of expressions with neither a variable nor a function, by text.
_CONSTANTS: dict[str, Any] = {}
_CONSTANTS_KEPT = 4096


def _compiled_eval_body(self: Any, env: Any) -> None:
    """StringJSONata._eval_body with the reference library: compile once, bind the variables.

    moto writes $states and every variable into the expression as JSONata
    text and parses the whole of it on each evaluation (the input included,
    up to 256 KiB). Step Functions compiles each expression as written and
    binds the variables; so does this, which also makes a top-level
    "$a := 1; $a" fail here as it fails on AWS. Undefined and a value JSON
    cannot hold (a function, Infinity) fail the state, as on AWS.
    """
    expression = self.expression
    constant = "$" not in expression  # no variable, no function: "60 + 10", say
    if constant and expression in _CONSTANTS:
        env.stack.append(copy.deepcopy(_CONSTANTS[expression]))
        return
    try:
        result = jsonata_node.evaluate(expression, _bindings(expression, env))
    except jsonata_node.JsonataError as exc:  # States.QueryEvaluationError, below
        raise moto_jsonata.JSONataException(exc.code or "UNKNOWN", str(exc)) from exc
    except jsonata_node.UnsupportedResult:
        _refuse(self, env, expression, UNSUPPORTED_RESULT)
    if result is jsonata_node.UNDEFINED:
        _refuse(self, env, expression, "returned nothing (undefined)")
    if constant and len(_CONSTANTS) < _CONSTANTS_KEPT:
        _CONSTANTS[expression] = copy.deepcopy(result)
    env.stack.append(result)


def _jsonata_eval_body(self: Any, env: Any) -> None:
    try:
        _compiled_eval_body(self, env)
    except moto_jsonata.JSONataException as exc:
        expression = (
            self.expression if len(self.expression) <= 200 else self.expression[:200] + "..."
        )
        raise _threw(self, env, expression, str(exc.details or exc.error)) from exc


def _threw(component: Any, env: Any, expression: str, error: str) -> FailureEventException:
    """AWS: "The JSONata expression 'X' specified for the field 'F' threw an error during
    evaluation. T1006: Attempted to invoke a non-function" (LocalStack's
    test_math_operations_jsonata snapshot, test_math_random_seeded)."""
    cause = f"{_described(component, expression)} threw an error during evaluation. {error}"
    return _evaluation_failure(component, env, cause)


def _mark_fields(component: Any, path: str, seen: set[int] | None = None) -> None:
    """Tell each JSONata expression under a state's field where it sits, as AWS's
    causes and EvaluationFailed's location name it: Output, Output/result,
    Arguments/FunctionName, Assign/result (LocalStack's test_assign_reference_variables
    snapshot, test_undefined_reference)."""
    seen = set() if seen is None else seen
    if id(component) in seen or not hasattr(component, "__dict__"):
        return
    seen.add(id(component))
    if isinstance(component, string_expression.StringJSONata):
        setattr(component, FIELD, path)
        return
    identifier = getattr(component, "identifier", None)
    if isinstance(identifier, str):
        path = f"{path}/{identifier}"
    for value in vars(component).values():
        for item in value if isinstance(value, list | tuple) else (value,):
            if type(item).__module__.startswith("moto.stepfunctions.parser.asl.component"):
                _mark_fields(item, path, seen)


_FIELD_VISITORS = {
    "visitArguments_string_jsonata": "Arguments",
    "visitArguments_jsonata_template_value_object": "Arguments",
    "visitOutput_decl": "Output",
    "visitItems_jsonata": "Items",
    "visitItems_array": "Items",
    "visitAssign_decl": "Assign",
}


def _marking(original: Any, field: str) -> Any:
    def visit(self: Any, ctx: Any) -> Any:
        component = original(self, ctx)
        _mark_fields(component, field)
        return component

    return visit


def _recording_evaluation_failures(original: Any) -> Any:
    """CommonStateField._eval_body that writes the EvaluationFailed event of a state
    whose JSONata expression threw, for the states moto does not write it for.

    The API's HistoryEvent has evaluationFailedEventDetails "when a JSONata expression
    throws an error" while a state is processed (AWS Step Functions API reference,
    HistoryEvent). moto's Task, Parallel and Map states (ExecutionState) write it
    from the failure; a Pass or Choice state failed without one, so a caught error
    in a Parallel branch had no name in the history.
    """

    def _eval_body(self: Any, env: Any) -> None:
        try:
            original(self, env)
        except FailureEventException as exc:
            event = exc.failure_event
            if (
                not isinstance(self, ExecutionState)
                and event.event_type == HistoryEventType.EvaluationFailed
                and not _last_is_evaluation_failed(env)
            ):
                details = dict(exc.get_evaluation_failed_event_details() or {})
                details["state"] = self.name
                env.event_manager.add_event(
                    context=env.event_history_context,
                    event_type=HistoryEventType.EvaluationFailed,
                    event_details=EventDetails(  # type: ignore[typeddict-item]
                        evaluationFailedEventDetails=EvaluationFailedEventDetails(**details)
                    ),
                )
            raise

    return _eval_body


_DECORATION = "An error occurred while executing the state '"
_original_from_error = ExecutionState._from_error
_original_evaluation_details = FailureEventException.get_evaluation_failed_event_details
_original_execution_details = FailureEventException.get_execution_failed_event_details


def _from_error(self: Any, env: Any, ex: Exception) -> Any:
    """A Task, Map or Parallel state writes the failure it met as its event: for a
    JSONata evaluation, one EvaluationFailed naming the state (and the field), as
    AWS writes it. moto wrote the bare cause, after a decorated copy of its own."""
    failure_event = _original_from_error(self, env, ex)
    details: Any = failure_event.event_details or {}
    if failure_event.event_type == HistoryEventType.EvaluationFailed and details.get(
        "evaluationFailedEventDetails"
    ):
        decorated = FailureEventException(failure_event).get_evaluation_failed_event_details()
        details["evaluationFailedEventDetails"] = decorated
    return failure_event


def _evaluation_details(self: Any) -> Any:
    cause = str(self.failure_event.event_details["evaluationFailedEventDetails"].get("cause"))
    if cause.startswith(_DECORATION):  # decorated once already
        return dict(self.failure_event.event_details["evaluationFailedEventDetails"])
    return _original_evaluation_details(self)


def _execution_details(self: Any) -> Any:
    details: Any = _original_execution_details(self)
    cause = str((details or {}).get("cause", ""))
    doubled = cause.find(_DECORATION, len(_DECORATION))
    if cause.startswith(_DECORATION) and doubled > 0:
        details["cause"] = cause[doubled:]
    return details


def _last_is_evaluation_failed(env: Any) -> bool:
    """Whether the failure was written already (as _refuse writes it)."""
    events = env.event_manager._history_event_list
    return bool(events) and events[-1].get("type") == HistoryEventType.EvaluationFailed


def _install_evaluation_failures(installer: Installer) -> None:
    installer.replace(ExecutionState, "_from_error", _from_error)
    installer.replace(
        FailureEventException, "get_evaluation_failed_event_details", _evaluation_details
    )
    installer.replace(
        FailureEventException, "get_execution_failed_event_details", _execution_details
    )
    installer.replace(
        CommonStateField, "_eval_body", _recording_evaluation_failures(CommonStateField._eval_body)
    )


def _evaluation_failures_fit() -> list[str]:
    problems = []
    if "_history_event_list" not in inspect.getsource(EventManager.__init__):
        problems.append("moto's EventManager keeps no _history_event_list")
    if not hasattr(FailureEventException, "get_evaluation_failed_event_details"):
        problems.append("moto's FailureEventException has no get_evaluation_failed_event_details")
    return problems


def _branch_error_name(error_name: str | None) -> Any:
    """The error a failed Parallel branch re-raises, by its own kind.

    moto wraps every branch error in CustomErrorName, which refuses names that
    start with "States.": a branch failing with States.TaskFailed, States.Timeout
    or States.QueryEvaluationError crashed the Parallel instead of reaching its
    Retry/Catch, as it does on AWS.
    """
    if error_name is not None and error_name.startswith("States."):
        return StatesErrorName.from_name(error_name)
    return CustomErrorName(error_name=error_name)


# --------------------------------------------------------------------------
# Step Functions refuses an execution input over 256 KiB (UTF-8); moto takes
# any size. Without this, a local run would start executions that AWS never
# starts, and the ingress paths (EventBridge's DLQ, the source queue's
# redrive) would never be exercised.
# --------------------------------------------------------------------------

EXECUTION_INPUT_LIMIT = 262144
_original_start_execution = sfn_parser_models.StepFunctionsParserBackend.start_execution


def _limited_start(original: Any) -> Any:
    def start_execution(backend: Any, state_machine_arn: str, *args: Any, **kwargs: Any) -> Any:
        execution_input = kwargs.get("execution_input", args[1] if len(args) > 1 else None)
        # A lone surrogate counts as the six characters of its JSON escape.
        size = len((execution_input or "").encode("utf-8", "backslashreplace"))
        if size > EXECUTION_INPUT_LIMIT:
            raise sfn_exceptions.ValidationException(
                "1 validation error detected: Value at 'input' failed to satisfy constraint: "
                f"Member must have length less than or equal to {EXECUTION_INPUT_LIMIT} "
                f"(the input is {size} bytes)"
            )
        return original(backend, state_machine_arn, *args, **kwargs)

    return start_execution


# What moto declared before the JSONata patch removed its stubs.
_MOTO_STUBBED_FUNCTIONS = set(getattr(intrinsic_jsonata, "_DECLARATION_BY_VARIABLE_REFERENCE", {}))


def _install_jsonata(installer: Installer) -> None:
    installer.replace(moto_jsonata, "_eval_jsonata", eval_jsonata)
    for module in (moto_jsonata, eval_states, variable_store):
        installer.replace(
            module, "encode_jsonata_variable_declarations", encode_jsonata_variable_declarations
        )
    # The evaluator has Step Functions' own functions; moto's declarations, which
    # it prepends to the text of its fallback path, would shadow them ($hash and
    # $uuid as a "not supported" text, $parse as $eval, $randomSeeded, which AWS
    # does not have).
    installer.replace(intrinsic_jsonata, "_DECLARATION_BY_VARIABLE_REFERENCE", {})


def _jsonata_fits() -> list[str]:
    problems = []
    if "_eval_jsonata(jsonata_expression)" not in inspect.getsource(
        moto_jsonata.eval_jsonata_expression
    ):
        problems.append("moto's JSONata hook _eval_jsonata moved")
    for module in (moto_jsonata, eval_states, variable_store):
        if not hasattr(module, "encode_jsonata_variable_declarations"):
            problems.append(f"{module.__name__} no longer encodes variables")
    if not {"$hash", "$uuid", "$parse", "$partition", "$range"} <= _MOTO_STUBBED_FUNCTIONS:
        problems.append("moto's JSONata function declarations moved")
    return problems


def _install_expressions(installer: Installer) -> None:
    installer.replace(string_expression.StringJSONata, "_eval_body", _jsonata_eval_body)
    for visitor, field in _FIELD_VISITORS.items():
        original = getattr(asl_preprocessor.Preprocessor, visitor)
        installer.replace(asl_preprocessor.Preprocessor, visitor, _marking(original, field))


def _expressions_fit() -> list[str]:
    problems = [
        f"the ASL preprocessor has no {visitor}"
        for visitor in _FIELD_VISITORS
        if visitor not in vars(asl_preprocessor.Preprocessor)
    ]
    if "eval_jsonata_expression(rich_jsonata_expression)" not in inspect.getsource(
        _original_jsonata_eval_body
    ):
        problems.append("StringJSONata._eval_body no longer evaluates through the hook")
    body = inspect.getsource(_original_jsonata_eval_body)
    for needed in ("env.variable_store", "env.states", "validate_jsonata_expression_output"):
        if needed not in body:
            problems.append(f"StringJSONata._eval_body no longer uses {needed}")
    if not {"_outer_scope", "_inner_scope"} <= set(
        inspect.signature(variable_store.VariableStore.__init__).parameters
    ) | set(vars(variable_store.VariableStore).get("__annotations__", {})):
        problems.append("VariableStore no longer keeps _outer_scope and _inner_scope")
    if "_states_data" not in inspect.getsource(eval_states.States):
        problems.append("States no longer keeps _states_data")
    return problems


def _install_branch_errors(installer: Installer) -> None:
    installer.replace(branches_decl, "CustomErrorName", _branch_error_name)


def _branch_errors_fit() -> list[str]:
    if "CustomErrorName(error_name=exit_error_name)" not in inspect.getsource(branches_decl):
        return ["Parallel branches no longer name their error with CustomErrorName"]
    return []


def _install_input_limit(installer: Installer) -> None:
    backend = sfn_parser_models.StepFunctionsParserBackend
    installer.replace(backend, "start_execution", _limited_start(backend.start_execution))


def _input_limit_fits() -> list[str]:
    parameters = list(inspect.signature(_original_start_execution).parameters)
    if parameters[:4] != ["self", "state_machine_arn", "name", "execution_input"]:
        return ["StepFunctionsParserBackend.start_execution changed its parameters"]
    return []


# --------------------------------------------------------------------------
# Atomic single-item writes: moto's backends are not thread-safe, so two
# concurrent conditional PutItems on one key could both win. Every request into
# the DynamoDB, S3 and SQS backends is served one at a time.
# --------------------------------------------------------------------------

BACKEND_LOCK = threading.RLock()
_SERIALISED_SERVICE = re.compile(r"^(?:[^/]*\.)?(dynamodb|sqs|s3)[.-]")


def _serialised(request: Any, answer: Callable[[], Any]) -> Any:
    if _SERIALISED_SERVICE.match(urlsplit(request.url).netloc) is None:
        return answer()
    with BACKEND_LOCK:
        return answer()


def _install_atomic_writes(installer: Installer) -> None:
    installer.replace(hooks.Stages, "serialise", staticmethod(_serialised))  # a request stage


def _from_key_marker(original: Any) -> Any:
    """ListObjectVersions with a KeyMarker and no VersionIdMarker: every version of
    every key after the marker. moto skips the keys before the marker and then also
    the first version after it, whatever it is (its comment assumes the marker is
    the last key of a previous page). Delegated as moto's own (key, version) resume:
    from the last version at or before the marker."""

    def list_object_versions(
        self: Any,
        bucket_name: str,
        delimiter: str | None = None,
        key_marker: str | None = None,
        max_keys: int | None = 1000,
        prefix: str = "",
        version_id_marker: str | None = None,
    ) -> Any:
        if key_marker is not None and not version_id_marker:
            bucket = self.get_bucket(bucket_name)
            names = sorted({name for name, _ in bucket.keys.iterlists() if name <= key_marker})
            if names:
                # moto lists a key's versions newest first (a stable sort): the
                # same sort of that key's versions gives the one it lists last.
                last = names[-1]
                versions = sorted(
                    bucket.keys.getlist(last), key=lambda v: -unix_time_millis(v.last_modified)
                )
                key_marker, version_id_marker = last, versions[-1].version_id
            else:
                key_marker = None
        return original(
            self, bucket_name, delimiter, key_marker, max_keys, prefix, version_id_marker
        )

    return list_object_versions


def _install_version_marker(installer: Installer) -> None:
    backend = s3_models.S3Backend
    installer.replace(
        backend, "list_object_versions", _from_key_marker(backend.list_object_versions)
    )


def _version_marker_fits() -> list[str]:
    parameters = list(inspect.signature(s3_models.S3Backend.list_object_versions).parameters)
    expected = [
        "self", "bucket_name", "delimiter", "key_marker", "max_keys", "prefix",
        "version_id_marker",
    ]  # fmt: skip
    if parameters != expected:
        return [f"moto's S3Backend.list_object_versions takes {parameters}, not {expected}"]
    return []


def states_of(
    machine: Any, language: str = "JSONPath", path: str = ""
) -> Iterator[tuple[str, Any, str, str]]:
    """Every state of a definition, nested ones too (Parallel branches, Map processors):
    (name, state, the definition's query language, where it is), each before those inside."""
    states = machine.get("States") if isinstance(machine, dict) else None
    if not isinstance(states, dict):
        return
    for name, state in states.items():
        where = f"{path}/States/{name}"
        yield name, state, language, where
        if not isinstance(state, dict):
            continue
        for index, branch in enumerate(state.get("Branches") or []):
            yield from states_of(branch, language, f"{where}/Branches[{index}]")
        for field in ("ItemProcessor", "Iterator"):
            yield from states_of(state.get(field), language, f"{where}/{field}")


def _duplicate_state(definition: str) -> str | None:
    """Where a state name is used a second time in a definition, or None.

    "State names MUST be unique within the scope of the whole state machine"
    (Amazon States Language): across Parallel branches and Map processors too.
    """
    try:
        document = json.loads(definition)
    except ValueError:
        return None  # not JSON: moto's parser says so
    seen: set[str] = set()
    for name, _, _, where in states_of(document):
        if name in seen:
            return f"Duplicate State name: {name} at {where}"
        seen.add(name)
    return None


def _validated(original: Any) -> Any:
    def _validate_definition(definition: str) -> None:
        duplicate = _duplicate_state(definition)
        if duplicate is not None:
            raise InvalidDefinition(
                message=f"Invalid State Machine Definition: 'DUPLICATE_STATE_NAME: {duplicate}'"
            )
        original(definition=definition)

    return staticmethod(_validate_definition)


def _named_error_init(original: Any) -> Any:
    def __init__(
        self: Any, message: str, exception_type: str | None = None, status: int | None = None
    ) -> None:
        named = getattr(type(self), "code", None)
        if (
            exception_type is None
            and type(self).TYPE is None
            and isinstance(named, str)
            and type(self).__module__.startswith("moto.stepfunctions.")
        ):
            exception_type = named  # the error's name, as the parser's API declares it
        original(self, message, exception_type, status)

    return __init__


def _install_named_errors(installer: Installer) -> None:
    installer.replace(AWSError, "__init__", _named_error_init(AWSError.__init__))


def _named_errors_fit() -> list[str]:
    parameters = list(inspect.signature(AWSError.__init__).parameters)
    if parameters != ["self", "message", "exception_type", "status"]:
        return [f"moto's stepfunctions AWSError takes {parameters}"]
    if not issubclass(InvalidDefinition, AWSError) or InvalidDefinition.code != "InvalidDefinition":
        return ["moto's parser InvalidDefinition no longer declares its code"]
    return []


# --------------------------------------------------------------------------
# A string in a definition is a JSON string: \" is ", \\ is \. moto kept an
# Assign literal's escapes as written (so $v = '"' was false) and decoded the
# other literals as Python would ("\/" kept its backslash).
# --------------------------------------------------------------------------

_Preprocessor = asl_preprocessor.Preprocessor


def json_string_literal(parser_rule_context: Any) -> str | None:
    text = parser_rule_context.getText()
    if text == "null":
        return None
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return str(json.loads(text))
    return str(text)


def _assign_string_literal(self: Any, ctx: Any) -> Any:
    return AssignTemplateValueTerminalLit(value=json_string_literal(ctx.string_literal()))


def _assigned_variables(self: Any) -> dict[str, str]:
    """The assignedVariables of a state's exit event: each value as JSON text (moto
    wrapped a string in quotes without escaping it)."""
    return {
        name: json.dumps(self.get(name), ensure_ascii=False, separators=(",", ":"), default=str)
        for name in self._declaration_tracing
    }


def _own_scopes(original: Any) -> Any:
    """Each parse keeps the query language of its scopes for itself: moto kept them in
    one list on the class, so a definition refused mid-scope left its language there
    for every later parse (and two threads parsing at once shared it)."""

    def visit(self: Any, tree: Any) -> Any:
        if "_query_language_per_scope" not in vars(self):
            self._query_language_per_scope = []
        return original(self, tree)

    return visit


def _install_own_scopes(installer: Installer) -> None:
    installer.replace(_Preprocessor, "visit", _own_scopes(_Preprocessor.visit))


def _own_scopes_fit() -> list[str]:
    if not isinstance(vars(_Preprocessor).get("_query_language_per_scope"), list):
        return ["the ASL preprocessor no longer keeps its scopes' query language on the class"]
    return []


def _install_string_literals(installer: Installer) -> None:
    installer.replace(variable_store.VariableStore, "get_assigned_variables", _assigned_variables)
    installer.replace(asl_preprocessor, "from_string_literal", json_string_literal)
    installer.replace(
        _Preprocessor, "visitAssign_template_value_terminal_string_literal", _assign_string_literal
    )


def _string_literals_fit() -> list[str]:
    problems = []
    if not hasattr(asl_preprocessor, "from_string_literal"):
        problems.append("the ASL preprocessor no longer decodes with from_string_literal")
    if "_declaration_tracing" not in inspect.getsource(variable_store.VariableStore):
        problems.append("VariableStore no longer traces the variables a state assigns")
    if "visitAssign_template_value_terminal_string_literal" not in vars(_Preprocessor):
        problems.append("Preprocessor.visitAssign_template_value_terminal_string_literal is gone")
    return problems


# --------------------------------------------------------------------------
# A Map state whose input is not an array names the value, as JSON text (moto
# printed its Python type: "<class 'int'>").
# --------------------------------------------------------------------------

_NOT_AN_ARRAY = "Map state input must be an array but was: "
_original_map_execution = state_map.StateMap._eval_execution


def _map_execution(self: Any, env: Any) -> None:
    state_input = env.stack[-1] if env.stack else env.states.get_input()
    try:
        _original_map_execution(self, env)
    except FailureEventException as exc:
        every: Any = exc.failure_event.event_details or {}
        details = every.get("evaluationFailedEventDetails")
        if details and str(details.get("cause", "")).startswith(_NOT_AN_ARRAY + "<class "):
            value = state_input
            if self.items_path is not None:
                env.stack.append(state_input)
                self.items_path.eval(env=env)
                value = env.stack.pop()
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
            details["cause"] = _NOT_AN_ARRAY + text
        raise


def _install_map_input(installer: Installer) -> None:
    installer.replace(state_map.StateMap, "_eval_execution", _map_execution)


def _map_input_fits() -> list[str]:
    if _NOT_AN_ARRAY + "{type(input_items)}" not in inspect.getsource(state_map.StateMap):
        return ["StateMap._eval_execution no longer names a non-array input by its type"]
    return []


# --------------------------------------------------------------------------
# A Parallel branch that fails aborts the state it failed in: AWS writes
# TaskStateAborted after that state's TaskFailed (moto wrote nothing).
# --------------------------------------------------------------------------


_ABORTED = {
    f"{kind}StateEntered": HistoryEventType(f"{kind}StateAborted")
    for kind in ("Task", "Map", "Parallel", "Wait")
}


def _branch_routine(self: Any) -> None:
    env = self.env
    try:
        self._program.eval(env)
        if isinstance(env.program_state(), ProgramError):
            state_data = env.states.context_object.context_object_data.get("State") or {}
            state = self._program.states.states.get(state_data.get("Name"))
            entered = str(getattr(getattr(state, "state_entered_event_type", None), "value", ""))
            # Task, Map, Parallel and Wait states can be aborted; a Pass or Fail state
            # that fails its branch ends at once (the API has no PassStateAborted).
            aborted = _ABORTED.get(entered)
            if aborted is not None:
                env.event_manager.add_event(context=env.event_history_context, event_type=aborted)
    finally:  # the Parallel waits for every branch to report
        self._branch_worker_comm.on_terminated(env=env)


def _install_branch_abort(installer: Installer) -> None:
    installer.replace(branch_worker.BranchWorker, "_thread_routine", _branch_routine)


def _branch_abort_fits() -> list[str]:
    source = inspect.getsource(branch_worker.BranchWorker._thread_routine)
    if "self._program.eval(self.env)" not in source or "on_terminated" not in source:
        return ["BranchWorker._thread_routine no longer evaluates its program and reports"]
    return []


def _install_unique_state_names(installer: Installer) -> None:
    backend = sfn_parser_models.StepFunctionsParserBackend
    installer.replace(backend, "_validate_definition", _validated(backend._validate_definition))


def _unique_state_names_fit() -> list[str]:
    backend = sfn_parser_models.StepFunctionsParserBackend
    if not isinstance(vars(backend).get("_validate_definition"), staticmethod):
        return ["moto's StepFunctionsParserBackend._validate_definition is no staticmethod"]
    if "_validate_definition(definition=definition)" not in inspect.getsource(
        backend.create_state_machine
    ):
        return ["moto's create_state_machine no longer validates through _validate_definition"]
    return []


_TESTS = "tests/unit/test_patches.py::"
PATCHES = (
    Patch(
        name="JSONata by jsonata 2.0.6",
        kind="fidelity",
        why="Step Functions evaluates JSONata with the JavaScript jsonata library, version "
        "2.0.6, plus its own $partition, $range, $hash, $random (with a seed), $uuid and "
        "$parse, and without $eval (Step Functions developer guide, 'Transforming data "
        "with JSONata in Step Functions'). moto expects a JVM evaluator and declares "
        "stand-ins for the added functions.",
        test="tests/unit/test_jsonata_reference.py",
        install=_install_jsonata,
        fits=_jsonata_fits,
    ),
    Patch(
        name="JSONata expressions as Step Functions evaluates them",
        kind="fidelity",
        why="Each expression is compiled as written with its variables bound (a top-level "
        "'$a := 1; $a' fails); an expression that fails, returns undefined or a value JSON "
        "cannot hold fails the state with States.QueryEvaluationError, which a Catch "
        "handles ('Handling errors in Step Functions workflows'). moto let the raw "
        "exception escape as an uncatchable States.Runtime.",
        test=_TESTS + "test_a_failed_expression_is_caught_as_query_evaluation_error",
        install=_install_expressions,
        fits=_expressions_fit,
    ),
    Patch(
        name="evaluation failures in the history",
        kind="fidelity",
        why="A state whose JSONata expression throws leaves an EvaluationFailed event "
        "naming the error and the state (AWS Step Functions API reference, HistoryEvent: "
        "evaluationFailedEventDetails; for Pass and Choice states in particular not "
        "verified). moto wrote it for Task, Parallel and Map states only, so a caught "
        "error inside a Parallel branch had no name.",
        test=_TESTS + "test_a_pass_state_whose_expression_fails_records_the_evaluation_failure",
        install=_install_evaluation_failures,
        fits=_evaluation_failures_fit,
    ),
    Patch(
        name="Parallel branch errors",
        kind="fidelity",
        why="A Parallel state fails with the error its failed branch failed with, States.* "
        "errors included, and its Retry and Catch see that name ('Parallel workflow "
        "state'). moto refused names starting with 'States.' and crashed the Parallel.",
        test=_TESTS + "test_a_parallel_branch_failing_with_a_states_error_reaches_the_catch",
        install=_install_branch_errors,
        fits=_branch_errors_fit,
    ),
    Patch(
        name="execution input limit",
        kind="fidelity",
        why="StartExecution refuses an input over 256 KiB in UTF-8 with a "
        "ValidationException (Step Functions quotas, 'Maximum input or output size for a "
        "task, state, or execution'); moto took any size.",
        test=_TESTS + "test_an_input_over_256_kib_is_refused",
        install=_install_input_limit,
        fits=_input_limit_fits,
    ),
    Patch(
        name="atomic single-item writes",
        kind="fidelity",
        why="A conditional write to one DynamoDB item is atomic: of two concurrent "
        "conditional PutItems on a key, exactly one succeeds ('Condition expressions', "
        "DynamoDB developer guide); SQS and S3 calls are likewise each one step. moto's "
        "backends are not thread-safe: both could win.",
        test=_TESTS + "test_concurrent_conditional_puts_have_exactly_one_winner",
        install=_install_atomic_writes,
        fits=stubber_fits,
    ),
    Patch(
        name="ListObjectVersions from a KeyMarker",
        kind="fidelity",
        why="With a KeyMarker and no VersionIdMarker, ListObjectVersions lists the versions "
        "of the keys after the marker (Amazon S3 API reference, ListObjectVersions: "
        "'key-marker: Specifies the key to start with'; whether the marker's own key is "
        "included is not verified, and onceflow does not depend on it). moto also dropped "
        "the first version after the marker.",
        test=_TESTS + "test_list_object_versions_from_a_key_marker_drops_no_version",
        install=_install_version_marker,
        fits=_version_marker_fits,
    ),
    Patch(
        name="state names unique in the whole definition",
        kind="fidelity",
        why="CreateStateMachine refuses a definition that uses a state name twice, in "
        "Parallel branches and Map processors too, with InvalidDefinition "
        "'DUPLICATE_STATE_NAME' (Amazon States Language: 'state names MUST be unique "
        "within the scope of the whole state machine'; the error as CloudFormation "
        "reports it, cfn-lint issue 3616). moto took such a definition.",
        test=_TESTS + "test_a_state_name_used_twice_is_an_invalid_definition",
        install=_install_unique_state_names,
        fits=_unique_state_names_fit,
    ),
    Patch(
        name="each definition parsed on its own",
        kind="fidelity",
        why="CreateStateMachine judges each definition alone (API reference: "
        "InvalidDefinition for the invalid one). moto kept the query language of the scope "
        "being parsed in a list shared by every parse: after a definition refused mid-scope, "
        "later JSONPath definitions were refused too.",
        test="tests/parity/test_definitions.py::"
        "test_a_refused_definition_leaves_the_next_one_as_it_is",
        install=_install_own_scopes,
        fits=_own_scopes_fit,
    ),
    Patch(
        name="string literals decoded as JSON",
        kind="fidelity",
        why='A string in a definition is JSON text: an Assign literal holding \\" or \\\\ '
        "holds \" or \\ (recorded: LocalStack's test_assign_base snapshot, "
        "BASE_CONSTANT_LITERALS, literals stored as the JSON holds them). moto kept an Assign "
        "literal's escapes, so $v = '\"' was false.",
        test="tests/parity/test_variables.py::"
        "test_an_assigned_string_literal_holds_its_characters_not_their_json_escapes",
        install=_install_string_literals,
        fits=_string_literals_fit,
    ),
    Patch(
        name="a Map's non-array input named as JSON",
        kind="fidelity",
        why="A Map state whose input is not an array fails with States.QueryEvaluationError, "
        "'Map state input must be an array but was: 1' (the value as JSON; recorded: "
        "LocalStack's test_base_scenarios snapshot, test_map_state_items_input_types). moto "
        "printed the Python type.",
        test="tests/parity/test_errors.py::test_a_map_whose_input_is_not_an_array_names_the_value",
        install=_install_map_input,
        fits=_map_input_fits,
    ),
    Patch(
        name="a failed Parallel branch aborts its state",
        kind="fidelity",
        why="When a Parallel branch fails, the state it failed in is aborted: TaskFailed is "
        "followed by TaskStateAborted (recorded: LocalStack's test_error_output snapshot, "
        "test_parallel_catch_error). moto wrote no such event.",
        test="tests/parity/test_errors.py::test_a_failed_parallel_branch_aborts_its_failed_state",
        install=_install_branch_abort,
        fits=_branch_abort_fits,
    ),
    Patch(
        name="Step Functions error names",
        kind="fidelity",
        why="Step Functions answers a refused request with its error's name, such as "
        "InvalidDefinition or InvalidExecutionInput (AWS Step Functions API reference, "
        "CreateStateMachine and StartExecution, Errors). moto's parser raised them with an "
        "empty name, so a caller could not tell them apart.",
        test=_TESTS + "test_a_state_name_used_twice_is_an_invalid_definition",
        install=_install_named_errors,
        fits=_named_errors_fit,
    ),
)
