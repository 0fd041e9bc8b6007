"""A run's output as MCP notifications, for a `tools/call` that asks for them.

A client asks with `_meta.progressToken` (each output chunk is then a
`notifications/progress` whose `message` is the text and whose `progress`
counts the characters so far) and/or, on 2026-07-28+ sessions, the
`io.modelcontextprotocol/logLevel` `_meta` key (each chunk a
`notifications/message`, level `info` for stdout and runtime.log lines,
`warning` for stderr, `data` = `{"stream", "text"}`, logger `wasmrun.run`).
A call that asks for neither runs as before, with no streaming at all.
A code-mode run that waits on the client's tools (docs/code-mode.md) is told
the same way: `data` = `{"stream": "tool_calls", "run_id", "tool_calls"}` in the
log, "waiting for tool calls: NAMES" as the progress message; its result (the
`requires_action` answer) follows, as for /rpc's `run/tool_calls` event.

As over /rpc (wire/events.py) the run never waits for the client: output goes
through a bounded buffer to a task that sends it; past `QUEUE_CHARS` waiting
it is dropped and counted, and one notice says how much. The tool's result is
returned once what waits has been sent, so notifications come before it.

`/mcp` answers a POST as a single JSON body unless the call sent a
notification first (`JsonUnlessNotified`): the SDK's JSON mode has no way to
send them, and its SSE mode would change every answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import deque
from typing import Any

from mcp_types import LOG_LEVEL_META_KEY
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wasmrun.sandbox import OutputChunk

logger = logging.getLogger("wasmrun.mcp")

QUEUE_CHARS = 256 * 1024
DRAIN_TIMEOUT_S = 30.0  # how long the tool's result waits for a client that reads nothing
LOG_LEVELS = {"stdout": "info", "stderr": "warning", "log": "info"}


def wanted(meta: Any) -> tuple[bool, bool]:
    """(progress, log) notifications asked for by a request's `_meta`."""
    if not isinstance(meta, dict):
        return False, False
    token = meta.get("progressToken", meta.get("progress_token"))
    return token is not None and not isinstance(token, bool), meta.get(LOG_LEVEL_META_KEY) is not None


class RunNotices:
    """The bounded buffer and the task that turns a run's output into notifications."""

    def __init__(self, ctx: Any, progress: bool, log: bool) -> None:
        self.ctx = ctx
        self.progress = progress
        self.log = log
        self._queue: deque[OutputChunk | bytes] = deque()  # bytes: a tool_calls event's params
        self._chars = 0
        self._dropped = 0
        self._sent_chars = 0
        self._closing = False
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._send_all())

    def put(self, chunks: list[OutputChunk]) -> None:
        for chunk in chunks:
            if self._dropped or self._chars + len(chunk.text) > QUEUE_CHARS:
                self._dropped += len(chunk.text)
                continue
            self._queue.append(chunk)
            self._chars += len(chunk.text)
        self._wake.set()

    def put_tool_calls(self, params_json: bytes) -> None:
        """A batch of tool calls the run waits on: never dropped (the client must answer it)."""
        self._queue.append(params_json)
        self._wake.set()

    async def close(self) -> None:
        """Once the run has ended: send what waits (bounded in time), then stop."""
        self._closing = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), DRAIN_TIMEOUT_S)
        except TimeoutError:
            self._task.cancel()
        except Exception:
            logger.warning("a run's output notifications failed", exc_info=True)

    async def _send_all(self) -> None:
        while True:
            while self._queue:
                chunk = self._queue.popleft()
                if isinstance(chunk, bytes):
                    await self._send_tool_calls(chunk)
                    continue
                self._chars -= len(chunk.text)
                await self._send(chunk.stream, chunk.text)
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                await self._send("log", f"[... {dropped} characters of output not sent: the client read too slowly ...]\n")
                continue
            if self._closing:
                return
            self._wake.clear()
            await self._wake.wait()

    async def _send_tool_calls(self, params_json: bytes) -> None:
        event = json.loads(params_json)
        names = ", ".join(dict.fromkeys(str(call["name"]) for call in event["tool_calls"]))
        text = f"waiting for tool calls: {names}\n"
        self._sent_chars += len(text)  # (progress only ever grows)
        await self._notify({"stream": "tool_calls", **event}, text, "notice")

    async def _send(self, stream: str, text: str) -> None:
        self._sent_chars += len(text)
        data: dict[str, Any] = {"stream": stream, "text": text}
        if stream == "display":  # a display result (its JSON): its text form in progress, all of it in the log
            display = json.loads(text)
            data = {"stream": stream, "display": display}
            text = str(display.get("data", {}).get("text/plain", "")) + "\n"
        await self._notify(data, text, LOG_LEVELS.get(stream, "info"))

    async def _notify(self, data: dict[str, Any], text: str, level: str) -> None:
        session = self.ctx.session
        if self.progress:
            await session.report_progress(self._sent_chars, None, text)
        if self.log:
            with contextlib.suppress(Warning):  # the SDK marks logging deprecated on 2026-07-28+
                await session.send_log_message(level, data, logger="wasmrun.run", related_request_id=self.ctx.request_id)


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def _messages(body: bytes) -> list[Any]:
    """The JSON messages of complete SSE events in `body` (comments skipped)."""
    found = []
    for event in _EVENT_END.split(body):
        data = [line[5:].lstrip(b" ") for line in re.split(rb"\r\n|\n|\r", event) if line.startswith(b"data:")]
        if data:
            try:
                found.append(json.loads(b"\n".join(data)))
            except ValueError:
                found.append(None)
    return found


