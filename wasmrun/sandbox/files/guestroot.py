"""The guest's `/`: a read-only directory of empty folders, one per mount point.

WASI has no filesystem root, only preopened directories; wasi-libc maps an
absolute path to the preopen with the longest matching prefix. Without a
preopen at `/`, listing `/` or `/skills` (which are no preopen's own path)
fails with FileNotFoundError although `/skills/<name>/` works. So every run
also gets, read-only at `/`, a host folder holding nothing but empty folders
named like the mount points (`lib`, `skills/<name>`, `workspace`, ...):
listing `/` shows the mounts and listing `/skills` exactly the mounted
skills. Any path under a real mount still resolves to that mount (its prefix
is longer); any other path lands in this empty, read-only tree.

A folder serves every run with the same mount points, so it is built once
per set of mount points and kept (at most MAX_ROOTS of them).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path

from wasmrun import dirtree

MAX_ROOTS = 256


class GuestRoots:
    def __init__(self, folder: Path) -> None:
        self.folder = folder  # private to one engine
        self.folder.mkdir(mode=0o700, exist_ok=True)
        self._built: dict[tuple[str, ...], Path] = {}
        self._lock = threading.Lock()

    def for_mounts(self, mount_points: tuple[str, ...]) -> Path:
        """The root folder for these guest mount points (absolute guest paths)."""
        found = self._built.get(mount_points)
        if found is not None:
            return found
        with self._lock:
            found = self._built.get(mount_points)
            if found is None:
                found = self._build(mount_points)
                if len(self._built) >= MAX_ROOTS:
                    # The oldest goes; a run still using it would list an empty `/`.
                    oldest = next(iter(self._built))
                    _remove_quietly(self._built.pop(oldest))
                self._built[mount_points] = found
            return found

    def _build(self, mount_points: tuple[str, ...]) -> Path:
        digest = hashlib.sha256("\0".join(mount_points).encode()).hexdigest()[:24]
        final = self.folder / f"root-{digest}"
        if final.is_dir():
            return final
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.folder))
        try:
            for point in mount_points:
                parts = point.strip("/").split("/")
                if any(part in ("", ".", "..") or "\0" in part for part in parts):
                    continue  # never a name to create outside the tree
                os.makedirs(staging.joinpath(*parts), mode=0o755, exist_ok=True)
            os.rename(staging, final)
        finally:
            if staging.exists():
                _remove_quietly(staging)
        return final

    def remove_all(self) -> None:
        with self._lock:
            self._built.clear()
        _remove_quietly(self.folder)


def _remove_quietly(path: Path) -> None:
    try:
        dirtree.remove(path)
    except OSError:
        pass
