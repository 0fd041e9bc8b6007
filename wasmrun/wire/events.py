"""`run_code` / `execute_skill` with `stream: true` over /rpc: the answer as
Server-Sent Events, the way MCP's streamable HTTP answers a POST. Each event's
`data:` is one JSON-RPC message: `run/output` notifications
(`{"stream": "stdout"|"stderr"|"log", "text": ...}`) while the guest writes,
`run/display` notifications (`{"display": {...}}`) as it shows display results,
`run/tool_calls` notifications (`{"run_id", "tool_calls": [...]}`) when a code-mode
run waits on the client's tools (docs/code-mode.md), then the call's response,
always the last event.

The run and the connection are decoupled by `RunEvents`, a bounded buffer:
the run hands it output on the event loop and never waits for the client.
Past `QUEUE_BYTES` waiting, output is dropped and counted, and the client
gets one `run/output` marker (stream "log", `dropped`: characters lost)
once it has read what waited. A client that goes away stops the writing, not
the run: it finishes, is accounted and audited as any run, and its request
stays counted against the tenant's `concurrent_requests` until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from wasmrun.protocol.streaming import RUN_OUTPUT, RUN_TOOL_CALLS
from wasmrun.sandbox import OutputChunk
from wasmrun.wire.jsonrpc import check_body

EVENT_STREAM = "text/event-stream"
QUEUE_BYTES = 256 * 1024  # output waiting for a slow client; past it, dropped with a marker
KEEPALIVE_S = 15.0  # an SSE comment when nothing else was sent this long (proxies close idle streams)
OUTPUT_METHOD = "run/output"
DISPLAY_METHOD = "run/display"
TOOL_CALLS_METHOD = "run/tool_calls"


class _Output(msgspec.Struct):
    stream: str
    text: str
    dropped: int | msgspec.UnsetType = msgspec.UNSET
    truncated: bool | msgspec.UnsetType = msgspec.UNSET


class _Notification(msgspec.Struct):
    jsonrpc: str
    method: str
    params: _Output


class _StreamFlag(msgspec.Struct):
    stream: Any = None


class _Call(msgspec.Struct):
    params: _StreamFlag | None = None


_encoder = msgspec.json.Encoder()
_call_decoder = msgspec.json.Decoder(_Call)


def accepts_events(accept: str) -> bool:
    """Whether an Accept header lists `text/event-stream`."""
    return any(part.split(";", 1)[0].strip().lower() == EVENT_STREAM for part in accept.split(","))


def asks_to_stream(body: bytes) -> bool:
    """Whether `body` is one call (not a batch) whose params say `"stream": true`.
    Anything else (invalid JSON included) is answered the usual way, which
    words its own errors."""
    if body.lstrip()[:1] != b"{" or check_body(body) is not None:  # the usual path words the problem
        return False
    try:
        call = _call_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    return call.params is not None and call.params.stream is True


def _event(message: bytes) -> bytes:
    # msgspec's JSON has no raw line breaks (they are escaped in strings): one data line.
    return b"data: " + message + b"\n\n"


def output_event(stream: str, text: str, *, dropped: int | None = None, truncated: bool = False) -> bytes:
    params = _Output(stream, text)
    if dropped is not None:
        params.dropped = dropped
    if truncated:
        params.truncated = True
    return _event(_encoder.encode(_Notification("2.0", OUTPUT_METHOD, params)))


def display_event(display_json: str) -> bytes:
    """`run/display` with `params = {"display": <Display>}`: the display's JSON as the
    sandbox encoded it (checked there; sandbox/guest/displays.py), passed on as it is."""
    head = b'data: {"jsonrpc":"2.0","method":"' + DISPLAY_METHOD.encode() + b'","params":{"display":'
    return head + display_json.encode("utf-8") + b"}}\n\n"


def tool_calls_event(params_json: bytes) -> bytes:
    """`run/tool_calls` with the params code mode encoded (protocol/toolcalls.py), as they are."""
    return b'data: {"jsonrpc":"2.0","method":"' + TOOL_CALLS_METHOD.encode() + b'","params":' + params_json + b"}\n\n"


def dropped_notice(chars: int) -> str:
    return f"[... {chars} characters of output not streamed: the client read too slowly ...]\n"


class RunEvents:
    """The bounded buffer between a run (the writer, on the event loop) and its
    client (the reader)."""

    def __init__(self, limit: int = QUEUE_BYTES) -> None:
        self.limit = limit
        self._events: deque[bytes] = deque()
        self._bytes = 0
        self._dropped = 0  # characters dropped since the reader last caught up
        self._final: bytes | None = None  # the response, once the call has ended
        self._done = False
        self._reader_gone = False
        self._ready = asyncio.Event()

    def put(self, chunks: list[OutputChunk]) -> None:
        """The run's output (never blocks)."""
        if self._reader_gone:
            return
        for chunk in chunks:
            if chunk.stream == "display":
                event = display_event(chunk.text)
            else:
                event = output_event(chunk.stream, chunk.text, truncated=chunk.truncated)
            if self._dropped or self._bytes + len(event) > self.limit:
                self._dropped += len(chunk.text)
                continue
            self._events.append(event)
            self._bytes += len(event)
        self._ready.set()

    def put_tool_calls(self, params_json: bytes) -> None:
        """A batch of tool calls the run waits on: never dropped (the client must answer it; a
        batch is bounded by the run's tool limits), after the output written before it."""
        if self._reader_gone:
            return
        event = tool_calls_event(params_json)
        self._events.append(event)
        self._bytes += len(event)
        self._ready.set()

    def finish(self, answer: bytes | None) -> None:
        """The call's response: the last event, whatever the bound (None: a
        notification, which has none; the stream just ends)."""
        if self._reader_gone:
            return
        self._final = _event(answer) if answer is not None else b""
        self._ready.set()

    def reader_gone(self) -> None:
        """The client left: nothing more is kept, and the reader's wait ends."""
        self._reader_gone = True
        self._events.clear()
        self._bytes = 0
        self._ready.set()

    async def next(self, timeout: float) -> bytes | None:
        """The next event; b"" after `timeout` seconds without one; None after the last."""
        while True:
            if self._reader_gone or self._done:
                return None
            if self._events:
                event = self._events.popleft()
                self._bytes -= len(event)
                return event
            if self._dropped:  # caught up: say what was lost (before the response)
                dropped, self._dropped = self._dropped, 0
                return output_event("log", dropped_notice(dropped), dropped=dropped)
            if self._final is not None:
                self._done = True
                return self._final or None
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return b""


