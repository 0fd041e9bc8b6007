"""Making file-system changes survive a crash: every file the project writes goes through here.

`atomic_write` is the one way to write a file: a crash (or an error) at any
point leaves either no file / the old file, or the whole new one, and never
a temporary file behind (except after a kill in the middle, which is why
the temporary names start with `.tmp-` for sweeps to find).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

TMP_PREFIX = ".tmp-"


def fsync_dir(path: Path) -> None:
    """Persist a directory's entries (a rename or a new file in it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path, data: bytes | bytearray, *, replace: bool = True, sync_dir: bool = True, mode: int = 0o600
) -> None:
    """Write `data` as `path`, all or nothing.

    The data goes to a temporary file in the same folder, is fsynced, and is
    renamed over `path` (`replace=False`: linked to `path` instead, so that
    an existing `path` raises FileExistsError and is left alone); then the
    folder is fsynced (`sync_dir=False`: the caller fsyncs it once after
    several writes). On any error the temporary file is removed.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if sync_dir:
        fsync_dir(path.parent)


def fsync_tree(top: Path) -> None:
    """Persist every file and folder below `top` (before renaming it into place)."""
    for folder, _dirs, files in os.walk(top):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


def sweep_temporaries(folder: Path, older_than_s: float = 3600.0) -> int:
    """Remove the temporary files a killed writer left in `folder`; only old
    ones, since a live writer's are recent. Returns how many went."""
    cutoff = time.time() - older_than_s
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(TMP_PREFIX):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed
