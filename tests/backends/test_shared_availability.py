"""The shared backend stays responsive and says "busy" when its stores are slow or
gone: an upload stuck in the object store holds up no other call, a database out
of reach is -32000 (worth retrying), never -32603, and a stalled admission ends
at the queue timeout. Real PostgreSQL (tests/postgres.py), real `rclone serve s3`
(tests/objectstore.py) behind a real proxy that holds uploads, real servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest

from tests.backends.test_shared_blobs import result
from tests.backends.test_shared_database import call, skill_params, wasmrun
from tests.liveserver import LiveServer, wasmrun_env
from tests.objectstore import HeldUploads, S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import PostgresServer, database_url, postgres_server  # noqa: F401  (fixtures)
from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation
from wasmrun.database import locks, orphans
from wasmrun.database.connection import Database


def add_tenant(name: str, database_url: str, *limits: str) -> str:  # noqa: F811
    args = [a for limit in limits for a in ("--limit", limit)]
    added = wasmrun("tenants", "add", name, *args, "--database-url", database_url)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip()


def error_of(response: httpx2.Response) -> dict[str, Any]:
    body = response.json()
    assert "error" in body, body
    error: dict[str, Any] = body["error"]
    return error


@pytest.fixture
def held_uploads(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldUploads]:  # noqa: F811
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    proxy = HeldUploads(s3_server.port)
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_stuck_upload_holds_up_no_other_tenants_calls(
    tmp_path: Path, s3_server: S3Server, held_uploads: HeldUploads, database_url: str  # noqa: F811
) -> None:
    """While alice's create_skill waits for its upload, bob lists, describes, executes and
    mounts his own created skill through the same server: every answer comes before the
    upload is let through."""
    alice = add_tenant("alice", database_url)
    bob = add_tenant("bob", database_url)
    server = LiveServer(tmp_path / "data", "--database-url", database_url,
                        "--blob-store", held_uploads.url(s3_server.new_bucket()))
    try:
        assert "result" in call(server, bob, "create_skill", skill_params("user.bob.echo", "1.0.0", "bob")).json()
        held_uploads.hold()
        created: list[httpx2.Response] = []
        creating = threading.Thread(target=lambda: created.append(
            call(server, alice, "create_skill", skill_params("user.alice.echo", "1.0.0", "alice"))))
        creating.start()
        assert held_uploads.put_arrived.wait(60), "alice's upload never reached the object store"

        listed = result(call(server, bob, "list_skills", {"namespace": "user"}))
        assert [s["name"] for s in listed["skills"]] == ["user.bob.echo"]
        described = result(call(server, bob, "describe_skill", {"name": "user.bob.echo", "detail": "full"}))
        assert described["skill"]["manifest"]["version"] == "1.0.0"
        ran = result(call(server, bob, "execute_skill", {"name": "user.bob.echo", "args": {"n": 1}}))
        assert ran["status"] == "completed" and ran["output"] == {"bob": {"n": 1}}, ran
        mounted = result(call(server, bob, "run_code", {
            "language": "python", "mount_skills": ["user.bob.echo"],
            "code": "from skills.user.bob.echo import main\n",
        }))
        assert mounted["status"] == "completed" and mounted["output"] == {"bob": {}}, mounted
        missing = error_of(call(server, bob, "describe_skill", {"name": "user.bob.none"}))
        assert missing["code"] == -32602

        # Every one of bob's answers came while alice's upload was still held.
        assert not held_uploads.gave_up.is_set() and creating.is_alive()
        held_uploads.release()
        creating.join(120)
        assert "result" in created[0].json(), created[0].json()
        mine = result(call(server, alice, "list_skills", {"namespace": "user"}))
        assert [s["name"] for s in mine["skills"]] == ["user.alice.echo"]
        ran = result(call(server, alice, "execute_skill", {"name": "user.alice.echo", "args": {}}))
        assert ran["output"] == {"alice": {}}, ran
    finally:
        held_uploads.release()
        server.stop()


SLOW_ECHO = {
    "path": "code/main.py",
    "content": "import time\n\ndef main(args):\n    time.sleep(args.get('sleep', 0))\n    return {'slept': args}\n",
}


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL of the test's own: the test stops it."""
    postgres = PostgresServer()
    try:
        yield postgres
    finally:
        postgres.stop()


