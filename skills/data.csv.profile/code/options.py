"""Validation of the skill's JSON args, with messages a caller can act on."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

DEFAULT_TOP_N = 5
MAX_TOP_N = 50
KNOWN_ARGS = ("blob_id", "delimiter", "top_n", "max_rows", "encoding")
# Characters that cannot separate fields because csv gives them another meaning.
FORBIDDEN_DELIMITERS = frozenset({'"', "\r", "\n"})


@dataclass(frozen=True)
class Options:
    blob_id: str
    delimiter: str | None  # None: detect from the header line
    top_n: int
    max_rows: int | None  # None: every row
    encoding: str


def parse_options(args: Any) -> Options:
    if not isinstance(args, dict):
        raise ValueError(f"args must be a JSON object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(KNOWN_ARGS))
    if unknown:
        # Most often a typo; silently ignoring it would hide the caller's intent.
        raise ValueError(f"unknown argument(s) {unknown}; expected some of {list(KNOWN_ARGS)}")
    return Options(
        blob_id=_blob_id(args.get("blob_id")),
        delimiter=_delimiter(args.get("delimiter")),
        top_n=_int(args, "top_n", DEFAULT_TOP_N, 0, MAX_TOP_N),
        max_rows=_optional_int(args, "max_rows", 1),
        encoding=_encoding(args.get("encoding")),
    )


def _blob_id(value: Any) -> str:
    if value is None:
        raise ValueError('missing required argument "blob_id" (e.g. "blob:abc123")')
    if not isinstance(value, str) or not value.startswith("blob:"):
        raise ValueError(f'"blob_id" must be a string like "blob:abc123", got {value!r}')
    return value


def _delimiter(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 1 or value in FORBIDDEN_DELIMITERS:
        raise ValueError(f'"delimiter" must be one character such as "," ";" "\\t" "|", got {value!r}')
    return value


def _int(args: dict[str, Any], key: str, default: int, minimum: int, maximum: int) -> int:
    value = args.get(key)
    if value is None:
        return default
    # bool is an int subclass in Python, but true/false is never a meaningful count.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValueError(f'"{key}" must be an integer from {minimum} to {maximum}, got {value!r}')
    return value


def _optional_int(args: dict[str, Any], key: str, minimum: int) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f'"{key}" must be an integer >= {minimum}, got {value!r}')
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
