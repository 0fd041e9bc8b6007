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
# What one cell's results may expand to (the default result_bytes): the front is handed
# the served limit; this is for the pure functions' callers that give none.
DEFAULT_BUDGET = 32 * 1024 * 1024

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


def _form_text(mime: str, content: bytes) -> msgspec.Raw | None:
    """A form's JSON text in an event, made from its blob's bytes (the guest wrote them:
    untrusted): binary as a base64 string, text as a string (its escapes included, so its
    size is what is sent), JSON as the blob's own text once it is checked to be JSON
    (never parsed into objects, which cost 20-30 times its bytes); None for a JSON form
    that is not JSON."""
    if mime in BINARY:
        return msgspec.Raw(b'"' + base64.b64encode(content) + b'"')
    if mime != "application/json":
        return msgspec.Raw(_encoder.encode(content.decode("utf-8", errors="replace")))
    try:
        return msgspec.json.decode(content, type=msgspec.Raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _is_text(form: msgspec.Raw) -> bool:
    return bytes(memoryview(form)[:1]) == b'"'


class Expansion:
    """What a cell's results expand to, against one budget of bytes.

    Every form goes into its event as JSON text made once (`msgspec.Raw`): a form kept as
    a blob is made once and the one text is shared by every display that names it; every
    form, inline or from a blob, counts its text's size each time it is sent, because each
    event carries it again. Past the budget a form is left out (`left_out` counts them),
    so 64 displays of ten forms naming one large blob cost at most the budget, never 640
    copies, and what waits for a client that reads slowly is bytes, never objects."""

    def __init__(self, read_blob: ReadBlob | None = None, budget: int = DEFAULT_BUDGET) -> None:
        self._read_blob = read_blob
        self.budget = budget
        self.spent = 0
        self.left_out = 0
        self._made: dict[tuple[str, str], msgspec.Raw | None] = {}

    def _take(self, form: msgspec.Raw) -> msgspec.Raw | None:
        if self.spent + len(form) > self.budget:
            self.left_out += 1
            return None
        self.spent += len(form)
        return form

    def inline(self, value: Any) -> msgspec.Raw | None:
        """An inline form (as the run result carries it: its JSON text, or a value)."""
        if isinstance(value, msgspec.Raw):
            return self._take(value)
        try:
            return self._take(msgspec.Raw(_encoder.encode(value)))
        except (TypeError, OverflowError, RecursionError):
            return None

    def from_blob(self, mime: str, blob_id: str) -> msgspec.Raw | None:
        kind = "binary" if mime in BINARY else "json" if mime == "application/json" else "text"
        if (kind, blob_id) not in self._made:
            content = self._read_blob(blob_id) if self._read_blob is not None else None
            # Not read (gone, or past the budget), or too large for what is left: left
            # out, and not kept (a later, smaller use of the same blob may still fit).
            if content is None or self.spent + len(content) > self.budget:
                self.left_out += 1
                return None
            self._made[(kind, blob_id)] = _form_text(mime, content)
        made = self._made[(kind, blob_id)]
        return None if made is None else self._take(made)

    def note(self) -> dict[str, Any] | None:
        """The stderr event that says what was left out, if anything was."""
        if not self.left_out:
            return None
        return output_event("stderr", (
            f"wasmrun: {self.left_out} display form(s) left out: this cell's results expand past its"
            f" budget of {self.budget} bytes (the server's result_bytes, less what the tenant's other"
            " cells have waiting to be read); save large outputs as files in /home/user and read"
            " them with files.read\n"
        ))


def display_result(
    display: Mapping[str, Any], read_blob: ReadBlob | None = None, expansion: Expansion | None = None
) -> dict[str, Any] | None:
    """A `Display` as E2B's `result` event; None when it has no form E2B knows. Forms
    kept as blobs (too large to inline) are read back with `read_blob`, within the
    `expansion`'s budget (one of its own when none is given)."""
    expansion = expansion if expansion is not None else Expansion(read_blob)
    data = display.get("data")
    forms: dict[str, msgspec.Raw] = {}
    for mime, value in (data.items() if isinstance(data, Mapping) else ()):
        name = RESULT_FIELDS.get(mime)
        if name is not None and name != "json" and not isinstance(value, (str, msgspec.Raw)):
            continue  # a text field that is not text: E2B's Result has no place for it
        if (kept := expansion.inline(value)) is not None and (name in (None, "json") or _is_text(kept)):
            forms[mime] = kept
    blobs = display.get("blobs")
    if isinstance(blobs, Mapping):
        for mime, blob_id in blobs.items():
            if mime in RESULT_FIELDS and mime not in forms and isinstance(blob_id, str):
                value = expansion.from_blob(mime, blob_id)
                if value is not None:
                    forms[mime] = value
    event: dict[str, Any] = {"type": "result", "is_main_result": display.get("main") is True}
    extra = {mime: value for mime, value in forms.items() if mime not in RESULT_FIELDS}
    event.update({RESULT_FIELDS[mime]: value for mime, value in forms.items() if mime in RESULT_FIELDS})
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


def image_blobs(result: Mapping[str, Any]) -> list[str]:
    """The blobs run_events reads (the displays' forms too large to inline), each once,
    in the order the displays first name them."""
    found: dict[str, None] = {}
    for display in result.get("displays") or []:
        blobs = display.get("blobs") if isinstance(display, Mapping) else None
        for blob_id in (blobs.values() if isinstance(blobs, Mapping) else ()):
            if isinstance(blob_id, str):
                found.setdefault(blob_id)
    return list(found)


def run_events(
    result: Mapping[str, Any], execution_count: int, read_blob: ReadBlob | None = None, budget: int = DEFAULT_BUDGET
) -> list[dict[str, Any]]:
    """The events that follow a run's streamed output: its results (the run's display
    results, in order: display(), plt.show(), the last expression as the main one), its
    error, the execution count. All the results together expand within `budget` bytes;
    what is left out is said on stderr."""
    events: list[dict[str, Any]] = []
    expansion = Expansion(read_blob, budget)
    for display in result.get("displays") or []:
        if isinstance(display, Mapping) and (event := display_result(display, expansion=expansion)) is not None:
            events.append(event)
    if (note := expansion.note()) is not None:
        events.append(note)
    error = result.get("error")
    if result.get("status") == "failed" and isinstance(error, Mapping):
        events.append(error_event(str(error.get("type", "Error")), str(error.get("message", ""))))
    events.append({"type": "number_of_executions", "execution_count": execution_count})
    return events
