"""wasmrun.sandbox.guest.wasmtime_internals.FastFunc against wasmtime-py's own Func.__call__."""

from __future__ import annotations

import pytest
import wasmtime

from wasmrun.sandbox.guest.wasmtime_internals import FastFunc

WAT = """
(module
  (import "" "boom" (func $boom))
  (func (export "mix") (param i32 i64 i32) (result i64)
    (i64.add (i64.extend_i32_s (local.get 0)) (i64.mul (local.get 1) (i64.extend_i32_u (local.get 2)))))
  (func (export "neg") (param i32) (result i32) (i32.sub (i32.const 0) (local.get 0)))
  (func (export "nothing") (param i32))
  (func (export "trap") (param i32) (result i32) unreachable)
  (func (export "calls_host") (param i32) (result i32) (call $boom) (local.get 0)))
"""


class Boom(Exception):
    pass


@pytest.fixture()
def module():
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)

    def boom() -> None:
        raise Boom("from the host")

    host = wasmtime.Func(store, wasmtime.FuncType([], []), boom)
    instance = wasmtime.Instance(store, wasmtime.Module(engine, WAT), [host])
    exports = instance.exports(store)

    def fast(name: str) -> FastFunc:
        func = exports[name]
        return FastFunc(func, func.type(store))

    return store, exports, fast


def test_results_match_func_call(module):
    store, exports, fast = module
    for args in [(1, 2, 3), (-5, 1 << 40, 7), (2**31 - 1, -(2**62), 2**32 - 1)]:
        assert fast("mix")(store, *args) == exports["mix"](store, *args)
    assert fast("neg")(store, 5) == exports["neg"](store, 5) == -5
    assert fast("nothing")(store, 1) is None


def test_traps_and_host_exceptions_propagate(module):
    store, _, fast = module
    with pytest.raises(wasmtime.Trap):
        fast("trap")(store, 1)
    with pytest.raises(Boom):
        fast("calls_host")(store, 1)
    assert fast("neg")(store, 3) == -3  # usable after a trap


def test_wrong_argument_count_is_refused(module):
    store, _, fast = module
    with pytest.raises(TypeError):
        fast("neg")(store, 1, 2)
