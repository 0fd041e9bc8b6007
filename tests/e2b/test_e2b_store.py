"""E2B sandboxes live where the sessions live (wasmrun/e2b/records.py): through the real
SDK (sync and async), a sandbox survives a restart of its server between two calls, and
with the shared backends (a real PostgreSQL and a real S3-compatible store, two real
`wasmrun serve` processes) a sandbox made on one server is used, listed, timed out and
killed on the other; two servers never run one sandbox's cells at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from e2b import NotFoundException, SandboxException, TimeoutException
from e2b.exceptions import SandboxNotFoundException
from e2b_code_interpreter import AsyncSandbox, Sandbox

from tests.backends.test_shared_database import wasmrun
from tests.e2benv import e2b_environment
from tests.liveserver import LiveServer
from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import PostgresServer, postgres_server  # noqa: F401  (fixtures)
from wasmrun.tenants.store import TenantStore

GONE = (NotFoundException, SandboxNotFoundException, TimeoutException, SandboxException)


def urls(server: LiveServer) -> dict[str, str]:
    return {"api_url": f"{server.base_url}/e2b/api", "sandbox_url": f"{server.base_url}/e2b/sandbox"}


def on(server: LiveServer, sandbox_id: str, key: str) -> Sandbox:
    """The sandbox reached through `server` (E2B code given another server's URLs)."""
    return Sandbox.connect(sandbox_id, api_key=key, **urls(server))


# -- one server, restarted -------------------------------------------------------


def test_a_sandbox_survives_a_restart_between_two_calls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = TenantStore(data)
    alice, bob = store.add("alice"), store.add("bob")
    with e2b_environment():
        server = LiveServer(data)
        try:
            sb = Sandbox.create(api_key=alice, metadata={"job": "r1"}, envs={"COLOR": "blue"}, timeout=600, **urls(server))
            assert sb.run_code("x = 41\nx").text == "41"
            sb.files.write("/home/user/kept.txt", "before the restart")
            doomed = Sandbox.create(api_key=alice, **urls(server))
            async_id = asyncio.run(_async_made(server, alice))
        finally:
            server.stop()
        server = LiveServer(data)  # the same data folder: a restart (on another port)
        try:
            again = on(server, sb.sandbox_id, alice)
            ran = again.run_code("import os\n[x + 1, open('kept.txt').read(), os.environ['COLOR']]")
            assert ran.text == "[42, 'before the restart', 'blue']", ran
            assert ran.execution_count == 2  # counted on from before the restart
            info = Sandbox.get_info(sb.sandbox_id, api_key=alice, **urls(server))
            assert info.metadata == {"job": "r1"} and info.state.value == "running"
            assert asyncio.run(_async_used(server, alice, async_id)) == "'made async'"
            listed = {s.sandbox_id for s in Sandbox.list(api_key=alice, **urls(server)).next_items()}
            assert {sb.sandbox_id, doomed.sandbox_id, async_id} <= listed
            with pytest.raises(GONE):  # another tenant's id is unknown, after a restart too
                on(server, sb.sandbox_id, bob).run_code("1")
            assert Sandbox.kill(doomed.sandbox_id, api_key=alice, **urls(server)) is True
        finally:
            server.stop()
        server = LiveServer(data)  # the kill is durable; the others are still there
        try:
            with pytest.raises(GONE):
                Sandbox.get_info(doomed.sandbox_id, api_key=alice, **urls(server))
            assert on(server, sb.sandbox_id, alice).run_code("x").text == "41"
            for sandbox_id in (sb.sandbox_id, async_id):
                Sandbox.kill(sandbox_id, api_key=alice, **urls(server))
            assert not list(Sandbox.list(api_key=alice, **urls(server)).next_items())
        finally:
            server.stop()


async def _async_made(server: LiveServer, key: str) -> str:
    sb = await AsyncSandbox.create(api_key=key, **urls(server))
    await sb.run_code("made = 'made async'")
    return sb.sandbox_id


async def _async_used(server: LiveServer, key: str, sandbox_id: str) -> str | None:
    sb = await AsyncSandbox.connect(sandbox_id, api_key=key, **urls(server))
    return (await sb.run_code("made")).text


# -- two servers on one PostgreSQL and one S3 store ---------------------------------


class Pair:
    def __init__(self, a: LiveServer, b: LiveServer, alice: str, bob: str, database_url: str) -> None:
        self.a, self.b, self.alice, self.bob, self.database_url = a, b, alice, bob, database_url

    def rows(self) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute("SELECT kind, key, owner FROM wasmrun_session_records").fetchall()


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server, postgres_server: PostgresServer,  # noqa: F811
) -> Iterator[Pair]:
    database_url = postgres_server.new_database()
    blob_store = s3_server.new_bucket()
    flags = ["--database-url", database_url, "--blob-store", blob_store]
    keys = []
    for name in ("alice", "bob"):
        added = wasmrun("tenants", "add", name, "--database-url", database_url)
        assert added.returncode == 0, added.stderr
        keys.append(added.stdout.strip())
    root = tmp_path_factory.mktemp("e2b-shared")
    mp = pytest.MonkeyPatch()
    for name, value in s3_server.env().items():
        mp.setenv(name, value)
    servers: list[LiveServer] = []
    try:
        with e2b_environment():
            servers.extend(LiveServer(root / f"data-{i}", *flags) for i in range(2))
            yield Pair(servers[0], servers[1], keys[0], keys[1], database_url)
    finally:
        for server in servers:
            server.stop()
        mp.undo()


