"""A skill version's folder as one byte string (a tar), and back into a local,
read-only cache folder named by the bundle's hash.

Servers sharing a database keep created skills as bundles there; each server
materialises the versions it serves under `<data_dir>/skill-cache/<sha256>/`.
The folder is unpacked beside it under a temporary name and renamed into
place, so several servers (and their threads) on one machine can materialise
the same version at once: the first rename wins, the others find it there.
The same bytes always give the same name, so a cached folder is never stale.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import time
from pathlib import Path

TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0


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


class BundleMismatch(Exception):
    """A bundle's bytes are not the ones that were stored (changed or damaged since)."""


class SkillCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._sweep()

    def path(self, sha256: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ValueError("a skill bundle's hash is 64 lowercase hex digits")
        return self.root / sha256

    def cached(self, sha256: str) -> Path | None:
        folder = self.path(sha256)
        return folder if folder.is_dir() else None

    def materialise(self, bundle: bytes, sha256: str | None = None) -> Path:
        """The bundle's read-only folder, unpacked now unless it is there already.
        With `sha256` (what was recorded when it was stored), bytes of another hash
        raise BundleMismatch and are never unpacked."""
        actual = digest(bundle)
        if sha256 is not None and actual != sha256:
            raise BundleMismatch(f"the bundle's sha256 is {actual}, not the {sha256} recorded when it was stored")
        folder = self.path(actual)
        if folder.is_dir():
            return folder
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
        return folder

    def _sweep(self) -> None:
        """Unpacking folders left by a killed process."""
        for leftover in self.root.glob(TMP_PREFIX + "*"):
            with contextlib.suppress(OSError):
                if time.time() - leftover.stat().st_mtime > STALE_TMP_S:
                    _remove(leftover)


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
