"""Host functions check every pointer and length: a bad one fails the run, not the host.

The real guest never passes bad pointers, so a hand-written module calls the
same `wasmrun` imports, through the engine's own linker, with hostile values.
"""

from __future__ import annotations

import pytest
import wasmtime

from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.files.workspace import Workspace
from wasmrun.sandbox.guest.hostcalls import RunContext, set_current

HOSTILE = """
(module
  (import "wasmrun" "request_read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmrun" "respond" (func $respond (param i32 i32)))
  (import "wasmrun" "blob_size" (func $blob_size (param i32 i32) (result i64)))
  (import "wasmrun" "blob_read" (func $blob_read (param i32 i32 i64 i32 i32) (result i64)))
  (import "wasmrun" "blob_write" (func $blob_write (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasmrun" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "text/plain")
  (func (export "request_past_end") (result i32)
    (call $request_read (i32.const 65530) (i32.const 100)))
  (func (export "request_negative_ptr") (result i32)
    (call $request_read (i32.const -8) (i32.const 4)))
  (func (export "respond_past_end")
    (call $respond (i32.const 65000) (i32.const 10000)))
  (func (export "log_wrapping_ptr")
    (call $log (i32.const 20) (i32.const -16) (i32.const 64)))
  (func (export "blob_size_huge_id") (result i64)
    (call $blob_size (i32.const 0) (i32.const -1)))
  (func (export "blob_write_huge_len") (result i32)
    (call $blob_write (i32.const 0) (i32.const -1) (i32.const 0) (i32.const 10) (i32.const 100) (i32.const 64)))
  (func (export "blob_write_out_past_end") (result i32)
    (call $blob_write (i32.const 0) (i32.const 4) (i32.const 0) (i32.const 10) (i32.const 65530) (i32.const 64)))
  (func (export "blob_write_bad_kind") (result i32)
    (call $blob_write (i32.const 0) (i32.const 4) (i32.const 65535) (i32.const 10) (i32.const 100) (i32.const 64)))
)
"""


@pytest.fixture()
def hostile(engine, blobs, tmp_path):
    module = wasmtime.Module(engine.image.engine, HOSTILE)
    store = wasmtime.Store(engine.image.engine)
    store.set_epoch_deadline(10**6)
    instance = engine.image.linker.instantiate(store, module)
    workspace = Workspace(tmp_path, Limits().workspace_bytes, Limits().workspace_files)
    ctx = RunContext("run_test", b"x" * 64, Limits(), blobs, [], workspace)
    set_current(ctx)
    yield store, instance.exports(store), ctx
    set_current(None)


@pytest.mark.parametrize(
    "export",
    [
        "request_past_end",
        "request_negative_ptr",
        "respond_past_end",
        "log_wrapping_ptr",
        "blob_write_huge_len",
        "blob_write_out_past_end",
    ],
)
def test_bad_pointer_aborts_the_call(hostile, export):
    store, exports, _ = hostile
    with pytest.raises(errors.RunAborted) as info:
        exports[export](store)
    assert info.value.error_type in (errors.HOST_CALL_ERROR, errors.BLOB_BUDGET)


def test_oversized_blob_id_is_just_not_found(hostile):
    store, exports, _ = hostile
    assert exports["blob_size_huge_id"](store) == -1


def test_kind_out_of_bounds_is_refused(hostile):
    store, exports, ctx = hostile
    with pytest.raises(errors.RunAborted):
        exports["blob_write_bad_kind"](store)
    assert ctx.output_blobs == []


def test_engine_still_runs_after_hostile_calls(hostile, run_code):
    store, exports, _ = hostile
    with pytest.raises(errors.RunAborted):
        exports["request_past_end"](store)
    set_current(None)
    assert run_code("def main(args):\n    return 'ok'").output == "ok"
