"""Jupyter messages (messaging v5.3) as the channels WebSocket carries them: one JSON
text frame per message, `channel` beside `header`, `parent_header`, `metadata`,
`content` (and `msg_id`/`msg_type` at the top, as Jupyter Server adds them). Pure
functions of dicts: what a frame says, what a reply looks like, a run's displays and
errors as MIME bundles and error contents. No code of a client's runs on the host:
`is_complete` compiles it (codeop), `complete` matches names of Python itself."""

from __future__ import annotations

import builtins
import codeop
import datetime
import keyword
import re
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

import msgspec

from wasmrun.e2b.results import Expansion, error_event

PROTOCOL_VERSION = "5.3"
CHANNELS = frozenset({"shell", "control", "stdin", "iopub"})
# A frame's JSON text past this is refused with an error reply (uvicorn closes the socket
# with 1009 past its own ws_max_size, 16 MiB).
MAX_FRAME_BYTES = 8 * 1024 * 1024
MAX_ID_CHARS = 200  # a msg_id, session or username kept in a reply's parent_header, at most
MAX_COMPILED_CHARS = 64 * 1024  # is_complete compiles a cell up to this; past it, "unknown"
NAMES = sorted(set(keyword.kwlist) | {name for name in dir(builtins) if not name.startswith("_")})
_encoder = msgspec.json.Encoder()


class BadFrame(Exception):
    """A frame that is not a Jupyter message: what is wrong with it, for an error reply."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def header(msg_type: str, session: str) -> dict[str, str]:
    return {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": session, "username": "wasmrun",
            "date": now(), "version": PROTOCOL_VERSION}


def message(
    channel: str, msg_type: str, parent: Mapping[str, Any], content: Mapping[str, Any], session: str,
    metadata: Mapping[str, Any] | None = None,
) -> bytes:
    """One message as its frame's JSON text."""
    head = header(msg_type, session)
    return _encoder.encode({
        "channel": channel, "header": head, "msg_id": head["msg_id"], "msg_type": msg_type,
        "parent_header": dict(parent), "metadata": dict(metadata or {}), "content": dict(content), "buffers": [],
    })


def _short_text(value: Any) -> str | None:
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS and "\x00" not in value:
        return value
    return None


def parse(frame: str | bytes | None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A frame's channel, header (its ids checked, as the parent_header of the replies)
    and content; BadFrame when it is not a message this front can answer."""
    if frame is None:
        raise BadFrame("binary frames are not served: send each message as a JSON text frame (no subprotocol)")
    if len(frame) > MAX_FRAME_BYTES:
        raise BadFrame(f"the message is over {MAX_FRAME_BYTES} bytes")
    try:
        value = msgspec.json.decode(frame)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise BadFrame("the frame is not valid JSON (UTF-8)") from None
    if not isinstance(value, dict):
        raise BadFrame("a message is a JSON object")
    head, content = value.get("header"), value.get("content", {})
    if not isinstance(head, dict) or not isinstance(content, dict):
        raise BadFrame("a message needs a `header` object and a `content` object")
    msg_type, msg_id = _short_text(head.get("msg_type")), _short_text(head.get("msg_id"))
    if not msg_type or msg_id is None:
        raise BadFrame(f"the header needs `msg_type` and `msg_id`, each text of at most {MAX_ID_CHARS} characters")
    parent = {"msg_id": msg_id, "msg_type": msg_type, "version": PROTOCOL_VERSION}
    for name in ("session", "username", "date", "version"):
        if (text := _short_text(head.get(name))) is not None:
            parent[name] = text
    channel = value.get("channel", "shell")
    if channel not in CHANNELS:
        raise BadFrame(f"channel {str(channel)[:40]!r} is not one of {', '.join(sorted(CHANNELS))}")
    return channel, parent, content


def reply_type(msg_type: str) -> str:
    return msg_type.removesuffix("_request") + "_reply"


def error_content(ename: str, evalue: str, traceback: list[str] | None = None) -> dict[str, Any]:
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": traceback or [f"{ename}: {evalue}"]}


def run_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """A failed run's error as Jupyter's: ename the exception's type, evalue its message,
    traceback its lines."""
    event = error_event(str(error.get("type", "Error")), str(error.get("message", "")))
    return error_content(event["name"], event["value"], str(event["traceback"]).split("\n"))


def bundle(display: Mapping[str, Any], expansion: Expansion) -> dict[str, msgspec.Raw]:
    """A display's forms as a MIME bundle (binary forms as base64 text, as Jupyter sends
    them), those kept as blobs read back, all within the expansion's budget."""
    forms: dict[str, msgspec.Raw] = {}
    data = display.get("data")
    for mime, value in (data.items() if isinstance(data, Mapping) else ()):
        if isinstance(mime, str) and (kept := expansion.inline(value)) is not None:
            forms[mime] = kept
    blobs = display.get("blobs")
    for mime, blob_id in (blobs.items() if isinstance(blobs, Mapping) else ()):
        if isinstance(mime, str) and mime not in forms and isinstance(blob_id, str):
            if (value := expansion.from_blob(mime, blob_id)) is not None:
                forms[mime] = value
    return forms


def kernel_info(python: str, version: str, image: str) -> dict[str, Any]:
    return {
        "status": "ok", "protocol_version": PROTOCOL_VERSION, "implementation": "wasmrun",
        "implementation_version": version,
        "language_info": {
            "name": "python", "version": python, "mimetype": "text/x-python", "file_extension": ".py",
            "pygments_lexer": "ipython3", "codemirror_mode": {"name": "ipython", "version": 3},
            "nbconvert_exporter": "python",
        },
        "banner": f"Python {python} in a wasmrun sandbox ({image} image; CPython on WASI under wasmtime)",
        "help_links": [], "debugger": False,
    }


def is_complete(code: str) -> dict[str, Any]:
    """Whether a cell is complete, by compiling it (never running it); `!` and `%` lines
    are taken as complete lines, as IPython takes them."""
    if len(code) > MAX_COMPILED_CHARS or "\x00" in code:
        return {"status": "unknown"}
    lines = ["pass" if line.lstrip().startswith(("!", "%")) else line for line in code.split("\n")]
    source = "\n".join(lines)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = codeop.compile_command(source, "<cell>", "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
        return {"status": "invalid"}
    if compiled is None:
        last = next((line for line in reversed(lines) if line.strip()), "")
        indent = re.match(r"\s*", last).group(0) if last else ""  # type: ignore[union-attr]
        return {"status": "incomplete", "indent": indent + ("    " if last.rstrip().endswith(":") else "")}
    return {"status": "complete"}


def complete(code: str, cursor: Any) -> dict[str, Any]:
    """Keywords and builtins that start the name before the cursor (no names of the
    session's own: those live in the sandbox)."""
    at = cursor if isinstance(cursor, int) and 0 <= cursor <= len(code) else len(code)
    start = at
    while start > 0 and (code[start - 1].isalnum() or code[start - 1] == "_"):
        start -= 1
    prefix = code[start:at]
    matches = [name for name in NAMES if name.startswith(prefix)] if prefix else []
    return {"status": "ok", "matches": matches, "cursor_start": start, "cursor_end": at, "metadata": {}}
