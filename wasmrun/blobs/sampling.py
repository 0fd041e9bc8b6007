"""Cutting a slice of a blob for a preview without splitting a UTF-8 character."""

from __future__ import annotations

# Kinds whose content is text when it decodes as UTF-8; anything else is sent as base64.
_TEXT_KINDS = {
    "application/json",
    "application/ld+json",
    "application/x-ndjson",
    "application/jsonl",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/toml",
    "application/javascript",
    "application/csv",
    "application/sql",
}


def is_text_kind(kind: str) -> bool:
    mime = kind.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _TEXT_KINDS or mime.endswith(("+json", "+xml"))


def _sequence_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    if lead >> 5 == 0b110:
        return 2
    if lead >> 4 == 0b1110:
        return 3
    return 4


def utf8_head(data: bytes) -> bytes:
    """`data` (a prefix of valid UTF-8) without a character cut off at its end."""
    i = len(data) - 1
    while i >= 0 and len(data) - i < 4 and data[i] & 0xC0 == 0x80:
        i -= 1
    if i < 0:
        return b""
    return data if len(data) - i >= _sequence_length(data[i]) else data[:i]


def utf8_tail(data: bytes) -> bytes:
    """`data` (a suffix of valid UTF-8) without a character cut off at its start."""
    i = 0
    while i < len(data) and i < 3 and data[i] & 0xC0 == 0x80:
        i += 1
    return data[i:]


def text_head(text: str, max_bytes: int) -> str:
    return utf8_head(text.encode("utf-8")[:max_bytes]).decode("utf-8")


def text_tail(text: str, max_bytes: int) -> str:
    encoded = text.encode("utf-8")
    return utf8_tail(encoded[max(0, len(encoded) - max_bytes):]).decode("utf-8")
