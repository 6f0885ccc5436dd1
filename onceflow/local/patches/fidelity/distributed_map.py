"""A Distributed Map as Step Functions runs it, where moto 5.2.5 runs it otherwise (each
patch's why says what moto lacked; the manifest reader stays refused: docs/local-engine.md).

Forms AWS takes that moto's grammar refuses are rewritten in the text moto's parser
reads (DescribeStateMachine still returns the text as created); fields the grammar has
no place for are set aside in the ItemProcessor's Comment, which moto keeps on the
iteration component and nothing else reads.
"""

from __future__ import annotations

import base64
import copy
import datetime
import inspect
import json
import re
import types
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError
from moto.stepfunctions.parser.api import HistoryEventType, MapRunFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name import (
    failure_event,
    states_error_name,
    states_error_name_type,
)
from moto.stepfunctions.parser.asl.component.common.string import string_expression
from moto.stepfunctions.parser.asl.component.state.exec.state_map import tolerated_failure
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader import (
    item_reader_decl,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval import (
    resource_eval_s3,
    resource_output_transformer,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import (
    distributed_iteration_component,
    iteration_component,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor import (
    distributed_item_processor,
    distributed_item_processor_worker,
    inline_item_processor_worker,
    map_run_record,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task import credentials
from moto.stepfunctions.parser.asl.eval import program_state
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.states import ItemData, MapData
from moto.stepfunctions.parser.asl.parse import asl_parser, preprocessor
from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

from onceflow.local.patches.fidelity import states_of
from onceflow.local.patches.registry import Installer, Patch, gone, lacks, takes

_DOCS = "https://docs.aws.amazon.com/step-functions/latest/dg/"
_PARSER = asl_parser.AmazonStateLanguageParser
_COMPONENT = distributed_iteration_component.DistributedIterationComponent
_WORKER = distributed_item_processor_worker.DistributedItemProcessorWorker
_INLINE_WORKER = inline_item_processor_worker.InlineItemProcessorWorker
_ERROR_NAMES = states_error_name_type.StatesErrorNameType
Install = Callable[[Installer], None]
MapRun = Callable[[Any, Any, Any], None]  # DistributedIterationComponent._map_run


def _installs(*installs: Install) -> Install:
    def install(installer: Installer) -> None:
        for each in installs:
            each(installer)

    return install


def _wrapping(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Install:
    """An install of wrap(what owner.name is then: an earlier patch's, perhaps)."""
    return lambda installer: installer.replace(owner, name, wrap(getattr(owner, name)))


def map_run_failure(env: Any, error: str, cause: str) -> Any:
    """The Map state failing as its Map Run failed (a MapRunFailed event); error names
    a StatesErrorNameType member."""
    error_name = states_error_name.StatesErrorName(typ=_ERROR_NAMES.__members__[error])
    details = MapRunFailedEventDetails(error=error_name.error_name, cause=cause)
    event = EventDetails(mapRunFailedEventDetails=details)  # type: ignore[typeddict-item]
    failure = failure_event.FailureEvent(env, error_name, HistoryEventType.MapRunFailed, event)
    return failure_event.FailureEventException(failure)


# Definitions rewritten before moto's parser reads them, and fields set aside.


def _rewriting(rewrite: Callable[[dict[str, Any], str], bool]) -> Install:
    """An install of AmazonStateLanguageParser.parse rewriting every Map state (nested
    ones too) first, rewrite(state, its query language) saying whether it changed it;
    text that is not a JSON object goes to moto's parser as it is."""

    def wrap(original: Callable[[str], Any]) -> Any:
        def parse(definition: str) -> Any:
            try:
                document = json.loads(definition)
                language: str = document.get("QueryLanguage", "JSONPath")
            except (ValueError, AttributeError):  # not a JSON object
                return original(definition)
            changed = [
                rewrite(state, state.get("QueryLanguage", language))
                for _, state, _, _ in states_of(document, language)
                if isinstance(state, dict) and state.get("Type") == "Map"
            ]
            if any(changed):
                definition = json.dumps(document, ensure_ascii=False)
            return original(definition)

        return staticmethod(parse)

    return _wrapping(_PARSER, "parse", wrap)


def _parse_fits() -> list[str]:
    if not isinstance(inspect.getattr_static(_PARSER, "parse", None), staticmethod):
        return ["AmazonStateLanguageParser.parse is no longer a static method"]
    return takes(_PARSER.parse, "definition")


_ASIDE = "onceflow-aside:"  # a Comment that starts so holds base64 JSON (nothing to escape)


def _processor(state: dict[str, Any]) -> dict[str, Any] | None:
    """A Distributed Map's ItemProcessor (None: not a Distributed Map)."""
    processor = state.get("ItemProcessor", state.get("Iterator"))
    config = processor.get("ProcessorConfig") if isinstance(processor, dict) else None
    distributed = isinstance(config, dict) and config.get("Mode") == "DISTRIBUTED"
    return processor if distributed else None  # type: ignore[return-value]


def _aside(comment: Any) -> dict[str, Any]:
    """What the rewrites set aside in a Comment (an ItemProcessor's, or moto's Comment)."""
    comment = getattr(comment, "comment", comment)
    if not isinstance(comment, str) or not comment.startswith(_ASIDE):
        return {}
    return dict(json.loads(base64.b64decode(comment[len(_ASIDE) :])))


def _set_aside(processor: dict[str, Any], field: str, value: Any) -> None:
    held = {**_aside(processor.get("Comment")), field: value}
    processor["Comment"] = _ASIDE + base64.b64encode(json.dumps(held).encode()).decode()


def _moving_aside(field: str, valid: Callable[[Any], bool]) -> Install:
    """Moves a JSONata Distributed Map's field aside when AWS takes it; otherwise (not
    valid, an Inline Map, JSONPath) it stays and moto's parser refuses it."""

    def rewrite(state: dict[str, Any], language: str) -> bool:
        processor = _processor(state)
        if language != "JSONata" or processor is None or not valid(state.get(field)):
            return False
        _set_aside(processor, field, state.pop(field))
        return True

    return _rewriting(rewrite)


def _aside_fits() -> list[str]:
    init = iteration_component.IterationComponent.__init__
    return [*_parse_fits(), *lacks(init, "self._comment = comment")]


def _is_jsonata(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("{%") and value.endswith("%}")


def _evaluated(env: Any, value: Any) -> Any:
    """A field's value, each {% %} string in it evaluated as moto evaluates a JSONata field."""
    if _is_jsonata(value):
        string_expression.StringJSONata(expression=value[2:-2].strip()).eval(env=env)
        return env.stack.pop()
    if isinstance(value, dict):
        return {key: _evaluated(env, inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_evaluated(env, inner) for inner in value]
    return value


def _json_text(value: Any) -> str:
    """JSON as Step Functions sizes and writes a payload (UTF-8, no spaces)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _grouped(
    items: list[Any], sizes: list[int], limit: int, empty: int, most: int | None = None
) -> list[list[Any]]:
    """Items in order, in groups of at most `most` whose size (empty, then each item's with
    one byte between: a comma or a newline) is at most limit; an item too large goes alone."""
    groups: list[list[Any]] = []
    total = 0
    for item, size in zip(items, sizes, strict=True):
        if groups and len(groups[-1]) != most and total + 1 + size <= limit:
            groups[-1].append(item)
            total += 1 + size
        else:
            groups.append([item])
            total = empty + size
    return groups


# The listObjectsV2 ItemReader (patch 1): moto's own reader with a ReaderConfig of
# InputType JSON (the form its grammar insists on) evaluates the Arguments, the role and
# MaxItems, and reads the JSON text the listing's handler gives.

_LISTER = resource_eval_s3.ResourceEvalS3
_LISTING = ":s3:listObjectsV2"


def _reads_json(state: dict[str, Any], language: str) -> bool:
    reader: Any = state.get("ItemReader")
    config = reader.get("ReaderConfig", {}) if isinstance(reader, dict) else None
    if not isinstance(config, dict) or not str(reader.get("Resource")).endswith(_LISTING):
        return False
    reader["ReaderConfig"] = {**config, "InputType": "JSON"}
    return True


def _as_item(listed: dict[str, Any]) -> dict[str, Any]:
    """An object as the ItemReader page's example item (boto's has ETag, a datetime and
    ChecksumAlgorithm, which moto passed on)."""
    return {
        "Etag": listed["ETag"],
        "Key": listed["Key"],
        "LastModified": int(listed["LastModified"].timestamp()),
        "Size": listed["Size"],
        "StorageClass": listed.get("StorageClass", "STANDARD"),
    }


def _list_objects_v2(env: Any, resource_runtime_part: Any, state_credentials: Any) -> None:
    """ResourceEvalS3._handle_list_objects_v2 reading every page (moto: the first)."""
    client = _LISTER._get_s3_client(resource_runtime_part, state_credentials)
    pages = client.get_paginator("list_objects_v2").paginate(**env.stack.pop())
    env.stack.append(_json_text([_as_item(o) for page in pages for o in page.get("Contents", [])]))


def _reader_fits() -> list[str]:
    handler = inspect.getattr_static(_LISTER, "_handle_list_objects_v2", None)
    json_reader = resource_output_transformer.transformer_json.ResourceOutputTransformerJson
    return [
        *_parse_fits(),
        *([] if isinstance(handler, staticmethod) else [f"{handler} is no static method"]),
        *takes(handler.__func__, "env", "resource_runtime_part", "state_credentials"),
        *takes(_LISTER._get_s3_client, "resource_runtime_part", "state_credentials"),
        *lacks(_LISTER.eval_resource, "resolver_handler(env, resource_runtime_part"),
        *lacks(item_reader_decl.ItemReader._eval_body, "resource_output_transformer.eval("),
        *lacks(json_reader, "json.loads(resource_value)", "json_list[:max_items]"),
    ]


# Tolerated failures (patch 2); EXPRESS children (patch 3).

EXCEEDED_CAUSE = "The specified tolerated failure threshold was exceeded"
EXCEEDED_ERROR = "States.ExceedToleratedFailureThreshold"
_THRESHOLDS = ("ToleratedFailureCount", "ToleratedFailurePercentage")


def _tolerance_rewrite(state: dict[str, Any], language: str) -> bool:
    """An integer percentage as a decimal (moto's grammar reads only a decimal); which
    thresholds a Distributed Map declares (or their *Path), set aside."""
    changed = type(state.get(_THRESHOLDS[1])) is int
    if changed:
        state[_THRESHOLDS[1]] = float(state[_THRESHOLDS[1]])
    processor = _processor(state)
    declared = [name for name in _THRESHOLDS if name in state or name + "Path" in state]
    if processor is None or not declared:
        return changed
    _set_aside(processor, "Tolerated", declared)
    return True


def threshold_exceeded(
    failed: int, total: int, count: int, percentage: float, declared: tuple[bool, bool]
) -> bool:
    """Whether failed of total children exceed the thresholds declared (count, percentage):
    with neither, any failure does; with one, that one decides; with both, either."""
    if not any(declared):
        return failed > 0
    by_share = declared[1] and total > 0 and failed * 100 / total > percentage
    return (declared[0] and failed > count) or by_share


def _tolerating(original: MapRun) -> MapRun:
    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        original(component, env, eval_input)
        counter = eval_input.map_run_record.item_counter
        declared = _aside(component._comment).get("Tolerated", [])
        if threshold_exceeded(
            counter.failed.get() + counter.timed_out.get(),
            len(env.stack[-1]),
            eval_input.tolerated_failure_count,
            eval_input.tolerated_failure_percentage,
            (_THRESHOLDS[0] in declared, _THRESHOLDS[1] in declared),
        ):
            env.stack.pop()
            raise map_run_failure(env, "StatesExceedToleratedFailureThreshold", EXCEEDED_CAUSE)

    return _map_run


def _count_expression(visitor: Any, ctx: Any) -> Any:
    """Preprocessor.visitTolerated_failure_count_string_jsonata (moto built a percentage)."""
    return tolerated_failure.ToleratedFailureCountStringJSONata(
        string_jsonata=visitor.visitString_jsonata(ctx=ctx.string_jsonata())
    )


def _express_as_standard(state: dict[str, Any], language: str) -> bool:
    processor = state.get("ItemProcessor")
    config = processor.get("ProcessorConfig") if isinstance(processor, dict) else None
    if not isinstance(config, dict) or config.get("ExecutionType") != "EXPRESS":
        return False
    config["ExecutionType"] = "STANDARD"
    return True


# ItemBatcher (patch 4): items, each through ItemSelector first, in batches, a child each.

MAX_BATCH_BYTES = 256 * 1024  # MaxInputBytesPerBatch's default and its largest value
_BATCH_LIMITS = {"MaxItemsPerBatch": None, "MaxInputBytesPerBatch": MAX_BATCH_BYTES}


def _batcher_is_valid(batcher: Any) -> bool:
    """An ItemBatcher AWS takes in JSONata (JSONPath's *Path fields are not reproduced)."""
    if not isinstance(batcher, dict) or not set(batcher) <= {*_BATCH_LIMITS, "BatchInput"}:
        return False
    for field, most in _BATCH_LIMITS.items():
        value = batcher.get(field, 1)
        if not _is_jsonata(value) and (type(value) is not int or not 1 <= value <= (most or value)):
            return False
    batch_input = batcher.get("BatchInput", {})
    return bool(_BATCH_LIMITS.keys() & batcher) and (
        isinstance(batch_input, dict) or _is_jsonata(batch_input)
    )


def _batch_size(env: Any, batcher: dict[str, Any], field: str) -> int | None:
    if field not in batcher:
        return None
    value = _evaluated(env, batcher[field])
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 1:
        cause = f"{field} must be a positive integer, was {value!r}"
        raise map_run_failure(env, "StatesQueryEvaluationError", cause)
    return value


def _selected_each(env: Any, selector: Any, items: list[Any]) -> list[Any]:
    """ItemSelector applied to each item by moto's worker's own step (the Map's input, on
    env's stack, as $states.input; the item as $states.context.Map.Item)."""
    selecting = types.SimpleNamespace(_parameters=None, _item_selector=selector, _env=env)
    frame = env.open_inner_frame()
    try:
        selected = []
        for index, item in enumerate(items):
            context = frame.states.context_object.context_object_data
            context["Map"] = MapData(Item=ItemData(Index=index, Value=item))
            _INLINE_WORKER._eval_input(selecting, frame)  # type: ignore[arg-type]
            selected.append(frame.stack.pop())
        return selected
    finally:
        env.delete_frame(frame)


def _batching(original: MapRun) -> MapRun:
    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        """Items selected, then batched (the ItemBatcher evaluated once for the Map Run),
        then the children, which select nothing again. A batch's child input (BatchInput
        only when given) is at most its bytes of JSON; an item too large for any goes alone."""
        batcher = _aside(component._comment).get("ItemBatcher")
        if batcher is None:
            original(component, env, eval_input)
            return
        items = env.stack.pop()
        if eval_input.item_selector is not None:
            items = _selected_each(env, eval_input.item_selector, items)
            eval_input = copy.copy(eval_input)
            eval_input.item_selector = None
        batch_input = _evaluated(env, batcher["BatchInput"]) if "BatchInput" in batcher else None
        if batch_input is not None and not isinstance(batch_input, dict):
            cause = f"BatchInput must be an object, was {batch_input!r}"
            raise map_run_failure(env, "StatesQueryEvaluationError", cause)
        head = {} if batch_input is None else {"BatchInput": batch_input}
        max_bytes = _batch_size(env, batcher, "MaxInputBytesPerBatch") or MAX_BATCH_BYTES
        max_items = _batch_size(env, batcher, "MaxItemsPerBatch")
        empty = len(_json_text({**head, "Items": []}).encode())
        sizes = [len(_json_text(item).encode()) for item in items]
        groups = _grouped(items, sizes, min(max_bytes, MAX_BATCH_BYTES), empty, max_items)
        env.stack.append([{**copy.deepcopy(head), "Items": group} for group in groups])
        original(component, env, eval_input)

    return _map_run


# ResultWriter (patch 5, JSONata): the children written to S3 by status, with a manifest.

_WRITER_RESOURCE = re.compile(r"arn:aws[a-z-]*:states:::s3:putObject")
_WRITER_CONFIG = {"Transformation": ("NONE", "COMPACT", "FLATTEN"), "OutputType": ("JSON", "JSONL")}
# "Step Functions supports individual result files of up to 5 GB": past it, the
# results go on in the next file. Where exactly AWS ends one is not verified.
MAX_RESULT_FILE_BYTES = 5 * 1024**3


def _writer_is_valid(writer: Any) -> bool:
    """A ResultWriter AWS takes. Not verified: Prefix left out (here: no prefix),
    WriterConfig's fields as expressions (here refused)."""
    if not writer or not isinstance(writer, dict):
        return False
    config, arguments = writer.get("WriterConfig", {}), writer.get("Arguments")
    if not set(writer) <= {"Resource", "Arguments", "WriterConfig"} or not isinstance(config, dict):
        return False
    if not all(value in _WRITER_CONFIG.get(key, ()) for key, value in config.items()):
        return False
    if {"Resource", "Arguments"}.isdisjoint(writer):  # WriterConfig alone
        return True
    if isinstance(arguments, dict):
        arguments_valid = "Bucket" in arguments and set(arguments) <= {"Bucket", "Prefix"}
    else:
        arguments_valid = _is_jsonata(arguments)
    return arguments_valid and bool(_WRITER_RESOURCE.fullmatch(str(writer.get("Resource"))))


# A child as the writer reports it: (index, status, output, its entry as Transformation
# NONE writes it). A Map Run's MapRunRecord holds its children's while the Map runs with a
# ResultWriter; a child's frame its input once its ItemSelector ran.
Child = tuple[int, str, Any, dict[str, Any]]
_CHILDREN = "onceflow_children"
_INPUT = "onceflow_input"
_NOT_REDRIVABLE = "Execution is SUCCEEDED and cannot be redriven"  # a child's RedriveStatusReason


def _recording_input(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def _eval_input(worker: Any, env_frame: Any) -> None:
        original(worker, env_frame)
        if getattr(worker._map_run_record, _CHILDREN, None) is not None:
            setattr(env_frame, _INPUT, copy.deepcopy(env_frame.states.get_input()))

    return _eval_input


def _child_end(ended: Any) -> tuple[str, str | None, str | None]:
    """A child's status, error and cause as its program ended."""
    if isinstance(ended, program_state.ProgramEnded):
        return "SUCCEEDED", None, None
    if isinstance(ended, program_state.ProgramError):
        details = ended.error or {}
        return "FAILED", details.get("error"), details.get("cause")
    if isinstance(ended, program_state.ProgramTimedOut):
        return "TIMED_OUT", None, None
    if isinstance(ended, program_state.ProgramStopped):
        return "ABORTED", ended.error, ended.cause
    return "FAILED", "States.Runtime", None  # moto caught an exception outside its states


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _recording_job(original: Callable[[Any, Any, Any], None]) -> Callable[[Any, Any, Any], None]:
    def _eval_job(worker: Any, env: Any, job: Any) -> None:
        """The child recorded with the metadata DescribeExecution gives (moto kept only
        its output) when its Map Run has a ResultWriter."""
        record = worker._map_run_record
        children = getattr(record, _CHILDREN, None)
        if children is None:
            original(worker, env, job)
            return
        start = _now()
        original(worker, env, job)
        status, error, cause = _child_end(env.program_state())
        succeeded = status == "SUCCEEDED"
        output = job.job_output if succeeded else None
        name, machine = str(uuid.uuid4()), record.map_state_machine_arn
        entry = {  # in key order; a None is left out
            "Cause": cause,
            "Error": error,
            "ExecutionArn": machine.replace(":stateMachine:", ":execution:", 1) + ":" + name,
            "Input": _json_text(getattr(env, _INPUT, job.job_input)),
            "InputDetails": {"Included": True},
            "Name": name,
            "Output": _json_text(output) if succeeded else None,
            "OutputDetails": {"Included": True} if succeeded else None,
            "RedriveCount": 0,
            "RedriveStatus": "NOT_REDRIVABLE" if succeeded else "REDRIVABLE_BY_MAP_RUN",
            "RedriveStatusReason": _NOT_REDRIVABLE if succeeded else None,
            "StartDate": start,
            "StateMachineArn": machine,
            "Status": status,
            "StopDate": _now(),
        }
        entry = {key: value for key, value in entry.items() if value is not None}
        children.append((job.job_index, status, output, entry))  # a list appends atomically

    return _eval_job


def transformed(children: list[Child], transformation: str) -> list[Any]:
    """Children as Transformation reports them (a failed child always as NONE)."""
    reported: list[Any] = []
    for _, status, output, entry in children:
        if status != "SUCCEEDED" or transformation == "NONE":
            reported.append(entry)
        elif transformation == "FLATTEN" and isinstance(output, list):
            reported.extend(output)
        else:
            reported.append(output)
    return reported


def result_files(entries: list[Any], output_type: str, limit: int) -> list[bytes]:
    """Entries as a status's file bodies (a JSON array, or JSON Lines), each at most limit
    bytes unless one entry alone is larger."""
    texts = [_json_text(entry).encode() for entry in entries]
    sizes = [len(text) for text in texts]
    if output_type == "JSON":
        return [b"[" + b",".join(group) + b"]" for group in _grouped(texts, sizes, limit, 2)]
    return [b"".join(text + b"\n" for text in group) for group in _grouped(texts, sizes, limit, 1)]


def _target(env: Any, writer: dict[str, Any]) -> tuple[str, str] | None:
    """The ResultWriter's Bucket and Prefix, evaluated (None: WriterConfig alone)."""
    if "Arguments" not in writer:
        return None
    arguments = _evaluated(env, writer["Arguments"])
    given = arguments if isinstance(arguments, dict) else {}
    bucket, prefix = given.get("Bucket"), given.get("Prefix", "")
    if not isinstance(bucket, str) or not bucket or not isinstance(prefix, str):
        cause = f"ResultWriter Arguments must give a Bucket and a Prefix string, gave {arguments!r}"
        raise map_run_failure(env, "StatesQueryEvaluationError", cause)
    return bucket, prefix


def _export(
    env: Any, target: tuple[str, str], config: dict[str, Any], arn: str, children: list[Child]
) -> dict[str, Any]:
    """The results written under <Prefix>/<map run id>/; the Map's result, pointing at them."""
    bucket, prefix = target
    base = f"{prefix}{'/' if prefix and not prefix.endswith('/') else ''}{arn.split(':')[-1]}/"
    output_type = config.get("OutputType", "JSON")
    succeeded = [child for child in children if child[1] == "SUCCEEDED"]
    by_status = {
        "FAILED": [entry for _, status, _, entry in children if status != "SUCCEEDED"],
        "PENDING": [],  # every child ran: none was left unstarted by a failing Map Run
        "SUCCEEDED": transformed(succeeded, config.get("Transformation", "NONE")),
    }
    details = env.aws_execution_details  # an S3 client as moto's writer makes one
    role = credentials.StateCredentials(role_arn=details.role_arn)
    client: Any = boto_client_for(region=details.region, service="s3", state_credentials=role)
    files: dict[str, list[dict[str, Any]]] = {}
    try:
        for status, entries in by_status.items():
            files[status] = []
            bodies = result_files(entries, output_type, MAX_RESULT_FILE_BYTES)
            for number, body in enumerate(bodies):
                key = f"{base}{status}_{number}.{output_type.lower()}"
                client.put_object(Bucket=bucket, Key=key, Body=body)
                files[status].append({"Key": key, "Size": len(body)})
        manifest = {"DestinationBucket": bucket, "MapRunArn": arn, "ResultFiles": files}
        client.put_object(Bucket=bucket, Key=base + "manifest.json", Body=_json_text(manifest))
    except ClientError as exc:
        raise map_run_failure(env, "StatesResultWriterFailed", str(exc)) from exc
    return {
        "MapRunArn": arn,
        "ResultWriterDetails": {"Bucket": bucket, "Key": base + "manifest.json"},
    }


def _writing(original: MapRun) -> MapRun:
    def _map_run(component: Any, env: Any, eval_input: Any) -> None:
        """The children recorded and the Map's result replaced; the results are written
        also when the Map Run fails on its tolerated failures ("PENDING_n.json ... weren't
        started because the Map Run failed")."""
        writer = _aside(component._comment).get("ResultWriter")
        if writer is None:
            original(component, env, eval_input)
            return
        target, config = _target(env, writer), writer.get("WriterConfig", {})
        record = eval_input.map_run_record
        children: list[Child] = []
        setattr(record, _CHILDREN, children)
        try:
            original(component, env, eval_input)
        except failure_event.FailureEventException as failure:
            error, _ = failure.extract_error_cause_pair() or (None, None)
            if error == EXCEEDED_ERROR and target is not None:
                _export(env, target, config, record.map_run_arn, sorted(children))
            raise
        finally:
            setattr(record, _CHILDREN, None)  # children that end after are not recorded
        env.stack.pop()  # the children's outputs, as moto collected them
        if target is None:  # WriterConfig alone: the results stay the state's
            env.stack.append(transformed(sorted(children), config.get("Transformation", "COMPACT")))
        else:
            env.stack.append(_export(env, target, config, record.map_run_arn, sorted(children)))

    return _map_run


_ITEM_READER = f"('ItemReader (Map)', {_DOCS}input-output-itemreader.html)"
_TESTS = "tests/unit/test_distributed_map.py::"
PATCHES: tuple[Patch, ...] = (
    Patch(
        name="Distributed Map: listObjectsV2 items",
        kind="fidelity",
        why="An s3:listObjectsV2 ItemReader gives one item per object under the prefix, each "
        '{"Etag", "Key", "LastModified" (epoch seconds), "Size", "StorageClass"} as the '
        "page's example shows; ReaderConfig.MaxItems (at most 100,000,000) stops it "
        f"{_ITEM_READER}. Not verified: every page read (implied by MaxItems' range), an empty "
        "prefix as zero items, no other field. moto read one page of 1,000 in boto's shape (ETag, "
        "a datetime, ChecksumAlgorithm), refused MaxItems without InputType and failed an empty "
        "prefix (States.Runtime).",
        test=_TESTS + "test_a_listing_reads_every_page",
        # A listing needs no ReaderConfig on AWS; moto's grammar insists on an InputType.
        install=_installs(
            _rewriting(_reads_json),
            lambda installer: installer.replace(
                _LISTER, "_handle_list_objects_v2", staticmethod(_list_objects_v2)
            ),
        ),
        fits=_reader_fits,
    ),
    Patch(
        name="Distributed Map: tolerated failures",
        kind="fidelity",
        why="Children failed or timed out beyond ToleratedFailureCount, or a share beyond "
        "ToleratedFailurePercentage (0-100, integer or decimal; either may be a JSONata "
        "expression), fail the Map Run and the Map with States.ExceedToleratedFailureThreshold, "
        "which Retry and Catch see; by default any one failure does ('Distributed Map failure "
        f"threshold', {_DOCS}state-map-distributed.html#maprun-fail-threshold). Not verified: the "
        "cause text, a share equal to the percentage (here within), that a threshold left out "
        "does not apply when the other is set (here it does not). moto never failed the Map, "
        "refused an integer percentage, read a count expression as a percentage.",
        test=_TESTS + "test_failures_beyond_the_threshold_fail_the_map",
        install=_installs(
            _rewriting(_tolerance_rewrite),
            _wrapping(_COMPONENT, "_map_run", _tolerating),
            _wrapping(
                preprocessor.Preprocessor,
                "visitTolerated_failure_count_string_jsonata",
                lambda _: _count_expression,
            ),
        ),
        fits=lambda: [
            *_aside_fits(),
            *lacks(_COMPONENT._map_run, "env.stack.append(outputs)"),
            *lacks(_COMPONENT._eval_body, "except FailureEventException"),
            *gone(preprocessor.Preprocessor, "visitTolerated_failure_count_string_jsonata"),
            *gone(_ERROR_NAMES, "StatesExceedToleratedFailureThreshold"),
        ],
    ),
    Patch(
        name="Distributed Map: EXPRESS children",
        kind="fidelity",
        why="ProcessorConfig.ExecutionType may be EXPRESS as well as STANDARD in DISTRIBUTED mode "
        f"('Using Map state in Distributed mode', {_DOCS}state-map-distributed.html). moto's "
        "grammar refused EXPRESS; the children run as moto runs STANDARD ones (in-process, no "
        "execution records): Express-only limits (5 minutes, at-least-once) are not reproduced.",
        test=_TESTS + "test_express_children_run",
        install=_rewriting(_express_as_standard),
        fits=_parse_fits,
    ),
    Patch(
        name="Distributed Map: ItemBatcher",
        kind="fidelity",
        why='An ItemBatcher "adds the items to an Items array" passed as a child\'s input, with '
        'BatchInput alongside ({"BatchInput": {...}, "Items": [...]}) when set; MaxItemsPerBatch '
        "and MaxInputBytesPerBatch (at most and by default 256 KiB), either a JSONata expression, "
        f"bound each batch ('ItemBatcher (Map)', {_DOCS}input-output-itembatcher.html); "
        "ItemSelector applies to each item before batching ('Map state input and output fields', "
        f"{_DOCS}input-output-fields-dist-map.html); the Map's result has one element per batch. "
        "Not verified: BatchInput counted in MaxInputBytesPerBatch (here the whole child input "
        "is), an item larger than it (here alone in a batch), an expression above 256 KiB (here "
        "capped) or not a positive integer (here States.QueryEvaluationError), tolerance counting "
        "items or batches (here batches). JSONPath's *Path fields stay refused. moto's grammar "
        "refused any ItemBatcher.",
        test=_TESTS + "test_items_go_to_children_in_batches",
        install=_installs(
            _moving_aside("ItemBatcher", _batcher_is_valid),
            _wrapping(_COMPONENT, "_map_run", _batching),
        ),
        fits=lambda: [
            *_aside_fits(),
            *lacks(_COMPONENT._map_run, "env.stack.pop()"),
            *takes(_INLINE_WORKER._eval_input, "self", "env_frame"),
            *lacks(_INLINE_WORKER._eval_input, "self._item_selector", "self._env.stack[-1]"),
            *lacks(
                distributed_item_processor.DistributedItemProcessor._create_worker,
                "item_selector=eval_input.item_selector",
            ),
        ],
    ),
    Patch(
        name="Distributed Map: ResultWriter",
        kind="fidelity",
        why="A JSONata ResultWriter (Resource arn:aws:states:::s3:putObject, Arguments {Bucket, "
        "Prefix}, either an expression; WriterConfig {Transformation NONE|COMPACT|FLATTEN, "
        "OutputType JSON|JSONL}) writes the children by status under <Prefix>/<map run id>/: "
        "SUCCEEDED_n, FAILED_n (failed, timed out and aborted, with Error and Cause), PENDING_n, "
        "and manifest.json {DestinationBucket, MapRunArn, ResultFiles {FAILED, PENDING, "
        'SUCCEEDED: [{Key, Size}]}}; the Map\'s result is {"MapRunArn", "ResultWriterDetails": '
        "{Bucket, Key}}. NONE (the default then) keeps each child's metadata, COMPACT its output, "
        "FLATTEN spreads array outputs, a failed child is always as NONE; WriterConfig alone "
        "transforms the state's result ('ResultWriter (Map)', "
        f"{_DOCS}input-output-resultwriter.html; the metadata as DescribeExecution gives it, "
        "https://docs.aws.amazon.com/step-functions/latest/apireference/"
        "API_DescribeExecution.html). "
        "A failed write fails the Map with States.ResultWriterFailed. Not verified: Input and "
        "Output as JSON text, the date format, the redrive fields, an EXPRESS child's ARN (here a "
        "STANDARD one's), file names past the 5 GB split and for JSONL (here .jsonl), the order "
        "of entries (here the items'), results written when tolerance fails the Map Run (here "
        "they are), the default Transformation with WriterConfig alone (here COMPACT). JSONPath's "
        "ResultWriter stays moto's (an empty manifest; moto refused Arguments and WriterConfig).",
        test=_TESTS + "test_results_are_written_to_s3_by_status",
        install=_installs(
            _moving_aside("ResultWriter", _writer_is_valid),
            _wrapping(_WORKER, "_eval_input", _recording_input),
            _wrapping(_WORKER, "_eval_job", _recording_job),
            _wrapping(_COMPONENT, "_map_run", _writing),
        ),
        fits=lambda: [
            *_aside_fits(),
            *lacks(
                _WORKER._eval_job,
                "self._eval_input(env_frame=env)",
                "job.job_output =",
                "env.program_state()",
            ),
            *lacks(_WORKER.__init__, "self._map_run_record = map_run_record"),
            *lacks(
                map_run_record.MapRunRecord.__init__,
                "self.map_run_arn",
                "self.map_state_machine_arn",
            ),
            *takes(boto_client_for, "region", "service", "state_credentials"),
            *gone(_ERROR_NAMES, "StatesResultWriterFailed", "StatesQueryEvaluationError"),
        ],
    ),
)
