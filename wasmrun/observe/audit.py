"""The audit log: one JSON line per call, appended to a file only the server's user
can read (`<data_dir>/audit.log` by default; `--audit-log PATH`, or "-" for none).

Each line is one `write` on a file opened with O_APPEND, so lines from
concurrent calls never interleave, and nothing already written is rewritten.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import msgspec

from wasmrun.observe.record import CallRecord


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._encoder = msgspec.json.Encoder()
        self._lock = threading.Lock()  # close() against a record() on another thread

    def record(self, call: CallRecord) -> None:
        line = self._encoder.encode(call) + b"\n"
        with self._lock:
            if self._fd >= 0:
                os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
