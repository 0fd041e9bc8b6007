"""The hostile-input sweep of test_hostile_input.py against the shared backends.

PostgreSQL refuses what a file does not (a NUL in text, invalid UTF-8 in a
name, values past a column's range) and S3 keys have rules of their own: with
`--database-url` and `--blob-store s3://` every hostile value must still get a
client error naming the field (or an in-band failed run), never -32603, and
the server keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import PostgresServer, postgres_server  # noqa: F401  (fixtures)
from tests.protocol.test_hostile_input import CASES, check_hostile_value
from wasmrun.backends import open_backends
from wasmrun.blobs.store import BlobStore
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings


@pytest.fixture(scope="module")
def shared_settings(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,  # noqa: F811
    s3_server: S3Server,  # noqa: F811
) -> Iterator[Settings]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_server.env().items():
            patch.setenv(name, value)
        yield Settings(
            data_dir=tmp_path_factory.mktemp("hostile-shared-data"),
            skills_dirs=(BUNDLED_SKILLS,),
            workers=2,
            database_url=postgres_server.new_database(),
            blob_store=s3_server.new_bucket(),
        )


@pytest.fixture(scope="module")
def shared_blobs(shared_settings: Settings) -> BlobStore:
    return open_backends(shared_settings).blobs.blob_store()


@pytest.fixture(scope="module")
def shared_client(
    shared_settings: Settings, shared_blobs: BlobStore, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TestClient]:
    executor = InProcessExecutor(
        shared_blobs, slots=2, queue_timeout=5.0, workspace_root=tmp_path_factory.mktemp("shared-ws")
    )
    try:
        app = create_app(assemble(shared_settings, blobs=shared_blobs, executor=executor))
        with TestClient(app, base_url="http://localhost") as client:
            yield client
    finally:
        executor.close()


@pytest.fixture(scope="module")
def shared_blob_id(shared_blobs: BlobStore) -> str:
    return shared_blobs.create(b"region,sales\nnorth,1\n", "text/csv")


@pytest.mark.parametrize("method, path, value", CASES)
def test_hostile_value_is_a_client_error_on_shared_backends(
    shared_client: TestClient, shared_blob_id: str, method: str, path: tuple[Any, ...], value: bytes
) -> None:
    check_hostile_value(shared_client, shared_blob_id, method, path, value)


def test_fixture_really_is_shared(shared_settings: Settings) -> None:
    assert shared_settings.database_url and shared_settings.blob_store
    assert Path(shared_settings.data_dir).is_dir()
