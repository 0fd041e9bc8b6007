"""Records kept beside the sessions (sessionstore/records.py) with the shared backends:
rows of wasmrun_session_records, read by every server, so what one server records (an E2B
sandbox, say) every other answers for. A change reads and writes its row under the row's
lock (SELECT ... FOR UPDATE), so two servers' changes never lose one another; a delete or
an expiry is taken by one server (DELETE ... RETURNING)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from wasmrun.database import DatabaseError
from wasmrun.database.connection import Database
from wasmrun.sessionstore.records import Change, Record, RecordGone, RecordStore, check_name
from wasmrun.sessionstore.store import Unavailable

F = TypeVar("F", bound=Callable[..., Any])
_COLUMNS = "key, owner, expires, doc"


def _reachable(method: F) -> F:
    """`method`, the database's failures as Unavailable (the caller answers "try again")."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (psycopg.Error, DatabaseError) as exc:
            raise Unavailable(f"the session records cannot be reached: {type(exc).__name__}") from None

    return call  # type: ignore[return-value]


def _record(row: Any) -> Record:
    return Record(key=str(row[0]), owner=str(row[1]), expires=float(row[2]), doc=str(row[3]))


class SharedRecordStore(RecordStore):
    blocking = True

    def __init__(self, database_url: str) -> None:
        super().__init__(None)
        self.database = Database(database_url)

    def close(self) -> None:
        self.database.close()

    @_reachable
    def insert(self, kind: str, record: Record) -> None:
        check_name(kind), check_name(record.key)
        with self.database.connection() as conn:
            conn.execute(
                "INSERT INTO wasmrun_session_records (kind, key, owner, expires, doc) VALUES (%s, %s, %s, %s, %s)",
                (kind, record.key, record.owner, record.expires, record.doc),
            )

    @_reachable
    def get(self, kind: str, key: str) -> Record | None:
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM wasmrun_session_records WHERE kind = %s AND key = %s AND expires > %s",
                (kind, key, time.time()),
            ).fetchone()
        return None if row is None else _record(row)

    @_reachable
    def change(self, kind: str, key: str, change: Change) -> Record:
        with self.database.transaction() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM wasmrun_session_records WHERE kind = %s AND key = %s AND expires > %s"
                " FOR UPDATE", (kind, key, time.time()),
            ).fetchone()
            if row is None:
                raise RecordGone()
            found = _record(row)
            changed = change(found)
            if changed.key != key or changed.owner != found.owner:
                raise ValueError("a change keeps the record's key and owner")
            conn.execute(
                "UPDATE wasmrun_session_records SET expires = %s, doc = %s WHERE kind = %s AND key = %s",
                (changed.expires, changed.doc, kind, key),
            )
            return changed

    @_reachable
    def delete(self, kind: str, key: str) -> Record | None:
        with self.database.connection() as conn:
            row = conn.execute(
                f"DELETE FROM wasmrun_session_records WHERE kind = %s AND key = %s RETURNING {_COLUMNS}", (kind, key)
            ).fetchone()
        return None if row is None else _record(row)

    @_reachable
    def owned(self, kind: str, owner: str) -> list[Record]:
        with self.database.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM wasmrun_session_records WHERE kind = %s AND owner = %s AND expires > %s",
                (kind, owner, time.time()),
            ).fetchall()
        return [_record(r) for r in rows]

    @_reachable
    def owners(self, kind: str) -> set[str]:
        with self.database.connection() as conn:
            rows = conn.execute("SELECT DISTINCT owner FROM wasmrun_session_records WHERE kind = %s", (kind,)).fetchall()
        return {str(r[0]) for r in rows}

    @_reachable
    def take_expired(self, kind: str, now: float | None = None) -> list[Record]:
        now = time.time() if now is None else now
        with self.database.connection() as conn:
            rows = conn.execute(
                f"DELETE FROM wasmrun_session_records WHERE kind = %s AND expires <= %s RETURNING {_COLUMNS}",
                (kind, now),
            ).fetchall()
        return [_record(r) for r in rows]
