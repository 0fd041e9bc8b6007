"""The audit log as rows of the shared database: one per call, from every server."""

from __future__ import annotations

import logging

import msgspec
import psycopg

from wasmrun.database import DatabaseError
from wasmrun.database.connection import Database
from wasmrun.observe.record import CallRecord

logger = logging.getLogger("wasmrun.database")


class PgAuditLog:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._encoder = msgspec.json.Encoder()

    def record(self, call: CallRecord) -> None:
        try:
            with self.database.connection() as conn:
                conn.execute(
                    "INSERT INTO wasmrun_audit (tenant, record) VALUES (%s, %s)",
                    # JSON escapes every control character and lone surrogate: plain ASCII-safe text.
                    (call.tenant, self._encoder.encode(call).decode()),
                )
        except (psycopg.Error, DatabaseError) as exc:
            # The call has been answered already; losing its line is logged, never raised into it.
            logger.error("cannot write the audit record of a %s call: %s", call.method, exc)

    def close(self) -> None:
        self.database.close()
