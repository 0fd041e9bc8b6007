"""What a wasmrun run says, as the code interpreter's line-delimited events: a display
(the results contract: `{"data": {mime: value}, "main": bool, "blobs": {mime: blob id}}`)
as a `result`, a run error as an `error` with name, value and traceback, output as
`stdout`/`stderr`. Pure functions of dicts, so they are tested without a server."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

# MIME type -> the field of E2B's `Result` that carries it.
RESULT_FIELDS: dict[str, str] = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
BINARY = frozenset({"image/png", "image/jpeg", "application/pdf"})  # base64 text in the event
TRACEBACK_HEAD = "Traceback (most recent call last):"
_encoder = msgspec.json.Encoder()

ReadBlob = Callable[[str], bytes | None]


def line(event: Mapping[str, Any]) -> bytes:
    return _encoder.encode(event) + b"\n"


def now_us() -> int:
    return time.time_ns() // 1000


def output_event(stream: str, text: str) -> dict[str, Any]:
    """A chunk the run wrote: `stderr` stays stderr; stdout and the run's log are stdout."""
    kind = "stderr" if stream == "stderr" else "stdout"
    return {"type": kind, "text": text, "timestamp": now_us()}


class Lines:
    """A run's output as E2B's messages: whole lines per stream, as Jupyter's
    line-buffered streams send them (a `print` reaches the host as its text and its
    newline apart); what is left without a newline goes out at the end, or once long."""

    MAX_PENDING = 64 * 1024

    def __init__(self) -> None:
        self._pending: dict[str, str] = {}

    def feed(self, stream: str, text: str) -> list[dict[str, Any]]:
        kind = "stderr" if stream == "stderr" else "stdout"
        text = self._pending.pop(kind, "") + text
        cut = len(text) if len(text) >= self.MAX_PENDING else text.rfind("\n") + 1
        if cut < len(text):
            self._pending[kind] = text[cut:]
        return [output_event(kind, text[:cut])] if cut else []

    def flush(self) -> list[dict[str, Any]]:
        events = [output_event(kind, text) for kind, text in self._pending.items() if text]
        self._pending.clear()
        return events


def _blob_value(mime: str, content: bytes) -> str | Any:
    if mime in BINARY:
        return base64.b64encode(content).decode("ascii")
    text = content.decode("utf-8", errors="replace")
    return msgspec.json.decode(text) if mime == "application/json" else text


def display_result(display: Mapping[str, Any], read_blob: ReadBlob | None = None) -> dict[str, Any] | None:
    """A `Display` as E2B's `result` event; None when it has no form E2B knows. Forms
    kept as blobs (too large to inline) are read back with `read_blob`."""
    data = display.get("data")
    forms: dict[str, Any] = dict(data) if isinstance(data, Mapping) else {}
    blobs = display.get("blobs")
    if isinstance(blobs, Mapping) and read_blob is not None:
        for mime, blob_id in blobs.items():
            if mime in RESULT_FIELDS and mime not in forms and isinstance(blob_id, str):
                content = read_blob(blob_id)
                if content is not None:
                    forms[mime] = _blob_value(mime, content)
    event: dict[str, Any] = {"type": "result", "is_main_result": display.get("main") is True}
    extra: dict[str, Any] = {}
    for mime, value in forms.items():
        name = RESULT_FIELDS.get(mime)
        if name is None:
            extra[mime] = value
        elif name == "json" or isinstance(value, str):
            event[name] = value
    if extra:
        event["extra"] = extra
    return event if len(event) > 2 or extra else None


def _exception_text(kind: str, lines: list[str]) -> str | None:
    """The exception's message from the lines after the last frame: its header is
    `<Type>: <message>` (the type may be qualified, `f.<locals>.Type`), the message may go
    on over the following lines."""
    header = re.compile(rf"(?:[\w.<>]+\.)?{re.escape(kind)}(?:: (.*))?")
    for index, text in enumerate(lines):
        found = header.fullmatch(text)
        if found:
            return "\n".join([found.group(1) or "", *lines[index + 1:]]).strip("\n")
    return None


def error_event(kind: str, message: str) -> dict[str, Any]:
    """A failed run as E2B's `error`: name is the exception's type, value its message
    (as `str(exception)`), traceback the whole text."""
    start = message.find(TRACEBACK_HEAD)
    traceback = message[start:] if start >= 0 else message
    lines = traceback.split("\n")
    last_frame = max((i for i, text in enumerate(lines) if text.startswith("  File ")), default=-1)
    after = lines[last_frame + 1:]
    while after and after[0].startswith(" "):  # the frame's source line and its carets
        after = after[1:]
    value = _exception_text(kind, after)
    if value is None:  # not a Python traceback: the run's own message (a limit, a refusal)
        return {"type": "error", "name": kind, "value": message, "traceback": f"{kind}: {message}"}
    return {"type": "error", "name": kind, "value": value, "traceback": traceback}


def image_blobs(result: Mapping[str, Any]) -> set[str]:
    """The blobs run_events reads: the displays' forms too large to inline."""
    return {
        blob_id for display in result.get("displays") or [] if isinstance(display, Mapping)
        for blob_id in (display.get("blobs") or {}).values() if isinstance(blob_id, str)
    }


def run_events(result: Mapping[str, Any], execution_count: int, read_blob: ReadBlob | None = None) -> list[dict[str, Any]]:
    """The events that follow a run's streamed output: its results (the run's display
    results, in order: display(), plt.show(), the last expression as the main one), its
    error, the execution count."""
    events: list[dict[str, Any]] = []
    for display in result.get("displays") or []:
        if isinstance(display, Mapping) and (event := display_result(display, read_blob)) is not None:
            events.append(event)
    error = result.get("error")
    if result.get("status") == "failed" and isinstance(error, Mapping):
        events.append(error_event(str(error.get("type", "Error")), str(error.get("message", ""))))
    events.append({"type": "number_of_executions", "execution_count": execution_count})
    return events