class JsonUnlessNotified:
    """In front of the SDK's SSE mode: a POST's event stream is held back, and
    answered as one JSON body (the last message) unless an event before the
    response is a notification, in which case the stream is passed on as it
    comes from then on. GETs, DELETEs and non-SSE answers pass unchanged. A client
    that does not accept `text/event-stream` always gets the JSON body (without
    notifications), as from the SDK's JSON mode."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        held = bytearray()
        passing = False
        headers = list(scope.get("headers", []))
        accept = b",".join(v for k, v in headers if k.lower() == b"accept")
        events_ok = any(p.split(b";")[0].strip().lower() == b"text/event-stream" for p in accept.split(b","))
        if not events_ok:  # the SDK's SSE mode asks for both; the answer will be JSON
            headers = [(k, v) for k, v in headers if k.lower() != b"accept"]
            headers.append((b"accept", accept + b", text/event-stream" if accept else b"application/json, text/event-stream"))
            scope = {**scope, "headers": headers}

        async def convert(message: Message) -> None:
            nonlocal start, passing
            if passing:
                await send(message)
                return
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                if headers.get(b"content-type", b"").split(b";")[0].strip() != b"text/event-stream":
                    passing = True
                    await send(message)
                    return
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            held.extend(message.get("body", b""))
            more = message.get("more_body", False)
            complete = held[: held.rfind(b"\n") + 1] if more else bytes(held)
            messages = [m for m in _messages(bytes(complete)) if m is not None]
            if events_ok and any(isinstance(m, dict) and "method" in m and "id" not in m for m in messages):
                passing = True  # a notification: the client gets the stream itself
                await send(start)
                await send({"type": "http.response.body", "body": bytes(held), "more_body": more})
                return
            if not more:
                answers = [m for m in messages if not (isinstance(m, dict) and "method" in m and "id" not in m)]
                await _send_json(send, start, answers[-1] if answers else None)

        await self.app(scope, receive, convert)


async def _send_json(send: Send, start: Message, message: Any) -> None:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() if message is not None else b""
    headers = [(k, v) for k, v in start.get("headers", [])
               if k.lower() not in (b"content-type", b"content-length", b"cache-control", b"connection")]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    status = start["status"] if message is not None else 202
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
