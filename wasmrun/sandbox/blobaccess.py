"""What the sandbox needs from blob storage; the blob store implements it."""

from __future__ import annotations

from typing import Protocol


class BlobAccess(Protocol):
    def size(self, blob_id: str) -> int | None:
        """The blob's size in bytes, or None if there is no such blob."""

    def read(self, blob_id: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset`; empty at or past the end, for any offset >= 0."""

    def create(self, data: bytes, kind: str, run_id: str | None = None) -> str:
        """Store a new blob; returns its id. A ValueError when `kind` is not a MIME type."""
