"""An ASGI endpoint built on its first request.

The MCP SDK (and pydantic under it) is about 34 MB of the server's memory and
a good part of its import time; a server whose clients speak only JSON-RPC
should not pay for it. `LazyEndpoint` builds the real app, and enters the
lifespan it needs (the MCP session manager's task group), when the first
request for it arrives, and leaves that lifespan when the server shuts down.
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
        self._lock = asyncio.Lock()
        self._stop: asyncio.Event | None = None
        self._running: asyncio.Task[None] | None = None
        self._closed = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app if self._app is not None else await self._start()
        await app(scope, receive, send)

    async def _start(self) -> ASGIApp:
        async with self._lock:
            if self._app is not None:
                return self._app
            if self._closed:
                raise RuntimeError("the server is shutting down")
            app, lifespan = self._build()
            started = asyncio.Event()
            stop = asyncio.Event()

            async def hold() -> None:
                # The lifespan is entered and left in this one task, as task groups require.
                async with lifespan():
                    started.set()
                    await stop.wait()

            running = asyncio.create_task(hold())
            waiting = asyncio.create_task(started.wait())
            await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not started.is_set():
                waiting.cancel()
                running.result()  # raises what entering the lifespan raised
            self._stop, self._running, self._app = stop, running, app
            return app

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            async with self._lock:
                self._closed = True
                if self._stop is not None and self._running is not None:
                    self._stop.set()
                    await self._running
