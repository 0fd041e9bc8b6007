"""Sessions shared by every server on one PostgreSQL and one object store
(`--database-url` with `--blob-store`): a session paused on one server resumes
on another.

A session is a row of wasmrun_sessions (its SessionMeta, owner, version,
expiry, bytes, and the objects of its current version) and those objects
(database/sessionobjects.py). The data dir's `sessions/` folder is only a
cache of versions: a run fetches its version when the local copy is missing
or not the row's, and uploads the version it makes before committing it. So:

- nothing partial is visible: a version's objects are stored before the row
  names them; a server killed in between leaves objects no row names, which
  the orphan sweep removes (database/orphans.py);
- one request at a time across servers: `acquire` sets the row's
  `busy_server` to this server, unless another live server holds it (a
  second request anywhere gets SessionBusy). A server killed mid-run stops
  its heartbeat; SERVER_GONE_S later its hold lapses and the session resumes
  elsewhere from its last committed version. A commit checks the hold is
  still this server's, so a server that lost it never overwrites another's;
- caps and expiry count every server's sessions: the `sessions` cap under a
  lock per tenant in the database, expiry by whichever server sweeps first,
  and close or expiry deletes the session's objects; each server drops its
  cached copies of sessions whose row is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import psycopg

from wasmrun.blobs.objects import ObjectStore, ObjectStoreError, ObjectStoreLocation
from wasmrun.database import DatabaseError, locks, sessionobjects
from wasmrun.database.connection import Database
from wasmrun.database.records import SharedRecordStore
from wasmrun.database.runs import HEARTBEAT_S, SERVER_GONE_S
from wasmrun.sandbox import SessionOutcome
from wasmrun.sandbox import session_state as sandbox_sessions
from wasmrun.sessionstore.store import (
    Busy,
    OverCap,
    SessionMeta,
    SessionStore,
    Unavailable,
    UnknownSession,
    key_of,
    packages_of,
    remove_ended,
    remove_quietly,
)
from wasmrun.tenants.limits import SessionPolicy

logger = logging.getLogger("wasmrun.sessions")
_decode = msgspec.json.Decoder(SessionMeta).decode
_encode = msgspec.json.Encoder().encode
# The row's hold is free: no server, or one whose heartbeat stopped.
_FREE = (
    "(busy_server IS NULL OR NOT EXISTS (SELECT 1 FROM wasmrun_servers s WHERE s.id = wasmrun_sessions.busy_server"
    f" AND s.seen > now() - make_interval(secs => {SERVER_GONE_S})))"
)
_BUSY = f"NOT {_FREE}"
LOCK = ".lock"
RELEASE_TRIES = 20  # a hold this server could not give back is tried again, a second apart
BACKEND_ERRORS = (psycopg.Error, DatabaseError, ObjectStoreError)
F = TypeVar("F", bound=Callable[..., Any])


def _reachable(method: F) -> F:
    """`method`, its backends' failures as Unavailable (the caller answers "try again")."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except BACKEND_ERRORS as exc:
            logger.error("sessions' shared backends: %s", exc)
            raise Unavailable("sessions cannot be reached now") from None

    return call  # type: ignore[return-value]