def test_a_sandbox_made_on_one_server_is_used_and_killed_on_the_other(pair: Pair) -> None:
    made = Sandbox.create(api_key=pair.alice, metadata={"where": "a"}, **urls(pair.a))
    assert made.run_code("x = 41").error is None
    made.files.write("/home/user/from_a.txt", "written on A")
    assert ("e2b_sandbox", made.sandbox_id, "alice") in pair.rows()
    there = on(pair.b, made.sandbox_id, pair.alice)
    ran = there.run_code("[x + 1, open('/home/user/from_a.txt').read()]")
    assert ran.text == "[42, 'written on A']" and ran.execution_count == 2
    there.files.write("/home/user/from_b.txt", "written on B")
    assert made.files.read("/home/user/from_b.txt") == "written on B"
    assert there.commands.run("cat from_a.txt").stdout.startswith("written on A")
    listed = Sandbox.list(api_key=pair.alice, query=_query({"where": "a"}), **urls(pair.b)).next_items()
    assert [s.sandbox_id for s in listed] == [made.sandbox_id]
    with pytest.raises(GONE):  # bob's key finds no such sandbox on either server
        on(pair.b, made.sandbox_id, pair.bob).run_code("1")
    assert Sandbox.kill(made.sandbox_id, api_key=pair.alice, **urls(pair.b)) is True
    with pytest.raises(GONE):
        made.run_code("x")  # through A, which made it
    with pytest.raises(GONE):
        Sandbox.get_info(made.sandbox_id, api_key=pair.alice, **urls(pair.a))
    assert made.sandbox_id not in {r[1] for r in pair.rows()}


def _query(metadata: dict[str, str]) -> Any:
    from e2b import SandboxQuery

    return SandboxQuery(metadata=metadata)


def test_the_async_sdk_across_the_two_servers_and_a_durable_timeout(pair: Pair) -> None:
    made_id: list[str] = []

    async def scenario() -> tuple[str | None, str | None]:
        sb = await AsyncSandbox.create(api_key=pair.alice, **urls(pair.b))
        made_id.append(sb.sandbox_id)
        await sb.run_code("n = 7")
        other = await AsyncSandbox.connect(sb.sandbox_id, api_key=pair.alice, **urls(pair.a))
        first = (await other.run_code("n * 6")).text
        await other.set_timeout(2)  # on A: B's record says so too
        info = await AsyncSandbox.get_info(sb.sandbox_id, api_key=pair.alice, **urls(pair.b))
        assert (info.end_at - info.started_at).total_seconds() < 60
        paused = await other.pause()
        assert paused is True
        with pytest.raises(GONE):  # paused on A: B refuses its cells
            await sb.run_code("n")
        resumed = await AsyncSandbox.connect(sb.sandbox_id, api_key=pair.alice, timeout=2, **urls(pair.b))
        second = (await resumed.run_code("n")).text
        return first, second

    assert asyncio.run(scenario()) == ("42", "7")
    time.sleep(3)  # past its timeout: gone on both servers
    for server in (pair.a, pair.b):
        with pytest.raises(GONE):
            Sandbox.get_info(made_id[0], api_key=pair.alice, **urls(server))
    # and its record and sessions ended by the sweep a request sets off (every 5 s)
    deadline = time.monotonic() + 15
    while [r for r in pair.rows() if r[1] == made_id[0]] and time.monotonic() < deadline:
        Sandbox.list(api_key=pair.alice, **urls(pair.b)).next_items()
        time.sleep(0.5)
    assert not [r for r in pair.rows() if r[1] == made_id[0]]


