"""Validation of the skill's JSON args, with messages a caller can act on."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

KNOWN_ARGS = ("blob_id", "text", "top_n", "stopwords", "histogram", "words_per_minute", "encoding")
DEFAULT_TOP_N = 10
MAX_TOP_N = 50
# A common estimate for adult silent reading of non-fiction.
DEFAULT_WORDS_PER_MINUTE = 230


@dataclass(frozen=True)
class Options:
    blob_id: str | None  # exactly one of blob_id and text is set
    text: str | None
    top_n: int
    exclude_stopwords: bool
    histogram: bool
    words_per_minute: int
    encoding: str


def parse_options(args: Any) -> Options:
    if not isinstance(args, dict):
        raise ValueError(f"args must be a JSON object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(KNOWN_ARGS))
    if unknown:
        # Most often a typo; silently ignoring it would hide the caller's intent.
        raise ValueError(f"unknown argument(s) {unknown}; expected some of {list(KNOWN_ARGS)}")
    blob_id, text = args.get("blob_id"), args.get("text")
    if (blob_id is None) == (text is None):
        raise ValueError('pass exactly one of "blob_id" (e.g. "blob:abc123") and "text"')
    if blob_id is not None and (not isinstance(blob_id, str) or not blob_id.startswith("blob:")):
        raise ValueError(f'"blob_id" must be a string like "blob:abc123", got {blob_id!r}')
    if text is not None and not isinstance(text, str):
        raise ValueError(f'"text" must be a string, got {type(text).__name__}')
    return Options(
        blob_id=blob_id,
        text=text,
        top_n=_int(args, "top_n", DEFAULT_TOP_N, 0, MAX_TOP_N),
        exclude_stopwords=_bool(args, "stopwords", True),
        histogram=_bool(args, "histogram", False),
        words_per_minute=_int(args, "words_per_minute", DEFAULT_WORDS_PER_MINUTE, 1, 2000),
        encoding=_encoding(args.get("encoding")),
    )


def _int(args: dict[str, Any], key: str, default: int, minimum: int, maximum: int) -> int:
    value = args.get(key)
    if value is None:
        return default
    # bool is an int subclass in Python, but true/false is never a meaningful count.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f'"{key}" must be an integer from {minimum} to {maximum}, got {value!r}')
    return value


def _bool(args: dict[str, Any], key: str, default: bool) -> bool:
    value = args.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f'"{key}" must be true or false, got {value!r}')
    return value


def _encoding(value: Any) -> str:
    if value is None:
        return "utf-8"
    if not isinstance(value, str):
        raise ValueError(f'"encoding" must be a string such as "utf-8" or "latin-1", got {value!r}')
    try:
        return codecs.lookup(value).name
    except LookupError:
        raise ValueError(f'unknown "encoding" {value!r}; try "utf-8" or "latin-1"') from None
