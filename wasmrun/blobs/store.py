"""Blobs as files under one folder, safe to share between processes.

    <root>/<first two hex digits>/<32 hex digits>        the bytes
    <root>/<first two hex digits>/<32 hex digits>.json   owner, kind, size, sha256, created, run
    <root>/.key                                          the store's secret (naming blobs)
    <root>/.usage/<owner>.json                           what each owner stores (for quotas)

Each file is written to a temporary name, fsynced and renamed into place,
and the metadata goes last: a blob exists once its metadata does, so a
reader in another process never sees half a blob. What a killed writer
leaves behind (a `.tmp-*` file, bytes without metadata) is swept at the
server's start (`sweep`), once it is older than any write in progress.

Blobs have an owner (the tenant whose call or run wrote them); a lookup for
another owner's blob finds nothing, exactly like an id that never existed.
Content addressing within an owner: a blob's id is an HMAC, under the store's
secret, of (owner, kind, sha256 of the bytes). The same bytes stored twice by
one owner with one kind are stored once and keep one id; the id says nothing
of the bytes to anyone without the secret, and differs between owners.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Protocol

import msgspec

from wasmrun import tracing
from wasmrun.blobs.kinds import check_kind
from wasmrun.blobs.quota import BlobQuota, BlobQuotaExceeded, charge
from wasmrun.durable import atomic_write, fsync_dir

BLOB_ID = re.compile(r"blob:[0-9a-f]{32}", re.ASCII)
TMP_PREFIX = ".tmp-"
# A write in progress takes well under this; anything older was left by a killed process.
STALE_WRITE_S = 600.0
_DIGITS = re.compile(r"[0-9a-f]{2}", re.ASCII)
_DATA_FILE = re.compile(r"[0-9a-f]{32}", re.ASCII)
COPY_CHUNK = 1 << 20  # what a streamed create reads at a time
UTF8_PIECE = 64 * 1024  # what it checks for UTF-8 at a time

logger = logging.getLogger("wasmrun.blobs")
# Blobs written before blobs had owners belong to the implicit local tenant.
LEGACY_OWNER = "local"
KEY_FILE = ".key"
USAGE_DIR = ".usage"


class BlobInfo(msgspec.Struct, frozen=True):
    blob_id: str
    kind: str
    size_bytes: int
    sha256: str
    created: str  # ISO 8601, UTC
    run_id: str | None  # the run that wrote it, if any
    utf8: bool  # the whole content decodes as UTF-8
    owner: str = LEGACY_OWNER


class Usage(msgspec.Struct):
    bytes: int = 0  # charged bytes (each blob at least BLOB_MIN_CHARGE)
    count: int = 0


class BlobStore(Protocol):
    """What the protocol layer needs; also satisfies the sandbox's `BlobAccess`."""

    def create(
        self, data: bytes, kind: str, run_id: str | None = None, owner: str = LEGACY_OWNER,
        quota: BlobQuota | None = None,
    ) -> str:
        """Raises InvalidKind (a ValueError) for a kind that is not a MIME type."""

    def create_file(
        self, source: BinaryIO, kind: str, run_id: str | None = None, owner: str = LEGACY_OWNER,
        quota: BlobQuota | None = None,
    ) -> str:
        """`create` of the whole of `source` (a seekable binary file, read from its start)
        a chunk at a time, never held whole in memory: the same id, quota and errors."""

    def info(self, blob_id: str, owner: str = LEGACY_OWNER) -> BlobInfo | None: ...

    def size(self, blob_id: str, owner: str = LEGACY_OWNER) -> int | None: ...

    def read(self, blob_id: str, offset: int, length: int, owner: str = LEGACY_OWNER) -> bytes: ...

    def delete(self, blob_id: str, owner: str) -> bool: ...

    def usage(self, owner: str) -> Usage: ...

    def expire(self, ttl_of: Callable[[str], int], now: float | None = None) -> int: ...

    def local_path(self, blob_id: str, owner: str = LEGACY_OWNER) -> Path | None: ...


def is_blob_id(value: str) -> bool:
    return BLOB_ID.fullmatch(value) is not None


def content_blob_id(key: bytes, owner: str, kind: str, sha256: str) -> str:
    """The id of `owner`'s blob of `kind` with these bytes: the same on every store that
    shares `key` (content addressing within a tenant), unguessable without it."""
    message = "\0".join((owner, kind, sha256)).encode("utf-8", "surrogatepass")
    return "blob:" + hmac.new(key, message, hashlib.sha256).hexdigest()[:32]


