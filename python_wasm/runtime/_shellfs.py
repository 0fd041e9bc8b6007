"""The shell's filesystem: just-bash's `IFileSystem` over the run's real files.

just-bash ships a real-filesystem class (`ReadWriteFs`), but it reads and writes
through `aiofiles`, which hands every call to a thread pool, and the guest has no
threads. This one makes plain `os` calls inside the coroutines (nothing here ever
waits on anything, so there is nothing to gain from yielding).

Paths are the guest's own (`/workspace`, `/home/user`, `/skills`, `/tmp`): no root
folder is prefixed, so a path an agent prints is the path a later run opens. What
the sandbox refuses (writing under `/skills`, a link out of the preopened folders)
comes back as the OSError WASI gave, re-worded the way just-bash's commands expect
(`ENOENT: no such file or directory, open '/x'`: several of its commands look for
the code's name in the text, and a few print it).

Text is UTF-8 with `surrogateescape`: a file that is not valid UTF-8 (a gzip, a
Latin-1 export) reads into a string and writes back byte for byte.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as stat_module
from dataclasses import dataclass

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import FsStat
# isort: on


ENCODING_ERRORS = "surrogateescape"
# WASI has no permission bits (st_mode & 0o777 is 0 for every file), so the shell is shown
# these; a `chmod` is remembered for the rest of the run (or session) in `_modes`.
DIR_MODE = 0o755
FILE_MODE = 0o644
# /dev is not mounted in the sandbox; /dev/null is the one device scripts rely on
# (`cmd > /dev/null`, `< /dev/null`): reads are empty and writes are dropped.
DEV_NULL = "/dev/null"
# Bound on a single file read into the shell (its commands hold whole files as strings):
# past it, EFBIG instead of a run that dies of memory. The run's own memory limit stays
# the real bound; this keeps the error a readable one.
MAX_READ_BYTES = 256 << 20

_modes: dict[str, int] = {}


@dataclass
class DirentEntry:
    """One directory entry, as just-bash's `readdir_with_file_types` returns them."""

    name: str
    is_file: bool = False
    is_directory: bool = False
    is_symbolic_link: bool = False


def _code(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, "EIO")


def _reworded(err: OSError, op: str, path: str) -> OSError:
    """`err` as just-bash's filesystems word theirs: the same OSError subclass (commands
    catch FileNotFoundError, IsADirectoryError, ...), the code's name first."""
    reason = (err.strerror or str(err)).lower()
    new = type(err)(f"{_code(err)}: {reason}, {op} '{path}'")
    new.errno = err.errno
    return new


def _error(kind: type[OSError], number: int, op: str, path: str) -> OSError:
    new = kind(f"{errno.errorcode[number]}: {os.strerror(number).lower()}, {op} '{path}'")
    new.errno = number
    return new


