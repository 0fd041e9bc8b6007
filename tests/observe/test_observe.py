"""The audit log, /metrics and blob retention, over HTTP."""

from __future__ import annotations

import dataclasses
import json
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.tenants.test_tenants import caller
from wasmrun.blobs.store import FileBlobStore
from wasmrun.protocol.context import Context
from wasmrun.server import Server, assemble, create_app
from wasmrun.settings import Settings
from wasmrun.tenants.retention import BlobRetention
from wasmrun.tenants.store import TenantStore

METRICS_KEY = "operator-metrics-key-0123456789"


@pytest.fixture()
def names() -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return {"a": "aud-" + suffix, "b": "brief-" + suffix}


@pytest.fixture()
def audited(settings: Settings, tmp_path: Path) -> Settings:
    return dataclasses.replace(settings, audit_log=tmp_path / "audit" / "audit.log", metrics_key=METRICS_KEY)


@pytest.fixture()
def keys(audited: Settings, names: dict[str, str]) -> dict[str, str]:
    store = TenantStore(audited.data_dir)
    return {"a": store.add(names["a"], {"blob_ttl_s": 60}), "b": store.add(names["b"])}


@pytest.fixture()
def audited_server(audited: Settings, context: Context) -> Server:
    return assemble(audited, blobs=context.blobs, executor=context.executor)


@pytest.fixture()
def http(audited_server: Server, keys: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(audited_server), base_url="http://localhost", client=("127.0.0.1", 50000)) as c:
        yield c


def _lines(settings: Settings) -> list[dict[str, Any]]:
    assert settings.audit_log is not None
    return [json.loads(line) for line in settings.audit_log.read_text().splitlines()]


def test_the_audit_log_records_each_call_without_code_args_or_secrets(
    http: TestClient, audited: Settings, keys: dict[str, str], names: dict[str, str]
) -> None:
    a = caller(http, keys["a"])
    blob = a("create_blob", {"content": "TOP SECRET CONTENT", "kind": "text/plain"})["result"]["blob_id"]
    run = a("run_code", {"language": "python", "code": "SECRET_CODE = 1\ndef main(args):\n    raise ValueError('x')\n",
                         "args": {"password": "hunter2"}})["result"]
    executed = a("execute_skill", {"name": "data.csv.profile", "args": {"blob_id": blob}, "input_blobs": [blob]})
    a("read_blob", {"blob_id": "blob:" + "1" * 32})
    lines = _lines(audited)
    assert [line["method"] for line in lines] == ["create_blob", "run_code", "execute_skill", "read_blob"]
    assert all(line["tenant"] == names["a"] for line in lines)
    created, ran, skill, missing = lines
    assert created["blobs_created"] == [blob] and created["status"] == "ok" and created["bytes_in"] > 0
    assert ran["run_id"] == run["run_id"] and ran["run_status"] == "failed" and ran["error_type"] == "ValueError"
    assert skill["skill"] == "data.csv.profile" and skill["version"] and skill["run_status"] == "completed"
    assert skill["run_id"] == executed["result"]["run_id"] and skill["bytes_out"] > 0
    assert missing["status"] == "error" and missing["error_code"] == -32602 and missing["error_type"] == "BlobNotFound"
    assert all(isinstance(line["duration_ms"], float) and "time" in line for line in lines)
    text = audited.audit_log.read_text()  # type: ignore[union-attr]
    for secret in ("TOP SECRET", "SECRET_CODE", "hunter2", "s3cret", keys["a"]):
        assert secret not in text
    assert stat.S_IMODE(audited.audit_log.stat().st_mode) == 0o600  # type: ignore[union-attr]


def test_metrics_in_prometheus_format(http: TestClient, keys: dict[str, str], names: dict[str, str]) -> None:
    a = caller(http, keys["a"])
    a("run_code", {"language": "python", "code": "def main(args):\n    return 1\n"})
    a("create_blob", {"content": "x" * 10_000, "kind": "text/plain"})
    assert http.get("/metrics").status_code == 403  # tenants exist: a loopback client proves nothing
    assert http.get("/metrics", headers={"authorization": f"Bearer {keys['a']}"}).status_code == 403  # a tenant's key
    response = http.get("/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    tenant = names["a"]
    assert f'wasmrun_runs_total{{method="run_code",status="completed",tenant="{tenant}"}} 1.0' in text
    assert 'wasmrun_run_duration_seconds_count{method="run_code"} 1.0' in text
    assert f'wasmrun_blob_bytes{{tenant="{tenant}"}} 10000.0' in text
    assert "wasmrun_workers_free" in text and "wasmrun_workers_busy" in text
    assert f'wasmrun_runs_queued{{tenant="{tenant}"}} 0.0' in text


def test_metrics_are_not_served_to_other_machines(server: Server) -> None:
    with TestClient(create_app(server), base_url="http://localhost", client=("198.51.100.7", 1)) as c:
        assert c.get("/metrics").status_code == 403


def test_retention_deletes_a_tenants_old_blobs_only(
    http: TestClient, audited_server: Server, keys: dict[str, str], blob_store: FileBlobStore
) -> None:
    a, b = caller(http, keys["a"]), caller(http, keys["b"])
    old = a("create_blob", {"content": "old", "kind": "text/plain"})["result"]["blob_id"]
    kept = b("create_blob", {"content": "kept", "kind": "text/plain"})["result"]["blob_id"]
    retention = BlobRetention(blob_store, audited_server.tenants, 0)
    retention.sweep(now=time.time() + 30)  # within a's 60 s: kept
    assert "result" in a("read_blob", {"blob_id": old})
    assert retention.sweep(now=time.time() + 120) >= 1
    assert a("read_blob", {"blob_id": old})["error"]["code"] == -32602
    assert "result" in b("read_blob", {"blob_id": kept})  # b keeps blobs until deleted


def test_blob_ttl_flag_sets_the_default(tmp_path: Path) -> None:
    assert Settings.load({}, data_dir=tmp_path, blob_ttl=3600).access.limits.blob_ttl_s == 3600
    assert Settings.load({"WASMRUN_BLOB_TTL": "60"}, data_dir=tmp_path).access.limits.blob_ttl_s == 60
    assert Settings.load({}, data_dir=tmp_path).audit_log == tmp_path / "audit.log"
    assert Settings.load({}, data_dir=tmp_path, audit_log="-").audit_log is None


@pytest.mark.parametrize("key", ["short", "x" * 15, "a key with\ttab-0123456789", "ключ-0123456789abcdef"])
def test_a_weak_or_odd_metrics_key_is_refused_at_start(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError, match="WASMRUN_METRICS_KEY"):
        Settings.load({"WASMRUN_METRICS_KEY": key, "WASMRUN_DATA_DIR": str(tmp_path)})


def test_metrics_without_tenants_and_without_a_key_stay_on_this_machine(server: Server) -> None:
    with TestClient(create_app(server), base_url="http://localhost", client=("127.0.0.1", 1)) as c:
        assert c.get("/metrics").status_code == 200