def test_two_servers_never_run_one_sandboxs_cells_at_once(pair: Pair) -> None:
    sb = Sandbox.create(api_key=pair.alice, **urls(pair.a))
    try:
        sb.run_code("import time\nspans = []")
        cell = "import time\nt0 = time.time()\ntime.sleep(1.5)\nspans.append((t0, time.time()))"
        errors: list[BaseException] = []

        def run(server: LiveServer) -> None:
            try:
                found = on(server, sb.sandbox_id, pair.alice).run_code(cell)
                assert found.error is None, found.error
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in (pair.a, pair.b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        spans = sb.run_code("sorted(spans)").text
        (s1, e1), (s2, e2) = eval(spans)  # our own repr of floats
        assert s2 >= e1, spans  # one after the other: both ran, never together
    finally:
        sb.kill()


def test_a_command_on_one_server_waits_for_a_cell_on_the_other(pair: Pair) -> None:
    """commands.run on server B while a cell of the sandbox runs on server A: the command
    waits its turn (it answered the busy error before), then runs and sees the cell's file."""
    sb = Sandbox.create(api_key=pair.alice, **urls(pair.a))
    try:
        cell = "import time\ntime.sleep(1.5)\nopen('/home/user/cell.txt', 'w').write('from the cell')"
        errors: list[BaseException] = []

        def run_cell() -> None:
            try:
                found = sb.run_code(cell)
                assert found.error is None, found.error
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=run_cell)
        thread.start()
        time.sleep(0.5)  # the cell is running on A (a command sent first would run first: also fine)
        ran = on(pair.b, sb.sandbox_id, pair.alice).commands.run("cat /home/user/cell.txt; echo; echo done", timeout=60)
        thread.join(60)
        assert not errors, errors
        assert ran.exit_code == 0 and ran.stdout == "from the cell\ndone\n", (ran.stdout, ran.stderr)
    finally:
        sb.kill()


def test_a_template_saved_from_a_prepared_sandbox_starts_new_ones(pair: Pair) -> None:
    prepared = Sandbox.create(api_key=pair.alice, envs={"STAGE": "prepared"}, **urls(pair.a))
    prepared.run_code("import json\ntable = {'north': 1, 'south': 2}")
    prepared.files.write("/home/user/data.csv", "region,v\nnorth,1\nsouth,2\n")
    saved = prepared.create_snapshot("warm-start")
    assert saved.snapshot_id == "warm-start" and saved.names == ["warm-start"]
    prepared.run_code("table['east'] = 3")  # after the snapshot: not in it
    prepared.kill()  # the template outlives its sandbox
    started = [Sandbox.create(template="warm-start", api_key=pair.alice, **urls(server)) for server in (pair.b, pair.a)]
    try:
        for sb in started:
            ran = sb.run_code("import os\n[sorted(table), open('data.csv').read().count('\\n'), os.environ['STAGE']]")
            assert ran.text == "[['north', 'south'], 3, 'prepared']", ran
            assert Sandbox.get_info(sb.sandbox_id, api_key=pair.alice, **urls(pair.b)).template_id == "warm-start"
        started[0].run_code("table['west'] = 4")  # each its own fork
        assert started[1].run_code("sorted(table)").text == "['north', 'south']"
        with pytest.raises(SandboxException):  # bob has no such template
            Sandbox.create(template="warm-start", api_key=pair.bob, **urls(pair.b))
        assert Sandbox.delete_snapshot("warm-start", api_key=pair.alice, **urls(pair.b)) is True
        with pytest.raises(SandboxException):
            Sandbox.create(template="warm-start", api_key=pair.alice, **urls(pair.a))
        assert Sandbox.delete_snapshot("warm-start", api_key=pair.alice, **urls(pair.a)) is False
    finally:
        for sb in started:
            sb.kill()
