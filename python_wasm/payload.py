"""The guest inside a one-file executable (scripts/onefile.py): appended to the
executable as a zip after everything PyInstaller wrote, and unpacked once into
the cache, so that later starts unpack nothing of it.

PyInstaller's own archive is unpacked to a temporary folder on every start;
the guest and its compiled code (about 100 MB) are kept out of it for that reason.

    <PyInstaller executable> <zip> <sha256 of the zip: 32 bytes> <zip length: 8 bytes> MAGIC
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
import tempfile
import zipfile
from pathlib import Path

MAGIC = b"WASMRUN-GUEST-01"
TRAILER = struct.Struct(">32sQ16s")


def append(executable: Path, archive: Path, digest: bytes) -> None:
    """Append `archive` (a zip of the packaged guest folder) to `executable`."""
    size = archive.stat().st_size
    with open(executable, "ab") as out, open(archive, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
        out.write(TRAILER.pack(digest, size, MAGIC))


def _trailer(executable: Path) -> tuple[bytes, int, int] | None:
    """(digest, offset, length) of the appended zip, or None when there is none."""
    with open(executable, "rb") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        if end < TRAILER.size:
            return None
        f.seek(end - TRAILER.size)
        digest, length, magic = TRAILER.unpack(f.read(TRAILER.size))
    if magic != MAGIC or length > end - TRAILER.size:
        return None
    return digest, end - TRAILER.size - length, length


class _Slice:
    """The appended zip as a file of its own (zipfile seeks relative to its start)."""

    def __init__(self, f: object, offset: int, length: int) -> None:
        self.f, self.offset, self.length, self.pos = f, offset, length, 0

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = {0: pos, 1: self.pos + pos, 2: self.length + pos}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.length - self.pos if n < 0 else min(n, self.length - self.pos)
        self.f.seek(self.offset + self.pos)  # type: ignore[attr-defined]
        data: bytes = self.f.read(n)  # type: ignore[attr-defined]
        self.pos += len(data)
        return data

    def seekable(self) -> bool:
        return True


def _check_private(path: Path) -> None:
    """Refuse a folder another user could have written: its compiled code is loaded as is."""
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"{path} is writable by others or not ours: remove it")


def unpack(executable: Path, cache: Path) -> Path | None:
    """The folder holding the executable's guest, unpacked under `cache` on the
    first start (all or nothing: into a temporary folder, then renamed); None when
    `executable` carries none."""
    found = _trailer(executable)
    if found is None:
        return None
    digest, offset, length = found
    folder = cache / "onefile" / digest.hex()[:20]
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_private(folder.parent)
    if (folder / "manifest.json").is_file():
        _check_private(folder)
        return folder
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".unpack-"))
    try:
        with open(executable, "rb") as f, zipfile.ZipFile(_Slice(f, offset, length)) as zf:  # type: ignore[arg-type]
            for name in zf.namelist():
                if name.startswith("/") or ".." in Path(name).parts:
                    raise ValueError(f"bad member {name!r} in the appended guest")
            zf.extractall(tmp)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process unpacked it first
            if not (folder / "manifest.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
