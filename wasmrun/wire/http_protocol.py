"""The HTTP/1.1 protocol `wasmrun serve` runs under uvicorn: uvicorn's httptools protocol,
sending a sized response's head and body in one write, closing a connection after an
answer by a lingering close, and bounding what a connection may hold before it presents a
key (the bounds: wire/connections.py).

One write: uvicorn writes the status line and headers when the app sends
`http.response.start` and the body when it sends `http.response.body`: two `send()`s and
two TCP segments for every JSON-RPC answer, and on loopback each `send()` runs the
receiver's network stack too (tens of microseconds; the client may wake twice). Here a
response whose length is known (Content-Length, a body to come) keeps its head until the
body's first write and sends both at once. A streamed response (chunked: server-sent
events), an empty one, the answer to a HEAD, 100-continue and anything written outside a
response go out at once, as before; a head still held when the connection is closed (the
app failed before its body) is written first.

Lingering close: an answer that closes the connection (`Connection: close`: 408 for a
head or body too slow, 413 for a body too large, 431 for a head too large, 400 for a
malformed request, a 500, a client that asked, any answer begun before the request's body
had all arrived) often leaves the client still sending its request. Closing the socket
then makes the kernel answer the client's next bytes (or bytes already received and
unread) with a reset, and a reset can discard the answer before the client reads it, or
fail the client's write so that it never reads it: the client sees "connection reset"
instead of the error that says what went wrong. So after such an answer the server shuts
down its write side (the client reads the answer, then end of stream), reads and discards
what the client still sends, and closes when the client closes its side, or after
`linger_seconds` or `linger_bytes` (whichever comes first), so that a client cannot hold
the connection or keep the server reading. The byte bound is at least what the request's
Content-Length still promised (up to `linger_declared_bytes`): a client that sends its whole
body before it reads, as HTTP clients do (the E2B SDK uploading a file over the quota, say),
finishes and reads the answer instead of meeting a reset a few MiB in. An idle keep-alive connection (timed out, or
at shutdown) is closed at once: nothing was answered that a reset could overtake. A
transport that cannot half-close (TLS) is closed at once, as uvicorn does.

An early answer closes: an answer begun while the request's body has not all arrived
(any route or door: a 401 or 403 before the body is read, the E2B front's 502 for an
unknown sandbox, a 413) says `Connection: close` and is followed by the lingering close, so
a client cannot keep a connection by trickling a body nobody reads.

Deadlines, here whatever the app does: a request's head must arrive within
`header_timeout` of the connection (or of its first byte, for the next request on a
keep-alive connection), else 408 (a connection that sent nothing is closed without one);
its body within `body_timeout` of its head, else 408 (the app, reading or not, is told the
client disconnected and what it answers is dropped). A head is at most `head_bytes`
(431 past it: httptools would take any size). A pipelined request's body deadline starts
when its turn comes (reading is paused until then). Each connection holds a seat among the
server's unkeyed connections from its accept, given up while a request of it is counted
for a tenant (wire/connections.py).
"""

from __future__ import annotations

import asyncio
import weakref
from asyncio import TimerHandle
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from wasmrun.wire.connections import (
    ConnectionBounds,
    Seat,
    UnkeyedConnections,
    current_seat,
    head_too_large,
    open_file_share,
)

# 2 s: long enough for an answer to cross any network before the close (Apache lingers
# 2 s per read, Go waits 0.5 s); short enough that a connection is not held for long.
LINGER_SECONDS = 2.0
# 4 MiB: what a client's kernel may already hold written when the answer reaches it
# (Linux's largest default TCP send buffer), so those bytes drain without a reset.
LINGER_BYTES = 4 * 1024 * 1024
# 256 MiB: the most of a declared body that is still read to let its client finish (a
# file upload refused for the quota before it is read); the time bound still applies.
LINGER_DECLARED_BYTES = 256 * 1024 * 1024
# 64 KiB: a request line and headers together (nginx takes 32 KiB, Node 16 KiB).
HEAD_BYTES = 64 * 1024


