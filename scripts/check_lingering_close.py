"""Manual check of the lingering close (wire/http_protocol.py) against a real `wasmrun serve`:
clients that keep writing after the server's answer must read that answer, never a reset.

    python scripts/check_lingering_close.py [--rounds 200] [--load] [--repo PATH]

Two cases, `--rounds` times each, in a row: a body trickled one byte every 10 ms (answered
408 after WASMRUN_BODY_TIMEOUT=0.5 s; the client trickles 20 more bytes after the answer has
arrived, then reads), and a body over WASMRUN_MAX_BODY_BYTES (answered 413 after its head;
the client writes its whole 1 MiB body, then reads). `--load` keeps both cores busy meanwhile
(two `python -c 'while 1: pass'` under `timeout`). `--repo` serves another checkout (e.g. one
before the lingering close) to see the resets this check is there to catch. Prints the counts:
answered (the right status read), reset, other.
"""

from __future__ import annotations

import argparse
import collections
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_BODY = 65536
OVERSIZE = 1024 * 1024


def start_server(repo: Path, data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_")}
    env.update(PYTHONPATH=str(repo), WASMRUN_IMAGE="stdlib", WASMRUN_BODY_TIMEOUT="0.5",
               WASMRUN_MAX_BODY_BYTES=str(MAX_BODY))
    server = subprocess.Popen(
        [sys.executable, "-m", "wasmrun", "serve", "--port", str(port), "--data-dir", str(data_dir), "--workers", "1"],
        env=env, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # cwd: `-m` imports from it
    )
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start")


def head(length: int) -> bytes:
    return (b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def trickled(conn: socket.socket) -> bytes:
    conn.sendall(head(10_000))
    more_after_answer = 20
    for _ in range(10_000):
        conn.sendall(b" ")
        if select.select([conn], [], [], 0.01)[0]:
            more_after_answer -= 1
            if more_after_answer == 0:
                break
    return read_all(conn)


def oversize(conn: socket.socket) -> bytes:
    conn.sendall(head(OVERSIZE))
    for _ in range(OVERSIZE // 16384):
        conn.sendall(b" " * 16384)
    return read_all(conn)


def one_round(port: int, client: Callable[[socket.socket], bytes], status: bytes) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            answer = client(conn)
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    except OSError as error:
        return f"other: {error!r}"
    return "answered" if answer.startswith(b"HTTP/1.1 " + status) else f"other: {answer[:40]!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--load", action="store_true", help="two busy processes, one per core, meanwhile")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to serve")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    load: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as data_dir:
        server = start_server(args.repo, Path(data_dir), port)
        try:
            if args.load:
                load = [subprocess.Popen(["timeout", "1800", sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
            for name, client, status in (("trickle 408", trickled, b"408"), ("oversize 413", oversize, b"413")):
                outcomes = collections.Counter(one_round(port, client, status) for _ in range(args.rounds))
                print(f"{name}: {args.rounds} rounds: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
                      flush=True)
        finally:
            for busy in load:
                busy.terminate()  # `timeout` passes it on to its busy child
                busy.wait()
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
