"""The moto patches: each still fits moto, and each closes the trap it is for."""

from __future__ import annotations

import hashlib
import threading

import jsonata
import pytest
from moto.stepfunctions.parser.asl.jsonata import jsonata as moto_jsonata

from onceflow import patches
from onceflow.engine import LocalEngine


def test_patches_fit_the_pinned_moto() -> None:
    # Fails loudly (RuntimeError naming what moved) after a moto upgrade.
    patches.check_moto_internals()


def test_apply_installs_every_patch() -> None:
    patches.apply()
    assert moto_jsonata._eval_jsonata is patches.eval_jsonata
    assert (
        moto_jsonata.encode_jsonata_variable_declarations
        is patches.encode_jsonata_variable_declarations
    )
    from moto.stepfunctions.parser.asl.component.intrinsic import jsonata as intrinsic

    assert "$hash" not in intrinsic._DECLARATION_BY_VARIABLE_REFERENCE


@pytest.mark.parametrize(
    ("algorithm", "name"),
    [
        ("MD5", "md5"),
        ("SHA-1", "sha1"),
        ("SHA-256", "sha256"),
        ("SHA-384", "sha384"),
        ("SHA-512", "sha512"),
    ],
)
def test_hash_is_a_real_digest(algorithm: str, name: str) -> None:
    value = patches.eval_jsonata(f'$hash("s3://b/k#v1", "{algorithm}")')
    assert value == hashlib.new(name, b"s3://b/k#v1").hexdigest()
    # moto's stub returned one text for every input: every hash collided.
    assert patches.eval_jsonata(f'$hash("a", "{algorithm}")') != patches.eval_jsonata(
        f'$hash("b", "{algorithm}")'
    )


def test_hash_rejects_an_unknown_algorithm() -> None:
    with pytest.raises(moto_jsonata.JSONataException, match="algorithm must be one of"):
        patches.eval_jsonata('$hash("a", "SHA-999")')


def test_uuid_is_unique() -> None:
    assert patches.eval_jsonata("$uuid()") != patches.eval_jsonata("$uuid()")


@pytest.mark.parametrize("value", ['a"b', "back\\slash", "new\nline", "ünïcödé"])
def test_string_variables_are_escaped(value: str) -> None:
    declarations = patches.encode_jsonata_variable_declarations({"$v": value})
    assert jsonata.Jsonata(f"({declarations}$v)").evaluate(None) == value


def test_moto_unescaped_strings_break_the_expression() -> None:
    # The trap: moto writes "{value}" as is, so a quote ends the literal early.
    broken = patches.moto_encode_jsonata_variable_declarations({"$v": 'a"b'})
    assert broken == '$v:="a"b";'
    with pytest.raises(Exception):  # noqa: B017 - any parse error shows the trap
        jsonata.Jsonata(f"({broken}$v)").evaluate(None)


def test_time_scale_zero_never_sleeps() -> None:
    patches.CLOCK.scale = 0.0
    patches.CLOCK.slept.clear()
    patches._ScaledTimeModule.sleep(30)
    assert patches.CLOCK.slept == [30]


def test_concurrent_conditional_puts_have_exactly_one_winner(engine: LocalEngine) -> None:
    # The trap: moto's backends are not thread-safe and two conditional
    # PutItems on one key could both succeed. With the backend lock, one wins.
    table = engine.ref("LedgerTable")
    for trial in range(20):
        start = threading.Barrier(16)
        winners: list[int] = []
        lock = threading.Lock()

        def claim(
            worker: int,
            trial: int = trial,
            start: threading.Barrier = start,
            lock: threading.Lock = lock,
            winners: list[int] = winners,
        ) -> None:
            client = engine.client("dynamodb")
            start.wait(timeout=30)
            try:
                client.put_item(
                    TableName=table,
                    Item={"pk": {"S": f"race-{trial}"}, "owner": {"N": str(worker)}},
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except client.exceptions.ConditionalCheckFailedException:
                return
            with lock:
                winners.append(worker)

        threads = [threading.Thread(target=claim, args=(w,)) for w in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(winners) == 1, f"trial {trial}: {len(winners)} winners"
