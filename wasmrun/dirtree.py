"""Measuring and removing a directory tree of any depth, one directory descriptor at a time.

A run can build a tree as deep as its entry quota lets it (`os.mkdir("q");
os.chdir("q")` in a loop). Recursive walkers (`os.walk`, `shutil.rmtree` in
Python 3.11) fail at the recursion limit, and a path string to the bottom of
such a tree is longer than the kernel accepts (PATH_MAX). So the walk here is
a loop, never recursion, and never builds a path: it holds one open
directory, enters a child with `openat(name, O_NOFOLLOW)` and leaves it
through `".."`, checking that `".."` is the directory it came from (device
and inode). What it keeps per level is the list of names still to visit.

Symbolic links are never followed: a link is an entry like a file.

Removing is safe whatever else is at work in the tree: an entry another
remover took first is gone, which is what was wanted (a session's old
version is deleted in the background while a close removes the whole
session); a folder that gained an entry while it was emptied (a writer not
stopped yet: a worker killed after its run was given up) is walked again,
for up to FILLING_S.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_EMPTY = (errno.ENOTEMPTY, errno.EEXIST)  # rmdir of a folder with an entry (POSIX allows either)
FILLING_S = 1.0  # how long a tree that keeps gaining entries while it is removed is walked again


class TreeChanged(OSError):
    """A directory was moved while it was being walked."""


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:  # scans a duplicate: `fd` stays open and ours
        return [entry.name for entry in entries]


class _Level:
    __slots__ = ("identity", "name", "pending")

    def __init__(self, name: str, identity: tuple[int, int], pending: list[str]) -> None:
        self.name = name  # its name in the level above
        self.identity = identity
        self.pending = pending  # names not visited yet


def walk(top: Path) -> Iterator[tuple[int, str, os.stat_result | None]]:
    """Every entry below `top`, depth first: (dir_fd, name, lstat) when it is
    first seen, and (dir_fd, name, None) for a directory once everything in it
    has been seen. `dir_fd` is the open parent, valid until the next step."""
    fd = _open_dir(top)
    try:
        levels = [_Level("", _identity(os.fstat(fd)), _names(fd))]
        while levels:
            level = levels[-1]
            if not level.pending:
                levels.pop()
                if not levels:
                    return
                parent = _open_dir("..", fd)
                os.close(fd)
                fd = parent
                if _identity(os.fstat(fd)) != levels[-1].identity:
                    raise TreeChanged("a directory moved during the walk")
                yield fd, level.name, None
                continue
            name = level.pending.pop()
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield fd, name, st
            if not stat.S_ISDIR(st.st_mode):
                continue
            try:
                child = _open_dir(name, fd)
            except FileNotFoundError:
                continue
            if _identity(os.fstat(child)) != _identity(st):  # replaced since the stat
                os.close(child)
                continue
            os.close(fd)
            fd = child
            levels.append(_Level(name, _identity(st), _names(fd)))
    finally:
        os.close(fd)


def measure(top: Path) -> tuple[int, int]:
    """Total size (bytes, as lstat reports them) and number of entries below `top`."""
    total = entries = 0
    for _fd, _name, st in walk(top):
        if st is not None:
            entries += 1
            total += st.st_size
    return total, entries


def empty(top: Path) -> None:
    """Remove everything below `top`, keeping `top` itself."""
    for _ in _passes(top):
        if _empty_pass(top):
            return


def remove(top: Path) -> None:
    """Remove `top` and everything below it; a missing `top` is not an error,
    nor one that another remover takes meanwhile."""
    for _ in _passes(top):
        try:
            if not _empty_pass(top):
                continue
            os.rmdir(top)
            return
        except FileNotFoundError:
            if os.path.lexists(top):
                raise
            return
        except OSError as exc:
            if exc.errno not in _NOT_EMPTY:
                raise


def _passes(top: Path) -> Iterator[int]:
    """Two walks at least, more for up to FILLING_S; then ENOTEMPTY."""
    give_up = time.monotonic() + FILLING_S
    count = 0
    while count < 2 or time.monotonic() < give_up:
        yield count
        count += 1
    raise OSError(errno.ENOTEMPTY, f"entries kept appearing in it for {FILLING_S} s", str(top))


def _empty_pass(top: Path) -> bool:
    """One walk removing what is below `top`; False if a folder had gained an entry
    by the time it was to go (it is left for another pass)."""
    emptied = True
    for fd, name, st in walk(top):
        try:
            if st is None:
                os.rmdir(name, dir_fd=fd)
            elif not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass  # another remover's already
        except OSError as exc:
            if exc.errno not in _NOT_EMPTY:
                raise
            emptied = False
    return emptied
