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
from collections import OrderedDict
from typing import Any

from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

logger = logging.getLogger("wasmrun.mcp")

MAX_LISTENERS = 1024  # open listen streams (the SDK's default cap)
MAX_SESSIONS = 1024  # 2025-era sessions remembered (the oldest forgotten first)
SEND_TIMEOUT_S = 5.0  # a client that reads nothing does not hold up the others


class ToolListChanges:
    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus, max_subscriptions=MAX_LISTENERS)
        # 2025-era sessions seen, by MCP session id ("" on stdio): the ServerSession of one of
        # their requests, whose connection-scoped channel outlives the request.
        self._sessions: OrderedDict[str, Any] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None

    def seen(self, ctx: Any) -> None:
        """A request on `ctx`'s session: remember the session (and the loop serving it)."""
        self._loop = asyncio.get_running_loop()
        session = getattr(ctx, "session", None)
        if session is None or getattr(ctx, "protocol_version", "") in MODERN_PROTOCOL_VERSIONS:
            return  # a 2026-07-28 client learns of changes by listening (subscriptions/listen)
        request = getattr(ctx, "request", None)
        key = request.headers.get("mcp-session-id", "") if request is not None else ""
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)

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
        for key, session in list(self._sessions.items()):
            try:
                await asyncio.wait_for(session.send_tool_list_changed(), SEND_TIMEOUT_S)
            except Exception as exc:  # that client has gone: nothing to tell it
                logger.debug("tools/list_changed not sent to a session: %r", exc)
                self._sessions.pop(key, None)
