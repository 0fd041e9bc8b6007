"""The files of a skill folder, read and named safely: paths a client names checked
before any file system sees them, regular files read without blocking on a FIFO or
reading past a limit, and a folder's listing and size."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path, PurePosixPath

from wasmrun.registry.errors import Part, UnsafeSkillPath
from wasmrun.registry.manifest import shown

MAX_LISTED_FILES = 500
# Paths a client names (read_skill_file, create_skill files): far above any real
# skill's, below what the file system refuses (NAME_MAX 255 bytes, PATH_MAX 4096).
MAX_PATH_CHARS = 1024
MAX_PATH_SEGMENTS = 32
MAX_SEGMENT_BYTES = 255


def check_relative_path(path: str, part: Part, file_index: int | None = None) -> PurePosixPath:
    """A relative path with no way out of its folder, or UnsafeSkillPath about `part`
    (the path asked for, or the `file_index`th file of a skill to create)."""
    problem = None
    segments = path.split("/")
    if not path:
        problem = "is empty"
    elif len(path) > MAX_PATH_CHARS:
        problem = f"is longer than {MAX_PATH_CHARS} characters"
    elif len(segments) > MAX_PATH_SEGMENTS:
        problem = f"has more than {MAX_PATH_SEGMENTS} segments"
    elif any(len(part.encode("utf-8")) > MAX_SEGMENT_BYTES for part in segments):
        problem = f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"
    elif "\0" in path:
        problem = "contains a NUL byte"
    elif any(ord(c) < 0x20 or c == "\x7f" for c in path):
        problem = "contains a control character"
    elif "\\" in path:
        problem = "contains a backslash; use '/'"
    elif path.startswith("/"):
        problem = "is absolute; give it relative to the skill's folder"
    elif any(part == ".." for part in segments):
        problem = "contains '..'"
    elif any(part in ("", ".") for part in segments):
        problem = "has an empty or '.' segment"
    if problem is not None:
        raise UnsafeSkillPath(f"path {shown(path)} {problem}", part, file_index=file_index)
    return PurePosixPath(path)


def inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return False


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file was expected: opening it for real could block forever."""


def read_regular(path: Path, max_bytes: int) -> bytes:
    """Read a regular file, refusing anything else without blocking.

    An operator's skill folder may hold a FIFO (or a device) under a file's name;
    a plain open() of a FIFO blocks until a writer appears, which would hang the
    registry's reload or a request. O_NONBLOCK makes the open return at once and
    the fstat decides. Raises FileTooLarge past `max_bytes`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file")
        if info.st_size > max_bytes:
            raise FileTooLarge(info.st_size, max_bytes)
        data = f.read(max_bytes + 1)
        if len(data) > max_bytes:  # grew since the fstat
            raise FileTooLarge(len(data), max_bytes)
        return data


class FileTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, above the {limit}-byte limit")
        self.size = size
        self.limit = limit


def is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def folder_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def listed_files(root: Path) -> list[str]:
    """The files under `root` (its own, no symlink out of it), sorted: at most MAX_LISTED_FILES."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = Path(folder) / name
            if inside(root, full):
                found.append(full.relative_to(root).as_posix())
            if len(found) >= MAX_LISTED_FILES:
                return sorted(found)
    return sorted(found)
