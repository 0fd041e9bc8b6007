"""A guest's linear memory as the host reads and writes it.

Nothing the guest passes is trusted: a host call's pointer and length are
checked against the memory's current size and a bad one stops the run
(`HostCallError`), never the host. The host-side views (an address, a
memoryview) are for the host's own bookkeeping of a stopped or finished
instance: skill and session pages, hot pages.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import wasmtime

from wasmrun.abi import U32  # a guest pointer or length: wasm32 passes them as (signed) i32
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.guest import wasmtime_internals


def guest_memory(caller: wasmtime.Caller) -> wasmtime.Memory:
    mem = caller.get("memory")
    if not isinstance(mem, wasmtime.Memory):
        raise errors.RunAborted(errors.HOST_CALL_ERROR, "guest has no memory export")
    return mem


def span(caller: wasmtime.Caller, ptr: int, length: int) -> tuple[wasmtime.Memory, int, int]:
    mem = guest_memory(caller)
    ptr &= U32
    length &= U32
    if ptr + length > mem.data_len(caller):
        raise errors.RunAborted(
            errors.HOST_CALL_ERROR, "the guest passed a buffer outside its memory"
        )
    return mem, ptr, length


def read_guest(caller: wasmtime.Caller, ptr: int, length: int) -> bytes:
    mem, ptr, length = span(caller, ptr, length)
    return bytes(mem.read(caller, ptr, ptr + length)) if length else b""


def write_guest(caller: wasmtime.Caller, ptr: int, cap: int, data: bytes) -> None:
    mem, ptr, cap = span(caller, ptr, cap)
    if len(data) > cap:
        raise errors.RunAborted(errors.HOST_CALL_ERROR, "host reply larger than the guest buffer")
    if data:
        mem.write(caller, data, ptr)


def host_address(store: wasmtime.Store, memory: wasmtime.Memory) -> int:
    """Where `memory` starts in the host's address space (valid until it grows or the store closes)."""
    return ctypes.addressof(memory.data_ptr(store).contents)


def memory_view(store: wasmtime.Store, memory: wasmtime.Memory) -> memoryview:
    """A view of an instance's linear memory, no copy (valid until it grows or the store closes)."""
    size = memory.data_len(store)
    return memoryview((ctypes.c_ubyte * size).from_address(host_address(store, memory))).cast("B")


Reader = Callable[[int, int], "bytes | None"]


def context_reader(memory: wasmtime.Memory) -> Callable[[object], Reader]:
    """`reader(context)`: a bounds-checked `read(address, n) -> bytes | None` of
    `memory` through a store context (an epoch callback's, while the guest is
    stopped at a safe point on this thread); None when out of bounds."""
    span_of = wasmtime_internals.context_memory(memory)

    def reader(context: object) -> Reader:
        base, size = span_of(context)

        def read(address: int, n: int) -> bytes | None:
            return ctypes.string_at(base + address, n) if base and 0 <= address and address + n <= size else None

        return read

    return reader
