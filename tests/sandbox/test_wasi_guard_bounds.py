"""The WASI guards hold for any argument a module can pass, not only what CPython passes.

A hand-written module calls the guarded `wasi_snapshot_preview1` imports
through the engine's own linker: write calls with more buffers than WASI
allows, stdout writes far larger than the capture keeps, and poll_oneoff
with more subscriptions than the guard used to look at.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
import wasmtime

from wasmrun.sandbox.budget.wasi_guard import IOV_MAX, MAX_SUBSCRIPTIONS
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.files.workspace import Workspace
from wasmrun.sandbox.guest.capture import HeadTail
from wasmrun.sandbox.guest.hostcalls import RunContext, set_current

EINVAL = 28
IOVS, DATA, SUBS, EVENTS = 1024, 1 << 20, 4 << 20, 8 << 20  # addresses in the module's memory
MiB = 1 << 20

WAT = f"""
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_pwrite" (func $fd_pwrite (param i32 i32 i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_filestat_set_size" (func $fd_set_size (param i32 i64) (result i32)))
  (memory (export "memory") 256)
  (data (i32.const 0) "f.bin")
  ;; `count` buffers, each the same `len` bytes at DATA
  (func $iovecs (param $count i32) (param $len i32) (local $i i32)
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
      (i32.store (i32.add (i32.const {IOVS}) (i32.mul (local.get $i) (i32.const 8))) (i32.const {DATA}))
      (i32.store (i32.add (i32.const {IOVS + 4}) (i32.mul (local.get $i) (i32.const 8))) (local.get $len))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next))))
  ;; /workspace/f.bin, created; its fd is stored at 16 (fd 3 is the /workspace preopen)
  (func (export "open") (result i32)
    (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 5) (i32.const 1)
      (i64.const 0x1FFFFFFF) (i64.const 0x1FFFFFFF) (i32.const 0) (i32.const 16)))
  (func (export "file_fd") (result i32) (i32.load (i32.const 16)))
  (func (export "write") (param $fd i32) (param $count i32) (param $len i32) (result i32)
    (call $iovecs (local.get $count) (local.get $len))
    (call $fd_write (local.get $fd) (i32.const {IOVS}) (local.get $count) (i32.const 32)))
  (func (export "pwrite") (param $fd i32) (param $count i32) (param $len i32) (result i32)
    (call $iovecs (local.get $count) (local.get $len))
    (call $fd_pwrite (local.get $fd) (i32.const {IOVS}) (local.get $count) (i64.const 0) (i32.const 32)))
  (func (export "written") (result i32) (i32.load (i32.const 32)))
  (func (export "set_size") (param $fd i32) (param $size i64) (result i32)
    (call $fd_set_size (local.get $fd) (local.get $size)))
  ;; `count` relative clock subscriptions (monotonic clock) of `ns` each
  (func (export "sleep") (param $count i32) (param $ns i64) (result i32)
    (call $sleep_into (local.get $count) (local.get $ns) (i32.const {EVENTS})))
  ;; the same, with the events written past the end of memory
  (func (export "sleep_bad_events") (param $count i32) (param $ns i64) (result i32)
    (call $sleep_into (local.get $count) (local.get $ns) (i32.const -64)))
  (func $sleep_into (param $count i32) (param $ns i64) (param $events i32) (result i32) (local $i i32) (local $at i32)
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
      (local.set $at (i32.add (i32.const {SUBS}) (i32.mul (local.get $i) (i32.const 48))))
      (i64.store (local.get $at) (i64.const 7))
      (i32.store8 offset=8 (local.get $at) (i32.const 0))
      (i32.store offset=16 (local.get $at) (i32.const 1))
      (i64.store offset=24 (local.get $at) (local.get $ns))
      (i64.store offset=32 (local.get $at) (i64.const 0))
      (i32.store16 offset=40 (local.get $at) (i32.const 0))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (call $poll_oneoff (i32.const {SUBS}) (local.get $events) (local.get $count) (i32.const 40)))
)
"""


class Guest:
    def __init__(self, engine, blobs, workspace: Path, limits: Limits) -> None:
        module = wasmtime.Module(engine.image.engine, WAT)
        self.store = wasmtime.Store(engine.image.engine)
        self.store.set_epoch_deadline(10**9)
        # `workspace` is the run's folder: /workspace is its "workspace" (and /tmp its "tmp").
        run = Workspace(workspace, limits.workspace_bytes, limits.workspace_files)
        run.path.mkdir(exist_ok=True)
        run.tmp.mkdir(exist_ok=True)
        wasi = wasmtime.WasiConfig()
        wasi.preopen_dir(str(run.path), "/workspace")
        self.store.set_wasi(wasi)
        self.exports = engine.image.linker.instantiate(self.store, module).exports(self.store)
        self.ctx = RunContext("run_wat", b"", limits, blobs, [], run)
        self.ctx.deadline = time.monotonic() + limits.timeout_ms / 1000
        self.memory = self.exports["memory"]

    def __call__(self, name: str, *args: int) -> int:
        return self.exports[name](self.store, *args)

    def open_file(self) -> int:
        assert self("open") == 0
        return self("file_fd")


@pytest.fixture()
def guest(engine, blobs, tmp_path):
    made = []

    def make(**limits: int) -> Guest:
        g = Guest(engine, blobs, tmp_path, Limits(**limits))
        set_current(g.ctx)
        made.append(g)
        return g

    yield make
    set_current(None)
    for g in made:
        g.store.close()


def test_a_write_with_more_buffers_than_iov_max_is_refused_and_writes_nothing(guest, tmp_path):
    g = guest(workspace_bytes=MiB)
    fd = g.open_file()
    # 1,100 buffers of 4 KiB: 4.3 MiB, four times the quota (once charged as 0 bytes and written).
    assert g("write", fd, IOV_MAX + 76, 4096) == EINVAL
    assert g("pwrite", fd, IOV_MAX + 76, 4096) == EINVAL
    assert (tmp_path / "workspace" / "f.bin").stat().st_size == 0


def test_a_write_with_iov_max_buffers_is_charged_in_full(guest, tmp_path):
    g = guest(workspace_bytes=MiB)
    fd = g.open_file()
    with pytest.raises(errors.RunAborted) as info:
        g("write", fd, IOV_MAX, 4096)
    assert info.value.error_type == errors.WORKSPACE_QUOTA
    assert (tmp_path / "workspace" / "f.bin").stat().st_size == 0


def test_a_small_write_with_many_buffers_goes_through(guest, tmp_path):
    g = guest(workspace_bytes=MiB)
    fd = g.open_file()
    assert g("write", fd, IOV_MAX, 16) == 0
    written = g("written")  # wasmtime may write less than all (a short write, as POSIX allows)
    assert 16 <= written <= IOV_MAX * 16
    assert (tmp_path / "workspace" / "f.bin").stat().st_size == written


def test_stdout_copies_only_what_the_capture_keeps(guest):
    g = guest(output_bytes=64 * 1024)
    g.memory.write(g.store, b"A" + b"m" * (MiB - 2) + b"Z", DATA)
    tracemalloc.start()
    try:
        assert g("write", 1, 64, MiB) == 0  # 64 MiB of output in one call
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert g("written") == 64 * MiB
    logs = g.ctx.logs
    assert logs.total == 64 * MiB
    assert logs.cut == 64 * MiB - 64 * 1024
    assert logs.head.startswith(b"Amm") and logs.tail.endswith(b"mmZ")
    assert peak < 4 * MiB  # the host copied about the 64 KiB it kept, not 64 MiB


def test_stdout_with_more_buffers_than_iov_max_is_refused(guest):
    g = guest()
    assert g("write", 2, IOV_MAX + 1, 8) == EINVAL
    assert g.ctx.logs.total == 0


def test_poll_with_more_than_4096_clock_subscriptions_stops_at_the_deadline(guest):
    g = guest(timeout_ms=300)
    start = time.monotonic()
    with pytest.raises(errors.RunAborted) as info:
        g("sleep", 4097, 3 * 10**9)  # 3 s each, past the 300 ms deadline
    assert info.value.error_type == errors.TIMEOUT
    assert time.monotonic() - start < 2.5


def test_poll_with_too_many_subscriptions_is_refused_without_sleeping(guest):
    g = guest(timeout_ms=60_000)
    start = time.monotonic()
    assert g("sleep", MAX_SUBSCRIPTIONS + 1, 30 * 10**9) == EINVAL
    assert time.monotonic() - start < 20  # not the 30 s asked for


def test_poll_with_an_events_buffer_outside_memory_fails_before_sleeping(guest):
    g = guest(timeout_ms=60_000)
    start = time.monotonic()
    with pytest.raises(errors.RunAborted) as info:
        g("sleep_bad_events", 1, 30 * 10**9)
    assert info.value.error_type == errors.HOST_CALL_ERROR
    assert time.monotonic() - start < 20


def test_a_short_poll_still_sleeps(guest):
    g = guest(timeout_ms=10_000)
    assert g("sleep", 5000, 1_000_000) == 0  # 1 ms


@pytest.mark.parametrize("limit", [1, 2, 7, 64])
def test_head_tail_from_parts_matches_the_whole_stream(limit):
    writes = [b"", b"a", b"bcdefgh", b"ij" * 40, b"k", b"0123456789" * 3]
    whole, parts = HeadTail(limit), HeadTail(limit)
    stream = b""
    for data in writes:
        stream += data
        whole.write(data)
        head, tail = parts.kept(len(data))
        parts.write_parts(len(data), data[:head], data[len(data) - tail :])
        assert (parts.head, parts.tail, parts.total) == (whole.head, whole.tail, whole.total)
        kept = bytes(whole.head) + bytes(whole.tail)
        assert bytes(whole.head) == stream[: len(whole.head)]
        assert stream.endswith(bytes(whole.tail))
        assert len(kept) == min(len(stream), limit)


# Every preview1 call that can allocate disk or make an entry.
ALLOCATING = {
    "fd_write", "fd_pwrite", "fd_allocate", "fd_filestat_set_size", "path_open",
    "path_create_directory", "path_symlink", "path_link",
}


def test_every_call_of_the_guest_that_can_allocate_disk_is_guarded(engine):
    """The guest can only call what its module imports; each such call is shadowed by a
    charge first (fd_allocate included: today's CPython build does not import it at all,
    so `posix_fallocate` is not reachable from a run; a build that did would be charged)."""
    from python_wasm.exports import func_imports
    from wasmrun.sandbox.budget.wasi_guard import GUARDED, WASI

    imported = set(func_imports(engine.image.module, WASI))
    assert "fd_write" in imported and "path_open" in imported
    assert ALLOCATING & imported <= set(GUARDED)
    assert ALLOCATING <= set(GUARDED)


def test_growth_past_the_end_is_charged_at_the_new_size(guest, tmp_path):
    """ftruncate's fd_filestat_set_size makes a file that long, holes or not: the
    growth is charged before the call, so 10 GiB is refused and 512 KiB is not.
    (fd_allocate is charged alike; no guest image imports it: see below.)"""
    g = guest(workspace_bytes=MiB)
    fd = g.open_file()
    with pytest.raises(errors.RunAborted) as info:
        g("set_size", fd, 10 << 30)
    assert info.value.error_type == errors.WORKSPACE_QUOTA
    assert (tmp_path / "workspace" / "f.bin").stat().st_size == 0
    assert g("set_size", fd, 512 * 1024) == 0
    assert (tmp_path / "workspace" / "f.bin").stat().st_size == 512 * 1024
    assert g("file_fd") == fd  # the guest's own memory at the borrowed scratch is as it was
