"""Where one `run_code` hello over HTTP keep-alive spends its time, hop by hop (medians).

    python scripts/http_hops.py [--rounds 20] [--burst 10] [--pace]

Starts two real servers (the app of `wasmrun serve`, one worker process each, uvloop +
httptools as `serve` uses): "starlette" answers /rpc through the Starlette route, "lean"
through wire/rpc_asgi.py. The client (this process) alternates between them request by
request, so machine noise falls on both alike. Each server records timestamps of its hops
(wasmrun/observe/phases.py's marks, plus the ASGI receive/send and the worker pipe), and
the client its send and receive: perf_counter_ns is CLOCK_MONOTONIC, one clock for all
processes. With --pace each request follows a 50-200 ms gap with a native `python3 -I -S`
spawn in it (a busy neighbour), as the bench's agent-pace row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HELLO = "def main(args):\n    print('hello')\n    return 1\n"
# (hop, from mark, to mark): client marks are "sent"/"received".
HOPS = (
    ("client send -> ASGI app called", "sent", "asgi"),
    ("ASGI: body received", "asgi", "body"),
    ("JSON-RPC decode -> dispatcher", "body", "call"),
    ("params + tenant admission", "call", "admitted"),
    ("to the worker pipe", "admitted", "to_worker"),
    ("worker round trip (pipe, run, result)", "to_worker", "from_worker"),
    ("result -> protocol answer", "from_worker", "answered"),
    ("audit + metrics", "answered", "audited"),
    ("JSON-RPC encode -> response start", "audited", "send_start"),
    ("response body sent", "send_start", "send_body"),
    ("-> client has the answer", "send_body", "received"),
)


# ---------------------------------------------------------------- server side


def serve(variant: str, port: int, data_dir: Path, marks_out: Path) -> None:
    import signal

    import uvicorn

    from wasmrun.observe import phases
    from wasmrun.sandbox import pool
    from wasmrun.server import create_app
    from wasmrun.settings import Settings

    settings = Settings(data_dir=data_dir, workers=1, port=port)
    app: Any = create_app(settings)
    if variant == "starlette":
        app.rpc = None  # POST /rpc through Starlette's stack and route (the same endpoint)
    mark = phases.mark
    exchange = pool._Worker.exchange

    async def timed_exchange(self: Any, *args: Any, **kwargs: Any) -> bytes:
        mark("to_worker")
        try:
            return await exchange(self, *args, **kwargs)
        finally:
            mark("from_worker")

    pool._Worker.exchange = timed_exchange  # type: ignore[method-assign]

    async def timed_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        mark("asgi")

        async def timed_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body"):
                mark("body")
            return message

        async def timed_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                mark("send_start")
            await send(message)
            if message["type"] == "http.response.body":
                mark("send_body")

        await app(scope, timed_receive, timed_send)

    with phases.recording() as marks:
        server = uvicorn.Server(uvicorn.Config(timed_app, port=port, log_level="warning", access_log=False))

        def stop(*_: Any) -> None:
            server.should_exit = True

        signal.signal(signal.SIGTERM, stop)
        server.run()
        marks_out.write_text(json.dumps(marks))


# ---------------------------------------------------------------- client side


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.n = 0

    def hello(self) -> tuple[int, int, dict[str, Any]]:
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": "run_code",
                           "params": {"language": "python", "code": HELLO}}).encode()
        head = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        data = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        sent = time.perf_counter_ns()
        self.sock.sendall(data)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            buffer += self.sock.recv(65536)
        headers, _, rest = buffer.partition(b"\r\n\r\n")
        size = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < size:
            rest += self.sock.recv(65536)
        received = time.perf_counter_ns()
        reply = json.loads(rest)
        assert reply["result"]["status"] == "completed", reply
        return sent, received, reply["result"]


def wait_up(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def schedstat(pid: int) -> dict[str, tuple[int, int]]:
    """Per thread name: (ns on a CPU, ns runnable but waiting for one) (/proc/PID/task/*/schedstat)."""
    out: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "main" if task.name == str(pid) else f"{(task / 'comm').read_text().strip()}/{task.name}"
            run, wait, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        was = out.get(name, (0, 0))
        out[name] = (was[0] + int(run), was[1] + int(wait))
    return out


def process_tree(pid: int) -> dict[str, int]:
    """The server and its worker processes (their children)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return {"server": pid, **{f"worker {i + 1}": int(c) for i, c in enumerate(children)}}


def per_request(marks: list[tuple[str, int]]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for name, at in marks:
        if name == "asgi":
            out.append({})
        if out:
            out[-1].setdefault(name, at)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--pace", action="store_true", help="50-200 ms gaps with a native spawn in each")
    parser.add_argument("--variants", default="starlette,lean")
    parser.add_argument("--serve", nargs=3, metavar=("VARIANT", "PORT", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        variant, port, where = args.serve
        serve(variant, int(port), Path(where), Path(where) / "marks.json")
        return
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        procs: dict[str, subprocess.Popen[bytes]] = {}
        ports: dict[str, int] = {}
        for v in variants:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports[v] = s.getsockname()[1]
            (Path(tmp) / v).mkdir()
            server_script = os.environ.get("HOPS_SERVER", __file__)  # a probe may wrap the server side
            procs[v] = subprocess.Popen([sys.executable, server_script, "--serve", v, str(ports[v]), f"{tmp}/{v}"])
        try:
            for v in variants:
                wait_up(ports[v], procs[v])
            clients = {v: Client(ports[v]) for v in variants}
            samples: dict[str, list[tuple[int, int, dict[str, Any]]]] = {v: [] for v in variants}
            for _ in range(3):
                for v in variants:
                    clients[v].hello()  # warm-up
            trees = {v: process_tree(procs[v].pid) for v in variants}
            before = {v: {k: schedstat(pid) for k, pid in trees[v].items()} for v in variants}
            for r in range(args.rounds):
                for i in range(args.burst):
                    order = variants if (r + i) % 2 == 0 else variants[::-1]
                    for v in order:
                        if args.pace:
                            gap = random.uniform(0.05, 0.2)
                            start = time.monotonic()
                            subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
                            time.sleep(max(0.0, gap - (time.monotonic() - start)))
                        samples[v].append(clients[v].hello())
            after = {v: {k: schedstat(pid) for k, pid in trees[v].items()} for v in variants}
            for c in clients.values():
                c.sock.close()
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                p.wait(timeout=30)
        report(variants, samples, {v: json.loads((Path(tmp) / v / "marks.json").read_text()) for v in variants})
        n = args.rounds * args.burst
        print("per request, from /proc/PID/task/*/schedstat (us): on a CPU / runnable but waiting for a CPU")
        for v in variants:
            for k in trees[v]:
                cells = []
                for thread, (run, wait) in after[v][k].items():
                    run0, wait0 = before[v][k].get(thread, (0, 0))
                    if (run - run0) / n >= 5e3:  # threads over 5 us a request
                        cells.append(f"{thread} {(run - run0) / n / 1e3:.0f} / {(wait - wait0) / n / 1e3:.0f}")
                print(f"  {v:10} {k:7} " + "   ".join(cells))


def report(variants: list[str], samples: dict[str, Any], marks: dict[str, Any]) -> None:
    rows: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    for v in variants:
        server_side = per_request(marks[v])[-len(samples[v]):]
        for (sent, received, result), at in zip(samples[v], server_side, strict=True):
            at = {**at, "sent": sent, "received": received}
            for name, a, b in HOPS:
                if a in at and b in at:
                    rows[v].setdefault(name, []).append((at[b] - at[a]) / 1e6)
            receipt = result.get("usage") or {}
            worker = (at["from_worker"] - at["to_worker"]) / 1e6
            inside = float(receipt.get("total_ms", 0.0))
            rows[v].setdefault("  of which engine.run in the worker", []).append(inside)
            rows[v].setdefault("  of which pipe hop + wake-ups + msgpack", []).append(worker - inside)
            rows[v].setdefault("TOTAL (client round trip)", []).append((received - sent) / 1e6)
    names = [h[0] for h in HOPS[:6]] + ["  of which engine.run in the worker", "  of which pipe hop + wake-ups + msgpack"]
    names += [h[0] for h in HOPS[6:]] + ["TOTAL (client round trip)"]
    print(f"{'hop (ms: p50 [p25-p75])':44}" + "".join(f"{v:>24}" for v in variants))
    for name in names:
        cells = []
        for v in variants:
            vals = rows[v].get(name)
            cells.append(f"{statistics.median(vals):7.3f} [{pct(vals, .25):.3f}-{pct(vals, .75):.3f}]" if vals else "-")
        print(f"{name:44}" + "".join(f"{c:>24}" for c in cells))
    print(f"samples per variant: {len(samples[variants[0]])}")


if __name__ == "__main__":
    main()