class SharedSessionStore(SessionStore):
    blocking = True
    def __init__(
        self, root: Path, database_url: str, blob_store: str, policy: SessionPolicy | None = None,
        on_end: Callable[[SessionMeta, str], None] | None = None,
    ) -> None:
        self.database = Database(database_url)
        self._heartbeat_database = Database(database_url)  # never waits behind a slow call
        self.objects = ObjectStore(ObjectStoreLocation.parse(blob_store))
        self.server_id = "sessions-" + uuid.uuid4().hex
        self._beating: threading.Thread | None = None
        self._creating: set[str] = set()  # keys whose local folder has no row yet
        self._busy_seen: dict[str, bool] = {}
        self._cache_lock = _own_cache(root, f"cache-{self.server_id}")
        super().__init__(root / f"cache-{self.server_id}", policy, on_end)

    def _open_records(self) -> SharedRecordStore:
        return SharedRecordStore(self.database.url)  # rows every server reads

    # -- start, stop, expiry ------------------------------------------------

    def _load(self) -> None:
        """Nothing: the cache folder is this process's own, new (see _own_cache)."""

    def _beat(self) -> None:
        with self._heartbeat_database.connection() as conn:
            conn.execute(
                "INSERT INTO wasmrun_servers (id, seen) VALUES (%s, now()) ON CONFLICT (id) DO UPDATE SET seen = now()",
                (self.server_id,),
            )

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except (psycopg.Error, DatabaseError) as exc:
                logger.error("cannot write the sessions' heartbeat: %s", exc)

    def _alive(self) -> None:
        """This server's heartbeat, before it first holds a session."""
        with self._lock:
            if self._beating is not None:
                return
            self._beat()
            self._beating = threading.Thread(target=self._heartbeat_loop, name="wasmrun-sessions-beat", daemon=True)
            self._beating.start()

    def stop(self) -> None:
        super().stop()
        with contextlib.suppress(psycopg.Error, DatabaseError), self.database.connection() as conn:
            conn.execute("UPDATE wasmrun_sessions SET busy_server = NULL WHERE busy_server = %s", (self.server_id,))
            conn.execute("DELETE FROM wasmrun_servers WHERE id = %s", (self.server_id,))
        self.database.close()
        self._heartbeat_database.close()
        if isinstance(self._records, SharedRecordStore):
            self._records.close()
        remove_quietly(self.root)
        os.close(self._cache_lock)

    def sweep(self, now: float | None = None) -> int:
        """End the sessions (of any server) past their expiry and not running; drop the
        local copies of sessions that ended anywhere."""
        now = time.time() if now is None else now
        with self.database.connection() as conn:
            rows = conn.execute(
                f"DELETE FROM wasmrun_sessions WHERE expires <= %s AND {_FREE} RETURNING meta", (now,)
            ).fetchall()
        ended = [_decode(r[0]) for r in rows]
        for meta in ended:
            self._delete(meta)
            self.on_end(meta, "expired")
        self._drop_cached()
        return len(ended)

    def _drop_cached(self) -> None:
        with self._lock:
            local = [f.name for f in self.root.iterdir() if f.name not in self._creating and not f.name.startswith(".")]
        if not local:
            return
        with self.database.connection() as conn:
            live = {r[0] for r in conn.execute("SELECT key FROM wasmrun_sessions WHERE key = ANY(%s)", (local,))}
        with self._lock:
            gone = [key for key in local if key not in live and key not in self._creating]
        for key in gone:
            remove_ended(self.root, key)  # a close here may be removing it too

    def _delete(self, meta: SessionMeta) -> None:
        """An ended session's objects and local copy (its row already deleted)."""
        try:
            sessionobjects.delete(self.objects, sorted(set(meta.objects.values())))
        except ObjectStoreError as exc:  # left to the orphan sweep
            logger.error("cannot delete an ended session's objects: %s", exc)
        remove_ended(self.root, meta.key)

    # -- lookups ------------------------------------------------------------

    def _row(self, key: str, owner: str) -> tuple[SessionMeta, bool] | None:
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT meta, {_BUSY} FROM wasmrun_sessions WHERE key = %s AND owner = %s AND expires > %s",
                (key, owner, time.time()),
            ).fetchone()
        if row is None:
            return None
        meta = _decode(row[0])
        self._busy_seen[meta.key] = bool(row[1])
        return meta, bool(row[1])

    @_reachable
    def get(self, owner: str, session_id: str) -> SessionMeta:
        found = self._row(key_of(session_id), owner)
        if found is None:
            raise UnknownSession()
        return found[0]

    @_reachable
    def owned(self, owner: str) -> list[SessionMeta]:
        with self.database.connection() as conn:
            rows = conn.execute(
                f"SELECT meta, {_BUSY} FROM wasmrun_sessions WHERE owner = %s AND expires > %s",
                (owner, time.time()),
            ).fetchall()
        found = []
        for text, busy in rows:
            meta = _decode(text)
            self._busy_seen[meta.key] = bool(busy)
            found.append(meta)
        return found

    @_reachable
    def usage(self, owner: str) -> tuple[int, int]:
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(disk_bytes), 0) FROM wasmrun_sessions WHERE owner = %s AND expires > %s",
                (owner, time.time()),
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def tenants(self) -> dict[str, tuple[int, int]]:
        """Per tenant (sessions open, their bytes), for /metrics: none while the database is out of reach."""
        try:
            with self.database.connection() as conn:
                rows = conn.execute(
                    "SELECT owner, count(*), coalesce(sum(disk_bytes), 0) FROM wasmrun_sessions GROUP BY owner"
                ).fetchall()
        except BACKEND_ERRORS as exc:
            logger.error("cannot count the sessions for /metrics: %s", exc)
            return {}
        return {str(owner): (int(count), int(used)) for owner, count, used in rows}

    def is_busy(self, meta: SessionMeta) -> bool:
        return self._busy_seen.get(meta.key, False)

    # -- changes ------------------------------------------------------------

    def create(
        self, owner: str, *, idle_timeout_s: int, limits: dict[str, int], skills: list[str],
        max_sessions: int, source: SessionMeta | None = None, packages: tuple[list[str], str] | None = None,
    ) -> tuple[str, SessionMeta]:
        session_id, meta = self._new_meta(owner, idle_timeout_s, limits, skills, packages or packages_of(source))
        if self.usage(owner)[0] >= max_sessions:  # before any upload; checked again under the lock
            raise OverCap("sessions", max_sessions)
        folder = self.root / meta.key
        with self._lock:
            self._creating.add(meta.key)
        try:
            folder.mkdir(mode=0o700)
            if source is not None:
                self._copy_state(source, meta)
            try:
                self._insert(meta, max_sessions)
            except BaseException:
                sessionobjects.delete(self.objects, list(meta.objects.values()))
                raise
        except BaseException:
            remove_quietly(folder)
            raise
        finally:
            with self._lock:
                self._creating.discard(meta.key)
        return session_id, meta

    def _copy_state(self, source: SessionMeta, meta: SessionMeta) -> None:
        """A fork: `source`'s version (fetched by `ready`) as `meta`'s version 0, uploaded."""
        meta.created = source.created  # a fork keeps its original's age; its idle time starts now
        meta.runs, meta.memory_bytes = source.runs, source.memory_bytes
        meta.image_bytes, meta.files_bytes = source.image_bytes, source.files_bytes
        target = sandbox_sessions.version_dir(self.root / meta.key, 0)
        sandbox_sessions.copy_version(sandbox_sessions.version_dir(self.root / source.key, source.version), target)
        meta.objects, meta.files_digest = sessionobjects.upload(self.objects, meta.key, target, None, {})
        sessionobjects.mark(target, meta.objects)

    def _insert(self, meta: SessionMeta, max_sessions: int) -> None:
        with self.database.transaction() as conn:
            locks.hold(conn, locks.SESSIONS_OF_OWNER, meta.owner)
            row = conn.execute(
                "SELECT count(*) FROM wasmrun_sessions WHERE owner = %s AND expires > %s", (meta.owner, time.time())
            ).fetchone()
            if row is not None and int(row[0]) >= max_sessions:
                raise OverCap("sessions", max_sessions)
            conn.execute(
                "INSERT INTO wasmrun_sessions (key, owner, version, expires, disk_bytes, objects, meta)"
                " VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)",
                (meta.key, meta.owner, meta.version, meta.expires(), meta.disk_bytes,
                 _encode(meta.objects).decode(), _encode(meta).decode()),
            )

    @_reachable
    def acquire(self, meta: SessionMeta) -> None:
        """Hold `meta` for this server (Busy if any live server holds it), and bring
        `meta` up to the row (another server may have run it since it was read)."""
        self._alive()
        with self.database.connection() as conn:
            row = conn.execute(
                f"UPDATE wasmrun_sessions SET busy_server = %s WHERE key = %s AND owner = %s AND expires > %s AND {_FREE}"
                " RETURNING meta",
                (self.server_id, meta.key, meta.owner, time.time()),
            ).fetchone()
        if row is None:
            raise Busy() if self._row(meta.key, meta.owner) is not None else UnknownSession()
        current = _decode(row[0])
        for field in meta.__struct_fields__:
            setattr(meta, field, getattr(current, field))

    def release(self, meta: SessionMeta, tries: int = RELEASE_TRIES) -> None:
        """Give back this server's hold; never raises (a run's result is never lost to
        it): a database out of reach is tried again in the background."""
        try:
            with self.database.connection() as conn:
                conn.execute(
                    "UPDATE wasmrun_sessions SET busy_server = NULL WHERE key = %s AND busy_server = %s",
                    (meta.key, self.server_id),
                )
        except BACKEND_ERRORS as exc:
            logger.error("cannot give back a session's hold (%d tries left): %s", tries - 1, exc)
            if tries > 1 and not self._stop.wait(1.0):
                with contextlib.suppress(RuntimeError):  # stopping
                    self._deleter.submit(self.release, meta, tries - 1)

    @_reachable
    def ready(self, meta: SessionMeta) -> None:
        folder = self.root / meta.key
        folder.mkdir(mode=0o700, exist_ok=True)
        current = sandbox_sessions.version_dir(folder, meta.version)
        if not meta.objects or sessionobjects.is_current(current, meta.objects):
            return
        remove_quietly(current)
        try:
            sessionobjects.fetch(self.objects, meta.objects, current)
        except (KeyError, tarfile.TarError) as exc:
            # Its state did not survive (objects deleted by hand, or damaged): never resume it
            # blank or partial. It ends, as a local session whose folder is damaged does.
            logger.error("removing session %s: its stored state cannot be read (%s)", meta.key[:16], exc)
            with self.database.connection() as conn:
                conn.execute("DELETE FROM wasmrun_sessions WHERE key = %s", (meta.key,))
            self._delete(meta)
            raise UnknownSession() from None

    def finish_run(self, meta: SessionMeta, outcome: SessionOutcome | None) -> bool:
        folder = self.root / meta.key
        current = sandbox_sessions.version_dir(folder, meta.version)
        following = sandbox_sessions.version_dir(folder, meta.version + 1)
        if outcome is None or not outcome.committed:
            remove_quietly(following)
            meta.last_used = time.time()
            try:
                self._update(meta, meta.version)
            except BACKEND_ERRORS as exc:  # only its last use is not recorded
                logger.error("cannot record a session's use: %s", exc)
            return False
        kept = msgspec.structs.replace(
            meta, version=meta.version + 1, reseed=False, runs=meta.runs + 1, last_used=time.time(),
            memory_bytes=outcome.memory_bytes, image_bytes=outcome.image_bytes, files_bytes=outcome.files_bytes,
        )
        try:
            kept.objects, kept.files_digest = sessionobjects.upload(
                self.objects, meta.key, following, current, meta.objects, meta.files_digest,
            )
            committed = self._update(kept, meta.version)
        except (ObjectStoreError, psycopg.Error, DatabaseError) as exc:
            logger.error("a session's new version could not be stored; the run is undone: %s", exc)
            committed = False
        if not committed:
            with contextlib.suppress(ObjectStoreError):
                sessionobjects.delete(self.objects, sessionobjects.new_objects(kept.objects, meta.objects))
            remove_quietly(following)
            return False
        sessionobjects.mark(following, kept.objects)
        stale = sessionobjects.new_objects(meta.objects, kept.objects)
        for field in meta.__struct_fields__:
            setattr(meta, field, getattr(kept, field))
        self._deleter.submit(self._forget, current, stale)
        return True

    def _forget(self, version: Path, stale: list[str]) -> None:
        remove_quietly(version)
        try:
            sessionobjects.delete(self.objects, stale)
        except ObjectStoreError as exc:
            logger.error("cannot delete a session's old version: %s", exc)

    def _update(self, meta: SessionMeta, version: int) -> bool:
        """Write `meta` over the row at `version`, if this server still holds it."""
        with self.database.connection() as conn:
            done = conn.execute(
                "UPDATE wasmrun_sessions SET version = %s, expires = %s, disk_bytes = %s, objects = %s::jsonb, meta = %s"
                " WHERE key = %s AND version = %s AND busy_server = %s",
                (meta.version, meta.expires(), meta.disk_bytes, _encode(meta.objects).decode(),
                 _encode(meta).decode(), meta.key, version, self.server_id),
            )
            return done.rowcount == 1

    @_reachable
    def close(self, owner: str, session_id: str) -> None:
        meta = self.get(owner, session_id)
        with self.database.connection() as conn:
            row = conn.execute(
                f"DELETE FROM wasmrun_sessions WHERE key = %s AND owner = %s AND {_FREE} RETURNING meta",
                (meta.key, owner),
            ).fetchone()
        if row is None:
            raise Busy() if self._row(meta.key, owner) is not None else UnknownSession()
        ended = _decode(row[0])
        self._delete(ended)
        self.on_end(ended, "closed")


def _own_cache(parent: Path, name: str) -> int:
    """This process's cache folder `parent/name`, and the descriptor of the lock it
    holds on it for its life; the folders of processes that ended are removed (so
    two processes on one data dir never touch each other's copies)."""
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in parent.iterdir():
        if folder.name.startswith("."):
            continue  # `.new-*`: a process making its folder (locked once it is renamed)
        try:
            fd = os.open(folder / LOCK, os.O_RDWR)
        except OSError:
            remove_quietly(folder)  # never locked: nobody's
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live process's
        finally:
            os.close(fd)
        remove_quietly(folder)
    staging = parent / f".new-{name}"
    staging.mkdir(mode=0o700)
    fd = os.open(staging / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(staging, parent / name)
    return fd
