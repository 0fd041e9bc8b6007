"""Every use of wasmtime-py's private API, in one place.

wasmtime-py has no public API for what these do: the pooling allocator, the
async-stack size, an epoch-deadline callback, reading memory or calling a
function through the raw store context an epoch callback is handed, and a
call without per-call marshalling. They go through its ctypes layer
(`wasmtime._ffi`) and a few private names. wasmtime is pinned to one version
in pyproject.toml (compiled modules need that anyway): PINNED_VERSION is the
version this module was written for, and tests/sandbox/test_wasmtime_internals.py
fails on any other and exercises each entry point, so an upgrade starts there.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any, TypeAlias

import wasmtime
from wasmtime import _exportable
from wasmtime import _ffi as ffi
from wasmtime._func import enter_wasm

logger = logging.getLogger("wasmrun.sandbox")
AsExtern: TypeAlias = _exportable.AsExtern  # a Linker/Instance import: Func, Memory, ...

PINNED_VERSION = "49.0.0"
UPDATE_DEADLINE_CONTINUE = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE in wasmtime.h
STRATEGY_WINCH = 2  # WASMTIME_STRATEGY_WINCH in wasmtime/config.h
WASMTIME_I32 = 0  # a wasmtime_val_t's kind (wasmtime/val.h)

# The raw store context wasmtime hands an epoch callback (a `wasmtime_context_t *`).
Context = Any


# -- engine configuration ------------------------------------------------------

def set_async_stack_size(config: wasmtime.Config, size: int) -> None:
    """wasmtime refuses a wasm stack larger than its async stacks (unused here)."""
    ffi.wasmtime_config_async_stack_size_set(config.ptr(), size)


def use_baseline_compiler(config: wasmtime.Config) -> None:
    """Compile with Winch, wasmtime's baseline compiler: a quarter of Cranelift's
    compile time for slower code. `Config.strategy` accepts only "auto" and "cranelift"."""
    ffi.wasmtime_config_strategy_set(config.ptr(), STRATEGY_WINCH)


def use_pooling_allocator(config: wasmtime.Config, slots: int, max_memory_bytes: int, decommit_batch: int) -> None:
    """Instances in `slots` pre-reserved slots; freed pages given back `decommit_batch` at a time."""
    pool = ffi.wasmtime_pooling_allocation_config_new()
    try:
        ffi.wasmtime_pooling_allocation_config_total_core_instances_set(pool, slots)
        ffi.wasmtime_pooling_allocation_config_total_memories_set(pool, slots)
        ffi.wasmtime_pooling_allocation_config_total_tables_set(pool, slots)
        ffi.wasmtime_pooling_allocation_config_max_memory_size_set(pool, max_memory_bytes)
        ffi.wasmtime_pooling_allocation_config_decommit_batch_size_set(pool, decommit_batch)
        ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pool)


# -- epoch-deadline callback ---------------------------------------------------

_CALLBACK_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ffi.wasmtime_update_deadline_kind_t),
)
_FINALIZER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _new_error(message: str) -> int:
    """A new wasmtime error (wasmtime takes ownership): returning it traps the store."""
    err = ffi.wasmtime_error_new(message.encode())
    address = ctypes.cast(err, ctypes.c_void_p).value
    assert address is not None
    return address


@_FINALIZER_TYPE  # type: ignore[untyped-decorator]
def _no_finalizer(_data: object) -> None:
    return None


class EpochCallback:
    """A Python `handler(context) -> str | None` as wasmtime's epoch-deadline
    callback: a message stops the run with a trap carrying it; None lets it go
    on to the next epoch. An exception from the handler stops the run (none
    may cross into wasmtime). Made once (module level): the C callback lives
    as long as this object."""

    def __init__(self, handler: Callable[[Context], str | None]) -> None:
        def on_epoch(context: Context, _data: object, delta: ctypes._Pointer[ctypes.c_uint64], kind: Any) -> int:
            try:
                message = handler(context)
                if message is not None:
                    return _new_error(message)
                delta[0] = 1
                kind[0] = UPDATE_DEADLINE_CONTINUE
                return 0
            except BaseException:
                logger.exception("epoch callback failed")
                return _new_error("the sandbox host failed")

        self._callback = _CALLBACK_TYPE(on_epoch)

    def arm(self, store: wasmtime.Store) -> None:
        """Before `store` runs: this callback, its deadline one epoch ahead."""
        ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), self._callback, None, _no_finalizer)
        store.set_epoch_deadline(1)


def caller_context(caller: wasmtime.Caller) -> Context:
    """A host function's store context, as an epoch callback is handed one."""
    return caller._context()


def context_caller(func: wasmtime.Func, args: tuple[int, ...] = (), results: int = 0) -> Callable[[Context], None]:
    """A caller of `func` (i32 `args`, `results` results, which are dropped) for the
    epoch callback's own store context (the store is inside wasm: Func.__call__
    would enter it again through the Store object, which the callback has not got).
    Its errors and traps are dropped; its own wasm is given one more epoch first."""

    def call(context: Context) -> None:  # the values made here: most runs never call it
        params = (ffi.wasmtime_val_t * max(len(args), 1))()
        for slot, value in zip(params, args, strict=False):
            slot.kind = WASMTIME_I32
            slot.of.i32 = value
        out = (ffi.wasmtime_val_t * max(results, 1))()
        ffi.wasmtime_context_set_epoch_deadline(context, 1)
        trap = ctypes.POINTER(ffi.wasm_trap_t)()
        error = ffi.wasmtime_func_call(
            context, ctypes.byref(func._func), params, len(args), out, results, ctypes.byref(trap)
        )
        if error:
            ffi.wasmtime_error_delete(error)
        if trap:
            ffi.wasm_trap_delete(trap)

    return call


def context_memory(memory: wasmtime.Memory) -> Callable[[Context], tuple[int, int]]:
    """`span(context)`: the host address (0: none) and size of `memory`, read through
    a store context (in an epoch callback, where the Store object cannot be used)."""
    handle = ctypes.byref(memory._memory)

    def span(context: Context) -> tuple[int, int]:
        base = ctypes.cast(ffi.wasmtime_memory_data(context, handle), ctypes.c_void_p).value or 0
        return base, int(ffi.wasmtime_memory_data_size(context, handle))

    return span


# -- fast calls ----------------------------------------------------------------

_KINDS = {"i32": (ffi.WASMTIME_I32, "i32"), "i64": (ffi.WASMTIME_I64, "i64")}


class FastFunc:
    """One wasm function of i32/i64 parameters and at most one i32/i64 result,
    called without wasmtime-py's per-call marshalling.

    `wasmtime.Func.__call__` rebuilds the function's type, compares every
    parameter's type and converts every value through generic code on each
    call: measured here about 45 µs a call against about 3 µs for the native
    call itself (the WASI guards make several per run, and every run enters
    the guest through one). WASI preview 1 functions take and return only
    i32/i64, so the parameter array is laid out once and each call only
    stores integers into it. Traps and errors raise as Func.__call__'s do."""

    def __init__(self, func: wasmtime.Func, ty: wasmtime.FuncType) -> None:
        self._func = func
        params = [_KINDS[str(p)] for p in ty.params]
        results = [_KINDS[str(r)] for r in ty.results]
        if len(results) > 1:
            raise ValueError("FastFunc returns at most one value")
        self._params = (ffi.wasmtime_val_t * max(1, len(params)))()
        for slot, (kind, _) in zip(self._params, params, strict=False):  # the array has one slot more when empty
            slot.kind = kind
        self._fields = [field for _, field in params]
        self._results = (ffi.wasmtime_val_t * max(1, len(results)))()
        self._result_field = results[0][1] if results else None
        self._nparams = len(params)
        self._nresults = len(results)

    def __call__(self, store: wasmtime.Caller | wasmtime.Store, *args: int) -> Any:
        if len(args) != self._nparams:
            raise TypeError(f"expected {self._nparams} arguments, got {len(args)}")
        params = self._params
        for i, (field, value) in enumerate(zip(self._fields, args, strict=True)):
            setattr(params[i].of, field, value)
        with enter_wasm(store) as trap:
            error = ffi.wasmtime_func_call(
                store._context(), ctypes.byref(self._func._func),
                params, self._nparams, self._results, self._nresults, trap,
            )
            if error:
                raise wasmtime.WasmtimeError._from_ptr(error)
        if self._result_field is None:
            return None
        return getattr(self._results[0].of, self._result_field)
