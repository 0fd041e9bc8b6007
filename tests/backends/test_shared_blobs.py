"""Blobs shared by several servers: `--database-url` (a real PostgreSQL) and
`--blob-store s3://...` (a real S3-compatible server, `rclone serve s3`), through
real `wasmrun serve` processes."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.backends.test_shared_database import call, skill_params, wasmrun
from tests.liveserver import LiveServer
from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from wasmrun.blobs.quota import BlobQuota, BlobQuotaExceeded
from wasmrun.blobs.store import COPY_CHUNK
from wasmrun.database.blobs import SharedBlobStore
from wasmrun.database.connection import Database

WRITE_BIG = (
    "from runtime import blobs\n\n"
    "def main(args):\n"
    "    data = bytes(range(256)) * (args['n'] // 256)\n"
    "    return blobs.write_bytes(data, kind='application/octet-stream')\n"
)
READ_BIG = (
    "from runtime import blobs\n\n"
    "def main(args):\n"
    "    data = blobs.read_bytes(args['id'])\n"
    "    with open('/blobs/' + args['id'], 'rb') as f:\n"
    "        mounted = f.read()\n"
    "    return [len(data), data[1000:1004].hex(), data[-3:].hex(), data == bytes(range(256)) * (len(data) // 256),\n"
    "            mounted == data]\n"
)


@pytest.fixture
def shared(
    s3_server: S3Server, database_url: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> list[str]:
    """The flags of a server on the shared backend (credentials in the environment)."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return ["--database-url", database_url, "--blob-store", s3_server.new_bucket()]


def result(response: Any) -> Any:
    body = response.json()
    assert "result" in body, body
    return body["result"]


def test_a_blob_created_on_one_server_is_readable_on_every_server(tmp_path: Path, shared: list[str]) -> None:
    servers = [LiveServer(tmp_path / f"data-{i}", *shared) for i in range(2)]
    a, b = servers
    try:
        text_id = result(call(a, None, "create_blob", {"content": "héllo, shared", "kind": "text/plain"}))["blob_id"]
        assert result(call(b, None, "read_blob", {"blob_id": text_id}))["content"] == "héllo, shared"
        # The same bytes through the other server: the same id (one secret for all servers).
        again = result(call(b, None, "create_blob", {"content": "héllo, shared", "kind": "text/plain"}))
        assert again["blob_id"] == text_id
        # A 3 MB blob written by a run on A, read whole by a run on B (ranged reads underneath).
        n = 3 * 1024 * 1024
        made = result(call(a, None, "run_code", {"language": "python", "code": WRITE_BIG, "args": {"n": n}}))
        assert made["status"] == "completed", made
        big = made["output"]
        read = result(call(b, None, "run_code", {
            "language": "python", "code": READ_BIG, "args": {"id": big}, "input_blobs": [big],
        }))
        assert read["status"] == "completed", read
        # Through the API (ranged reads) and as the run's /blobs file (copied from the store).
        assert read["output"] == [n, bytes(range(256))[1000 % 256:1000 % 256 + 4].hex(), "fdfeff", True, True]
        # Deleted on B: gone on A at once.
        assert result(call(b, None, "delete_blob", {"blob_id": text_id})) == {"deleted": True}
        gone = call(a, None, "read_blob", {"blob_id": text_id}).json()
        assert "error" in gone and text_id in gone["error"]["message"]
        # Nothing on the local disks.
        for i in range(2):
            assert not any(p.is_file() for p in (tmp_path / f"data-{i}" / "blobs").glob("??/*"))
    finally:
        for server in servers:
            server.stop()


def test_a_tenants_blob_quota_and_ownership_hold_across_servers(tmp_path: Path, shared: list[str]) -> None:
    url = shared[1]
    acme = wasmrun("tenants", "add", "acme", "--limit", "blob_count=2", "--database-url", url).stdout.strip()
    other = wasmrun("tenants", "add", "other", "--database-url", url).stdout.strip()
    servers = [LiveServer(tmp_path / f"data-{i}", *shared) for i in range(2)]
    try:
        first = result(call(servers[0], acme, "create_blob", {"content": "1", "kind": "text/plain"}))["blob_id"]
        result(call(servers[1], acme, "create_blob", {"content": "2", "kind": "text/plain"}))
        for server in servers:
            refused = call(server, acme, "create_blob", {"content": "3", "kind": "text/plain"}).json()
            assert "error" in refused and "blob_count" in refused["error"]["message"], refused
        # Another tenant cannot see acme's blob on any server, and is not limited by acme's count.
        hidden = call(servers[1], other, "read_blob", {"blob_id": first}).json()
        assert "error" in hidden
        assert "result" in call(servers[1], other, "create_blob", {"content": "3", "kind": "text/plain"}).json()
        # A delete on one server frees the quota on the other.
        assert result(call(servers[1], acme, "delete_blob", {"blob_id": first})) == {"deleted": True}
        assert "result" in call(servers[0], acme, "create_blob", {"content": "3", "kind": "text/plain"}).json()
    finally:
        for server in servers:
            server.stop()


