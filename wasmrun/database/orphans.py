"""Objects in the object store that no row names: what a server killed between
storing an object and committing its row left behind (a blob's bytes, a skill's
bundle), deleted by a sweep at start and every SWEEP_EVERY_S after.

Safe with several servers sweeping and writing at once: an object is a
candidate only when it is older than the grace period (the local blob store's
STALE_WRITE_S), and it is deleted in a transaction holding its object lock
(lock_object), the lock a writer holds from storing the
object until its row commits, after checking again that no row names it.
An object being written is skipped; one whose row committed is kept.
Names outside the three prefixes this wasmrun writes are never touched. A session's
objects (database/sessionobjects.py) are written without the object lock (a
version can be large, and no transaction stays open across its upload): the
grace period alone keeps the sweep off a version being stored.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from datetime import UTC, datetime

import psycopg

from wasmrun.blobs.objects import ObjectStore, ObjectStoreError
from wasmrun.blobs.store import STALE_WRITE_S
from wasmrun.database import DatabaseError, locks
from wasmrun.database.connection import Database

logger = logging.getLogger("wasmrun.database")
BLOB_PREFIX = "blobs/"  # a blob's bytes (database/blobs.py)
BUNDLE_PREFIX = "skills/"  # a created skill's bundle, by its sha256 (database/skills.py)
SESSION_PREFIX = "sessions/"  # a session version's files (database/sessionobjects.py)
# The advisory-lock class of an object's name (the second key is the name's hash):
# held by a writer from storing the object until its row commits, and by the sweep
# from checking that no row names the object until it is deleted.
OBJECT_LOCK_CLASS = locks.OBJECT
SWEEP_EVERY_S = 600.0
SWEEP_BATCH = 500  # object names checked against the rows in one query
_BLOB_OBJECT = re.compile(r"blobs/([0-9a-f]{32})", re.ASCII)  # database/blobs.py SharedBlobStore._object
_BUNDLE_OBJECT = re.compile(r"skills/([0-9a-f]{64})", re.ASCII)
_SESSION_OBJECT = re.compile(r"sessions/([0-9a-f]{64})/[0-9a-f]{16}/(memory|memory\.delta|files\.tar)", re.ASCII)


def lock_object(conn: psycopg.Connection, name: str) -> None:
    """Hold object `name`'s lock until the transaction ends."""
    locks.hold(conn, OBJECT_LOCK_CLASS, name)


def _row_query(name: str) -> tuple[str, tuple[str, ...]] | None:
    """The query finding the row that names object `name`; None for a name not ours."""
    if (blob := _BLOB_OBJECT.fullmatch(name)) is not None:
        return "SELECT 1 FROM wasmrun_blobs WHERE blob_id = %s", ("blob:" + blob[1],)
    if _BUNDLE_OBJECT.fullmatch(name) is not None:
        return "SELECT 1 FROM wasmrun_skills WHERE bundle_object = %s LIMIT 1", (name,)
    if _SESSION_OBJECT.fullmatch(name) is not None:
        return "SELECT 1 FROM wasmrun_sessions WHERE objects @> jsonb_build_object(%s::text, %s::text)", _session_role(name)
    return None


def _session_role(name: str) -> tuple[str, str]:
    """(role, name): how a session's row names object `name`."""
    return name.rsplit("/", 1)[1], name


def _named(database: Database, names: list[str]) -> set[str]:
    """Those of `names` (all under one prefix) that a committed row names: one query for a batch."""
    with database.connection() as conn:
        if names[0].startswith(BLOB_PREFIX):
            ids = ["blob:" + name[len(BLOB_PREFIX):] for name in names]
            rows = conn.execute("SELECT blob_id FROM wasmrun_blobs WHERE blob_id = ANY(%s)", (ids,)).fetchall()
            return {BLOB_PREFIX + str(r[0])[5:] for r in rows}
        if names[0].startswith(SESSION_PREFIX):
            keys = sorted({name.split("/")[1] for name in names})
            rows = conn.execute("SELECT objects FROM wasmrun_sessions WHERE key = ANY(%s)", (keys,)).fetchall()
            return {str(named) for r in rows for named in r[0].values()}
        rows = conn.execute(
            "SELECT DISTINCT bundle_object FROM wasmrun_skills WHERE bundle_object = ANY(%s)", (names,)
        ).fetchall()
        return {str(r[0]) for r in rows}


def sweep_orphans(
    database: Database, objects: ObjectStore, older_than_s: float = STALE_WRITE_S, now: float | None = None
) -> int:
    """Delete the objects no row names that were written more than `older_than_s`
    before `now`; returns how many went."""
    cutoff = datetime.fromtimestamp((time.time() if now is None else now) - older_than_s, UTC)
    removed = 0
    for prefix in (BLOB_PREFIX, BUNDLE_PREFIX, SESSION_PREFIX):
        # The listing streams (a page of names at a time): a bucket of millions of
        # objects is checked SWEEP_BATCH names at a time, never held whole.
        candidates = (
            name for name, written in objects.listing(prefix) if written < cutoff and _row_query(name) is not None
        )
        while batch := list(itertools.islice(candidates, SWEEP_BATCH)):
            removed += _delete_unnamed(database, objects, sorted(set(batch) - _named(database, batch)))
    if removed:
        logger.info("removed %d objects no row names (left by interrupted writes)", removed)
    return removed


def _delete_unnamed(database: Database, objects: ObjectStore, names: list[str]) -> int:
    """Delete each of `names` that still has no row, under its object lock (skipped
    when a writer holds the lock: its row is on its way)."""
    removed = 0
    for name in names:
        query = _row_query(name)
        assert query is not None
        with database.transaction() as conn:
            if not locks.try_hold(conn, OBJECT_LOCK_CLASS, name) or conn.execute(*query).fetchone() is not None:
                continue
            objects.delete(name)
            removed += 1
    return removed


class OrphanSweeper:
    """sweep_orphans in a thread of the server: once at start, then every SWEEP_EVERY_S."""

    def __init__(self, database: Database, objects: ObjectStore) -> None:
        self.database = database
        self.objects = objects
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="wasmrun-orphan-sweep", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                sweep_orphans(self.database, self.objects)
            except (ObjectStoreError, psycopg.Error, DatabaseError) as exc:
                logger.error("cannot sweep the object store for left-over objects: %s", exc)
            except Exception:  # a bad sweep must not end sweeping for good
                logger.exception("the object store's orphan sweep failed")
            if self._stop.wait(SWEEP_EVERY_S):
                return

    def stop(self) -> None:
        self._stop.set()
