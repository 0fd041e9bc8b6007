"""WASI calls the host intercepts: the /workspace quota, sleeping past the deadline, blocking opens.

wasmtime's WASI has no disk quota, and a guest blocked in `poll_oneoff`
(`time.sleep`) is in host code where epoch interruption cannot reach it.
So the linker shadows a few `wasi_snapshot_preview1` functions with Python
wrappers that check first and then call the real implementation.

Quota accounting is conservative and counts each file at its size, or at the
disk the host allocates for it where that is more (see workspace.py's
`Workspace` and diskuse.py): every byte a call may add, to a file's size (a
hole made by a write or allocation past the end, or by growing its size) or
to its blocks, counts against an estimate before the call; when the estimate would pass the quota,
/workspace and /tmp (and the files the run holds open, unlinked or not) are
measured for real, and only a real excess stops the run
(`WorkspaceQuotaExceeded`). Only /workspace (also mounted at /home/user and /mnt/data) and
/tmp are writable (one quota for both), so every write to a descriptor other
than stdout/stderr is a write there.

What is shadowed: every call that adds bytes (fd_write, fd_pwrite,
fd_allocate, fd_filestat_set_size; fd_seek, to know how far past the end the
next fd_write lands) or entries (path_open with O_CREAT,
path_create_directory, path_symlink, path_link). path_rename,
path_unlink_file, path_remove_directory and the time-setting calls add
neither, and the read-only mounts refuse them (and links out of them).
path_rename, path_unlink_file, path_remove_directory, path_link and
path_symlink are also shadowed to answer a trailing slash as Linux does
(wasi_paths.py).
Each guard's own work is bounded whatever the guest passes: at most IOV_MAX
buffers and MAX_SUBSCRIPTIONS subscriptions are looked at (more is EINVAL,
without calling the real function), and stdout/stderr copy only the bytes
the capture keeps. path_open also refuses (EACCES) to open a FIFO, socket or
device under a skill's folder: the real open would block in host code. Which
fds need that check is tracked per run (path_open and fd_renumber keep it
right when the guest closes a preopen and its number is reused).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

import wasmtime

from python_wasm.exports import func, func_imports
from wasmrun.abi import U32
from wasmrun.sandbox.budget import watchdog
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.guest import wasi_paths
from wasmrun.sandbox.guest.capture import HeadTail
from wasmrun.sandbox.guest.guestmemory import guest_memory, read_guest, write_guest
from wasmrun.sandbox.guest.hostcalls import RunContext, current
from wasmrun.sandbox.guest.wasmtime_internals import AsExtern, FastFunc, caller_context

WASI = "wasi_snapshot_preview1"
O_CREAT = 1
SUBSCRIPTION_SIZE = 48
EVENT_SIZE = 32
SUB_TAG_OFFSET, SUB_TIMEOUT_OFFSET, SUB_FLAGS_OFFSET = 8, 24, 40  # in a clock subscription
EVENTTYPE_CLOCK = 0
SUBCLOCK_ABSTIME = 1
ERRNO_INVAL = 28  # WASI's EINVAL
ERRNO_ACCES = 2  # WASI's EACCES
ERRNO_NOENT = 44  # WASI's ENOENT
FILESTAT_SIZE = 64
FILESTAT_FILETYPE = 16  # offset of the u8 filetype in a filestat
FILESTAT_FILESIZE = 32  # offset of the u64 size in a filestat
# What path_open may open. A FIFO, socket or device (only an operator's skill
# folder can hold one: WASI cannot make them) would block the real open in
# host code, out of the epoch's reach, until the pool gives up on the worker.
OPENABLE_FILETYPES = frozenset({3, 4, 7})  # directory, regular file, symbolic link
IOV_MAX = 1024  # buffers in one write call, as in wasi-libc and Linux; more is EINVAL
# Subscriptions one poll_oneoff may pass; more is EINVAL. Every one of them is
# inspected for a clock, so this bounds the host's work per call (about 3 MiB).
MAX_SUBSCRIPTIONS = 65_536


def _iovecs(caller: wasmtime.Caller, iovs: int, count: int) -> list[tuple[int, int]] | None:
    """The (pointer, length) pairs of a write call, each checked against the
    guest's memory, or None when the call is invalid (more than IOV_MAX
    buffers, or more than 4 GiB in all) and must fail with EINVAL."""
    count &= U32
    if count > IOV_MAX:
        return None
    vecs = list(struct.iter_unpack("<II", read_guest(caller, iovs, 8 * count)))
    size = guest_memory(caller).data_len(caller)
    total = 0
    for ptr, length in vecs:
        if ptr + length > size:
            raise errors.RunAborted(errors.HOST_CALL_ERROR, "the guest passed a buffer outside its memory")
        total += length
    return None if total > U32 else vecs


def _gather(caller: wasmtime.Caller, vecs: list[tuple[int, int]], start: int, length: int) -> bytes:
    """Bytes [start, start + length) of the buffers' concatenation; only those are copied."""
    parts = []
    for ptr, n in vecs:
        if length <= 0:
            break
        if start >= n:
            start -= n
            continue
        take = min(n - start, length)
        parts.append(read_guest(caller, ptr + start, take))
        length -= take
        start = 0
    return b"".join(parts)


