"""Give the C heap's freed memory back to the system (glibc's `malloc_trim`).

Loading a compiled module allocates tens of megabytes in the C heap (wasmtime's code and
metadata for it) that are freed when the module and its engine are; glibc keeps freed
heap for reuse, so a long-lived process that loaded one only to check it (the server
process, at start) went on holding it: 62 MB of the server's 115 MB resident.
Elsewhere than glibc there is nothing to call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import gc
import sys


def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has none)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_freed_heap() -> None:
    """Collect what is garbage now, then return the C heap's free pages to the system."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def can_release_freed_heap() -> bool:
    """Whether `release_freed_heap` does anything here (glibc's malloc_trim found)."""
    return _TRIM is not None