class Digest:
    """What a blob's metadata says of its bytes, taken a chunk at a time: sha256, size,
    whether the whole decodes as UTF-8."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._utf8: codecs.IncrementalDecoder | None = codecs.getincrementaldecoder("utf-8")()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self._sha.update(chunk)
        self.size += len(chunk)
        if self._utf8 is not None:
            # In small pieces: the decoder's text (up to 4 bytes a byte, dropped at once)
            # then costs a piece's worth of memory, not four chunks'.
            view = memoryview(chunk)
            try:
                for start in range(0, len(view), UTF8_PIECE):
                    self._utf8.decode(view[start:start + UTF8_PIECE])
            except UnicodeDecodeError:
                self._utf8 = None

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    @property
    def utf8(self) -> bool:
        if self._utf8 is None:
            return False
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
        return True


def _owner_file(owner: str) -> str:
    # Owner names are checked by the tenants layer; hashing keeps any name a plain file name.
    return hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class FileBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.root / USAGE_DIR).mkdir(exist_ok=True, mode=0o700)
        self._key = self._load_key()

    def _load_key(self) -> bytes:
        path = self.root / KEY_FILE
        try:
            return path.read_bytes()
        except FileNotFoundError:
            pass
        with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
            atomic_write(path, secrets.token_bytes(32), replace=False)
        return path.read_bytes()

    def blob_id(self, owner: str, kind: str, sha256: str) -> str:
        return content_blob_id(self._key, owner, kind, sha256)

    def _paths(self, blob_id: str) -> tuple[Path, Path] | None:
        # Only well-formed ids ever become paths.
        if not is_blob_id(blob_id):
            return None
        digits = blob_id[5:]
        folder = self.root / digits[:2]
        return folder / digits, folder / f"{digits}.json"

    @contextlib.contextmanager
    def _ledger(self, owner: str) -> Iterator[tuple[Usage, Path]]:
        """The owner's usage, locked against every other process for the block."""
        base = self.root / USAGE_DIR / _owner_file(owner)
        lock = os.open(base.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = base.with_suffix(".json")
            try:
                usage = msgspec.json.decode(path.read_bytes(), type=Usage)
            except (FileNotFoundError, msgspec.DecodeError):
                usage = Usage()
            yield usage, path
        finally:
            os.close(lock)

    def usage(self, owner: str) -> Usage:
        with self._ledger(owner) as (usage, _):
            return usage

    def create(
        self, data: bytes, kind: str, run_id: str | None = None, owner: str = LEGACY_OWNER,
        quota: BlobQuota | None = None,
    ) -> str:
        check_kind(kind)
        digest = Digest()
        digest.update(data)
        return self._store(digest, kind, run_id, owner, quota, lambda path: atomic_write(path, data, sync_dir=False))

    def create_file(
        self, source: BinaryIO, kind: str, run_id: str | None = None, owner: str = LEGACY_OWNER,
        quota: BlobQuota | None = None,
    ) -> str:
        """`create` of the whole of `source`: copied a chunk at a time to a temporary file
        in the store (a `.tmp-` name the start's sweep knows), hashed as it goes, fsynced,
        renamed into place."""
        check_kind(kind)
        source.seek(0)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=TMP_PREFIX)
        try:
            digest = Digest()
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(COPY_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            return self._store(digest, kind, run_id, owner, quota, lambda path: os.replace(tmp, path))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    @tracing.traced("blob.put")
    def _store(
        self, digest: Digest, kind: str, run_id: str | None, owner: str, quota: BlobQuota | None,
        put: Callable[[Path], None],
    ) -> str:
        """The blob of these bytes (`put` writes them, whole and synced, at the path it is
        given), unless `owner` has it already; charged to `owner` under its ledger's lock."""
        blob_id = self.blob_id(owner, kind, digest.sha256)
        paths = self._paths(blob_id)
        assert paths is not None
        data_path, meta_path = paths
        data_path.parent.mkdir(mode=0o700, exist_ok=True)
        info = BlobInfo(
            blob_id=blob_id,
            kind=kind,
            size_bytes=digest.size,
            sha256=digest.sha256,
            created=datetime.now(UTC).isoformat(timespec="milliseconds"),
            run_id=run_id,
            utf8=digest.utf8,
            owner=owner,
        )
        with self._ledger(owner) as (usage, ledger):
            if meta_path.exists():
                # Stored already: the bytes stay as they are; the new metadata restarts its retention.
                atomic_write(meta_path, msgspec.json.encode(info))
                return blob_id
            if quota is not None:
                check_blob_quota(usage, quota, charge(digest.size))
            put(data_path)
            atomic_write(meta_path, msgspec.json.encode(info), sync_dir=False)
            fsync_dir(data_path.parent)
            atomic_write(ledger, msgspec.json.encode(Usage(usage.bytes + charge(digest.size), usage.count + 1)))
        return blob_id

    def info(self, blob_id: str, owner: str = LEGACY_OWNER) -> BlobInfo | None:
        paths = self._paths(blob_id)
        if paths is None:
            return None
        try:
            info = msgspec.json.decode(paths[1].read_bytes(), type=BlobInfo)
        except (FileNotFoundError, msgspec.DecodeError):
            return None
        return info if info.owner == owner else None

    def size(self, blob_id: str, owner: str = LEGACY_OWNER) -> int | None:
        info = self.info(blob_id, owner)
        return None if info is None else info.size_bytes

    def local_path(self, blob_id: str, owner: str = LEGACY_OWNER) -> Path | None:
        """The file holding `owner`'s blob (None when `owner` has no such blob)."""
        paths = self._paths(blob_id)
        if paths is None or self.info(blob_id, owner) is None:
            return None
        return paths[0]

    @tracing.traced("blob.get")
    def read(self, blob_id: str, offset: int, length: int, owner: str = LEGACY_OWNER) -> bytes:
        """Up to `length` bytes from `offset`, empty at or past the end whatever the
        offset; KeyError when `owner` has no such blob (never written, another owner's,
        or deleted meanwhile)."""
        paths = self._paths(blob_id)
        if paths is None or self.info(blob_id, owner) is None:
            raise KeyError(blob_id)
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        try:
            with open(paths[0], "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if offset >= size or length == 0:
                    return b""
                return os.pread(f.fileno(), min(length, size - offset), offset)
        except FileNotFoundError:
            raise KeyError(blob_id) from None

    def sweep(self, older_than_s: float = STALE_WRITE_S) -> int:
        """Remove what killed writers left: temporary files, and bytes whose metadata
        was never written (or metadata whose bytes are gone). Returns how many files went."""
        removed = 0
        cutoff = time.time() - older_than_s
        for folder in [self.root, *self.root.iterdir()]:
            if folder != self.root and not (_DIGITS.fullmatch(folder.name) and folder.is_dir()):
                continue
            names = set(os.listdir(folder))
            for name in names:
                path = folder / name
                if name.startswith(TMP_PREFIX):
                    orphan = True
                elif folder == self.root:
                    continue
                elif _DATA_FILE.fullmatch(name):
                    orphan = f"{name}.json" not in names
                elif name.endswith(".json") and _DATA_FILE.fullmatch(name[:-5]):
                    orphan = name[:-5] not in names  # written last, so its bytes were deleted
                else:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if orphan and path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
        if removed:
            logger.info("removed %d files left in %s by interrupted writes", removed, self.root)
        return removed

    def delete(self, blob_id: str, owner: str) -> bool:
        """Remove `owner`'s blob; False when it has none of that id."""
        paths = self._paths(blob_id)
        if paths is None:
            return False
        data_path, meta_path = paths
        with self._ledger(owner) as (usage, ledger):
            info = self.info(blob_id, owner)
            if info is None:
                return False
            # Metadata first: from here the blob does not exist for any reader.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(meta_path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(data_path)
            fsync_dir(data_path.parent)
            left = Usage(max(0, usage.bytes - charge(info.size_bytes)), max(0, usage.count - 1))
            atomic_write(ledger, msgspec.json.encode(left))
        return True

    def recount(self) -> dict[str, Usage]:
        """Rebuild every owner's usage from the blobs on disk: a process killed between
        writing a blob and its owner's ledger leaves the ledger off. Run at start,
        before any call is served."""
        found: dict[str, Usage] = {}
        for meta_path in self.root.glob("[0-9a-f][0-9a-f]/*.json"):
            try:
                info = msgspec.json.decode(meta_path.read_bytes(), type=BlobInfo)
            except (OSError, msgspec.DecodeError):
                continue
            if not meta_path.with_suffix("").exists():
                continue  # metadata without its bytes is no blob
            usage = found.setdefault(info.owner, Usage())
            usage.bytes += charge(info.size_bytes)
            usage.count += 1
        owners = {p.stem for p in (self.root / USAGE_DIR).glob("*.json")}
        for owner, usage in found.items():
            with self._ledger(owner) as (_, ledger):
                atomic_write(ledger, msgspec.json.encode(usage))
            owners.discard(_owner_file(owner))
        for stale in owners:  # ledgers of owners with no blob left
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / USAGE_DIR / f"{stale}.json")
        return found

    def expire(self, ttl_of: Callable[[str], int], now: float | None = None) -> int:
        """Delete each blob older than its owner's retention, `ttl_of(owner)` seconds
        (0: kept until deleted). Returns how many went."""
        now = time.time() if now is None else now
        deleted = 0
        for meta_path in self.root.glob("[0-9a-f][0-9a-f]/*.json"):
            try:
                info = msgspec.json.decode(meta_path.read_bytes(), type=BlobInfo)
            except (OSError, msgspec.DecodeError):
                continue
            ttl = ttl_of(info.owner)
            if ttl > 0 and datetime.fromisoformat(info.created).timestamp() < now - ttl:
                deleted += self.delete(info.blob_id, info.owner)
        return deleted


def check_blob_quota(usage: Usage, quota: BlobQuota, cost: int) -> None:
    if usage.count + 1 > quota.max_count:
        raise BlobQuotaExceeded("blob_count", quota.max_count, f"the tenant already stores {usage.count} blobs,"
                                f" its limit (blob_count = {quota.max_count}); delete some with delete_blob")
    if usage.bytes + cost > quota.max_bytes:
        raise BlobQuotaExceeded("blob_bytes", quota.max_bytes, f"storing {cost} more bytes would take the tenant"
                                f" over its limit (blob_bytes = {quota.max_bytes}; {usage.bytes} in use, every"
                                " blob counted at least 4096 bytes); delete some with delete_blob")