def normalize(path: str) -> str:
    """An absolute, `.`/`..`-free form of `path` (lexically, as just-bash's own do)."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    out = posixpath.normpath(path)
    # normpath keeps a leading `//` (POSIX allows it to mean something else); we do not.
    return "/" + out.lstrip("/")


def _decode(data: bytes, encoding: str) -> str:
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
        return data.decode("utf-8", ENCODING_ERRORS)
    return data.decode(encoding, "replace")


def _encode(content: str | bytes, encoding: str) -> bytes:
    if isinstance(content, bytes):
        return content
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
        return content.encode("utf-8", ENCODING_ERRORS)
    if encoding in ("binary", "latin1", "latin-1"):
        return content.encode("latin-1", "replace")
    return content.encode(encoding, "replace")


class RealFs:
    """just-bash's IFileSystem over `os` calls on the guest's own paths."""

    def resolve_path(self, base: str, path: str) -> str:
        if path.startswith("/"):
            return normalize(path)
        return normalize(f"{base}/{path}")

    def join(self, *parts: str) -> str:
        return normalize(posixpath.join(*parts)) if parts else "/"

    # -- reading -----------------------------------------------------------------

    async def read_file_bytes(self, path: str) -> bytes:
        real = normalize(path)
        if real == DEV_NULL:
            return b""
        try:
            with open(real, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_READ_BYTES:
                    raise _error(OSError, errno.EFBIG, "read", path)
                # read() sizes its buffer from the file's size; a bound passed to it would
                # be allocated whole.
                data = f.read()
        except IsADirectoryError:
            raise _error(IsADirectoryError, errno.EISDIR, "read", path) from None
        except OSError as err:
            if err.errno == errno.EFBIG:
                raise
            raise _reworded(err, "open", path) from None
        if len(data) > MAX_READ_BYTES:  # a file that grew, or one whose size says nothing
            raise _error(OSError, errno.EFBIG, "read", path)
        return data

    async def read_file(self, path: str, encoding: str = "utf-8") -> str:
        return _decode(await self.read_file_bytes(path), encoding)

    async def exists(self, path: str) -> bool:
        real = normalize(path)
        return real == DEV_NULL or os.path.exists(real)

    async def is_file(self, path: str) -> bool:
        return os.path.isfile(normalize(path))

    async def is_directory(self, path: str) -> bool:
        return os.path.isdir(normalize(path))

    def _fsstat(self, real: str, st: os.stat_result) -> FsStat:
        mode = stat_module.S_IMODE(st.st_mode)
        is_dir = stat_module.S_ISDIR(st.st_mode)
        if not mode:
            mode = _modes.get(real, DIR_MODE if is_dir else FILE_MODE)
        return FsStat(
            is_file=stat_module.S_ISREG(st.st_mode),
            is_directory=is_dir,
            is_symbolic_link=stat_module.S_ISLNK(st.st_mode),
            mode=mode,
            size=st.st_size,
            mtime=st.st_mtime,
            nlink=st.st_nlink,
        )

    async def stat(self, path: str) -> FsStat:
        real = normalize(path)
        if real == DEV_NULL:
            return FsStat(mode=0o666)
        try:
            return self._fsstat(real, os.stat(real))
        except OSError as err:
            raise _reworded(err, "stat", path) from None

    async def lstat(self, path: str) -> FsStat:
        real = normalize(path)
        if real == DEV_NULL:
            return FsStat(mode=0o666)
        try:
            return self._fsstat(real, os.lstat(real))
        except OSError as err:
            raise _reworded(err, "lstat", path) from None

    async def readdir_with_file_types(self, path: str) -> list[DirentEntry]:
        real = normalize(path)
        entries: list[DirentEntry] = []
        try:
            with os.scandir(real) as it:
                for entry in it:
                    try:
                        is_link = entry.is_symlink()
                        entries.append(DirentEntry(entry.name, entry.is_file(), entry.is_dir(), is_link))
                    except OSError:  # a link out of the sandbox: listed, never followed
                        entries.append(DirentEntry(entry.name, False, False, True))
        except OSError as err:
            raise _reworded(err, "scandir", path) from None
        entries.sort(key=lambda e: e.name)
        return entries

    async def readdir(self, path: str) -> list[str]:
        return [e.name for e in await self.readdir_with_file_types(path)]

    async def readlink(self, path: str) -> str:
        try:
            return os.readlink(normalize(path))
        except OSError as err:
            raise _reworded(err, "readlink", path) from None

    async def realpath(self, path: str) -> str:
        real = normalize(path)
        if not os.path.lexists(real):
            raise _error(FileNotFoundError, errno.ENOENT, "realpath", path)
        return os.path.realpath(real)

    # -- writing -----------------------------------------------------------------

    def _write(self, path: str, data: bytes, mode: str) -> None:
        real = normalize(path)
        if real == DEV_NULL:
            return
        try:
            parent = posixpath.dirname(real)
            if parent and not os.path.isdir(parent):
                os.makedirs(parent, exist_ok=True)  # as just-bash's own filesystems do
            with open(real, mode) as f:
                f.write(data)
        except OSError as err:
            raise _reworded(err, "open", path) from None

    async def write_file(self, path: str, content: str | bytes, encoding: str = "utf-8") -> None:
        self._write(path, _encode(content, encoding), "wb")

    async def append_file(self, path: str, content: str | bytes, encoding: str = "utf-8") -> None:
        self._write(path, _encode(content, encoding), "ab")

    async def mkdir(self, path: str, recursive: bool = False) -> None:
        real = normalize(path)
        if os.path.isdir(real):
            if not recursive:
                raise _error(FileExistsError, errno.EEXIST, "mkdir", path)
            return
        if os.path.lexists(real):
            raise _error(FileExistsError, errno.EEXIST, "mkdir", path)
        try:
            if recursive:
                os.makedirs(real, exist_ok=True)
            else:
                os.mkdir(real)
        except OSError as err:
            raise _reworded(err, "mkdir", path) from None

    async def rm(self, path: str, recursive: bool = False, force: bool = False) -> None:
        real = normalize(path)
        if real in ("/", DEV_NULL):
            raise _error(PermissionError, errno.EPERM, "rm", path)
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            if force:
                return
            raise _error(FileNotFoundError, errno.ENOENT, "rm", path) from None
        except OSError as err:
            raise _reworded(err, "rm", path) from None
        try:
            if stat_module.S_ISDIR(st.st_mode):
                if recursive:
                    _remove_tree(real)
                else:
                    os.rmdir(real)
            else:
                os.unlink(real)
        except OSError as err:
            raise _reworded(err, "rm", path) from None
        _modes.pop(real, None)

    async def cp(self, src: str, dest: str, recursive: bool = False) -> None:
        import shutil

        s, d = normalize(src), normalize(dest)
        try:
            if os.path.isdir(s):
                if not recursive:
                    raise _error(IsADirectoryError, errno.EISDIR, "cp", src)
                shutil.copytree(s, d, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copyfile(s, d, follow_symlinks=True)
        except shutil.Error as err:
            raise OSError(f"EIO: copy failed, cp '{src}': {err}") from None
        except OSError as err:
            if err.strerror and err.strerror.startswith(errno.errorcode.get(err.errno or 0, "?")):
                raise
            raise _reworded(err, "cp", src) from None

    async def mv(self, src: str, dest: str) -> None:
        s, d = normalize(src), normalize(dest)
        try:
            os.rename(s, d)
        except OSError as err:
            if err.errno != errno.EXDEV:  # /workspace to /tmp: copy, then remove
                raise _reworded(err, "mv", src) from None
            await self.cp(src, dest, recursive=True)
            await self.rm(src, recursive=True, force=True)
        if s in _modes:
            _modes[d] = _modes.pop(s)

    async def chmod(self, path: str, mode: int) -> None:
        real = normalize(path)
        if not os.path.lexists(real):
            raise _error(FileNotFoundError, errno.ENOENT, "chmod", path)
        try:
            os.chmod(real, mode)
        except OSError:
            pass  # WASI has no permission bits: remembered below, shown by ls -l and test -x
        _modes[real] = mode & 0o7777

    async def symlink(self, target: str, link_path: str) -> None:
        real = normalize(link_path)
        try:
            os.symlink(target, real)
        except OSError as err:
            raise _reworded(err, "symlink", link_path) from None

    async def link(self, existing_path: str, new_path: str) -> None:
        try:
            os.link(normalize(existing_path), normalize(new_path))
        except OSError as err:
            raise _reworded(err, "link", existing_path) from None

    async def utimes(self, path: str, atime: float, mtime: float) -> None:
        try:
            os.utime(normalize(path), (atime, mtime))
        except OSError as err:
            raise _reworded(err, "utimes", path) from None


def _remove_tree(top: str) -> None:
    """`rm -r`: the tree under `top`, links removed and never followed."""
    for root, dirs, files in os.walk(top, topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
        for name in dirs:
            full = os.path.join(root, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.rmdir(full)
    os.rmdir(top)
