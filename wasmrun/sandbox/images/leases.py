"""Leases: which image versions in the cache a running server (and its workers) uses.

A server writes one lease file, `<cache>/leases/server-<pid>.json`, naming the
cache entries of the version it runs (its guest folder, the data image, their
compiled modules, its skill bytecode; cachebound.py names them) and refreshes its
mtime every LEASE_REFRESH_S. A pruner keeps every entry a lease names while its pid
is alive and the lease is fresh (touched within LEASE_FRESH_S): the workers it
restarts reload those files. A lease of a dead pid, or one no refresh has touched
for that long (a hung or frozen server's), holds nothing.

The names are computed once, when the server starts: a server of an older checkout
keeps holding its own version after the source changes under it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from wasmrun.durable import atomic_write

logger = logging.getLogger("wasmrun.sandbox")

LEASES = "leases"
LEASE_REFRESH_S = 60.0
LEASE_FRESH_S = 600.0  # ten refreshes missed
MAX_LEASE_BYTES = 1 << 20  # a lease names tens of entries; a bigger file is not one of ours


def lease_path(root: Path, pid: int) -> Path:
    return root / LEASES / f"server-{pid}.json"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


class Lease:
    """This server's lease; `holds` gives the entry names to hold at each refresh (the
    data image's compiled module, say, appears only once the image is made)."""

    def __init__(self, root: Path, holds: Callable[[], Iterable[str]], pid: int | None = None) -> None:
        self.root = root
        self.holds = holds
        self.pid = pid if pid is not None else os.getpid()
        self.path = lease_path(root, self.pid)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = {"pid": self.pid, "written": time.time(), "holds": sorted(set(self.holds()))}
        atomic_write(self.path, json.dumps(body, indent=1).encode(), sync_dir=False)

    def start(self) -> Lease:
        """Write the lease, then refresh it on a daemon thread until `release`."""
        self.write()
        self._thread = threading.Thread(target=self._refresh, name="wasmrun-cache-lease", daemon=True)
        self._thread.start()
        return self

    def _refresh(self) -> None:
        while not self._stop.wait(LEASE_REFRESH_S):
            try:
                self.write()
            except OSError as exc:  # a full disk, a removed cache: the next refresh tries again
                logger.warning("could not refresh the cache lease %s: %s", self.path, exc)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.path.unlink(missing_ok=True)


def read_lease(path: Path) -> tuple[int, list[str]] | None:
    """(pid, entry names) of a lease file, None if it is not a well-formed one."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_LEASE_BYTES:
            return None
        body = json.loads(path.read_bytes())
        pid, holds = body["pid"], body["holds"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or not isinstance(holds, list) or not all(isinstance(h, str) for h in holds):
        return None
    return pid, holds


def held(root: Path, now: float | None = None) -> dict[str, int]:
    """Entry name -> the pid of a live server whose fresh lease holds it."""
    folder = root / LEASES
    now = time.time() if now is None else now
    holding: dict[str, int] = {}
    if not folder.is_dir() or folder.is_symlink():
        return holding
    for path in folder.glob("server-*.json"):
        lease = read_lease(path)
        if lease is None:
            continue
        pid, holds = lease
        try:
            fresh = now - path.stat().st_mtime < LEASE_FRESH_S
        except OSError:
            continue
        if fresh and pid_alive(pid):
            for name in holds:
                holding.setdefault(name, pid)
    return holding


def sweep_dead(root: Path, now: float | None = None) -> int:
    """Remove the lease files that hold nothing any more (dead pid or stale); how many."""
    folder = root / LEASES
    now = time.time() if now is None else now
    removed = 0
    if not folder.is_dir() or folder.is_symlink():
        return 0
    for path in folder.glob("server-*.json"):
        lease = read_lease(path)
        try:
            stale = now - path.lstat().st_mtime >= LEASE_FRESH_S
        except OSError:
            continue
        if lease is None or stale or not pid_alive(lease[0]):
            path.unlink(missing_ok=True)
            removed += 1
    return removed
