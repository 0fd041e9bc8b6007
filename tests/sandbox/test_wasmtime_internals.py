"""wasmrun.sandbox.guest.wasmtime_internals: the private wasmtime-py API it wraps still does what we rely on.

Pinned to one wasmtime version: an upgrade fails the first test here, and the
others say which private entry point changed.
"""

from __future__ import annotations

import importlib.metadata
import re
import typing
from pathlib import Path

import pytest
import wasmtime

from wasmrun.sandbox.guest import wasmtime_internals as internals
from wasmrun.sandbox.guest.guestmemory import host_address

ROOT = Path(__file__).resolve().parents[2]

SPIN = """
(module
  (import "" "tick" (func $tick))
  (func (export "spin") (loop $l (call $tick) (br $l))))
"""

PROBE = """
(module
  (import "" "probe" (func $probe))
  (memory (export "memory") 2)
  (global $flag (mut i32) (i32.const 0))
  (func (export "set_flag") (global.set $flag (i32.const 7)))
  (func (export "flag") (result i32) (global.get $flag))
  (func (export "add") (param i32 i64) (result i64) (i64.add (i64.extend_i32_s (local.get 0)) (local.get 1)))
  (func (export "go") (call $probe)))
"""


def test_the_installed_wasmtime_is_the_version_this_was_written_for() -> None:
    assert importlib.metadata.version("wasmtime") == internals.PINNED_VERSION
    pins = re.findall(r'"wasmtime==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pins and set(pins) == {internals.PINNED_VERSION}


def _epoch_engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.epoch_interruption = True
    return wasmtime.Engine(config)


def _engine(baseline: bool) -> wasmtime.Engine:
    config = wasmtime.Config()
    if baseline:
        internals.use_baseline_compiler(config)
    return wasmtime.Engine(config)


def test_the_baseline_compiler_makes_other_machine_code_that_runs_the_same() -> None:
    """Winch, not Cranelift: the same module compiles to other machine code, and
    computes the same (the data image is made with it: images/dataimage.py)."""
    serialized, sums = [], []
    for baseline in (True, False):
        engine = _engine(baseline)
        module = wasmtime.Module(engine, PROBE)
        serialized.append(module.serialize())
        store = wasmtime.Store(engine)
        probe = wasmtime.Func(store, wasmtime.FuncType([], []), lambda: None)
        add = wasmtime.Instance(store, module, [probe]).exports(store)["add"]
        assert isinstance(add, wasmtime.Func)
        sums.append(add(store, -5, 1 << 40))
    assert serialized[0] != serialized[1]
    assert sums == [(1 << 40) - 5] * 2


def test_pooling_allocator_limits_instances_and_memory() -> None:
    config = wasmtime.Config()
    internals.set_async_stack_size(config, 2 << 20)
    config.max_wasm_stack = 1 << 20
    internals.use_pooling_allocator(config, slots=1, max_memory_bytes=1 << 20, decommit_batch=1)
    engine = wasmtime.Engine(config)
    small = wasmtime.Module(engine, '(module (memory (export "memory") 1))')
    first = wasmtime.Store(engine)
    wasmtime.Instance(first, small, [])
    with pytest.raises(wasmtime.WasmtimeError):  # the one slot is taken
        wasmtime.Instance(wasmtime.Store(engine), small, [])
    first.close()
    wasmtime.Instance(wasmtime.Store(engine), small, [])  # free again
    with pytest.raises(wasmtime.WasmtimeError, match="pooling allocator"):  # 2 MiB: over a slot's memory
        wasmtime.Module(engine, "(module (memory 32))")


def _spin_until(handler: typing.Callable[[object], str | None]) -> wasmtime.Store:
    engine = _epoch_engine()
    store = wasmtime.Store(engine)
    tick = wasmtime.Func(store, wasmtime.FuncType([], []), engine.increment_epoch)
    instance = wasmtime.Instance(store, wasmtime.Module(engine, SPIN), [tick])
    spin = instance.exports(store)["spin"]
    assert isinstance(spin, wasmtime.Func)
    callback = internals.EpochCallback(handler)
    callback.arm(store)
    spin(store)
    raise AssertionError("the spin never stopped")


def test_epoch_callback_continues_then_stops_the_store_with_its_message() -> None:
    seen: list[object] = []

    def handler(context: object) -> str | None:
        seen.append(context)
        return "stopped by the test" if len(seen) == 3 else None

    with pytest.raises(wasmtime.WasmtimeError, match="stopped by the test"):
        _spin_until(handler)
    assert len(seen) == 3  # twice "go on one more epoch", then the stop


def test_an_epoch_handler_that_raises_stops_the_run_not_the_host() -> None:
    def handler(context: object) -> str | None:
        raise RuntimeError("a bug in the handler")

    with pytest.raises(wasmtime.WasmtimeError, match="the sandbox host failed"):
        _spin_until(handler)


def test_a_store_context_reads_memory_and_calls_a_function() -> None:
    engine = _epoch_engine()
    store = wasmtime.Store(engine)
    store.set_epoch_deadline(1 << 30)
    found: dict[str, object] = {}
    holder: dict[str, object] = {}

    def probe(caller: wasmtime.Caller) -> None:
        context = internals.caller_context(caller)
        found["span"] = internals.context_memory(holder["memory"])(context)  # type: ignore[arg-type]
        internals.context_caller(holder["set_flag"])(context)  # type: ignore[arg-type]

    func = wasmtime.Func(store, wasmtime.FuncType([], []), probe, access_caller=True)
    exports = wasmtime.Instance(store, wasmtime.Module(engine, PROBE), [func]).exports(store)
    memory, set_flag, flag, add, go = (exports[n] for n in ("memory", "set_flag", "flag", "add", "go"))
    assert isinstance(memory, wasmtime.Memory) and isinstance(go, wasmtime.Func) and isinstance(add, wasmtime.Func)
    holder.update(memory=memory, set_flag=set_flag)
    go(store)
    assert found["span"] == (host_address(store, memory), 2 * 65536)
    assert isinstance(flag, wasmtime.Func) and flag(store) == 7
    fast = internals.FastFunc(add, add.type(store))
    assert fast(store, -3, 1 << 40) == add(store, -3, 1 << 40) == (1 << 40) - 3


def test_as_extern_is_the_union_of_importable_things() -> None:
    names = {getattr(arg, "__forward_arg__", None) or arg.__name__ for arg in typing.get_args(internals.AsExtern)}
    assert {"Func", "Memory", "Global", "Table"} <= names
