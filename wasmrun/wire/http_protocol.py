"""uvicorn's httptools protocol, sending a sized response's head and body in one write.

uvicorn writes the status line and headers when the app sends `http.response.start`
and the body when it sends `http.response.body`: two `send()`s and two TCP segments
for every JSON-RPC answer, and on loopback each `send()` runs the receiver's network
stack too (tens of microseconds; the client may wake twice). Here a response whose
length is known (Content-Length, a body to come) keeps its head until the body's first
write and sends both at once. A streamed response (chunked: server-sent events), an
empty one, the answer to a HEAD, 100-continue and anything written outside a response go out at once, as
before; a head still held when the connection is closed (the app failed before its
body) is written first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


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


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """Pass as uvicorn's `http=`: the httptools protocol with one write per sized response."""

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not None and self.cycle is not before:  # a request (not an upgrade)
            self.cycle.transport = _OneWriteResponses(self.cycle, self.transport)  # type: ignore[assignment]
