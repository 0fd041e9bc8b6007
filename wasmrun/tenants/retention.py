"""Blob retention: each tenant's blobs older than its `blob_ttl_s` are deleted,
by a sweep every minute in the server process (`--blob-ttl` sets the default)."""

from __future__ import annotations

import logging
import threading

from wasmrun.blobs.store import BlobStore
from wasmrun.tenants.store import TenantDirectory

SWEEP_EVERY_S = 60.0
logger = logging.getLogger("wasmrun.retention")


class BlobRetention:
    def __init__(self, blobs: BlobStore, tenants: TenantDirectory, local_ttl_s: int) -> None:
        self.blobs = blobs
        self.tenants = tenants
        self.local_ttl_s = local_ttl_s  # the implicit local tenant's
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ttl_of(self, owner: str) -> int:
        caller = self.tenants.caller(owner)
        return caller.limits.blob_ttl_s if caller is not None else self.local_ttl_s

    def sweep(self, now: float | None = None) -> int:
        return self.blobs.expire(self.ttl_of, now)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="wasmrun-blob-retention", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SWEEP_EVERY_S):
            try:
                if gone := self.sweep():
                    logger.info("retention deleted %d expired blobs", gone)
            except Exception:  # a bad sweep must not end retention for good
                logger.exception("blob retention sweep failed")

    def stop(self) -> None:
        self._stop.set()
