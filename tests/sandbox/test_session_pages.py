"""A session's written pages: the kernel's PAGEMAP_SCAN finds the same spans as the pagemap read."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_the_delta_is_exactly_the_pages_that_differ_from_the_base(engine: SandboxEngine, tmp_path: Path) -> None:
    """save's delta against a base holds every page that differs from it and no other:
    pages changed alone, side by side, at a chunk's edges and a whole chunk."""
    fresh = engine.image.new_instance()
    try:
        size = fresh.memory.data_len(fresh.store)
        view = memory_view(fresh.store, fresh.memory)
        try:
            view[0 : 64 * pages.PAGE] = bytes(range(256)) * (64 * pages.PAGE // 256)  # written: in the base
        finally:
            view.release()
        (tmp_path / "v0").mkdir()
        (tmp_path / "v1").mkdir()
        pages.save(tmp_path / "nowhere", tmp_path / "v0", fresh.store, fresh.memory, "key")
        changed = [3, 15, 16, 17, 31, 40, 41, 42] + list(range(48, 64))  # pages, 16 to a chunk
        view = memory_view(fresh.store, fresh.memory)
        try:
            for page in changed:
                view[page * pages.PAGE + 7] ^= 0xFF
        finally:
            view.release()
        pages.save(tmp_path / "v0", tmp_path / "v1", fresh.store, fresh.memory, "key")
        spans = [(o, n) for o, n, _ in pages._span_table(tmp_path / "v1" / pages.DELTA, "key")]
        found = [o // pages.PAGE + i for o, n in spans for i in range(n // pages.PAGE)]
        assert found == changed and size == fresh.memory.data_len(fresh.store)
    finally:
        fresh.store.close()


def test_a_base_kept_mapped_between_saves_is_never_taken_for_another(engine: SandboxEngine, tmp_path: Path) -> None:
    """The bases compared against stay mapped for the next save (pages._BaseMaps): saves
    against more bases than are kept, and a base written again at the same path, each
    find exactly the pages that differ from the base on disk now."""
    fresh = engine.image.new_instance()

    def poke(offsets: list[int], value: int) -> None:
        view = memory_view(fresh.store, fresh.memory)
        try:
            for page in offsets:
                view[page * pages.PAGE + 11] = value
        finally:
            view.release()

    def delta(previous: Path, folder: Path) -> list[int]:
        folder.mkdir()
        pages.save(previous, folder, fresh.store, fresh.memory, "key")
        if not (folder / pages.DELTA).exists():
            return []
        spans = pages._span_table(folder / pages.DELTA, "key")
        return [o // pages.PAGE + i for o, n, _ in spans for i in range(n // pages.PAGE)]

    try:
        poke(list(range(40)), 1)
        bases = []
        for n in range(pages._BaseMaps.KEEP + 2):  # more bases than are kept mapped: the first is unmapped
            (tmp_path / f"b{n}").mkdir()
            pages.save(tmp_path / "nowhere", tmp_path / f"b{n}", fresh.store, fresh.memory, "key")
            bases.append(tmp_path / f"b{n}")
            assert delta(bases[-1], tmp_path / f"d{n}") == []
        poke([5, 6], 2)
        assert delta(bases[0], tmp_path / "again0") == [5, 6]  # mapped again after it was evicted
        assert delta(bases[-1], tmp_path / "again1") == [5, 6]  # still mapped
        # The same name written again, as large: its new content is what counts.
        (bases[-1] / pages.BASE).unlink()
        pages.save(tmp_path / "nowhere", bases[-1], fresh.store, fresh.memory, "key")
        assert delta(bases[-1], tmp_path / "rewritten") == []
        poke([5], 3)
        assert delta(bases[-1], tmp_path / "rewritten2") == [5]
    finally:
        fresh.store.close()


def test_saves_from_the_kernels_record_of_writes_match_a_full_compare(engine: SandboxEngine, tmp_path: Path) -> None:
    """A warm session's save compares only the pages the kernel says its run wrote
    (writes.WriteTracker): over saves that change, restore and add pages, each version is
    the one a full compare makes, and read into a fresh instance it is the memory saved."""
    tracker_cls = pytest.importorskip("wasmrun.sandbox.sessions.writes").WriteTracker
    fresh = engine.image.new_instance()
    key = engine.image.guest.key

    def poke(changes: dict[int, int]) -> None:
        view = memory_view(fresh.store, fresh.memory)
        try:
            for page, value in changes.items():
                view[page * pages.PAGE + 5] = value
        finally:
            view.release()

    try:
        (tmp_path / "v0").mkdir()
        poke({page: 1 for page in range(100, 140)})
        pages.save(tmp_path / "none", tmp_path / "v0", fresh.store, fresh.memory, key)
        tracker = tracker_cls.start(fresh.store, fresh.memory)
        if tracker is None:
            pytest.skip("this kernel has no asynchronous write-protect (userfaultfd WP_ASYNC)")
        try:
            steps = [{101: 2, 120: 2}, {101: 1}, {300: 7, 301: 7, 139: 9}, {}, {120: 1, 300: 0, 5: 4}]
            for n, changes in enumerate(steps, start=1):
                before = bytes(memory_view(fresh.store, fresh.memory))
                poke(changes)
                written = tracker.written(fresh.store, fresh.memory)
                assert written is not None
                touched = {o // pages.PAGE + i for o, length in written for i in range(length // pages.PAGE)}
                assert set(changes) <= touched  # every page written is in the record
                (tmp_path / f"v{n}").mkdir()
                (tmp_path / f"full{n}").mkdir()
                pages.save(tmp_path / f"v{n - 1}", tmp_path / f"v{n}", fresh.store, fresh.memory, key, written=written)
                pages.save(tmp_path / f"v{n - 1}", tmp_path / f"full{n}", fresh.store, fresh.memory, key)
                memory = bytes(memory_view(fresh.store, fresh.memory))
                assert memory != before or not changes
                for version in (f"v{n}", f"full{n}"):
                    other = engine.image.new_instance()
                    try:
                        pages.load(tmp_path / version, other.store, other.memory, key)
                        assert bytes(memory_view(other.store, other.memory)) == memory, version
                    finally:
                        other.store.close()
            fresh.memory.grow(fresh.store, 1)
            assert tracker.written(fresh.store, fresh.memory) is None  # grown: compared in full
        finally:
            tracker.close()
    finally:
        fresh.store.close()
