"""The guest's stdout and stderr: one in-memory stream, kept in order.

Text goes to a buffer in the guest's memory (`_wasmrun.out_write`, a memcpy);
the host reads what is left there after the run, even after a trap, and a
full buffer is flushed to the host on the way. So a print costs no host
call, and prints, tracebacks and runtime.log lines stay in order.
"""

from __future__ import annotations

import io
import sys

import _wasmrun


class _GuestOutput(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        return _wasmrun.out_write(data)


def install() -> None:
    raw = _GuestOutput()
    sys.stdout = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def flush() -> None:
    """Hand buffered output to the host now (before a host-side log line)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the user may have closed or replaced them
        pass
    _wasmrun.out_flush()
