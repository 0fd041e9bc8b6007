"""The backends chosen once from settings (wasmrun/backends.py) and handed to the server and
its worker processes: local files under the data folder, or the shared PostgreSQL and S3
(a real PostgreSQL, tests/postgres.py, and a real S3 server, tests/objectstore.py: those
tests skip where either is missing). No setting reaches a worker through the environment."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from tests.sandbox.test_worker_monitor import worker_pids
from wasmrun.backends import open_backends
from wasmrun.blobs.store import FileBlobStore
from wasmrun.database.blobs import SharedBlobStore
from wasmrun.database.connection import Database
from wasmrun.database.migrations import MIGRATIONS
from wasmrun.database.sessions import SharedSessionStore
from wasmrun.database.tenants import PgTenantStore
from wasmrun.packages.layer import DEFAULT_TAG
from wasmrun.protocol.methods import Dispatcher
from wasmrun.sandbox import BlobOpener, InProcessExecutor, RunRequest, WorkerPool, encode_args
from wasmrun.server import assemble, assemble_local, create_app, open_mcp_dispatcher
from wasmrun.settings import BUNDLED_SKILLS, Settings
from wasmrun.tenants.store import TenantStore

READ_AND_WRITE = (
    "from runtime import blobs\n\n"
    "def main(args):\n"
    "    with open('/blobs/' + args['id'], 'rb') as f:\n"
    "        given = f.read().decode()\n"
    "    return [given, blobs.write_bytes(given.upper().encode(), kind='text/plain')]\n"
)


def rpc(client: TestClient, method: str, params: dict[str, Any]) -> Any:
    body = client.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).json()
    assert "result" in body, body
    return body["result"]


def read_and_write_a_blob(client: TestClient) -> None:
    """A run in a worker reads a blob the server stored and writes one the server then reads."""
    given = rpc(client, "create_blob", {"content": "from the server", "kind": "text/plain"})["blob_id"]
    ran = rpc(client, "run_code", {
        "language": "python", "code": READ_AND_WRITE, "args": {"id": given}, "input_blobs": [given],
    })
    assert ran["status"] == "completed", ran
    assert ran["output"][0] == "from the server"
    assert rpc(client, "read_blob", {"blob_id": ran["output"][1]})["content"] == "FROM THE SERVER"


# -- local ---------------------------------------------------------------------------------


def test_local_backends_keep_everything_under_the_data_folder(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", audit_log=tmp_path / "data" / "audit.log")
    backends = open_backends(settings)
    assert not backends.shared
    store = backends.records.tenant_store()
    assert isinstance(store, TenantStore)
    store.add("acme")
    assert (settings.data_dir / "tenants.json").is_file()
    blobs = backends.blobs.blob_store()
    assert isinstance(blobs, FileBlobStore)
    blob_id = blobs.create(b"kept on disk", "text/plain")
    assert any(p.is_file() for p in settings.blobs_dir.rglob("*")) and blobs.size(blob_id) == len(b"kept on disk")
    # Workers open the same folder, by its path: nothing else crosses to them.
    assert backends.blobs.for_workers() == BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(settings.blobs_dir)])
    assert backends.blobs.orphan_sweeper() is None
    audit = backends.records.audit_log()
    assert audit is not None and audit.path == settings.audit_log
    audit.close()
    registry = backends.records.skill_registry(settings.package_layers / DEFAULT_TAG)
    assert any(skill.name == "text.stats" for skill in registry.every_skill())


def test_no_audit_log_when_the_operator_turns_it_off(tmp_path: Path) -> None:
    assert open_backends(Settings(data_dir=tmp_path, audit_log=None)).records.audit_log() is None


def test_a_blob_store_without_a_database_is_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, blob_store="s3://bucket?endpoint=http://127.0.0.1:9&region=r")
    with pytest.raises(ValueError, match="--database-url"):
        open_backends(settings)


def write_package_layer(layers: Path, module: str, source: str) -> None:
    """A published layer for the stdlib guest's Python, laid out as `wasmrun packages add` leaves it."""
    version = layers / DEFAULT_TAG / "v-test"
    (version / "site-packages").mkdir(parents=True)
    (version / "pycache").mkdir()
    (version / "site-packages" / f"{module}.py").write_text(source)
    (layers / DEFAULT_TAG / "current").symlink_to("v-test")


def test_a_worker_gets_its_blob_store_and_packages_as_parameters(tmp_path: Path) -> None:
    """The pool hands each worker its setup: the blob store the backends name, the package layers."""
    settings = Settings(data_dir=tmp_path / "data")
    write_package_layer(settings.package_layers, "operator_pkg", "ANSWER = 42\n")
    backends = open_backends(settings)
    given = backends.blobs.blob_store().create(b"on the server's disk", "text/plain")
    environment = dict(os.environ)
    pool = WorkerPool(
        backends.blobs.for_workers(), workers=1, workspace_parent=tmp_path / "ws", packages=settings.package_layers
    )
    try:
        code = (
            "import operator_pkg\n\ndef main(args):\n"
            "    with open('/blobs/' + args['id'], 'rb') as f:\n"
            "        return [operator_pkg.ANSWER, f.read().decode()]\n"
        )
        request = RunRequest(kind="code", code=code, args_json=encode_args({"id": given}), input_blobs=[given])
        result = asyncio.run(pool.run(request))
    finally:
        pool.close()
    assert result.status == "completed", result.error
    assert json.loads(result.output_json) == [42, "on the server's disk"]
    assert dict(os.environ) == environment


def test_a_local_server_leaves_the_environment_alone(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS,), workers=1)
    environment = dict(os.environ)
    with TestClient(create_app(assemble(settings)), base_url="http://localhost") as client:
        read_and_write_a_blob(client)
        assert dict(os.environ) == environment


