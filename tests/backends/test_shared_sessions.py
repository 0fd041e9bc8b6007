"""Sessions on the shared backends: `--database-url` (a real PostgreSQL) and
`--blob-store s3://...` (a real S3-compatible server, `rclone serve s3`), through
two real `wasmrun serve` processes with data dirs of their own: a session made
and paused on one server resumes on the other (docs/sessions.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest

from tests.backends.test_shared_database import call, wasmrun
from tests.liveserver import LiveServer
from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)

SLEEPER = "import time\ntime.sleep(30)\n"


class Shared:
    def __init__(
        self, tmp_path: Path, s3: S3Server, database_url: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
    ) -> None:
        for name, value in s3.env().items():
            monkeypatch.setenv(name, value)
        self.s3 = s3
        self.database_url = database_url
        self.blob_store = s3.new_bucket()
        self.bucket = self.blob_store.split("://", 1)[1].split("?", 1)[0]
        flags = ["--database-url", database_url, "--blob-store", self.blob_store]
        self.alice = self._tenant("alice", "sessions=3")
        self.bob = self._tenant("bob")
        self.a, self.b = (LiveServer(tmp_path / f"data-{i}", *flags) for i in range(2))

    def _tenant(self, name: str, *limits: str) -> str:
        args = [a for limit in limits for a in ("--limit", limit)]
        added = wasmrun("tenants", "add", name, *args, "--database-url", self.database_url)
        assert added.returncode == 0, added.stderr
        return added.stdout.strip()

    def session_objects(self) -> list[str]:
        client = boto3.client(
            "s3", endpoint_url=self.s3.endpoint, region_name="us-east-1",
            aws_access_key_id=self.s3.access_key, aws_secret_access_key=self.s3.secret_key,
        )
        listed = client.list_objects_v2(Bucket=self.bucket, Prefix="sessions/")
        return sorted(str(item["Key"]) for item in listed.get("Contents", []))

    def sql(self, statement: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            cursor = conn.execute(statement, args)
            return cursor.fetchall() if cursor.description else []

    def stop(self) -> None:
        for server in (self.a, self.b):
            if server.process.poll() is None:
                server.stop()


@pytest.fixture
def shared(
    tmp_path: Path, s3_server: S3Server, database_url: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> Any:
    found = Shared(tmp_path, s3_server, database_url, monkeypatch)
    try:
        yield found
    finally:
        found.stop()


def data_dir(server: LiveServer) -> Path:
    args = list(server.process.args)  # type: ignore[arg-type]
    return Path(args[args.index("--data-dir") + 1])


def rpc(server: LiveServer, key: str, method: str, **params: Any) -> dict[str, Any]:
    answer: dict[str, Any] = call(server, key, method, params).json()
    return answer


def result(answer: dict[str, Any]) -> Any:
    assert "result" in answer, answer
    return answer["result"]


def run(server: LiveServer, key: str, session_id: str, code: str, **params: Any) -> dict[str, Any]:
    found: dict[str, Any] = result(rpc(server, key, "run_code", language="python", session_id=session_id, code=code,
                                       **params))
    return found


def new(server: LiveServer, key: str, **params: Any) -> str:
    session_id: str = result(rpc(server, key, "create_session", language="python", **params))["session_id"]
    return session_id


def assert_not_found(answer: dict[str, Any]) -> None:
    assert answer["error"]["code"] == -32602 and answer["error"]["data"]["field"] == "session_id", answer


def test_a_session_paused_on_one_server_resumes_on_the_other(shared: Shared) -> None:
    a, b, key = shared.a, shared.b, shared.alice
    sid = new(a, key)
    made = run(a, key, sid, "import json\nx = 41\nopen('/workspace/w.txt', 'w').write('from A')\n"
                            "open('/tmp/t.txt', 'w').write('tmp A')\nx")
    assert made["output"] == 41 and made["session_rolled_back"] is False
    resumed = run(b, key, sid, "[x + 1, open('/workspace/w.txt').read(), open('/tmp/t.txt').read(), json.dumps(1)]")
    assert resumed["output"] == [42, "from A", "tmp A", "1"], resumed
    # Links inside /workspace travel as links; one aiming outside stays unusable on B.
    linked = run(a, key, sid, "import os\nos.symlink('w.txt', '/workspace/link')\n"
                              "try:\n    os.symlink('../../../../../../etc/passwd', '/workspace/up')\n"
                              "except OSError as e:\n    print(e)\nos.readlink('/workspace/link')")
    assert linked["output"] == "w.txt", linked
    through = run(b, key, sid, "import os\ntry:\n    up = open('/workspace/up').read()[:20]\n"
                               "except OSError as e:\n    up = type(e).__name__\n[open('/workspace/link').read(), up]")
    assert through["output"][0] == "from A" and "root:" not in through["output"][1], through
    # A run that writes no file stores no new bundle of the folders (only memory).
    bundles = [n for n in shared.session_objects() if n.endswith("files.tar")]
    run(b, key, sid, "unrelated = 1")
    assert [n for n in shared.session_objects() if n.endswith("files.tar")] == bundles
    # Back and forth: each server sees what the other did last (a stale local copy is never used).
    run(a, key, sid, "x = 100")
    assert run(b, key, sid, "x")["output"] == 100
    assert run(a, key, sid, "x")["output"] == 100
    # A stopped run on B is undone for A too.
    stopped = run(b, key, sid, "x = -1\nwhile True: pass", limits={"timeout_ms": 300})
    assert stopped["session_rolled_back"] is True
    assert run(a, key, sid, "x")["output"] == 100
    # Both servers list it, with the same count of runs.
    listed = [result(rpc(s, key, "list_sessions"))["sessions"] for s in (a, b)]
    assert [[(s["session_id"], s["runs"]) for s in found] for found in listed] == [[(sid, 9)]] * 2
    # Fork on B, then each evolves apart, whichever server runs it.
    fork = result(rpc(b, key, "fork_session", session_id=sid))["session_id"]
    run(a, key, fork, "x = 7\nopen('/workspace/w.txt', 'w').write('fork')")
    assert run(b, key, sid, "[x, open('/workspace/w.txt').read()]")["output"] == [100, "from A"]
    assert run(b, key, fork, "[x, open('/workspace/w.txt').read()]")["output"] == [7, "fork"]
    # Close on A: gone on B, and its objects are deleted; the fork's stay.
    objects = shared.session_objects()
    assert result(rpc(a, key, "close_session", session_id=sid)) == {"closed": True}
    assert_not_found(rpc(b, key, "run_code", language="python", session_id=sid, code="x"))
    left = shared.session_objects()
    assert left and all(name.startswith(f"sessions/{shared.sql('SELECT key FROM wasmrun_sessions')[0][0]}/")
                        for name in left)
    assert len(left) < len(objects)
    assert run(a, key, fork, "x")["output"] == 7


def test_busy_across_servers_and_concurrent_runs(shared: Shared) -> None:
    a, b, key = shared.a, shared.b, shared.alice
    sid = new(a, key)
    run(a, key, sid, "n = 0")
    answers: list[dict[str, Any]] = []
    sleeping = threading.Thread(target=lambda: answers.append(
        rpc(a, key, "run_code", language="python", session_id=sid, code="import time\ntime.sleep(3)\nn += 1\nn")))
    sleeping.start()
    deadline = time.monotonic() + 60
    while not shared.sql("SELECT 1 FROM wasmrun_sessions WHERE busy_server IS NOT NULL"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for method, params in (("run_code", {"language": "python", "code": "n"}), ("fork_session", {}),
                           ("close_session", {})):
        busy = rpc(b, key, method, session_id=sid, **params)
        assert busy["error"]["code"] == -32004, busy
    assert [s["busy"] for s in result(rpc(b, key, "list_sessions"))["sessions"]] == [True]
    sleeping.join()
    assert answers[0]["result"]["output"] == 1
    # Many runs at once from both servers: each either runs or is refused as busy,
    # and the session counts exactly the runs that ran (none lost, none twice).
    outcomes: list[dict[str, Any]] = []

    def bump(server: LiveServer) -> None:
        for _ in range(4):
            outcomes.append(rpc(server, key, "run_code", language="python", session_id=sid, code="n += 1\nn"))

    threads = [threading.Thread(target=bump, args=(s,)) for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ran = [o for o in outcomes if "result" in o]
    assert all(o["error"]["code"] == -32004 for o in outcomes if "error" in o)
    assert sorted(o["result"]["output"] for o in ran) == list(range(2, 2 + len(ran)))
    assert run(b, key, sid, "n")["output"] == 1 + len(ran)


def test_tenants_caps_and_expiry_across_servers(shared: Shared) -> None:
    a, b = shared.a, shared.b
    sid = new(a, shared.alice, idle_timeout_s=3600)
    run(a, shared.alice, sid, "secret = 'alice'\nopen('/workspace/s', 'w').write('x' * 1000)")
    # Bob, on the other server, with alice's id: the same "does not exist" as a made-up id.
    for method, params in (("run_code", {"language": "python", "code": "secret"}), ("fork_session", {}),
                           ("close_session", {})):
        assert_not_found(rpc(b, shared.bob, method, session_id=sid, **params))
    assert_not_found(rpc(b, shared.bob, "run_code", language="python", session_id="ses_" + "A" * 32, code="1"))
    assert result(rpc(b, shared.bob, "list_sessions")) == {"sessions": []}
    assert run(b, shared.alice, sid, "secret")["output"] == "alice"
    # Alice's cap (3 open sessions) counts both servers' sessions.
    new(b, shared.alice)
    new(a, shared.alice)
    over = rpc(b, shared.alice, "create_session", language="python")
    assert over["error"]["code"] == -32002 and over["error"]["data"]["limit"] == "sessions", over
    over = rpc(a, shared.alice, "fork_session", session_id=sid)
    assert over["error"]["code"] == -32002, over
    # Expiry: moved into the past in the database (rather than waited for); the next
    # sweep of either server ends it everywhere and deletes its objects.
    key = shared.sql("SELECT key FROM wasmrun_sessions WHERE objects != '{}'::jsonb")[0][0]
    assert any(name.startswith(f"sessions/{key}/") for name in shared.session_objects())
    shared.sql("UPDATE wasmrun_sessions SET expires = 0 WHERE key = %s", key)
    assert_not_found(rpc(a, shared.alice, "run_code", language="python", session_id=sid, code="1"))
    deadline = time.monotonic() + 60
    while any(name.startswith(f"sessions/{key}/") for name in shared.session_objects()):
        assert time.monotonic() < deadline, shared.session_objects()
        time.sleep(0.2)
    assert not shared.sql("SELECT 1 FROM wasmrun_sessions WHERE key = %s", key)
    for server in (a, b):  # and each server's local copy goes with it
        while list(data_dir(server).glob(f"session-cache/cache-*/{key}")):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert new(a, shared.alice)  # room again


def test_a_server_killed_mid_run_leaves_the_last_committed_version(shared: Shared) -> None:
    a, b, key = shared.a, shared.b, shared.alice
    sid = new(a, key)
    run(a, key, sid, "x = 41\nopen('/workspace/f', 'w').write('kept')")
    answers: list[Any] = []

    def doomed() -> None:
        try:
            answers.append(rpc(a, key, "run_code", language="python", session_id=sid,
                               code="x = 0\nopen('/workspace/f', 'w').write('lost')\n" + SLEEPER))
        except Exception as exc:  # its server was killed
            answers.append(exc)

    thread = threading.Thread(target=doomed)
    thread.start()
    deadline = time.monotonic() + 60
    while not shared.sql("SELECT 1 FROM wasmrun_sessions WHERE busy_server IS NOT NULL"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    a.process.kill()
    a.process.wait()
    thread.join()
    busy = rpc(b, key, "run_code", language="python", session_id=sid, code="x")
    assert busy["error"]["code"] == -32004, busy  # A's hold lasts until its heartbeat is old enough
    # A's heartbeat moved into the past (rather than waited for): its hold lapses.
    shared.sql("UPDATE wasmrun_servers SET seen = seen - interval '1 hour' WHERE id = "
               "(SELECT busy_server FROM wasmrun_sessions WHERE busy_server IS NOT NULL)")
    resumed = run(b, key, sid, "[x + 1, open('/workspace/f').read()]")
    assert resumed["output"] == [42, "kept"], resumed


def test_orphaned_session_objects_are_swept_and_named_ones_kept(shared: Shared) -> None:
    from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation
    from wasmrun.database.connection import Database
    from wasmrun.database.orphans import sweep_orphans

    sid = new(shared.a, shared.alice)
    run(shared.a, shared.alice, sid, "x = 1")
    named = shared.session_objects()
    key = named[0].split("/")[1]
    objects = ObjectStore(ObjectStoreLocation.parse(shared.blob_store))
    # What a server killed between storing a version and committing its row leaves behind.
    left = f"sessions/{key}/{'0' * 16}/memory"
    objects.put(left, b"half a version")
    objects.put("sessions/not-ours", b"a name this wasmrun never writes")
    assert sweep_orphans(Database(shared.database_url), objects, now=time.time() + 3600) == 1
    assert shared.session_objects() == sorted([*named, "sessions/not-ours"])
    assert run(shared.b, shared.alice, sid, "x")["output"] == 1


def test_two_servers_on_one_data_dir_share_its_sessions(shared: Shared, tmp_path: Path) -> None:
    """`serve` and `mcp` (or two `serve`) on one data dir: with the shared backends each
    sees the other's sessions, and each keeps its copies in a folder of its own."""
    twin = LiveServer(data_dir(shared.a), "--database-url", shared.database_url, "--blob-store", shared.blob_store)
    try:
        sid = new(twin, shared.alice)
        run(twin, shared.alice, sid, "x = 'twin'")
        assert run(shared.a, shared.alice, sid, "x")["output"] == "twin"
        run(shared.a, shared.alice, sid, "x = 'a'")
        assert run(twin, shared.alice, sid, "x")["output"] == "a"
        assert len(list(data_dir(shared.a).glob("session-cache/cache-*"))) == 2
    finally:
        twin.stop()
    assert len(list(data_dir(shared.a).glob("session-cache/cache-*"))) == 1  # its own went with it
    assert run(shared.a, shared.alice, sid, "x")["output"] == "a"


