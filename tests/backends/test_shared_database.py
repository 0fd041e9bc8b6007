"""Several servers sharing one PostgreSQL (`--database-url`): tenants, key hashes,
schema migrations and the audit log, against a real PostgreSQL server
(tests/postgres.py) and real `wasmrun serve` processes."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest

from tests.liveserver import LiveServer, wasmrun_env
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from wasmrun.database.connection import Database
from wasmrun.database.migrations import LATEST, MIGRATIONS
from wasmrun.database.tenants import PgTenantStore
from wasmrun.tenants.store import TenantError


def wasmrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wasmrun", *args], env=wasmrun_env(), capture_output=True, text=True, timeout=180
    )


def call(server: LiveServer, key: str | None, method: str, params: Any = None) -> httpx2.Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    return httpx2.post(server.endpoint, json=body, headers=headers, timeout=120)


def test_migrate_applies_each_step_once(database_url: str) -> None:  # noqa: F811
    steps = [version for version, _ in MIGRATIONS]
    first = wasmrun("migrate", "--database-url", database_url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"schema at version {LATEST} (applied {', '.join(str(v) for v in steps)})"
    again = wasmrun("migrate", "--database-url", database_url)
    assert again.returncode == 0 and again.stdout.strip() == f"schema at version {LATEST} (up to date)"
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM wasmrun_schema ORDER BY version")] == steps
        conn.execute("INSERT INTO wasmrun_schema (version) VALUES (%s)", (LATEST + 1,))
    newer = wasmrun("migrate", "--database-url", database_url)
    assert newer.returncode == 2 and "newer than this wasmrun" in newer.stderr


def test_servers_starting_together_migrate_once(database_url: str) -> None:  # noqa: F811
    """Concurrent migrations (servers starting at once) apply each step exactly once."""
    results: list[list[int]] = []

    def migrate() -> None:
        database = Database(database_url)
        try:
            results.append(database.migrate())
        finally:
            database.close()

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results, key=len) == [[], [], [], [version for version, _ in MIGRATIONS]]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://admin:hunter2@db.example/wasmrun", "must start with postgresql://"),
        ("postgresql://admin:hunter2@/nodb?host=/nonexistent-socket-dir", "cannot connect to postgresql://"),
    ],
)
def test_a_bad_database_url_is_a_clear_error_without_the_password(url: str, said: str) -> None:
    for args in (["migrate", "--database-url", url], ["tenants", "list", "--database-url", url]):
        done = wasmrun(*args)
        assert done.returncode == 2, done.stderr
        assert said in done.stderr and "hunter2" not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr


def test_concurrent_adds_of_one_tenant_one_wins(database_url: str) -> None:  # noqa: F811
    """Two servers' operators adding the same tenant at once: one key, one clear refusal."""
    Database(database_url).migrate()
    keys: list[str] = []
    refusals: list[str] = []

    def add() -> None:
        store = PgTenantStore(Database(database_url))
        try:
            keys.append(store.add("acme"))
        except TenantError as exc:
            refusals.append(str(exc))
        finally:
            store.database.close()

    threads = [threading.Thread(target=add) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(keys) == 1 and len(refusals) == 5
    assert all("already exists" in r for r in refusals)
    doc = PgTenantStore(Database(database_url)).load()
    assert list(doc.tenants) == ["acme"] and len(doc.tenants["acme"].keys) == 1


def test_two_servers_share_tenants_keys_and_the_audit_log(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    added = wasmrun("tenants", "add", "acme", "--limit", "concurrent_runs=2", "--database-url", database_url)
    assert added.returncode == 0, added.stderr
    acme = added.stdout.strip()
    servers = [LiveServer(tmp_path / f"data-{i}", "--database-url", database_url) for i in range(2)]
    try:
        for server in servers:
            ok = call(server, acme, "list_skills")
            assert ok.status_code == 200 and "result" in ok.json(), ok.text
            # Tenants exist in the shared database: no server serves anonymously any more.
            assert call(server, None, "list_skills").status_code == 401
            assert call(server, acme + "x", "list_skills").status_code == 401
        # A tenant added through any server's database is known to both on the next call.
        bob = wasmrun("tenants", "add", "bob", "--database-url", database_url).stdout.strip()
        assert [call(s, bob, "list_skills").status_code for s in servers] == [200, 200]
        # A rotation, then revoking the old key: every server refuses it on the next call.
        new = wasmrun("tenants", "rotate", "acme", "--database-url", database_url).stdout.strip()
        assert [call(s, acme, "list_skills").status_code for s in servers] == [200, 200]
        assert wasmrun("tenants", "revoke", "acme", "--old", "--database-url", database_url).returncode == 0
        assert [call(s, acme, "list_skills").status_code for s in servers] == [401, 401]
        assert [call(s, new, "list_skills").status_code for s in servers] == [200, 200]
        listed = wasmrun("tenants", "list", "--database-url", database_url)
        assert "concurrent_runs=2" in listed.stdout and "bob" in listed.stdout
        # The local files were never used: the tenants and the audit live in the database.
        for i in range(2):
            assert not (tmp_path / f"data-{i}" / "tenants.json").exists()
            assert not (tmp_path / f"data-{i}" / "audit.log").exists()
    finally:
        for server in servers:
            server.stop()
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT tenant, record FROM wasmrun_audit ORDER BY id").fetchall()
    # Every answered call with a key, from both servers: acme 2 + 2 + 2, bob 2, new key 2.
    assert [tenant for tenant, _ in rows].count("acme") == 6
    assert [tenant for tenant, _ in rows].count("bob") == 2
    assert all('"method":"list_skills"' in record for _, record in rows)


def test_without_a_database_url_the_files_stay(tmp_path: Path) -> None:
    """The local default: `tenants add` writes the tenants file, as before."""
    data = tmp_path / "data"
    added = wasmrun("tenants", "add", "acme", "--data-dir", str(data))
    assert added.returncode == 0, added.stderr
    assert (data / "tenants.json").exists()


SKILL_MD = "---\nname: Echo\nshort_description: Says what it was given.\n---\n# Echo\n"


def skill_params(name: str = "user.team.echo", version: str = "0.1.0", said: str = "echo") -> dict[str, Any]:
    return {
        "manifest": {
            "name": name, "version": version, "description": "Echo the args.", "kind": "action",
            "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"},
        },
        "skill_md": SKILL_MD,
        "files": [
            {"path": "code/main.py", "content": "from . import helper\n\ndef main(args):\n    return helper.said(args)\n"},
            {"path": "code/helper.py", "content": f"def said(args):\n    return {{{said!r}: args}}\n"},
        ],
    }


def test_a_skill_created_on_one_server_is_served_by_every_server(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    servers = [LiveServer(tmp_path / f"data-{i}", "--database-url", database_url) for i in range(2)]
    a, b = servers
    try:
        made = call(a, None, "create_skill", skill_params()).json()
        assert made["result"] == {"name": "user.team.echo", "version": "0.1.0"}, made
        # On B at once, with no restart: listed (the namespace filter too), described, run.
        listed = call(b, None, "list_skills", {"namespace": "user"}).json()["result"]["skills"]
        assert [(s["name"], s["version"]) for s in listed] == [("user.team.echo", "0.1.0")]
        described = call(b, None, "describe_skill", {"name": "user.team.echo"}).json()["result"]["skill"]
        assert described["manifest"]["description"] == "Echo the args."
        ran = call(b, None, "execute_skill", {"name": "user.team.echo", "args": {"x": 1}}).json()["result"]
        assert ran["status"] == "completed" and ran["output"] == {"echo": {"x": 1}}, ran
        # A higher version made on B is the one A runs when no version is named.
        assert "result" in call(b, None, "create_skill", skill_params(version="0.2.0", said="two")).json()
        ran = call(a, None, "execute_skill", {"name": "user.team.echo", "args": {}}).json()["result"]
        assert ran["output"] == {"two": {}}, ran
        # Both servers creating one name and version at once: exactly one wins.
        answers: list[dict[str, Any]] = []

        def create(server: LiveServer) -> None:
            answers.append(call(server, None, "create_skill", skill_params(version="1.0.0", said=server.endpoint)).json())

        threads = [threading.Thread(target=create, args=(s,)) for s in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        won = [x for x in answers if "result" in x]
        lost = [x for x in answers if "error" in x]
        assert len(won) == 1 and len(lost) == 3, answers
        assert all(x["error"]["code"] == -32602 and "already exists" in x["error"]["message"] for x in lost)
        outputs = [call(s, None, "execute_skill", {"name": "user.team.echo", "version": "1.0.0", "args": {}})
                   .json()["result"]["output"] for s in servers]
        assert outputs[0] == outputs[1] and len(outputs[0]) == 1  # one winner's code, on both
        # The mounted copy is read-only and named by its content hash.
        cached = [p for p in (tmp_path / "data-1" / "skill-cache").iterdir() if not p.name.startswith(".")]
        assert cached and all(len(p.name) == 64 for p in cached)
        assert all(not (p / "code" / "main.py").stat().st_mode & 0o222 for p in cached)
    finally:
        for server in servers:
            server.stop()
    # A third server, started afresh with an empty data folder, serves every acknowledged version.
    c = LiveServer(tmp_path / "data-new", "--database-url", database_url)
    try:
        listed = call(c, None, "list_skills", {"namespace": "user"}).json()["result"]["skills"]
        assert sorted(s["version"] for s in listed) == ["0.1.0", "0.2.0", "1.0.0"]
    finally:
        c.stop()


def test_a_tenants_skill_quota_holds_across_servers(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    key = wasmrun("tenants", "add", "acme", "--limit", "skills=2", "--database-url", database_url).stdout.strip()
    other = wasmrun("tenants", "add", "other", "--database-url", database_url).stdout.strip()
    servers = [LiveServer(tmp_path / f"data-{i}", "--database-url", database_url) for i in range(2)]
    try:
        assert "result" in call(servers[0], key, "create_skill", skill_params(version="0.1.0")).json()
        assert "result" in call(servers[1], key, "create_skill", skill_params(version="0.2.0")).json()
        refused = [call(s, key, "create_skill", skill_params(version="0.3.0")).json() for s in servers]
        assert all("error" in r and "skills" in r["error"]["message"] for r in refused), refused
        # Another tenant neither sees acme's skills nor is limited by them.
        assert call(servers[1], other, "list_skills", {"namespace": "user"}).json()["result"]["skills"] == []
        assert "result" in call(servers[1], other, "create_skill", skill_params(version="0.3.0")).json()
    finally:
        for server in servers:
            server.stop()


def test_a_tenants_concurrent_runs_hold_across_servers(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    import time

    key = wasmrun("tenants", "add", "acme", "--limit", "concurrent_runs=1", "--database-url", database_url).stdout.strip()
    env = wasmrun_env() | {"WASMRUN_QUEUE_TIMEOUT": "2"}
    servers = [LiveServer(tmp_path / f"data-{i}", "--database-url", database_url, env=env) for i in range(2)]
    a, b = servers
    sleeper = {"language": "python", "code": "import time\n\ndef main(args):\n    time.sleep(8)\n    return 'slept'\n"}
    hello = {"language": "python", "code": "def main(args):\n    return 'hi'\n"}
    try:
        answers: list[Any] = []
        runner = threading.Thread(target=lambda: answers.append(call(a, key, "run_code", sleeper).json()))
        runner.start()
        deadline = time.monotonic() + 60
        with psycopg.connect(database_url, autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM wasmrun_run_leases").fetchone() != (1,):
                assert time.monotonic() < deadline, "the run on A never took its lease"
                time.sleep(0.05)
        # A's run holds acme's one slot: B makes acme wait, then says busy.
        refused = call(b, key, "run_code", hello).json()
        assert "error" in refused and "concurrent_runs" in refused["error"]["message"], refused
        runner.join(120)
        assert answers[0]["result"]["output"] == "slept", answers
        # Freed on A: B runs acme's next one.
        assert call(b, key, "run_code", hello).json()["result"]["output"] == "hi"
    finally:
        for server in servers:
            server.stop()
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM wasmrun_run_leases").fetchone() == (0,)
