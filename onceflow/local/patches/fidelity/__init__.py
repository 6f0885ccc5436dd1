"""Where moto does otherwise than AWS, these make it do what AWS does (docs/local-engine.md,
The engine's patches: fidelity); the Distributed Map's, the integrations' and the
executions' have modules of their own."""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from moto.core.exceptions import AWSError
from moto.core.utils import unix_time_millis
from moto.s3 import models as s3_models
from moto.stepfunctions import exceptions as sfn_exceptions
from moto.stepfunctions.parser import models as sfn_parser_models
from moto.stepfunctions.parser.api import HistoryEventType, InvalidDefinition
from moto.stepfunctions.parser.asl.component.common.assign.assign_template_value_terminal import (
    AssignTemplateValueTerminalLit,
)
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import (
    CustomErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import (
    ErrorEqualsDecl,
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
from moto.stepfunctions.parser.asl.component.common.outputdecl import Output
from moto.stepfunctions.parser.asl.component.common.path.output_path import OutputPath
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.intrinsic import jsonata as intrinsic_jsonata
from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_map import state_map
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import (
    iteration_worker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import (
    branch_worker,
    branches_decl,
    state_parallel,
)
from moto.stepfunctions.parser.asl.component.state.fail import state_fail
from moto.stepfunctions.parser.asl.component.state.state import CommonStateField
from moto.stepfunctions.parser.asl.eval import states as eval_states
from moto.stepfunctions.parser.asl.eval import variable_store
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramError
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata
from moto.stepfunctions.parser.asl.parse import preprocessor as asl_preprocessor
from moto.stepfunctions.parser.asl.utils.json_path import NoSuchJsonPathError

from onceflow.local import INPUT_DEPTH_LIMIT, json_depth, jsonata_node
from onceflow.local.patches import hooks
from onceflow.local.patches.registry import Installer, Patch, gone, lacks, takes

_Preprocessor = asl_preprocessor.Preprocessor
_Backend = sfn_parser_models.StepFunctionsParserBackend
UNSUPPORTED_RESULT = "returned an unsupported result type"
_Wrap = tuple[Any, str, Callable[..., Any]]  # owner, name, wrapper(original, *args, **kwargs)


def _wrap(installer: Installer, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
    """owner.name = a call of wrapper(original, ...), original what owner.name is now
    (moto's, or an earlier patch's: a speed-up's); a static method stays one."""
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return wrapper(original, *args, **kwargs)

    static = isinstance(vars(owner).get(name), staticmethod)
    installer.replace(owner, name, staticmethod(wrapped) if static else wrapped)


def _wrapping(*wraps: _Wrap) -> Callable[[Installer], None]:
    """An install of each (owner, name, wrapper) as _wrap puts it in place."""

    def install(installer: Installer) -> None:
        for owner, name, wrapper in wraps:
            _wrap(installer, owner, name, wrapper)

    return install


# JSONata: moto expects a JVM evaluator; jsonata 2.0.6 in node (jsonata_node.py) evaluates.


def eval_jsonata(expression: str, bindings: dict[str, Any] | None = None) -> Any:
    """moto's evaluator hook. With bindings the expression is a definition's (compiled
    once, cached); without, moto's composed text embedding the data (never cached).
    Undefined is None, as moto's hook returns it. moto's one caller left is a variable
    sample, whose value is JSON: never a result JSON cannot hold (UnsupportedResult)."""
    try:
        result = jsonata_node.evaluate(expression, bindings, cache=bindings is not None)
    except jsonata_node.JsonataError as exc:  # moto makes it States.QueryEvaluationError
        raise moto_jsonata.JSONataException(exc.code or "UNKNOWN", str(exc)) from exc
    return None if result is jsonata_node.UNDEFINED else result


moto_encode_jsonata_variable_declarations = moto_jsonata.encode_jsonata_variable_declarations


def encode_jsonata_variable_declarations(bindings: dict[str, Any]) -> str:
    """moto writes string values as ``"{value}"`` unescaped; JSON-encode them."""
    return "".join(
        f"{reference}:={json.dumps(value, separators=(',', ':'), default=str)};"
        for reference, value in bindings.items()
    )


# Where JSONata's tokenizer ends a name: whitespace or a one-character operator
# (jsonata.js 2.0.6's, checked by tests/unit/test_jsonata_node.py): "temp°C" is one name.
_NAME_ENDS = frozenset(" \t\n\r\v!#%&()*+,-./:;<=>?@[]^{|}~")
_NAME_CHAR = "[^" + re.escape("".join(sorted(_NAME_ENDS))) + "]"
# A field step: a name that does not start as a number, a string or a variable would.
_STEP = "[^" + re.escape("".join(sorted(_NAME_ENDS)) + "0123456789\"'`$") + "]" + _NAME_CHAR + "*"
_VARIABLE = re.compile(rf"\$({_NAME_CHAR}*)((?:\.{_STEP})*)")
_NOT_STEPS = frozenset({"true", "false", "null", "and", "or", "in", "function"})
# The parts of $states an expression reads: {field: {field: ...}}, None the whole value.
StatesPaths = Mapping[str, "StatesPaths | None"]


def _references(expression: str) -> tuple[frozenset[str], StatesPaths | None]:
    """(variables an expression may read: a superset, the parts of $states it reads: the
    whole value where its plain steps end, all of it with JSONata's parent operator %)."""
    names: set[str] = set()
    paths: dict[str, Any] | None = None if "%" in expression else {}
    for match in _VARIABLE.finditer(expression):
        names.add(name := match.group(1))
        if name != "states" or paths is None:
            continue
        steps = [*itertools.takewhile(lambda s: s not in _NOT_STEPS, match.group(2).split(".")[1:])]
        if not steps:
            paths = None  # all of $states
            continue
        node = paths
        for step in steps[:-1]:
            if node.get(step, {}) is None:
                break  # the whole value is bound already
            node = node.setdefault(step, {})
        else:
            node[steps[-1]] = None
    return frozenset(names), paths


def _pick(value: Mapping[str, Any], paths: StatesPaths) -> dict[str, Any]:
    """The parts of value the paths name (a value that is not an object: whole)."""
    return {
        step: _pick(value[step], deeper) if deeper and type(value[step]) is dict else value[step]
        for step, deeper in paths.items()
        if step in value
    }


def _bindings(expression: str, env: Any) -> dict[str, Any]:
    """The variables and $states the expression reads: a speed-up (docs/local-engine.md,
    "What each speed-up gains"; each goes to node as JSON text, $states the input twice)."""
    names, paths = _references(expression)
    store = env.variable_store
    scopes = (store._outer_scope, store._inner_scope)  # inner shadows outer
    bindings = {name: scope[name] for scope in scopes for name in names.intersection(scope)}
    if "states" in names:
        states = env.states._states_data
        bindings["states"] = states if paths is None else _pick(states, paths)
    return bindings


FIELD = "_onceflow_field"  # where an expression sits: "Arguments/FunctionName", "Output"


def failure(
    env: Any, error: StatesErrorNameType, event: HistoryEventType, cause: str, location: Any = None
) -> FailureEvent:
    """A failure as moto builds one: the event's details ("taskFailedEventDetails" for a
    TaskFailed) hold the error, the cause and the location, if any."""
    name, key = StatesErrorName(typ=error), f"{event[0].lower()}{event[1:]}EventDetails"
    details: Any = {key: {"error": name.error_name, "cause": cause}}
    if location:
        details[key]["location"] = location
    return FailureEvent(env, name, event, details)


def _evaluation_failure(
    component: Any, env: Any, expression: str, what: str
) -> FailureEventException:
    """States.QueryEvaluationError as AWS writes it: one EvaluationFailed event whose
    cause names the expression and its field, with the field as location (LocalStack's
    test_assign_reference_variables and test_math_operations_jsonata snapshots)."""
    field = getattr(component, FIELD, None)
    where = f" specified for the field '{field}'" if field else ""
    cause = f"The JSONata expression '{expression}'{where} {what}"
    error = StatesErrorNameType.StatesQueryEvaluationError
    return FailureEventException(
        failure(env, error, HistoryEventType.EvaluationFailed, cause, field)
    )


def _jsonata_eval_body(self: Any, env: Any) -> None:
    """StringJSONata._eval_body as Step Functions evaluates: the expression compiled as
    written, its variables bound (moto pastes them into the text and parses it all
    each time, so "$a := 1; $a" passed). An error (caused by moto's JSONataException),
    undefined, or a value JSON cannot hold fails the state."""
    expression = self.expression
    try:
        result = jsonata_node.evaluate(expression, _bindings(expression, env))
    except jsonata_node.JsonataError as exc:
        error = moto_jsonata.JSONataException(exc.code or "UNKNOWN", str(exc))
        text = expression if len(expression) <= 200 else expression[:200] + "..."
        threw = f"threw an error during evaluation. {error.details or error.error}"
        raise _evaluation_failure(self, env, text, threw) from error
    except jsonata_node.UnsupportedResult as exc:
        raise _evaluation_failure(self, env, expression, UNSUPPORTED_RESULT + ".") from exc
    if result is jsonata_node.UNDEFINED:
        raise _evaluation_failure(self, env, expression, "returned nothing (undefined).")
    env.stack.append(result)


def _mark_fields(component: Any, path: str, seen: set[int]) -> None:
    """Tell each expression under a state's field where it sits, as AWS's causes and
    location name it: Output/result, Arguments/FunctionName, Assign/result."""
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


def _marking(field: str, original: Any, self: Any, ctx: Any) -> Any:
    component = original(self, ctx)
    _mark_fields(component, field, set())
    return component


_original_jsonata_eval_body = string_expression.StringJSONata._eval_body
# What moto declared before the patch removed its stubs.
_MOTO_STUBBED_FUNCTIONS = set(getattr(intrinsic_jsonata, "_DECLARATION_BY_VARIABLE_REFERENCE", {}))


def _install_jsonata(installer: Installer) -> None:
    installer.replace(moto_jsonata, "_eval_jsonata", eval_jsonata)
    for module in (moto_jsonata, eval_states, variable_store):
        installer.replace(
            module, "encode_jsonata_variable_declarations", encode_jsonata_variable_declarations
        )
    # moto's declarations of Step Functions' functions would shadow the evaluator's
    # ($hash and $uuid as "not supported", $parse as $eval, $randomSeeded).
    installer.replace(intrinsic_jsonata, "_DECLARATION_BY_VARIABLE_REFERENCE", {})
    installer.replace(string_expression.StringJSONata, "_eval_body", _jsonata_eval_body)
    for visitor, field in _FIELD_VISITORS.items():
        _wrap(installer, _Preprocessor, visitor, functools.partial(_marking, field))


def _jsonata_fits() -> list[str]:
    modules = (moto_jsonata, eval_states, variable_store)
    stubbed = {"$hash", "$uuid", "$parse", "$partition", "$range"} <= _MOTO_STUBBED_FUNCTIONS
    body = ("eval_jsonata_expression(rich", "env.variable_store", "env.states", "validate_")
    return [
        *(moved for m in modules for moved in gone(m, "encode_jsonata_variable_declarations")),
        *gone(_Preprocessor, *_FIELD_VISITORS),
        *lacks(moto_jsonata.eval_jsonata_expression, "_eval_jsonata(jsonata_expression)"),
        *lacks(_original_jsonata_eval_body, *body),
        *lacks(variable_store.VariableStore, "self._outer_scope", "self._inner_scope"),
        *lacks(eval_states.States, "_states_data"),
        *([] if stubbed else ["moto's JSONata function declarations moved"]),
    ]


# Evaluation failures in the history (moto also decorated the cause twice).
_DECORATION = "An error occurred while executing the state '"


def _recording_evaluation_failures(original: Any, self: Any, env: Any) -> None:
    """A Pass or Choice state whose expression threw writes EvaluationFailed too (moto's
    ExecutionState writes it from the failure; the others wrote none)."""
    try:
        original(self, env)
    except FailureEventException as exc:
        events = env.event_manager._history_event_list
        if (
            not isinstance(self, ExecutionState)
            and exc.failure_event.event_type == HistoryEventType.EvaluationFailed
            and not (events and events[-1].get("type") == HistoryEventType.EvaluationFailed)
        ):
            details: Any = dict(exc.get_evaluation_failed_event_details() or {})
            details["state"] = self.name
            env.event_manager.add_event(
                context=env.event_history_context,
                event_type=HistoryEventType.EvaluationFailed,
                event_details={"evaluationFailedEventDetails": details},
            )
        raise


def _from_error(original: Any, self: Any, env: Any, ex: Exception) -> Any:
    """A Task, Map or Parallel state writes one EvaluationFailed naming the state and
    field (moto wrote the bare cause after a decorated copy)."""
    failure_event = original(self, env, ex)
    details: Any = failure_event.event_details or {}
    if failure_event.event_type == HistoryEventType.EvaluationFailed and details.get(
        "evaluationFailedEventDetails"
    ):
        decorated = FailureEventException(failure_event).get_evaluation_failed_event_details()
        details["evaluationFailedEventDetails"] = decorated
    return failure_event


def _evaluation_details(original: Any, self: Any) -> Any:
    details = self.failure_event.event_details["evaluationFailedEventDetails"]
    if str(details.get("cause")).startswith(_DECORATION):  # decorated once already
        return dict(details)
    return original(self)


def _execution_details(original: Any, self: Any) -> Any:
    details: Any = original(self)
    cause = str((details or {}).get("cause", ""))
    doubled = cause.find(_DECORATION, len(_DECORATION))
    if cause.startswith(_DECORATION) and doubled > 0:
        details["cause"] = cause[doubled:]
    return details


_ENTERED = "_onceflow_entered_event_id"  # on an EventHistoryContext: its state's entry


def _linked_as_recorded(
    original: Any, self: Any, context: Any, event_type: Any, *args: Any, **kwargs: Any
) -> int:
    """EvaluationFailed follows what its state's entry follows (a Wait's: its entry);
    MapStateExited follows MapRunStarted (the patch's why has the recordings)."""
    event_id: int = original(self, context, event_type, *args, **kwargs)
    if event_type.endswith("StateEntered"):  # a str Enum: str() would give its name
        setattr(context, _ENTERED, event_id)
    elif event_type in (HistoryEventType.EvaluationFailed, HistoryEventType.MapStateSucceeded):
        with self._mutex:
            events = self._history_event_list
            added = next(e for e in reversed(events) if e["id"] == event_id)
            linked = next(
                (e for e in reversed(events) if e["id"] == added["previousEventId"]), None
            )
            kind = linked["type"] if linked else ""
            if kind == HistoryEventType.MapRunSucceeded:  # MapStateExited follows its start
                context.source_event_id = linked["previousEventId"]  # type: ignore[index]
            elif kind.endswith("StateEntered") and kind != "WaitStateEntered":
                added["previousEventId"] = linked["previousEventId"]  # type: ignore[index]
    return event_id


def _entered_at(original: Any, self: Any, env: Any, *args: Any, **kwargs: Any) -> None:
    """A failure's cause names the event its state was entered at (moto: the last one)."""
    original(self, env, *args, **kwargs)
    entered = getattr(env.event_history_context, _ENTERED, None)
    if entered is None:  # a frame of its own (a Map Run's): follow the links back
        events, entered = env.event_manager._history_event_list, self.source_event_id
        while 0 < entered <= len(events) and events[entered - 1]["id"] == entered:
            if events[entered - 1]["type"].endswith("StateEntered"):
                break
            entered = events[entered - 1]["previousEventId"]
    self.source_event_id = entered if entered else self.source_event_id


def _branch_error_name(error_name: str | None) -> Any:
    if error_name is not None and error_name.startswith("States."):
        return StatesErrorName.from_name(error_name)
    return CustomErrorName(error_name=error_name)


# Task, Map, Parallel and Wait states can be aborted (the API has no PassStateAborted).
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
            if (aborted := _ABORTED.get(entered)) is not None:  # no event follows it
                context, manager = env.event_history_context, env.event_manager
                manager.add_event(context, aborted, update_source_event_id=False)
    finally:  # the Parallel waits for every branch to report
        self._branch_worker_comm.on_terminated(env=env)


def _install_parallel(installer: Installer) -> None:
    installer.replace(branches_decl, "CustomErrorName", _branch_error_name)
    installer.replace(iteration_worker, "CustomErrorName", _branch_error_name)
    installer.replace(branch_worker.BranchWorker, "_thread_routine", _branch_routine)


EXECUTION_INPUT_LIMIT = 262144
_original_start_execution = _Backend.start_execution


def _limited_start(
    original: Any, backend: Any, state_machine_arn: str, *args: Any, **kwargs: Any
) -> Any:
    execution_input = kwargs.get("execution_input", args[1] if len(args) > 1 else None)
    # A lone surrogate counts as the six characters of its JSON escape.
    size = len((execution_input or "").encode("utf-8", "backslashreplace"))
    if size > EXECUTION_INPUT_LIMIT:
        raise sfn_exceptions.ValidationException(
            "1 validation error detected: Value at 'input' failed to satisfy constraint: "
            f"Member must have length less than or equal to {EXECUTION_INPUT_LIMIT} "
            f"(the input is {size} bytes)"
        )
    # Before moto parses it (with recursion): the engine's own depth limit, named.
    depth = json_depth(execution_input or "")
    if depth > INPUT_DEPTH_LIMIT:
        raise sfn_exceptions.InvalidExecutionInput(
            f"the input nests {depth} levels deep; the local engine runs input nested at most "
            f"{INPUT_DEPTH_LIMIT} levels (a limit of the engine's Python; Step Functions' own "
            "is not documented: docs/ingress.md, 'Deep nesting')"
        )
    return original(backend, state_machine_arn, *args, **kwargs)


BACKEND_LOCK = threading.RLock()
_SERIALISED_SERVICE = re.compile(r"^(?:[^/]*\.)?(dynamodb|sqs|s3)[.-]")


def _serialised(request: Any, answer: Callable[[], Any]) -> Any:
    if _SERIALISED_SERVICE.match(request.url.split("://", 1)[-1]) is None:
        return answer()
    with BACKEND_LOCK:
        return answer()


def _from_key_marker(original: Any, self: Any, bucket_name: str, **kwargs: Any) -> Any:
    """Resumes as moto's own (key, version) marker does: from the last version at or
    before the marker (moto calls its backend with keywords)."""
    marker = kwargs.get("key_marker")
    if marker is not None and not kwargs.get("version_id_marker"):
        bucket = self.get_bucket(bucket_name)
        names = sorted({name for name, _ in bucket.keys.iterlists() if name <= marker})
        kwargs["key_marker"] = names[-1] if names else None
        if names:  # moto lists a key's versions newest first, in a stable sort
            versions = bucket.keys.getlist(names[-1])
            last = sorted(versions, key=lambda v: -unix_time_millis(v.last_modified))[-1]
            kwargs["version_id_marker"] = last.version_id
    return original(self, bucket_name, **kwargs)


def states_of(
    machine: Any, language: str = "JSONPath", path: str = ""
) -> Iterator[tuple[str, Any, str, str]]:
    """Every state of a definition, nested ones too, each before those inside:
    (name, state, the definition's query language, where it is)."""
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


def _validated(original: Any, definition: str) -> None:
    try:
        document = json.loads(definition)
    except ValueError:
        document = None  # not JSON: moto's parser says so
    seen: set[str] = set()
    for name, _, _, where in states_of(document):
        if name in seen:
            raise InvalidDefinition(
                message="Invalid State Machine Definition: "
                f"'DUPLICATE_STATE_NAME: Duplicate State name: {name} at {where}'"
            )
        seen.add(name)
    original(definition=definition)


def _named_error_init(
    original: Any,
    self: Any,
    message: str,
    exception_type: str | None = None,
    status: int | None = None,
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


def _definitions_fit() -> list[str]:
    moved = takes(AWSError.__init__, "self", "message", "exception_type", "status")
    moved += lacks(_Backend.create_state_machine, "_validate_definition(definition=definition)")
    moved += lacks(_Preprocessor, "_query_language_per_scope: list[QueryLanguage] = []")
    if not isinstance(vars(_Backend).get("_validate_definition"), staticmethod):
        moved.append("StepFunctionsParserBackend._validate_definition is no staticmethod")
    if not issubclass(InvalidDefinition, AWSError) or InvalidDefinition.code != "InvalidDefinition":
        moved.append("moto's parser InvalidDefinition no longer declares its code")
    return moved


def _own_scopes(original: Any, self: Any, tree: Any) -> Any:
    if "_query_language_per_scope" not in vars(self):  # moto's is one list on the class
        self._query_language_per_scope = []
    return original(self, tree)


def json_string_literal(parser_rule_context: Any) -> str | None:
    text = parser_rule_context.getText()
    if text == "null":
        return None
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return str(json.loads(text))
    return str(text)


def _assigned_variables(self: Any) -> dict[str, str]:
    """An exit event's assignedVariables, each value as JSON text (moto quoted a
    string without escaping it)."""
    return {
        name: json.dumps(self.get(name), ensure_ascii=False, separators=(",", ":"), default=str)
        for name in self._declaration_tracing
    }


def _install_string_literals(installer: Installer) -> None:
    installer.replace(variable_store.VariableStore, "get_assigned_variables", _assigned_variables)
    installer.replace(asl_preprocessor, "from_string_literal", json_string_literal)
    installer.replace(
        _Preprocessor,
        "visitAssign_template_value_terminal_string_literal",
        lambda _, ctx: AssignTemplateValueTerminalLit(
            value=json_string_literal(ctx.string_literal())
        ),
    )


_NOT_AN_ARRAY = "Map state input must be an array but was: "


def _map_execution(original: Any, self: Any, env: Any) -> None:
    state_input = env.stack[-1] if env.stack else env.states.get_input()
    try:
        original(self, env)
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


_RUNTIME = StatesErrorName(typ=StatesErrorNameType.StatesRuntime)
_original_error_equals = ErrorEqualsDecl._eval_body


def _runtime_matches_nothing(original: Any, self: Any, env: Any) -> None:
    if env.stack and env.stack[-1] == _RUNTIME:  # ErrorName equality: by name
        env.stack[-1] = False
        return
    original(self, env)


class _StateFailed(BaseException):  # past the attempt's `except Exception` (retry, catch)
    def __init__(self, failure: Exception) -> None:
        self.failure = failure


def _naming_its_field(original: Any, self: Any, env: Any) -> None:
    try:
        original(self, env)
    except NoSuchJsonPathError as missed:
        setattr(missed, FIELD, env.next_field_name)
        raise


def _evaluate_with_timeout(original: Any, self: Any, env: Any) -> None:
    try:
        original(self, env)
    except NoSuchJsonPathError as missed:  # moto's State words it as for a Pass state's
        env.next_field_name = getattr(missed, FIELD, None)  # (the attempt ran in a frame)
        raise _StateFailed(missed) from missed
    except FailureEventException as exc:
        if exc.failure_event.error_name == _RUNTIME:
            raise _StateFailed(exc) from exc
        raise


def _ending_at_the_state(original: Any, self: Any, env: Any) -> None:
    try:
        original(self, env)
    except _StateFailed as failed:
        raise failed.failure from None


_ATTEMPTING = (ExecutionState, state_map.StateMap, state_parallel.StateParallel)


def _install_runtime(installer: Installer) -> None:
    _wrap(installer, ErrorEqualsDecl, "_eval_body", _runtime_matches_nothing)
    _wrap(installer, string_expression.StringJsonPath, "_eval_body", _naming_its_field)
    installer.replace(state_fail, "CustomErrorName", _branch_error_name)  # a States.* Error
    _wrap(installer, ExecutionState, "_evaluate_with_timeout", _evaluate_with_timeout)
    for state in _ATTEMPTING:
        _wrap(installer, state, "_eval_state", _ending_at_the_state)


# Within one Assign, moto's bindings already read the old values (the patch's why: Output).
_ENTRY = "_onceflow_entry_variables"  # on an Environment: its scope at its state's entry
_original_state_body = CommonStateField._eval_body  # before the wrapping below


def _remembering_entry(original: Any, self: Any, env: Any) -> None:
    setattr(env, _ENTRY, dict(env.variable_store._inner_scope))
    original(self, env)


def _with_entry_variables(original: Any, self: Any, env: Any) -> None:
    entry, store = getattr(env, _ENTRY, None), env.variable_store
    if entry is None:
        original(self, env)
        return
    scope, now = store._inner_scope, dict(store._inner_scope)
    scope.clear(), scope.update(entry)
    store._variable_declarations_cache = None
    try:
        original(self, env)
    finally:
        scope.clear(), scope.update(now)
        store._variable_declarations_cache = None


_Fidelity = functools.partial(Patch, kind="fidelity")
_TESTS = "tests/unit/test_patches.py::"
PATCHES = (
    _Fidelity(
        name="JSONata as Step Functions evaluates it",
        why="Step Functions evaluates JSONata with the JavaScript jsonata library 2.0.6, plus "
        "its own $partition, $range, $hash, $random (with a seed), $uuid and $parse, without "
        "$eval ('Transforming data with JSONata in Step Functions'); each expression compiled "
        "as written with its variables bound (a top-level '$a := 1; $a' fails); one that "
        "fails, returns undefined or a value JSON cannot hold fails the state with "
        "States.QueryEvaluationError, which a Catch handles ('Handling errors in Step "
        "Functions workflows'), its cause naming the field (recorded: LocalStack's "
        "test_assign_reference_variables snapshot). moto expects a JVM evaluator, and let "
        "the raw exception escape as an uncatchable States.Runtime.",
        test=_TESTS + "test_a_failed_expression_is_caught_as_query_evaluation_error",
        install=_install_jsonata,
        fits=_jsonata_fits,
    ),
    _Fidelity(
        name="evaluation failures in the history",
        why="A state whose JSONata expression throws leaves an EvaluationFailed event "
        "naming the error and the state (AWS Step Functions API reference, HistoryEvent: "
        "evaluationFailedEventDetails; for a Pass state recorded: LocalStack's "
        "test_math_operations_jsonata and test_assign_reference_variables snapshots, "
        "PassStateEntered then EvaluationFailed; for a Choice state not verified). moto "
        "wrote it for Task, Parallel and Map states only, so a caught error inside a "
        "Parallel branch had no name.",
        test=_TESTS + "test_a_pass_state_whose_expression_fails_records_the_evaluation_failure",
        install=_wrapping(
            (ExecutionState, "_from_error", _from_error),
            (FailureEventException, "get_evaluation_failed_event_details", _evaluation_details),
            (FailureEventException, "get_execution_failed_event_details", _execution_details),
            (CommonStateField, "_eval_body", _recording_evaluation_failures),
        ),
        fits=lambda: gone(FailureEventException, "get_evaluation_failed_event_details"),
    ),
    _Fidelity(
        name="history events linked as AWS links them",
        why="Each event names the one it follows (previousEventId): EvaluationFailed what "
        "its state's entry follows; after a Map Run, MapStateSucceeded follows MapRunSucceeded "
        "and MapStateExited MapRunStarted (recorded: LocalStack's test_assign_reference_"
        "variables and test_base_scenarios snapshots, test_map_state_nested_config_"
        "distributed; recordings before November 2024 follow MapRunSucceeded). A cause's "
        "'entered at the event id #n' names the state's entry (recorded: all 109 in those "
        "snapshots, test_catch_states_runtime). moto linked EvaluationFailed to the entry, "
        "MapStateExited to MapRunSucceeded, and named the event before the failure.",
        test=_TESTS + "test_a_failure_cause_names_the_event_its_state_was_entered_at",
        install=_wrapping(
            (EventManager, "add_event", _linked_as_recorded),
            (FailureEvent, "__init__", _entered_at),
        ),
        fits=lambda: [
            *gone(EventManager, "add_event"),
            *takes(EventManager.add_event, "self", "context"),
            *lacks(EventManager.__init__, "_history_event_list", "_mutex"),
            *lacks(FailureEvent, "self.source_event_id = env.event_history_context."),
        ],
    ),
    _Fidelity(
        name="a failed Parallel branch or Map iteration as AWS records it",
        why="A Parallel or Map state fails with the error its failed branch or iteration "
        "failed with, States.* errors included, which its Retry and Catch see ('Parallel "
        "workflow state'; recorded: LocalStack's test_error_output snapshot, test_map_catch_"
        "error; moto refused names starting with 'States.' and failed with States.Runtime); "
        "the state the branch failed in is aborted, TaskFailed followed by TaskStateAborted, "
        "which no event follows (recorded: test_parallel_catch_error; moto wrote none).",
        test=_TESTS + "test_a_parallel_branch_failing_with_a_states_error_reaches_the_catch",
        install=_install_parallel,
        fits=lambda: [
            *lacks(branches_decl, "CustomErrorName(error_name=exit_error_name)"),
            *lacks(iteration_worker, "CustomErrorName(error_name=error_name)"),
            *lacks(
                branch_worker.BranchWorker._thread_routine, "self._program.eval(", "on_terminated"
            ),
        ],
    ),
    _Fidelity(
        name="execution input limit",
        why="StartExecution refuses an input over 256 KiB in UTF-8 with a "
        "ValidationException (Step Functions quotas, 'Maximum input or output size for a "
        "task, state, or execution'); moto took any size. Input nested deeper than the "
        "engine's Python carries (onceflow.local.INPUT_DEPTH_LIMIT) is refused with "
        "InvalidExecutionInput, a limit of the engine (moto failed it mid-run, States.Runtime).",
        test=_TESTS + "test_an_input_over_256_kib_is_refused",
        install=_wrapping((_Backend, "start_execution", _limited_start)),
        fits=lambda: [
            *takes(
                _original_start_execution, "self", "state_machine_arn", "name", "execution_input"
            ),
            # a machine's second execution starts (moto 5.2.2 and before deep-copied the
            # machine with its running executions and failed on their lock: moto#10077)
            *lacks(_Backend.start_execution, "id(state_machine.executions)"),
        ],
    ),
    _Fidelity(
        name="atomic single-item writes",
        why="A conditional write to one DynamoDB item is atomic: of two concurrent "
        "conditional PutItems on a key, exactly one succeeds ('Condition expressions', "
        "DynamoDB developer guide); SQS and S3 calls are likewise each one step. moto's "
        "backends are not thread-safe: both could win.",
        test=_TESTS + "test_concurrent_conditional_puts_have_exactly_one_winner",
        install=lambda i: i.replace(hooks.Stages, "serialise", staticmethod(_serialised)),
        fits=hooks.stubber_fits,
    ),
    _Fidelity(
        name="ListObjectVersions from a KeyMarker",
        why="With a KeyMarker and no VersionIdMarker, ListObjectVersions lists the versions "
        "of the keys after the marker (Amazon S3 API reference, ListObjectVersions: "
        "'key-marker: Specifies the key to start with'; whether the marker's own key is "
        "included is not verified, and onceflow does not depend on it). moto also dropped "
        "the first version after the marker.",
        test=_TESTS + "test_list_object_versions_from_a_key_marker_drops_no_version",
        install=_wrapping((s3_models.S3Backend, "list_object_versions", _from_key_marker)),
        fits=lambda: lacks(
            s3_models.S3Backend.list_object_versions, "key_marker: ", "version_id_marker: "
        ),
    ),
    _Fidelity(
        name="definitions judged as CreateStateMachine judges them",
        why="CreateStateMachine refuses a definition that uses a state name twice, in Parallel "
        "branches and Map processors too, with InvalidDefinition 'DUPLICATE_STATE_NAME' "
        "(Amazon States Language: 'state names MUST be unique within the scope of the whole "
        "state machine'; the error as CloudFormation reports it, cfn-lint issue 3616; moto "
        "took it); it judges each definition alone (moto kept the query language of the "
        "scope it parsed in one list for every parse: after a definition refused mid-scope, "
        "valid JSONPath ones were refused too); a refused request is answered with its "
        "error's name, InvalidDefinition, InvalidExecutionInput (API reference, Errors; "
        "moto's parser gave an empty name).",
        test=_TESTS + "test_a_state_name_used_twice_is_an_invalid_definition",
        install=_wrapping(
            (_Backend, "_validate_definition", _validated),
            (_Preprocessor, "visit", _own_scopes),
            (AWSError, "__init__", _named_error_init),
        ),
        fits=_definitions_fit,
    ),
    _Fidelity(
        name="string literals decoded as JSON",
        why='A string in a definition is JSON text: an Assign literal holding \\" or \\\\ '
        "holds \" or \\ (recorded: LocalStack's test_assign_base snapshot, "
        "BASE_CONSTANT_LITERALS, literals stored as the JSON holds them). moto kept an Assign "
        "literal's escapes, so $v = '\"' was false.",
        test="tests/parity/test_variables.py::"
        "test_an_assigned_string_literal_holds_its_characters_not_their_json_escapes",
        install=_install_string_literals,
        fits=lambda: [
            *gone(_Preprocessor, "visitAssign_template_value_terminal_string_literal"),
            *gone(asl_preprocessor, "from_string_literal"),
            *lacks(variable_store.VariableStore, "_declaration_tracing"),
        ],
    ),
    _Fidelity(
        name="a Map's non-array input named as JSON",
        why="A Map state whose input is not an array fails with States.QueryEvaluationError, "
        "'Map state input must be an array but was: 1' (the value as JSON; recorded: "
        "LocalStack's test_base_scenarios snapshot, test_map_state_items_input_types). moto "
        "printed the Python type.",
        test="tests/parity/test_errors.py::test_a_map_whose_input_is_not_an_array_names_the_value",
        install=_wrapping((state_map.StateMap, "_eval_execution", _map_execution)),
        fits=lambda: lacks(state_map.StateMap, _NOT_AN_ARRAY + "{type(input_items)}"),
    ),
    _Fidelity(
        name="no Retry or Catch takes States.Runtime",
        why="States.ALL 'can't catch the States.DataLimitExceeded terminal error type and runtime"
        " error types' ('Handling errors in Step Functions workflows'; recorded: LocalStack's"
        " test_base_scenarios snapshot, test_catch_states_runtime, where a Catch naming "
        "States.Runtime does not take it); in a Task it ends the execution at the state, as "
        "it does a Pass state's (recorded: "
        "test_invalid_jsonpath[INVALID_JSONPATH_IN_STRING_EXPR_JSONPATH], "
        "[ST.INVALID_JSONPATH_IN_TIMEOUTSECONDSPATH]; for a Task's Parameters not verified). "
        "States.DataLimitExceeded stays catchable, as recorded (test_states_errors). moto's "
        "Retry and Catch took States.Runtime like any error, and a path a Lambda Task's "
        "Parameters missed failed it as the function's error 'Exception'. A Fail state raises"
        " the States.* error its Error names, which a Catch sees ('Fail workflow state': "
        "Error, for Retry or Catch; not verified on AWS); moto refused the name with a "
        "States.Runtime.",
        test="tests/parity/test_errors.py::test_no_retry_or_catch_takes_a_states_runtime_error",
        install=_install_runtime,
        fits=lambda: [
            *lacks(_original_error_equals, "error_name: ErrorName = env.stack.pop()"),
            *gone(ExecutionState, "_evaluate_with_timeout"),
            *(m for state in _ATTEMPTING for m in gone(state, "_eval_state")),
            *(m for cls in _ATTEMPTING for m in lacks(cls._eval_state, "_evaluate_with_timeout(")),
            *lacks(NoSuchJsonPathError, "self.json_path", "self.data"),
            *lacks(state_fail.StateFail._eval_state, "CustomErrorName(error_value)"),
        ],
    ),
    _Fidelity(
        name="Assign and Output read the variables as the state found them",
        why="A state's Assign and its Output (OutputPath) both read the variables as they "
        'were when the state was entered: State1, assigning answer "<omitted>" with '
        "OutputPath $answer, outputs 42 and records the new value as assigned (recorded: "
        "LocalStack's test_assign_reference_variables snapshot, test_state_assign_evaluation_"
        "order[BASE_EVALUATION_ORDER_PASS_STATE]; 'Passing data between states with "
        "variables'; in JSONata and in Catch and Choice rules not recorded). moto "
        "evaluated Assign first: the Output read the new value.",
        test="tests/parity/test_variables.py::"
        "test_an_output_path_reads_the_variable_as_the_state_found_it",
        install=_wrapping(
            (CommonStateField, "_eval_state_input", _remembering_entry),
            (Output, "_eval_body", _with_entry_variables),
            (OutputPath, "_eval_body", _with_entry_variables),
        ),
        fits=lambda: [
            *gone(CommonStateField, "_eval_state_input", "_eval_state_output"),
            *lacks(_original_state_body, "self._eval_state_input(env=env)"),
            *lacks(CommonStateField._eval_state_output, "output_path.eval(", "output.eval("),
            *gone(Output, "_eval_body"),
            *gone(OutputPath, "_eval_body"),
            *lacks(variable_store.VariableStore, "_inner_scope", "_variable_declarations_cache"),
        ],
    ),
)
