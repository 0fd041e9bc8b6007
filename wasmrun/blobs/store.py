"""Blobs as files under one folder, safe to share between processes.

    <root>/<first two hex digits>/<32 hex digits>        the bytes
    <root>/<first two hex digits>/<32 hex digits>.json   kind, size, sha256, created, run

Each file is written to a temporary name, fsynced and renamed into place,
and the metadata goes last: a blob exists once its metadata does, so a
reader in another process never sees half a blob.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import msgspec

from wasmrun.durable import fsync_dir

BLOB_ID = re.compile(r"blob:[0-9a-f]{32}")


class BlobInfo(msgspec.Struct, frozen=True):
    blob_id: str
    kind: str
    size_bytes: int
    sha256: str
    created: str  # ISO 8601, UTC
    run_id: str | None  # the run that wrote it, if any
    utf8: bool  # the whole content decodes as UTF-8


class BlobStore(Protocol):
    """What the protocol layer needs; also satisfies the sandbox's `BlobAccess`."""

    def create(self, data: bytes, kind: str, run_id: str | None = None) -> str: ...

    def info(self, blob_id: str) -> BlobInfo | None: ...

    def size(self, blob_id: str) -> int | None: ...

    def read(self, blob_id: str, offset: int, length: int) -> bytes: ...

    def local_path(self, blob_id: str) -> Path | None: ...


def is_blob_id(value: str) -> bool:
    return BLOB_ID.fullmatch(value) is not None


class FileBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _paths(self, blob_id: str) -> tuple[Path, Path] | None:
        # Only well-formed ids ever become paths.
        if not is_blob_id(blob_id):
            return None
        digits = blob_id[5:]
        folder = self.root / digits[:2]
        return folder / digits, folder / f"{digits}.json"

    def create(self, data: bytes, kind: str, run_id: str | None = None) -> str:
        blob_id = "blob:" + secrets.token_hex(16)
        paths = self._paths(blob_id)
        assert paths is not None
        data_path, meta_path = paths
        data_path.parent.mkdir(mode=0o700, exist_ok=True)
        try:
            data.decode("utf-8")
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        info = BlobInfo(
            blob_id=blob_id,
            kind=kind,
            size_bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created=datetime.now(UTC).isoformat(timespec="milliseconds"),
            run_id=run_id,
            utf8=utf8,
        )
        _write_atomically(data_path, data)
        _write_atomically(meta_path, msgspec.json.encode(info))
        fsync_dir(data_path.parent)
        return blob_id

    def info(self, blob_id: str) -> BlobInfo | None:
        paths = self._paths(blob_id)
        if paths is None:
            return None
        try:
            return msgspec.json.decode(paths[1].read_bytes(), type=BlobInfo)
        except FileNotFoundError:
            return None

    def size(self, blob_id: str) -> int | None:
        info = self.info(blob_id)
        return None if info is None else info.size_bytes

    def local_path(self, blob_id: str) -> Path | None:
        paths = self._paths(blob_id)
        if paths is None or not paths[1].exists():
            return None
        return paths[0]

    def read(self, blob_id: str, offset: int, length: int) -> bytes:
        paths = self._paths(blob_id)
        if paths is None or not paths[1].exists():
            raise KeyError(blob_id)
        with open(paths[0], "rb") as f:
            f.seek(offset)
            return f.read(length)


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
