"""A run inside a session: the worker's half (the server's is protocol/sessions.py).

A session's state lives in its folder on disk, one version at a time:

    <folder>/v<N>/memory      the pages of linear memory written since the guest
                              snapshot, and the memory's size (with
                              memory.delta: see pages.py)
    <folder>/v<N>/workspace/  its /workspace
    <folder>/v<N>/tmp/        its /tmp

A run of version N takes a fresh instance of the snapshot (as every run does),
writes the image's pages into it, mounts copies of N's folders, runs, and,
unless a limit or a crash stopped it midway, writes version N+1. So:

- rollback is free: a run stopped midway (timeout, CPU, memory, a trap, a host
  call refused) leaves N as it was, memory and files; N+1 is deleted;
- a session holds no worker and no instance between runs: any worker can run
  it next (it is paused on disk after every run), and it survives a restart;
- a fork is a hard link of the memory image (never changed in place: each
  version writes a new file) and a copy of the folders;
- only linear memory carries over. The one mutable global, `__stack_pointer`,
  is back at its start value whenever the guest returns normally (the only
  runs whose state is kept); WASI state (the fd table, offsets) is the run's
  own: the guest re-scans its preopens every run, and a file object left open
  by an earlier run fails as closed (EBADF) rather than reaching anything else.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from wasmrun.sandbox import tree
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunError, RunRequest, RunResult, SessionOutcome, host_failure
from wasmrun.sandbox.files import diskuse
from wasmrun.sandbox.memory.instances import Fresh, release_pages
from wasmrun.sandbox.sessions import pages
from wasmrun.sandbox.sessions.pages import ImageMismatch

if TYPE_CHECKING:
    from wasmrun.sandbox.engine import SandboxEngine
    from wasmrun.sandbox.guest.outstream import OutputSink

FOLDERS = ("workspace", "tmp")
# Errors after which the interpreter may have stopped midway: its memory is not
# kept. A guest MemoryError is the memory limit reached inside the interpreter.
ROLLBACK_TYPES = errors.HOST_TYPES | {"MemoryError"}
# The data image's guest keys start so (images.DataImage); a session is tied to its image.
DATA_GUEST_PREFIX = "data-"
WARM_SESSIONS = 4  # instances a worker keeps for the sessions it ran last
WARM_MAX_BYTES = 512 << 20  # their memory in all: idle sessions hold no more of a worker's RAM


def version_dir(folder: Path, version: int) -> Path:
    return folder / f"v{version}"


def image_name(guest_key: str) -> str:
    """The image ("stdlib" or "data") of a guest key."""
    return "data" if guest_key.startswith(DATA_GUEST_PREFIX) else "stdlib"


def image_of(request: RunRequest) -> str | None:
    """The image a session run must run on: the one that made its session's memory
    (None: not a session run, or the session's first, which any image can run)."""
    if request.session is None:
        return None
    made_by = pages.made_by(version_dir(Path(request.session.folder), request.session.version))
    return image_name(made_by) if made_by else None


def rolls_back(result: RunResult) -> bool:
    return result.error is not None and result.error.type in ROLLBACK_TYPES


def run_in_session(
    engine: SandboxEngine, request: RunRequest, t0: float, on_output: OutputSink | None = None
) -> RunResult:
    """Run `request` in its session's state; never raises (as engine.run)."""
    spec = request.session
    assert spec is not None
    folder = Path(spec.folder)
    current = version_dir(folder, spec.version)
    following = version_dir(folder, spec.version + 1)
    try:
        _stage(current, following, run_only=_run_only_folders(engine))
        result = _run_staged(engine, request, t0, current, following, on_output)
    except ImageMismatch as mismatch:
        _discard(following)
        result = RunResult(
            run_id=request.run_id, status="failed",
            error=RunError(errors.INTERNAL, _mismatch_message(mismatch.made_by, engine.guest.key)),
        )
        result.session = SessionOutcome(committed=False)
    except Exception:
        _discard(following)
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
    engine: SandboxEngine, request: RunRequest, t0: float, current: Path, following: Path,
    on_output: OutputSink | None,
) -> RunResult:
    bytecode = engine._skill_bytecode(request.skills)
    warm = _warm_instances(engine)
    fresh = warm.take(current)
    from_supply = fresh is None
    if fresh is None:
        fresh = engine._supply.take()
    kept = False
    try:
        if from_supply:
            pages.load(current, fresh.store, fresh.memory, engine.guest.key)
        result, _ = engine._run_on(fresh, request, t0, bytecode, workspace_root=following, on_output=on_output)
        for name in _run_only_folders(engine):  # the version keeps its workspace and tmp, nothing else
            tree.remove(following / name)
        if not rolls_back(result):
            _save(engine, request, current, following, fresh, result)
        if result.session is None or not result.session.committed:
            _discard(following)
            result.session = SessionOutcome(committed=False, memory_bytes=fresh.memory.data_len(fresh.store))
        else:
            kept = warm.keep(following, fresh)
    finally:
        if not kept:
            _close(fresh)
        if from_supply:  # kept warm here or closed: either way it never goes back to the supply
            engine._supply.forget()
    result.usage.total_ms = round((time.perf_counter() - t0) * 1000, 3)
    return result


