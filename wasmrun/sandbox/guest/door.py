"""The host side of the data image's one import, `host::call(ptr, len, out_ptr, out_len)`.

The guest (python_wasm/runtime/_door.py) sends a frame: an opcode byte
(wasmrun/abi.py's DoorOp) and its fields; we answer a status byte (OK, or
ENOENT/EBUDGET/EINVAL, abi.py's) and a payload, written into memory the guest's `host_alloc`
gives us, its address and length stored at out_ptr/out_len. The same run
state and rules as the stdlib guest's `wasmrun` imports (hostcalls.py): the
run found through `current()`, every length bounded before it is read.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import wasmtime

from wasmrun.abi import (
    DISPLAY_LEVEL,
    DOOR_ALLOC,
    DOOR_FRAME_SLACK,
    EINVAL,
    ENOENT,
    MAX_BLOB_ID,
    MAX_DISPLAY_BYTES,
    MAX_PACKAGES_REQUEST,
    OK,
    U32,
    DoorOp,
)
from wasmrun.blobs.kinds import MAX_KIND, is_valid_kind
from wasmrun.blobs.quota import BlobQuotaExceeded
from wasmrun.egress.client import RunDeadline
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.guest.capture import log_line
from wasmrun.sandbox.guest.guestmemory import guest_memory
from wasmrun.sandbox.guest.hostcalls import RunContext, current, install_packages, tool_calls

_OK = struct.pack("<b", OK)


class _Refused(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _blob_id(ctx: RunContext, raw: bytes) -> str:
    try:
        blob_id = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(ENOENT) from None
    if len(raw) > MAX_BLOB_ID or blob_id not in ctx.readable:
        raise _Refused(ENOENT)
    return blob_id


def _fields(payload: bytes) -> tuple[bytes, bytes]:
    """A length-prefixed field, then the rest."""
    if len(payload) < 4:
        raise _Refused(EINVAL)
    (n,) = struct.unpack_from("<I", payload)
    if 4 + n > len(payload):
        raise _Refused(EINVAL)
    return payload[4 : 4 + n], payload[4 + n :]


def _respond(ctx: RunContext, payload: bytes) -> bytes:
    if len(payload) > ctx.limits.result_bytes:
        raise errors.RunAborted(errors.INVALID_OUTPUT, errors.result_too_large(ctx.limits.result_bytes))
    ctx.response = payload
    return b""


def _blob_size(ctx: RunContext, payload: bytes) -> bytes:
    size = ctx.blobs.size(_blob_id(ctx, payload), ctx.owner)
    if size is None:
        raise _Refused(ENOENT)
    return struct.pack("<q", size)


def _blob_read(ctx: RunContext, payload: bytes) -> bytes:
    if len(payload) < 12:
        raise _Refused(EINVAL)
    offset, length = struct.unpack_from("<qI", payload)
    blob_id = _blob_id(ctx, payload[12:])
    if offset < 0:
        raise _Refused(EINVAL)
    ctx.charge_blob_io(length)
    try:
        return ctx.blobs.read(blob_id, offset, length, ctx.owner)
    except KeyError:  # deleted while the run had it
        raise _Refused(ENOENT) from None


def _blob_write(ctx: RunContext, payload: bytes) -> bytes:
    raw_kind, data = _fields(payload)
    kind = raw_kind.decode("utf-8", "replace")
    if len(raw_kind) > MAX_KIND or not is_valid_kind(kind):
        raise _Refused(EINVAL)
    ctx.charge_blob_io(len(data))
    quota = ctx.blob_quota
    if quota is not None and len(ctx.output_blobs) >= quota.max_per_run:
        raise errors.RunAborted(
            errors.BLOB_QUOTA, f"the run wrote {len(ctx.output_blobs)} blobs, its limit (blobs_per_run)"
        )
    try:
        blob_id = ctx.blobs.create(data, kind, run_id=ctx.run_id, owner=ctx.owner, quota=quota)
    except BlobQuotaExceeded as exc:
        raise errors.RunAborted(errors.BLOB_QUOTA, exc.message) from None
    except ValueError:
        raise _Refused(EINVAL) from None
    if blob_id not in ctx.output_blobs:
        ctx.output_blobs.append(blob_id)
    ctx.readable.add(blob_id)
    return blob_id.encode()


def _log(ctx: RunContext, payload: bytes) -> bytes:
    if len(payload) < 4:
        raise _Refused(EINVAL)
    (level,) = struct.unpack_from("<i", payload)
    if level == DISPLAY_LEVEL:  # a display result, not a log line (abi.DISPLAY_LEVEL)
        ctx.show(payload[4 : 4 + MAX_DISPLAY_BYTES + 1])
        return b""
    message = payload[4 : 4 + ctx.limits.output_bytes].decode("utf-8", "replace")
    ctx.write_output(log_line(level, message))
    return b""


def _http_request(ctx: RunContext, payload: bytes) -> bytes:
    meta, body = _fields(payload)
    try:
        return ctx.egress.handle(meta, body, ctx.deadline)
    except RunDeadline:
        raise errors.RunAborted(errors.TIMEOUT, errors.timed_out(ctx.limits.timeout_ms)) from None


_OPS: dict[int, Callable[[RunContext, bytes], bytes]] = {
    DoorOp.REQUEST: lambda ctx, _payload: ctx.request_bytes,
    DoorOp.RESPOND: _respond,
    DoorOp.BLOB_SIZE: _blob_size,
    DoorOp.BLOB_READ: _blob_read,
    DoorOp.BLOB_WRITE: _blob_write,
    DoorOp.LOG: _log,
    DoorOp.HTTP_REQUEST: _http_request,
    DoorOp.TOOL_CALL: lambda ctx, payload: tool_calls(ctx, len(payload), lambda n: payload[:n]),
    DoorOp.PACKAGES_INSTALL: lambda ctx, payload: install_packages(ctx, payload[: MAX_PACKAGES_REQUEST + 1]),
}


# Calls the guest waits on in host code (as the stdlib guest's hostcalls flush before them).
_WAITS = frozenset({DoorOp.TOOL_CALL, DoorOp.HTTP_REQUEST, DoorOp.PACKAGES_INSTALL})


def frame_limit(ctx: RunContext) -> int:
    """The largest frame read from the guest: a blob or result at its limit, plus headers."""
    return max(ctx.limits.blob_io_bytes, ctx.limits.result_bytes) + MAX_KIND + DOOR_FRAME_SLACK


def answer(ctx: RunContext, frame: bytes) -> bytes:
    """The reply to one frame: status byte, then payload."""
    op = _OPS.get(frame[0]) if frame else None
    if op is None:
        return struct.pack("<b", EINVAL)
    try:
        return _OK + op(ctx, frame[1:])
    except _Refused as refused:
        return struct.pack("<b", refused.code)


class Bound(NamedTuple):
    """The instance whose turn runs on this thread: its `host_alloc` (called
    through FastFunc) and its memory, so that a call looks neither up by name
    (datastart.DoorTurn binds them around the turn)."""

    alloc: Callable[[wasmtime.Caller, int], Any]
    memory: wasmtime.Memory


_bound = threading.local()


def bind(bound: Bound | None) -> None:
    _bound.door = bound


def _instance(caller: wasmtime.Caller) -> tuple[Callable[[wasmtime.Caller, int], Any], wasmtime.Memory]:
    bound: Bound | None = getattr(_bound, "door", None)
    if bound is not None:
        return bound.alloc, bound.memory
    alloc = caller.get(DOOR_ALLOC)
    if not isinstance(alloc, wasmtime.Func):
        raise errors.RunAborted(errors.HOST_CALL_ERROR, f"guest has no {DOOR_ALLOC} export")
    return alloc, guest_memory(caller)


def _span(caller: wasmtime.Caller, memory: wasmtime.Memory, ptr: int, length: int) -> int:
    """`ptr`, checked to start `length` bytes inside the guest's memory (as hostcalls._span)."""
    ptr &= U32
    if ptr + (length & U32) > memory.data_len(caller):
        raise errors.RunAborted(errors.HOST_CALL_ERROR, "the guest passed a buffer outside its memory")
    return ptr


def call(caller: wasmtime.Caller, ptr: int, length: int, out_ptr: int, out_len: int) -> int:
    """`host::call`: a bad address or an oversized frame stops the run (InvalidHostCall)."""
    ctx = current()
    length &= U32
    if length > frame_limit(ctx):
        raise errors.RunAborted(errors.HOST_CALL_ERROR, "the guest sent a host call larger than the run's limits")
    alloc, memory = _instance(caller)
    start = _span(caller, memory, ptr, length)
    frame = bytes(memory.read(caller, start, start + length)) if length else b""
    if frame[:1] and frame[0] in _WAITS:
        ctx.flush_stream(caller)  # a streamed run's output so far reaches its client before the wait
    reply = answer(ctx, frame)
    where = alloc(caller, len(reply))
    if not isinstance(where, int) or where == 0:
        raise MemoryError("the guest could not hold a host call's reply")
    memory.write(caller, reply, _span(caller, memory, where, len(reply)))
    memory.write(caller, struct.pack("<I", where & U32), _span(caller, memory, out_ptr, 4))
    memory.write(caller, struct.pack("<I", len(reply)), _span(caller, memory, out_len, 4))
    return 0