# -- shared --------------------------------------------------------------------------------


@pytest.fixture
def shared_settings(
    tmp_path: Path, database_url: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> Settings:
    for name, value in s3_server.env().items():  # the operator's S3 credentials, as `serve` reads them
        monkeypatch.setenv(name, value)
    return Settings(
        data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS,), workers=1,
        database_url=database_url, blob_store=s3_server.new_bucket(),
    )


@pytest.fixture
def migrations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[int]]]:
    """Every Database.migrate call's applied versions, whoever makes it (the real one runs)."""
    calls: list[list[int]] = []
    real = Database.migrate

    def counted(self: Database) -> list[int]:
        applied = real(self)
        calls.append(applied)
        return applied

    monkeypatch.setattr(Database, "migrate", counted)
    yield calls


def test_shared_backends_are_migrated_once_when_opened(shared_settings: Settings, migrations: list[list[int]]) -> None:
    backends = open_backends(shared_settings)
    assert migrations == [[version for version, _ in MIGRATIONS]]
    assert backends.shared
    assert isinstance(backends.records.tenant_store(), PgTenantStore)
    assert isinstance(backends.blobs.blob_store(), SharedBlobStore)
    assert isinstance(backends.blobs.session_store(), SharedSessionStore)
    opener = backends.blobs.for_workers()
    assert opener.args == [shared_settings.database_url, shared_settings.blob_store]
    sweeper = backends.blobs.orphan_sweeper()
    assert sweeper is not None
    sweeper.stop()
    assert len(migrations) == 1  # building the stores migrates nothing


def test_a_database_without_a_blob_store_keeps_blobs_in_files(
    tmp_path: Path, database_url: str  # noqa: F811
) -> None:
    backends = open_backends(Settings(data_dir=tmp_path, database_url=database_url))
    assert backends.records.shared and not backends.blobs.shared
    assert isinstance(backends.blobs.blob_store(), FileBlobStore)
    assert isinstance(backends.records.tenant_store(), PgTenantStore)


def test_a_shared_server_migrates_once_and_its_workers_get_no_url_from_the_environment(
    shared_settings: Settings, migrations: list[list[int]]
) -> None:
    environment = dict(os.environ)
    with TestClient(create_app(assemble(shared_settings)), base_url="http://localhost") as client:
        read_and_write_a_blob(client)  # the worker reads and writes the object store
        workers = worker_pids(os.getpid())
        assert workers
        url = str(shared_settings.database_url).encode()
        for pid in workers:  # neither on a worker's command line nor in its environment
            assert url not in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert url not in Path(f"/proc/{pid}/environ").read_bytes()
            assert b"WASMRUN_DATABASE_URL" not in Path(f"/proc/{pid}/environ").read_bytes()
        assert dict(os.environ) == environment
    assert len(migrations) == 1


def test_a_server_is_assembled_on_one_opening_of_its_backends(
    shared_settings: Settings, migrations: list[list[int]]
) -> None:
    server = assemble(shared_settings)
    with TestClient(create_app(server), base_url="http://localhost") as client:
        blob_id = rpc(client, "create_blob", {"content": "in the bucket", "kind": "text/plain"})["blob_id"]
    assert server.backends.blobs.blob_store().size(blob_id) == len(b"in the bucket")
    assert len(migrations) == 1  # at open_backends, not again for any store


def test_a_shared_server_start_reads_its_tenants_through_one_store(
    shared_settings: Settings, executor: InProcessExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tenant directory is built once per start: one PostgreSQL tenant store (one
    connection), shared by the exposure and worker checks, /rpc, /mcp and /metrics."""
    made: list[PgTenantStore] = []
    real = PgTenantStore.__init__

    def counted(self: PgTenantStore, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(PgTenantStore, "__init__", counted)
    server = assemble(dataclasses.replace(shared_settings, workers=2), executor=executor, serving=True)
    with TestClient(create_app(server), base_url="http://localhost") as client:
        assert client.get("/healthz").status_code == 200
        rpc(client, "list_skills", {})
    assert made == [server.tenants.store]


# -- local commands ------------------------------------------------------------------------


def _count_tenant_stores(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every tenant store made (the tenants file's or PostgreSQL's), whoever makes it."""
    made: list[object] = []
    for store in (TenantStore, PgTenantStore):
        real = store.__init__

        def counted(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> None:
            made.append(self)
            _real(self, *args, **kwargs)

        monkeypatch.setattr(store, "__init__", counted)
    return made


def _list_skills(dispatcher: Dispatcher) -> list[str]:
    listed = asyncio.run(dispatcher("list_skills", msgspec.Raw(b"{}")))
    return [skill["name"] for skill in msgspec.to_builtins(listed)["skills"]]


def test_wasmrun_mcp_serves_without_opening_the_tenant_store(
    tmp_path: Path, executor: InProcessExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wasmrun mcp` serves one local caller on stdio: no API key is ever checked, so its
    start opens no tenant store (with the shared backend, that was a database connection
    for nothing); its tools still answer, as `serve`'s do."""
    made = _count_tenant_stores(monkeypatch)
    settings = Settings(data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS,), workers=1)
    with open_mcp_dispatcher(settings) as dispatcher:
        assert "text.stats" in _list_skills(dispatcher)
    assert made == []
    server = assemble(settings, executor=executor)
    assert made == [server.tenants.store]  # `serve`'s assembly still has its tenants


def test_wasmrun_mcp_on_the_shared_backend_opens_no_tenant_store(
    shared_settings: Settings, executor: InProcessExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _count_tenant_stores(monkeypatch)
    server = assemble_local(shared_settings, executor=executor)
    try:
        assert "text.stats" in _list_skills(Dispatcher(server.context))
    finally:
        server.close()
    assert made == []
