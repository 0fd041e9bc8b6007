"""How much blob storage a write may use: the owner's limits, carried with a run
to the worker process that writes its blobs."""

from __future__ import annotations

import msgspec

# Every blob costs at least this much against a byte quota: an empty write is not free
# (each one is two files and two directory entries on disk).
BLOB_MIN_CHARGE = 4096


class BlobQuota(msgspec.Struct, frozen=True):
    max_bytes: int  # total charged bytes the owner may store
    max_count: int  # blobs the owner may store
    max_per_run: int = 1_000  # blobs one run may write


def charge(size: int) -> int:
    return max(size, BLOB_MIN_CHARGE)


class BlobQuotaExceeded(Exception):
    """A write that would take the owner over a limit; nothing was stored."""

    def __init__(self, limit: str, value: int, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.message = message
