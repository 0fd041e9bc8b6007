"""Load a blob as a JSON document (or JSON Lines, read as an array)."""

from __future__ import annotations

import json
from typing import Any

from runtime import blobs


def load_document(blob_id: str) -> Any:
    try:
        raw = blobs.read_bytes(blob_id)
    except KeyError:
        # The runtime only lets a run read blobs it was given.
        raise ValueError(
            f"blob {blob_id} was not found or not mounted in this run; list it in input_blobs"
        ) from None
    try:
        # RFC 8259 JSON is UTF-8, but UTF-16/32 and byte-order marks are cheap to accept.
        text = raw.decode(json.detect_encoding(raw))
    except UnicodeDecodeError as exc:
        raise ValueError(f"blob {blob_id} is not UTF-8 text (bad byte at {exc.start})") from None
    if not text.strip():
        raise ValueError(f"blob {blob_id} is empty, not JSON")
    try:
        return _loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise ValueError(f"blob {blob_id} is not valid JSON: {exc}") from None
    return _load_lines(blob_id, text)


def _load_lines(blob_id: str, text: str) -> list[Any]:
    """JSON Lines: one value per non-blank line."""
    values = []
    # Not str.splitlines: JSON strings may hold a raw U+2028, which it would split on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            values.append(_loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"blob {blob_id} is neither JSON nor JSON Lines: line {number}: {exc.msg}"
            ) from None
    return values


def _loads(text: str) -> Any:
    # Python accepts NaN/Infinity, but they are not JSON and the run's output
    # could not carry them back.
    return json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON; the blob must not contain it")
