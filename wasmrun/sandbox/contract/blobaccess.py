"""What the sandbox needs from blob storage; the blob store implements it.

Every call names the owner (the tenant the run belongs to): another owner's
blob is "no such blob" to it."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from wasmrun.blobs.quota import BlobQuota


class BlobAccess(Protocol):
    def size(self, blob_id: str, owner: str = ...) -> int | None:
        """The blob's size in bytes, or None if `owner` has no such blob."""

    def read(self, blob_id: str, offset: int, length: int, owner: str = ...) -> bytes:
        """Up to `length` bytes from `offset`, empty at or past the end for any offset >= 0;
        KeyError if `owner` has no such blob."""

    def create(
        self, data: bytes, kind: str, run_id: str | None = None, owner: str = ..., quota: BlobQuota | None = None
    ) -> str:
        """Store a new blob; returns its id. BlobQuotaExceeded when over `quota`; a
        ValueError when `kind` is not a MIME type."""

    def local_path(self, blob_id: str, owner: str = ...) -> Path | None:
        """A host file holding exactly `owner`'s blob (hard-linked into a run's
        /blobs), or None if there is none (the bytes are copied)."""
