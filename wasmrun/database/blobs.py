"""Blobs shared by several servers: metadata, ownership and usage in the database,
bytes in the object store (`--blob-store s3://...`).

The same contract as the file store (blobs/store.py): ids are an HMAC of
(owner, kind, sha256) under one secret every server reads from the database,
so the same bytes stored twice by one owner keep one id; another owner's blob
is not found; quota counters change in the transaction that adds or removes
the blob's row, under a per-owner lock, so a quota holds across servers.

A store opened in a worker process serves its runs: the metadata of a blob it
has looked up is kept (ids are content addresses, so it never changes), and a
read is one ranged GET, never one request per chunk the guest asks for.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import psycopg

from wasmrun import tracing
from wasmrun.blobs.kinds import check_kind
from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation
from wasmrun.blobs.quota import BlobQuota, charge
from wasmrun.blobs.store import COPY_CHUNK, LEGACY_OWNER, BlobInfo, Digest, Usage, check_blob_quota, content_blob_id, is_blob_id
from wasmrun.database import DatabaseError, locks
from wasmrun.database.connection import Database
from wasmrun.database.orphans import BLOB_PREFIX, lock_object

logger = logging.getLogger("wasmrun.database")
INFO_CACHE = 1024  # blob metadata kept per process
READ_AHEAD = 1024 * 1024  # a read fetches at least this much and serves the next reads from it
# How long what was looked up serves later reads: a run's stream of chunk reads, not
# much more (a blob deleted on another server stops being readable here after this).
CACHE_S = 2.0

_COLUMNS = "blob_id, kind, size_bytes, sha256, created, run_id, utf8, owner"


def _info(row: tuple[object, ...]) -> BlobInfo:
    blob_id, kind, size, sha256, created, run_id, utf8, owner = row
    assert isinstance(created, datetime)
    return BlobInfo(
        blob_id=str(blob_id), kind=str(kind), size_bytes=int(str(size)), sha256=str(sha256),
        created=created.astimezone(UTC).isoformat(timespec="milliseconds"),
        run_id=None if run_id is None else str(run_id), utf8=bool(utf8), owner=str(owner),
    )


class SharedBlobStore:
    def __init__(self, database_url: str, blob_store: str) -> None:
        # In a worker process both come with its setup (sandbox/poolworker.WorkerSetup),
        # down its pipe: a password in the URL never shows on a command line.
        self.database = Database(database_url)
        self.objects = ObjectStore(ObjectStoreLocation.parse(blob_store))
        self._key: bytes | None = None
        self._infos: OrderedDict[tuple[str, str], tuple[float, BlobInfo]] = OrderedDict()
        self._chunk: tuple[float, str, int, bytes] | None = None  # (when, blob, offset, bytes) read ahead
        self._lock = threading.Lock()

    # -- ids ------------------------------------------------------------------

    def _secret(self) -> bytes:
        if self._key is None:
            with self.database.connection() as conn:
                conn.execute(
                    "INSERT INTO wasmrun_blob_key (secret) VALUES (%s) ON CONFLICT DO NOTHING",
                    (secrets.token_bytes(32),),
                )
                row = conn.execute("SELECT secret FROM wasmrun_blob_key").fetchone()
            assert row is not None
            self._key = bytes(row[0])
        return self._key

    def blob_id(self, owner: str, kind: str, sha256: str) -> str:
        return content_blob_id(self._secret(), owner, kind, sha256)

    @staticmethod
    def _object(blob_id: str) -> str:
        return BLOB_PREFIX + blob_id[5:]

    # -- the BlobStore contract -------------------------------------------------

    def create(
        self, data: bytes, kind: str, run_id: str | None = None, owner: str = LEGACY_OWNER,
        quota: BlobQuota | None = None,
    ) -> str:
        check_kind(kind)
        digest = Digest()
        digest.update(data)
        return self._store(digest, kind, run_id, owner, quota, lambda name: self.objects.put(name, data))

    def create_file(
        self, source: BinaryIO, kind: str, run_id: str | None = None, owner: str = LEGACY_OWNER,
        quota: BlobQuota | None = None,
    ) -> str:
        """`create` of the whole of `source` (a seekable file, read from its start): hashed a
        chunk at a time, then streamed to the object store (boto3 reads it in blocks)."""
        check_kind(kind)
        digest = Digest()
        source.seek(0)
        while chunk := source.read(COPY_CHUNK):
            digest.update(chunk)

        def put(name: str) -> None:
            source.seek(0)
            self.objects.put_stream(name, source, digest.size)

        return self._store(digest, kind, run_id, owner, quota, put)

    @tracing.traced("blob.put")
    def _store(
        self, digest: Digest, kind: str, run_id: str | None, owner: str, quota: BlobQuota | None,
        put: Callable[[str], None],
    ) -> str:
        """The blob of these bytes (`put` stores them as the object it is given), unless
        `owner` has it already; its row and usage in one transaction under the owner's lock."""
        blob_id = self.blob_id(owner, kind, digest.sha256)
        now = datetime.now(UTC)
        with self.database.transaction() as conn:
            # One change at a time per owner, from any server: the usage row stays exact.
            locks.hold(conn, locks.BLOBS_OF_OWNER, owner)
            found = conn.execute(
                "UPDATE wasmrun_blobs SET created = %s, run_id = %s WHERE blob_id = %s RETURNING blob_id",
                (now, run_id, blob_id),
            ).fetchone()
            if found is not None:  # stored already: its retention restarts, as with files
                return blob_id
            row = conn.execute("SELECT bytes, count FROM wasmrun_blob_usage WHERE owner = %s", (owner,)).fetchone()
            usage = Usage(int(row[0]), int(row[1])) if row else Usage()
            if quota is not None:
                check_blob_quota(usage, quota, charge(digest.size))
            # The bytes before the row (committed after them): a row always has its bytes.
            # The object's lock until then keeps the orphan sweep (database/orphans.py) off them.
            lock_object(conn, self._object(blob_id))
            put(self._object(blob_id))
            conn.execute(
                f"INSERT INTO wasmrun_blobs ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (blob_id, kind, digest.size, digest.sha256, now, run_id, digest.utf8, owner),
            )
            conn.execute(
                "INSERT INTO wasmrun_blob_usage (owner, bytes, count) VALUES (%s, %s, 1)"
                " ON CONFLICT (owner) DO UPDATE SET bytes = wasmrun_blob_usage.bytes + EXCLUDED.bytes,"
                " count = wasmrun_blob_usage.count + 1",
                (owner, charge(digest.size)),
            )
        return blob_id

    def info(self, blob_id: str, owner: str = LEGACY_OWNER) -> BlobInfo | None:
        if not is_blob_id(blob_id):
            return None
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM wasmrun_blobs WHERE blob_id = %s AND owner = %s", (blob_id, owner)
            ).fetchone()
        return None if row is None else _info(row)

    def _cached_info(self, blob_id: str, owner: str) -> BlobInfo | None:
        now = time.monotonic()
        with self._lock:
            cached = self._infos.get((blob_id, owner))
            if cached is not None and now - cached[0] < CACHE_S:
                return cached[1]
        info = self.info(blob_id, owner)
        if info is not None:
            with self._lock:
                self._infos[(blob_id, owner)] = (now, info)
                self._infos.move_to_end((blob_id, owner))
                while len(self._infos) > INFO_CACHE:
                    self._infos.popitem(last=False)
        return info

    def size(self, blob_id: str, owner: str = LEGACY_OWNER) -> int | None:
        info = self._cached_info(blob_id, owner)
        return None if info is None else info.size_bytes

    def local_path(self, blob_id: str, owner: str = LEGACY_OWNER) -> Path | None:
        """No host file holds a shared blob: a run's /blobs gets a copy, read in ranges."""
        return None

    @tracing.traced("blob.get")
    def read(self, blob_id: str, offset: int, length: int, owner: str = LEGACY_OWNER) -> bytes:
        info = self._cached_info(blob_id, owner)
        if info is None:
            raise KeyError(blob_id)
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        if offset >= info.size_bytes or length == 0:
            return b""
        length = min(length, info.size_bytes - offset)
        now = time.monotonic()
        with self._lock:
            chunk = self._chunk
        if chunk is not None and now - chunk[0] < CACHE_S and chunk[1] == blob_id:
            start = offset - chunk[2]
            if 0 <= start and offset + length <= chunk[2] + len(chunk[3]):
                return chunk[3][start:start + length]
        fetched = self.objects.read(self._object(blob_id), offset, max(length, READ_AHEAD))
        with self._lock:
            self._chunk = (now, blob_id, offset, fetched)
        return fetched[:length]

    def delete(self, blob_id: str, owner: str) -> bool:
        if not is_blob_id(blob_id):
            return False
        with self.database.transaction() as conn:
            locks.hold(conn, locks.BLOBS_OF_OWNER, owner)
            row = conn.execute(
                "DELETE FROM wasmrun_blobs WHERE blob_id = %s AND owner = %s RETURNING size_bytes", (blob_id, owner)
            ).fetchone()
            if row is None:
                return False
            conn.execute(
                "UPDATE wasmrun_blob_usage SET bytes = greatest(0, bytes - %s), count = greatest(0, count - 1)"
                " WHERE owner = %s",
                (charge(int(row[0])), owner),
            )
            # Still under the owner's lock: a create of the same bytes waits, then stores them again.
            try:
                self.objects.delete(self._object(blob_id))
            except Exception as exc:  # the row is gone, so the blob is; the bytes are only unreachable
                logger.error("cannot delete the bytes of a deleted blob: %s", exc)
        with self._lock:
            self._infos.pop((blob_id, owner), None)
            if self._chunk is not None and self._chunk[1] == blob_id:
                self._chunk = None
        return True

    def usage(self, owner: str) -> Usage:
        with self.database.connection() as conn:
            row = conn.execute("SELECT bytes, count FROM wasmrun_blob_usage WHERE owner = %s", (owner,)).fetchone()
        return Usage(int(row[0]), int(row[1])) if row else Usage()

    def expire(self, ttl_of: Callable[[str], int], now: float | None = None) -> int:
        moment = datetime.fromtimestamp(now, UTC) if now is not None else datetime.now(UTC)
        deleted = 0
        try:
            with self.database.connection() as conn:
                owners = [str(r[0]) for r in conn.execute("SELECT DISTINCT owner FROM wasmrun_blobs").fetchall()]
            for owner in owners:
                ttl = ttl_of(owner)
                if ttl <= 0:
                    continue
                with self.database.connection() as conn:
                    stale = conn.execute(
                        "SELECT blob_id FROM wasmrun_blobs WHERE owner = %s AND created < %s - make_interval(secs => %s)",
                        (owner, moment, ttl),
                    ).fetchall()
                deleted += sum(self.delete(str(r[0]), owner) for r in stale)
        except (psycopg.Error, DatabaseError) as exc:
            logger.error("cannot expire blobs: %s", exc)
        return deleted