def _capture(caller: wasmtime.Caller, vecs: list[tuple[int, int]], logs: HeadTail) -> int:
    """Write the buffers to the capture, reading only the bytes it keeps."""
    total = sum(n for _, n in vecs)
    head, tail = logs.kept(total)
    logs.write_parts(total, _gather(caller, vecs, 0, head), _gather(caller, vecs, total - tail, tail))
    return total


def _stream(caller: wasmtime.Caller, vecs: list[tuple[int, int]], total: int, fd: int, ctx: RunContext) -> None:
    """A write to fd 1 or 2 of a streamed run, read again up to what the stream still
    takes. A flush of the guest's stdout buffer (it starts at the buffer) skips what a
    look at the buffer already streamed."""
    stream = ctx.stream
    assert stream is not None
    skip = 0
    if fd == 1 and vecs and ctx.buffers is not None and vecs[0][0] == ctx.buffers.out_buffer:
        skip, stream.guest_seen = min(stream.guest_seen, total), 0
    if stream.open and total > skip:
        stream.write("stdout" if fd == 1 else "stderr", _gather(caller, vecs, skip, min(total - skip, stream.left + 1)))


# One subscription (48 bytes): its tag, and for a clock its id, timeout and flags.
_SUBSCRIPTION = struct.Struct("<8xB7xI4xQ8xH6x")


def _clock_timeouts(caller: wasmtime.Caller, subs: int, count: int, now: Callable[[int], int]) -> dict[int, int]:
    """Each clock subscription's timeout, in ns from now, by its index.

    `now(clock_id)` reads the guest's own clock: absolute timeouts
    (CPython's sleep uses them) are on WASI's clocks, not the host's."""
    timeouts: dict[int, int] = {}
    clocks: dict[int, int] = {}
    raw = read_guest(caller, subs, SUBSCRIPTION_SIZE * count)
    for index, (tag, clock_id, timeout, flags) in enumerate(_SUBSCRIPTION.iter_unpack(raw)):
        if tag != EVENTTYPE_CLOCK:
            continue
        if flags & SUBCLOCK_ABSTIME:
            if clock_id not in clocks:
                clocks[clock_id] = now(clock_id)
            timeout = max(0, timeout - clocks[clock_id])
        timeouts[index] = timeout
    return timeouts


def _make_due(caller: wasmtime.Caller, subs: int, indexes: list[int]) -> None:
    """The clock subscriptions `indexes`: due at once (timeout 0, relative)."""
    for index in indexes:
        at = subs + SUBSCRIPTION_SIZE * index
        write_guest(caller, at + SUB_TIMEOUT_OFFSET, 8, bytes(8))
        write_guest(caller, at + SUB_FLAGS_OFFSET, 2, bytes(2))


def _asked_to_stop(caller: wasmtime.Caller, subs: int, clocks: list[int]) -> bool:
    """A run that must stop (at its deadline, or interrupted) in a sleep: asked to stop
    (watchdog.RunWatch.stopping) and, while its grace lasts, its clock subscriptions made due now."""
    watch = watchdog.current_watch()
    if watch is None or watch.check() is None or not watch.stopping(caller_context(caller)):
        return False
    _make_due(caller, subs, clocks)
    return True


_VALTYPES = {"i32": "i32", "i64": "i64", "f32": "f32", "f64": "f64"}


def _trampoline_wat(types: dict[str, wasmtime.FuncType]) -> str:
    """A module that re-exports real WASI functions, with the guest's memory.

    WASI's host functions find the memory through the *calling instance's*
    "memory" export, so Python cannot call them directly. Called through this
    module, which imports the guest's memory and exports it again, they work
    on the guest's memory as if the guest had called them.
    """
    imports = ['(module', '  (import "env" "memory" (memory 0))']
    funcs = []
    for i, (name, ty) in enumerate(types.items()):
        params = " ".join(_VALTYPES[str(p)] for p in ty.params)
        results = " ".join(_VALTYPES[str(r)] for r in ty.results)
        sig = f"(param {params}) (result {results})" if results else f"(param {params})"
        imports.append(f'  (import "{WASI}" "{name}" (func $real{i} {sig}))')
        gets = " ".join(f"(local.get {j})" for j in range(len(ty.params)))
        funcs.append(f'  (func (export "{name}") {sig} (call $real{i} {gets}))')
    lines = imports + funcs + ['  (export "memory" (memory 0)))']
    return "\n".join(lines)


