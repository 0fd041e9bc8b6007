"""`notifications/tools/list_changed` to the MCP clients connected when the served image
changes (served.py: an `auto` server moving to the data image), so that a client
fetches the tool texts again, which then state the new image's Python and packages.

Both MCP eras are told:
- 2025-era sessions (initialize handshake; `tools.listChanged` declared in the server's
  capabilities): each session that has made a request (a client lists the tools after
  initializing) gets the notification on its standalone channel (stdio, or the GET
  stream of streamable HTTP);
- 2026-07-28 sessions: the clients that opened a `subscriptions/listen` stream asking for
  `toolsListChanged` get it there (the SDK's ListenHandler on our bus).

The switch happens on the warm-up's thread; the notifications are sent on the event loop
that serves MCP (the one a request was last seen on).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

logger = logging.getLogger("wasmrun.mcp")

MAX_LISTENERS = 1024  # open listen streams (the SDK's default cap)


class ToolListChanges:
    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus, max_subscriptions=MAX_LISTENERS)
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()  # 2025-era ServerSessions seen
        self._loop: asyncio.AbstractEventLoop | None = None

    def seen(self, ctx: Any) -> None:
        """A request on `ctx`'s session: remember the session (and the loop serving it)."""
        self._loop = asyncio.get_running_loop()
        session = getattr(ctx, "session", None)
        if session is not None and getattr(ctx, "protocol_version", "") not in MODERN_PROTOCOL_VERSIONS:
            try:
                self._sessions.add(session)
            except TypeError:  # not weakly referable: not one we can tell later
                pass

    def changed(self, _image: str = "") -> None:
        """Tell every connected client (from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # no client has connected: nobody to tell
        try:
            asyncio.run_coroutine_threadsafe(self._send(), loop)
        except RuntimeError:  # the loop stopped meanwhile
            pass

    async def _send(self) -> None:
        await self.bus.publish(ToolsListChanged())
        for session in list(self._sessions):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # that client has gone: nothing to tell it
                logger.debug("tools/list_changed not sent to a session: %r", exc)
                self._sessions.discard(session)
