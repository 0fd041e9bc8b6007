"""A tenant's `concurrent_runs` counted across every server sharing the database.

Each server first admits a run as on its own (its share of its sandboxes, its
queue, the rate: tenants/quotas.py), then takes a lease in the database, where
a tenant never holds more leases than its `concurrent_runs`; a run waiting for
one waits at most the queue timeout, then gets the usual "server busy".

A server writes a heartbeat every HEARTBEAT_S; the leases of a server silent
for SERVER_GONE_S (killed mid-run) are dropped by the next admission, so a dead
server holds its tenants' slots for that long at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator

import psycopg

from wasmrun.database import DatabaseError
from wasmrun.database.connection import Database
from wasmrun.tenants.caller import UNBOUNDED, Caller
from wasmrun.tenants.quotas import QueueTimeout, RunGate

logger = logging.getLogger("wasmrun.database")
HEARTBEAT_S = 5.0
SERVER_GONE_S = 30
POLL_S = 0.05


class SharedRunGate(RunGate):
    def __init__(self, database_url: str, queue_timeout: float = 5.0, pool_size: int | None = None) -> None:
        super().__init__(queue_timeout, pool_size)
        self.database = Database(database_url)
        self._heartbeat_database = Database(database_url)  # never waits behind an admission
        self.server_id = uuid.uuid4().hex
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    def _heartbeat(self) -> None:
        while True:
            try:
                with self._heartbeat_database.connection() as conn:
                    conn.execute(
                        "INSERT INTO wasmrun_servers (id, seen) VALUES (%s, now())"
                        " ON CONFLICT (id) DO UPDATE SET seen = now()",
                        (self.server_id,),
                    )
            except (psycopg.Error, DatabaseError) as exc:
                logger.error("cannot write this server's heartbeat: %s", exc)
            if self._stop.wait(HEARTBEAT_S):
                return

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(psycopg.Error, DatabaseError), self.database.connection() as conn:
            conn.execute("DELETE FROM wasmrun_run_leases WHERE server = %s", (self.server_id,))
            conn.execute("DELETE FROM wasmrun_servers WHERE id = %s", (self.server_id,))

    @contextlib.asynccontextmanager
    async def admit(self, caller: Caller) -> AsyncIterator[None]:
        async with super().admit(caller):
            limit = caller.limits.concurrent_runs
            if limit >= UNBOUNDED:
                yield
                return
            if self._beating is None:
                self._beating = threading.Thread(target=self._heartbeat, name="wasmrun-heartbeat", daemon=True)
                self._beating.start()
            lease = await self._acquire(caller.tenant, limit)
            try:
                yield
            finally:
                await asyncio.to_thread(self._release, lease)

    async def _acquire(self, tenant: str, limit: int) -> int:
        deadline = time.monotonic() + self.queue_timeout
        while True:
            lease = await asyncio.to_thread(self._try_lease, tenant, limit)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise QueueTimeout(
                    f"this tenant's {limit} concurrent runs (concurrent_runs) are all taken across the servers;"
                    " try again shortly"
                )
            await asyncio.sleep(POLL_S)

    def _try_lease(self, tenant: str, limit: int) -> int | None:
        with self.database.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("wasmrun-runs:" + tenant,))
            conn.execute(
                "INSERT INTO wasmrun_servers (id, seen) VALUES (%s, now()) ON CONFLICT (id) DO UPDATE SET seen = now()",
                (self.server_id,),
            )
            conn.execute(
                "DELETE FROM wasmrun_run_leases l WHERE tenant = %s AND NOT EXISTS (SELECT 1 FROM wasmrun_servers s"
                " WHERE s.id = l.server AND s.seen > now() - make_interval(secs => %s))",
                (tenant, SERVER_GONE_S),
            )
            row = conn.execute("SELECT count(*) FROM wasmrun_run_leases WHERE tenant = %s", (tenant,)).fetchone()
            if row is not None and int(row[0]) >= limit:
                return None
            made = conn.execute(
                "INSERT INTO wasmrun_run_leases (tenant, server) VALUES (%s, %s) RETURNING id", (tenant, self.server_id)
            ).fetchone()
            assert made is not None
            return int(made[0])

    def _release(self, lease: int) -> None:
        try:
            with self.database.connection() as conn:
                conn.execute("DELETE FROM wasmrun_run_leases WHERE id = %s", (lease,))
        except (psycopg.Error, DatabaseError) as exc:
            # Left behind, the lease goes with this server's heartbeat at worst.
            logger.error("cannot release a run's lease: %s", exc)
