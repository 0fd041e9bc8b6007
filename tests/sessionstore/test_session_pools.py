"""Each kind of session work on its own pool (issue 29): fork and close copy and
delete a session's folders on the session storage pool, at most half of it for
one tenant; the end of a session run (recording its new version) is on the run
pool. So a tenant forking and closing in a loop holds up neither another
tenant's runs nor its reads (the default pool). The timing side of this
(another tenant's session-run p50 under a fork/close flood) is measured by
scripts/bench_session_flood.py, not asserted here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from wasmrun import offload
from wasmrun.protocol.context import Context


def _recording(calls: list[tuple[str, str]], name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append((name, threading.current_thread().name))
        return method(*args, **kwargs)

    return call


def test_fork_and_close_run_on_the_session_pool_and_a_runs_end_on_the_run_pool(
    context: Context, rpc: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = context.sessions
    assert store is not None
    calls: list[tuple[str, str]] = []
    for name in ("create", "close", "finish_run"):
        monkeypatch.setattr(store, name, _recording(calls, name, getattr(store, name)))
    sid = rpc("create_session", {"language": "python"})["result"]["session_id"]
    ran = rpc("run_code", {"language": "python", "code": "x = 1", "session_id": sid})["result"]
    assert ran["status"] == "completed", ran
    fork = rpc("fork_session", {"session_id": sid})["result"]["session_id"]
    for closing in (sid, fork):
        assert rpc("close_session", {"session_id": closing})["result"] == {"closed": True}
    threads = {name: [t for n, t in calls if n == name] for name in ("create", "close", "finish_run")}
    # create_session's store call is a lookup-sized write on the loop; the fork's copy is on the pool
    assert threads["create"][-1].startswith("wasmrun-session-io"), calls
    assert all(t.startswith("wasmrun-session-io") for t in threads["close"]) and len(threads["close"]) == 2, calls
    assert threads["finish_run"] and all(t.startswith("wasmrun-run-io") for t in threads["finish_run"]), calls


def test_one_tenant_holds_at_most_its_share_of_the_session_pool() -> None:
    async def scenario() -> tuple[int, float]:
        release = threading.Event()
        running = 0
        most = 0
        lock = threading.Lock()

        def slow() -> None:
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
            release.wait(10)
            with lock:
                running -= 1

        flood = [asyncio.ensure_future(offload.for_session_storage("alice", slow)) for _ in range(8)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        # bob's call gets a thread while alice's eight wait on her share
        await offload.for_session_storage("bob", lambda: None)
        bob_wait = time.monotonic() - started
        release.set()
        await asyncio.gather(*flood)
        return most, bob_wait

    most, bob_wait = asyncio.run(scenario())
    assert most == offload.SESSION_THREADS_PER_TENANT < offload.SESSION_THREADS
    assert bob_wait < 5  # not behind alice's blocked calls (they wait up to 10 s)


def test_the_pools_are_apart() -> None:
    assert offload.session_pool() is not offload.run_pool()
