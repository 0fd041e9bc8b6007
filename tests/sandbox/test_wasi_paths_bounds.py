"""The trailing-slash guards (wasi_paths.py) hold for any argument a module can
pass: a hand-written module calls path_remove_directory, path_unlink_file and
path_rename through the engine's own linker with paths at the edges of its
memory, outside it, past PATH_MAX and of invalid UTF-8."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import wasmtime

from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.files.workspace import Workspace
from wasmrun.sandbox.guest.hostcalls import RunContext, set_current

PAGES = 4
END = PAGES * 65536
ENOENT, ENOTDIR, ENAMETOOLONG, ENOTEMPTY = 44, 54, 37, 55

WAT = f"""
(module
  (import "wasi_snapshot_preview1" "path_remove_directory" (func $rmdir (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_unlink_file" (func $unlink (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_rename" (func $rename (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") {PAGES})
  (func (export "rmdir") (param $ptr i32) (param $len i32) (result i32)
    (call $rmdir (i32.const 3) (local.get $ptr) (local.get $len)))
  (func (export "unlink") (param $ptr i32) (param $len i32) (result i32)
    (call $unlink (i32.const 3) (local.get $ptr) (local.get $len)))
  (func (export "rename") (param $a i32) (param $alen i32) (param $b i32) (param $blen i32) (result i32)
    (call $rename (i32.const 3) (local.get $a) (local.get $alen) (i32.const 3) (local.get $b) (local.get $blen)))
)
"""


class Guest:
    def __init__(self, engine, blobs, workspace: Path) -> None:
        limits = Limits()
        self.store = wasmtime.Store(engine.image.engine)
        self.store.set_epoch_deadline(10**9)
        run = Workspace(workspace, limits.workspace_bytes, limits.workspace_files)
        run.path.mkdir(exist_ok=True)
        run.tmp.mkdir(exist_ok=True)
        self.root = run.path
        wasi = wasmtime.WasiConfig()
        wasi.preopen_dir(str(run.path), "/workspace")
        self.store.set_wasi(wasi)
        module = wasmtime.Module(engine.image.engine, WAT)
        self.exports = engine.image.linker.instantiate(self.store, module).exports(self.store)
        self.ctx = RunContext("run_wat", b"", limits, blobs, [], run)
        self.ctx.deadline = time.monotonic() + 60
        self.memory = self.exports["memory"]

    def put(self, at: int, data: bytes) -> tuple[int, int]:
        self.memory.write(self.store, data, at)
        return at, len(data)

    def __call__(self, name: str, *args: int) -> int:
        return self.exports[name](self.store, *args)


@pytest.fixture()
def guest(engine, blobs, tmp_path):
    g = Guest(engine, blobs, tmp_path)
    set_current(g.ctx)
    yield g
    set_current(None)
    g.store.close()


def test_a_path_at_the_end_of_memory_borrows_scratch_before_it_and_restores_it(guest):
    (guest.root / "d").mkdir()
    before = bytes(range(256)) * 4
    guest.put(END - 1024 - 64, before)
    at, n = guest.put(END - 2, b"d/")  # no room after it for the filestat
    assert guest("rmdir", at, n) == 0
    assert not (guest.root / "d").exists()
    assert guest.memory.read(guest.store, END - 1024 - 64, END - 64) == before


def test_a_path_outside_memory_stops_the_run(guest):
    with pytest.raises(errors.RunAborted) as info:
        guest("rmdir", END - 1, 8)
    assert info.value.error_type == errors.HOST_CALL_ERROR
    with pytest.raises(errors.RunAborted):
        guest("rename", 0, 2, -4, 16)


def test_long_and_odd_paths_get_the_real_calls_answer(guest):
    (guest.root / "f").write_text("x")
    at, n = guest.put(1024, b"a" * 5000 + b"/")
    assert guest("rmdir", at, n) == ENAMETOOLONG
    at, n = guest.put(1024, b"\xff\xfe/")
    assert guest("rmdir", at, n) not in (0, ENOTDIR)  # not a name the host has: nothing removed
    at, n = guest.put(1024, b"////")
    assert guest("rmdir", at, n) != 0
    at, n = guest.put(1024, b"f/")
    assert guest("unlink", at, n) == ENOTDIR
    assert guest("rmdir", at, n) == ENOTDIR
    new_at, new_n = guest.put(2048, b"g")
    assert guest("rename", at, n, new_at, new_n) == ENOTDIR
    assert (guest.root / "f").read_text() == "x"
    at, n = guest.put(1024, b"nope/..")
    assert guest("rmdir", at, n) == ENOENT
    at, n = guest.put(1024, b"f/..")
    assert guest("rmdir", at, n) == ENOTDIR
