"""A blob's kind: a MIME type. One rule for every way a blob is made: create_blob
checks it to name the param, the `blob_write` host call before copying anything
out of the guest, and the store itself for any other writer."""

from __future__ import annotations

import re

MAX_KIND = 255
# type/subtype with optional parameters, e.g. "text/csv; charset=utf-8" (RFC 6838 names,
# ASCII only; a parameter value is any printable ASCII but ';').
_TOKEN = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*"
MIME = re.compile(rf"{_TOKEN}/{_TOKEN}(?:[ \t]*;[ \t]*[A-Za-z0-9!#$&^_.+-]+=[!-:<-~]+)*", re.ASCII)


class InvalidKind(ValueError):
    pass


def is_valid_kind(kind: str) -> bool:
    return len(kind) <= MAX_KIND and MIME.fullmatch(kind) is not None


def check_kind(kind: str) -> str:
    if not is_valid_kind(kind):
        shown = kind if len(kind) <= 80 else kind[:80] + "..."
        raise InvalidKind(f"kind {shown!r} is not a MIME type such as 'text/plain' or 'application/json'")
    return kind
