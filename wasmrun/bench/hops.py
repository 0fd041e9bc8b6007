"""Where one `run_code` hello over HTTP keep-alive spends its time, hop by hop (medians).

    python -m wasmrun.bench.hops [--rounds 20] [--burst 10] [--pace] [--variants starlette,lean]

`wasmrun bench` runs it for the server as shipped ("lean"), back to back and at an agent's pace.

Starts two real servers (the app of `wasmrun serve`, one worker process each, uvloop +
httptools as `serve` uses): "starlette" answers /rpc through the Starlette route with
uvicorn's own protocol, "lean" as `wasmrun serve` now does: wire/rpc_asgi.py, and one write
per response (wire/http_protocol.py). The client (this process) alternates between them request by
request, so machine noise falls on both alike. Each server records timestamps of its hops
(wasmrun/phases.py's marks, plus the ASGI receive/send and the worker pipe), and
the client its send and receive: perf_counter_ns is CLOCK_MONOTONIC, one clock for all
processes. With --pace each request follows a 50-200 ms gap with a native `python3 -I -S`
spawn in it (a busy neighbour), as the bench's agent-pace row.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    ("response start sent", "send_start", "send_body"),
    ("body sent -> client has the answer", "send_body", "received"),
)


# ---------------------------------------------------------------- server side


def serve(variant: str, port: int, data_dir: Path, marks_out: Path) -> None:
    import signal

    import uvicorn

    from wasmrun import phases
    from wasmrun.sandbox import WorkerProcess
    from wasmrun.server import assemble, create_app
    from wasmrun.settings import Settings
    from wasmrun.wire.http_protocol import HttpProtocol

    settings = Settings(data_dir=data_dir, workers=1, port=port, image="stdlib")  # as the in-process rows
    app: Any = create_app(assemble(settings))
    if variant == "starlette":
        app.rpc = None  # POST /rpc through Starlette's stack and route (the same endpoint)
    mark = phases.mark
    exchange = WorkerProcess.exchange

    async def timed_exchange(self: Any, *args: Any, **kwargs: Any) -> bytes:
        mark("to_worker")
        try:
            return await exchange(self, *args, **kwargs)
        finally:
            mark("from_worker")

    WorkerProcess.exchange = timed_exchange  # type: ignore[method-assign]

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
            elif message["type"] == "http.response.body":
                mark("send_body")  # before: the client may have it by the time send returns
            await send(message)

        await app(scope, timed_receive, timed_send)

    with phases.recording() as marks:
        http: Any = "auto" if variant == "starlette" else HttpProtocol  # as `wasmrun serve`
        server = uvicorn.Server(uvicorn.Config(timed_app, port=port, log_level="warning", access_log=False, http=http))

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
        sent, received, result = self.call("run_code", {"language": "python", "code": HELLO})
        assert result["status"] == "completed", result
        return sent, received, result

    def call(self, method: str, params: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
        """One JSON-RPC call on the kept connection: when it was sent, when its answer was in, the result."""
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}).encode()
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
        assert "result" in reply, reply
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
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Sample = tuple[int, int, dict[str, Any]]  # client's send and receive (perf_counter_ns), the run's result
ThreadTimes = dict[str, dict[str, tuple[int, int]]]  # process -> thread -> (ns on a CPU, ns waiting)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _gap() -> None:
    """50-200 ms with a native `python3 -I -S` spawn in it (a busy neighbour)."""
    gap = random.uniform(0.05, 0.2)
    start = time.monotonic()
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    time.sleep(max(0.0, gap - (time.monotonic() - start)))


def _drive(
    variants: list[str], ports: dict[str, int], procs: dict[str, subprocess.Popen[bytes]], rounds: int, burst: int,
    pace: bool,
) -> tuple[dict[str, list[Sample]], dict[str, ThreadTimes], dict[str, ThreadTimes]]:
    """Hellos alternating between the servers (the order flips each time); each server's
    threads' CPU and run-queue wait before and after."""
    clients = {v: Client(ports[v]) for v in variants}
    samples: dict[str, list[Sample]] = {v: [] for v in variants}
    for _ in range(3):
        for v in variants:
            clients[v].hello()  # warm-up
    trees = {v: process_tree(procs[v].pid) for v in variants}
    before = {v: {k: schedstat(pid) for k, pid in trees[v].items()} for v in variants}
    for r in range(rounds):
        for i in range(burst):
            for v in variants if (r + i) % 2 == 0 else variants[::-1]:
                if pace:
                    _gap()
                samples[v].append(clients[v].hello())
    after = {v: {k: schedstat(pid) for k, pid in trees[v].items()} for v in variants}
    for c in clients.values():
        c.sock.close()
    return samples, before, after