def test_concurrent_creates_on_both_servers_keep_the_cap(shared: Shared) -> None:
    carol = shared._tenant("carol", "sessions=2")
    answers: list[dict[str, Any]] = []

    def create(server: LiveServer) -> None:
        answers.append(rpc(server, carol, "create_session", language="python"))

    threads = [threading.Thread(target=create, args=(s,)) for s in (shared.a, shared.b) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = [a["result"]["session_id"] for a in answers if "result" in a]
    refused = [a["error"] for a in answers if "error" in a]
    assert len(made) == 2 and len(refused) == 6, answers
    assert all(e["code"] == -32002 and e["data"]["limit"] == "sessions" for e in refused)
    listed = {s["session_id"] for s in result(rpc(shared.b, carol, "list_sessions"))["sessions"]}
    assert listed == set(made)


def test_an_object_store_out_of_reach_keeps_nothing_partial(shared: Shared) -> None:
    from tests.liveserver import free_port

    unreachable = shared.blob_store.replace(f"127.0.0.1:{shared.s3.port}", f"127.0.0.1:{free_port()}")
    cut_off = LiveServer(data_dir(shared.a).parent / "data-cut", "--database-url", shared.database_url,
                         "--blob-store", unreachable)
    try:
        sid = new(shared.a, shared.alice)
        run(shared.a, shared.alice, sid, "x = 1")
        # Its state cannot be fetched: "try again" (-32000), naming no host detail; the session is intact.
        answer = rpc(cut_off, shared.alice, "run_code", language="python", session_id=sid, code="x")
        assert answer["error"]["code"] == -32000 and "try again" in answer["error"]["message"], answer
        assert "127.0.0.1" not in answer["error"]["message"]
        assert run(shared.b, shared.alice, sid, "x")["output"] == 1
        # A run whose new version cannot be stored is undone, and says so.
        fresh = new(cut_off, shared.alice)
        ran = run(cut_off, shared.alice, fresh, "y = 2\ny")
        assert ran["output"] == 2 and ran["session_rolled_back"] is True, ran
        undone = rpc(shared.a, shared.alice, "run_code", language="python", session_id=fresh, code="y")
        assert undone["result"]["error"]["type"] == "NameError", undone
    finally:
        cut_off.stop()


def test_a_session_whose_objects_are_gone_is_ended_not_resumed_blank(shared: Shared) -> None:
    from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation

    sid = new(shared.a, shared.alice)
    run(shared.a, shared.alice, sid, "x = 1")
    objects = ObjectStore(ObjectStoreLocation.parse(shared.blob_store))
    for name in shared.session_objects():
        objects.delete(name)
    assert_not_found(rpc(shared.b, shared.alice, "run_code", language="python", session_id=sid, code="x"))
    assert not shared.sql("SELECT 1 FROM wasmrun_sessions")
    assert_not_found(rpc(shared.a, shared.alice, "run_code", language="python", session_id=sid, code="x"))
