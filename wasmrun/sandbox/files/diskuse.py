"""What a run's writable folders count against their quota: each file at its
size, or at the disk allocated for it where that is more.

Neither figure alone bounds what a file costs. A file written 1 byte every
4 KiB is small in its size but allocates a block per byte written; a sparse
file (grown by truncate, or by a write past its end) allocates almost nothing
but is its whole size to anything that copies it (a session's next run, a
download), and a filesystem without holes allocates it whole. And a file
unlinked while it is still open has no name left to find it by but keeps all
its blocks until the last descriptor closes. So a run's disk use is the sum,
over every inode the run can reach (by a name under its folders or by a
descriptor the run's WASI holds open, each inode counted once: hard links
share one), of max(size, allocated bytes = `st_blocks * 512`).

The descriptors are found through /proc/self/fd: wasmtime's WASI opens the
run's files in this process, and a descriptor's link names the path it was
opened at (with " (deleted)" once unlinked). Where /proc is not mounted only
the names are measured.
"""

from __future__ import annotations

import os
from pathlib import Path

from wasmrun import dirtree

PROC_FDS = "/proc/self/fd"
BLOCK_UNIT = 512  # st_blocks counts 512-byte units on every Unix


def charged(st: os.stat_result) -> int:
    """What one inode counts: its size, or its allocated blocks where more."""
    return max(st.st_size, st.st_blocks * BLOCK_UNIT)


def usage(tops: list[Path], root: Path | None) -> tuple[int, int]:
    """(bytes counted, entries) of everything below `tops` and of every file
    this process holds open under `root` (unlinked or not; None: names only),
    each inode once."""
    seen: set[tuple[int, int]] = set()
    allocated = entries = 0
    for top in tops:
        for _fd, _name, st in dirtree.walk(top):
            if st is None:
                continue
            entries += 1
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                allocated += charged(st)
    for st in open_files(root) if root is not None else []:
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            allocated += charged(st)
    return allocated, entries


def open_files(root: Path) -> list[os.stat_result]:
    """The stat of every file this process has open at a path under `root`."""
    prefix = os.path.realpath(root) + os.sep
    found: list[os.stat_result] = []
    try:
        names = os.listdir(PROC_FDS)
    except OSError:
        return found  # no /proc: names only
    for name in names:
        link = f"{PROC_FDS}/{name}"
        try:
            if os.readlink(link).startswith(prefix):
                found.append(os.stat(link))  # the open file itself, named or not
        except OSError:
            continue  # closed meanwhile (another run's thread)
    return found


def block_size(path: Path) -> int:
    """The allocation unit of the filesystem holding `path` (at least 4 KiB)."""
    try:
        return max(4096, os.statvfs(path).f_frsize)
    except OSError:
        return 4096
