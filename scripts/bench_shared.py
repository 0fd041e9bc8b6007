"""The shared-backend benchmark row (issue 13): hello world and a 5 MB blob read by a
run, through a server on PostgreSQL + `rclone serve s3` against one on local files;
and hello-world throughput of two shared servers against one.

    python scripts/bench_shared.py [--runs 30] [--seconds 10]

Starts its own PostgreSQL (tests/postgres.py) and S3 server (tests/objectstore.py) in
temporary folders, and servers with one worker each on 127.0.0.1.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-shared-"))
    pg, s3 = PostgresServer(), S3Server()
    env = wasmrun_env() | s3.env()
    shared = ["--database-url", pg.new_database(), "--blob-store", s3.new_bucket(), "--workers", "1"]
    try:
        local = LiveServer(tmp / "local", "--workers", "1")
        try:
            local_hello, local_read = latencies(local, opts.runs)
        finally:
            local.stop()
        a = LiveServer(tmp / "a", *shared, env=env)
        try:
            shared_hello, shared_read = latencies(a, opts.runs)
            one = throughput([a], opts.seconds)
            b = LiveServer(tmp / "b", *shared, env=env)
            try:
                two = throughput([a, b], opts.seconds)
            finally:
                b.stop()
        finally:
            a.stop()
        print(f"hello p50 ms: local {local_hello:.1f}, shared {shared_hello:.1f}")
        print(f"5 MB blob read in a run, p50 ms: local {local_read:.1f}, shared {shared_read:.1f}")
        print(f"hello throughput, runs/s (1 worker each): one shared server {one:.1f}, two {two:.1f}"
              f" ({two / one:.2f}x; cores: {os.cpu_count()})")
    finally:
        s3.stop()
        pg.stop()


if __name__ == "__main__":
    main()
