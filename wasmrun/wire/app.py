"""The HTTP side: `POST /rpc` (JSON-RPC 2.0), `GET /healthz`, a request body limit.

Every answer to something a client sent is 2xx or 4xx: 200 with a JSON-RPC
response, 204 when only notifications came, 413 (with a JSON-RPC error body)
for a body over the limit, 408 (likewise, and the connection is closed) for a
body that did not arrive within `body_timeout` seconds (wire/deadline.py, on
every route, /mcp included).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from wasmrun.protocol.errors import InternalError, RequestTimeout, RequestTooLarge
from wasmrun.wire import jsonrpc
from wasmrun.wire.deadline import BodyDeadline

logger = logging.getLogger("wasmrun.http")
JSON = "application/json"


def create_app(
    dispatch: jsonrpc.Dispatch,
    *,
    max_body_bytes: int,
    body_timeout: float = 30.0,
    on_shutdown: Callable[[], None] | None = None,
    routes: Sequence[BaseRoute] = (),
    lifespans: Sequence[Callable[[], contextlib.AbstractAsyncContextManager[Any]]] = (),
) -> Starlette:
    """`routes` are served by the same app as /rpc (so its middleware applies to them);
    each of `lifespans` is entered at startup and left at shutdown."""

    def too_large() -> Response:
        error = RequestTooLarge(
            f"request body is larger than this server's limit of {max_body_bytes} bytes"
            " (WASMRUN_MAX_BODY_BYTES)",
            {"max_body_bytes": max_body_bytes},
        )
        return Response(jsonrpc.error_body(error), status_code=413, media_type=JSON)

    async def receive_body(request: Request) -> bytes | None:
        """The whole body, or None when it is over the limit."""
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body_bytes:
                return None
        return bytes(body)

    async def rpc(request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > max_body_bytes:
            return too_large()
        try:
            body = await receive_body(request)
        except ClientDisconnect:  # also what BodyDeadline tells a route whose body is too slow
            return Response(status_code=400)
        if body is None:
            return too_large()
        try:
            answer = await jsonrpc.handle(body, dispatch)
        except Exception:  # handle() answers errors itself; this is the last guard against a 500
            logger.exception("unexpected failure answering a request")
            answer = jsonrpc.error_body(InternalError("internal error"))
        if answer is None:
            return Response(status_code=204)
        return Response(answer, media_type=JSON)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

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

    too_slow = RequestTimeout(
        f"the request body did not arrive within {body_timeout:g} seconds (WASMRUN_BODY_TIMEOUT)",
        {"body_timeout_s": body_timeout},
    )
    return Starlette(
        middleware=[
            Middleware(BodyDeadline, timeout=body_timeout, answer=jsonrpc.error_body(too_slow), media_type=JSON)
        ],
        routes=[
            Route("/rpc", rpc, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            *routes,
        ],
        lifespan=lifespan,
    )