class _OneWriteResponses:
    """The cycle's transport, holding a sized response's head until its body comes."""

    def __init__(self, cycle: RequestResponseCycle, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self._transport = transport
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        cycle = self._cycle
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.writelines((head, data))  # one writev, no copy of the body
        elif (
            cycle.response_started and not cycle.response_complete and cycle.chunked_encoding is False
            and cycle.expected_content_length > 0 and cycle.scope["method"] != "HEAD"  # HEAD: no body write comes
        ):
            self._head = bytes(data)  # the head just built by send(): the body follows
        else:
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def _flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, ...: the transport's
        return getattr(self._transport, name)


class _LingeringTransport:
    """The connection's transport as uvicorn's protocol and cycles see it: `close()`, which
    they call after an answer that closes the connection, is a lingering close."""

    def __init__(self, transport: asyncio.Transport, protocol: HttpProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        self._protocol.close_lingering()

    def __getattr__(self, name: str) -> Any:  # write, is_closing, pause_reading, ...: the transport's
        return getattr(self._transport, name)


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over `head_bytes` (the parser
    raises its own error, which uvicorn answers with `send_400_response`)."""


_POOLS: weakref.WeakKeyDictionary[ServerState, UnkeyedConnections] = weakref.WeakKeyDictionary()


def bounds_of(config: Config) -> ConnectionBounds:
    """The bounds the served app carries (wire/app.py's `connection_bounds`), else the defaults."""
    bounds = getattr(config.app, "connection_bounds", None)
    return bounds if isinstance(bounds, ConnectionBounds) else ConnectionBounds()


def unkeyed_connections(state: ServerState, bounds: ConnectionBounds) -> UnkeyedConnections:
    """The server's unkeyed connections (one pool per uvicorn server)."""
    pool = _POOLS.get(state)
    if pool is None:
        pool = _POOLS[state] = UnkeyedConnections(open_file_share(bounds.unkeyed_connections))
    return pool


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int:
    """The request's Content-Length (uvicorn lowers header names), 0 when absent or not a number."""
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() and len(value) < 20 else 0
    return 0


def _closes_when_early(cycle: RequestResponseCycle) -> None:
    """The cycle's `send`, except that an answer begun before the request's body has all
    arrived closes the connection: uvicorn then says `Connection: close` and closes
    (lingering) after it, instead of reading on through a body that nobody reads."""
    send = cycle.send

    async def send_closing_early(message: Any) -> None:
        if message["type"] == "http.response.start" and cycle.more_body:
            cycle.keep_alive = False
        await send(message)

    cycle.send = send_closing_early  # type: ignore[method-assign]


class HttpProtocol(HttpToolsProtocol):
    """Pass as uvicorn's `http=`: the httptools protocol with one write per sized response,
    a lingering close after an answer that closes the connection, and the head and body
    deadlines and the unkeyed connections' cap of the served app's `connection_bounds`."""

    linger_seconds = LINGER_SECONDS
    linger_bytes = LINGER_BYTES
    linger_declared_bytes = LINGER_DECLARED_BYTES
    head_bytes = HEAD_BYTES

    def __init__(self, config: Config, server_state: ServerState, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, server_state, *args, **kwargs)
        self.bounds = bounds_of(config)
        self._pool = unkeyed_connections(server_state, self.bounds)
        self._seat: Seat | None = None
        self._socket_transport: asyncio.Transport | None = None
        self._linger_end: TimerHandle | None = None  # set while lingering
        self._discarded = 0
        self._linger_bound = self.linger_bytes  # set when the linger begins
        self._body_promised = 0  # what the running request's Content-Length says is still to come
        self._head_end: TimerHandle | None = None  # set while a head is awaited
        self._body_end: TimerHandle | None = None  # set while the running request's body is awaited
        self._head_begun = False  # a byte of the awaited head has come
        self._head_size = 0  # its URL and headers so far, as the parser reports them
        self._head_read = 0  # the bytes read while it is incomplete (but the read it began in)
        self._head_fresh = False  # it began in the read being parsed
        self._refusing = False  # the next request was refused behind an answer in flight: read no more
        self._answered = False  # the protocol answered for the app (a 408): the app's errors are moot
        self._app = self.app
        self.app = self._app_on_this_connection

    async def _app_on_this_connection(self, scope: Any, receive: Any, send: Any) -> None:
        current_seat.set(self._seat)  # this request's task: KeyedRequests finds the connection
        try:
            await self._app(scope, receive, send)
        except Exception:
            if not self._answered:
                raise  # else: the app failed on the disconnect it was told of; the 408 was the answer

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._socket_transport = transport
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._seat = self._pool.seat(self._evict)
        self._head_end = self.loop.call_later(self.bounds.header_timeout, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._linger_end, self._head_end, self._body_end):
            if timer is not None:
                timer.cancel()
        if self._seat is not None:
            self._seat.close()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._linger_end is None and not self._refusing:
            self._head_fresh = False
            super().data_received(data)
            self._count_head_read(len(data))
            return
        self._discarded += len(data)
        if self._discarded > self._linger_bound and self._socket_transport is not None:
            self._socket_transport.abort()

    # -- the head -------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun, self._head_size, self._head_read, self._head_fresh = True, 0, 0, True
        if self._head_end is None:  # the next request on a keep-alive connection: from its first byte
            self._head_end = self.loop.call_later(self.bounds.header_timeout, self._head_too_slow)

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.head_bytes:
            raise _HeadTooLarge

    def _count_head_read(self, size: int) -> None:
        """httptools holds a header until the next one begins: a head whose last header never
        ends is counted by the reads it takes (all but the read it began in, which may hold
        the end of the request before it: at most one read over `head_bytes`)."""
        if not self._head_begun or self._linger_end is not None or self._refusing:
            return
        if not self._head_fresh:
            self._head_read += size
        if self._head_read > self.head_bytes:
            self._refuse_head(431, head_too_large(self.head_bytes))

    def send_400_response(self, msg: str) -> None:
        if self._head_size > self.head_bytes:  # the parser stopped at _HeadTooLarge
            self._refuse_head(431, head_too_large(self.head_bytes))
            return
        super().send_400_response(msg)

    def _head_too_slow(self) -> None:
        self._head_end = None
        if self._linger_end is not None or self._refusing:
            return
        if self._head_begun:
            self._refuse_head(408, self.bounds.head_too_slow)
        elif self.cycle is None or self.cycle.response_complete:
            self._close_idle()  # connected and sent nothing

    def _refuse_head(self, status: int, body: bytes) -> None:
        """Answer `status` to a head and close; behind an answer still in flight (a pipelined
        request), read no more and close after that answer instead."""
        if self._head_end is not None:
            self._head_end.cancel()
            self._head_end = None
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._refusing = True
            self.flow.pause_reading()
            cycle.keep_alive = False
            return
        self._answer_and_close(status, body)

    def on_headers_complete(self) -> None:
        if self._head_end is not None:
            self._head_end.cancel()
            self._head_end = None
        self._head_begun = False
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle is before:  # an upgrade
            return
        cycle.transport = _OneWriteResponses(cycle, self.transport)  # type: ignore[assignment]
        self._body_promised = _declared_length(self.headers)
        _closes_when_early(cycle)
        if before is None or before.response_complete:  # it runs now (else it waits its turn: reading paused)
            self._start_body_deadline()

    # -- the body -------------------------------------------------------------

    def _start_body_deadline(self) -> None:
        if self._body_end is None:
            self._body_end = self.loop.call_later(self.bounds.body_timeout, self._body_too_slow)

    def on_body(self, body: bytes) -> None:
        self._body_promised -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._body_promised = 0
        if self._body_end is not None:
            self._body_end.cancel()
            self._body_end = None
        super().on_message_complete()

    def _body_too_slow(self) -> None:
        """408, whether the app is reading the body or not, unless it has begun an answer
        (which closes the connection after it: `_closes_when_early`)."""
        self._body_end = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.response_started or self._linger_end is not None:
            return
        self._answered = True
        cycle.disconnected = True  # the app's receive() says http.disconnect, its send() writes nothing
        cycle.message_event.set()
        self._answer_and_close(408, self.bounds.body_too_slow)

    def _answer_and_close(self, status: int, body: bytes) -> None:
        head = [STATUS_LINE[status]]
        head += [b"%s: %s\r\n" % (name, value) for name, value in self.server_state.default_headers]
        if body:
            head.append(b"content-type: application/json\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.close_lingering()

    def on_response_complete(self) -> None:
        if self._linger_end is not None:
            self.server_state.total_requests += 1  # counted as uvicorn does; no next request on this connection
            return
        super().on_response_complete()
        cycle = self.cycle
        if not self.pipeline and cycle is not None and not cycle.response_complete and cycle.more_body:
            self._start_body_deadline()  # the pipelined request just started: its body may come now

    # -- closing --------------------------------------------------------------

    def close_lingering(self) -> None:
        """Half-close, then discard what comes until the client's end of stream or a bound."""
        transport = self._socket_transport
        if transport is None or self._linger_end is not None:
            return  # already lingering: its own bounds end it
        if transport.is_closing() or not transport.can_write_eof():
            transport.close()
            return
        self._linger_bound = max(self.linger_bytes, min(self._body_promised, self.linger_declared_bytes))
        # abort(), not close(): a client that does not read could hold close() on the unsent rest.
        self._linger_end = self.loop.call_later(self.linger_seconds, transport.abort)
        transport.write_eof()  # after what is still buffered: the answer, then end of stream
        self.flow.resume_reading()  # paused for a pipelined request or a large body: read to discard

    def _evict(self) -> None:
        """Closed at once, for a newer unkeyed connection (wire/connections.py)."""
        if self._socket_transport is not None:
            self._socket_transport.abort()

    def timeout_keep_alive_handler(self) -> None:
        self._close_idle()

    def shutdown(self) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._close_idle()
        else:
            self.cycle.keep_alive = False  # closed (lingering) after the answer in progress

    def _close_idle(self) -> None:
        """Close at once: no answer is in flight that a reset could overtake."""
        if self._socket_transport is not None and not self._socket_transport.is_closing():
            self._socket_transport.close()
