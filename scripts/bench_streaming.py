"""Streaming's costs, measured side by side (docs/streaming.md):

    python scripts/bench_streaming.py [--before /path/to/other/checkout] [--rounds 300]

1. A non-streamed hello run over HTTP (`run_code` posted to /rpc), on a server from
   this checkout and, with --before, one from another checkout (e.g. main), rounds
   alternating between them so that machine noise hits both alike. Also a hello
   `tools/call` over /mcp (its transport now runs in SSE mode).
2. Event latency of a streamed run: the guest stamps each line with the host's
   wall clock as it prints it; the client subtracts that from the moment the
   event arrives. While the guest sleeps between prints, and while it computes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parent.parent
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "run_code",
         "params": {"language": "python", "code": "def main(args):\n    print('hello')\n    return 'hi'\n"}}
STAMPED = (
    "import time\n"
    "def main(args):\n"
    "    for i in range(20):\n"
    "        print(repr(time.time()))\n"
    "        if args['busy']:\n"
    "            end = time.time() + 0.05\n"
    "            while time.time() < end:\n"
    "                pass\n"
    "        else:\n"
    "            time.sleep(0.05)\n"
)


class Server:
    def __init__(self, checkout: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_")}
        env["PYTHONPATH"] = str(checkout)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "wasmrun", "serve", "--port", str(self.port), "--data-dir", tempfile.mkdtemp(),
             "--workers", "1", "--allow-one-worker"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            try:
                if httpx2.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx2.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"server from {checkout} did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hello_ms(http: httpx2.Client, server: Server) -> float:
    t0 = time.perf_counter()
    answer = http.post(server.url + "/rpc", json=HELLO)
    elapsed = (time.perf_counter() - t0) * 1000
    assert answer.json()["result"]["output"] == "hi"
    return elapsed


def _mcp_hello_ms(http: httpx2.Client, server: Server, session: str) -> float:
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_code", "arguments": HELLO["params"]}}
    headers = {"accept": "application/json, text/event-stream", "mcp-session-id": session,
               "mcp-protocol-version": "2025-06-18"}
    t0 = time.perf_counter()
    answer = http.post(server.url + "/mcp", json=call, headers=headers)
    elapsed = (time.perf_counter() - t0) * 1000
    assert answer.json()["result"]["structuredContent"]["output"] == "hi", answer.text
    return elapsed


def _mcp_session(http: httpx2.Client, server: Server) -> str:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}}}
    answer = http.post(server.url + "/mcp", json=hello, headers={"accept": "application/json, text/event-stream"})
    session = answer.headers["mcp-session-id"]
    http.post(server.url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
              headers={"accept": "application/json, text/event-stream", "mcp-session-id": session,
                       "mcp-protocol-version": "2025-06-18"})
    return session


def _latencies(http: httpx2.Client, server: Server, busy: bool) -> list[float]:
    call = {"jsonrpc": "2.0", "id": 3, "method": "run_code",
            "params": {"language": "python", "code": STAMPED, "args": {"busy": busy}, "stream": True}}
    found = []
    with http.stream("POST", server.url + "/rpc", json=call, headers={"accept": "text/event-stream"}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrived = time.time()
                message = json.loads(line[6:])
                if message.get("method") == "run/output":
                    for stamp in message["params"]["text"].split():
                        found.append((arrived - float(stamp)) * 1000)
    return found


def _summary(values: list[float]) -> str:
    values = sorted(values)
    return (f"p50 {statistics.median(values):.2f} ms, p90 {values[int(len(values) * 0.9)]:.2f} ms,"
            f" max {values[-1]:.2f} ms (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="another checkout to compare with (e.g. main)")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    servers = {"after (this checkout)": Server(ROOT)}
    if args.before is not None:
        servers["before (" + str(args.before) + ")"] = Server(args.before)
    try:
        with httpx2.Client(timeout=60) as http:
            sessions = {name: _mcp_session(http, s) for name, s in servers.items()}
            for server in servers.values():  # warm up
                for _ in range(20):
                    _hello_ms(http, server)
            hello: dict[str, list[float]] = {name: [] for name in servers}
            mcp: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(args.rounds):
                for name, server in servers.items():
                    hello[name].append(_hello_ms(http, server))
                    mcp[name].append(_mcp_hello_ms(http, server, sessions[name]))
            for name in servers:
                print(f"hello over /rpc, {name}: {_summary(hello[name])}")
                print(f"hello tools/call over /mcp, {name}: {_summary(mcp[name])}")
            after = servers["after (this checkout)"]
            for busy in (False, True):
                what = "computing" if busy else "sleeping"
                print(f"event latency, guest {what} between prints: {_summary(_latencies(http, after, busy))}")
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
