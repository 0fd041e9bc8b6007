"""The interleaved run: every row, round after round, so machine noise falls on all alike."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from python_wasm import build as guest_build
from python_wasm.downloads import cache_root
from wasmrun.bench import datarows, hops, memory, phases, scaling
from wasmrun.bench.datarows import DataSide
from wasmrun.bench.extra import Extra
from wasmrun.bench.extra import measure as measure_extra
from wasmrun.bench.machine import host, load
from wasmrun.bench.peers import Peer, start_peers
from wasmrun.bench.rows import COMPUTE_ROWS, STARTUP, Row
from wasmrun.bench.schema import SCHEMA_VERSION
from wasmrun.bench.stats import summary
from wasmrun.bench.systems import HELLO, Http, InProcess, Native, server


@dataclass
class Options:
    quick: bool = False
    rounds: int = 12
    workers: int = field(default_factory=lambda: os.cpu_count() or 2)
    peers: bool = True
    pyodide: bool = True
    memory_workers: tuple[int, ...] = (1, 2, 4)
    seed: int = 23
    rows: tuple[str, ...] | None = None  # --rows: only these rows' keys, and none of the other sections

    @property
    def scale(self) -> float:
        return 0.1 if self.quick else 1.0


class Bench:
    """What the rows measure with: the systems, the peers, and the run's state."""

    def __init__(self, opts: Options, inproc: InProcess, http: Http, peers: list[Peer]) -> None:
        self.opts = opts
        self.scale = opts.scale
        self.inproc = inproc
        self.http = http
        self.native = Native()
        self.peers = peers
        self.rng = random.Random(opts.seed)
        self.flip = False
        self.round = 0
        self.rounds = 1
        self.unsupported: set[tuple[str, str]] = set()
        self.notes: list[str] = []
        self._peer_hello: dict[str, float] = {}
        self._slow_sampled: set[tuple[str, int, bool]] = set()
        self.session_id: str | None = None  # the session row's, created on its first sample
        self.data: DataSide | None = None  # the data image's systems, when it is built (datarows.py)
        self.state: dict[str, Any] = {}  # rows' own state (a probe's answer, a client), by "<module>.<name>"
        self.stack = contextlib.ExitStack()  # what rows opened, closed before the server stops

    def peer_due(self, peer: Peer, compute: bool = False) -> bool:
        """Slow peers (seconds a fresh interpreter) sit out the warm-up and the quick run, and are
        sampled sparingly: Pyodide's start-up once a round, llm-wasm-sandbox's in the first
        and the middle round, and its compute in the first round only.
        Pyodide's compute runs in a kept interpreter, as often as the others."""
        slow = peer.name == "llm-wasm-sandbox" or (peer.name == "pyodide" and not compute)
        if not slow:
            return True
        if self.round < 0 or self.opts.quick:
            return False
        if peer.name == "llm-wasm-sandbox" and (self.round > 0 if compute else self.round not in (0, self.rounds // 2)):
            return False
        key = (peer.label, self.round, compute)
        if compute or key not in self._slow_sampled:
            self._slow_sampled.add(key)
            return True
        return False

    def peer_hello(self, peer: Peer) -> float:
        if peer.label not in self._peer_hello:
            self._peer_hello[peer.label] = statistics.median(peer.sample(HELLO) for _ in range(3))
        return self._peer_hello[peer.label]


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
            f"Python {platform.python_version()}, wasmtime-py {version('wasmtime')}")


def new_report(quick: bool, rounds: int) -> dict[str, Any]:
    """The report's heading: the schema version, the date, the machine and its load now."""
    h = host()
    h["load_before"] = load()
    return {"schema_version": SCHEMA_VERSION, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "host": h, "load": h["load_before"], "quick": quick, "rounds": rounds,
            "rows": {}, "systems": {}, "peers": {}}


def finish(report: dict[str, Any]) -> dict[str, Any]:
    report["host"]["load_after"] = load()
    return report


def interleaved(bench: Bench, rows: list[Row], rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """Each round takes a burst from every row in turn, in forward order one round and backward the next."""
    samples: dict[str, dict[str, list[float]]] = {row.key: {} for row in rows}
    bench.rounds = rounds
    for r in range(rounds):
        bench.round = r
        progress(f"round {r + 1}/{rounds}")
        for row in rows if r % 2 == 0 else reversed(rows):
            bench.inproc.settle()
            if bench.data is not None:
                bench.data.settle()
            for _ in range(row.burst):
                got = row.measure(bench)
                for label, seconds in got.items():
                    samples[row.key].setdefault(label, []).append(seconds)
    return samples


def _warm_up(bench: Bench, rows: list[Row]) -> None:
    """Every path once (compilation caches, first faults); peers that cannot run a row are noted there."""
    for row in rows:
        row.measure(bench)


def summarise(rows: list[Row], samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in rows:
        per = samples[row.key]
        base = statistics.median(per[row.baseline]) if per.get(row.baseline) else None
        systems = {}
        for label, values in sorted(per.items(), key=lambda kv: _column(kv[0], row.baseline)):
            figures: dict[str, Any] = summary(values)
            figures["ratio"] = statistics.median(values) / base if base else None
            systems[label] = figures
        out[row.key] = {"label": row.label, "section": row.section, "what": row.what, "baseline": row.baseline,
                        "systems": systems, "samples_ms": {k: [v * 1000 for v in vs] for k, vs in per.items()}}
    return out


def _column(label: str, baseline: str) -> tuple[int, str]:
    """wasmrun's columns first, then the baseline, then the peers."""
    return (0 if label.startswith("wasmrun") else 1 if label == baseline else 2, label)


def run(opts: Options, progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
        extra: Extra | None = None) -> dict[str, Any]:
    guest_build.build()
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-"))
    rounds = 3 if opts.quick else opts.rounds
    report = new_report(opts.quick, rounds)
    report["scale"] = opts.scale
    peers: list[Peer] = []
    inproc = InProcess(tmp / "blobs")
    data = datarows.open_side(tmp)
    try:
        progress("peers ...")
        peers, absent = start_peers(cache_root(), pyodide=opts.pyodide and not opts.quick,
                                    python_peers=opts.peers)
        report["peers"] = {p.label: {"isolates": p.isolates, "present": True} for p in peers}
        report["peers"].update({label: {"present": False, "why": why} for label, why in absent.items()})
        with server(opts.workers, tmp / "data") as (port, _proc):
            bench = Bench(opts, inproc, Http(port), peers)
            bench.data = data
            with bench.stack:
                chosen = [r for r in STARTUP if opts.rows is None or r.key in opts.rows]
                report["absent_rows"] = {r.label: why for r in chosen if (why := r.absent(bench)) is not None}
                # Every peer listed appears in a table: an absent one as a row saying why.
                report["absent_rows"].update({label: p["why"] for label, p in report["peers"].items()
                                              if not p["present"]})
                rows = [r for r in chosen if r.absent(bench) is None]
                rows += [r for r in COMPUTE_ROWS if opts.rows is None or r.key in opts.rows]
                progress("warm-up ...")
                bench.round = -1  # the slow peers sit the warm-up out
                _warm_up(bench, rows)
                samples = interleaved(bench, rows, rounds, progress)
                report["rows"] = summarise(rows, samples)
                report["notes"] = bench.notes
            if opts.rows is not None:  # only the rows asked for
                return _finish_rows(report)
            progress("every core used ...")
            report["scaling"] = scaling.measure(port, windows=2 if opts.quick else 3,
                                                seconds=0.5 if opts.quick else 3.0, cores=opts.workers)
        progress("phases ...")
        report["phases"] = phases.measure(inproc, tmp / "phases", 30 if opts.quick else 200)
        progress("HTTP hops ...")
        report["hops"] = hops.measure(4 if opts.quick else 20, 10)
        progress("memory ...")
        report["memory"] = memory.measure(inproc, tmp, opts.memory_workers, opts.scale)
        if data is not None:
            data.close()  # before its own servers start: memory is what they measure
            report["memory"]["data_by_workers"] = datarows.by_workers(tmp, opts.memory_workers[:2])
        if extra is not None:
            measure_extra(extra, report, tmp, opts.quick, progress)
    finally:
        if data is not None:
            data.close()
        for peer in peers:
            peer.close()
        inproc.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return _finish_rows(report)


def _finish_rows(report: dict[str, Any]) -> dict[str, Any]:
    report["systems"] = {InProcess.label: InProcess.isolates, Http.label: Http.isolates, Native.label: Native.isolates}
    return finish(report)