def run(variants: list[str], rounds: int, burst: int, pace: bool) -> dict[str, Any]:
    """One interleaved run: per variant, each hop's p50/p25/p75 (ms) and each busy thread's
    CPU and run-queue wait per request (us)."""
    with tempfile.TemporaryDirectory() as tmp:
        procs: dict[str, subprocess.Popen[bytes]] = {}
        ports = {v: _free_port() for v in variants}
        try:
            for v in variants:
                (Path(tmp) / v).mkdir()
                procs[v] = subprocess.Popen(
                    [sys.executable, "-m", "wasmrun.bench.hops", "--serve", v, str(ports[v]), f"{tmp}/{v}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            for v in variants:
                wait_up(ports[v], procs[v])
            samples, before, after = _drive(variants, ports, procs, rounds, burst, pace)
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                p.wait(timeout=30)
        marks = {v: json.loads((Path(tmp) / v / "marks.json").read_text()) for v in variants}
    return {
        v: {"hops_ms": summarise(samples[v], marks[v]), "threads_us": _thread_times(before[v], after[v], rounds * burst)}
        for v in variants
    }


def _thread_times(before: ThreadTimes, after: ThreadTimes, n: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for process, threads in after.items():
        for thread, (on_cpu, waiting) in threads.items():
            cpu0, wait0 = before[process].get(thread, (0, 0))
            if (on_cpu - cpu0) / n >= 5e3:  # threads over 5 us a request
                out[f"{process} {thread}"] = {"cpu": (on_cpu - cpu0) / n / 1e3, "waiting": (waiting - wait0) / n / 1e3}
    return out


WORKER_RUN = "  of which engine.run in the worker"
WORKER_HOP = "  of which pipe hop + wake-ups + msgpack"
TOTAL = "TOTAL (client round trip)"
LAYER = "HTTP layer (total - engine.run)"
ROWS = [h[0] for h in HOPS[:6]] + [WORKER_RUN, WORKER_HOP] + [h[0] for h in HOPS[6:]] + [TOTAL, LAYER]


def summarise(samples: list[Sample], marks: list[tuple[str, int]]) -> dict[str, dict[str, float]]:
    rows: dict[str, list[float]] = {}
    server_side = per_request(marks)[-len(samples):]
    for (sent, received, result), server_at in zip(samples, server_side, strict=True):
        at = {**server_at, "sent": sent, "received": received}
        for name, a, b in HOPS:
            if a in at and b in at:
                rows.setdefault(name, []).append((at[b] - at[a]) / 1e6)
        inside = float((result.get("usage") or {}).get("total_ms", 0.0))
        rows.setdefault(WORKER_RUN, []).append(inside)
        rows.setdefault(WORKER_HOP, []).append((at["from_worker"] - at["to_worker"]) / 1e6 - inside)
        rows.setdefault(TOTAL, []).append((received - sent) / 1e6)
        rows.setdefault(LAYER, []).append((received - sent) / 1e6 - inside)
    return {
        name: {"p50": statistics.median(v), "p25": pct(v, 0.25), "p75": pct(v, 0.75), "n": len(v)}
        for name, v in rows.items()
    }


def table(result: dict[str, Any]) -> str:
    variants = list(result)
    lines = [f"{'hop (ms: p50 [p25-p75])':44}" + "".join(f"{v:>24}" for v in variants)]
    for name in ROWS:
        cells = []
        for v in variants:
            f = result[v]["hops_ms"].get(name)
            cells.append(f"{f['p50']:7.3f} [{f['p25']:.3f}-{f['p75']:.3f}]" if f else "-")
        lines.append(f"{name:44}" + "".join(f"{c:>24}" for c in cells))
    lines.append("per request, from /proc/PID/task/*/schedstat (us): on a CPU / runnable but waiting for a CPU")
    for v in variants:
        cells = [f"{t} {f['cpu']:.0f} / {f['waiting']:.0f}" for t, f in result[v]["threads_us"].items()]
        lines.append(f"  {v:10} " + "   ".join(cells))
    return "\n".join(lines)


def measure(rounds: int, burst: int) -> dict[str, Any]:
    """For `wasmrun bench`: the server as shipped, back to back, then at an agent's pace."""
    return {
        "back_to_back": run(["lean"], rounds, burst, pace=False)["lean"],
        "paced": run(["lean"], max(1, rounds // 2), burst, pace=True)["lean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--pace", action="store_true", help="50-200 ms gaps with a native spawn in each")
    parser.add_argument("--variants", default="starlette,lean")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--serve", nargs=3, metavar=("VARIANT", "PORT", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        variant, port, where = args.serve
        serve(variant, int(port), Path(where), Path(where) / "marks.json")
        return
    result = run(args.variants.split(","), args.rounds, args.burst, args.pace)
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
