"""Blobs from inside a run.

Reads see only the blobs this run was given (`input_blobs`) and the ones it
wrote itself. Every blob written here is listed in the run's `output_blobs`.
Bytes moved through these calls count against the run's transfer budget.
"""

from __future__ import annotations

import json

import _wasmrun

__all__ = [
    "BlobNotFound",
    "read_bytes",
    "read_json",
    "read_text",
    "size",
    "write_bytes",
    "write_json",
    "write_text",
]

_CHUNK = 1 << 20


class BlobNotFound(KeyError):
    """The blob does not exist or was not mounted in this run."""


def _call(fn, *args):
    try:
        return fn(*args)
    except KeyError:
        raise BlobNotFound(args[0]) from None


def size(blob_id: str) -> int:
    """Size of the blob in bytes."""
    return _call(_wasmrun.blob_size, blob_id)


def read_bytes(blob_id: str, offset: int = 0, length: int | None = None) -> bytes:
    """The blob's bytes, or `length` bytes from `offset` (fewer at the end)."""
    total = size(blob_id)
    end = total if length is None else min(total, offset + length)
    parts = []
    pos = offset
    while pos < end:
        chunk = _call(_wasmrun.blob_read, blob_id, pos, min(_CHUNK, end - pos))
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
    return b"".join(parts)


def read_text(blob_id: str, encoding: str = "utf-8") -> str:
    """The whole blob decoded as text."""
    return read_bytes(blob_id).decode(encoding)


def read_json(blob_id: str):
    """The whole blob parsed as JSON."""
    return json.loads(read_bytes(blob_id))


def write_bytes(data: bytes, kind: str = "application/octet-stream") -> str:
    """Store `data` as a new blob; returns its id (`blob:...`)."""
    return _wasmrun.blob_write(bytes(data), kind)


def write_text(content: str, kind: str = "text/plain") -> str:
    """Store text (UTF-8) as a new blob; returns its id."""
    if not isinstance(content, str):
        raise TypeError(f"write_text() takes a str, not {type(content).__name__}")
    return _wasmrun.blob_write(content.encode("utf-8"), kind)


def write_json(obj, kind: str = "application/json") -> str:
    """Store `obj` serialised as JSON; returns its id."""
    return _wasmrun.blob_write(json.dumps(obj, ensure_ascii=False).encode("utf-8"), kind)