def test_a_server_killed_mid_run_loses_nothing_acknowledged(tmp_path: Path, shared: list[str]) -> None:
    a = LiveServer(tmp_path / "data-a", *shared)
    b = LiveServer(tmp_path / "data-b", *shared)
    try:
        acknowledged = [result(call(s, None, "create_blob", {"content": f"blob {i}", "kind": "text/plain"}))["blob_id"]
                        for i, s in enumerate([a, b, a])]
        assert "result" in call(a, None, "create_skill", skill_params()).json()
        started = threading.Event()
        answers: list[Any] = []

        def long_run() -> None:
            code = "import time\n\ndef main(args):\n    time.sleep(60)\n    return 'done'\n"
            started.set()
            try:
                answers.append(call(a, None, "run_code", {"language": "python", "code": code}))
            except Exception as exc:  # the server dies under it: the client sees a dropped connection
                answers.append(exc)

        runner = threading.Thread(target=long_run)
        runner.start()
        started.wait(30)
        time.sleep(2)  # the run is in a sandbox on A
        a.process.send_signal(signal.SIGKILL)
        a.process.wait(30)
        runner.join(120)
        assert len(answers) == 1 and isinstance(answers[0], Exception), answers  # never answered
        # B serves on: every acknowledged blob and skill is there, and new work is taken.
        for i, blob_id in enumerate(acknowledged):
            assert result(call(b, None, "read_blob", {"blob_id": blob_id}))["content"] == f"blob {i}"
        ran = result(call(b, None, "execute_skill", {"name": "user.team.echo", "args": {"after": "kill"}}))
        assert ran["output"] == {"echo": {"after": "kill"}}
        assert "result" in call(b, None, "create_blob", {"content": "later", "kind": "text/plain"}).json()
    finally:
        if a.process.poll() is None:
            a.process.kill()
        b.stop()


def test_the_readmes_several_servers_commands_work_as_written(tmp_path: Path, s3_server: S3Server,  # noqa: F811
                                                             database_url: str) -> None:  # noqa: F811
    import os
    import re
    import shlex
    import subprocess
    import sys

    from tests.liveserver import REPO, wasmrun_env

    readme = (REPO / "docs" / "hosting.md").read_text()  # the README links there
    section = readme.split("## Running several servers", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None
    lines = block.group(1).strip().splitlines()
    assert [line.split()[0] for line in lines] == ["export", "export", "export", "wasmrun", "KEY=$(wasmrun", "wasmrun",
                                                   "wasmrun"]
    env = wasmrun_env()
    env.update(s3_server.env())
    env["WASMRUN_DATABASE_URL"] = database_url
    env["WASMRUN_BLOB_STORE"] = s3_server.new_bucket()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # this checkout's `wasmrun`
    # Everything but the exports (values of a real deployment) and `serve` (it runs until stopped).
    script = "set -e\n" + "\n".join(lines[3:-1]) + '\necho "key=$KEY"\n'
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "schema at version" in done.stdout and "alice" in done.stdout
    key = done.stdout.rsplit("key=", 1)[1].strip()
    # The serve line, on loopback, a free port and fewer workers: shared by the variables alone.
    assert shlex.split(lines[-1]) == ["wasmrun", "serve", "--host", "10.0.0.11", "--data-dir", "/srv/wasmrun",
                                      "--workers", "8"]
    servers = [LiveServer(tmp_path / f"data-{i}", env=env) for i in range(2)]
    try:
        blob = result(call(servers[0], key, "create_blob", {"content": "as written", "kind": "text/plain"}))["blob_id"]
        assert result(call(servers[1], key, "read_blob", {"blob_id": blob}))["content"] == "as written"
        assert call(servers[1], None, "list_skills").status_code == 401
    finally:
        for server in servers:
            server.stop()


def test_a_streamed_create_on_the_shared_store_is_the_blob_create_makes(
    shared: list[str], database_url: str  # noqa: F811
) -> None:
    """BlobStore.create_file (the E2B front's uploads): hashed a chunk at a time, streamed
    to the object store, one blob with create's id; over the quota nothing is stored."""
    Database(database_url).migrate()
    store = SharedBlobStore(database_url, shared[3])
    data = os.urandom(3 * COPY_CHUNK + 17)
    with tempfile.TemporaryFile() as source:
        source.write(data)
        streamed = store.create_file(source, "application/octet-stream", owner="t")
    assert streamed == store.create(data, "application/octet-stream", owner="t")
    info = store.info(streamed, "t")
    assert info is not None and (info.size_bytes, info.sha256, info.utf8) == (len(data), hashlib.sha256(data).hexdigest(), False)
    assert store.read(streamed, COPY_CHUNK - 3, 6, "t") == data[COPY_CHUNK - 3:COPY_CHUNK + 3]
    assert store.objects.get("blobs/" + streamed[5:]) == data
    assert store.usage("t").count == 1
    with pytest.raises(BlobQuotaExceeded):
        store.create_file(io.BytesIO(b"more"), "text/plain", owner="t", quota=BlobQuota(max_bytes=1 << 40, max_count=1))
    assert store.usage("t").count == 1 and [name for name, _ in store.objects.listing("blobs/")] == ["blobs/" + streamed[5:]]
