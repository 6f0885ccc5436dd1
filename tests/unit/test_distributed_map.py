"""A Distributed Map run on the engine as Step Functions runs it (patches/distributed_map.py)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval import (
    resource_eval_s3,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import (
    distributed_iteration_component as distributed,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor import (
    distributed_item_processor_worker as distributed_worker,
)
from moto.stepfunctions.parser.asl.parse import asl_parser

from onceflow.local import patches
from onceflow.local.engine import ExecutionResult, LocalEngine
from onceflow.local.patches import distributed_map

ROLE = "arn:aws:iam::123456789012:role/probe"
EXCEEDED = "States.ExceedToleratedFailureThreshold"
PROCESSOR = {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
# A child that fails (Error "Boom") when its item says so, and returns it otherwise.
FAILING_CHILD: dict[str, Any] = {
    "ProcessorConfig": PROCESSOR,
    "StartAt": "Check",
    "States": {
        "Check": {
            "Type": "Choice",
            "Choices": [{"Condition": "{% $states.input.fail %}", "Next": "Bad"}],
            "Default": "Good",
        },
        "Bad": {"Type": "Fail", "Error": "Boom", "Cause": "the item said so"},
        "Good": {"Type": "Pass", "End": True},
    },
}
_NAMES = iter(range(10**6))


def _run(engine: LocalEngine, map_state: dict[str, Any], execution_input: Any) -> ExecutionResult:
    """Run a one-state JSONata machine whose state is map_state."""
    definition = {"QueryLanguage": "JSONata", "StartAt": "Map", "States": {"Map": map_state}}
    arn = engine.client("stepfunctions").create_state_machine(
        name=f"dmap-{threading.get_ident()}-{next(_NAMES)}",
        definition=json.dumps(definition),
        roleArn=ROLE,
    )["stateMachineArn"]
    return engine.execute(arn, execution_input)


def _listing(bucket: str, **fields: Any) -> dict[str, Any]:
    """A Distributed Map over the objects under the input's prefix; each child returns its item."""
    return {
        "Type": "Map",
        "ItemReader": {
            "Resource": "arn:aws:states:::s3:listObjectsV2",
            "Arguments": {"Bucket": bucket, "Prefix": "{% $states.input.prefix %}"},
        },
        "ItemProcessor": {
            "ProcessorConfig": PROCESSOR,
            "StartAt": "Echo",
            "States": {"Echo": {"Type": "Pass", "End": True}},
        },
        "MaxConcurrency": 20,
        "End": True,
        **fields,
    }


def _put(engine: LocalEngine, keys: list[str]) -> None:
    s3 = engine.client("s3")
    bucket = engine.ref("IngestBucket")
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())


def test_a_listing_reads_every_page(engine: LocalEngine) -> None:
    bucket = engine.ref("IngestBucket")
    keys = [f"many/{n:05}.json" for n in range(1_050)]  # past one page of 1,000
    _put(engine, [*keys, "other/outside.json"])
    result = _run(engine, _listing(bucket), {"prefix": "many/"})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert sorted(item["Key"] for item in result.output) == keys

    # Each item as AWS gives it to the child: exactly these fields.
    head = engine.client("s3").head_object(Bucket=bucket, Key=keys[7])
    item = next(i for i in result.output if i["Key"] == keys[7])
    assert item == {
        "Etag": head["ETag"],
        "Key": keys[7],
        "LastModified": int(head["LastModified"].timestamp()),
        "Size": len(keys[7]),
        "StorageClass": "STANDARD",
    }
    assert type(item["LastModified"]) is int
    # The execution's output is JSON (moto's datetimes broke DescribeExecution).
    described = engine.client("stepfunctions").describe_execution(executionArn=result.arn)
    assert len(json.loads(described["output"])) == len(keys)


