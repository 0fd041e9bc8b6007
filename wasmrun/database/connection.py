"""Connecting to the shared PostgreSQL, and bringing its schema up to date.

One connection per process, in autocommit (each statement is its own
transaction unless a block opens one), guarded by a lock: the server's calls
into it are short, and a lost connection (the database restarted) is opened
again on the next use instead of failing every later call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import psycopg

from wasmrun import tracing
from wasmrun.database import DatabaseError
from wasmrun.database.migrations import LATEST, MIGRATIONS

logger = logging.getLogger("wasmrun.database")
# Any constant: the key of the advisory lock migrations hold.
MIGRATION_LOCK = 0x7761736D72756E
CONNECT_TIMEOUT_S = 10


def check_url(url: str) -> str:
    """The URL if it names a PostgreSQL database, else a DatabaseError (never echoing a password)."""
    scheme = urlsplit(url).scheme
    if scheme not in ("postgresql", "postgres"):
        raise DatabaseError(f"--database-url must start with postgresql:// (got {scheme or 'no'} scheme)")
    return url


def redacted(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "(socket)"
    return f"{parts.scheme}://{host}{':' + str(parts.port) if parts.port else ''}{parts.path}"


class Database:
    def __init__(self, url: str) -> None:
        self.url = check_url(url)
        self._lock = threading.RLock()
        self._conn: psycopg.Connection | None = None

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            try:
                self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
            except psycopg.Error as exc:
                raise DatabaseError(f"cannot connect to {redacted(self.url)}: {type(exc).__name__}") from None
        return self._conn

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """The process's connection, for this thread alone during the block."""
        with tracing.span("database"), self._lock:
            conn = self._connect()
            try:
                yield conn
            except psycopg.OperationalError:
                # The connection may be gone (server restart): the next block opens a new one.
                with contextlib.suppress(psycopg.Error):
                    conn.close()
                raise

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        with self.connection() as conn, conn.transaction():
            yield conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def migrate(self) -> list[int]:
        """Apply the steps this database lacks; returns their numbers (none: up to date).
        A database newer than this wasmrun is refused rather than used."""
        with self.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS wasmrun_schema (version integer PRIMARY KEY,"
                " applied timestamptz NOT NULL DEFAULT now())"
            )
            applied = {int(r[0]) for r in conn.execute("SELECT version FROM wasmrun_schema").fetchall()}
            if applied and max(applied) > LATEST:
                raise DatabaseError(
                    f"the database's schema is at version {max(applied)}, newer than this wasmrun's ({LATEST}):"
                    " upgrade wasmrun"
                )
            done = []
            for version, sql in MIGRATIONS:
                if version in applied:
                    continue
                conn.execute(sql)  # our own constant statements
                conn.execute("INSERT INTO wasmrun_schema (version) VALUES (%s)", (version,))
                done.append(version)
        if done:
            logger.info("database schema migrated to version %d", LATEST)
        return done
