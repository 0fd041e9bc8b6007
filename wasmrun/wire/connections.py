"""What bounds a connection before it has presented a valid key: how long its request's
head and body may take, and how many such connections the server keeps at once.

A connection is *unkeyed* while no request of it is counted in flight for a tenant:
from the moment it is accepted, between requests (an idle keep-alive), while a request's
head arrives, while a request whose key was not read yet or was refused (401, 403, the
E2B front's 502) is answered, and while it lingers after an answer that closes it. It is
*keyed* while one of its requests is counted in its tenant's `concurrent_requests`
(`KeyedRequests.enter`, which every door calls once the key is valid: /rpc, /mcp, the E2B
front), and unkeyed again when that request ends.

The server keeps at most `unkeyed_connections` unkeyed connections (`UnkeyedConnections`);
one more closes the one unkeyed the longest (the oldest trickler, or an idle keep-alive),
at once. So connections that present no key cannot take the server's open files from
keyed ones: those are bounded per tenant (`concurrent_requests`), these server-wide.
Refusing the newcomer instead would let a flood of slow connections lock every new
client out; closing the oldest only hurts a client that has been this slow the longest.
The cap is never more than half the process's open-file limit (RLIMIT_NOFILE), so keyed
connections, sandboxes and files always have the other half.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from wasmrun.protocol.errors import InvalidRequest, RequestTimeout
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight
from wasmrun.wire import jsonrpc

logger = logging.getLogger("wasmrun.http")

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
UNKEYED_CONNECTIONS = 1024
EVICTION_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class ConnectionBounds:
    """A server's bounds on each connection (settings: WASMRUN_HEADER_TIMEOUT,
    WASMRUN_BODY_TIMEOUT, WASMRUN_UNKEYED_CONNECTIONS), and the 408s' JSON-RPC bodies.
    The app the protocol serves carries them (`connection_bounds`, wire/app.py)."""

    header_timeout: float = HEADER_TIMEOUT_S  # connection (or first byte of a request) to its whole head
    body_timeout: float = BODY_TIMEOUT_S  # a request's head to its whole body, whether the app reads it or not
    unkeyed_connections: int = UNKEYED_CONNECTIONS

    @property
    def head_too_slow(self) -> bytes:
        return jsonrpc.error_body(RequestTimeout(
            f"the request headers did not arrive within {self.header_timeout:g} seconds (WASMRUN_HEADER_TIMEOUT)",
            {"header_timeout_s": self.header_timeout},
        ))

    @property
    def body_too_slow(self) -> bytes:
        return jsonrpc.error_body(RequestTimeout(
            f"the request body did not arrive within {self.body_timeout:g} seconds (WASMRUN_BODY_TIMEOUT)",
            {"body_timeout_s": self.body_timeout},
        ))


def head_too_large(limit: int) -> bytes:
    """The 431's JSON-RPC body."""
    return jsonrpc.error_body(InvalidRequest(
        f"the request line and headers are over {limit} bytes", {"max_head_bytes": limit}
    ))


def open_file_share(configured: int) -> int:
    """`configured`, lowered to half the process's soft open-file limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return configured if soft == resource.RLIM_INFINITY else max(1, min(configured, soft // 2))


class Seat:
    """One connection's place among the unkeyed ones: `keyed()` while a request of it is
    counted for a tenant, `close()` when the connection ends."""

    def __init__(self, pool: UnkeyedConnections, evict: Callable[[], None]) -> None:
        self.pool = pool
        self.evict = evict  # closes the connection at once
        self.keyed_requests = 0
        self.closed = False

    @contextlib.contextmanager
    def keyed(self) -> Iterator[None]:
        if not self.keyed_requests:
            self.pool.leave(self)
        self.keyed_requests += 1
        try:
            yield
        finally:
            self.keyed_requests -= 1
            if not self.keyed_requests and not self.closed:
                self.pool.join(self)

    def close(self) -> None:
        self.closed = True
        self.pool.leave(self)


class UnkeyedConnections:
    """A server's unkeyed connections, the one unkeyed the longest first; past `cap`, it is closed."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._seats: dict[Seat, None] = {}  # insertion order: when each became unkeyed
        self.evicted = 0
        self._logged_at = -EVICTION_LOG_EVERY_S

    def __len__(self) -> int:
        return len(self._seats)

    def seat(self, evict: Callable[[], None]) -> Seat:
        """A new connection's seat, unkeyed (the newest)."""
        seat = Seat(self, evict)
        self.join(seat)
        return seat

    def join(self, seat: Seat) -> None:
        self._seats[seat] = None
        while len(self._seats) > self.cap:
            oldest = next(iter(self._seats))
            del self._seats[oldest]
            oldest.closed = True
            self.evicted += 1
            oldest.evict()
            self._log_evictions()

    def leave(self, seat: Seat) -> None:
        self._seats.pop(seat, None)

    def _log_evictions(self) -> None:
        now = time.monotonic()
        if now - self._logged_at >= EVICTION_LOG_EVERY_S:
            logger.warning(
                "%d connections at once without a keyed request, the most (WASMRUN_UNKEYED_CONNECTIONS):"
                " closing the oldest (%d closed so far)", self.cap, self.evicted,
            )
            self._logged_at = now


# The seat of the connection whose request this task answers (set by wire/http_protocol.py).
current_seat: contextvars.ContextVar[Seat | None] = contextvars.ContextVar("wasmrun_seat", default=None)


class KeyedRequests(RequestsInFlight):
    """Each tenant's requests in flight, as `RequestsInFlight` counts them; a request it
    admits also makes its connection keyed (out of the unkeyed connections' cap) until it ends."""

    @contextlib.contextmanager
    def enter(self, caller: Caller) -> Iterator[bool]:
        with super().enter(caller) as admitted:
            seat = current_seat.get()
            if not admitted or seat is None:
                yield admitted
                return
            with seat.keyed():
                yield True
