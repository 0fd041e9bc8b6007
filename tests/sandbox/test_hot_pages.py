"""Spare instances come with the pages a typical run reads mapped in ahead, and stay the snapshot."""

from __future__ import annotations

import sys

import pytest

from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.guest.guestmemory import memory_view
from wasmrun.sandbox.memory.instances import HotPages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pagemap is Linux's")


def test_the_pages_a_run_reads_are_learned_apart_from_those_it_writes(engine: SandboxEngine) -> None:
    hot = engine.loop.supply.hot
    assert hot.read_set(), "no page a run only reads was learned"
    assert not hot.read_set() & hot.page_set()


def test_a_prepared_spare_has_the_read_pages_mapped_and_its_memory_is_the_snapshots(engine: SandboxEngine) -> None:
    engine.wait_idle(60)
    spare = engine.loop.supply.take()
    pristine = engine.image.new_instance()
    try:
        assert spare.prepared_ahead
        # Populated again here, with no run in flight: a spare the supply made while other
        # tests' runs were going may have stopped early, by design (a run needs the CPU).
        assert engine.loop.supply.hot.populate(spare.store, spare.memory)
        mapped = spare.memory.data_len(spare.store) // 4096
        wanted = {page for page in engine.loop.supply.hot.read_set() if page < mapped}
        present = HotPages.read_pages(spare.store, spare.memory) | HotPages.written_pages(spare.store, spare.memory)
        assert wanted <= present
        # Mapped in or copied in, never changed: byte for byte the never-used instance.
        assert memory_view(spare.store, spare.memory) == memory_view(pristine.store, pristine.memory)
    finally:
        pristine.store.close()
        # The spare then serves a run, as any does, and goes back like any.
        result, workspace = engine.loop.run_in(spare, RunRequest(kind="code", code="def main(args):\n    return 7"), 0.0)
        engine.loop.supply.retire(spare.store, workspace)
    assert result.output_json == b"7"


def test_runs_on_spares_with_read_pages_mapped_see_a_fresh_interpreter(run_code) -> None:  # type: ignore[no-untyped-def]
    first = run_code("import sys\nsys.marker = 1\ndef main(args):\n    return 1")
    assert first.status == "completed"
    again = run_code("import sys\ndef main(args):\n    return hasattr(sys, 'marker')")
    assert again.status == "completed" and again.output_json == b"false"
