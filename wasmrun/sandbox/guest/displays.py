"""Display results the guest shows (python_wasm/runtime/_display.py): its word,
checked before the run keeps it, streams it or returns it.

A display arrives as one JSON frame (the `log` host call at abi.DISPLAY_LEVEL):
{"data": {mime: form}, "main": bool, "blobs": {mime: blob id}}. A hostile guest
may send anything there, so a frame is kept only when it is small (MAX_DISPLAY_BYTES),
plain JSON (jsontext's checks: depth, containers, numbers), its MIME types are
MIME-shaped, its images valid base64, its text forms strings, and its blobs ones
this run wrote. A run keeps at most MAX_DISPLAYS displays and RUN_DISPLAY_BYTES of
them; what is dropped is said once in the run's warnings, never an error.
"""

from __future__ import annotations

import binascii
import re
from typing import Any

import msgspec

from wasmrun.abi import MAX_DISPLAY_BYTES, MAX_DISPLAYS
from wasmrun.sandbox.contract.types import Display
from wasmrun.sandbox.guest import jsontext

RUN_DISPLAY_BYTES = 8 * MAX_DISPLAY_BYTES  # all of one run's displays
MAX_FORMS = 16  # MIME forms in one display
# RFC 6838's restricted names, lower case: what a consumer may use as a key or a content type.
MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\Z")
BASE64_FORMS = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class _Frame(msgspec.Struct, forbid_unknown_fields=True):
    data: dict[str, Any] = {}
    main: bool = False
    blobs: dict[str, str] = {}


_decoder = msgspec.json.Decoder(_Frame)


def is_json_form(mime: str) -> bool:
    return mime == "application/json" or mime.endswith("+json")


def _form_problem(mime: str, value: Any) -> str | None:
    if not MIME.match(mime):
        return f"{mime[:80]!r} is not a MIME type"
    if is_json_form(mime):
        return None
    if not isinstance(value, str):
        return f"its {mime} form is not text"
    if mime in BASE64_FORMS:
        try:
            binascii.a2b_base64(value, strict_mode=True)
        except (binascii.Error, ValueError):
            return f"its {mime} form is not base64"
    return None


def check(frame: bytes, written_blobs: list[str]) -> Display | str:
    """The display in `frame`, or why it is dropped."""
    if len(frame) > MAX_DISPLAY_BYTES:
        return f"it is larger than {MAX_DISPLAY_BYTES} bytes"
    problem = jsontext.output_problem(frame)
    if problem is not None:
        return problem
    try:
        shown = _decoder.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        return f"it is not a display: {exc}"
    if len(shown.data) + len(shown.blobs) > MAX_FORMS:
        return f"it has more than {MAX_FORMS} forms"
    for mime, value in shown.data.items():
        problem = _form_problem(mime, value)
        if problem is not None:
            return problem
    for mime, blob_id in shown.blobs.items():
        if not MIME.match(mime):
            return f"{mime[:80]!r} is not a MIME type"
        if blob_id not in written_blobs:
            return f"its {mime} blob is not one the run wrote"
    return Display(data=shown.data, main=shown.main, blobs=shown.blobs)


class Displays:
    """One run's displays, as they come."""

    def __init__(self) -> None:
        self.shown: list[Display] = []
        self.bytes = 0
        self.dropped: list[str] = []
        self.dropped_count = 0

    def add(self, frame: bytes, written_blobs: list[str]) -> Display | None:
        """Keep the display in `frame` (returned), or count it as dropped (None)."""
        if len(self.shown) >= MAX_DISPLAYS:
            found: Display | str = f"the run showed more than {MAX_DISPLAYS}"
        elif self.bytes + len(frame) > RUN_DISPLAY_BYTES:
            found = f"the run's displays passed {RUN_DISPLAY_BYTES} bytes"
        else:
            found = check(frame, written_blobs)
        if isinstance(found, str):
            self._drop(found)
            return None
        self.bytes += len(frame)
        self.shown.append(found)
        return found

    def _drop(self, why: str) -> None:
        self.dropped_count += 1
        if why not in self.dropped and len(self.dropped) < 3:
            self.dropped.append(why)
        return None

    def warnings(self) -> list[str]:
        if not self.dropped_count:
            return []
        n = self.dropped_count
        return [f"{n} display{'s were' if n != 1 else ' was'} dropped: {'; '.join(self.dropped)}"]