# Runs whose client went away still finish: referenced here until they do.
_RUNNING: set[asyncio.Task[None]] = set()


class EventStreamResponse(Response):
    """Answers `body` (one streamed call) as events. The call runs in its own task,
    so that neither a slow client nor one that leaves holds or stops it; `hold`
    (the request's place in the tenant's count of requests in flight) is let go
    when the call ends, not when the client does."""

    def __init__(
        self,
        body: bytes,
        handle: Callable[[bytes], Awaitable[bytes | None]],
        hold: contextlib.ExitStack | None = None,
    ) -> None:
        super().__init__(media_type=EVENT_STREAM)  # (its headers are sent by __call__)
        self.events = RunEvents()
        self.task = asyncio.get_running_loop().create_task(self._call(body, handle, hold))
        _RUNNING.add(self.task)
        self.task.add_done_callback(_RUNNING.discard)

    async def _call(
        self, body: bytes, handle: Callable[[bytes], Awaitable[bytes | None]], hold: contextlib.ExitStack | None
    ) -> None:
        RUN_OUTPUT.set(self.events.put)
        RUN_TOOL_CALLS.set(self.events.put_tool_calls)
        try:
            answer = await handle(body)
        finally:
            if hold is not None:
                hold.close()
        self.events.finish(answer)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", EVENT_STREAM.encode()),
                (b"cache-control", b"no-cache, no-transform"),
                (b"x-accel-buffering", b"no"),  # nginx: pass each event on as it comes
            ],
        })
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        try:
            while (event := await self.events.next(KEEPALIVE_S)) is not None:
                await send({"type": "http.response.body", "body": event or b": keepalive\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while an event was being sent
            self.events.reader_gone()
        except asyncio.CancelledError:  # the server is stopping
            self.events.reader_gone()
            raise
        finally:
            watcher.cancel()

    async def _watch(self, receive: Receive) -> None:
        """Until the client disconnects; then wake the writer so it stops."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.events.reader_gone()
