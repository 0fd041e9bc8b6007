"""What a run's writable folders cost the host's disk: allocated blocks, not sizes.

A file's size says little about the disk it takes: a file written 1 byte every
4 KiB is sparse in its size but allocates a block per byte written, and a file
unlinked while it is still open has no name left to find it by but keeps all
its blocks until the last descriptor closes. So a run's disk use is the
allocated bytes (`st_blocks * 512`) of every inode the run can reach, by a name
under its folders or by a descriptor the run's WASI holds open, each inode
counted once (hard links share one).

The descriptors are found through /proc/self/fd: wasmtime's WASI opens the
run's files in this process, and a descriptor's link names the path it was
opened at (with " (deleted)" once unlinked). Where /proc is not mounted only
the names are measured.
"""

from __future__ import annotations

import os
from pathlib import Path

from wasmrun.sandbox import tree

PROC_FDS = "/proc/self/fd"
BLOCK_UNIT = 512  # st_blocks counts 512-byte units on every Unix


def usage(tops: list[Path], root: Path) -> tuple[int, int]:
    """(allocated bytes, entries) of everything below `tops` and of every file
    this process holds open under `root` (unlinked or not), each inode once."""
    seen: set[tuple[int, int]] = set()
    allocated = entries = 0
    for top in tops:
        for _fd, _name, st in tree.walk(top):
            if st is None:
                continue
            entries += 1
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                allocated += st.st_blocks * BLOCK_UNIT
    for st in open_files(root):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            allocated += st.st_blocks * BLOCK_UNIT
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
