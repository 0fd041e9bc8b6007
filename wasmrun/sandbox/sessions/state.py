"""A session's state on disk, one folder per version (the layout: run.py's docstring).

    <folder>/v<N>/memory[, memory.delta]   its pages (pages.py)
    <folder>/v<N>/workspace/, tmp/         its folders

Read by the session stores (staging, forking, removing versions) and by a session run.
"""

from __future__ import annotations

import errno
import os
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

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # (never blocks on a pipe put there)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NAMES_PER_OPEN = 15  # 15 names of at most 255 bytes: a relative path under PATH_MAX (4,096)
_CHUNK = 1 << 20


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
    links, never followed; a file's holes stay holes (`copy_sparse`); modes and
    times are kept (as shutil.copystat keeps them). `link`: every file
    hard-linked to its source rather than copied (a fork), a copy only where no
    link can be made.

    A tree of any depth: the source is walked by dirtree.walk (one directory
    descriptor, no recursion, no path built) and the copy beside it, through
    one descriptor of the copy's folder at the same place (`_Place`)."""

    def __init__(self, link: bool) -> None:
        self.link = link
        # a source inode with other names: its first copy (the copy's top, its folders below it, its name)
        self._made: dict[tuple[int, int], tuple[Path, tuple[str, ...], str]] = {}

    def copy_folder(self, source: Path, target: Path) -> None:
        """`source`'s tree at `target` (an empty folder where `source` is missing)."""
        try:
            with os.scandir(source) as entries:
                empty = next(entries, None) is None
        except FileNotFoundError:
            empty = True
        target.mkdir(mode=0o700)
        if empty:
            return
        place = _Place(target, os.stat(source))
        try:
            entering: tuple[str, os.stat_result] | None = None  # a folder seen, not yet known to be walked
            for parent, name, st in dirtree.walk(source):
                if entering is not None and place.walked_into(parent, st, entering[1]):
                    place.enter(*entering)
                entering = None
                if st is None:
                    place.leave(os.stat(name, dir_fd=parent, follow_symlinks=False))
                elif stat.S_ISDIR(st.st_mode):
                    entering = name, st  # made once the walk is in it (it skips one gone meanwhile)
                else:
                    self._copy_entry(parent, name, st, place)
            place.finish(os.stat(source))
        finally:
            place.close()

    def _copy_entry(self, parent: int, name: str, st: os.stat_result, place: _Place) -> None:
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=parent), name, dir_fd=place.fd)
            _set_times(name, place.fd, st)
            return
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file, a folder or a symbolic link", name)
        inode = (st.st_dev, st.st_ino)
        first = self._made.get(inode)
        if first is not None and place.link_from(first, name):
            return  # else its names past the filesystem's most (EMLINK): a new copy, which its next names share
        if not (self.link and _linked(parent, name, place.fd)):
            copy_sparse(parent, name, place.fd)
        if st.st_nlink > 1:
            self._made[inode] = (place.top, place.folders, name)


class _Place:
    """Where a tree's copy is being made: an open descriptor of the copy's folder
    that matches the source folder the walk is in, its folders' names below the
    copy's top, and the identities (device, inode) of the source folders above."""

    def __init__(self, top: Path, source: os.stat_result) -> None:
        self.top = top
        self.fd = os.open(top, _DIR_FLAGS)
        self.folders: tuple[str, ...] = ()
        self._sources = [_identity(source)]

    def walked_into(self, parent: int, st: os.stat_result | None, folder: os.stat_result) -> bool:
        """Whether the walk's step after a folder (`folder`) went into it: the step
        is in it, or leaves it (it was empty), rather than the folder's next entry
        or its parent's leaving (the walk did not go in: it was gone meanwhile)."""
        here = _identity(os.fstat(parent))
        return here == (_identity(folder) if st is not None else self._sources[-1])

    def enter(self, name: str, source: os.stat_result) -> None:
        os.mkdir(name, mode=0o700, dir_fd=self.fd)  # its own mode once its entries are made (`leave`)
        inner = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        os.close(self.fd)
        self.fd = inner
        self.folders = (*self.folders, name)
        self._sources.append(_identity(source))

    def leave(self, source: os.stat_result) -> None:
        """Back to the parent, the folder left given `source`'s mode and times."""
        outer = os.open("..", _DIR_FLAGS, dir_fd=self.fd)  # first: the mode set next may deny the search ".." needs
        try:
            _set_mode_and_times(self.fd, source)
        finally:
            os.close(self.fd)
            self.fd = outer
        self.folders = self.folders[:-1]
        self._sources.pop()

    def finish(self, source: os.stat_result) -> None:
        _set_mode_and_times(self.fd, source)

    def close(self) -> None:
        os.close(self.fd)

    def link_from(self, first: tuple[Path, tuple[str, ...], str], name: str) -> bool:
        """`name` here made a hard link to `first` (a copy made earlier, this or another folder's)."""
        top, folders, first_name = first
        try:
            there = self.fd if (top, folders) == (self.top, self.folders) else _open_below(top, folders)
        except OSError:
            return False
        try:
            os.link(first_name, name, src_dir_fd=there, dst_dir_fd=self.fd, follow_symlinks=False)
            return True
        except OSError:
            return False
        finally:
            if there != self.fd:
                os.close(there)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_below(top: Path, folders: tuple[str, ...]) -> int:
    """The folder `top`/`folders`, opened _NAMES_PER_OPEN names at a time: any
    depth, never a path past PATH_MAX. (Only the copy's own folders are opened so.)"""
    fd = os.open(top, _DIR_FLAGS)
    for end in range(_NAMES_PER_OPEN, len(folders) + _NAMES_PER_OPEN, _NAMES_PER_OPEN):
        try:
            inner = os.open(os.path.join(*folders[end - _NAMES_PER_OPEN : end]), _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = inner
    return fd


def _set_times(name: str, dir_fd: int, st: os.stat_result) -> None:
    """A symbolic link's times (shutil.copystat's: Linux has no mode of a link to set)."""
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dir_fd, follow_symlinks=False)


def _set_mode_and_times(fd: int, st: os.stat_result) -> None:
    """The open file's or folder's times and mode, those of `st` (shutil.copystat's order)."""
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.chmod(fd, stat.S_IMODE(st.st_mode))


def _linked(parent: int, name: str, target_dir: int) -> bool:
    try:
        os.link(name, name, src_dir_fd=parent, dst_dir_fd=target_dir, follow_symlinks=False)
        return True
    except OSError:
        return False


def copy_sparse(source_dir: int, name: str, target_dir: int) -> None:
    """The file `name` in the folder `source_dir` copied to a new file `name` in
    `target_dir`, its holes left holes (SEEK_DATA/SEEK_HOLE): a sparse file costs
    its data, not its size, in the copy's disk and time. Its mode and times kept."""
    src = os.open(name, _READ_FLAGS, dir_fd=source_dir)
    try:
        dst = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=target_dir)
        try:
            _copy_data(src, dst, os.fstat(src).st_size)
            _set_mode_and_times(dst, os.fstat(src))  # as copystat: the source's times after the read
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _copy_data(src: int, dst: int, size: int) -> None:
    position = 0
    while position < size:
        try:
            data = os.lseek(src, position, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        hole = os.lseek(src, data, os.SEEK_HOLE)
        while data < hole:
            chunk = os.pread(src, min(hole - data, _CHUNK), data)
            if not chunk:
                break
            data += os.pwrite(dst, chunk, data)  # (a short write: its rest on the next turn)
        position = hole
    if position < size:
        os.ftruncate(dst, size)  # its trailing hole


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
