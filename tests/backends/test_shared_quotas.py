"""A tenant's run limits (runs_per_minute, queued_runs, concurrent_runs) hold across
servers sharing one PostgreSQL: two real `wasmrun serve` processes, a real database
(tests/postgres.py), and a server killed mid-run."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import psycopg

from tests.backends.test_shared_database import call, wasmrun
from tests.liveserver import LiveServer, wasmrun_env
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)

HELLO = {"language": "python", "code": "def main(args):\n    return 'hi'\n"}
SLEEPER = {"language": "python", "code": "import time\n\ndef main(args):\n    time.sleep(20)\n    return 'slept'\n"}


def add_tenant(database_url: str, *limits: str) -> str:  # noqa: F811
    args = [a for limit in limits for a in ("--limit", limit)]
    added = wasmrun("tenants", "add", "acme", *args, "--database-url", database_url)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip()


def servers(tmp_path: Path, database_url: str, queue_timeout: str = "20") -> list[LiveServer]:  # noqa: F811
    env = wasmrun_env() | {"WASMRUN_QUEUE_TIMEOUT": queue_timeout}
    return [LiveServer(tmp_path / f"data-{i}", "--database-url", database_url, env=env) for i in range(2)]


def leases(database_url: str) -> list[tuple[bool, str]]:  # noqa: F811
    with psycopg.connect(database_url, autocommit=True) as conn:
        return [(bool(w), s) for w, s in conn.execute("SELECT waiting, server FROM wasmrun_run_leases ORDER BY id")]


def wait_for_leases(database_url: str, wanted: list[bool]) -> None:  # noqa: F811
    """Until the database holds leases in these states (True: waiting), in order."""
    deadline = time.monotonic() + 90
    while [w for w, _ in leases(database_url)] != wanted:
        assert time.monotonic() < deadline, f"leases stayed {leases(database_url)}, wanted {wanted}"
        time.sleep(0.05)


def in_thread(server: LiveServer, key: str, params: dict[str, Any], into: list[httpx2.Response]) -> threading.Thread:
    def run() -> None:
        try:
            into.append(call(server, key, "run_code", params))
        except httpx2.TransportError:
            pass  # its server was killed

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_runs_per_minute_counts_the_starts_of_every_server(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    key = add_tenant(database_url, "runs_per_minute=3")
    a, b = servers(tmp_path, database_url)
    try:
        # Three starts in all, wherever they land (each server alone would allow three).
        for server in (a, b, a):
            ran = call(server, key, "run_code", HELLO).json()
            assert ran["result"]["output"] == "hi", ran
        for server in (b, a):
            refused = call(server, key, "run_code", HELLO)
            error = refused.json()["error"]
            assert error["code"] == -32002 and error["data"]["limit"] == "runs_per_minute", error
            assert error["data"]["value"] == 3 and "runs_per_minute = 3" in error["message"]
            retry = int(refused.headers["retry-after"])
            assert 1 <= retry <= 60 and error["data"]["retry_after_s"] == retry
        # Another tenant is not limited by acme's minute.
        other = wasmrun("tenants", "add", "other", "--database-url", database_url).stdout.strip()
        assert call(b, other, "run_code", HELLO).json()["result"]["output"] == "hi"
        # Once acme's starts leave the minute (moved back here rather than waited for), it runs again.
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE wasmrun_run_starts SET at = at - interval '61 seconds' WHERE tenant = 'acme'")
        assert call(b, key, "run_code", HELLO).json()["result"]["output"] == "hi"
    finally:
        for server in (a, b):
            server.stop()


def test_concurrent_starts_on_two_servers_never_pass_the_rate(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    key = add_tenant(database_url, "runs_per_minute=4", "concurrent_runs=20", "queued_runs=20")
    a, b = servers(tmp_path, database_url)
    try:
        answers: list[httpx2.Response] = []
        threads = [in_thread(server, key, HELLO, answers) for server in (a, b) * 5]
        for t in threads:
            t.join(240)
        ran = [r.json() for r in answers if "result" in r.json()]
        refused = [r.json()["error"] for r in answers if "error" in r.json()]
        assert len(ran) == 4 and len(refused) == 6, [r.text for r in answers]
        assert all(e["code"] == -32002 and e["data"]["limit"] == "runs_per_minute" for e in refused)
    finally:
        for server in (a, b):
            server.stop()


def test_queued_runs_counts_the_waiting_runs_of_every_server(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    key = add_tenant(database_url, "concurrent_runs=1", "queued_runs=1")
    a, b = servers(tmp_path, database_url)
    try:
        answers: list[httpx2.Response] = []
        sleeping = in_thread(a, key, SLEEPER, answers)
        wait_for_leases(database_url, [False])
        # B's run waits for acme's one slot (held on A): acme's one queue place, across servers.
        waiting = in_thread(b, key, HELLO, answers)
        wait_for_leases(database_url, [False, True])
        for server in (a, b):
            refused = call(server, key, "run_code", HELLO).json()["error"]
            assert refused["code"] == -32002 and refused["data"]["limit"] == "queued_runs", refused
            assert "queued_runs = 1" in refused["message"]
        sleeping.join(120)
        waiting.join(120)
        assert sorted(r.json()["result"]["output"] for r in answers) == ["hi", "slept"], [r.text for r in answers]
        assert leases(database_url) == []
    finally:
        for server in (a, b):
            server.stop()


def test_a_killed_servers_runs_and_waiting_runs_stop_counting(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    key = add_tenant(database_url, "concurrent_runs=1", "queued_runs=1")
    a, b = servers(tmp_path, database_url, queue_timeout="60")
    try:
        answers: list[httpx2.Response] = []
        threads = [in_thread(a, key, SLEEPER, answers)]
        wait_for_leases(database_url, [False])
        threads.append(in_thread(a, key, HELLO, answers))
        wait_for_leases(database_url, [False, True])
        a.process.kill()  # mid-run, with a run waiting: nothing of A's gives its lease back
        a.process.wait(60)
        for t in threads:
            t.join(60)
        assert [w for w, _ in leases(database_url)] == [False, True]
        refused = call(b, key, "run_code", HELLO).json()["error"]
        assert refused["data"]["limit"] == "queued_runs", refused
        # A's heartbeat has stopped: once it is SERVER_GONE_S old (aged here rather than
        # waited for), B's next admission drops A's leases and runs acme's call.
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE wasmrun_servers SET seen = seen - interval '10 minutes'")
        assert call(b, key, "run_code", HELLO).json()["result"]["output"] == "hi"
        assert leases(database_url) == []
    finally:
        if a.process.poll() is None:
            a.process.kill()
        b.stop()
