"""What a wasmrun run says, as the service's `code/execute` answer: `{"properties":
{"status", "stdout", "stderr", "result", "executionTimeInMillis"}}`. The result is the
cell's main display (its last expression) or, without one, its last picture: a picture as
`{"type": "image", "format": "png", "base64_data": ...}`, a value with a JSON form as
that, a number as a number, anything else as its text (`repr`). A failed run is `Failure`
with its traceback on stderr. Pure functions of dicts, tested without a server."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from wasmrun.sandbox import OutputChunk

IMAGES = {"image/png": "png", "image/jpeg": "jpeg"}
NUMBER = re.compile(r"-?\d{1,300}(\.\d{1,300})?([eE][-+]?\d{1,4})?")
TRACEBACK_HEAD = "Traceback (most recent call last):"
ReadBlob = Callable[[str], bytes | None]


class Output:
    """A run's stdout and stderr as it writes them, each kept up to `most` characters
    (the run's own output cap bounds them first; this bounds what one answer holds)."""

    def __init__(self, most: int = 32 * 1024 * 1024) -> None:
        self.most = most
        self.parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.size: dict[str, int] = {"stdout": 0, "stderr": 0}
        self.cut = False

    def feed(self, chunks: list[OutputChunk]) -> None:
        for chunk in chunks:
            if not isinstance(chunk, OutputChunk) or chunk.stream == "display":
                continue
            name = "stderr" if chunk.stream == "stderr" else "stdout"  # the run's log is stdout, as print's
            room = self.most - self.size[name]
            text = chunk.text if len(chunk.text) <= room else chunk.text[:max(room, 0)]
            self.cut = self.cut or len(text) < len(chunk.text)
            self.parts[name].append(text)
            self.size[name] += len(text)

    def text(self, name: str) -> str:
        return "".join(self.parts[name])


def _form(value: Any) -> Any:
    """A display form's value (the run's result carries some as their JSON text)."""
    if isinstance(value, msgspec.Raw):
        try:
            return msgspec.json.decode(value)
        except msgspec.DecodeError:
            return None
    return value


def chosen_display(displays: Any) -> Mapping[str, Any] | None:
    """The display the answer's `result` shows: the main one, else the last picture."""
    shown = [d for d in displays if isinstance(d, Mapping)] if isinstance(displays, list) else []
    for display in reversed(shown):
        if display.get("main") is True:
            return display
    for display in reversed(shown):
        forms = {**(display.get("data") or {}), **(display.get("blobs") or {})}
        if any(mime in forms for mime in IMAGES):
            return display
    return None


def _image(display: Mapping[str, Any], read_blob: ReadBlob | None) -> dict[str, Any] | None:
    data, blobs = display.get("data") or {}, display.get("blobs") or {}
    for mime, fmt in IMAGES.items():
        encoded = _form(data.get(mime)) if isinstance(data, Mapping) else None
        if not isinstance(encoded, str) and isinstance(blobs, Mapping) and isinstance(blobs.get(mime), str):
            content = read_blob(blobs[mime]) if read_blob is not None else None
            encoded = base64.b64encode(content).decode() if content is not None else None
        if isinstance(encoded, str):
            return {"type": "image", "format": fmt, "base64_data": encoded}
    return None


def _plain(text: str) -> Any:
    """A value's text: a number stays a number (as the service answers `6 * 7` with 42)."""
    if NUMBER.fullmatch(text):
        number = float(text) if any(c in text for c in ".eE") else int(text)
        if not isinstance(number, float) or math.isfinite(number):
            return number
    return text


def result_value(display: Mapping[str, Any] | None, read_blob: ReadBlob | None = None) -> Any:
    if display is None:
        return ""
    image = _image(display, read_blob)
    if image is not None:
        return image
    data = display.get("data") or {}
    if not isinstance(data, Mapping):
        return ""
    if "application/json" in data:
        return _form(data["application/json"])
    text = _form(data.get("text/plain"))
    return _plain(text) if isinstance(text, str) else ""


def error_text(error: Any) -> str:
    """A failed run's error as stderr shows it: its traceback from its first line, or
    `Type: message` for a run stopped by a limit or refused."""
    if not isinstance(error, Mapping):
        return "Error: the run failed\n"
    kind, message = str(error.get("type", "Error")), str(error.get("message", ""))
    start = message.find(TRACEBACK_HEAD)
    if start < 0:
        return f"{kind}: {message}\n"
    text = message[start:].rstrip("\n") + "\n"
    lines = text.splitlines()
    last_frame = max((i for i, line in enumerate(lines) if line.startswith("  File ")), default=-1)
    header = re.compile(rf"(?:[\w.<>]+\.)?{re.escape(kind.removeprefix('Guest'))}(?::.*)?")
    if any(header.fullmatch(line) for line in lines[last_frame + 1:]):  # the exception's own line
        return text
    # A limit stopped the run where its traceback ends: say which, as Python names an exception.
    return f"{text}{kind}: the run was stopped by its limit (docs/run-contract.md)\n"


def properties(
    result: Mapping[str, Any], output: Output, millis: int, read_blob: ReadBlob | None = None
) -> dict[str, Any]:
    """The `properties` of the service's answer to one execution."""
    stdout, stderr = output.text("stdout"), output.text("stderr")
    if output.cut:
        stderr += f"wasmrun: the output was cut at {output.most} characters per stream\n"
    failed = result.get("status") != "completed"
    if failed:
        stderr += error_text(result.get("error"))
    value = "" if failed else result_value(chosen_display(result.get("displays")), read_blob)
    return {
        "status": "Failure" if failed else "Success",
        "stdout": stdout,
        "stderr": stderr,
        "result": value,
        "executionTimeInMillis": millis,
    }


def image_blob(result: Mapping[str, Any]) -> str | None:
    """The blob the chosen display keeps its picture in, when too large to inline."""
    display = chosen_display(result.get("displays"))
    data, blobs = (display.get("data") or {}, display.get("blobs") or {}) if display is not None else ({}, {})
    for mime in IMAGES:
        if mime not in data and isinstance(blobs, Mapping) and isinstance(blobs.get(mime), str):
            return str(blobs[mime])
    return None
