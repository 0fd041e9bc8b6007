"""A session's written pages: the kernel's PAGEMAP_SCAN finds the same spans as the pagemap read."""

from __future__ import annotations

import sys

import pytest

from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.guest.guestmemory import memory_view
from wasmrun.sandbox.sessions import pages


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/pagemap is Linux's")
def test_the_scan_and_the_read_find_the_same_written_pages(engine: SandboxEngine) -> None:
    fresh = engine.image.new_instance()
    try:
        size = fresh.memory.data_len(fresh.store)
        view = memory_view(fresh.store, fresh.memory)
        try:
            for offset in (0, 5 * pages.PAGE, size // 2, size - pages.PAGE):  # scattered writes
                view[offset] = (view[offset] + 1) % 256
        finally:
            view.release()
        scanned = pages._scan_written(fresh.store, fresh.memory)
        read = pages._pagemap_written(fresh.store, fresh.memory)
        if scanned is None:
            pytest.skip("this kernel has no PAGEMAP_SCAN (older than 6.7)")
        assert scanned == read and scanned
        for offset in (0, 5 * pages.PAGE, size // 2, size - pages.PAGE):
            assert any(start <= offset < start + length for start, length in scanned), offset
    finally:
        fresh.store.close()
