"""A tenant's run limits counted across every server sharing the database:
`concurrent_runs`, `queued_runs` and `runs_per_minute` hold for the tenant as a
whole, not per server.

Every run of a limited tenant holds a lease row while it is admitted: running
(in a sandbox) or waiting for one of the tenant's slots. A run starts when its
lease is running, the tenant holds fewer running leases than its
`concurrent_runs`, and this server has a sandbox in the tenant's share (all its
sandboxes but one, tenants/quotas.py); otherwise it waits, as a waiting lease,
unless the tenant already has `queued_runs` waiting (refused, -32002 naming
queued_runs). A waiting run waits at most the queue timeout, then gets the
usual "server busy". Each start is a row of wasmrun_run_starts; a tenant with
`runs_per_minute` of them in the last minute (by the database's clock, one for
every server) is refused with the seconds until the oldest leaves the minute.
All of a tenant's decisions are made under one lock per tenant in the
database, so two servers never both take its last slot or its last start.

A server writes a heartbeat every HEARTBEAT_S; the leases (running and waiting)
of a server silent for SERVER_GONE_S (killed mid-run) are dropped by the next
admission, so a dead server holds its tenants' slots and queue places for that
long at most. Its starts count for the minute they were made in, as any start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from wasmrun.database import DatabaseError, locks
from wasmrun.database.connection import Database
from wasmrun.offload import for_run, run_pool
from wasmrun.tenants.caller import UNBOUNDED, Caller
from wasmrun.tenants.limits import TenantLimits
from wasmrun.tenants.quotas import RATE_WINDOW_S, QueueTimeout, RunGate, RunQuotaExceeded, TenantRuns

logger = logging.getLogger("wasmrun.database")
HEARTBEAT_S = 5.0
SERVER_GONE_S = 30
POLL_S = 0.05
# The longest one statement of an admission may take (a stalled database, a table locked
# by hand): bounded so that no admission waits past its queue timeout for the database.
STATEMENT_TIMEOUT_S = 5.0


@dataclass
class _Lease:
    id: int
    running: bool


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
                    # What admissions drop per tenant, for tenants that stopped calling too.
                    conn.execute(
                        "DELETE FROM wasmrun_run_leases l WHERE NOT EXISTS (SELECT 1 FROM wasmrun_servers s"
                        " WHERE s.id = l.server AND s.seen > now() - make_interval(secs => %s))",
                        (SERVER_GONE_S,),
                    )
                    conn.execute(
                        "DELETE FROM wasmrun_run_starts WHERE at <= now() - make_interval(secs => %s)",
                        (RATE_WINDOW_S,),
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
        limits = caller.limits
        if limits.concurrent_runs >= UNBOUNDED and limits.runs_per_minute >= UNBOUNDED:
            yield  # the implicit local tenant: nothing to count
            return
        if self._beating is None:
            self._beating = threading.Thread(target=self._heartbeat, name="wasmrun-heartbeat", daemon=True)
            self._beating.start()
        local = self._tenants.get(caller.tenant)
        if local is None:
            local = self._tenants[caller.tenant] = TenantRuns(0)
        local.slots = min(limits.concurrent_runs, self.share)
        # This server's sandbox, taken before asking the database, given back if the run waits.
        here = local.running < local.slots
        local.running += here
        deadline = time.monotonic() + self.queue_timeout  # for the whole admission, lock waits included
        try:
            lease = await self._kept(for_run(self._enter, caller.tenant, limits, here, deadline))
        except BaseException:
            local.running -= here
            raise
        try:
            if not lease.running:
                local.running -= here
                await self._wait_for_slot(local, lease, caller.tenant, limits, deadline)
            yield
        finally:
            if lease.running:
                local.running -= 1
            await for_run(self._release, lease.id)

    async def _wait_for_slot(
        self, local: TenantRuns, lease: _Lease, tenant: str, limits: TenantLimits, deadline: float
    ) -> None:
        local.waiting += 1
        try:
            while True:
                await asyncio.sleep(POLL_S)
                if local.running < local.slots:
                    local.running += 1
                    try:
                        promoted = await self._kept(for_run(self._promote, lease.id, tenant, limits, deadline))
                        lease.id, lease.running = promoted.id, promoted.running
                    finally:
                        if not lease.running:
                            local.running -= 1
                    if lease.running:
                        return
                if time.monotonic() >= deadline:
                    raise QueueTimeout(
                        f"this tenant's {limits.concurrent_runs} concurrent runs (concurrent_runs) stayed taken"
                        " across the servers; try again shortly"
                    )
        finally:
            local.waiting -= 1

    async def _kept(self, call: Coroutine[Any, Any, _Lease]) -> _Lease:
        """The lease `call` takes in its thread; if the caller goes away meanwhile (a client
        disconnecting), the thread still finishes, and the lease it took is given back."""
        task = asyncio.ensure_future(call)
        try:
            return await asyncio.shield(task)
        except (psycopg.Error, DatabaseError) as exc:
            logger.error("cannot count a run against its tenant's limits: %s", exc)
            raise QueueTimeout("the tenant's run limits cannot be checked right now; try again shortly") from None
        except asyncio.CancelledError:
            loop = asyncio.get_running_loop()

            def give_back(done: asyncio.Future[_Lease]) -> None:
                if not done.cancelled() and done.exception() is None:
                    loop.run_in_executor(run_pool(), self._release, done.result().id)

            task.add_done_callback(give_back)
            raise

    # -- in the database, one tenant's decisions at a time ---------------------

    @contextlib.contextmanager
    def _locked(self, tenant: str, deadline: float) -> Iterator[psycopg.Connection]:
        """A transaction holding the tenant's lock, each statement bounded. The lock is
        tried, not waited for: while another transaction (of any server) holds it, the
        connection is let go and the lock tried again every POLL_S, until `deadline`
        (the run's queue timeout), then QueueTimeout, the usual "server busy"."""
        statement_ms = max(1, int(min(self.queue_timeout, STATEMENT_TIMEOUT_S) * 1000))
        while True:
            with self.database.transaction() as conn:
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(statement_ms),))
                if locks.try_hold(conn, locks.RUNS_OF_TENANT, tenant):
                    yield conn
                    return
            if time.monotonic() >= deadline:
                raise QueueTimeout("the tenant's run limits are being checked by another run for too long; try again")
            time.sleep(POLL_S)

    def _begin(self, conn: psycopg.Connection, tenant: str, per_minute: int) -> None:
        """With the tenant locked: drop what dead servers held and starts past the minute,
        and refuse a run over the tenant's `runs_per_minute`."""
        conn.execute(
            "INSERT INTO wasmrun_servers (id, seen) VALUES (%s, now()) ON CONFLICT (id) DO UPDATE SET seen = now()",
            (self.server_id,),
        )
        conn.execute(
            "DELETE FROM wasmrun_run_leases l WHERE tenant = %s AND NOT EXISTS (SELECT 1 FROM wasmrun_servers s"
            " WHERE s.id = l.server AND s.seen > now() - make_interval(secs => %s))",
            (tenant, SERVER_GONE_S),
        )
        if per_minute >= UNBOUNDED:
            return
        conn.execute(
            "DELETE FROM wasmrun_run_starts WHERE tenant = %s AND at <= now() - make_interval(secs => %s)",
            (tenant, RATE_WINDOW_S),
        )
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM now() - min(at)) FROM wasmrun_run_starts WHERE tenant = %s",
            (tenant,),
        ).fetchone()
        started = int(row[0]) if row else 0
        if started >= per_minute:
            age = float(row[1]) if row and row[1] is not None else 0.0
            wait = max(1, math.ceil(RATE_WINDOW_S - age))
            raise RunQuotaExceeded(
                "runs_per_minute", per_minute,
                f"this tenant started {started} runs in the last minute across the servers, its limit"
                f" (runs_per_minute = {per_minute}); retry in {wait} s",
                retry_after_s=wait,
            )

    def _running(self, conn: psycopg.Connection, tenant: str) -> tuple[int, int]:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE NOT waiting), count(*) FILTER (WHERE waiting)"
            " FROM wasmrun_run_leases WHERE tenant = %s",
            (tenant,),
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def _start(self, conn: psycopg.Connection, tenant: str, limits: TenantLimits) -> None:
        if limits.runs_per_minute < UNBOUNDED:
            conn.execute("INSERT INTO wasmrun_run_starts (tenant) VALUES (%s)", (tenant,))

    def _enter(self, tenant: str, limits: TenantLimits, here: bool, deadline: float) -> _Lease:
        """A running lease if the run may start now, a waiting one if it may wait, else
        RunQuotaExceeded naming the limit."""
        with self._locked(tenant, deadline) as conn:
            self._begin(conn, tenant, limits.runs_per_minute)
            running, waiting = self._running(conn, tenant)
            start = here and running < limits.concurrent_runs
            if not start and waiting >= limits.queued_runs:
                raise RunQuotaExceeded(
                    "queued_runs", limits.queued_runs,
                    f"{running} runs of this tenant are running and {waiting} waiting across the servers,"
                    f" its limits (concurrent_runs = {limits.concurrent_runs}, queued_runs = {limits.queued_runs})",
                    retry_after_s=1,
                )
            made = conn.execute(
                "INSERT INTO wasmrun_run_leases (tenant, server, waiting) VALUES (%s, %s, %s) RETURNING id",
                (tenant, self.server_id, not start),
            ).fetchone()
            assert made is not None
            if start:
                self._start(conn, tenant, limits)
            return _Lease(int(made[0]), start)

    def _promote(self, lease: int, tenant: str, limits: TenantLimits, deadline: float) -> _Lease:
        """The lease, running once the waiting run may start; a start over the rate is refused."""
        with self._locked(tenant, deadline) as conn:
            self._begin(conn, tenant, limits.runs_per_minute)
            running, _ = self._running(conn, tenant)
            if running >= limits.concurrent_runs:
                return _Lease(lease, False)
            moved = conn.execute(
                "UPDATE wasmrun_run_leases SET waiting = false, started = now() WHERE id = %s RETURNING id", (lease,)
            ).fetchone()
            if moved is None:  # dropped as a dead server's (this one paused past SERVER_GONE_S): take another
                made = conn.execute(
                    "INSERT INTO wasmrun_run_leases (tenant, server) VALUES (%s, %s) RETURNING id",
                    (tenant, self.server_id),
                ).fetchone()
                assert made is not None
                lease = int(made[0])
            self._start(conn, tenant, limits)
            return _Lease(lease, True)

    def _release(self, lease: int) -> None:
        try:
            with self.database.connection() as conn:
                conn.execute("DELETE FROM wasmrun_run_leases WHERE id = %s", (lease,))
        except (psycopg.Error, DatabaseError) as exc:
            # Left behind, the lease goes with this server's heartbeat at worst.
            logger.error("cannot release a run's lease: %s", exc)
