"""A deadline for receiving a request's body, for every route (/rpc, /mcp, ...).

uvicorn bounds how large a body may be but not how long it may take: a client
sending one byte a second would hold a connection and a task forever. This
ASGI middleware gives each HTTP request `timeout` seconds, from the moment it
reaches the app, to deliver its whole body. When that passes, the app is told
the client disconnected (which every ASGI app handles), whatever it answers
is dropped, and the client gets HTTP 408 with `Connection: close`, so the
server closes the connection.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DISCONNECT: Message = {"type": "http.disconnect"}


class BodyDeadline:
    def __init__(self, app: ASGIApp, *, timeout: float, answer: bytes, media_type: str) -> None:
        self.app = app
        self.timeout = timeout
        self.answer = answer  # the 408's body
        self.media_type = media_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout
        body_done = timed_out = response_started = False

        async def receive_in_time() -> Message:
            nonlocal body_done, timed_out
            if timed_out:
                return DISCONNECT
            if body_done:  # after the body: waiting for a disconnect, which may take any time
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                return DISCONNECT
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def send_unless_timed_out(message: Message) -> None:
            nonlocal response_started
            if timed_out:
                return  # the 408 goes instead
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, receive_in_time, send_unless_timed_out)
        except Exception:
            if not timed_out:
                raise
            # The app failed on the disconnect it was handed: the 408 below is the answer.
        if timed_out and not response_started:
            await send({
                "type": "http.response.start",
                "status": 408,
                "headers": [
                    (b"content-type", self.media_type.encode()),
                    (b"content-length", str(len(self.answer)).encode()),
                    (b"connection", b"close"),
                ],
            })
            await send({"type": "http.response.body", "body": self.answer})
