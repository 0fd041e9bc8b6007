"""The HTTP side: `POST /rpc` (JSON-RPC 2.0), `GET /healthz`, a request body limit.

Every answer to something a client sent is 2xx or 4xx: 200 with a JSON-RPC
response, 204 when only notifications came, 413 (with a JSON-RPC error body)
for a body over the limit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from wasmrun.protocol.errors import InternalError, RequestTooLarge
from wasmrun.wire import jsonrpc

logger = logging.getLogger("wasmrun.http")
JSON = "application/json"


def create_app(
    dispatch: jsonrpc.Dispatch,
    *,
    max_body_bytes: int,
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

    async def rpc(request: Request) -> Response:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            return too_large()
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_body_bytes:
                    return too_large()
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            answer = await jsonrpc.handle(bytes(body), dispatch)
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

    return Starlette(
        routes=[
            Route("/rpc", rpc, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            *routes,
        ],
        lifespan=lifespan,
    )
