"""Every core used: runs per second of one `wasmrun serve` with 1, 2, ... concurrent clients.

Issue #23 asks that N concurrent clients get at least 0.9x N times the throughput of one,
up to the core count, for a hello and for a compute job. Each client is a thread with its
own keep-alive connection (`Http`), calling back to back. The client counts are measured
in alternating windows, so a drift of the machine hits every count alike; each count's
figure is the median of its windows. The clients share the machine with the server, so on
a small machine the hello's efficiency also shows what the client side costs.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

from wasmrun.bench.systems import HELLO, Http
from wasmrun.bench.workloads import COMPUTE

# A CPU-bound job of ~50-100 ms in the sandbox: long enough that the HTTP path is a few
# percent of it, short enough for many jobs per window.
JOB = next(w for w in COMPUTE if w.name == "for loop arithmetic")
JOB_SCALE = 0.3


def client_counts(cores: int | None = None) -> list[int]:
    """1, 2, 4, ... up to the core count, and the core count itself."""
    cores = cores or os.cpu_count() or 2
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    if counts[-1] != cores:
        counts.append(cores)
    return counts


def runs_per_second(port: int, source: str, clients: int, seconds: float) -> float:
    """Runs completed per second by `clients` threads calling back to back for `seconds`."""
    connections = [Http(port) for _ in range(clients)]
    done = [0] * clients
    failed: list[BaseException] = []
    start = time.monotonic()
    stop = start + seconds

    def loop(i: int) -> None:
        try:
            while time.monotonic() < stop:
                connections[i].sample(source)
                done[i] += 1
        except BaseException as exc:  # reported by the caller's thread
            failed.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    for connection in connections:
        connection.close()
    if failed:
        raise RuntimeError(f"a client failed: {failed[0]!r}")
    return sum(done) / elapsed


def measure(port: int, windows: int, seconds: float, cores: int | None = None) -> dict[str, Any]:
    """For hello and the compute job: runs/s by client count, and each count's efficiency
    (its runs/s over count x one client's)."""
    counts = client_counts(cores)
    jobs = {"hello": HELLO, "compute job": JOB.source(JOB_SCALE)}
    out: dict[str, Any] = {"cores": cores or os.cpu_count(), "window_s": seconds, "windows": windows,
                           "compute_job": f"{JOB.name}, N={int(JOB.n * JOB_SCALE)}", "jobs": {}}
    for name, source in jobs.items():
        warm = Http(port)
        warm.sample(source)  # warm every worker's caches before timing
        warm.close()
        rates: dict[int, list[float]] = {c: [] for c in counts}
        for w in range(windows):
            order = counts if w % 2 == 0 else counts[::-1]
            for c in order:
                rates[c].append(runs_per_second(port, source, c, seconds))
        median = {c: statistics.median(v) for c, v in rates.items()}
        one = median[1]
        out["jobs"][name] = {
            str(c): {"runs_per_s": median[c], "efficiency": median[c] / (c * one) if one else 0.0}
            for c in counts
        }
    return out


def lines(scaling: dict[str, Any] | None) -> list[str]:
    """The README table: runs/s by concurrent clients, and the efficiency against the goal."""
    if not scaling:
        return []
    out = ["", f"| every core used ({scaling['cores']} cores; compute job: {scaling['compute_job']}) "
               "| clients | runs/s | / (clients x one client) |", "|---|---:|---:|---:|"]
    for job, by_count in scaling["jobs"].items():
        for count, fig in by_count.items():
            out.append(f"| {job} | {count} | {fig['runs_per_s']:.0f} | {fig['efficiency']:.2f}x |")
    worst = {job: min(fig["efficiency"] for fig in by_count.values()) for job, by_count in scaling["jobs"].items()}
    out += ["", "Every core used: " + "; ".join(f"{job} {eff:.2f}x" for job, eff in worst.items())
            + " of N times one client at worst (goal >= 0.9x)."]
    return out
