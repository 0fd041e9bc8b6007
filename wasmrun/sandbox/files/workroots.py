"""Each sandbox process's own folder of workspaces, and sweeping up after dead ones.

A process that runs sandboxes (a pool worker, or a server running them in
its own process) claims a folder under a shared parent, named `<pid>-<random>`,
and holds an exclusive `flock` on it for as long as it lives. The kernel drops
that lock when the process dies, however it dies (killed by the watchdog or
the OOM killer included), so a folder whose lock can be taken belongs to no
live process: `sweep` removes those, and only those. The pool sweeps when a
worker dies and at start (orphans of earlier crashes); two servers sharing the
parent never remove each other's live folders, and a reused pid changes nothing.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from wasmrun import dirtree

logger = logging.getLogger("wasmrun.sandbox")

CLAIMING = ".claiming-"  # a folder being claimed: created, not yet locked
CLAIM_GRACE_S = 60.0  # an unlocked claiming folder older than this is an orphan too
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_CLAIMED = re.compile(rf"(?:{re.escape(CLAIMING)})?[0-9]+-[A-Za-z0-9_]+")  # <pid>-<mkdtemp's suffix>


def default_parent() -> Path:
    """This user's parent folder for workspace roots, in the system's temp folder."""
    return Path(tempfile.gettempdir()) / f"wasmrun-{os.getuid()}"


def _private_parent(parent: Path) -> Path:
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(parent)
    # A shared temp folder: someone else may have made this name first (or a symlink).
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"workspace folder {parent} is not a private folder of this user")
    return parent


class WorkRoot:
    """A claimed folder: locked while this object (and its process) lives."""

    def __init__(self, parent: Path) -> None:
        parent = _private_parent(parent)
        claiming = Path(tempfile.mkdtemp(prefix=f"{CLAIMING}{os.getpid()}-", dir=parent))
        self._fd = os.open(claiming, _DIR_FLAGS)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The lock is on the folder itself, so it holds across the rename.
        self.path = parent / claiming.name.removeprefix(CLAIMING)
        os.rename(claiming, self.path)

    def release(self) -> None:
        """Remove the folder and everything in it, then drop the lock."""
        if self._fd < 0:
            return
        try:
            dirtree.remove(self.path)
        except OSError:
            logger.warning("could not remove the workspace folder %s", self.path, exc_info=True)
        finally:
            os.close(self._fd)
            self._fd = -1


def sweep(parent: Path) -> int:
    """Remove the folders under `parent` that no live process holds; how many."""
    try:
        entries = list(os.scandir(parent))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        try:
            if not _CLAIMED.fullmatch(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue  # not one of ours: never touched
            if entry.name.startswith(CLAIMING) and time.time() - entry.stat(follow_symlinks=False).st_mtime < CLAIM_GRACE_S:
                continue  # maybe being claimed right now, before its lock
            fd = os.open(entry.path, _DIR_FLAGS)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process holds it
            dirtree.remove(Path(entry.path))
            removed += 1
        except OSError:
            logger.warning("could not remove the orphaned workspace folder %s", entry.path, exc_info=True)
        finally:
            os.close(fd)
    if removed:
        logger.info("removed %d workspace folder(s) left by dead sandbox processes in %s", removed, parent)
    return removed
