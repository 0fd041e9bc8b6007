"""The entrypoint's argument in, its return value out: both cross as JSON text.

JSON numbers have no size limit and a client's (or the guest's) integers can
be larger than any fixed-width encoding allows, so neither value becomes a host
object on the way: `args` is encoded once, by the host, and handed to the
guest as it is; the guest's return value is checked here and passed on to the
client byte for byte. The guest is untrusted: its bytes are decoded with a
bounded depth and anything that is not plain JSON fails that run alone.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import msgspec

# A return value: deeper than any real data, and far from the recursion limit of
# whoever decodes it next (this server's event loop, a client's json.loads). `args`
# have the request's bound (protocol/types.py MAX_ARGS_DEPTH), passed by the caller.
MAX_DEPTH = 256

_encoder = msgspec.json.Encoder()
_NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_ONE_KIND = bytes.maketrans(b"{}", b"[]")  # valid JSON closes what it opens: the kind is no matter
_NESTING_STEP = [1 if b == ord("[") else -1 if b == ord("]") else 0 for b in range(256)]
QUICK_PASSES = 8
# Up to this size a return value is checked by decoding it whole (a few MB of
# objects at most); a larger one is checked without building any object: its
# syntax by skipping over it, UTF-8 and numbers' range piecewise. A JSON value
# as Python objects costs up to ~30x its text ([{}] * n), and a heap of small
# objects is not given back to the system after: the host's memory would grow
# with what a guest returns, not with the limits.
FULL_DECODE_BYTES = 256 * 1024
# Arrays and objects a return value may hold: far more than real data returns,
# and bounded so that whoever decodes it next (a client) is not flooded.
MAX_CONTAINERS = 1_000_000
CHUNK = 256 * 1024  # piece size of the piecewise checks: their transient memory
# Large checks at once in this process: each holds about 3x the output's size.
_large_checks = threading.BoundedSemaphore(2)
# Numbers msgspec may refuse as out of range (a float past 1.8e308): those with
# an exponent of three or more digits, and long mantissas with a fraction part.
# Each pattern starts with what is rare, so that the scan is quick.
_BIG_EXPONENT = re.compile(rb"[eE][-+]?[0-9]{3,}")
_TOKEN_END = re.compile(rb"[^,\[\]{}:\s]*\Z")
_LONG_MANTISSA = re.compile(rb"[0-9]{300,}\.[0-9]+")
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
TOKEN_WINDOW = 512


class NotSendable(ValueError):
    """A value that cannot be passed into a run (the message says why)."""


def encode_args(args: dict[str, Any], max_depth: int = MAX_DEPTH) -> bytes:
    """`args` as JSON text for the guest (nested at most `max_depth` levels, the args
    object itself one), or NotSendable."""
    try:
        data = _encoder.encode(args)
    except RecursionError:
        raise NotSendable(f"is nested deeper than {max_depth} levels") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise NotSendable(f"cannot be passed as JSON: {exc}") from None
    if _deeper_than(data, max_depth):
        raise NotSendable(f"is nested deeper than {max_depth} levels")
    return data


def output_problem(data: bytes) -> str | None:
    """Why the guest's return value `data` cannot be passed on, or None if it can.

    Plain JSON only: valid UTF-8 without lone surrogates, no NaN or Infinity,
    numbers a JSON decoder can read back, nesting at most MAX_DEPTH deep, at
    most MAX_CONTAINERS arrays and objects. Costs memory in proportion to
    `data`'s size (about 3x at most), never its objects."""
    if len(data) > FULL_DECODE_BYTES:
        with _large_checks:
            return _large_output_problem(data)
    try:
        msgspec.json.decode(data)  # C, and it stops at the interpreter's recursion limit
    except RecursionError:
        return f"it is nested deeper than {MAX_DEPTH} levels"
    except msgspec.ValidationError as exc:  # a number out of range
        return f"it is not plain JSON: {exc}"
    except (msgspec.DecodeError, ValueError) as exc:  # malformed, invalid UTF-8
        return f"it is not valid JSON: {exc}"
    # Only valid JSON gets here: every string is closed, every bracket matched.
    if _deeper_than(data, MAX_DEPTH):
        return f"it is nested deeper than {MAX_DEPTH} levels"
    return None


