"""The guest's stdout and stderr, kept in order.

stdout goes to a buffer in the guest's memory (`_wasmrun.out_write`, a memcpy);
the host reads what is left there after the run, even after a trap (and, for a
streamed run, while it runs), and a full buffer is flushed to the host on the
way. So a print costs no host call. stderr is written straight to fd 2 (a host
call, which first takes what the buffer holds): the host can tell the two
apart (a streamed run labels its output events), and prints, tracebacks and
runtime.log lines stay in order.
"""

from __future__ import annotations

import io
import os
import sys

import _wasmrun


class _GuestOutput(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        return _wasmrun.out_write(data)


class _GuestErrors(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        return os.write(2, data)


def install() -> None:
    sys.stdout = io.TextIOWrapper(_GuestOutput(), encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stderr = io.TextIOWrapper(_GuestErrors(), encoding="utf-8", errors="backslashreplace", write_through=True)


def flush() -> None:
    """Hand buffered output to the host now (before a host-side log line)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the user may have closed or replaced them
        pass
    _wasmrun.out_flush()
