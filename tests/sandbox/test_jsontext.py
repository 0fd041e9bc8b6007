"""The JSON text that crosses into and out of a run: exact, checked, bounded."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from wasmrun.sandbox.guest.jsontext import MAX_DEPTH, NotSendable, encode_args, output_problem


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _nested(depth: int, rng: random.Random) -> Any:
    # Strings full of brackets, quotes and backslashes must not count as nesting.
    value: Any = rng.choice(['[[{"', '\\"]]', "\\", "}}\\\\", 1])
    for _ in range(depth):
        value = [value, "]"] if rng.random() < 0.5 else {'{"[': value, "k": "\\["}
    return value


@pytest.mark.parametrize("depth", [0, 1, 7, 8, 9, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 40])
def test_depth_is_exact_whatever_the_strings_hold(depth: int) -> None:
    rng = random.Random(depth)
    for _ in range(5):
        value = _nested(depth, rng)
        # many shallow siblings around one deep value: the count alone says nothing
        data = json.dumps([[[{}]]] * 300 + [value], ensure_ascii=rng.random() < 0.5).encode()
        deeper = max(_depth(value) + 1, 4) > MAX_DEPTH
        assert (output_problem(data) is not None) == deeper, depth


def test_big_ints_cross_exactly() -> None:
    data = encode_args({"n": 10**40, "m": -(2**64)})
    assert json.loads(data) == {"n": 10**40, "m": -(2**64)}
    assert output_problem(data) is None


@pytest.mark.parametrize(
    "data", [b"NaN", b"[Infinity]", b"[1e400]", b'"\\ud800"', b'"\xff"', b"1" * 5000, b"[1,", b"", b"[" * 100_000]
)
def test_output_that_is_not_plain_json_is_refused(data: bytes) -> None:
    assert output_problem(data) is not None


def test_args_nested_too_deep_are_refused() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(NotSendable, match="nested deeper than"):
        encode_args({"a": deep})
