"""Records kept beside the sessions, for a door that makes more of a session than the
protocol does (the E2B front's sandboxes: wasmrun/e2b/records.py): each a small document
of one kind, with its key, owner and end time, stored where the sessions are, so it lives
as they do: on the local store, one file each under `<data dir>/session-records/<kind>/`
(written whole, then renamed over the old), surviving a restart; on the shared backends,
a row of PostgreSQL's wasmrun_session_records (database/records.py), which every server
reads. The document is opaque here (text the door encodes)."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

logger = logging.getLogger("wasmrun.sessions")
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # kinds and keys: file names as they are


class Record(msgspec.Struct, frozen=True):
    key: str
    owner: str
    expires: float  # seconds since the epoch: taken by `take_expired` from then on
    doc: str


class RecordGone(Exception):
    """The record is not there (never was, deleted, expired)."""


_decode = msgspec.json.Decoder(Record).decode
_encode = msgspec.json.Encoder().encode
Change = Callable[[Record], Record]


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError("a record's kind and key are 1 to 64 letters, digits, '_' or '-'")
    return name


class RecordStore:
    """Records in memory, each written to its file as it changes (`folder` None: memory
    only, for a server without a sessions folder). Thread-safe; one server's own."""

    blocking = False  # whether its calls wait on a database (callers then make them off the event loop)

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], Record] = {}
        if folder is not None:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._load(folder)

    def _load(self, folder: Path) -> None:
        for kind_dir in folder.iterdir():
            if not kind_dir.is_dir() or not NAME.fullmatch(kind_dir.name):
                continue
            for path in kind_dir.glob("*.json"):
                try:
                    record = _decode(path.read_bytes())
                    if record.key != path.stem:
                        raise ValueError("the file names another record")
                except (OSError, ValueError, msgspec.DecodeError):
                    logger.warning("removing a damaged session record %s", path.name)
                    path.unlink(missing_ok=True)
                    continue
                self._records[(kind_dir.name, record.key)] = record
            for partial in kind_dir.glob("*.partial"):  # a write a stop cut short
                partial.unlink(missing_ok=True)

    def _path(self, kind: str, key: str) -> Path | None:
        return None if self.folder is None else self.folder / kind / f"{key}.json"

    def _write(self, kind: str, record: Record) -> None:
        path = self._path(kind, record.key)
        if path is None:
            return
        path.parent.mkdir(mode=0o700, exist_ok=True)
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_encode(record))
        os.replace(partial, path)

    def _unlink(self, kind: str, key: str) -> None:
        path = self._path(kind, key)
        if path is not None:
            path.unlink(missing_ok=True)

    def insert(self, kind: str, record: Record) -> None:
        """A new record (its key must be new: a random one)."""
        check_name(kind), check_name(record.key)
        with self._lock:
            if (kind, record.key) in self._records:
                raise ValueError("a record of that key exists")
            self._write(kind, record)
            self._records[(kind, record.key)] = record

    def get(self, kind: str, key: str) -> Record | None:
        """The record, or None (unknown, or past its end time)."""
        with self._lock:
            found = self._records.get((kind, key))
        return found if found is not None and found.expires > time.time() else None

    def change(self, kind: str, key: str, change: Change) -> Record:
        """The record as `change` makes it from the stored one (no other change between the
        two); RecordGone if there is none. What `change` raises leaves it as it was."""
        with self._lock:
            found = self._records.get((kind, key))
            if found is None or found.expires <= time.time():
                raise RecordGone()
            changed = change(found)
            if changed.key != key or changed.owner != found.owner:
                raise ValueError("a change keeps the record's key and owner")
            self._write(kind, changed)
            self._records[(kind, key)] = changed
            return changed

    def delete(self, kind: str, key: str) -> Record | None:
        """The record, deleted by this call (None: not there, or deleted by another)."""
        with self._lock:
            found = self._records.pop((kind, key), None)
            if found is not None:
                self._unlink(kind, key)
            return found

    def owned(self, kind: str, owner: str) -> list[Record]:
        now = time.time()
        with self._lock:
            return [r for (k, _), r in self._records.items() if k == kind and r.owner == owner and r.expires > now]

    def count(self, kind: str, owner: str) -> int:
        return len(self.owned(kind, owner))

    def owners(self, kind: str) -> set[str]:
        with self._lock:
            return {r.owner for (k, _), r in self._records.items() if k == kind}

    def take_expired(self, kind: str, now: float | None = None) -> list[Record]:
        """The records past their end time, deleted: each taken by one caller."""
        now = time.time() if now is None else now
        with self._lock:
            gone = [(key, r) for (k, key), r in self._records.items() if k == kind and r.expires <= now]
            for key, _ in gone:
                del self._records[(kind, key)]
                self._unlink(kind, key)
        return [r for _, r in gone]
