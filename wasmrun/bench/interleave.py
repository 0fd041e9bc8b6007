"""One sample of each system a row compares, taken in alternating order (ABBA).

rows.py and datarows.py measure through it; it sits below both so that neither imports
the other for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from wasmrun.bench.peers import PeerError

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench

Samples = dict[str, float]


def alternating(bench: Bench, steps: list[tuple[str, Callable[[], float]]], key: str = "hello") -> Samples:
    """One sample of each system, in forward order one call and backward the next (ABBA):
    neither side always runs right after the other. A peer that cannot run the
    workload (a Python subset) is noted and left out of the row from then on."""
    bench.flip = not bench.flip
    out: Samples = {}
    for label, step in steps if bench.flip else reversed(steps):
        try:
            out[label] = step()
        except PeerError as exc:
            bench.unsupported.add((label, key))
            bench.notes.append(f"{label}: {key}: not supported ({exc})")
    return out


def paced(bench: Bench, label: str, run: Callable[[], float], native_label: str,
          native: Callable[[], float]) -> Samples:
    """As the held-out bar does: a gap of 50-200 ms before each call, with a native
    `python3 -I -S` spawn running in it (other processes busy on the machine)."""
    gap = bench.rng.uniform(0.05, 0.2)
    start = time.perf_counter()
    spawned = native()
    time.sleep(max(0.0, gap - (time.perf_counter() - start)))
    return {label: run(), native_label: spawned}
