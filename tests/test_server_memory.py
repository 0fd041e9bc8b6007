"""The server process and its workers give back the C heap that loading the guest's
compiled module frees (wasmrun/sandbox/memory/heaptrim.py): without it the server process kept
~60 MB it never used again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wasmrun.sandbox import can_release_freed_heap

CHECK = """
import gc
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
from wasmrun.sandbox import precompile, release_freed_heap
precompile()  # what `serve` does once at start, before its workers
gc.collect()
kept = rss_mb()
release_freed_heap()
print(kept, rss_mb())
"""


@pytest.mark.skipif(not can_release_freed_heap(), reason="no malloc_trim here (not glibc)")
def test_checking_the_compiled_guest_leaves_no_heap_behind() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    kept, after = (float(x) for x in done.stdout.split())
    assert kept - after > 20, (kept, after)  # measured: ~62 MB given back, of ~98 MB
