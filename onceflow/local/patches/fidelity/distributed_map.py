"""A Distributed Map as Step Functions runs it, where moto runs it otherwise.

moto 5.2.5 parses a Distributed Map and runs its children in-process, but
its S3 object listing reads one page in boto's shape, failed children never
fail the Map, it has no ItemBatcher, no S3 Inventory manifest reader and no
ResultWriter beyond an empty manifest. Each patch below names the AWS
behaviour it reproduces, with the page that documents it, and the test that
holds the engine to it (see ``PATCHES`` at the end).

Some change a definition's text before moto's parser reads it (a form AWS
accepts that moto's grammar refuses: an integer percentage, EXPRESS children,
ReaderConfig without InputType, ItemBatcher, an S3 Inventory manifest reader,
a JSONata ResultWriter); the text a state machine keeps, and
DescribeStateMachine returns, is the one it was created with.
"""

from __future__ import annotations

import copy
import csv
import datetime
import gzip
import hashlib
import inspect
import io
import json
import re
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

from botocore.exceptions import BotoCoreError, ClientError
from moto.stepfunctions.parser.api import HistoryEventType, MapRunFailedEventDetails
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
from moto.stepfunctions.parser.asl.component.state.exec.state_map import (
    state_map,
    tolerated_failure,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader import (
    item_reader_decl,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval import (
    resource_eval_s3,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.reader_config import (
    max_items_decl,
    reader_config_decl,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import (
    distributed_iteration_component as distributed,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import (
    iteration_component,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor import (
    distributed_item_processor as distributed_processor,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor import (
    distributed_item_processor_worker as distributed_worker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor import (
    inline_item_processor_worker as inline_worker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor import (
    map_run_record,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.credentials import (
    StateCredentials,
)
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.program_state import (
    ProgramEnded,
    ProgramError,
    ProgramStopped,
    ProgramTimedOut,
)
from moto.stepfunctions.parser.asl.eval.states import ItemData, MapData
from moto.stepfunctions.parser.asl.parse import asl_parser, preprocessor
from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for
from moto.stepfunctions.parser.utils import camel_to_snake_case

from onceflow.local.patches.fidelity import states_of
from onceflow.local.patches.registry import Installer, Patch

_DOCS = "https://docs.aws.amazon.com/step-functions/latest/dg/"
_ITEM_READER_PAGE = _DOCS + "input-output-itemreader.html"
_THRESHOLD_PAGE = _DOCS + "state-map-distributed.html#maprun-fail-threshold"

# --------------------------------------------------------------------------
# Definitions rewritten before moto's parser reads them.
# --------------------------------------------------------------------------

# Changes a Map state (given its query language) in place; True: it changed.
Rewrite = Callable[[dict[str, Any], str], bool]


def _map_states(document: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Every Map state of a definition (nested ones too) with its query language."""
    language = document.get("QueryLanguage", "JSONPath")
    for _, state, _, _ in states_of(document, language):
        if isinstance(state, dict) and state.get("Type") == "Map":
            yield state, state.get("QueryLanguage", language)


def _rewriting_parse(original: Callable[[str], Any], rewrite: Rewrite) -> Any:
    """AmazonStateLanguageParser.parse that first rewrites each Map state of the text.

    Text that is not a JSON object, or that the rewrite leaves alone, goes to
    moto's parser as it is (and fails there as it did, if it is not valid).
    """

    def parse(definition: str) -> Any:
        try:
            document = json.loads(definition)
        except ValueError:
            return original(definition)
        if not isinstance(document, dict):
            return original(definition)
        changed = [rewrite(state, own) for state, own in _map_states(document)]
        if any(changed):
            definition = json.dumps(document, ensure_ascii=False)
        return original(definition)

    return staticmethod(parse)


def _install_rewrite(installer: Installer, rewrite: Callable[[dict[str, Any]], bool]) -> None:
    """A rewrite of every Map state, whatever its query language."""
    _install_language_rewrite(installer, lambda state, language: rewrite(state))


def _install_language_rewrite(installer: Installer, rewrite: Rewrite) -> None:
    parser = asl_parser.AmazonStateLanguageParser
    installer.replace(parser, "parse", _rewriting_parse(parser.parse, rewrite))


def _parse_fits() -> list[str]:
    parse = inspect.getattr_static(asl_parser.AmazonStateLanguageParser, "parse", None)
    if not isinstance(parse, staticmethod):
        return ["AmazonStateLanguageParser.parse is no longer a static method"]
    if list(inspect.signature(parse.__func__).parameters) != ["definition"]:
        return ["AmazonStateLanguageParser.parse changed its parameters"]
    return []


# --------------------------------------------------------------------------
# 1. ItemReader arn:aws:states:::s3:listObjectsV2: every page, ReaderConfig's
# MaxItems, an empty prefix as zero items, each item in AWS's shape.
# --------------------------------------------------------------------------

LIST_OBJECTS_V2 = "list_objects_v2"
# moto's ReaderConfig needs an InputType; for a listing, whose items are not read
# from a file, none is needed on AWS and this one is never used.
_LISTING_INPUT_TYPE = "JSON"


def _listing_reader_config(state: dict[str, Any]) -> bool:
    """Give a listObjectsV2 reader's ReaderConfig the InputType moto's parser insists on."""
    reader = state.get("ItemReader")
    if not isinstance(reader, dict) or not str(reader.get("Resource", "")).endswith(
        ":s3:listObjectsV2"
    ):
        return False
    config = reader.get("ReaderConfig")
    if not isinstance(config, dict) or "InputType" in config:
        return False
    config["InputType"] = _LISTING_INPUT_TYPE
    return True


def aws_listed_item(listed: dict[str, Any]) -> dict[str, Any]:
    """One ListObjectsV2 entry as the child execution gets it on AWS.

    The ItemReader page's example item: {"Etag", "Key", "LastModified" (epoch
    seconds), "Size", "StorageClass"}; boto's entry has ETag, a datetime and
    ChecksumAlgorithm, which moto passed on as they were.
    """
    return {
        "Etag": listed["ETag"],
        "Key": listed["Key"],
        "LastModified": int(listed["LastModified"].timestamp()),
        "Size": listed["Size"],
        "StorageClass": listed.get("StorageClass", "STANDARD"),
    }


def _list_all_objects(env: Any, resource_runtime_part: Any, state_credentials: Any) -> None:
    """ResourceEvalS3._handle_list_objects_v2, reading every page (moto read the first
    1,000 keys and raised KeyError on a listing with no Contents)."""
    client = resource_eval_s3.ResourceEvalS3._get_s3_client(
        resource_runtime_part=resource_runtime_part, state_credentials=state_credentials
    )
    parameters = env.stack.pop()
    items = [
        aws_listed_item(listed)
        for page in client.get_paginator("list_objects_v2").paginate(**parameters)
        for listed in page.get("Contents", [])
    ]
    env.stack.append(items)


def _lists_objects(reader: Any) -> bool:
    resource_eval = reader.resource_eval
    return isinstance(resource_eval, resource_eval_s3.ResourceEvalS3) and (
        camel_to_snake_case(resource_eval.resource.api_action).strip() == LIST_OBJECTS_V2
    )


def _listing_item_reader(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def _eval_body(reader: Any, env: Any) -> None:
        """ItemReader._eval_body for a listing: MaxItems applies to the items listed
        (moto applied it only to a file's rows, through the InputType's transformer)."""
        if not _lists_objects(reader):
            original(reader, env)
            return
        max_items = max_items_decl.MaxItemsDecl.MAX_VALUE
        if reader.reader_config is not None:
            reader.reader_config.eval(env=env)
            max_items = env.stack.pop()["MaxItemsValue"]
        if reader.parargs is not None:
            reader.parargs.eval(env=env)
        else:
            env.stack.append({})
        reader.resource_eval.eval_resource(env=env)
        items = env.stack.pop()
        env.stack.append(items[:max_items])

    return _eval_body


def _install_listing(installer: Installer) -> None:
    _install_rewrite(installer, _listing_reader_config)
    installer.replace(
        resource_eval_s3.ResourceEvalS3, "_handle_list_objects_v2", staticmethod(_list_all_objects)
    )
    reader = item_reader_decl.ItemReader
    installer.replace(reader, "_eval_body", _listing_item_reader(reader._eval_body))


def _listing_fits() -> list[str]:
    problems = _parse_fits()
    s3_eval = resource_eval_s3.ResourceEvalS3
    if "_handle_list_objects_v2" not in vars(s3_eval) or "_get_s3_client" not in vars(s3_eval):
        problems.append("ResourceEvalS3 no longer lists through _handle_list_objects_v2")
    elif "_HANDLER_REFLECTION_PREFIX + api_action" not in inspect.getsource(s3_eval):
        problems.append("ResourceEvalS3 no longer finds its handler by the action's name")
    body = inspect.getsource(item_reader_decl.ItemReader._eval_body)
    for needed in ("reader_config.eval", "parargs.eval", "resource_eval.eval_resource"):
        if needed not in body:
            problems.append(f"ItemReader._eval_body no longer calls {needed}")
    if "MaxItemsValue" not in inspect.getsource(reader_config_decl.ReaderConfig._eval_body):
        problems.append("ReaderConfig no longer gives MaxItemsValue")
    return problems


# --------------------------------------------------------------------------
# 2. Tolerated failures: children that fail beyond ToleratedFailureCount or
# ToleratedFailurePercentage (default: none) fail the Map with
# States.ExceedToleratedFailureThreshold.
# --------------------------------------------------------------------------

EXCEEDED_CAUSE = "The specified tolerated failure threshold was exceeded"
EXCEEDED_ERROR = StatesErrorNameType.StatesExceedToleratedFailureThreshold.to_name()


def _float_percentage(state: dict[str, Any]) -> bool:
    """ToleratedFailurePercentage 10 as 10.0: moto's grammar reads only a decimal."""
    value = state.get("ToleratedFailurePercentage")
    if type(value) is not int:
        return False
    state["ToleratedFailurePercentage"] = float(value)
    return True


# Which thresholds each Distributed Map's definition declares (count, percentage),
# by its iteration component: one left out does not apply unless both are.
_DECLARED: weakref.WeakKeyDictionary[Any, tuple[bool, bool]] = weakref.WeakKeyDictionary()


def _noting_thresholds(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def from_state_props(state: Any, state_props: Any) -> None:
        original(state, state_props)
        component = getattr(state, "iteration_component", None)
        if isinstance(component, distributed.DistributedIterationComponent):
            _DECLARED[component] = (
                state_props.get(tolerated_failure.ToleratedFailureCountDecl) is not None,
                state_props.get(tolerated_failure.ToleratedFailurePercentageDecl) is not None,
            )

    return from_state_props


def threshold_exceeded(
    failed: int,
    total: int,
    count: int,
    percentage: float,
    declared: tuple[bool, bool],
) -> bool:
    """Whether failed of total children exceed the Map's thresholds.

    With neither declared, any failure does (the default is 0). With one, that
    one decides; with both, exceeding either does. Failed counts timed-out
    children too, as the percentage does on AWS.
    """
    count_declared, percentage_declared = declared
    if not (count_declared or percentage_declared):
        return failed > 0
    if count_declared and failed > count:
        return True
    return percentage_declared and total > 0 and failed * 100 / total > percentage


def _tolerating_map_run(original: Callable[[Any, Any, Any], None]) -> Any:
    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        """DistributedIterationComponent._map_run, then the failure thresholds."""
        original(component, env, eval_input)
        counter = eval_input.map_run_record.item_counter
        failed = counter.failed.get() + counter.timed_out.get()
        total = len(env.stack[-1])
        declared = _DECLARED.get(component, (False, False))
        if not threshold_exceeded(
            failed,
            total,
            eval_input.tolerated_failure_count,
            eval_input.tolerated_failure_percentage,
            declared,
        ):
            return
        env.stack.pop()
        raise map_run_failure(
            env, StatesErrorNameType.StatesExceedToleratedFailureThreshold, EXCEEDED_CAUSE
        )

    return _map_run


def _count_expression(visitor: Any, ctx: Any) -> Any:
    """Preprocessor.visitTolerated_failure_count_string_jsonata: moto built a
    percentage from a ToleratedFailureCount expression."""
    return tolerated_failure.ToleratedFailureCountStringJSONata(
        string_jsonata=visitor.visitString_jsonata(ctx=ctx.string_jsonata())
    )


def _install_tolerance(installer: Installer) -> None:
    _install_rewrite(installer, _float_percentage)
    component = distributed.DistributedIterationComponent
    installer.replace(component, "_map_run", _tolerating_map_run(component._map_run))
    installer.replace(
        state_map.StateMap,
        "from_state_props",
        _noting_thresholds(state_map.StateMap.from_state_props),
    )
    installer.replace(
        preprocessor.Preprocessor, "visitTolerated_failure_count_string_jsonata", _count_expression
    )


def _tolerance_fits() -> list[str]:
    problems = _parse_fits()
    run = inspect.getsource(distributed.DistributedIterationComponent._map_run)
    if "env.stack.append(outputs)" not in run:
        problems.append("DistributedIterationComponent._map_run no longer leaves its outputs")
    worker = inspect.getsource(
        distributed.DistributedIterationComponent._eval_body  # catches our failure
    )
    if "except FailureEventException" not in worker:
        problems.append("a Map Run no longer fails on a FailureEventException")
    if not hasattr(StatesErrorNameType, "StatesExceedToleratedFailureThreshold"):
        problems.append("States.ExceedToleratedFailureThreshold is gone")
    props = inspect.getsource(state_map.StateMap.from_state_props)
    for needed in ("ToleratedFailureCountDecl", "ToleratedFailurePercentageDecl"):
        if needed not in props:
            problems.append(f"StateMap no longer reads {needed}")
    if not hasattr(preprocessor.Preprocessor, "visitTolerated_failure_count_string_jsonata"):
        problems.append("the preprocessor no longer visits a ToleratedFailureCount expression")
    return problems


# --------------------------------------------------------------------------
# 3. ProcessorConfig.ExecutionType EXPRESS: children run as moto runs STANDARD ones.
# --------------------------------------------------------------------------


def _express_as_standard(state: dict[str, Any]) -> bool:
    """ExecutionType EXPRESS as STANDARD: moto's grammar has only STANDARD."""
    processor = state.get("ItemProcessor")
    config = processor.get("ProcessorConfig") if isinstance(processor, dict) else None
    if not isinstance(config, dict) or config.get("ExecutionType") != "EXPRESS":
        return False
    config["ExecutionType"] = "STANDARD"
    return True


def _install_express(installer: Installer) -> None:
    _install_rewrite(installer, _express_as_standard)


# --------------------------------------------------------------------------
# 4. ItemBatcher: the items (each through ItemSelector first) grouped into
# batches, one child per batch, each child's input {"BatchInput"?, "Items"}.
# --------------------------------------------------------------------------

_BATCHER_PAGE = _DOCS + "input-output-itembatcher.html"
_FIELDS_PAGE = _DOCS + "input-output-fields-dist-map.html"
MAX_BATCH_BYTES = 256 * 1024  # MaxInputBytesPerBatch's default and its largest value
_BATCHER_FIELDS = frozenset({"MaxItemsPerBatch", "MaxInputBytesPerBatch", "BatchInput"})
_ASIDE_MARK = "onceflow-aside:"
# The fields a definition rewrite took out of a Distributed Map (its ItemBatcher,
# its ResultWriter) by the mark the rewrite leaves as the ItemProcessor's Comment,
# which moto keeps on the iteration component and nothing else reads. Keyed by
# content: bounded by the distinct field sets ever defined.
_ASIDE: dict[str, dict[str, Any]] = {}


def _set_aside(processor: dict[str, Any], field: str, value: Any) -> None:
    """Keep value as the Map's field, adding to what another rewrite set aside."""
    comment = processor.get("Comment")
    held = dict(_ASIDE.get(comment, {})) if isinstance(comment, str) else {}
    held[field] = value
    text = json.dumps(held, sort_keys=True, ensure_ascii=False)
    mark = _ASIDE_MARK + hashlib.sha256(text.encode()).hexdigest()[:32]
    _ASIDE[mark] = held
    processor["Comment"] = mark


def _aside_of(component: Any) -> dict[str, Any]:
    """What the rewrites set aside for the Map whose iteration component this is."""
    comment = getattr(component, "_comment", None)
    return _ASIDE.get(getattr(comment, "comment", None) or "", {})


def _is_jsonata(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("{%") and value.endswith("%}")


def _batcher_is_valid(batcher: Any) -> TypeGuard[dict[str, Any]]:
    """An ItemBatcher AWS accepts in a JSONata Map: MaxItemsPerBatch and/or
    MaxInputBytesPerBatch (a positive integer, the bytes at most 256 KiB, or an
    expression), an optional BatchInput object or expression, nothing else."""
    if not isinstance(batcher, dict) or not set(batcher) <= _BATCHER_FIELDS:
        return False
    if not {"MaxItemsPerBatch", "MaxInputBytesPerBatch"} & set(batcher):
        return False
    for field, most in (("MaxItemsPerBatch", None), ("MaxInputBytesPerBatch", MAX_BATCH_BYTES)):
        value = batcher.get(field, 1)
        if _is_jsonata(value):
            continue
        if type(value) is not int or value < 1 or (most is not None and value > most):
            return False
    batch_input = batcher.get("BatchInput", {})
    return isinstance(batch_input, dict) or _is_jsonata(batch_input)


def _move_aside(
    state: dict[str, Any], language: str, field: str, valid: Callable[[Any], bool]
) -> bool:
    """Move a JSONata Distributed Map's ``field`` (when ``valid``) from the state to
    its ItemProcessor's mark; True when it moved."""
    value = state.get(field)
    processor = state.get("ItemProcessor")
    config = processor.get("ProcessorConfig") if isinstance(processor, dict) else None
    if (
        language != "JSONata"
        or not isinstance(processor, dict)
        or not isinstance(config, dict)
        or config.get("Mode") != "DISTRIBUTED"
        or not valid(value)
    ):
        return False
    del state[field]
    _set_aside(processor, field, value)
    return True


def _set_batcher_aside(state: dict[str, Any], language: str) -> bool:
    """Take a valid JSONata Distributed Map's ItemBatcher out of the state (moto's
    grammar has no ItemBatcher) and leave its mark as the ItemProcessor's Comment,
    which moto keeps on the iteration component and nothing else reads.

    An ItemBatcher that is not valid, in an Inline Map or in JSONPath (its *Path
    fields and "key.$" templates are not reproduced) stays, and moto's parser
    refuses the definition as before.
    """
    return _move_aside(state, language, "ItemBatcher", _batcher_is_valid)


def json_bytes(value: Any) -> int:
    """A value's size as Step Functions counts a payload: its JSON text in UTF-8."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def batch_items(
    items: list[Any],
    max_items: int | None,
    max_bytes: int,
    batch_input: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """Items in order, in batches of at most max_items whose child input
    ({"BatchInput": ..., "Items": [...]}, BatchInput only when given) is at most
    max_bytes; an item too large for any batch goes alone in its own."""
    head: dict[str, Any] = {} if batch_input is None else {"BatchInput": batch_input}
    empty = json_bytes({**head, "Items": []})
    groups: list[list[Any]] = []
    current: list[Any] = []
    size = empty
    for item in items:
        added = json_bytes(item) + (1 if current else 0)  # and a comma after the first
        full = max_items is not None and len(current) >= max_items
        if current and (full or size + added > max_bytes):
            groups.append(current)
            current, size, added = [], empty, added - 1
        current.append(item)
        size += added
    if current:
        groups.append(current)
    return [{**copy.deepcopy(head), "Items": group} for group in groups]


_QUERY_ERROR = StatesErrorNameType.StatesQueryEvaluationError


def map_run_failure(env: Any, error: StatesErrorNameType, cause: str) -> FailureEventException:
    """The Map state failing as its Map Run failed (a MapRunFailed event), with error."""
    error_name = StatesErrorName(typ=error)
    return FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=error_name,
            event_type=HistoryEventType.MapRunFailed,
            event_details=EventDetails(  # type: ignore[typeddict-item]
                mapRunFailedEventDetails=MapRunFailedEventDetails(
                    error=error_name.error_name, cause=cause
                )
            ),
        )
    )


def _evaluated(env: Any, value: Any) -> Any:
    """A field's value: a {% %} string evaluated (as moto evaluates any JSONata
    field, against the Map's input and variables), objects and arrays throughout."""
    if _is_jsonata(value):
        string_expression.StringJSONata(expression=value[2:-2].strip()).eval(env=env)
        return env.stack.pop()
    if isinstance(value, dict):
        return {key: _evaluated(env, inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_evaluated(env, inner) for inner in value]
    return value


def _positive_int(env: Any, batcher: dict[str, Any], field: str) -> int | None:
    if field not in batcher:
        return None
    value = _evaluated(env, batcher[field])
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 1:
        raise map_run_failure(
            env, _QUERY_ERROR, f"{field} must be a positive integer, was {value!r}"
        )
    return value


def _batches_for(env: Any, batcher: dict[str, Any], items: list[Any]) -> list[dict[str, Any]]:
    """The ItemBatcher's fields, evaluated once for the Map Run, applied to items."""
    max_items = _positive_int(env, batcher, "MaxItemsPerBatch")
    max_bytes = _positive_int(env, batcher, "MaxInputBytesPerBatch") or MAX_BATCH_BYTES
    batch_input = None
    if "BatchInput" in batcher:
        batch_input = _evaluated(env, batcher["BatchInput"])
        if not isinstance(batch_input, dict):
            cause = f"BatchInput must be an object, was {batch_input!r}"
            raise map_run_failure(env, _QUERY_ERROR, cause)
    return batch_items(items, max_items, min(max_bytes, MAX_BATCH_BYTES), batch_input)


def _selected_each(env: Any, selector: Any, items: list[Any], map_input: Any) -> list[Any]:
    """ItemSelector applied to each item, as moto's worker applies it to a child's
    item (the Map's input as $states.input, the item in $states.context.Map.Item)."""
    frame = env.open_inner_frame()
    try:
        selected = []
        for index, item in enumerate(items):
            frame.states.context_object.context_object_data["Map"] = MapData(
                Item=ItemData(Index=index, Value=item)
            )
            frame.states.reset(input_value=map_input)
            frame.stack.append(map_input)
            selector.eval(frame)
            selected.append(frame.stack.pop())
        return selected
    finally:
        env.delete_frame(frame)


def _batcher_of(component: Any) -> dict[str, Any] | None:
    batcher = _aside_of(component).get("ItemBatcher")
    return batcher if isinstance(batcher, dict) else None


def _batching_map_run(original: Callable[[Any, Any, Any], None]) -> Any:
    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        """DistributedIterationComponent._map_run over batches when the Map has an
        ItemBatcher: each item through ItemSelector, then grouped, then the children
        (which apply no ItemSelector again)."""
        batcher = _batcher_of(component)
        if batcher is None:
            original(component, env, eval_input)
            return
        items = env.stack.pop()
        if eval_input.item_selector is not None:
            items = _selected_each(env, eval_input.item_selector, items, env.stack[-1])
            eval_input = copy.copy(eval_input)
            eval_input.item_selector = None
        env.stack.append(_batches_for(env, batcher, items))
        original(component, env, eval_input)

    return _map_run


def _install_batcher(installer: Installer) -> None:
    _install_language_rewrite(installer, _set_batcher_aside)
    component = distributed.DistributedIterationComponent
    installer.replace(component, "_map_run", _batching_map_run(component._map_run))


def _batcher_fits() -> list[str]:
    problems = _parse_fits()
    component = distributed.DistributedIterationComponent
    run = inspect.getsource(component._map_run)
    if "input_items: list[json] = env.stack.pop()" not in run:
        problems.append("DistributedIterationComponent._map_run no longer takes its items")
    if "comment" not in inspect.signature(component.__init__).parameters or "_comment" not in (
        inspect.getsource(iteration_component.IterationComponent.__init__)
    ):
        problems.append("an iteration component no longer keeps its Comment")
    worker = inspect.getsource(inline_worker.InlineItemProcessorWorker._eval_input)
    for needed in ("self._item_selector", "self._env.stack[-1]", "states.reset"):
        if needed not in worker:
            problems.append(f"a child's ItemSelector no longer uses {needed}")
    if "item_selector=eval_input.item_selector" not in inspect.getsource(
        distributed_processor.DistributedItemProcessor._create_worker
    ):
        problems.append("a child no longer takes its ItemSelector from the eval input")
    return problems


# --------------------------------------------------------------------------
# 5. ItemReader over an S3 Inventory manifest: every CSV data file the
# manifest lists, each row an item named by the manifest's fileSchema.
# --------------------------------------------------------------------------

_ERRORS_PAGE = _DOCS + "concepts-error-handling.html"
_MANIFEST_MARK = "onceflow-s3-inventory-manifest"
# Besides the form, a manifest reader's ReaderConfig may hold only a limit here;
# CSVDelimiter and CSVHeaderLocation (which AWS also takes) are not reproduced.
_MANIFEST_CONFIG = frozenset({"InputType", "ManifestType", "MaxItems", "MaxItemsPath"})


class ManifestError(Exception):
    """An S3 Inventory manifest, or a data file it lists, that cannot be read as AWS reads it."""


def _manifest_reader_config(state: dict[str, Any]) -> bool:
    """An s3:getObject reader of an S3 Inventory manifest, in a form moto's parser reads.

    AWS takes either ``"InputType": "MANIFEST"`` (the ItemReader page's example)
    or ``"ManifestType": "S3_INVENTORY"`` without InputType ("you must not also
    specify InputType because the type is assumed to be CSV"). Both become a
    CSV reader whose given header is a mark that the reader below looks for.
    Both together, or either with a field not reproduced here, stay as written
    and moto's parser refuses them.
    """
    reader = state.get("ItemReader")
    if not isinstance(reader, dict) or not str(reader.get("Resource", "")).endswith(
        ":s3:getObject"
    ):
        return False
    config = reader.get("ReaderConfig")
    if not isinstance(config, dict) or not set(config) <= _MANIFEST_CONFIG:
        return False
    legacy = config.get("InputType") == "MANIFEST" and "ManifestType" not in config
    current = config.get("ManifestType") == "S3_INVENTORY" and "InputType" not in config
    if not (legacy or current):
        return False
    config.pop("InputType", None)
    config.pop("ManifestType", None)
    config.update(InputType="CSV", CSVHeaderLocation="GIVEN", CSVHeaders=[_MANIFEST_MARK])
    return True


def _reads_manifest(reader: Any) -> bool:
    config = reader.reader_config
    headers = getattr(getattr(config, "csv_headers", None), "header_names", None)
    return headers == [_MANIFEST_MARK]


def _bucket_of(arn: Any) -> str:
    """The bucket a manifest's destinationBucket ARN (arn:aws:s3:::name) names."""
    if not isinstance(arn, str) or ":::" not in arn or not arn.split(":::", 1)[1]:
        raise ManifestError(f"the manifest's destinationBucket is not a bucket ARN: {arn!r}")
    return arn.split(":::", 1)[1]


def read_inventory_manifest(
    s3_client: Any, parameters: dict[str, Any], max_items: int
) -> list[dict[str, str]]:
    """The items of an S3 Inventory: what the ItemReader page says Step Functions
    passes a Distributed Map for a manifest.json.

    The manifest (GetObject with the reader's Bucket, Key and any VersionId) names
    the data bucket (``destinationBucket``, an ARN), the columns (``fileSchema``,
    comma separated) and the data files (``files[].key``, gzip-compressed CSV
    without a header row). Each row is an item whose fields are the columns and
    whose values are all strings, in file order then row order, up to max_items.
    Only a CSV inventory can be read ("The output format of your Amazon S3
    inventory report must be CSV"). Not verified: the order AWS reads the files
    in (here the manifest's), and how it treats a row whose field count differs
    from the schema (here an error).
    """
    manifest = _json_object(s3_client, parameters)
    if manifest.get("fileFormat") != "CSV":
        raise ManifestError(
            f"the inventory's fileFormat is {manifest.get('fileFormat')!r}: "
            "Step Functions reads only a CSV S3 Inventory"
        )
    schema, files = manifest.get("fileSchema"), manifest.get("files")
    if not isinstance(schema, str) or not isinstance(files, list):
        raise ManifestError("the manifest has no fileSchema string or no files list")
    columns = [column.strip() for column in schema.split(",")]
    bucket = _bucket_of(manifest.get("destinationBucket"))
    items: list[dict[str, str]] = []
    for entry in files:
        if len(items) >= max_items:
            break
        key = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(key, str):
            raise ManifestError(f"a manifest file entry has no key: {entry!r}")
        for row in _csv_rows(s3_client, bucket, key):
            if len(row) != len(columns):
                raise ManifestError(
                    f"s3://{bucket}/{key}: a row has {len(row)} fields, "
                    f"the fileSchema {len(columns)}"
                )
            items.append(dict(zip(columns, row, strict=True)))
            if len(items) >= max_items:
                break
    return items


def _json_object(s3_client: Any, parameters: dict[str, Any]) -> dict[str, Any]:
    body = s3_client.get_object(**parameters)["Body"].read()
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise ManifestError(f"the manifest is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ManifestError("the manifest is not a JSON object")
    return document


def _csv_rows(s3_client: Any, bucket: str, key: str) -> list[list[str]]:
    body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        text = gzip.decompress(body).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ManifestError(f"s3://{bucket}/{key} is not gzip-compressed UTF-8 CSV: {exc}") from exc
    return [row for row in csv.reader(io.StringIO(text, newline="")) if row]


def _manifest_item_reader(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def _eval_body(reader: Any, env: Any) -> None:
        """ItemReader._eval_body for an S3 Inventory manifest (moto refused the form)."""
        if not _reads_manifest(reader):
            original(reader, env)
            return
        reader.reader_config.eval(env=env)
        max_items = env.stack.pop()["MaxItemsValue"]
        if reader.parargs is not None:
            reader.parargs.eval(env=env)
        else:
            env.stack.append({})
        parameters = env.stack.pop()
        reader.resource.eval(env=env)
        client = resource_eval_s3.ResourceEvalS3._get_s3_client(
            resource_runtime_part=env.stack.pop(),
            state_credentials=StateCredentials(role_arn=env.aws_execution_details.role_arn),
        )
        try:
            if not isinstance(parameters, dict):
                raise ManifestError(f"the reader's Arguments are not an object: {parameters!r}")
            items = read_inventory_manifest(client, parameters, max_items)
        except (ManifestError, ClientError, BotoCoreError) as exc:
            raise map_run_failure(
                env, StatesErrorNameType.StatesItemReaderFailed, str(exc)
            ) from exc
        env.stack.append(items)

    return _eval_body


def _install_manifest(installer: Installer) -> None:
    _install_rewrite(installer, _manifest_reader_config)
    reader = item_reader_decl.ItemReader
    installer.replace(reader, "_eval_body", _manifest_item_reader(reader._eval_body))


def _manifest_fits() -> list[str]:
    problems = _listing_fits()
    if "self.csv_headers = csv_headers" not in inspect.getsource(
        reader_config_decl.ReaderConfig.__init__
    ):
        problems.append("ReaderConfig no longer keeps its CSVHeaders")
    if not hasattr(StatesErrorNameType, "StatesItemReaderFailed"):
        problems.append("States.ItemReaderFailed is gone")
    return problems


# --------------------------------------------------------------------------
# 6. ResultWriter (JSONata): each child's execution written to S3 by status
# (SUCCEEDED_n, FAILED_n, PENDING_n and a manifest.json), the Map's result a
# pointer to the manifest; WriterConfig's Transformation and OutputType.
# --------------------------------------------------------------------------

_WRITER_PAGE = _DOCS + "input-output-resultwriter.html"
_DESCRIBE_PAGE = "https://docs.aws.amazon.com/step-functions/latest/apireference/"
_DESCRIBE_PAGE += "API_DescribeExecution.html"
_WRITER_RESOURCE = re.compile(r"arn:aws[a-z-]*:states:::s3:putObject")
_TRANSFORMATIONS = frozenset({"NONE", "COMPACT", "FLATTEN"})
_OUTPUT_TYPES = frozenset({"JSON", "JSONL"})
# "Step Functions supports individual result files of up to 5 GB": past it, the
# results go on in the next file (SUCCEEDED_1.json, ...). Where exactly one file
# ends is not verified; here at the last whole entry that fits.
MAX_RESULT_FILE_BYTES = 5 * 1024**3
RESULT_STATUSES = ("SUCCEEDED", "FAILED", "PENDING")


def _writer_is_valid(writer: Any) -> TypeGuard[dict[str, Any]]:
    """A JSONata ResultWriter AWS accepts: WriterConfig alone, Resource
    (s3:putObject) with Arguments {Bucket, Prefix} (either may be an
    expression), or all three; WriterConfig's Transformation NONE, COMPACT or
    FLATTEN and OutputType JSON or JSONL. Not verified: whether Prefix may be
    left out (here it may: no prefix) and whether WriterConfig's fields may be
    expressions (here they may not)."""
    if not isinstance(writer, dict) or not writer:
        return False
    if not set(writer) <= {"Resource", "Arguments", "WriterConfig"}:
        return False
    config = writer.get("WriterConfig", {})
    if not isinstance(config, dict) or not set(config) <= {"Transformation", "OutputType"}:
        return False
    if config.get("Transformation", "NONE") not in _TRANSFORMATIONS:
        return False
    if config.get("OutputType", "JSON") not in _OUTPUT_TYPES:
        return False
    if "Resource" not in writer and "Arguments" not in writer:
        return "WriterConfig" in writer
    if not _WRITER_RESOURCE.fullmatch(str(writer.get("Resource"))):
        return False
    arguments = writer.get("Arguments")
    if _is_jsonata(arguments):
        return True
    return (
        isinstance(arguments, dict)
        and "Bucket" in arguments
        and (set(arguments) <= {"Bucket", "Prefix"})
    )


def _set_writer_aside(state: dict[str, Any], language: str) -> bool:
    """Take a valid JSONata Distributed Map's ResultWriter out of the state (moto's
    grammar refuses Arguments and WriterConfig there) and set it aside with the
    Map. In JSONPath, or not valid, it stays: moto's parser reads Resource and
    Parameters (and writes an empty manifest) and refuses the rest."""
    return _move_aside(state, language, "ResultWriter", _writer_is_valid)


@dataclass(frozen=True)
class ChildRun:
    """One child workflow execution of a Map Run, as the ResultWriter reports it."""

    index: int
    name: str
    execution_arn: str
    state_machine_arn: str
    input: Any
    output: Any
    status: str  # SUCCEEDED, FAILED, TIMED_OUT or ABORTED
    error: str | None
    cause: str | None
    start: datetime.datetime
    stop: datetime.datetime


# The children of each Map Run that has a ResultWriter, while it runs (by its
# MapRunRecord), and each child's input once its ItemSelector ran (by its frame).
_CHILDREN: weakref.WeakKeyDictionary[Any, list[ChildRun]] = weakref.WeakKeyDictionary()
_CHILD_INPUTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_CHILDREN_LOCK = threading.Lock()


def _outcome(program_state: Any) -> tuple[str, str | None, str | None]:
    """A child's status, error and cause from its program's end state."""
    if isinstance(program_state, ProgramEnded):
        return "SUCCEEDED", None, None
    if isinstance(program_state, ProgramError):
        details = program_state.error or {}
        return "FAILED", details.get("error"), details.get("cause")
    if isinstance(program_state, ProgramTimedOut):
        return "TIMED_OUT", None, None
    if isinstance(program_state, ProgramStopped):
        return "ABORTED", program_state.error, program_state.cause
    # moto caught an exception outside the child's states (its ItemSelector, say).
    return "FAILED", StatesErrorNameType.StatesRuntime.to_name(), None


def _recording_input(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def _eval_input(worker: Any, env_frame: Any) -> None:
        """The worker's ItemSelector step, then the child's input kept for its record."""
        original(worker, env_frame)
        with _CHILDREN_LOCK:
            if worker._map_run_record in _CHILDREN:
                _CHILD_INPUTS[env_frame] = copy.deepcopy(env_frame.states.get_input())

    return _eval_input


def _recording_job(original: Callable[[Any, Any, Any], None]) -> Callable[[Any, Any, Any], None]:
    def _eval_job(worker: Any, env: Any, job: Any) -> None:
        """DistributedItemProcessorWorker._eval_job, and a record of the child when
        its Map Run has a ResultWriter (moto kept only its output)."""
        record = worker._map_run_record
        with _CHILDREN_LOCK:
            recording = record in _CHILDREN
        if not recording:
            original(worker, env, job)
            return
        start = datetime.datetime.now(datetime.UTC)
        original(worker, env, job)
        stop = datetime.datetime.now(datetime.UTC)
        status, error, cause = _outcome(env.program_state())
        name = str(uuid.uuid4())
        child_machine = record.map_state_machine_arn
        with _CHILDREN_LOCK:
            child_input = _CHILD_INPUTS.pop(env, job.job_input)
            _CHILDREN.get(record, []).append(
                ChildRun(
                    index=job.job_index,
                    name=name,
                    execution_arn=child_machine.replace(":stateMachine:", ":execution:", 1)
                    + ":"
                    + name,
                    state_machine_arn=child_machine,
                    input=child_input,
                    output=job.job_output if status == "SUCCEEDED" else None,
                    status=status,
                    error=error,
                    cause=cause,
                    start=start,
                    stop=stop,
                )
            )

    return _eval_job


def _iso_millis(moment: datetime.datetime) -> str:
    utc = moment.astimezone(datetime.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def execution_entry(child: ChildRun) -> dict[str, Any]:
    """A child as Transformation NONE reports it: its output "unchanged, in addition
    to the workflow metadata" (the ResultWriter page), the metadata being what
    DescribeExecution gives (ARN, name, status, dates, input, output or error and
    cause, redrive fields) with capitalised names. Not verified: Input and Output
    as JSON text (as DescribeExecution gives them, and as third-party readers of
    these files decode them) rather than as JSON values, the date format, the
    redrive fields of a failed child, and the ARN of an EXPRESS child (here as a
    STANDARD child's: <map state machine ARN as execution>:<name>)."""
    entry: dict[str, Any] = {}
    if child.cause is not None:
        entry["Cause"] = child.cause
    if child.error is not None:
        entry["Error"] = child.error
    entry.update(
        ExecutionArn=child.execution_arn,
        Input=_json_text(child.input),
        InputDetails={"Included": True},
        Name=child.name,
    )
    if child.status == "SUCCEEDED":
        entry.update(Output=_json_text(child.output), OutputDetails={"Included": True})
        redrive = {
            "RedriveCount": 0,
            "RedriveStatus": "NOT_REDRIVABLE",
            "RedriveStatusReason": "Execution is SUCCEEDED and cannot be redriven",
        }
    else:
        redrive = {"RedriveCount": 0, "RedriveStatus": "REDRIVABLE_BY_MAP_RUN"}
    entry.update(redrive)
    entry.update(
        StartDate=_iso_millis(child.start),
        StateMachineArn=child.state_machine_arn,
        Status=child.status,
        StopDate=_iso_millis(child.stop),
    )
    return entry


def transformed(children: list[ChildRun], transformation: str) -> list[Any]:
    """Succeeded children as Transformation reports them: NONE, each child's entry
    with its metadata; COMPACT, each output; FLATTEN, each output, an array's
    elements in its place. A failed child is always its NONE entry ("If a child
    workflow execution fails, Step Functions returns its execution result
    unchanged")."""
    reported: list[Any] = []
    for child in children:
        if child.status != "SUCCEEDED" or transformation == "NONE":
            reported.append(execution_entry(child))
        elif transformation == "FLATTEN" and isinstance(child.output, list):
            reported.extend(child.output)
        else:
            reported.append(child.output)
    return reported


def result_files(entries: list[Any], output_type: str, limit: int) -> list[bytes]:
    """Entries as the bodies of one status's files: a JSON array, or JSON Lines
    (one entry a line), each body at most limit bytes unless one entry alone is
    larger (not verified: where AWS ends a file)."""
    lines = output_type != "JSON"
    empty = 0 if lines else 2  # "[]"
    groups: list[list[bytes]] = [[]]
    size = empty
    for entry in entries:
        text = _json_text(entry).encode()
        # its newline, or the comma before it when it is not the first
        added = len(text) + (1 if lines or groups[-1] else 0)
        if groups[-1] and size + added > limit:
            groups.append([])
            size = empty
            added = len(text) + (1 if lines else 0)
        groups[-1].append(text)
        size += added
    if not groups[-1]:
        return []
    if lines:
        return [b"".join(text + b"\n" for text in group) for group in groups]
    return [b"[" + b",".join(group) + b"]" for group in groups]


@dataclass(frozen=True)
class _Target:
    bucket: str
    prefix: str


def _writer_target(env: Any, writer: dict[str, Any]) -> _Target | None:
    """The ResultWriter's Bucket and Prefix, evaluated (None: WriterConfig alone)."""
    if "Arguments" not in writer:
        return None
    arguments = _evaluated(env, writer["Arguments"])
    bucket = arguments.get("Bucket") if isinstance(arguments, dict) else None
    prefix = arguments.get("Prefix", "") if isinstance(arguments, dict) else None
    if not isinstance(bucket, str) or not bucket or not isinstance(prefix, str):
        cause = f"ResultWriter Arguments must give a Bucket and a Prefix string, gave {arguments!r}"
        raise map_run_failure(env, _QUERY_ERROR, cause)
    return _Target(bucket, prefix)


def _export(
    env: Any,
    target: _Target,
    config: dict[str, Any],
    map_run_arn: str,
    children: list[ChildRun],
) -> dict[str, Any]:
    """Write the Map Run's results under <Prefix>/<map run id>/ and return the Map's
    result, {"MapRunArn", "ResultWriterDetails": {"Bucket", "Key"}}."""
    transformation = config.get("Transformation", "NONE")
    output_type = config.get("OutputType", "JSON")
    prefix = (
        target.prefix if not target.prefix or target.prefix.endswith("/") else (target.prefix + "/")
    )
    base = prefix + map_run_arn.rsplit(":", 1)[-1] + "/"
    extension = ".json" if output_type == "JSON" else ".jsonl"
    by_status: dict[str, list[Any]] = {
        "SUCCEEDED": transformed([c for c in children if c.status == "SUCCEEDED"], transformation),
        "FAILED": [execution_entry(c) for c in children if c.status != "SUCCEEDED"],
        "PENDING": [],  # every child ran: none was left unstarted by a failing Map Run
    }
    client: Any = boto_client_for(
        region=env.aws_execution_details.region,
        service="s3",
        state_credentials=StateCredentials(role_arn=env.aws_execution_details.role_arn),
    )
    manifest_files: dict[str, list[dict[str, Any]]] = {}
    try:
        for status in sorted(by_status):
            manifest_files[status] = []
            bodies = result_files(by_status[status], output_type, MAX_RESULT_FILE_BYTES)
            for number, body in enumerate(bodies):
                key = f"{base}{status}_{number}{extension}"
                client.put_object(Bucket=target.bucket, Key=key, Body=body)
                manifest_files[status].append({"Key": key, "Size": len(body)})
        manifest = {
            "DestinationBucket": target.bucket,
            "MapRunArn": map_run_arn,
            "ResultFiles": manifest_files,
        }
        client.put_object(
            Bucket=target.bucket, Key=base + "manifest.json", Body=_json_text(manifest).encode()
        )
    except ClientError as exc:
        raise map_run_failure(env, StatesErrorNameType.StatesResultWriterFailed, str(exc)) from exc
    return {
        "MapRunArn": map_run_arn,
        "ResultWriterDetails": {"Bucket": target.bucket, "Key": base + "manifest.json"},
    }


def _writing_map_run(original: Callable[[Any, Any, Any], None]) -> Any:
    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        """DistributedIterationComponent._map_run with the Map's ResultWriter: the
        children recorded, their results written (also when the Map Run fails on
        its tolerated failures: "PENDING_n.json ... weren't started because the
        Map Run failed") and the Map's result replaced as AWS replaces it."""
        writer = _aside_of(component).get("ResultWriter")
        if not isinstance(writer, dict):
            original(component, env, eval_input)
            return
        target = _writer_target(env, writer)
        config = writer.get("WriterConfig", {})
        record = eval_input.map_run_record
        with _CHILDREN_LOCK:
            _CHILDREN[record] = []
        try:
            original(component, env, eval_input)
        except FailureEventException as failure:
            children = _children_of(record)
            error, _ = failure.extract_error_cause_pair() or (None, None)
            if target is not None and error == EXCEEDED_ERROR:
                _export(env, target, config, record.map_run_arn, children)
            raise
        except BaseException:
            _children_of(record)  # nothing to write: the Map Run broke off
            raise
        children = _children_of(record)
        env.stack.pop()  # the children's outputs, as moto collected them
        if target is None:
            default = "COMPACT"  # WriterConfig alone: the results stay the state's
            env.stack.append(transformed(children, config.get("Transformation", default)))
            return
        env.stack.append(_export(env, target, config, record.map_run_arn, children))

    return _map_run


def _children_of(record: Any) -> list[ChildRun]:
    with _CHILDREN_LOCK:
        children = _CHILDREN.pop(record, [])
    return sorted(children, key=lambda child: child.index)


def _install_writer(installer: Installer) -> None:
    _install_language_rewrite(installer, _set_writer_aside)
    worker = distributed_worker.DistributedItemProcessorWorker
    installer.replace(worker, "_eval_input", _recording_input(worker._eval_input))
    installer.replace(worker, "_eval_job", _recording_job(worker._eval_job))
    component = distributed.DistributedIterationComponent
    installer.replace(component, "_map_run", _writing_map_run(component._map_run))


def _writer_fits() -> list[str]:
    problems = _batcher_fits()
    worker = distributed_worker.DistributedItemProcessorWorker
    job = inspect.getsource(worker._eval_job)
    for needed in ("self._eval_input(env_frame=env)", "env.program_state()", "job.job_output ="):
        if needed not in job:
            problems.append(f"a Map Run's child no longer runs through {needed}")
    if "self._map_run_record = map_run_record" not in inspect.getsource(worker.__init__):
        problems.append("a Map Run's worker no longer keeps its MapRunRecord")
    record = inspect.getsource(map_run_record.MapRunRecord.__init__)
    for needed in ("self.map_run_arn", "self.map_state_machine_arn"):
        if needed not in record:
            problems.append(f"MapRunRecord no longer has {needed}")
    if not hasattr(StatesErrorNameType, "StatesResultWriterFailed"):
        problems.append("States.ResultWriterFailed is gone")
    return problems


_TESTS = "tests/unit/test_distributed_map.py::"
PATCHES: tuple[Patch, ...] = (
    Patch(
        name="Distributed Map: listObjectsV2 items",
        kind="fidelity",
        why="An ItemReader with arn:aws:states:::s3:listObjectsV2 gives the Map one item per "
        "object under the prefix ('ItemReader (Map)', " + _ITEM_READER_PAGE + "), each "
        '{"Etag", "Key", "LastModified" (epoch seconds), "Size", "StorageClass"} as that '
        "page's example shows; ReaderConfig.MaxItems (up to 100,000,000) stops the reading. "
        "Reading every page is implied by MaxItems' range, not stated: not verified. Also "
        "not verified: an empty prefix as zero items, and that no other ListObjectsV2 "
        "field appears. moto read one page of 1,000 in boto's shape (ETag, a datetime, "
        "ChecksumAlgorithm), refused MaxItems without an InputType, and failed an empty "
        "prefix with States.Runtime.",
        test=_TESTS + "test_a_listing_reads_every_page",
        install=_install_listing,
        fits=_listing_fits,
    ),
    Patch(
        name="Distributed Map: tolerated failures",
        kind="fidelity",
        why="When more children fail or time out than ToleratedFailureCount, or a larger "
        "share than ToleratedFailurePercentage (0-100, an integer or a decimal; either may "
        "be a JSONata expression), the Map Run fails and the Map state fails with "
        "States.ExceedToleratedFailureThreshold, which Retry and Catch see; by default "
        "any one failure does ('Distributed Map failure threshold', " + _THRESHOLD_PAGE + "). "
        "Not verified: the failure's cause text, whether a share equal to the percentage "
        "fails (here only a larger one does), and that a threshold left out does not apply "
        "when the other is set (here it does not). moto never failed the Map, "
        "refused an integer percentage and read a ToleratedFailureCount expression as a "
        "percentage.",
        test=_TESTS + "test_failures_beyond_the_threshold_fail_the_map",
        install=_install_tolerance,
        fits=_tolerance_fits,
    ),
    Patch(
        name="Distributed Map: EXPRESS children",
        kind="fidelity",
        why="A Distributed Map's ProcessorConfig may set ExecutionType EXPRESS as well as "
        "STANDARD (required in DISTRIBUTED mode; 'Using Map state in Distributed mode', "
        + _DOCS
        + "state-map-distributed.html). moto's grammar refused EXPRESS; the children run as "
        "moto runs STANDARD ones (in-process, no execution records), so Express-only "
        "limits (5 minutes, at-least-once) are not reproduced.",
        test=_TESTS + "test_express_children_run",
        install=_install_express,
        fits=_parse_fits,
    ),
    Patch(
        name="Distributed Map: ItemBatcher",
        kind="fidelity",
        why="A Distributed Map's ItemBatcher hands each child a batch of items: Step "
        'Functions "adds the items to an Items array" and passes it as the child\'s input, '
        'with BatchInput alongside ({"BatchInput": {...}, "Items": [...]}) when set; '
        "MaxItemsPerBatch and MaxInputBytesPerBatch (at most 256 KiB, which is also the "
        "default) bound each batch, either may be a JSONata expression ('ItemBatcher "
        "(Map)', " + _BATCHER_PAGE + "). ItemSelector applies to each item before the "
        "batching ('Map state input and output fields', " + _FIELDS_PAGE + "). The Map's "
        "result has one element per batch. Not verified: that BatchInput's bytes count "
        "toward MaxInputBytesPerBatch (here the whole child input does), what happens to "
        "one item larger than MaxInputBytesPerBatch (here it goes alone in a batch), "
        "MaxInputBytesPerBatch from an expression above 256 KiB (here capped), the "
        "error for an expression that is not a positive integer (here "
        "States.QueryEvaluationError), and whether tolerated failures count items or "
        "batches (here, as before, children: batches). JSONPath's *Path fields are not "
        "reproduced: moto still refuses them. moto's grammar refused any ItemBatcher.",
        test=_TESTS + "test_items_go_to_children_in_batches",
        install=_install_batcher,
        fits=_batcher_fits,
    ),
    Patch(
        name="Distributed Map: S3 Inventory manifest reader",
        kind="fidelity",
        why="An ItemReader with arn:aws:states:::s3:getObject and ReaderConfig "
        '{"InputType": "MANIFEST"} or {"ManifestType": "S3_INVENTORY"} (not both: "you '
        "must not also specify InputType\") reads an S3 Inventory's manifest.json, then "
        "every data file it lists (gzip CSV, no header row) from its destinationBucket; "
        "each row is an item named by the manifest's fileSchema, every value a string; "
        "MaxItems stops the reading; only a CSV inventory can be read ('ItemReader (Map)', "
        + _ITEM_READER_PAGE
        + "). A manifest or file that cannot be read fails the Map with "
        "States.ItemReaderFailed ('Handling errors', " + _ERRORS_PAGE + "). Not verified: "
        "the cause texts, the order files are read in (here the manifest's), a row whose "
        "field count differs from the schema (here States.ItemReaderFailed). CSVDelimiter "
        "and CSVHeaderLocation beside the manifest form are not reproduced (refused). "
        "moto's grammar refused both forms.",
        test=_TESTS + "test_an_inventory_manifest_is_read_file_by_file",
        install=_install_manifest,
        fits=_manifest_fits,
    ),
    Patch(
        name="Distributed Map: ResultWriter",
        kind="fidelity",
        why="A JSONata Distributed Map's ResultWriter (Resource arn:aws:states:::s3:putObject, "
        "Arguments {Bucket, Prefix}, either an expression; optional WriterConfig "
        "{Transformation NONE|COMPACT|FLATTEN, OutputType JSON|JSONL}) writes the children "
        "by status under <Prefix>/<map run id>/: SUCCEEDED_n, FAILED_n (failed, timed out "
        "and aborted, each with its Error and Cause), PENDING_n and a manifest.json "
        "{DestinationBucket, MapRunArn, ResultFiles {FAILED, PENDING, SUCCEEDED: [{Key, "
        'Size}]}}; the Map\'s result is then {"MapRunArn", "ResultWriterDetails": '
        "{Bucket, Key}}; NONE (the default when exporting) keeps each child's metadata, "
        "COMPACT its output, FLATTEN spreads array outputs, a failed child is always "
        "reported as NONE; WriterConfig alone transforms the state's result ('ResultWriter "
        "(Map)', "
        + _WRITER_PAGE
        + "; the metadata as DescribeExecution gives it, "
        + _DESCRIBE_PAGE
        + "). A write that fails fails the Map with States.ResultWriterFailed. Not "
        "verified: Input and Output as JSON text, the date format, the redrive fields, "
        "file names past the 5 GB split and for JSONL (here .jsonl), the order of entries "
        "(here the items'), that results are written when the tolerated failure threshold "
        "fails the Map Run (here they are), the default Transformation with WriterConfig "
        "alone (here COMPACT). JSONPath's ResultWriter stays moto's (an empty manifest). "
        "moto refused Arguments and WriterConfig and wrote only an empty manifest.",
        test=_TESTS + "test_results_are_written_to_s3_by_status",
        install=_install_writer,
        fits=_writer_fits,
    ),
)
