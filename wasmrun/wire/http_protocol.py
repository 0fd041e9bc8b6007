"""The HTTP/1.1 protocol `wasmrun serve` runs under uvicorn: uvicorn's httptools protocol,
sending a sized response's head and body in one write, and closing a connection after
an answer by a lingering close.

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
body too slow, 413 for one too large, 400 for a malformed request, a 500, a client that
asked) often leaves the client still sending its request. Closing the socket then makes
the kernel answer the client's next bytes (or bytes already received and unread) with a
reset, and a reset can discard the answer before the client reads it, or fail the
client's write so that it never reads it: the client sees "connection reset" instead of
the error that says what went wrong. So after such an answer the server shuts down its
write side (the client reads the answer, then end of stream), reads and discards what
the client still sends, and closes when the client closes its side, or after
`linger_seconds` or `linger_bytes` (whichever comes first), so that a client cannot hold
the connection or keep the server reading. An idle keep-alive connection (timed out, or
at shutdown) is closed at once: nothing was answered that a reset could overtake. A
transport that cannot half-close (TLS) is closed at once, as uvicorn does.
"""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

# 2 s: long enough for an answer to cross any network before the close (Apache lingers
# 2 s per read, Go waits 0.5 s); short enough that a connection is not held for long.
LINGER_SECONDS = 2.0
# 4 MiB: what a client's kernel may already hold written when the answer reaches it
# (Linux's largest default TCP send buffer), so those bytes drain without a reset.
LINGER_BYTES = 4 * 1024 * 1024


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


class HttpProtocol(HttpToolsProtocol):
    """Pass as uvicorn's `http=`: the httptools protocol with one write per sized response
    and a lingering close after an answer that closes the connection."""

    linger_seconds = LINGER_SECONDS
    linger_bytes = LINGER_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._socket_transport: asyncio.Transport | None = None
        self._linger_end: TimerHandle | None = None  # set while lingering
        self._discarded = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._socket_transport = transport
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not None and self.cycle is not before:  # a request (not an upgrade)
            self.cycle.transport = _OneWriteResponses(self.cycle, self.transport)  # type: ignore[assignment]

    def close_lingering(self) -> None:
        """Half-close, then discard what comes until the client's end of stream or a bound."""
        transport = self._socket_transport
        if transport is None or self._linger_end is not None:
            return  # already lingering: its own bounds end it
        if transport.is_closing() or not transport.can_write_eof():
            transport.close()
            return
        # abort(), not close(): a client that does not read could hold close() on the unsent rest.
        self._linger_end = self.loop.call_later(self.linger_seconds, transport.abort)
        transport.write_eof()  # after what is still buffered: the answer, then end of stream
        self.flow.resume_reading()  # paused for a pipelined request or a large body: read to discard

    def data_received(self, data: bytes) -> None:
        if self._linger_end is None:
            super().data_received(data)
            return
        self._discarded += len(data)
        if self._discarded > self.linger_bytes and self._socket_transport is not None:
            self._socket_transport.abort()

    def on_response_complete(self) -> None:
        if self._linger_end is None:
            super().on_response_complete()
            return
        self.server_state.total_requests += 1  # counted as uvicorn does; no next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger_end is not None:
            self._linger_end.cancel()
        super().connection_lost(exc)

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
