"""A run inside a session: the worker's half (the server's is protocol/sessions.py).

A session's state lives in its folder on disk, one version at a time:

    <folder>/v<N>/memory      the pages of linear memory written since the guest
                              snapshot, and the memory's size (with
                              memory.delta: see pages.py)
    <folder>/v<N>/workspace/  its /workspace
    <folder>/v<N>/tmp/        its /tmp

A run of version N takes a fresh instance of the snapshot (as every run does),
writes the version's pages into it, mounts copies of N's folders, runs, and,
unless a limit or a crash stopped it midway, writes version N+1. So:

- rollback is free: a run stopped midway (timeout, CPU, memory, a trap, a host
  call refused) leaves N as it was, memory and files; N+1 is deleted;
- a session holds no worker and no instance between runs: any worker can run
  it next (it is paused on disk after every run), and it survives a restart;
- a fork is a hard link of the pages' base file (never changed in place: each
  version writes a new file) and a copy of the folders;
- only linear memory carries over. The one mutable global, `__stack_pointer`,
  is back at its start value whenever the guest returns normally (the only
  runs whose state is kept); WASI state (the fd table, offsets) is the run's
  own: the guest re-scans its preopens every run, and a file object left open
  by an earlier run fails as closed (EBADF) rather than reaching anything else.
"""

from __future__ import annotations

import time
from pathlib import Path

from wasmrun import dirtree
from wasmrun.sandbox import backgroundruns
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunError, RunRequest, RunResult, SessionOutcome, host_failure
from wasmrun.sandbox.guest.outstream import OutputSink
from wasmrun.sandbox.images.names import image_name
from wasmrun.sandbox.memory.instances import Fresh
from wasmrun.sandbox.runloop import RunLoop
from wasmrun.sandbox.sessions import pages
from wasmrun.sandbox.sessions.pages import PagesMismatch
from wasmrun.sandbox.sessions.state import discard, files_size, stage, version_dir
from wasmrun.sandbox.sessions.warm import WarmInstances, close_instance
from wasmrun.sandbox.sessions.writes import WriteTracker

# Errors after which the interpreter may have stopped midway: its memory is not
# kept. A guest MemoryError is the memory limit reached inside the interpreter.
ROLLBACK_TYPES = errors.HOST_TYPES | {"MemoryError"}


def rolls_back(result: RunResult) -> bool:
    return result.error is not None and result.error.type in ROLLBACK_TYPES


def run_in_session(
    loop: RunLoop, warm: WarmInstances, request: RunRequest, t0: float, on_output: OutputSink | None = None
) -> RunResult:
    """Run `request` in its session's state on `loop`, starting from `warm`'s instance of
    its version when one is kept; never raises (as engine.run)."""
    spec = request.session
    assert spec is not None
    folder = Path(spec.folder)
    current = version_dir(folder, spec.version)
    following = version_dir(folder, spec.version + 1)
    try:
        stage(current, following, run_only=_run_only_folders(loop, request), max_bytes=request.limits.workspace_bytes)
        result = _run_staged(loop, warm, request, t0, current, following, on_output)
    except errors.RunAborted as refused:  # its folders over the run's workspace quota: never copied
        discard(following)
        result = RunResult(run_id=request.run_id, status="failed", error=RunError(refused.error_type, refused.message))
        result.session = SessionOutcome(committed=False)
    except PagesMismatch as mismatch:
        discard(following)
        result = RunResult(
            run_id=request.run_id, status="failed",
            error=RunError(errors.INTERNAL, _mismatch_message(mismatch.made_by, loop.image.guest.key)),
        )
        result.session = SessionOutcome(committed=False)
    except Exception:
        discard(following)
        result = host_failure(request, "the sandbox host failed; the run was stopped")
        result.session = SessionOutcome(committed=False)
    return result


def _mismatch_message(made_by: str, serving: str) -> str:
    """Why a session cannot resume here. The usual cause: a server on `auto` made it on
    the stdlib image while the data image was being made, and serves the data image now."""
    if made_by and image_name(made_by) != image_name(serving):
        return (f"this session was made on the {image_name(made_by)} image and this server now runs the"
                f" {image_name(serving)} image; start a new session")
    return "this session was made by another build of the sandbox; start a new one"


