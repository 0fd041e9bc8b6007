"""A session's state on disk, one folder per version (the layout: run.py's docstring).

    <folder>/v<N>/memory[, memory.delta]   its pages (pages.py)
    <folder>/v<N>/workspace/, tmp/         its folders

Read by the session stores (staging, forking, removing versions) and by a session run.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from wasmrun import dirtree
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.files import diskuse
from wasmrun.sandbox.images.names import image_name
from wasmrun.sandbox.sessions import pages

FOLDERS = ("workspace", "tmp")
# The pages' files of a version: the base first (a fork hard-links it), then its delta.
MEMORY_FILES = (pages.BASE, pages.DELTA)


def version_dir(folder: Path, version: int) -> Path:
    return folder / f"v{version}"


def image_of(request: RunRequest) -> str | None:
    """The image a session run must run on: the one that made its session's memory
    (None: not a session run, or the session's first, which any image can run)."""
    if request.session is None:
        return None
    made_by = pages.made_by(version_dir(Path(request.session.folder), request.session.version))
    return image_name(made_by) if made_by else None


def files_size(version: Path) -> int:
    """What a version's files count against `session_bytes`: each at its size, or
    at its blocks where more (as the workspace quota counts them, diskuse)."""
    return diskuse.usage([version / name for name in FOLDERS], None)[0]


def stage(current: Path, following: Path, run_only: tuple[str, ...], max_bytes: int | None = None) -> None:
    """Version N+1's folders, as copies of N's (an earlier run's leftovers gone),
    and the empty `run_only` folders this run mounts. `max_bytes`: the run's
    workspace quota; N's folders counting more than it (with its slack,
    `stage_room`) fail the run with WorkspaceQuotaExceeded before anything is
    copied, N kept as it is."""
    if current.name != "v0" and not current.is_dir():
        raise FileNotFoundError(f"session state {current} is missing")  # never run it from a blank state
    if max_bytes is not None:
        check_stage_room(current, max_bytes)
    discard(following)
    following.mkdir(mode=0o700)
    copier = _TreeCopier(link=False)  # one for both folders: a file may have a name in each
    for name in FOLDERS:
        copier.copy_folder(current / name, following / name)
    for name in run_only:
        (following / name).mkdir(mode=0o700)


def check_stage_room(current: Path, max_bytes: int) -> None:
    """RunAborted(WorkspaceQuotaExceeded) when what `stage` would copy of `current`
    counts more than a run under the quota `max_bytes` can have left. The copy
    costs what the quota counts (each inode once: `_TreeCopier`), so this bounds
    its disk and its time before it starts."""
    tops = [current / name for name in FOLDERS if (current / name).is_dir()]
    counted, entries = diskuse.usage(tops, None) if tops else (0, 0)
    if counted > stage_room(max_bytes, entries, diskuse.block_size(current.parent)):
        raise errors.RunAborted(
            errors.WORKSPACE_QUOTA,
            f"this session's /workspace and /tmp hold {counted} bytes (each file counted once, at its size"
            f" or at the disk it takes where more), over their quota of {max_bytes} bytes; the run did not"
            " start and the session is as it was",
        )


def stage_room(max_bytes: int, entries: int, block: int) -> int:
    """The most the folders a run leaves under the quota `max_bytes` can count: its
    bytes, and a block for each of their `entries`, which the quota charges as an
    entry only (Workspace.charge: a directory, a symbolic link, an empty file)."""
    return max_bytes + entries * block


class _TreeCopier:
    """Copies of folders' trees in which each source inode is made once: its next
    name (a hard link) becomes a hard link to its first copy, as the quota counts
    it once (diskuse), never a copy of its own. Symbolic links are copied as
    links, never followed; a file's holes stay holes (`copy_sparse`).
    `link`: every file hard-linked to its source rather than copied (a fork), a
    copy only where no link can be made."""

    def __init__(self, link: bool) -> None:
        self.link = link
        self._made: dict[tuple[int, int], str] = {}  # a source inode with other names: its first copy

    def copy_folder(self, source: Path, target: Path) -> None:
        """`source`'s tree at `target` (an empty folder where `source` is missing)."""
        try:
            with os.scandir(source) as entries:
                empty = next(entries, None) is None
        except FileNotFoundError:
            empty = True
        if empty:
            target.mkdir(mode=0o700)
        else:
            shutil.copytree(source, target, symlinks=True, copy_function=self.copy_file)

    def copy_file(self, source: str, target: str) -> str:
        st = os.lstat(source)
        if stat.S_ISLNK(st.st_mode):
            return copy_sparse(source, target)  # (copytree makes links itself; this does the same)
        inode = (st.st_dev, st.st_ino)
        first = self._made.get(inode)
        if first is not None:
            try:
                os.link(first, target, follow_symlinks=False)
                return target
            except OSError:
                pass  # its names past the filesystem's most (EMLINK): a new copy, which its next names share
        if not (self.link and _linked(source, target)):
            copy_sparse(source, target)
        if st.st_nlink > 1:
            self._made[inode] = target
        return target


def _linked(source: str, target: str) -> bool:
    try:
        os.link(source, target, follow_symlinks=False)
        return True
    except OSError:
        return False


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


def discard(path: Path) -> None:
    if path.exists():
        dirtree.remove(path)


def copy_version(source: Path, target: Path) -> None:
    """A fork: every file hard-linked, none copied. A version's files are never
    changed in place once it is recorded: each run works on copies (`stage`),
    so the two sessions' next runs each copy them before writing."""
    target.mkdir(mode=0o700)
    pages.copy(source, target)
    copier = _TreeCopier(link=True)
    for name in FOLDERS:
        copier.copy_folder(source / name, target / name)
