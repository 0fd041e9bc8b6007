"""Calling a wasm function from a host function without wasmtime-py's per-call marshalling.

The WASI guards (wasi_guard.py) check a call in Python and then make the real
WASI call through a small wasm trampoline. `wasmtime.Func.__call__` rebuilds
the function's type, compares every parameter's type and converts every value
through generic code on each call: measured here about 45 µs a call against
about 3 µs for the native call itself, and a skill's import does several
guarded `path_open`s per run. WASI preview 1 functions take and return only
i32/i64, so the parameter array can be laid out once per function and each
call only stores integers into it.

This uses wasmtime-py's ctypes layer (`wasmtime._ffi`) and its trap handling
(`wasmtime._func.enter_wasm`), which are not public API: wasmtime is pinned to
one version in pyproject.toml (compiled modules need that anyway), and
tests/sandbox/test_fastcall.py checks the fast call against `Func.__call__`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime._func import enter_wasm

_KINDS = {"i32": (ffi.WASMTIME_I32, "i32"), "i64": (ffi.WASMTIME_I64, "i64")}


class FastFunc:
    """One wasm function of i32/i64 parameters and at most one i32/i64 result."""

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
