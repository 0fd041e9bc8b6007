"""`POST /rpc` as a plain ASGI app, and the front that takes it the short way.

A hello's whole answer is a millisecond, and Starlette's machinery around one
call (its error and exception middleware, the router's walk over the routes,
a Request, a Response object, the header lists they build) was a tenth of what
the HTTP layer added (scripts/http_hops.py). So `/rpc` is answered here straight
from the ASGI messages, with every guard the route had, in the same order:
Host/Origin (GuardMiddleware) around it (the head and body deadlines are the HTTP
protocol's, on every route: wire/http_protocol.py), then Content-Type (415), the API key (401), the tenant's requests in flight
(429), the body limit (413, declared or counted; the connection closed), and the streamed answer (SSE)
when asked for. `RpcFront` sends `POST /rpc` to it directly and everything else
(other routes, other methods, lifespan) to Starlette, which serves the same
endpoint as its `/rpc` route (so the answer is the same either way).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from wasmrun.protocol.errors import (
    InternalError,
    InvalidRequest,
    QuotaExceeded,
    RequestTooLarge,
    RPCError,
    Unauthorized,
)
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight, too_many_requests_message
from wasmrun.wire import jsonrpc
from wasmrun.wire.connections import ConnectionBounds
from wasmrun.wire.events import EventStreamResponse, accepts_events, asks_to_stream

logger = logging.getLogger("wasmrun.http")
JSON_TYPE = b"application/json"
Headers = list[tuple[bytes, bytes]]


class _Disconnected(Exception):
    """The client left (or the body deadline passed: wire/http_protocol.py) before its body arrived."""


async def send_answer(send: Send, status: int, body: bytes = b"", headers: Headers | None = None) -> None:
    """One whole response; a body is JSON (as Starlette's Response(media_type=JSON) sends it)."""
    head: Headers = [] if status == 204 else [(b"content-length", b"%d" % len(body))]
    if body:
        head.append((b"content-type", JSON_TYPE))
    if headers:
        head += headers
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def retry_after(seconds: int | None) -> Headers:
    """The `Retry-After` header for an answer whose errors ask the client to wait (none when None)."""
    return [] if seconds is None else [(b"retry-after", b"%d" % seconds)]


def rpc_error(error: RPCError, status: int, headers: Headers | None = None) -> tuple[int, bytes, Headers | None]:
    head = [*(headers or ()), *retry_after(error.retry_after_s)]
    return status, jsonrpc.error_body(error), head or None


def header_values(scope: Scope) -> dict[bytes, bytes]:
    """The headers the endpoint reads (names arrive lower-case from the ASGI server);
    for a repeated header the first, as Starlette's `headers.get` gives."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in _READ and name not in found:
            found[name] = value
    return found


_READ = frozenset({b"content-type", b"content-length", b"authorization", b"accept"})


class RpcEndpoint:
    """The `/rpc` route's ASGI app: `dispatch(method, params[, caller=])` answers calls."""

    def __init__(
        self,
        dispatch: Callable[..., Awaitable[Any]],
        *,
        max_body_bytes: int,
        authenticate: Callable[[str | None], Caller | None] | None,
        in_flight: RequestsInFlight,
    ) -> None:
        self.dispatch = dispatch
        self.max_body_bytes = max_body_bytes
        self.authenticate = authenticate
        self.in_flight = in_flight
        self.too_large = rpc_error(
            RequestTooLarge(
                f"request body is larger than this server's limit of {max_body_bytes} bytes"
                " (WASMRUN_MAX_BODY_BYTES)",
                {"max_body_bytes": max_body_bytes},
            ),
            # The rest of the body is not worth reading to reach a next request: the
            # connection is closed (a lingering close, wire/http_protocol.py).
            413, [(b"connection", b"close")],
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_values(scope)
        if headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower() != JSON_TYPE:
            await send_answer(send, *rpc_error(
                InvalidRequest("invalid request: /rpc takes `Content-Type: application/json`"), 415
            ))
            return
        if self.authenticate is None:
            await self._answer(scope, receive, send, headers, self.dispatch, None)
            return
        authorization = headers.get(b"authorization")
        caller = self.authenticate(authorization.decode("latin-1") if authorization is not None else None)
        if caller is None:  # the same answer for a missing key, an unknown one and a revoked one
            await send_answer(send, *rpc_error(
                Unauthorized("unauthorized: send a valid API key as `Authorization: Bearer <key>`"),
                401, [(b"www-authenticate", b'Bearer realm="wasmrun"')],
            ))
            return
        with contextlib.ExitStack() as held:
            if not held.enter_context(self.in_flight.enter(caller)):
                limit = caller.limits.concurrent_requests
                error = QuotaExceeded(too_many_requests_message(caller), "concurrent_requests", limit, retry_after_s=1)
                await send_answer(send, *rpc_error(error, 429))
                return
            await self._answer(scope, receive, send, headers, functools.partial(self.dispatch, caller=caller), held)

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes],
        call: Callable[..., Awaitable[Any]], held: contextlib.ExitStack | None,
    ) -> None:
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await send_answer(send, *self.too_large)
            return
        try:
            body = await self._body(receive)
        except _Disconnected:  # also what the protocol tells an app whose body is too slow (it answers 408)
            await send_answer(send, 400)
            return
        if body is None:
            await send_answer(send, *self.too_large)
            return
        if accepts_events(headers.get(b"accept", b"").decode("latin-1")) and asks_to_stream(body):
            # Counted in flight until the call ends, however early the client leaves.
            stream = EventStreamResponse(body, functools.partial(_streamed, call=call), held.pop_all() if held else None)
            await stream(scope, receive, send)
            return
        answer = await _handle(body, call)
        extra = retry_after(answer.retry_after_s) or None
        if answer.body is None:
            await send_answer(send, 204, b"", extra)
        else:
            await send_answer(send, 200, answer.body, extra)

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole body, or None when it is over the limit (one chunk, the usual case: no copy)."""
        message = await receive()
        if message["type"] != "http.request":
            raise _Disconnected
        first: bytes = message.get("body", b"")
        if len(first) > self.max_body_bytes:
            return None
        if not message.get("more_body", False):
            return first
        body = bytearray(first)
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":
                raise _Disconnected
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                return None
        return bytes(body)


async def _handle(body: bytes, call: Callable[..., Awaitable[Any]]) -> jsonrpc.Answer:
    try:
        return await jsonrpc.handle(body, call)
    except Exception:  # handle() answers errors itself; this is the last guard against a 500
        logger.exception("unexpected failure answering a request")
        return jsonrpc.Answer(jsonrpc.error_body(InternalError("internal error")))


async def _streamed(body: bytes, call: Callable[..., Awaitable[Any]]) -> bytes | None:
    """The answer's body alone: a stream's headers are sent before any call ends."""
    return (await _handle(body, call)).body


class RpcFront(Starlette):
    """Starlette, except that `POST /rpc` goes straight to `rpc` (the endpoint wrapped in
    the same guard as Starlette's middleware); `rpc = None` turns the short way off
    (scripts/http_hops.py compares the two). `connection_bounds`: what the HTTP protocol
    serving it bounds each connection by (wire/http_protocol.py; None: its defaults)."""

    rpc: ASGIApp | None = None
    connection_bounds: ConnectionBounds | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.rpc is not None and scope["type"] == "http" and scope["path"] == "/rpc"
            and scope["method"] == "POST" and not scope.get("root_path")
        ):
            scope["app"] = self
            await self.rpc(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