def _save(
    engine: SandboxEngine, request: RunRequest, current: Path, following: Path, fresh: Fresh, result: RunResult
) -> None:
    """Version N+1's memory image beside its files, when both fit the room the
    tenant's `session_bytes` leaves (checked before the image is written: no
    byte over it reaches the disk but the run's own files, which its
    `workspace_mb` bounds); else the run fails with SessionBytesExceeded."""
    spec = request.session
    assert spec is not None
    files_bytes = files_size(following)
    room = None if spec.max_bytes is None else spec.max_bytes - files_bytes
    try:
        image_bytes = pages.save(
            current, following, fresh.store, fresh.memory, engine.guest.key, room=None if room is None else max(0, room),
        )
    except pages.TooLarge as over:
        assert spec.max_bytes is not None
        result.status, result.output_json = "failed", b"null"
        result.error = RunError(errors.SESSION_BYTES, errors.session_bytes_exceeded(
            over.needed + files_bytes, spec.max_bytes, spec.cap_bytes or spec.max_bytes,
        ))
        return
    result.session = SessionOutcome(
        committed=True, memory_bytes=fresh.memory.data_len(fresh.store), image_bytes=image_bytes, files_bytes=files_bytes,
    )


def files_size(version: Path) -> int:
    """What a version's files count against `session_bytes`: each at its size, or
    at its blocks where more (as the workspace quota counts them, diskuse)."""
    return diskuse.usage([version / name for name in FOLDERS], None)[0]