def _large_output_problem(data: bytes) -> str | None:
    """output_problem for a large `data`, building no object per JSON value."""
    try:
        msgspec.json.decode(data, type=msgspec.Raw)  # syntax, escapes and surrogates, skipped over
    except RecursionError:
        return f"it is nested deeper than {MAX_DEPTH} levels"
    except (msgspec.DecodeError, ValueError) as exc:
        return f"it is not valid JSON: {exc}"
    utf8 = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(data), CHUNK):
            utf8.decode(data[start : start + CHUNK])
        utf8.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        return f"it is not valid JSON: {exc.reason} in its UTF-8"
    shape = structure(data)
    containers = shape.count(b"[") + shape.count(b"{")
    if containers > MAX_CONTAINERS:
        return f"it holds {containers} arrays and objects, more than {MAX_CONTAINERS}"
    for number in _suspect_numbers(shape):
        try:
            msgspec.json.decode(number)
        except msgspec.ValidationError as exc:
            return f"it is not plain JSON: {exc}"
    if _deeper_than(data, MAX_DEPTH, shape):
        return f"it is nested deeper than {MAX_DEPTH} levels"
    return None


def _suspect_numbers(shape: bytes) -> Iterator[bytes]:
    """The numbers in `shape` (see structure) that might be out of a float's range."""
    for exponent in _BIG_EXPONENT.finditer(shape):
        before = _TOKEN_END.search(shape, max(0, exponent.start() - TOKEN_WINDOW), exponent.start())
        yield (before.group() if before else b"") + exponent.group()
    if b"0" * 300 in shape.translate(_DIGITS_ONLY):
        for mantissa in _LONG_MANTISSA.finditer(shape):
            yield mantissa.group()


def structure(data: bytes) -> bytes:
    """Valid JSON `data` without its strings (quotes and contents): brackets,
    commas, colons, numbers and literals. Piecewise, so that the transient
    pieces are bounded by CHUNK whatever the number of strings."""
    # Escapes first (backslashes only occur in strings): every quote left delimits a string.
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = []
    inside = False
    for start in range(0, len(unescaped), CHUNK):
        pieces = unescaped[start : start + CHUNK].split(b'"')
        kept.append(b"".join(pieces[1 if inside else 0 :: 2]))
        if len(pieces) % 2 == 0:
            inside = not inside
    return b"".join(kept)


def value_count_at_most(data: bytes, bound: int) -> bool:
    """Whether valid JSON `data` holds at most about `bound` values (its commas,
    outside strings, plus one): cheap when the raw count of commas is already under."""
    return data.count(b",") < bound or structure(data).count(b",") < bound


def _deeper_than(data: bytes, limit: int, shape: bytes | None = None) -> bool:
    """Whether valid JSON `data` (whose `structure` is `shape`, if known) nests
    arrays/objects more than `limit` deep. Only C-speed bytes operations on the
    common path (this runs on every run)."""
    if data.count(b"[") + data.count(b"{") <= limit:  # most outputs end here
        return False
    if shape is None:
        shape = structure(data)
    brackets = shape.translate(_ONE_KIND, _NOT_A_BRACKET)
    # Each pass drops every innermost pair: the depth goes down by exactly one.
    for passes in range(QUICK_PASSES):
        if not brackets:
            return passes > limit
        brackets = brackets.replace(b"[]", b"")
    passes = QUICK_PASSES
    if len(brackets) // 2 <= limit - passes:
        return False
    # Deeply nested after all: the depth at each bracket is a running sum.
    return max(accumulate(map(_NESTING_STEP.__getitem__, brackets)), default=0) > limit - passes


# The guest's warnings are its own word: kept few and short, whatever it sends.
MAX_WARNINGS = 8
MAX_WARNING_CHARS = 1000
_warnings_decoder = msgspec.json.Decoder(list[str])


def guest_warnings(response: bytes) -> tuple[list[str], bytes]:
    """Split b"W" + a JSON list of strings + b"\\n" off the front of a guest reply:
    (the warnings, bounded, and the rest). A malformed list is dropped, not fatal."""
    head, sep, rest = response[1:].partition(b"\n")
    if not sep:
        return [], b""  # no reply after the warnings: a malformed reply
    try:
        items = _warnings_decoder.decode(head)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return [], rest
    return [item[:MAX_WARNING_CHARS] for item in items[:MAX_WARNINGS]], rest