def test_a_run_under_way_when_the_database_stops_still_answers(tmp_path: Path, own_postgres: PostgresServer) -> None:
    """The run happened: its answer is its result, never -32603 (a client would run it
    again). Recording the call names the version the call resolved, with no second
    lookup that the stopped database could fail."""
    server = LiveServer(tmp_path / "data", "--database-url", own_postgres.new_database())
    try:
        slow = skill_params("user.team.slow", "1.0.0")
        slow["files"] = [SLOW_ECHO]
        assert "result" in call(server, None, "create_skill", slow).json()
        running: list[httpx2.Response] = []
        run = threading.Thread(target=lambda: running.append(
            call(server, None, "execute_skill", {"name": "user.team.slow", "args": {"sleep": 4}})))
        run.start()
        for _ in range(1200):  # until the run holds a sandbox: its skill was found and fetched
            workers = httpx2.get(f"{server.base_url}/healthz", timeout=30).json()["workers"]
            if workers["free"] < workers["total"]:
                break
            threading.Event().wait(0.02)
        own_postgres.stop()
        run.join(120)
        body = running[0].json()
        assert "result" in body, body
        assert body["result"]["status"] == "completed" and body["result"]["output"] == {"slept": {"sleep": 4}}
    finally:
        server.stop()


def test_a_database_out_of_reach_is_server_busy(tmp_path: Path, own_postgres: PostgresServer) -> None:
    """A database that stops: every answer that needs it is -32000 (try again), never
    -32603, naming no host path; the operator's skills are served from their folders."""
    server = LiveServer(tmp_path / "data", "--database-url", own_postgres.new_database())
    try:
        assert "result" in call(server, None, "create_skill", skill_params("user.team.echo", "1.0.0")).json()
        own_postgres.stop()
        for method, params in [
            ("list_skills", {}),
            ("list_skills", {"namespace": "user"}),
            ("describe_skill", {"name": "user.team.echo"}),
            ("describe_skill", {"name": "user.team.none"}),
            ("execute_skill", {"name": "user.team.echo", "args": {}}),
            ("read_skill_file", {"name": "user.team.echo", "path": "SKILL.md"}),
            ("run_code", {"language": "python", "code": "def main(args):\n    return 1\n",
                          "mount_skills": ["user.team.echo@1.0.0"]}),
            ("create_skill", skill_params("user.team.new", "1.0.0")),
        ]:
            error = error_of(call(server, None, method, params))
            assert error["code"] == -32000, (method, error)
            assert "try again" in error["message"] and str(own_postgres.root) not in error["message"], error
        ran = result(call(server, None, "execute_skill", {"name": "text.stats", "args": {"text": "a b"}}))
        assert ran["status"] == "completed", ran
    finally:
        server.stop()


HELLO = {"language": "python", "code": "def main(args):\n    return 'hi'\n"}


@pytest.mark.parametrize("stall", ["the tenant's admission lock", "the leases table"])
def test_a_stalled_admission_ends_at_the_queue_timeout(tmp_path: Path, database_url: str, stall: str) -> None:  # noqa: F811
    """Another transaction (any server's, or an operator's by hand) holding what admitting
    the tenant's runs needs: the run is "server busy" once its queue timeout passes,
    never a wait without end; once the stall ends, runs start again."""
    acme = add_tenant("acme", database_url, "concurrent_runs=2", "runs_per_minute=100")
    env = wasmrun_env() | {"WASMRUN_QUEUE_TIMEOUT": "2"}
    server = LiveServer(tmp_path / "data", "--database-url", database_url, env=env)
    try:
        assert result(call(server, acme, "run_code", HELLO))["output"] == "hi"
        with psycopg.connect(database_url) as stalled:  # a transaction left open
            if stall == "the leases table":
                stalled.execute("LOCK TABLE wasmrun_run_leases IN ACCESS EXCLUSIVE MODE")
            else:
                locks.hold(stalled, locks.RUNS_OF_TENANT, "acme")
            error = error_of(call(server, acme, "run_code", HELLO))
            assert error["code"] == -32000 and "try again" in error["message"], error
            stalled.rollback()
        assert result(call(server, acme, "run_code", HELLO))["output"] == "hi"
    finally:
        server.stop()


