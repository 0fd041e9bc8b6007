"""Memory: what one run keeps resident, and a server's RSS with 1, 2, 4 workers.

Per run: the pages of linear memory a run writes (copied on write from the
snapshot: the memory the run costs while it lives), read from /proc/self/pagemap
on a never-used instance, and the guest's linear memory size. Per worker: RSS and
PSS (shared pages split between the processes sharing them) of a real `wasmrun
serve` after every worker ran hellos, for each worker count in turn.
"""

from __future__ import annotations

import mmap
import threading
import time
from pathlib import Path
from typing import Any

from wasmrun.bench.systems import HELLO, Http, InProcess, as_run_code, server
from wasmrun.bench.workloads import COMPUTE
from wasmrun.sandbox import HotPages, RunRequest

MiB = 1024 * 1024


def _status_kb(pid: int, field: str, name: str = "status") -> int:
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_memory(pid: int) -> dict[str, float]:
    return {"rss_mb": _status_kb(pid, "VmRSS") / 1024, "pss_mb": _status_kb(pid, "Pss", "smaps_rollup") / 1024}


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def per_run(inproc: InProcess, scale: float) -> dict[str, Any]:
    """Pages a run writes, and its linear memory, for hello and each compute workload."""
    engine = inproc.engine
    out: dict[str, Any] = {}
    for name, code in [("hello", as_run_code(HELLO))] + [
        (w.name, as_run_code(w.source(scale), "ELAPSED")) for w in COMPUTE
    ]:
        fresh = engine.image.new_instance()  # never used, not prefaulted: only this run's writes show
        try:
            before = HotPages.written_pages(fresh.store, fresh.memory)
            result, workspace = engine.loop.run_in(fresh, RunRequest(kind="code", code=code), time.perf_counter())
            written = HotPages.written_pages(fresh.store, fresh.memory) - before
            engine.loop.dirs.give_back(workspace.root)
        finally:
            fresh.store.close()
        out[name] = {"written_mb": len(written) * mmap.PAGESIZE / MiB, "linear_memory_mb": result.usage.peak_memory_bytes / MiB,
                     "status": result.status}
    return out


def by_workers(
    tmp: Path, counts: tuple[int, ...], image: str = "stdlib", calls_per_client: int = 20, label: str = "mem"
) -> dict[str, Any]:
    """RSS and PSS of the server and its workers with each worker count, after every
    worker ran hellos (two clients per worker) and settled."""
    out: dict[str, Any] = {}
    for workers in counts:
        with server(workers, tmp / f"{label}-{workers}", image=image) as (port, proc):
            def calls() -> None:
                client = Http(port)
                for _ in range(calls_per_client):
                    client.sample(HELLO)
                client.close()

            threads = [threading.Thread(target=calls) for _ in range(2 * workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(1.0)  # spares made again, used instances torn down
            kids = [process_memory(pid) for pid in children(proc.pid)]
            main = process_memory(proc.pid)
            out[str(workers)] = {
                "server": main, "workers": kids,
                "total_rss_mb": main["rss_mb"] + sum(k["rss_mb"] for k in kids),
                "total_pss_mb": main["pss_mb"] + sum(k["pss_mb"] for k in kids),
            }
    return out


def measure(inproc: InProcess, tmp: Path, counts: tuple[int, ...], scale: float) -> dict[str, Any]:
    return {"per_run": per_run(inproc, scale), "by_workers": by_workers(tmp, counts),
            "bench_process": process_memory(_self_pid())}


def _self_pid() -> int:
    import os

    return os.getpid()