class WarmInstances:
    """The instances of a worker's most recent session runs, kept after a run
    that kept its state, each exactly its version's image: the next run of
    that version on this worker skips reading the image. A run that rolls back
    closes its instance (its memory may be midway through anything); any other
    version, a session ended or evicted here, is read from disk as before.
    The pool hands a quiet server's runs to the last worker used (idle workers
    are a stack), so a session's back-to-back runs find their instance."""

    def __init__(self, limit: int = WARM_SESSIONS, max_bytes: int = WARM_MAX_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        # version folder -> its instance, and the folder's identity when kept
        self._kept: OrderedDict[Path, tuple[Fresh, tuple[int, int]]] = OrderedDict()
        self._lock = threading.Lock()  # an in-process engine runs on several threads

    def take(self, version: Path) -> Fresh | None:
        with self._lock:
            self._drop_ended()
            kept = self._kept.pop(version, None)
            if kept is None:
                return None
            fresh, identity = kept
            if identity != _identity(version):  # a folder of that name made since (fetched again)
                _close(fresh)
                return None
            return fresh

    def keep(self, version: Path, fresh: Fresh) -> bool:
        """Keep `fresh` as `version`'s (False: not kept, close it), evicting the
        least recently kept past `limit` instances or `max_bytes` of memory in all."""
        if self.limit <= 0 or _size(fresh) > self.max_bytes:
            return False
        identity = _identity(version)
        with self._lock:
            self._kept[version] = (fresh, identity)
            while len(self._kept) > self.limit or sum(_size(f) for f, _ in self._kept.values()) > self.max_bytes:
                _, (oldest, _) = self._kept.popitem(last=False)
                _close(oldest)
        return True

    def _drop_ended(self) -> None:
        """Versions no longer on disk (a later one won, the session ended): their memory goes now."""
        for version in [v for v in self._kept if not v.exists()]:
            _close(self._kept.pop(version)[0])

    def close(self) -> None:
        with self._lock:
            while self._kept:
                _close(self._kept.popitem()[1][0])


def _close(fresh: Fresh) -> None:
    """Done with an instance: a large one's pages go back to the system now (release_pages)."""
    release_pages(fresh.store, fresh.memory)
    fresh.store.close()


def _identity(version: Path) -> tuple[int, int]:
    """Which image `version` holds: its newest memory file's inode and time (never
    changed in place once written). A folder deleted and made again under its name
    (a version fetched anew from the object store) has new files: another image."""
    for name in (pages.DELTA, pages.BASE):
        try:
            found = (version / name).stat()
        except OSError:
            continue
        return (found.st_ino, found.st_mtime_ns)
    return (-1, -1)


def _size(fresh: Fresh) -> int:
    return fresh.memory.data_len(fresh.store)


_warm: weakref.WeakKeyDictionary[SandboxEngine, WarmInstances] = weakref.WeakKeyDictionary()


_warm_lock = threading.Lock()


def _warm_instances(engine: SandboxEngine) -> WarmInstances:
    with _warm_lock:
        found = _warm.get(engine)
        if found is None:
            found = _warm[engine] = WarmInstances()
        return found


def close_warm(engine: SandboxEngine) -> None:
    found = _warm.pop(engine, None)
    if found is not None:
        found.close()


def _run_only_folders(engine: SandboxEngine) -> tuple[str, ...]:
    """The folders a run mounts besides workspace and tmp, made empty for each run and
    removed after it: its input blobs, and what the image mounts in every run (the data
    image's /skills view and empty /packages: its mounts are baked into its memory)."""
    return ("blobs",) + engine.image.run_folders


def _stage(current: Path, following: Path, run_only: tuple[str, ...]) -> None:
    """Version N+1's folders, as copies of N's (an earlier run's leftovers gone),
    and the empty `run_only` folders this run mounts."""
    if current.name != "v0" and not current.is_dir():
        raise FileNotFoundError(f"session state {current} is missing")  # never run it from a blank state
    _discard(following)
    following.mkdir(mode=0o700)
    for name in FOLDERS:
        _copy_folder(current / name, following / name)
    for name in run_only:
        (following / name).mkdir(mode=0o700)


def _copy_folder(source: Path, target: Path, link: bool = False) -> None:
    """`source`'s tree at `target` (symbolic links copied as links, never
    followed); `link`: its files hard-linked rather than copied."""
    try:
        with os.scandir(source) as entries:
            empty = next(entries, None) is None
    except FileNotFoundError:
        empty = True
    if empty:
        target.mkdir(mode=0o700)
    else:
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy if link else copy_sparse)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        copy_sparse(source, target)


def copy_sparse(source: str, target: str) -> str:
    """`source` copied to `target` with its holes left holes (SEEK_DATA/SEEK_HOLE):
    a sparse file costs its data, not its size, in the copy's disk and time."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
        return target
    with open(source, "rb") as src, open(target, "xb") as dst:
        size = os.fstat(src.fileno()).st_size
        position = 0
        while position < size:
            try:
                data = os.lseek(src.fileno(), position, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            hole = os.lseek(src.fileno(), data, os.SEEK_HOLE)
            src.seek(data)
            dst.seek(data)
            left = hole - data
            while left > 0:
                chunk = src.read(min(left, 1 << 20))
                if not chunk:
                    break
                dst.write(chunk)
                left -= len(chunk)
            position = hole
        dst.truncate(size)
    shutil.copystat(source, target, follow_symlinks=False)
    return target


def _discard(path: Path) -> None:
    if path.exists():
        tree.remove(path)


def copy_version(source: Path, target: Path) -> None:
    """A fork: every file hard-linked, none copied. A version's files are never
    changed in place once it is recorded: each run works on copies (`_stage`),
    so the two sessions' next runs each copy them before writing."""
    target.mkdir(mode=0o700)
    pages.copy(source, target)
    for name in FOLDERS:
        _copy_folder(source / name, target / name, link=True)
