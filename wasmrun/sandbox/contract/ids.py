"""Run ids: `run_` and 64 random bits.

os.urandom costs tens of microseconds a call on some virtual machines, a
noticeable share of a millisecond run, so random bytes are drawn in blocks.
"""

from __future__ import annotations

import os
import threading

_BLOCK = 4096
_lock = threading.Lock()
_pool = b""


def _random_bytes(n: int) -> bytes:
    global _pool
    with _lock:
        if len(_pool) < n:
            _pool = os.urandom(_BLOCK)
        out, _pool = _pool[:n], _pool[n:]
    return out


def new_run_id() -> str:
    return "run_" + _random_bytes(8).hex()
