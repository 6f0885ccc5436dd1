"""A Distributed Map as Step Functions runs it, where moto runs it otherwise.

moto 5.2.5 parses a Distributed Map and runs its children in-process, but
its S3 object listing reads one page in boto's shape, and failed children
never fail the Map. Each patch below names the AWS behaviour it reproduces,
with the page that documents it, and the test that holds the engine to it
(see ``PATCHES`` at the end).

Two of them change a definition's text before moto's parser reads it (a
form AWS accepts that moto's grammar refuses); the text a state machine
keeps, and DescribeStateMachine returns, is the one it was created with.
"""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Callable, Iterator
from typing import Any

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
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.parse import asl_parser, preprocessor
from moto.stepfunctions.parser.utils import camel_to_snake_case

from onceflow.patches.registry import Installer, Patch

_DOCS = "https://docs.aws.amazon.com/step-functions/latest/dg/"
_ITEM_READER_PAGE = _DOCS + "input-output-itemreader.html"
_THRESHOLD_PAGE = _DOCS + "state-map-distributed.html#maprun-fail-threshold"

# --------------------------------------------------------------------------
# Definitions rewritten before moto's parser reads them.
# --------------------------------------------------------------------------

Rewrite = Callable[[dict[str, Any]], bool]  # changes a Map state in place; True: changed


def _map_states(states: Any) -> Iterator[dict[str, Any]]:
    """Every Map state in a States object, nested Maps and Parallel branches included."""
    if not isinstance(states, dict):
        return
    for state in states.values():
        if not isinstance(state, dict):
            continue
        if state.get("Type") == "Map":
            yield state
            for inner in ("ItemProcessor", "Iterator"):
                processor = state.get(inner)
                if isinstance(processor, dict):
                    yield from _map_states(processor.get("States"))
        elif state.get("Type") == "Parallel" and isinstance(state.get("Branches"), list):
            for branch in state["Branches"]:
                if isinstance(branch, dict):
                    yield from _map_states(branch.get("States"))


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
        changed = [rewrite(state) for state in _map_states(document.get("States"))]
        if any(changed):
            definition = json.dumps(document, ensure_ascii=False)
        return original(definition)

    return staticmethod(parse)


def _install_rewrite(installer: Installer, rewrite: Rewrite) -> None:
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
        error_name = StatesErrorName(typ=StatesErrorNameType.StatesExceedToleratedFailureThreshold)
        raise FailureEventException(
            failure_event=FailureEvent(
                env=env,
                error_name=error_name,
                event_type=HistoryEventType.MapRunFailed,
                event_details=EventDetails(  # type: ignore[typeddict-item]
                    mapRunFailedEventDetails=MapRunFailedEventDetails(
                        error=error_name.error_name, cause=EXCEEDED_CAUSE
                    )
                ),
            )
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
)
