"""What the sandbox needs from blob storage; the blob store implements it."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class BlobAccess(Protocol):
    def size(self, blob_id: str) -> int | None:
        """The blob's size in bytes, or None if there is no such blob."""

    def read(self, blob_id: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset`."""

    def create(self, data: bytes, kind: str, run_id: str | None = None) -> str:
        """Store a new blob; returns its id."""

    def local_path(self, blob_id: str) -> Path | None:
        """A host file holding exactly the blob's bytes (hard-linked into a
        run's /blobs), or None if there is none (the bytes are copied)."""