def test_max_items_stops_a_listing(engine: LocalEngine) -> None:
    bucket = engine.ref("IngestBucket")
    keys = [f"few/{n}.json" for n in range(6)]
    _put(engine, keys)
    counted = "{% $count($states.result) %}"
    # No InputType: a listing needs none on AWS (moto's grammar insisted on one).
    fixed = _listing(bucket, ReaderConfig={"MaxItems": 4}, Output=counted)
    fixed["ItemReader"]["ReaderConfig"] = fixed.pop("ReaderConfig")
    assert _run(engine, fixed, {"prefix": "few/"}).output == 4
    computed = _listing(bucket, Output=counted)
    computed["ItemReader"]["ReaderConfig"] = {"MaxItems": "{% $states.input.max %}"}
    assert _run(engine, computed, {"prefix": "few/", "max": 2}).output == 2
    assert _run(engine, _listing(bucket, Output=counted), {"prefix": "few/"}).output == 6


def test_an_empty_prefix_gives_zero_items(engine: LocalEngine) -> None:
    bucket = engine.ref("IngestBucket")
    _put(engine, ["full/a.json"])
    result = _run(engine, _listing(bucket), {"prefix": "empty/"})
    assert (result.status, result.output) == ("SUCCEEDED", [])


def _items(failing: int, total: int) -> dict[str, Any]:
    return {"items": [{"n": n, "fail": n < failing} for n in range(total)]}


def _tolerating(**fields: Any) -> dict[str, Any]:
    return {
        "Type": "Map",
        "Items": "{% $states.input.items %}",
        "ItemProcessor": FAILING_CHILD,
        "MaxConcurrency": 4,
        "End": True,
        **fields,
    }


def test_failures_beyond_the_threshold_fail_the_map(engine: LocalEngine) -> None:
    # Default: no failure tolerated.
    failed = _run(engine, _tolerating(), _items(failing=1, total=4))
    assert (failed.status, failed.error) == ("FAILED", EXCEEDED)
    assert "MapRunFailed" in [event["type"] for event in failed.events]
    # 1 of 4 is 25%: within 50% (an integer, which moto's grammar refused) ...
    within = _run(engine, _tolerating(ToleratedFailurePercentage=50), _items(1, 4))
    assert within.status == "SUCCEEDED", (within.error, within.cause)
    assert [item["n"] for item in within.output if item is not None] == [1, 2, 3]
    # ... 3 of 4 is 75%: beyond it.
    beyond = _run(engine, _tolerating(ToleratedFailurePercentage=50), _items(3, 4))
    assert (beyond.status, beyond.error) == ("FAILED", EXCEEDED)
    # A percentage of 0 fails on one failure.
    zero = _run(engine, _tolerating(ToleratedFailurePercentage=0), _items(1, 4))
    assert (zero.status, zero.error) == ("FAILED", EXCEEDED)


def test_no_failure_is_within_any_threshold(engine: LocalEngine) -> None:
    result = _run(engine, _tolerating(), _items(failing=0, total=4))
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [item["n"] for item in result.output] == [0, 1, 2, 3]


@pytest.mark.parametrize("count", [1, "{% $states.input.tolerated %}"])
def test_a_failure_count_is_a_count(engine: LocalEngine, count: Any) -> None:
    # With only a count declared, the default percentage of 0 does not apply; an
    # expression is a count too (moto read it as a percentage).
    state = _tolerating(ToleratedFailureCount=count)
    one = _run(engine, state, {**_items(1, 4), "tolerated": 1})
    assert one.status == "SUCCEEDED", (one.error, one.cause)
    two = _run(engine, state, {**_items(2, 4), "tolerated": 1})
    assert (two.status, two.error) == ("FAILED", EXCEEDED)


