"""A worker process of a live server that dies while idle is replaced by the
pool's own monitor, with no request needed to notice it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx2

from tests.liveserver import LiveServer
from wasmrun.sandbox import WORKER_PACKAGE

WORKER_MODULE = b"\x00" + WORKER_PACKAGE.encode() + b"\x00"  # `-m` names it in their command lines


def worker_pids(server_pid: int) -> set[int]:
    """The server's worker processes, from /proc (its children running the pool module)."""
    pids: set[int] = set()
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if WORKER_MODULE in cmdline:
                pids.add(int(child))
    return pids


def wait_for(predicate, timeout: float = 60.0) -> bool:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_killed_idle_worker_is_replaced_without_a_request(tmp_path: Path) -> None:
    server = LiveServer(tmp_path / "data")
    try:
        pid = server.process.pid
        assert wait_for(lambda: len(worker_pids(pid)) == 2)
        before = worker_pids(pid)
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        # No request is sent: only the pool's monitor can notice the death.
        assert wait_for(lambda: len(worker_pids(pid) - before) == 1), worker_pids(pid)
        after = worker_pids(pid)
        assert victim not in after and len(after) == 2
        assert httpx2.get(f"{server.base_url}/healthz", timeout=10).json()["status"] == "ok"
        answer = httpx2.post(server.endpoint, json={
            "jsonrpc": "2.0", "id": 1, "method": "run_code",
            "params": {"language": "python", "code": "def main(args):\n    return 'served'\n"},
        }, timeout=60).json()
        assert answer["result"]["output"] == "served", answer
    finally:
        server.stop()
