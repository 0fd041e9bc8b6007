"""Run admission per tenant: how many of its runs are in a sandbox at once, how
many wait, and how many start a minute.

Fairness comes from the first bound: a tenant never holds more than its
`concurrent_runs` sandboxes, and never more than all the pool's sandboxes but
one, so a tenant flooding the server (even with runs that sleep to their
timeout) leaves a sandbox free for everyone else; its surplus waits in its own
queue, bounded by `queued_runs`, and is refused past that, instead of queueing
in front of other tenants' calls. (Several hostile tenants together can still
fill the pool: give each a `concurrent_runs` of its share for a hard bound.)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from wasmrun.tenants.caller import UNBOUNDED, Caller

RATE_WINDOW_S = 60.0


class RunQuotaExceeded(Exception):
    """Over one of the tenant's run limits; `retry_after_s` for a rate limit."""

    def __init__(self, limit: str, value: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.message = message
        self.retry_after_s = retry_after_s


class QueueTimeout(Exception):
    """The tenant's sandboxes stayed taken for the whole wait."""


@dataclass
class TenantRuns:
    slots: int
    running: int = 0
    waiting: int = 0
    starts: deque[float] = field(default_factory=deque)
    freed: asyncio.Condition | None = None  # made in the loop that first needs it


class RunGate:
    """One per server; `admit(caller)` holds one of the tenant's run slots."""

    def __init__(self, queue_timeout: float = 5.0, pool_size: int | None = None) -> None:
        self.queue_timeout = queue_timeout
        # The most sandboxes one tenant may hold: all but one, so another tenant always finds one.
        self.share = max(1, pool_size - 1) if pool_size else UNBOUNDED
        self._tenants: dict[str, TenantRuns] = {}

    def close(self) -> None:
        """Nothing held outside this process (the database's gate releases its leases)."""

    def load(self) -> dict[str, tuple[int, int]]:
        """Per tenant: (runs in a sandbox, runs waiting)."""
        return {name: (t.running, t.waiting) for name, t in self._tenants.items()}

    @contextlib.asynccontextmanager
    async def admit(self, caller: Caller) -> AsyncIterator[None]:
        limits = caller.limits
        if limits.concurrent_runs >= UNBOUNDED and limits.runs_per_minute >= UNBOUNDED:
            yield  # the implicit local tenant, alone on its server: nothing to share
            return
        slots = min(limits.concurrent_runs, self.share)
        state = self._tenants.get(caller.tenant)
        if state is None:
            state = self._tenants[caller.tenant] = TenantRuns(slots)
        state.slots = slots  # `tenants set` takes effect on the next call
        self._check_rate(state, limits.runs_per_minute)
        if state.running >= state.slots:
            if state.waiting >= limits.queued_runs:
                raise RunQuotaExceeded(
                    "queued_runs", limits.queued_runs,
                    f"{state.running} runs of this tenant are running and {state.waiting} waiting,"
                    f" its limits (concurrent_runs = {state.slots}, queued_runs = {limits.queued_runs})",
                    retry_after_s=1,
                )
            await self._wait(state)
        state.running += 1
        state.starts.append(time.monotonic())
        try:
            yield
        finally:
            state.running -= 1
            if state.freed is not None and state.waiting:
                async with state.freed:
                    state.freed.notify(1)

    async def _wait(self, state: TenantRuns) -> None:
        if state.freed is None:
            state.freed = asyncio.Condition()
        state.waiting += 1
        try:
            async with state.freed:
                await asyncio.wait_for(
                    state.freed.wait_for(lambda: state.running < state.slots), self.queue_timeout
                )
        except TimeoutError:
            raise QueueTimeout(
                f"all {state.slots} sandboxes this tenant may use stayed busy; try again shortly"
            ) from None
        finally:
            state.waiting -= 1

    @staticmethod
    def _check_rate(state: TenantRuns, per_minute: int) -> None:
        now = time.monotonic()
        while state.starts and now - state.starts[0] >= RATE_WINDOW_S:
            state.starts.popleft()
        if len(state.starts) >= per_minute:
            wait = math.ceil(RATE_WINDOW_S - (now - state.starts[0]))
            raise RunQuotaExceeded(
                "runs_per_minute", per_minute,
                f"this tenant started {len(state.starts)} runs in the last minute, its limit"
                f" (runs_per_minute = {per_minute}); retry in {wait} s",
                retry_after_s=max(1, wait),
            )
