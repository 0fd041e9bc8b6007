"""A skill version's folder as one byte string (a tar), and back into a local,
read-only cache folder named by the bundle's hash.

Servers sharing a database keep created skills as bundles there; each server
materialises the versions it serves under `<data_dir>/skill-cache/<sha256>/`.
The folder is unpacked beside it under a temporary name and renamed into
place, so several servers (and their threads) on one machine can materialise
the same version at once: the first rename wins, the others find it there,
and a half-unpacked folder is never seen under its name. The same bytes always
give the same name, so a cached folder is never stale.

The cache is bounded (entries and bytes, least recently used out first), and
shared by every server using the data folder, so a folder is evicted only when
no one is using it: each use holds a shared lock (flock) on the entry's lock
file `.locks/<sha256>` from before the folder is looked at until the run or
read is done, and stamps the lock file's time (the LRU order). Eviction takes
the lock exclusively without waiting (an entry in use is skipped), renames the
folder away (atomic: it is there whole or not at all) and only then deletes
it. A use that finds its folder evicted materialises it again from the bundle.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import logging
import os
import shutil
import stat
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from wasmrun.registry.files import folder_bytes

logger = logging.getLogger("wasmrun.registry")
TMP_PREFIX = ".tmp-"
EVICTING_PREFIX = ".evict-"
LOCKS = ".locks"
STALE_TMP_S = 3600.0
DEFAULT_MAX_ENTRIES = 256
DEFAULT_MAX_BYTES = 1024 << 20


def pack(folder: Path) -> bytes:
    """The folder's files, sorted, with no owner, time or mode of this machine:
    the same skill gives the same bytes (and hash) wherever it is packed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue  # a created skill's folder holds neither; never follow one
            info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_dir():
                tar.addfile(info)
            else:
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    return buffer.getvalue()


def digest(bundle: bytes) -> str:
    return hashlib.sha256(bundle).hexdigest()


class BundleMissing(Exception):
    """The bundle of a cached skill version can no longer be fetched (or is not the one named)."""


class BundleMismatch(BundleMissing):
    """The bundle fetched is not the one named: its bytes changed or were damaged since they
    were stored (never unpacked)."""


class SkillCache:
    def __init__(self, root: Path, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("the skill cache holds at least one entry and one byte")
        self.root = Path(root)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._locks = self.root / LOCKS
        self._locks.mkdir(exist_ok=True, mode=0o700)
        self._sizes: dict[str, int] = {}  # an entry's bytes never change: its name is its content's hash
        self._trimming = threading.Lock()
        self._sweep()
        self.trim()

    def path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ValueError("a skill bundle's hash is 64 lowercase hex digits")
        return self.root / sha256

    def holds(self, folder: Path) -> bool:
        """Whether `folder` is one of this cache's entries."""
        return folder.parent == self.root and _is_hash(folder.name)

    @contextlib.contextmanager
    def held(self, sha256: str, fetch: Callable[[], bytes | None]) -> Iterator[Path]:
        """The entry's folder, kept from eviction (by any process) until the block ends;
        unpacked from `fetch()` first if it is not cached (BundleMissing if it gives none)."""
        folder = self.path(sha256)
        fd = self._lock(sha256, fcntl.LOCK_SH)
        assert fd is not None
        try:
            with contextlib.suppress(OSError):
                os.utime(fd)  # the last use: eviction takes the least recent first
            if not folder.is_dir():
                bundle = fetch()
                if bundle is None:
                    raise BundleMissing(f"the bundle {sha256[:12]} is gone")
                if digest(bundle) != sha256:
                    raise BundleMismatch(f"the bundle {sha256[:12]} does not match its hash")
                self._unpack(bundle, folder)
                self.trim()
            yield folder
        finally:
            os.close(fd)

    def _lock(self, sha256: str, how: int) -> int | None:
        """An open lock file of the entry, locked `how`; None if LOCK_NB and taken.
        Eviction deletes the lock file while it holds it exclusively: a lock taken on a
        deleted file guards nothing, so it is taken again on the file now at the name."""
        path = self._locks / sha256
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, how)
            except BlockingIOError:
                os.close(fd)
                return None
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def _unpack(self, bundle: bytes, folder: Path) -> None:
        tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=self.root))
        try:
            with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:") as tar:
                # The data filter refuses absolute paths, '..', links out and device files.
                tar.extractall(tmp, filter="data")
            _read_only(tmp)
            try:
                os.rename(tmp, folder)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                # Another server or thread made it first: the same bytes, so use theirs.
        finally:
            if tmp.exists():
                _remove(tmp)

    def trim(self) -> None:
        """Evict the least recently used entries no one holds until the cache is within
        its bounds (entries in use stay, even over them)."""
        if not self._trimming.acquire(blocking=False):
            return  # another thread of this process is at it
        try:
            entries = []
            for entry in os.scandir(self.root):
                if not _is_hash(entry.name):
                    continue
                try:
                    used = os.stat(self._locks / entry.name).st_mtime
                except FileNotFoundError:
                    used = 0.0
                entries.append((used, entry.name))
            entries.sort()
            self._sizes = {name: self._sizes[name] for _, name in entries if name in self._sizes}
            count = len(entries)
            total = sum(self._size(name) for _, name in entries)
            for _, name in entries:
                if count <= self.max_entries and total <= self.max_bytes:
                    break
                if self._evict(name):
                    count -= 1
                    total -= self._sizes.pop(name, 0)
            self._drop_orphan_locks()
        finally:
            self._trimming.release()

    def _size(self, name: str) -> int:
        if name not in self._sizes:
            self._sizes[name] = folder_bytes(self.root / name)
        return self._sizes[name]

    def _evict(self, name: str) -> bool:
        fd = self._lock(name, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if fd is None:
            return False  # in use, here or in another server
        gone = self.root / f"{EVICTING_PREFIX}{name}-{uuid.uuid4().hex}"
        try:
            try:
                os.rename(self.root / name, gone)
            except FileNotFoundError:
                return False  # another server evicted it just now
            os.unlink(self._locks / name)
        finally:
            os.close(fd)
        _remove(gone)
        logger.info("skill cache: evicted %s", name[:12])
        return True

    def _drop_orphan_locks(self) -> None:
        """Lock files left with no entry (a fetch that failed): unused ones go."""
        for entry in os.scandir(self._locks):
            if not _is_hash(entry.name) or (self.root / entry.name).exists():
                continue
            fd = self._lock(entry.name, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is None:
                continue
            try:
                if not (self.root / entry.name).exists():
                    os.unlink(self._locks / entry.name)
            finally:
                os.close(fd)

    def _sweep(self) -> None:
        """Folders left by a killed process: unpacking ones once old, evicted ones at once."""
        for leftover in self.root.glob(TMP_PREFIX + "*"):
            with contextlib.suppress(OSError):
                if time.time() - leftover.stat().st_mtime > STALE_TMP_S:
                    _remove(leftover)
        for leftover in self.root.glob(EVICTING_PREFIX + "*"):
            _remove(leftover)


def _is_hash(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _read_only(top: Path) -> None:
    for folder, dirs, files in os.walk(top):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o555)
    os.chmod(top, 0o555)


def _remove(top: Path) -> None:
    """Remove a (possibly read-only) unpacked folder."""
    with contextlib.suppress(OSError):
        os.chmod(top, stat.S_IRWXU)
    for folder, dirs, _ in os.walk(top):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(folder, name), stat.S_IRWXU)
    shutil.rmtree(top, ignore_errors=True)