def test_a_skill_that_cannot_be_fetched_costs_no_run_start(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    """The skill's folder is made ready before the run is admitted: a version whose stored
    bundle turns out damaged is refused without taking one of the tenant's runs_per_minute."""
    acme = add_tenant("acme", database_url, "runs_per_minute=2")
    env = wasmrun_env() | {"WASMRUN_SKILL_CACHE_ENTRIES": "1"}
    server = LiveServer(tmp_path / "data", "--database-url", database_url, env=env)
    try:
        for name in ("user.team.first", "user.team.second"):  # the second evicts the first's folder
            assert "result" in call(server, acme, "create_skill", skill_params(name, "1.0.0")).json()
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE wasmrun_skills SET bundle = 'damaged'::bytea WHERE name = 'user.team.first'")
        for _ in range(3):
            error = error_of(call(server, acme, "execute_skill", {"name": "user.team.first", "args": {}}))
            assert error["code"] == -32603, error
        for _ in range(2):  # both starts of the minute are still the tenant's
            assert result(call(server, acme, "run_code", HELLO))["output"] == "hi"
        assert error_of(call(server, acme, "run_code", HELLO))["code"] == -32002
    finally:
        server.stop()


def _tenants_whose_old_lock_keys_collide(database_url: str) -> tuple[str, str]:  # noqa: F811
    """Two tenant names, x and y, whose blob lock and run lock were one key when every
    purpose hashed "purpose:owner" into one 32-bit space (hashtext): ~9 such pairs among
    200,000 names each."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "WITH x AS (SELECT 'x' || i AS name, hashtext('wasmrun-blobs:x' || i) AS key"
            "           FROM generate_series(1, 200000) i),"
            " y AS (SELECT 'y' || i AS name, hashtext('wasmrun-runs:y' || i) AS key FROM generate_series(1, 200000) i)"
            " SELECT x.name, y.name FROM x JOIN y USING (key) ORDER BY x.name, y.name LIMIT 1"
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def test_one_tenants_blob_write_never_holds_up_anothers_runs(
    tmp_path: Path, s3_server: S3Server, held_uploads: HeldUploads, database_url: str  # noqa: F811
) -> None:
    """Each purpose's locks are apart from every other's: while tenant x's blob write holds
    x's blob lock (its upload held), tenant y's runs are admitted, even for a y whose
    lock key once was x's."""
    x, y = _tenants_whose_old_lock_keys_collide(database_url)
    x_key = add_tenant(x, database_url)
    y_key = add_tenant(y, database_url, "concurrent_runs=2", "runs_per_minute=100")
    server = LiveServer(tmp_path / "data", "--database-url", database_url,
                        "--blob-store", held_uploads.url(s3_server.new_bucket()))
    try:
        held_uploads.hold()
        written: list[httpx2.Response] = []
        writing = threading.Thread(target=lambda: written.append(
            call(server, x_key, "create_blob", {"content": "x's bytes", "kind": "text/plain"})))
        writing.start()
        assert held_uploads.put_arrived.wait(60), "x's upload never reached the object store"
        assert result(call(server, y_key, "run_code", HELLO))["output"] == "hi"
        assert not held_uploads.gave_up.is_set() and writing.is_alive()  # y ran while x's write was held
        held_uploads.release()
        writing.join(120)
        assert "result" in written[0].json(), written[0].json()
    finally:
        held_uploads.release()
        server.stop()


class CountedListing(ObjectStore):
    """The real object store, counting the names its listing has handed out so far."""

    listed = 0
    listed_at_first_delete: int | None = None

    def listing(self, prefix: str) -> Iterator[tuple[str, datetime]]:
        for entry in super().listing(prefix):
            self.listed += 1
            yield entry

    def delete(self, name: str) -> None:
        if self.listed_at_first_delete is None:
            self.listed_at_first_delete = self.listed
        super().delete(name)


def test_the_sweep_checks_a_long_listing_batch_by_batch(
    s3_server: S3Server, database_url: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A bucket of many left-over objects is swept a batch at a time as its listing
    streams in, never read whole first (its names would all be in memory at once)."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(orphans, "SWEEP_BATCH", 4)
    database = Database(database_url)
    database.migrate()
    objects = CountedListing(ObjectStoreLocation.parse(s3_server.new_bucket()))
    names = [f"blobs/{i:032x}" for i in range(13)]
    for name in names:
        objects.put(name, b"left over")
    assert orphans.sweep_orphans(database, objects, now=time.time() + orphans.STALE_WRITE_S + 60) == 13
    assert objects.listed_at_first_delete is not None and objects.listed_at_first_delete <= 5
    assert list(objects.listing("blobs/")) == []
    database.close()