def _run_staged(
    loop: RunLoop, warm: WarmInstances, request: RunRequest, t0: float, current: Path, following: Path,
    on_output: OutputSink | None,
) -> RunResult:
    stamps, bytecode = backgroundruns.stamps_and_bytecode(loop, request.skills)
    taken = warm.take(current)
    from_supply = taken is None
    fresh, tracker = taken if taken is not None else (loop.supply.take(), None)
    if not from_supply:
        loop.supply.running()  # held off housekeeping as a run of its own would
    kept = False
    try:
        if from_supply:
            pages.load(current, fresh.store, fresh.memory, loop.image.guest.key)
        result, _ = loop.run_in(
            fresh, request, t0, bytecode, workspace_root=following, on_output=on_output,
            started_from=current / "workspace",  # `stage` copied it, times kept: what this run found
            stamps=stamps,
        )
        for name in _run_only_folders(loop, request):  # the version keeps its workspace and tmp, nothing else
            dirtree.remove(following / name)
        if not rolls_back(result):
            tracker = _save(loop, request, current, following, fresh, result, tracker)
        if result.session is None or not result.session.committed:
            discard(following)
            result.session = SessionOutcome(committed=False, memory_bytes=fresh.memory.data_len(fresh.store))
        else:
            kept = warm.keep(following, fresh, tracker)
    finally:
        if not kept:
            close_instance(fresh, tracker)
        loop.supply.forget()  # kept warm here or closed: either way it never goes back to the supply
    result.usage.total_ms = round((time.perf_counter() - t0) * 1000, 3)
    return result


def _save(
    loop: RunLoop, request: RunRequest, current: Path, following: Path, fresh: Fresh, result: RunResult,
    tracker: WriteTracker | None,
) -> WriteTracker | None:
    """Version N+1's pages beside its files, when both fit the room the
    tenant's `session_bytes` leaves (checked before the pages are written: no
    byte over it reaches the disk but the run's own files, which its
    `workspace_mb` bounds); else the run fails with SessionBytesExceeded.

    `tracker`: the pages written since the instance held exactly `current`'s memory
    (writes.py), so only those are compared. Answers the tracker for the next run: the
    same, or one started now where there was none or the memory grew past it."""
    spec = request.session
    assert spec is not None
    files_bytes = files_size(following)
    room = None if spec.max_bytes is None else spec.max_bytes - files_bytes
    written = tracker.written(fresh.store, fresh.memory) if tracker is not None else None
    try:
        pages_bytes = pages.save(
            current, following, fresh.store, fresh.memory, loop.image.guest.key, room=None if room is None else max(0, room),
            written=written,
        )
    except pages.TooLarge as over:
        assert spec.max_bytes is not None
        result.status, result.output_json = "failed", b"null"
        result.error = RunError(errors.SESSION_BYTES, errors.session_bytes_exceeded(
            over.needed + files_bytes, spec.max_bytes, spec.cap_bytes or spec.max_bytes,
        ))
        return tracker
    result.session = SessionOutcome(
        committed=True, memory_bytes=fresh.memory.data_len(fresh.store), image_bytes=pages_bytes, files_bytes=files_bytes,
    )
    if written is None:  # compared in full: the kernel's record starts from this version
        if tracker is not None:
            tracker.close()
        tracker = WriteTracker.start(fresh.store, fresh.memory)
    return tracker


def _run_only_folders(loop: RunLoop, request: RunRequest) -> tuple[str, ...]:
    """The folders a run mounts besides workspace and tmp, made empty for it and removed
    after it: its input blobs, and the image's per-run folders (the data image's /skills
    view) when it mounts skills. Without either, what is mounted there is the engine's
    empty folder (Workspace.empty, the skills' empty view): on this box each folder made
    and removed cost a run ~0.5-1 ms of filesystem journal, three a run on the data image."""
    return ("blobs",) * bool(request.input_blobs) + loop.image.run_folders * bool(request.skills)