def test_a_failure_count_is_a_count_in_jsonpath_too(engine: LocalEngine) -> None:
    # The thresholds a JSONPath Map declares are noted as a JSONata Map's are.
    child = {
        "ProcessorConfig": PROCESSOR,
        "StartAt": "Check",
        "States": {
            "Check": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.fail", "BooleanEquals": True, "Next": "Bad"}],
                "Default": "Good",
            },
            "Bad": {"Type": "Fail", "Error": "Boom"},
            "Good": {"Type": "Pass", "End": True},
        },
    }
    state = {"Type": "Map", "ItemsPath": "$.items", "ItemProcessor": child, "End": True}
    definition = {"StartAt": "Map", "States": {"Map": {**state, "ToleratedFailureCount": 1}}}
    arn = engine.client("stepfunctions").create_state_machine(
        name="dmap-jsonpath-count", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    assert engine.execute(arn, _items(failing=1, total=4)).status == "SUCCEEDED"
    failed = engine.execute(arn, _items(failing=2, total=4))
    assert (failed.status, failed.error) == ("FAILED", EXCEEDED)


def test_either_threshold_exceeded_fails_the_map(engine: LocalEngine) -> None:
    both = _tolerating(ToleratedFailureCount=3, ToleratedFailurePercentage=20)
    result = _run(engine, both, _items(failing=1, total=4))  # 1 <= 3, but 25% > 20%
    assert (result.status, result.error) == ("FAILED", EXCEEDED)


def test_the_threshold_failure_is_caught(engine: LocalEngine) -> None:
    state = _tolerating(
        Catch=[{"ErrorEquals": [EXCEEDED], "Next": "Caught", "Output": "{% $states.errorOutput %}"}]
    )
    state.pop("End")
    definition = {
        "QueryLanguage": "JSONata",
        "StartAt": "Map",
        "States": {"Map": state, "Caught": {"Type": "Pass", "End": True}},
    }
    arn = engine.client("stepfunctions").create_state_machine(
        name="dmap-caught", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    result = engine.execute(arn, _items(failing=2, total=4))
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["Error"] == EXCEEDED
    assert result.states_entered == ["Map", "Caught"]


def test_the_definition_is_kept_as_written(engine: LocalEngine) -> None:
    # The rewrite is for moto's parser only: DescribeStateMachine returns the text as created.
    definition = json.dumps(
        {
            "QueryLanguage": "JSONata",
            "StartAt": "Map",
            "States": {"Map": _tolerating(ToleratedFailurePercentage=50)},
        }
    )
    sfn = engine.client("stepfunctions")
    arn = sfn.create_state_machine(name="dmap-kept", definition=definition, roleArn=ROLE)[
        "stateMachineArn"
    ]
    assert sfn.describe_state_machine(stateMachineArn=arn)["definition"] == definition


@pytest.mark.parametrize(
    ("failed", "total", "count", "percentage", "declared", "exceeded"),
    [
        (0, 0, 0, 0.0, (False, False), False),
        (1, 10, 0, 0.0, (False, False), True),
        (5, 10, 0, 50.0, (False, True), False),  # equal is not beyond
        (6, 10, 0, 50.0, (False, True), True),
        (6, 10, 6, 0.0, (True, False), False),
        (7, 10, 6, 0.0, (True, False), True),
        (2, 10, 6, 10.0, (True, True), True),
    ],
)
def test_threshold_arithmetic(
    failed: int,
    total: int,
    count: int,
    percentage: float,
    declared: tuple[bool, bool],
    exceeded: bool,
) -> None:
    assert (
        distributed_map.threshold_exceeded(failed, total, count, percentage, declared) is exceeded
    )


def test_the_patches_are_undone_when_the_engine_stops() -> None:
    lister = resource_eval_s3.ResourceEvalS3
    component = distributed.DistributedIterationComponent
    before = (vars(lister)["_handle_list_objects_v2"], vars(component)["_map_run"])
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0):
        assert vars(lister)["_handle_list_objects_v2"] is not before[0]
        assert vars(component)["_map_run"] is not before[1]
        current = patches.installed()
        assert current is not None
        assert {p.name for p in distributed_map.PATCHES} <= {p.name for p in current.patches}
    assert patches.installed() is None
    assert (vars(lister)["_handle_list_objects_v2"], vars(component)["_map_run"]) == before


def test_express_children_run(engine: LocalEngine) -> None:
    express = {**FAILING_CHILD, "ProcessorConfig": {**PROCESSOR, "ExecutionType": "EXPRESS"}}
    result = _run(engine, _tolerating(ItemProcessor=express), _items(failing=0, total=3))
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [item["n"] for item in result.output] == [0, 1, 2]


def test_each_patch_names_the_aws_behaviour_and_its_test() -> None:
    text = Path(__file__).read_text(encoding="utf-8")
    for patch in distributed_map.PATCHES:
        assert patch.kind == "fidelity" and len(patch.why) > 80, patch.name
        assert "docs.aws.amazon.com" in patch.why, patch.name
        path, _, name = patch.test.partition("::")
        assert path == "tests/unit/test_distributed_map.py" and f"def {name}(" in text
        assert patch.problems() == [], patch.name


# --------------------------------------------------------------------------
# ItemBatcher
# --------------------------------------------------------------------------

ECHO = {
    "ProcessorConfig": PROCESSOR,
    "StartAt": "Echo",
    "States": {"Echo": {"Type": "Pass", "End": True}},
}


def _batching(batcher: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Distributed Map over the input's items whose children return their input."""
    return {
        "Type": "Map",
        "Items": "{% $states.input.items %}",
        "ItemProcessor": ECHO,
        "ItemBatcher": batcher,
        "MaxConcurrency": 4,
        "End": True,
        **fields,
    }


def test_items_go_to_children_in_batches(engine: LocalEngine) -> None:
    items = [{"n": n} for n in range(25)]
    batcher = {
        "MaxItemsPerBatch": 10,
        "BatchInput": {"run": "{% $states.input.run %}", "fixed": [1, "two"]},
    }
    result = _run(engine, _batching(batcher), {"items": items, "run": "r-7"})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    # One child per batch; each child's input is {"BatchInput", "Items"}, BatchInput
    # evaluated from the Map's input.
    assert [len(child["Items"]) for child in result.output] == [10, 10, 5]
    assert [item for child in result.output for item in child["Items"]] == items
    for child in result.output:
        assert list(child) == ["BatchInput", "Items"]
        assert child["BatchInput"] == {"run": "r-7", "fixed": [1, "two"]}


def test_a_listing_in_batches_of_an_expression(engine: LocalEngine) -> None:
    bucket = engine.ref("IngestBucket")
    keys = [f"batched/{n:02}.json" for n in range(25)]
    _put(engine, keys)
    state = _listing(bucket, ItemBatcher={"MaxItemsPerBatch": "{% $states.input.per %}"})
    result = _run(engine, state, {"prefix": "batched/", "per": 10})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    # No BatchInput configured: the child's input has Items only.
    assert [list(child) for child in result.output] == [["Items"]] * 3
    assert [len(child["Items"]) for child in result.output] == [10, 10, 5]
    listed = [item["Key"] for child in result.output for item in child["Items"]]
    assert sorted(listed) == keys
    assert set(result.output[0]["Items"][0]) == {
        "Etag",
        "Key",
        "LastModified",
        "Size",
        "StorageClass",
    }


def _utf8_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_max_input_bytes_splits_batches_in_utf8(engine: LocalEngine) -> None:
    # Each item is {"s":"éééééééééé"}: 18 characters but 28 bytes in UTF-8. A child's
    # input {"Items":[...]} of k items is 12 + 28k + (k - 1) bytes: 3 fit in 100
    # (98 bytes), 4 do not (127); counted in characters, 4 would (87).
    items = [{"s": "é" * 10} for _ in range(7)]
    result = _run(engine, _batching({"MaxInputBytesPerBatch": 100}), {"items": items})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [len(child["Items"]) for child in result.output] == [3, 3, 1]
    assert [_utf8_size(child) for child in result.output] == [98, 98, 40]
    # MaxItemsPerBatch too: whichever limit is reached first closes the batch.
    both = _batching({"MaxInputBytesPerBatch": 100, "MaxItemsPerBatch": 2})
    assert [len(c["Items"]) for c in _run(engine, both, {"items": items}).output] == [2, 2, 2, 1]


def test_an_item_larger_than_the_batch_goes_alone(engine: LocalEngine) -> None:
    items = [{"s": "a"}, {"s": "b" * 200}, {"s": "c"}, {"s": "d"}]
    result = _run(engine, _batching({"MaxInputBytesPerBatch": 40}), {"items": items})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert [child["Items"] for child in result.output] == [items[:1], items[1:2], items[2:]]


def test_item_selector_runs_per_item_before_batching(engine: LocalEngine) -> None:
    selector = {
        "n": "{% $states.context.Map.Item.Value.n %}",
        "index": "{% $states.context.Map.Item.Index %}",
        "tag": "{% $states.input.tag %}",
    }
    state = _batching({"MaxItemsPerBatch": 2}, ItemSelector=selector)
    items = [{"n": n * 10, "unused": True} for n in range(5)]
    result = _run(engine, state, {"items": items, "tag": "t"})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    # Each item was selected on its own (its own index, its own value), then batched,
    # and the batch was not selected again.
    assert [child["Items"] for child in result.output] == [
        [{"n": 0, "index": 0, "tag": "t"}, {"n": 10, "index": 1, "tag": "t"}],
        [{"n": 20, "index": 2, "tag": "t"}, {"n": 30, "index": 3, "tag": "t"}],
        [{"n": 40, "index": 4, "tag": "t"}],
    ]


def test_a_failed_batch_is_one_failed_child(engine: LocalEngine) -> None:
    # A child fails when an item of its batch says so; tolerance counts children.
    child = {
        "ProcessorConfig": PROCESSOR,
        "StartAt": "Check",
        "States": {
            "Check": {
                "Type": "Choice",
                "Choices": [{"Condition": "{% true in $states.input.Items.fail %}", "Next": "Bad"}],
                "Default": "Good",
            },
            "Bad": {"Type": "Fail", "Error": "Boom", "Cause": "an item said so"},
            "Good": {"Type": "Pass", "End": True},
        },
    }
    items = _items(failing=1, total=25)  # item 0 fails: the first of 3 batches, 33%
    within = _batching({"MaxItemsPerBatch": 10}, ItemProcessor=child, ToleratedFailurePercentage=40)
    result = _run(engine, within, items)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output[0] is None and [len(c["Items"]) for c in result.output[1:]] == [10, 5]
    beyond = _batching({"MaxItemsPerBatch": 10}, ItemProcessor=child, ToleratedFailurePercentage=30)
    failed = _run(engine, beyond, items)
    assert (failed.status, failed.error) == ("FAILED", EXCEEDED)


def test_a_batch_size_that_is_not_a_positive_integer(engine: LocalEngine) -> None:
    sfn = engine.client("stepfunctions")
    for batcher in ({"MaxItemsPerBatch": 0}, {"MaxInputBytesPerBatch": 256 * 1024 + 1}, {}):
        definition: dict[str, Any] = {"QueryLanguage": "JSONata", "StartAt": "Map"}
        definition["States"] = {"Map": _batching(batcher)}
        # Refused as moto refuses any definition its grammar does not read.
        with pytest.raises(ClientError, match="ItemBatcher"):
            sfn.create_state_machine(
                name="dmap-bad-batcher", definition=json.dumps(definition), roleArn=ROLE
            )
    computed = _batching({"MaxItemsPerBatch": "{% $states.input.per %}"})
    result = _run(engine, computed, {"items": [1, 2, 3], "per": 0})
    assert (result.status, result.error) == ("FAILED", "States.QueryEvaluationError")


def test_the_batcher_is_undone_when_the_engine_stops() -> None:
    parser = asl_parser.AmazonStateLanguageParser
    component = distributed.DistributedIterationComponent
    before = (vars(parser)["parse"], vars(component)["_map_run"])
    definition = json.dumps(
        {
            "QueryLanguage": "JSONata",
            "StartAt": "Map",
            "States": {"Map": _batching({"MaxItemsPerBatch": 2})},
        }
    )
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0) as engine:
        arn = engine.client("stepfunctions").create_state_machine(
            name="dmap-undo", definition=definition, roleArn=ROLE
        )["stateMachineArn"]
        result = engine.execute(arn, {"items": [1, 2, 3]})
        assert [child["Items"] for child in result.output] == [[1, 2], [3]]
    assert (vars(parser)["parse"], vars(component)["_map_run"]) == before
    with pytest.raises(Exception, match="ItemBatcher"):  # moto's grammar refuses it again
        parser.parse(definition)


# --------------------------------------------------------------------------
# ItemReader over an S3 Inventory manifest: not reproduced, refused
# --------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["JSONPath", "JSONata"])
@pytest.mark.parametrize(
    "config", [{"InputType": "MANIFEST"}, {"ManifestType": "S3_INVENTORY"}], ids=str
)
def test_an_inventory_manifest_reader_is_refused(
    engine: LocalEngine, language: str, config: dict[str, str]
) -> None:
    """AWS reads an S3 Inventory through such a reader ('ItemReader (Map)'); the engine
    refuses the definition (harsher, never kinder: docs/local-engine.md, Known moto gaps)."""
    arguments = "Arguments" if language == "JSONata" else "Parameters"
    reader = {"Resource": "arn:aws:states:::s3:getObject", "ReaderConfig": config,
              arguments: {"Bucket": "b", "Key": "manifest.json"}}  # fmt: skip
    definition = {"QueryLanguage": language, "StartAt": "Map",
                  "States": {"Map": {"Type": "Map", "ItemReader": reader, "ItemProcessor": ECHO,
                                     "End": True}}}  # fmt: skip
    with pytest.raises(ClientError, match="InvalidDefinition"):
        engine.client("stepfunctions").create_state_machine(
            name="dmap-manifest", definition=json.dumps(definition), roleArn=ROLE
        )


# --------------------------------------------------------------------------
# ResultWriter
# --------------------------------------------------------------------------


def _writing(writer: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Distributed Map over the input's items (a child fails when its item says so)
    with a ResultWriter."""
    return _tolerating(ResultWriter=writer, **fields)


def _export_to(bucket: Any, prefix: Any, **config: str) -> dict[str, Any]:
    writer: dict[str, Any] = {
        "Resource": "arn:aws:states:::s3:putObject",
        "Arguments": {"Bucket": bucket, "Prefix": prefix},
    }
    if config:
        writer["WriterConfig"] = config
    return writer


def _s3_json(engine: LocalEngine, bucket: str, key: str) -> Any:
    return json.loads(engine.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def test_results_are_written_to_s3_by_status(engine: LocalEngine) -> None:
    bucket = engine.ref("OutputBucket")
    writer = _export_to("{% $states.input.bucket %}", "{% 'runs/' & $states.input.run %}")
    state = _writing(writer, ToleratedFailurePercentage=100)
    result = _run(engine, state, {**_items(failing=1, total=3), "bucket": bucket, "run": "r7"})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    # The Map's result points at the manifest rather than holding the results.
    map_run_arn = result.output["MapRunArn"]
    run_id = map_run_arn.rsplit(":", 1)[-1]
    manifest_key = f"runs/r7/{run_id}/manifest.json"
    assert result.output == {
        "MapRunArn": map_run_arn,
        "ResultWriterDetails": {"Bucket": bucket, "Key": manifest_key},
    }
    assert ":mapRun:" in map_run_arn
    manifest = _s3_json(engine, bucket, manifest_key)
    listed = engine.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"runs/r7/{run_id}/")
    sizes = {o["Key"]: o["Size"] for o in listed["Contents"]}
    assert manifest == {
        "DestinationBucket": bucket,
        "MapRunArn": map_run_arn,
        "ResultFiles": {
            "FAILED": [{"Key": f"runs/r7/{run_id}/FAILED_0.json", "Size": ANY_SIZE}],
            "PENDING": [],
            "SUCCEEDED": [{"Key": f"runs/r7/{run_id}/SUCCEEDED_0.json", "Size": ANY_SIZE}],
        },
    }
    for files in manifest["ResultFiles"].values():
        for file in files:
            assert file["Size"] == sizes[file["Key"]]
    succeeded = _s3_json(engine, bucket, f"runs/r7/{run_id}/SUCCEEDED_0.json")
    failed = _s3_json(engine, bucket, f"runs/r7/{run_id}/FAILED_0.json")
    # NONE (the default when exporting): each child's output with its metadata.
    assert [json.loads(entry["Output"]) for entry in succeeded] == [
        {"n": 1, "fail": False},
        {"n": 2, "fail": False},
    ]
    assert [json.loads(entry["Input"]) for entry in succeeded] == [
        {"n": 1, "fail": False},
        {"n": 2, "fail": False},
    ]
    child_machine = map_run_arn.replace(":mapRun:", ":stateMachine:").rsplit(":", 1)[0]
    for entry in succeeded:
        assert entry["Status"] == "SUCCEEDED" and entry["StateMachineArn"] == child_machine
        assert entry["ExecutionArn"] == (
            child_machine.replace(":stateMachine:", ":execution:") + ":" + entry["Name"]
        )
        assert {"Error", "Cause"}.isdisjoint(entry)
        assert entry["StartDate"] <= entry["StopDate"]
    # The failed child, with its Error and Cause and no Output.
    assert len(failed) == 1
    assert failed[0]["Status"] == "FAILED"
    assert (failed[0]["Error"], failed[0]["Cause"]) == ("Boom", "the item said so")
    assert json.loads(failed[0]["Input"]) == {"n": 0, "fail": True}
    assert "Output" not in failed[0]


class _AnySize:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and other > 0


ANY_SIZE = _AnySize()


def test_writer_config_transforms_what_is_written(engine: LocalEngine) -> None:
    bucket = engine.ref("OutputBucket")
    # Children that return an array: [n, n].
    doubling = {**FAILING_CHILD, "States": {**FAILING_CHILD["States"]}}
    doubling["States"]["Good"] = {
        "Type": "Pass",
        "Output": "{% [$states.input.n, $states.input.n] %}",
        "End": True,
    }
    runs = {}
    for transformation in ("COMPACT", "FLATTEN"):
        writer = _export_to(bucket, "t", Transformation=transformation, OutputType="JSONL")
        state = _writing(writer, ItemProcessor=doubling, ToleratedFailureCount=1)
        result = _run(engine, state, _items(failing=1, total=3))
        assert result.status == "SUCCEEDED", (result.error, result.cause)
        manifest = _s3_json(engine, bucket, result.output["ResultWriterDetails"]["Key"])
        key = manifest["ResultFiles"]["SUCCEEDED"][0]["Key"]
        assert key.endswith("/SUCCEEDED_0.jsonl")
        body = engine.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        runs[transformation] = [json.loads(line) for line in body.splitlines()]
        failed_key = manifest["ResultFiles"]["FAILED"][0]["Key"]
        failed = engine.client("s3").get_object(Bucket=bucket, Key=failed_key)["Body"].read()
        # A failed child is written unchanged (as NONE) whatever the transformation.
        (entry,) = [json.loads(line) for line in failed.decode().splitlines()]
        assert (entry["Status"], entry["Error"]) == ("FAILED", "Boom")
    assert runs["COMPACT"] == [[1, 1], [2, 2]]  # each output
    assert runs["FLATTEN"] == [1, 1, 2, 2]  # array outputs spread
    # WriterConfig alone: nothing written, the state's result transformed.
    alone = _writing({"WriterConfig": {"Transformation": "FLATTEN", "OutputType": "JSON"}})
    alone["ItemProcessor"] = doubling
    result = _run(engine, alone, _items(failing=0, total=2))
    assert (result.status, result.output) == ("SUCCEEDED", [0, 0, 1, 1])


def test_results_are_written_when_the_threshold_fails_the_map(engine: LocalEngine) -> None:
    bucket = engine.ref("OutputBucket")
    result = _run(engine, _writing(_export_to(bucket, "over")), _items(failing=2, total=3))
    assert (result.status, result.error) == ("FAILED", EXCEEDED)
    listed = engine.client("s3").list_objects_v2(Bucket=bucket, Prefix="over/")
    keys = sorted(o["Key"].rsplit("/", 1)[-1] for o in listed["Contents"])
    assert keys == ["FAILED_0.json", "SUCCEEDED_0.json", "manifest.json"]


def test_a_result_writer_that_cannot_write_fails_the_map(engine: LocalEngine) -> None:
    writer = _export_to("{% $states.input.bucket %}", "p")
    result = _run(engine, _writing(writer), {**_items(0, 2), "bucket": "no-such-bucket-here"})
    assert (result.status, result.error) == ("FAILED", "States.ResultWriterFailed")
    assert "NoSuchBucket" in (result.cause or "")
    not_text = _run(engine, _writing(_export_to("{% 7 %}", "p")), _items(0, 2))
    assert (not_text.status, not_text.error) == ("FAILED", "States.QueryEvaluationError")


def test_results_past_the_file_limit_go_on_in_the_next_file(
    engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each output {"n":0,"fail":false} is 20 bytes: two make a 43-byte array, three 64.
    monkeypatch.setattr(distributed_map, "MAX_RESULT_FILE_BYTES", 50)
    bucket = engine.ref("OutputBucket")
    writer = _export_to(bucket, "split", Transformation="COMPACT")
    result = _run(engine, _writing(writer), _items(failing=0, total=5))
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    manifest = _s3_json(engine, bucket, result.output["ResultWriterDetails"]["Key"])
    files = manifest["ResultFiles"]["SUCCEEDED"]
    assert [f["Key"].rsplit("/", 1)[-1] for f in files] == [
        "SUCCEEDED_0.json",
        "SUCCEEDED_1.json",
        "SUCCEEDED_2.json",
    ]
    assert [f["Size"] for f in files] == [43, 43, 22]
    written = [item for f in files for item in _s3_json(engine, bucket, f["Key"])]
    assert [item["n"] for item in written] == [0, 1, 2, 3, 4]


def test_result_writers_aws_refuses_are_refused(engine: LocalEngine) -> None:
    sfn = engine.client("stepfunctions")
    bad: list[dict[str, Any]] = [
        {},  # "cannot be empty"
        {"WriterConfig": {"Transformation": "SOME"}},
        {"WriterConfig": {"OutputType": "CSV"}},
        {"Resource": "arn:aws:states:::s3:getObject", "Arguments": {"Bucket": "b"}},
        {"Resource": "arn:aws:states:::s3:putObject"},  # no Arguments
    ]
    for writer in bad:
        definition: dict[str, Any] = {"QueryLanguage": "JSONata", "StartAt": "Map"}
        definition["States"] = {"Map": _writing(writer)}
        with pytest.raises(ClientError, match=r"ASLParserException|ResultWriter"):  # moto's
            sfn.create_state_machine(
                name="dmap-bad-writer", definition=json.dumps(definition), roleArn=ROLE
            )


def test_the_writer_and_reader_are_undone_when_the_engine_stops() -> None:
    worker = distributed_worker.DistributedItemProcessorWorker
    lister = resource_eval_s3.ResourceEvalS3
    listing = "_handle_list_objects_v2"
    before = (vars(worker)["_eval_job"], "_eval_input" in vars(worker), vars(lister)[listing])
    with LocalEngine(function_log=io.StringIO(), time_scale=0.0):
        assert vars(worker)["_eval_job"] is not before[0]
        assert "_eval_input" in vars(worker)
        assert vars(lister)[listing] is not before[2]
    after = (vars(worker)["_eval_job"], "_eval_input" in vars(worker), vars(lister)[listing])
    assert after == before


def test_a_batched_map_writes_one_entry_per_batch(engine: LocalEngine) -> None:
    # ItemBatcher and ResultWriter both set aside from one Map; the state's Output reads
    # the writer's result.
    bucket = engine.ref("OutputBucket")
    state = _batching(
        {"MaxItemsPerBatch": 2},
        ResultWriter=_export_to(bucket, "batched", Transformation="COMPACT"),
        Output="{% $states.result.ResultWriterDetails %}",
    )
    result = _run(engine, state, {"items": [1, 2, 3]})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert result.output["Bucket"] == bucket
    manifest = _s3_json(engine, bucket, result.output["Key"])
    (file,) = manifest["ResultFiles"]["SUCCEEDED"]
    assert _s3_json(engine, bucket, file["Key"]) == [{"Items": [1, 2]}, {"Items": [3]}]
