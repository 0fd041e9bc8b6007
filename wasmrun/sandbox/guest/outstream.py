"""A streamed run's output, sent on while the run goes: labelled, decoded, capped, batched.

The run's capture (capture.py) still keeps what the result reports; this is a
second, forward-only view of the same bytes for a caller that asked for them
as they come (`RunRequest.stream`). It lives on the run's thread, in the
worker process, and hands batches of `OutputChunk` to `send` (the worker's
pipe to the server), never more than `budget` bytes in all (the run's
`output_bytes`): past it, one last chunk says the rest is not streamed.

Bytes become text per stream with an incremental UTF-8 decoder, so a
character split across two writes (or two polls) is sent whole, and invalid
bytes become U+FFFD as they do in the result's logs. Chunks are batched: what
accumulates is sent when the run's thread next polls (the watchdog's tick,
a sleep, a network call, the end of the run) or once `SEND_AT` bytes wait,
so a burst of small writes costs a few messages, not one each.

Secret values are replaced by their placeholders as in the result; the end of
a stream's text that could be the start of a secret waits for the next batch.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    from wasmrun.egress.secrets import Redactor

logger = logging.getLogger("wasmrun.sandbox")

Stream = Literal["stdout", "stderr", "log"]
# A chunk's label: a stream's text, or "display": one display result as JSON (sandbox/guest/displays.py).
ChunkKind = Literal["stdout", "stderr", "log", "display"]
STREAMS: tuple[Stream, ...] = ("stdout", "stderr", "log")
SEND_AT = 16 * 1024  # bytes waiting that are sent without waiting for the next poll


class OutputChunk(msgspec.Struct, array_like=True):
    """Text one stream of the run wrote; `truncated` on the last one when the cap was reached."""

    stream: ChunkKind
    text: str
    truncated: bool = False


OutputSink = Callable[[list["OutputChunk"]], None]
OUTPUT = b"O"  # first byte of a worker's message of output chunks (a RunResult's msgpack never starts so)
_encoder = msgspec.msgpack.Encoder()
_json = msgspec.json.Encoder()
_decoder = msgspec.msgpack.Decoder(list[OutputChunk])


def encode_chunks(chunks: list[OutputChunk]) -> bytes:
    return OUTPUT + _encoder.encode(chunks)


def decode_chunks(message: bytes) -> list[OutputChunk]:
    return _decoder.decode(memoryview(message)[1:])


def cap_notice(budget: int) -> str:
    return (
        f"[... output past the limit of {budget} bytes is not streamed (limits.output_bytes);"
        " the result's logs keep its head and tail ...]\n"
    )


class OutputStream:
    def __init__(
        self, send: Callable[[list[OutputChunk]], None], budget: int, redact: Redactor | None = None
    ) -> None:
        self._send: Callable[[list[OutputChunk]], None] | None = send
        self._redact = redact
        self._held = dict.fromkeys(STREAMS, "")  # per stream: text that may be the start of a secret
        self.budget = budget
        self.left = budget  # bytes that may still be streamed
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in STREAMS}
        self._pending: list[OutputChunk] = []
        self._pending_bytes = 0
        # How much of the guest's stdout buffer (hostcalls.GuestBuffers) was
        # already streamed by a look at it that did not empty it.
        self.guest_seen = 0

    @property
    def open(self) -> bool:
        return self.left > 0 and self._send is not None

    def write(self, stream: Stream, data: bytes) -> None:
        """Bytes the guest wrote to `stream`; more than `left` reaches the cap."""
        if not data or not self.open:
            return
        over = len(data) > self.left
        if over:
            data = data[: self.left]
        self.left -= len(data)
        self._pending_bytes += len(data)
        self._add(stream, self._decoders[stream].decode(data))
        if over:
            self.left = 0  # what the decoder holds (a split character) is dropped, not shown as U+FFFD
            self._pending.append(OutputChunk("log", cap_notice(self.budget), truncated=True))
            self.flush()
        elif self._pending_bytes >= SEND_AT:
            self.flush()

    def display(self, shown: Any) -> None:
        """A display result (a sandbox.types.Display), sent with what was written before it.
        Not counted against the output cap: displays have their own (sandbox/guest/displays.py)."""
        if self._send is None:
            return
        if self._redact is not None:
            shown = msgspec.structs.replace(shown, data=self._redact.value(shown.data))
        self._pending.append(OutputChunk("display", _json.encode(shown).decode("utf-8")))
        self.flush()

    def _add(self, stream: Stream, text: str) -> None:
        if not text:
            return
        last = self._pending[-1] if self._pending else None
        if last is not None and last.stream == stream:
            last.text += text
        else:
            self._pending.append(OutputChunk(stream, text))

    def flush(self) -> None:
        """Send what waits. A send that fails (the server went away) ends the streaming, not the run."""
        if not self._pending or self._send is None:
            return
        chunks, self._pending, self._pending_bytes = self._pending, [], 0
        if self._redact is not None:
            chunks = [chunk for chunk in map(self._redacted, chunks) if chunk.text or chunk.truncated]
            if not chunks:
                return
        try:
            self._send(chunks)
        except Exception:
            logger.warning("a run's output could not be streamed; the run goes on", exc_info=True)
            self._send = None

    def _redacted(self, chunk: OutputChunk) -> OutputChunk:
        assert self._redact is not None
        if chunk.stream == "display":  # redacted as a value when it was added
            return chunk
        text = self._redact.text(self._held[chunk.stream] + chunk.text)
        keep = self._redact.pending(text) if not chunk.truncated else 0
        self._held[chunk.stream] = text[len(text) - keep :] if keep else ""
        return OutputChunk(chunk.stream, text[: len(text) - keep], chunk.truncated)

    def finish(self) -> None:
        """At the end of the run: what the decoders hold (an incomplete character is U+FFFD), then send."""
        if self.open:
            for name, decoder in self._decoders.items():
                self._add(name, decoder.decode(b"", final=True))
        self.flush()
        if self._redact is not None and any(self._held.values()):
            held = [OutputChunk(name, text) for name, text in self._held.items() if text]
            self._held = dict.fromkeys(STREAMS, "")
            redact, self._redact = self._redact, None  # held text is no secret's start any more
            self._pending = [OutputChunk(c.stream, redact.text(c.text)) for c in held]
            self.flush()
