"""An ASGI endpoint built on its first request.

The MCP SDK (and pydantic under it) is about 34 MB of the server's memory and
a good part of its import time; a server whose clients speak only JSON-RPC
should not pay for it. `LazyEndpoint` builds the real app, and enters the
lifespan it needs (the MCP session manager's task group), when the first
request for it arrives, and leaves that lifespan when the server shuts down.
Put it behind authentication: a request without a valid key must not make the
server import anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from starlette.types import ASGIApp, Receive, Scope, Send

Build = Callable[[], tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]]


class LazyEndpoint:
    """An ASGI app (a class, so that Starlette's Route hands it the raw ASGI call)."""

    def __init__(self, build: Build) -> None:
        self._build = build
        self._app: ASGIApp | None = None
        self._starting: asyncio.Task[ASGIApp] | None = None
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self._closed = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            if self._starting is None or (self._starting.done() and self._starting.exception() is not None):
                self._starting = asyncio.ensure_future(self._start())
            # Shielded: a first request that goes away must not leave a half-started app.
            app = await asyncio.shield(self._starting)
        await app(scope, receive, send)

    async def _start(self) -> ASGIApp:
        app, lifespan = self._build()
        started = asyncio.Event()

        async def hold() -> None:
            # The lifespan is entered and left in this one task, as task groups require.
            async with lifespan():
                started.set()
                await self._stop.wait()

        running = asyncio.create_task(hold())
        waiting = asyncio.create_task(started.wait())
        await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiting.cancel()
            running.result()  # raises what entering the lifespan raised
            raise RuntimeError("the endpoint's lifespan ended before it started")
        self._running, self._app = running, app
        return app

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self._closed = True
            if self._starting is not None and not self._starting.done():
                with contextlib.suppress(Exception):
                    await self._starting
            self._stop.set()
            if self._running is not None:
                await self._running
