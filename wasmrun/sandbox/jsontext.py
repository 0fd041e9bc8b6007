"""The entrypoint's argument in, its return value out: both cross as JSON text.

JSON numbers have no size limit and a client's (or the guest's) integers can
be larger than any fixed-width encoding allows, so neither value becomes a host
object on the way: `args` is encoded once, by the host, and handed to the
guest as it is; the guest's return value is checked here and passed on to the
client byte for byte. The guest is untrusted: its bytes are decoded with a
bounded depth and anything that is not plain JSON fails that run alone.
"""

from __future__ import annotations

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
    numbers a JSON decoder can read back, nesting at most MAX_DEPTH deep."""
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


def _deeper_than(data: bytes, limit: int) -> bool:
    """Whether valid JSON `data` nests arrays/objects more than `limit` deep.
    Only C-speed bytes operations on the common path (this runs on every run)."""
    if data.count(b"[") + data.count(b"{") <= limit:  # most outputs end here
        return False
    # Drop the strings' contents: escapes first (backslashes only occur in
    # strings), then every other piece between quotes.
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(unescaped.split(b'"')[::2]).translate(_ONE_KIND, _NOT_A_BRACKET)
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
