"""The guest's stdout and stderr: text layers over ONE buffered writer on fd 1.

Each write to fd 1 is a host call; unbuffered, a print loop is dominated by
them. Sharing one buffer keeps prints and tracebacks in order, and
runtime.log flushes it before logging, so a run's log reads in order.
"""

from __future__ import annotations

import io
import sys

_shared: io.BufferedWriter | None = None


def install() -> None:
    global _shared
    _shared = io.BufferedWriter(io.FileIO(1, "w", closefd=False), buffer_size=1 << 16)
    sys.stdout = io.TextIOWrapper(_shared, encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(_shared, encoding="utf-8", errors="backslashreplace", write_through=True)


def flush() -> None:
    """Push buffered output to the host, whatever the user did to sys.stdout."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the user may have closed or replaced them
        pass
    if _shared is not None and not _shared.closed:
        _shared.flush()
