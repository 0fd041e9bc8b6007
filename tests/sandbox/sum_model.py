"""CPython's sum() as a 64-bit build computes it, in Python: the reference the guests'
sum() is checked against (tests/sandbox/test_sum_fidelity.py).

Both images replace CPython's builtin_sum with a version that keeps the int total in
64 bits as a 64-bit CPython does (stdlib image: python_wasm/native/builtin_sum.c, 3.11;
data image: python_wasm/native/data_sum.c, 3.15). This model follows CPython's paths
(int, float, complex, generic: each entered only with a result of that exact type, in
that order) for the two versions, with the C `long` of `long_bits` bits: 64 is what
the guests must match; 32 is what an unpatched wasm32 CPython does. Python's float
arithmetic is IEEE double arithmetic, as C's is, so its results are bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

Compensated = tuple[float, float]  # (hi, lo), CPython 3.12+'s CompensatedSum


def _cs_add(total: Compensated, x: float) -> Compensated:
    """Neumaier's step, as CPython 3.12+ (Python/bltinmodule.c: cs_add)."""
    hi, lo = total
    t = hi + x
    lo += (hi - t) + x if abs(hi) >= abs(x) else (x - t) + hi
    return t, lo


def _cs_value(total: Compensated) -> float:
    hi, lo = total
    return hi + lo if lo != 0.0 and math.isfinite(lo) else hi


def cpython_sum(items: Iterable[Any], start: Any = 0, version: tuple[int, int] = (3, 15), long_bits: int = 64) -> Any:
    low, high = -(2 ** (long_bits - 1)), 2 ** (long_bits - 1) - 1
    compensated = version >= (3, 12)
    it = iter(items)
    result = start
    if type(result) is int and low <= result <= high:
        total, result = result, None
        for item in it:
            if type(item) in (int, bool) and low <= item <= high and low <= total + item <= high:
                total += int(item)
                continue
            result = total + item
            break
        else:
            return total
    if type(result) is float:
        done, result = _float_path(it, result, compensated, low, high)
        if done:
            return result
    if compensated and type(result) is complex:
        done, result = _complex_path(it, result)
        if done:
            return result
    for item in it:
        result = result + item
    return result


def _float_path(it: Any, start: float, compensated: bool, low: int, high: int) -> tuple[bool, Any]:
    """(True, the sum) at the end of `it`, else (False, the result it leaves the path with)."""
    total: Compensated = (start, 0.0)
    for item in it:
        if type(item) is float:
            total = _cs_add(total, item) if compensated else (total[0] + item, 0.0)
            continue
        if isinstance(item, int):
            if compensated:  # 3.15: PyLong_AsDouble (OverflowError past a double's range)
                total = _cs_add(total, int.__float__(item))
                continue
            if low <= item <= high:  # 3.11: a C long, added as a double
                total = (total[0] + float(int(item)), 0.0)
                continue
        return False, _cs_value(total) + item
    return True, _cs_value(total)


def _complex_path(it: Any, start: complex) -> tuple[bool, Any]:
    real: Compensated = (start.real, 0.0)
    imag: Compensated = (start.imag, 0.0)
    for item in it:
        if type(item) is complex:
            real, imag = _cs_add(real, item.real), _cs_add(imag, item.imag)
        elif isinstance(item, int):
            real = _cs_add(real, int.__float__(item))
        elif isinstance(item, float):
            real = _cs_add(real, float.__float__(item))
        else:
            return False, complex(_cs_value(real), _cs_value(imag)) + item
    return True, complex(_cs_value(real), _cs_value(imag))


def encode(value: Any) -> list[Any]:
    """A JSON form that keeps every bit (floats as hex: NaN, infinities, -0.0)."""
    if type(value) is bool:
        return ["b", value]
    if type(value) is int:
        return ["i", str(value)]
    if type(value) is float:
        return ["f", value.hex()]
    if type(value) is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    raise TypeError(type(value).__name__)


# The same decoding, as source for the guest.
DECODE_SOURCE = '''
def decode(v):
    kind = v[0]
    if kind == "b":
        return v[1]
    if kind == "i":
        return int(v[1])
    if kind == "f":
        return float.fromhex(v[1])
    return complex(float.fromhex(v[1]), float.fromhex(v[2]))
'''
