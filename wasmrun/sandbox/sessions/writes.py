"""Which pages of a warm session's memory its run wrote, as the kernel saw them.

A session's save finds the pages that differ from its base (pages.py). For an instance
kept warm between runs, most of its written pages are what the last save already found:
comparing them all again (6 MB on the data image, ~2 ms of memcmp a run) only confirms it.
The kernel can say which pages were written since a point instead: userfaultfd's
asynchronous write-protect (Linux 6.7+, UFFD_FEATURE_WP_ASYNC) with PAGEMAP_SCAN, whose
PM_SCAN_WP_MATCHING hands back the pages written since the last scan and protects them
again in the same call. A write to a protected page costs one minor fault (no thread is
woken: the kernel resolves it); a run writes a few hundred pages.

Where it is not there (an older kernel, userfaultfd refused to this process, another
platform), `WriteTracker.start` answers None and a save compares as before.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

import wasmtime

from wasmrun.sandbox.sessions import pages
from wasmrun.sandbox.sessions.pages import Spans

logger = logging.getLogger("wasmrun.sandbox")


_SYS_USERFAULTFD = {"x86_64": 323, "aarch64": 282}.get(os.uname().machine) if sys.platform.startswith("linux") else None
_UFFD_API = 0xAA
_FEATURE_WP_UNPOPULATED = 1 << 13  # pages never touched count as protected (a read of the image is no write)
_FEATURE_WP_ASYNC = 1 << 15
_MODE_WP = 2


def _iowr(kind: int, number: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (kind << 8) | number


_UFFDIO_API = _iowr(0xAA, 0x3F, 24)  # struct uffdio_api {api, features, ioctls}
_UFFDIO_REGISTER = _iowr(0xAA, 0x00, 32)  # struct uffdio_register {start, len, mode, ioctls}


_PAGE_IS_WRITTEN = 1 << 1
_SCAN_WP_MATCHING, _SCAN_CHECK_WPASYNC = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
_libc.ioctl.restype = ctypes.c_int
_works = _SYS_USERFAULTFD is not None


class WriteTracker:
    """The pages written in one instance's memory since the last `written()` (or `start`)."""

    def __init__(self, uffd: int, pagemap: int, start: int, size: int) -> None:
        self._uffd, self._pagemap = uffd, pagemap
        self.start_address, self.size = start, size

    @classmethod
    def start(cls, store: wasmtime.Store, memory: wasmtime.Memory) -> WriteTracker | None:
        """Track the instance's memory as it is now (its size: a run that grows it is
        compared in full at its save); None where the kernel cannot."""
        global _works
        if not _works:
            return None
        start = ctypes.addressof(memory.data_ptr(store).contents)
        size = memory.data_len(store)
        uffd = _libc.syscall(_SYS_USERFAULTFD, os.O_CLOEXEC | os.O_NONBLOCK)
        if uffd < 0:
            _works = False
            logger.info("session saves compare every written page: userfaultfd is refused here (errno %d)",
                        ctypes.get_errno())
            return None
        pagemap = -1
        try:
            api = (ctypes.c_uint64 * 3)(_UFFD_API, _FEATURE_WP_ASYNC | _FEATURE_WP_UNPOPULATED, 0)
            if _libc.ioctl(uffd, _UFFDIO_API, ctypes.addressof(api)) < 0:
                raise OSError(ctypes.get_errno(), "UFFDIO_API")
            register = (ctypes.c_uint64 * 4)(start, size, _MODE_WP, 0)
            if _libc.ioctl(uffd, _UFFDIO_REGISTER, ctypes.addressof(register)) < 0:
                raise OSError(ctypes.get_errno(), "UFFDIO_REGISTER")
            pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            tracker = cls(uffd, pagemap, start, size)
            tracker._scan()  # everything up to now counts as seen: protected from here on
            return tracker
        except OSError as error:
            os.close(uffd)
            if pagemap >= 0:
                os.close(pagemap)
            _works = False
            logger.info("session saves compare every written page: the kernel has no asynchronous write-protect (%s)",
                        error)
            return None

    def written(self, store: wasmtime.Store, memory: wasmtime.Memory) -> Spans | None:
        """(offset, length) spans of the pages written since the last call, protected
        again from now on; None when the memory moved or grew since `start` (its new
        pages are not tracked: compare in full)."""
        if (ctypes.addressof(memory.data_ptr(store).contents), memory.data_len(store)) != (self.start_address, self.size):
            return None
        try:
            return self._scan()
        except OSError:
            return None

    def _scan(self) -> Spans:
        return pages.pagemap_scan(self._pagemap, self.start_address, self.size,
                                  flags=_SCAN_WP_MATCHING | _SCAN_CHECK_WPASYNC, category_mask=_PAGE_IS_WRITTEN,
                                  return_mask=_PAGE_IS_WRITTEN)

    def close(self) -> None:
        """Stop tracking (closing the userfaultfd unregisters its range)."""
        for fd in (self._uffd, self._pagemap):
            try:
                os.close(fd)
            except OSError:
                pass
        self._uffd = self._pagemap = -1