class _Wrappers:
    """Shadowing functions; each checks, then calls the real WASI function."""

    def __init__(self, engine: wasmtime.Engine, types: dict[str, wasmtime.FuncType]) -> None:
        self.real = wasmtime.Linker(engine)
        self.real.define_wasi()
        self.names = list(types)
        self.types = types
        self.trampoline = wasmtime.Module(engine, _trampoline_wat(types))

    def _call(self, caller: wasmtime.Caller, name: str, *args: int) -> int:
        ctx = current()
        funcs = ctx.wasi_funcs
        if not funcs:
            memory = guest_memory(caller)
            imports: list[AsExtern] = [memory] + [self.real.get(caller, WASI, n) for n in self.names]
            instance = wasmtime.Instance(caller, self.trampoline, imports)
            exports = instance.exports(caller)
            funcs.update((n, FastFunc(func(exports, n), self.types[n])) for n in self.names)
        return int(funcs[name](caller, *args))

    def fd_write(self, caller, fd, iovs, iovs_len, nwritten):  # type: ignore[no-untyped-def]
        vecs = _iovecs(caller, iovs, iovs_len)
        if vecs is None:
            return ERRNO_INVAL
        ctx = current()
        if fd in (1, 2):
            # stdout/stderr go straight to the run's capture: no file behind them.
            ctx.drain_guest_output(caller, guest_memory(caller))
            written = _capture(caller, vecs, ctx.logs)
            if ctx.stream is not None:
                _stream(caller, vecs, written, fd, ctx)
            write_guest(caller, nwritten, 4, struct.pack("<I", written))
            return 0
        gap = ctx.seek_gaps.pop(fd, 0)  # a write after a seek past the end: the hole counts too
        ctx.workspace.charge(gap + ctx.workspace.write_bound(sum(n for _, n in vecs)))
        return self._call(caller, "fd_write", fd, iovs, iovs_len, nwritten)

    def fd_seek(self, caller, fd, offset, whence, newoffset):  # type: ignore[no-untyped-def]
        result = self._call(caller, "fd_seek", fd, offset, whence, newoffset)
        ctx = current()
        ctx.seek_gaps.pop(fd, None)
        if result == 0 and fd > 2:
            (position,) = struct.unpack("<Q", read_guest(caller, newoffset, 8))
            if position > 0:
                size = self._file_size(caller, fd)
                if size is not None and position > size:
                    ctx.seek_gaps[fd] = position - size
        return result

    def fd_pwrite(self, caller, fd, iovs, iovs_len, offset, nwritten):  # type: ignore[no-untyped-def]
        vecs = _iovecs(caller, iovs, iovs_len)
        if vecs is None:
            return ERRNO_INVAL
        # Past the end, the gap is a hole: no disk, but the file's size, which counts.
        workspace = current().workspace
        workspace.charge(self._growth(caller, fd, offset) + workspace.write_bound(sum(n for _, n in vecs)))
        return self._call(caller, "fd_pwrite", fd, iovs, iovs_len, offset, nwritten)

    def fd_allocate(self, caller, fd, offset, length):  # type: ignore[no-untyped-def]
        workspace = current().workspace
        workspace.charge(self._growth(caller, fd, offset) + workspace.write_bound(length))
        return self._call(caller, "fd_allocate", fd, offset, length)

    def fd_filestat_set_size(self, caller, fd, size):  # type: ignore[no-untyped-def]
        # Growth leaves a hole on most filesystems, not on all: either way the file
        # counts at its new size, so the growth is charged (a shrink charges nothing).
        workspace = current().workspace
        workspace.charge(self._growth(caller, fd, size))
        return self._call(caller, "fd_filestat_set_size", fd, size)

    def _growth(self, caller: wasmtime.Caller, fd: int, end: int) -> int:
        """How much longer the file at `fd` becomes if it reaches `end` (its
        whole `end` when its size cannot be read: the real call fails alike)."""
        if end <= 0:
            return 0  # (negative: an offset past 2**63, which the real call refuses)
        size = self._file_size(caller, fd)
        return max(0, end - (size or 0))

    def _file_size(self, caller: wasmtime.Caller, fd: int) -> int | None:
        """The size of the file at `fd`, or None (not a file this run can stat).
        The filestat needs 64 bytes of guest memory: borrowed at address 0 and put
        back (the guest is blocked in this call; WASI wants it 8-byte aligned)."""
        if guest_memory(caller).data_len(caller) < FILESTAT_SIZE:
            return None
        saved = read_guest(caller, 0, FILESTAT_SIZE)
        try:
            if self._call(caller, "fd_filestat_get", fd, 0) != 0:
                return None
            (size,) = struct.unpack("<Q", read_guest(caller, FILESTAT_FILESIZE, 8))
            return int(size)
        finally:
            write_guest(caller, 0, FILESTAT_SIZE, saved)

    def path_open(self, caller, fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, out):  # type: ignore[no-untyped-def]
        ctx = current()
        if oflags & O_CREAT:
            ctx.workspace.charge(nfiles=1)
        plain = fd in ctx.plain_fds
        if not plain:
            refused = self._refuse_special(caller, fd, dirflags, path, path_len)
            # A path that does not exist yet is no FIFO: O_CREAT gets the real call's answer.
            if refused and not (refused == ERRNO_NOENT and oflags & O_CREAT):
                return refused
        result = self._call(
            caller, "path_open", fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, out
        )
        if result == 0:
            # A number reused: the earlier file's seek is not this one's.
            ctx.seek_gaps.pop(struct.unpack("<I", read_guest(caller, out, 4))[0], None)
        if result == 0 and not plain:
            # The new fd names something under a skill: whatever plain fd had its number
            # before (a closed preopen's number is reused) no longer vouches for it.
            (opened,) = struct.unpack("<I", read_guest(caller, out, 4))
            ctx.plain_fds.discard(opened)
        return result

    def fd_renumber(self, caller, fd, to):  # type: ignore[no-untyped-def]
        ctx = current()
        result = self._call(caller, "fd_renumber", fd, to)
        if result == 0:
            # `to` now names what `fd` named; `fd` is closed.
            if fd in ctx.plain_fds:
                ctx.plain_fds.add(to)
            else:
                ctx.plain_fds.discard(to)
            ctx.plain_fds.discard(fd)
            ctx.seek_gaps.pop(to, None)
            if fd in ctx.seek_gaps:
                ctx.seek_gaps[to] = ctx.seek_gaps.pop(fd)
        return result

    def _refuse_special(self, caller: wasmtime.Caller, fd: int, dirflags: int, path: int, path_len: int) -> int:
        """0 when `path` may be opened; else the errno to answer: EACCES for a FIFO,
        socket or device, or the stat's own error (the open would fail alike). Fails
        closed: a path the check cannot look at is not opened."""
        memory_len = guest_memory(caller).data_len(caller)
        path, path_len = path & U32, path_len & U32
        # The filestat needs 64 bytes of guest memory: borrow the bytes beside
        # the path and put them back (the guest is blocked in this call).
        # (WASI wants it 8-byte aligned.)
        after = (path + path_len + 7) & ~7
        scratch = after if after + FILESTAT_SIZE <= memory_len else (path - FILESTAT_SIZE) & ~7
        if scratch < 0 or path + path_len > memory_len:
            return ERRNO_INVAL
        saved = read_guest(caller, scratch, FILESTAT_SIZE)
        try:
            error = self._call(caller, "path_filestat_get", fd, dirflags, path, path_len, scratch)
            if error:
                return error
            filetype = read_guest(caller, scratch + FILESTAT_FILETYPE, 1)[0]
            return 0 if filetype in OPENABLE_FILETYPES else ERRNO_ACCES
        finally:
            write_guest(caller, scratch, FILESTAT_SIZE, saved)

    def path_create_directory(self, caller, fd, path, path_len):  # type: ignore[no-untyped-def]
        current().workspace.charge(nfiles=1)
        return self._call(caller, "path_create_directory", fd, path, path_len)

    def path_symlink(self, caller, old, old_len, fd, new, new_len):  # type: ignore[no-untyped-def]
        current().workspace.charge(nfiles=1)
        return wasi_paths.symlink(caller, self._real(caller), old, old_len, fd, new, new_len)

    def path_link(self, caller, old_fd, flags, old, old_len, new_fd, new, new_len):  # type: ignore[no-untyped-def]
        current().workspace.charge(nfiles=1)
        return wasi_paths.link(caller, self._real(caller), old_fd, flags, old, old_len, new_fd, new, new_len)

    # Trailing slashes answered as on Linux (wasi_paths.py); nothing to charge.

    def _real(self, caller: wasmtime.Caller) -> wasi_paths.RealCall:
        return lambda name, *args: self._call(caller, name, *args)

    def path_remove_directory(self, caller, fd, path, path_len):  # type: ignore[no-untyped-def]
        return wasi_paths.remove_directory(caller, self._real(caller), fd, path, path_len)

    def path_unlink_file(self, caller, fd, path, path_len):  # type: ignore[no-untyped-def]
        return wasi_paths.unlink_file(caller, self._real(caller), fd, path, path_len)

    def path_rename(self, caller, old_fd, old, old_len, new_fd, new, new_len):  # type: ignore[no-untyped-def]
        return wasi_paths.rename(caller, self._real(caller), old_fd, old, old_len, new_fd, new, new_len)

    def poll_oneoff(self, caller, subs, events, count, nevents):  # type: ignore[no-untyped-def]
        ctx = current()

        def guest_clock(clock_id: int) -> int:
            # The events buffer (32 bytes a subscription) is scratch until the real call.
            if self._call(caller, "clock_time_get", clock_id, 1, events) != 0:
                return 0  # no such clock: its timeout counts in full, as if relative
            (now,) = struct.unpack("<Q", read_guest(caller, events, 8))
            return int(now)

        count &= U32
        if count > MAX_SUBSCRIPTIONS:
            return ERRNO_INVAL
        # The real call waits first and writes the events after: a bad events
        # buffer must fail here, not after a sleep the guard did not see.
        if (events & U32) + EVENT_SIZE * count > guest_memory(caller).data_len(caller):
            raise errors.RunAborted(errors.HOST_CALL_ERROR, "the guest passed a buffer outside its memory")
        timeouts = _clock_timeouts(caller, subs, count, guest_clock) if count else {}
        if not timeouts:
            return self._call(caller, "poll_oneoff", subs, events, count, nevents)
        wait = min(timeouts.values())
        if wait:
            ctx.flush_stream(caller)  # what it wrote before sleeping is seen while it sleeps
        remaining = ctx.deadline - time.monotonic()
        watch = watchdog.current_watch()
        # The host sleeps, not wasmtime's poll_oneoff (which nothing could wake): until the
        # shortest timeout, the deadline, or an interrupt, whichever comes first.
        stop = _sleep(watch, min(wait / 1e9, max(0.0, remaining)))
        if stop or wait / 1e9 >= remaining:
            # Then stop the run as the epoch would: the sleep returns at once and the guest
            # raises where it slept (its traceback says so); a guest that cannot be asked is
            # stopped here.
            if not _asked_to_stop(caller, subs, list(timeouts)):
                kind = watch.fired if watch is not None and watch.fired is not None else errors.TIMEOUT
                message = watch.error_message() if watch is not None and watch.fired is not None else (
                    errors.timed_out(ctx.limits.timeout_ms))
                raise errors.RunAborted(kind, message)
        elif wait:
            # Slept the shortest timeout here: those subscriptions are due, the others not yet.
            _make_due(caller, subs, [index for index, ns in timeouts.items() if ns <= wait])
        return self._call(caller, "poll_oneoff", subs, events, count, nevents)


