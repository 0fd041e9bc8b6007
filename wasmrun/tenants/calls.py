"""Admission of the methods that are not runs (read_blob, create_blob, list_skills,
describe_skill, read_skill_file, create_skill, delete_blob, ...), per tenant.

They are short, but they share the event loop and a thread pool (their file and
database I/O) with every other tenant: without a bound, one tenant's 64 concurrent
`read_blob`s of large blobs hold every thread and the others' calls wait behind
them. So a tenant has at most `concurrent_calls` of them in flight; more wait, in
the tenant's own queue (at most `queued_calls`, at most the queue timeout), and are
refused past that with -32002 naming the limit ("busy for this tenant"). The bytes
those calls move (params in, content out) are paced at `call_bytes_per_s`: a call
that finds the tenant ahead of its pace waits in the tenant's queue until it is
not (refused if that is longer than the queue timeout), so one tenant's stream of
large reads cannot keep the event loop encoding for it alone. Runs are
admitted by tenants/quotas.py; their bookkeeping uses a thread pool of its own
(wasmrun/offload.py), so neither can starve the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from wasmrun.tenants.caller import UNBOUNDED, Caller


class CallsBusy(Exception):
    """Over the tenant's `concurrent_calls` + `queued_calls`, or waited the whole queue timeout."""

    def __init__(self, limit: str, value: int, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.message = message


@dataclass
class _TenantCalls:
    running: int = 0
    waiting: int = 0
    freed: asyncio.Condition | None = None
    paced_until: float = 0.0  # monotonic time the bytes moved so far are paid for


class Charge:
    """What a call moved, told by the caller once known (bytes in and out)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


class CallGate:
    """One per server; `admit(caller)` holds one of the tenant's call slots."""

    def __init__(self, queue_timeout: float = 5.0) -> None:
        self.queue_timeout = queue_timeout
        self._tenants: dict[str, _TenantCalls] = {}

    def load(self) -> dict[str, tuple[int, int]]:
        """Per tenant: (calls in flight, calls waiting)."""
        return {name: (t.running, t.waiting) for name, t in self._tenants.items()}

    @contextlib.asynccontextmanager
    async def admit(self, caller: Caller) -> AsyncIterator[Charge]:
        limits = caller.limits
        charge = Charge()
        if limits.concurrent_calls >= UNBOUNDED:
            yield charge  # the implicit local tenant, alone on its server
            return
        state = self._tenants.setdefault(caller.tenant, _TenantCalls())
        ahead = state.paced_until - time.monotonic()
        if ahead > 0:
            await self._pace(caller, state, ahead)
        if state.running >= limits.concurrent_calls:  # taken synchronously when free: no await before
            if state.waiting >= limits.queued_calls:
                raise CallsBusy(
                    "concurrent_calls", limits.concurrent_calls,
                    f"busy for this tenant: {state.running} of its calls are in flight and {state.waiting}"
                    f" waiting, its limits (concurrent_calls = {limits.concurrent_calls},"
                    f" queued_calls = {limits.queued_calls}); other tenants are not affected, retry shortly",
                )
            await self._wait(state, limits.concurrent_calls)
        state.running += 1
        try:
            yield charge
        finally:
            state.running -= 1
            if charge.bytes:
                start = max(state.paced_until, time.monotonic())
                state.paced_until = start + charge.bytes / max(1, limits.call_bytes_per_s)
            if state.freed is not None and state.waiting:
                async with state.freed:
                    state.freed.notify(1)
            elif state.running == 0 and not state.waiting and state.paced_until <= time.monotonic():
                self._tenants.pop(caller.tenant, None)  # idle tenants cost nothing

    async def _pace(self, caller: Caller, state: _TenantCalls, ahead: float) -> None:
        """Wait until the tenant's bytes so far are paid for, counted as waiting."""
        limits = caller.limits
        if ahead > self.queue_timeout or state.waiting >= limits.queued_calls:
            raise CallsBusy(
                "call_bytes_per_s", limits.call_bytes_per_s,
                f"busy for this tenant: its calls moved more than its limit (call_bytes_per_s ="
                f" {limits.call_bytes_per_s}) allows for the next {ahead:.1f} s; other tenants are not"
                " affected, retry shortly",
            )
        state.waiting += 1
        try:
            await asyncio.sleep(ahead)
        finally:
            state.waiting -= 1

    async def _wait(self, state: _TenantCalls, slots: int) -> None:
        if state.freed is None:
            state.freed = asyncio.Condition()
        state.waiting += 1
        try:
            async with state.freed:
                await asyncio.wait_for(state.freed.wait_for(lambda: state.running < slots), self.queue_timeout)
        except TimeoutError:
            raise CallsBusy(
                "concurrent_calls", slots,
                f"busy for this tenant: its {slots} calls in flight (concurrent_calls) stayed busy for"
                f" {self.queue_timeout:g} s; other tenants are not affected, retry shortly",
            ) from None
        finally:
            state.waiting -= 1


class RequestsInFlight:
    """Each tenant's HTTP requests in flight (/rpc and /mcp, from the moment the key is
    checked, so a request whose body is still arriving counts): at most its
    `concurrent_requests`. Past it, `enter` returns None at once (no waiting: the wire
    answers 429), so one tenant's slow or large bodies cannot hold the server's
    connections and memory for the others."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    @contextlib.contextmanager
    def enter(self, caller: Caller) -> Iterator[bool]:
        """Yields whether the request may go on; counted until the block ends."""
        cap = caller.limits.concurrent_requests
        if cap >= UNBOUNDED:
            yield True
            return
        count = self._counts.get(caller.tenant, 0)
        if count >= cap:
            yield False
            return
        self._counts[caller.tenant] = count + 1
        try:
            yield True
        finally:
            left = self._counts[caller.tenant] - 1
            if left:
                self._counts[caller.tenant] = left
            else:
                del self._counts[caller.tenant]


def too_many_requests_message(caller: Caller) -> str:
    cap = caller.limits.concurrent_requests
    return (f"busy for this tenant: it has {cap} requests in flight, its limit (concurrent_requests);"
            " other tenants are not affected, retry shortly")
