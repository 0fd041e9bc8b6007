"""The instances of a worker's most recent session runs, kept warm between its runs."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

from wasmrun.sandbox.memory.instances import Fresh, release_pages
from wasmrun.sandbox.sessions import pages
from wasmrun.sandbox.sessions.writes import WriteTracker

Warm = tuple[Fresh, WriteTracker | None]  # an instance kept, and the record of the pages its next run writes

WARM_SESSIONS = 4  # instances a worker keeps for the sessions it ran last
WARM_MAX_BYTES = 512 << 20  # their memory in all: idle sessions hold no more of a worker's RAM


class WarmInstances:
    """The instances of a worker's most recent session runs, kept after a run
    that kept its state, each exactly its version's pages: the next run of
    that version on this worker skips reading them. A run that rolls back
    closes its instance (its memory may be midway through anything); any other
    version, a session ended or evicted here, is read from disk as before.
    The pool hands a quiet server's runs to the last worker used (idle workers
    are a stack), so a session's back-to-back runs find their instance."""

    def __init__(self, limit: int = WARM_SESSIONS, max_bytes: int = WARM_MAX_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        # version folder -> its instance, and the folder's identity when kept
        self._kept: OrderedDict[Path, tuple[Warm, tuple[int, int]]] = OrderedDict()
        self._lock = threading.Lock()  # an in-process engine runs on several threads

    def take(self, version: Path) -> Warm | None:
        with self._lock:
            self._drop_ended()
            kept = self._kept.pop(version, None)
            if kept is None:
                return None
            warm, identity = kept
            if identity != _identity(version):  # a folder of that name made since (fetched again)
                close_instance(*warm)
                return None
            return warm

    def keep(self, version: Path, fresh: Fresh, tracker: WriteTracker | None = None) -> bool:
        """Keep `fresh` as `version`'s (False: not kept, close it), evicting the
        least recently kept past `limit` instances or `max_bytes` of memory in all."""
        if self.limit <= 0 or _size(fresh) > self.max_bytes:
            return False
        identity = _identity(version)
        with self._lock:
            self._kept[version] = ((fresh, tracker), identity)
            while len(self._kept) > self.limit or sum(_size(w[0]) for w, _ in self._kept.values()) > self.max_bytes:
                _, (oldest, _) = self._kept.popitem(last=False)
                close_instance(*oldest)
        return True

    def _drop_ended(self) -> None:
        """Versions no longer on disk (a later one won, the session ended): their memory goes now."""
        for version in [v for v in self._kept if not v.exists()]:
            close_instance(*self._kept.pop(version)[0])

    def close(self) -> None:
        with self._lock:
            while self._kept:
                close_instance(*self._kept.popitem()[1][0])


def close_instance(fresh: Fresh, tracker: WriteTracker | None = None) -> None:
    """Done with an instance: its tracking ended first (its slot's memory is another
    instance's next), then a large one's pages go back to the system (release_pages)."""
    if tracker is not None:
        tracker.close()
    release_pages(fresh.store, fresh.memory)
    fresh.store.close()


def _identity(version: Path) -> tuple[int, int]:
    """Which pages `version` holds: its newest memory file's inode and time (never
    changed in place once written). A folder deleted and made again under its name
    (a version fetched anew from the object store) has new files: other pages."""
    for name in (pages.DELTA, pages.BASE):
        try:
            found = (version / name).stat()
        except OSError:
            continue
        return (found.st_ino, found.st_mtime_ns)
    return (-1, -1)


def _size(fresh: Fresh) -> int:
    return fresh.memory.data_len(fresh.store)
