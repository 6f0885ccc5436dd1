"""P14 review: what an adversarial pass found on the landed engine (issue 28, items 2-4):
another moto (below), UTF-8 at every limit to the byte, deep input judged alone.

Another moto: a version other than the pinned one runs only if every patch's fits check
passes, so each check must name everything its patch relies on. Each case here is a
moto release measured with the engine (installed beside it with `pip install --target`):
with moto 5.1.22, 5.2.0 and 5.2.2 every check passed and the engine then failed inside
moto (a CreateTable refused as "null", MarkComplete on "'str' object has no attribute
'result'", a second execution on "cannot pickle '_thread.RLock' object"); with 5.2.4 it
ran, every machine STANDARD (an EXPRESS one without its ARN, its five minutes or its
names started again). Each test puts that release's method, in what the check reads of
it, in moto's place.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import moto
import pytest
from botocore.exceptions import ClientError
from moto.core.responses import BaseResponse
from moto.dynamodb.responses import DynamoHandler
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.responses import StepFunctionResponse

from onceflow.cli import main
from onceflow.local import ingress, patches
from onceflow.local.engine import LocalEngine
from tests.helpers import attributes, dlq_messages, ledger_rows, with_constants
from tests.workflow.test_batch_mode import PARAMETERS as BATCH_PARAMETERS
from tests.workflow.test_batch_mode import outcomes

EVENTS = Path(__file__).resolve().parents[2] / "events"
ROLE = "arn:aws:iam::123456789012:role/p14-probe"


def _call_action_of_moto_5_1(self: Any) -> Any:
    # moto 5.1.22's DynamoHandler.call_action: the request read by json.loads, no parsed
    # parameters (the engine's DynamoDB validation read none: "Value null at 'tableName'")
    self.body = json.loads(self.body or "{}")
    return BaseResponse.call_action(self)


def _update_item_of_moto_5_1(self: Any) -> str:
    # moto 5.1.22's DynamoHandler.update_item answers JSON text, not an ActionResult
    return json.dumps({})


def _start_execution_of_moto_5_2_2(
    self: Any, state_machine_arn: str, name: Any = None, execution_input: Any = None
) -> Any:
    # moto 5.2.2 and before deep-copied the machine with its running executions (moto
    # issue 10077): a second execution of a machine failed on a lock that cannot be copied
    state_machine = self.describe_state_machine(state_machine_arn)
    return copy.deepcopy(state_machine)


def _create_state_machine_of_moto_5_2_4(self: Any) -> Any:
    # moto 5.2.4 read no machine type (the model set STANDARD): nothing was EXPRESS
    return None


@pytest.mark.parametrize(
    ("owner", "name", "stand_in", "named"),
    [
        (DynamoHandler, "call_action", _call_action_of_moto_5_1, '"params"'),
        (DynamoHandler, "update_item", _update_item_of_moto_5_1, "-> ActionResult"),
        (
            StepFunctionsParserBackend,
            "start_execution",
            _start_execution_of_moto_5_2_2,
            "id(state_machine.executions)",
        ),
        (
            StepFunctionResponse,
            "create_state_machine",
            _create_state_machine_of_moto_5_2_4,
            '_get_param("type")',
        ),
    ],
)
def test_another_moto_that_moved_what_a_patch_relies_on_stops_the_engine_in_one_line(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, stand_in: Any, named: str
) -> None:
    # GIVEN another moto version whose method is as that release had it
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    monkeypatch.setattr(owner, name, stand_in)
    # WHEN an engine starts
    with pytest.raises(RuntimeError) as raised:
        LocalEngine(function_log=io.StringIO()).start()
    # THEN it stops at start with one line naming what moved, and leaves nothing behind
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith("the local engine does not fit moto 9.9.9 (pinned "), line
    assert f"no longer has {named!r}" in line
    assert patches.installed() is None


def test_a_command_on_another_moto_that_does_not_fit_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN another moto version that moved what a patch relies on
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    monkeypatch.setattr(DynamoHandler, "update_item", _update_item_of_moto_5_1)
    # WHEN a command starts the local engine
    code = main(["execute", "ProcessorStateMachine", "-e", str(EVENTS / "s3-object-created.json")])
    # THEN it prints one line (after the notice that the stack is a fresh one) and no
    # traceback, and fails
    assert code == 2
    notice, line = capsys.readouterr().err.splitlines()
    assert notice.startswith("local: this command runs on a fresh, empty local stack")
    assert line.startswith("onceflow: the local engine does not fit moto 9.9.9 (pinned "), line
    assert line.endswith("which pins them)")


# ---- UTF-8 wherever a limit counts: at, one byte under and one byte over -------------

LIMIT = 262_144  # Step Functions: an execution's input, "256 KiB as a UTF-8 encoded string"
CHARACTERS = ["é", "中", "😀"]  # 2, 3 and 4 bytes in UTF-8 (an emoji: 12 as JSON escapes)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _filled(size: int, char: str) -> str:
    """Text of exactly size UTF-8 bytes: char as often as it fits, ASCII for the rest."""
    count, rest = divmod(size, len(char.encode()))
    return char * count + "a" * rest


def test_start_execution_counts_an_input_in_the_bytes_it_was_sent_in(engine: LocalEngine) -> None:
    # GIVEN inputs written with emoji as JSON escapes (12 bytes each, as json.dumps's
    # defaults write them) of 256 KiB less one, exactly, and one more byte
    sfn = engine.client("stepfunctions")
    definition = {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": True}}}
    arn = sfn.create_state_machine(name="escaped", definition=json.dumps(definition), roleArn=ROLE)[
        "stateMachineArn"
    ]
    for extra in (-1, 0, 1):
        count, rest = divmod(LIMIT + extra - len('{"t":""}'), 12)
        text = '{"t":"' + "\\ud83d\\ude00" * count + "a" * rest + '"}'
        assert len(text.encode()) == LIMIT + extra
        # WHEN each is started as sent
        if extra <= 0:
            # THEN those within the limit run, the emoji whole
            started = sfn.start_execution(stateMachineArn=arn, input=text, name=f"e{extra + 1}")
            result = engine.wait(started["executionArn"])
            assert result.status == "SUCCEEDED" and result.output == json.loads(text)
        else:
            # AND the one over it is refused, counted as the text it was sent as
            with pytest.raises(ClientError) as refused:
                sfn.start_execution(stateMachineArn=arn, input=text, name="over")
            assert refused.value.response["Error"]["Code"] == "ValidationException"
            assert f"the input is {LIMIT + 1} bytes" in refused.value.response["Error"]["Message"]


def test_the_pipe_counts_its_record_of_a_message_in_utf8_bytes_to_the_byte() -> None:
    # GIVEN the pipe (one message a batch) and a queue that takes 1 MiB
    parameters = {"SqsSource": "create", "IdempotencyKeyPath": "orderId"}
    with LocalEngine(parameters=parameters, function_log=io.StringIO(), time_scale=0.0) as local:
        sqs = local.client("sqs")
        url, dead = local.ref("SourceQueue"), local.ref("SourceDeadLetterQueue")
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "1048576"})
        # what the pipe's record adds to a body (its ids, attributes, md5; fixed lengths)
        sqs.send_message(QueueUrl=url, MessageBody="x")
        [probe] = sqs.receive_message(
            QueueUrl=url, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
        )["Messages"]
        source = str(next(iter(local.pipes.values()))["Source"])
        record = len(_compact([ingress._pipe_record(probe, source)]).encode()) - 1
        sqs.delete_message(QueueUrl=url, ReceiptHandle=probe["ReceiptHandle"])
        for char in CHARACTERS:
            for extra in (0, 1):
                # WHEN an order arrives whose record is exactly 256 KiB, or a byte more
                # (its body's quotes escaped inside the record, its text in UTF-8)
                order_id = f"{CHARACTERS.index(char)}-{extra}"
                empty = _compact(_compact({"orderId": order_id, "notes": ""}))[1:-1]
                notes = _filled(LIMIT + extra - record - len(empty.encode()), char)
                sqs.send_message(
                    QueueUrl=url, MessageBody=_compact({"orderId": order_id, "notes": notes})
                )
                started = local.pump_pipes()
                refused = sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10)
                if extra == 0:
                    # THEN the first starts the processor with exactly that many bytes
                    # (which judges it itself: over what it accepts, InvalidEvent)
                    [arn] = started
                    assert local.wait(arn).outcome == "InvalidEvent"
                    described = local.client("stepfunctions").describe_execution(executionArn=arn)
                    assert len(described["input"].encode()) == LIMIT
                    assert "Messages" not in refused
                else:
                    # AND Step Functions refuses the second: after the queue's redrive it
                    # is in the source DLQ, whole
                    assert started == []
                    [message] = refused["Messages"]
                    assert json.loads(message["Body"])["notes"] == notes
                    sqs.delete_message(QueueUrl=dead, ReceiptHandle=message["ReceiptHandle"])


def test_sqs_and_dynamodb_count_utf8_bytes_to_the_byte(engine: LocalEngine) -> None:
    sqs, dynamodb = engine.client("sqs"), engine.client("dynamodb")
    table = engine.ref("LedgerTable")
    for char in CHARACTERS:
        for extra in (-1, 0, 1):
            fits = extra <= 0
            # GIVEN a body at a queue's MaximumMessageSize (64 KiB, and SQS's default 1 MiB)
            for most in (65_536, 1_048_576):
                url = sqs.create_queue(
                    QueueName=f"q{most}", Attributes={"MaximumMessageSize": str(most)}
                )["QueueUrl"]
                # WHEN it is sent THEN it is taken up to the limit, refused a byte over it
                body = _filled(most + extra, char)
                if fits:
                    sqs.send_message(QueueUrl=url, MessageBody=body)
                else:
                    with pytest.raises(ClientError, match=f"shorter than {most} bytes"):
                        sqs.send_message(QueueUrl=url, MessageBody=body)
            # AND a batch is at most 1 MiB in all, counted the same way
            half = 1_048_576 // 2
            entries = [
                {"Id": "a", "MessageBody": _filled(half, char)},
                {"Id": "b", "MessageBody": _filled(half + extra, char)},
            ]
            if fits:
                sqs.send_message_batch(QueueUrl=url, Entries=entries)
            else:
                with pytest.raises(ClientError, match="BatchRequestTooLong"):
                    sqs.send_message_batch(QueueUrl=url, Entries=entries)
            # AND a ledger item is at most 400 KB: names and values in UTF-8 bytes
            key = f"{CHARACTERS.index(char)}{extra}"
            value = _filled(409_600 + extra - len("pk") - len(key) - len("v"), char)
            item = {"pk": {"S": key}, "v": {"S": value}}
            if fits:
                dynamodb.put_item(TableName=table, Item=item)
            else:
                with pytest.raises(ClientError, match="Item size has exceeded"):
                    dynamodb.put_item(TableName=table, Item=item)


# ---- Deep input: each message judged alone, at any depth its queue lets through --------


def test_a_message_nested_10000_levels_deep_in_a_batch_harms_no_neighbour() -> None:
    # GIVEN batch mode taking two messages a batch (so 62 KB a message: 10,000 levels
    # fit, five times what node's stack holds) and an order beside a deep message
    with with_constants(
        LocalEngine(parameters=BATCH_PARAMETERS, function_log=io.StringIO()), SqsBatchSize="2"
    ) as local:
        sqs, url = local.client("sqs"), local.ref("SourceQueue")
        order = sqs.send_message(QueueUrl=url, MessageBody='{"orderId":"order-1"}')["MessageId"]
        deep = sqs.send_message(QueueUrl=url, MessageBody='{"a":' * 10_000 + "1" + "}" * 10_000)
        # WHEN the pipe hands both over as one batch
        [arn] = local.pump_pipes()
        # THEN the batch succeeded: the deep message alone is an InvalidEvent, dead-lettered,
        # and the order beside it was processed; nothing is left in the queue
        assert local.wait(arn).status == "SUCCEEDED"
        by_message = outcomes(local, arn)
        assert by_message[deep["MessageId"]]["outcome"] == "InvalidEvent"
        assert by_message[order]["outcome"] == "Processed"
        assert [row["pk"] for row in ledger_rows(local)] == ["sqs:order-1"]
        [dead] = dlq_messages(local)
        assert attributes(dead)["ERROR_CODE"] == "InvalidEvent"
        assert "Messages" not in sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)
