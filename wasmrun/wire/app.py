"""The HTTP side: `POST /rpc` (JSON-RPC 2.0), `GET /healthz` (sandbox workers free/total;
503 when none can serve), `GET /metrics` (the operator's: see `metrics_refusal`), a request body limit,
who is calling (API keys) and which requests are answered at all (guard.py).

Every answer to something a client sent is 2xx or 4xx: 200 with a JSON-RPC
response, 204 when only notifications came, and a JSON-RPC error body with
401 (no valid API key), 403 (Host or Origin refused), 413 (body over the
limit), 415 (not `Content-Type: application/json`) or 408 (the head did not arrive
within `header_timeout` seconds, or the body within `body_timeout` of it; the
connection is closed; on every route, /mcp included, by the HTTP protocol that
serves the app's `connection_bounds`: wire/http_protocol.py, wire/connections.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from wasmrun.protocol.errors import (
    Forbidden,
    QuotaExceeded,
    RPCError,
    Unauthorized,
)
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight, too_many_requests_message
from wasmrun.wire import jsonrpc
from wasmrun.wire.connections import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    UNKEYED_CONNECTIONS,
    ConnectionBounds,
    KeyedRequests,
)
from wasmrun.wire.guard import RequestGuard, is_loopback
from wasmrun.wire.playground import playground_routes
from wasmrun.wire.rpc_asgi import RpcEndpoint, RpcFront

logger = logging.getLogger("wasmrun.http")
JSON = "application/json"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# The wire layer's view of authentication: the `Authorization` header (or None)
# to the caller it identifies, or None when it identifies nobody.
Authenticate = Callable[[str | None], Caller | None]


def error_response(error: RPCError, status: int, headers: dict[str, str] | None = None) -> Response:
    """The error as a JSON-RPC body, with a `Retry-After` header when it says when to try again."""
    if error.retry_after_s is not None:
        headers = {**(headers or {}), "Retry-After": str(error.retry_after_s)}
    return Response(jsonrpc.error_body(error), status_code=status, media_type=JSON, headers=headers)


def unauthorized() -> Response:
    # The same answer for a missing key, an unknown one and a revoked one.
    return error_response(
        Unauthorized("unauthorized: send a valid API key as `Authorization: Bearer <key>`"),
        401, {"WWW-Authenticate": 'Bearer realm="wasmrun"'},
    )


def too_many_requests(caller: Caller) -> Response:
    limit = caller.limits.concurrent_requests
    error = QuotaExceeded(too_many_requests_message(caller), "concurrent_requests", limit, retry_after_s=1)
    return error_response(error, 429)


class Authenticated:
    """An ASGI app (a class, so that Starlette's Route hands it the raw ASGI call) that
    lets through to `app` only requests whose Authorization header names a caller;
    the others get `unauthorized()` (401) before `app` sees them. With `in_flight`, a
    caller over its `concurrent_requests` gets `too_many_requests` (429)."""

    def __init__(self, app: ASGIApp, authenticate: Authenticate, in_flight: RequestsInFlight | None = None) -> None:
        self.app = app
        self.authenticate = authenticate
        self.in_flight = in_flight if in_flight is not None else KeyedRequests()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), None)
        caller = self.authenticate(header.decode("latin-1") if header is not None else None)
        if caller is None:
            await unauthorized()(scope, receive, send)
            return
        with self.in_flight.enter(caller) as admitted:
            if not admitted:
                await too_many_requests(caller)(scope, receive, send)
                return
            await self.app(scope, receive, send)


class GuardMiddleware:
    """Refuses, on every route, a request whose Host or Origin the server does not answer."""

    def __init__(self, app: ASGIApp, guard: RequestGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            why = self.guard.refusal(headers.get("host"), headers.get("origin"))
            if why is not None:
                await error_response(Forbidden(f"forbidden: {why}"), 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Health(Protocol):
    """What /healthz reports: the sandbox executor's health, seen structurally
    (this layer knows nothing of sandboxes)."""

    @property
    def total(self) -> int: ...
    @property
    def free(self) -> int: ...
    @property
    def unavailable(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def serving(self) -> bool: ...


def create_app(
    dispatch: Callable[..., Awaitable[Any]],
    *,
    max_body_bytes: int,
    body_timeout: float = BODY_TIMEOUT_S,
    header_timeout: float = HEADER_TIMEOUT_S,
    unkeyed_connections: int = UNKEYED_CONNECTIONS,
    on_shutdown: Callable[[], None] | None = None,
    health: Callable[[], Health] | None = None,
    image_status: Callable[[], dict[str, Any]] | None = None,
    routes: Sequence[BaseRoute] = (),
    lifespans: Sequence[Callable[[], contextlib.AbstractAsyncContextManager[Any]]] = (),
    guard: RequestGuard | None = None,
    authenticate: Authenticate | None = None,
    metrics: Callable[[], bytes] | None = None,
    metrics_refusal: Callable[[str | None, str | None], str | None] | None = None,
    in_flight: RequestsInFlight | None = None,
    health_detail: Callable[[str | None], bool] | None = None,
) -> Starlette:
    """`dispatch(method, params)` answers calls; with `authenticate`, every call first
    needs a caller, and dispatch gets it as `caller=`. `routes` are served by the same
    app as /rpc (so its middleware applies to them); each of `lifespans` is entered at
    startup and left at shutdown. `metrics_refusal(authorization, client_host)` says why
    a /metrics request is refused (None: served); without it, loopback clients only.
    `health_detail(authorization)` says whether /healthz shows its counts (None: always).
    The timeouts and `unkeyed_connections` are the app's `connection_bounds`, which
    wire/http_protocol.py keeps on every connection, whatever route it asks for."""

    rpc = RpcEndpoint(
        dispatch, max_body_bytes=max_body_bytes, authenticate=authenticate,
        in_flight=in_flight if in_flight is not None else KeyedRequests(),
    )
    middleware = [Middleware(GuardMiddleware, guard=guard)] if guard is not None else []
    app = RpcFront(
        routes=[
            Route("/rpc", rpc, methods=["POST"]),
            Route("/healthz", _healthz(health, health_detail, image_status), methods=["GET"]),
            Route("/metrics", _prometheus(metrics, metrics_refusal), methods=["GET"]),
            *playground_routes(),
            *routes,
        ],
        middleware=middleware,
        lifespan=_lifespan(lifespans, on_shutdown),
    )
    # POST /rpc the short way: the same endpoint inside the same guard, without Starlette's stack.
    app.rpc = GuardMiddleware(rpc, guard) if guard is not None else rpc
    app.connection_bounds = ConnectionBounds(header_timeout, body_timeout, unkeyed_connections)
    return app


def image_fields(image_status: Callable[[], dict[str, Any]] | None) -> dict[str, Any]:
    """/healthz's word on the guest image: the one served and, while the data image is
    made in the background, how far that is (served.py). Anyone may see it: the tool
    texts say as much."""
    return {"image": image_status()} if image_status is not None else {}


def _healthz(
    health: Callable[[], Health] | None,
    detail: Callable[[str | None], bool] | None = None,
    image_status: Callable[[], dict[str, Any]] | None = None,
) -> Callable[[Request], Awaitable[Response]]:
    async def healthz(request: Request) -> Response:
        """200 while a sandbox worker can serve runs (even if all are busy),
        503 when none can (all crashed and restarting, or shutting down). The
        counts (workers, queue) only where `detail` allows them: on a server with
        tenants they tell anyone who reaches the port how loaded it is."""
        if health is None:
            return JSONResponse({"status": "ok", **image_fields(image_status)})
        now = health()
        body: dict[str, Any] = {"status": "ok" if now.serving else "unavailable"}
        if detail is None or detail(request.headers.get("authorization")):
            body["workers"] = {"total": now.total, "free": now.free, "unavailable": now.unavailable}
            body["queued"] = now.queued
        body.update(image_fields(image_status))
        return JSONResponse(body, status_code=200 if now.serving else 503)

    return healthz


def _prometheus(
    metrics: Callable[[], bytes] | None, refusal: Callable[[str | None, str | None], str | None] | None
) -> Callable[[Request], Awaitable[Response]]:
    async def prometheus(request: Request) -> Response:
        # Tenant names and usage: for the operator's scraper, never for a tenant.
        client = request.client.host if request.client is not None else None
        if refusal is not None:
            why = refusal(request.headers.get("authorization"), client)
        else:
            why = None if client is not None and is_loopback(client) else "/metrics is served to this machine only"
        if metrics is None or why is not None:
            return error_response(Forbidden(f"forbidden: {why or 'no metrics here'}"), 403)
        return Response(await asyncio.to_thread(metrics), media_type=METRICS_TYPE)

    return prometheus


def _lifespan(
    lifespans: Sequence[Callable[[], contextlib.AbstractAsyncContextManager[Any]]],
    on_shutdown: Callable[[], None] | None,
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Each of `lifespans` entered at startup and left at shutdown, then `on_shutdown`."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with contextlib.AsyncExitStack() as stack:
                for enter in lifespans:
                    await stack.enter_async_context(enter())
                yield
        finally:
            if on_shutdown is not None:
                on_shutdown()

    return lifespan