def _sleep(watch: watchdog.RunWatch | None, seconds: float) -> bool:
    """Sleep `seconds` on the run's thread; True if it was interrupted meanwhile."""
    if seconds <= 0:
        return watch is not None and watch.woken.is_set()
    if watch is None:
        time.sleep(seconds)
        return False
    return watch.sleep(seconds)


GUARDED = (
    "fd_write", "fd_seek", "fd_pwrite", "fd_allocate", "fd_filestat_set_size", "path_open", "fd_renumber",
    "path_create_directory", "path_symlink", "path_link", "poll_oneoff",
    "path_remove_directory", "path_unlink_file", "path_rename",
)
# Real WASI calls the wrappers need but do not shadow.
PASSED_THROUGH = ("clock_time_get", "path_filestat_get", "fd_filestat_get")


def define_guarded_wasi(engine: wasmtime.Engine, linker: wasmtime.Linker, module: wasmtime.Module) -> None:
    """Define WASI in `linker`, with the GUARDED functions shadowed."""
    linker.define_wasi()
    imported = func_imports(module, WASI)
    types = {name: imported[name] for name in GUARDED + PASSED_THROUGH if name in imported}
    wrappers = _Wrappers(engine, types)
    linker.allow_shadowing = True
    for name in GUARDED:
        if name not in types:
            continue
        ty = types[name]
        linker.define_func(WASI, name, ty, getattr(wrappers, name), access_caller=True)
    linker.allow_shadowing = False
