"""Linux's answers for paths that end in a slash, where wasmtime's WASI differs.

wasmtime resolves a path's last component through cap-std, which reads a
trailing slash as "the directory itself" (`d/` as `d/.`): `rmdir("d/")`
answers EINVAL where Linux removes `d`, `unlink("link/")` answers EISDIR
where Linux says ENOTDIR, and `rename("file", "new/")` succeeds where Linux
refuses. Linux's rule (path_resolution(7), rename(2), unlink(2)): a trailing
slash asks for a directory; the calls that act on a name (rmdir, unlink,
rename, link, symlink) look the name up without following it, so a symbolic
link with a slash is not a directory. Every wasi-libc answers from these
calls, so both images get Linux's answer here, in the host.

Each function gets the real WASI call (`RealCall`) and returns the errno.
It reads the path's bytes, looks the name up with the real
`path_filestat_get` when the rule needs its kind, and calls the real
function with the slashes left off: the names it passes are the guest's own
bytes, shortened, so every refusal of the real call (escapes, read-only
mounts) applies unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import wasmtime

from wasmrun.abi import U32
from wasmrun.sandbox.guest.guestmemory import guest_memory, read_guest, write_guest

RealCall = Callable[..., int]

ERRNO_EXIST = 20
ERRNO_ISDIR = 31
ERRNO_NOTDIR = 54
ERRNO_NOTEMPTY = 55
FILETYPE_DIRECTORY = 3
FILESTAT_SIZE = 64
FILESTAT_FILETYPE = 16  # offset of the u8 filetype in a filestat
LOOKUP_NOFOLLOW = 0
# Longer paths go to the real call as they are (it answers ENAMETOOLONG): the
# guard never reads more of the guest's memory than a path can hold.
MAX_PATH = 4096


class GuestPath:
    """A path argument: where it is, and its length without trailing slashes.

    `slashed` is true when slashes were left off. A path of slashes only, or
    one whose last component is `.` or `..`, keeps them: wasmtime already
    answers as Linux does for those (the component is not a name)."""

    def __init__(self, caller: wasmtime.Caller, ptr: int, length: int) -> None:
        self.ptr, self.length = ptr & U32, length & U32
        self.stripped = self.length
        self.last = b""
        if 0 < self.length <= MAX_PATH:
            raw = read_guest(caller, self.ptr, self.length)
            trimmed = raw.rstrip(b"/")
            self.last = trimmed.rsplit(b"/", 1)[-1]
            if trimmed and self.last not in (b".", b".."):
                self.stripped = len(trimmed)

    @property
    def slashed(self) -> bool:
        return self.stripped != self.length


def _filetype(caller: wasmtime.Caller, real: RealCall, fd: int, path: GuestPath, flags: int) -> tuple[int, int]:
    """(errno, WASI filetype) of the path without its trailing slashes.

    The filestat needs 64 bytes of guest memory: the bytes beside the path are
    borrowed and put back (the guest is blocked in this call). A path the
    check cannot look at is answered with the error the real call would give
    it (EINVAL), so nothing is done."""
    memory_len = guest_memory(caller).data_len(caller)
    after = (path.ptr + path.length + 7) & ~7
    scratch = after if after + FILESTAT_SIZE <= memory_len else (path.ptr - FILESTAT_SIZE) & ~7
    if scratch < 0:
        return 28, 0  # EINVAL
    saved = read_guest(caller, scratch, FILESTAT_SIZE)
    try:
        error = real("path_filestat_get", fd, flags, path.ptr, path.stripped, scratch)
        filetype = 0 if error else read_guest(caller, scratch + FILESTAT_FILETYPE, 1)[0]
        return error, filetype
    finally:
        write_guest(caller, scratch, FILESTAT_SIZE, saved)


def remove_directory(caller: wasmtime.Caller, real: RealCall, fd: int, ptr: int, length: int) -> int:
    path = GuestPath(caller, ptr, length)
    if path.last == b"..":
        # Linux: rmdir of a path ending in `..` is ENOTEMPTY once the path resolves
        # (wasmtime says EINVAL). The lookup keeps escapes refused as before.
        error, _ = _filetype(caller, real, fd, path, LOOKUP_NOFOLLOW)
        return error or ERRNO_NOTEMPTY
    if not path.slashed:
        return real("path_remove_directory", fd, ptr, length)
    error, filetype = _filetype(caller, real, fd, path, LOOKUP_NOFOLLOW)
    if error:
        return error
    if filetype != FILETYPE_DIRECTORY:
        return ERRNO_NOTDIR  # a file, or a symbolic link (even to a directory)
    return real("path_remove_directory", fd, ptr, path.stripped)


def unlink_file(caller: wasmtime.Caller, real: RealCall, fd: int, ptr: int, length: int) -> int:
    path = GuestPath(caller, ptr, length)
    if not path.slashed:
        return real("path_unlink_file", fd, ptr, length)
    # With a slash nothing can be unlinked: a directory is EISDIR, anything else ENOTDIR.
    error, filetype = _filetype(caller, real, fd, path, LOOKUP_NOFOLLOW)
    return error or (ERRNO_ISDIR if filetype == FILETYPE_DIRECTORY else ERRNO_NOTDIR)


def rename(
    caller: wasmtime.Caller, real: RealCall, old_fd: int, old_ptr: int, old_len: int,
    new_fd: int, new_ptr: int, new_len: int,
) -> int:
    old, new = GuestPath(caller, old_ptr, old_len), GuestPath(caller, new_ptr, new_len)
    if not (old.slashed or new.slashed):
        return real("path_rename", old_fd, old_ptr, old_len, new_fd, new_ptr, new_len)
    # A slash on either name: only a directory may move (rename(2), ENOTDIR).
    error, filetype = _filetype(caller, real, old_fd, old, LOOKUP_NOFOLLOW)
    if error:
        return error
    if filetype != FILETYPE_DIRECTORY:
        return ERRNO_NOTDIR
    return real("path_rename", old_fd, old_ptr, old.stripped, new_fd, new_ptr, new.stripped)


def _existing_name(caller: wasmtime.Caller, real: RealCall, fd: int, path: GuestPath) -> int:
    """The length to pass for the name a link is made at: without its slashes
    when the name exists (Linux answers EEXIST, as the real call then does),
    else as given (the real call answers as Linux: ENOENT or ENOTDIR)."""
    if path.slashed and _filetype(caller, real, fd, path, LOOKUP_NOFOLLOW)[0] == 0:
        return path.stripped
    return path.length


def link(
    caller: wasmtime.Caller, real: RealCall, old_fd: int, flags: int, old_ptr: int, old_len: int,
    new_fd: int, new_ptr: int, new_len: int,
) -> int:
    new_len = _existing_name(caller, real, new_fd, GuestPath(caller, new_ptr, new_len))
    return real("path_link", old_fd, flags, old_ptr, old_len, new_fd, new_ptr, new_len)


def symlink(caller: wasmtime.Caller, real: RealCall, old_ptr: int, old_len: int, fd: int, new_ptr: int, new_len: int) -> int:
    new_len = _existing_name(caller, real, fd, GuestPath(caller, new_ptr, new_len))
    return real("path_symlink", old_ptr, old_len, fd, new_ptr, new_len)
