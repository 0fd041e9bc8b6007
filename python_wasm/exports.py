"""Typed access to a wasmtime instance's exports and a module's imports.

wasmtime-py returns unions (any extern); these narrow them, so a module that
is not what we built fails with a clear error rather than deep inside a call.
"""

from __future__ import annotations

from collections.abc import Mapping

import wasmtime


def func(exports: Mapping[str, object], name: str) -> wasmtime.Func:
    item = exports[name]
    if not isinstance(item, wasmtime.Func):
        raise TypeError(f"export {name!r} is not a function")
    return item


def memory(exports: Mapping[str, object], name: str = "memory") -> wasmtime.Memory:
    item = exports[name]
    if not isinstance(item, wasmtime.Memory):
        raise TypeError(f"export {name!r} is not a memory")
    return item


def global_(exports: Mapping[str, object], name: str) -> wasmtime.Global:
    item = exports[name]
    if not isinstance(item, wasmtime.Global):
        raise TypeError(f"export {name!r} is not a global")
    return item


def func_imports(module: wasmtime.Module, from_module: str) -> dict[str, wasmtime.FuncType]:
    """The function imports of `module` from `from_module`, by name."""
    found = {}
    for imp in module.imports:
        if imp.module == from_module and imp.name is not None and isinstance(imp.type, wasmtime.FuncType):
            found[imp.name] = imp.type
    return found
