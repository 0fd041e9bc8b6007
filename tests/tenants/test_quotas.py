"""Per-tenant quotas over HTTP: each refusal is a clear JSON-RPC error naming the
limit and its value, and nothing partial is stored."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.tenants.test_tenants import caller
from wasmrun.blobs.quota import BLOB_MIN_CHARGE
from wasmrun.blobs.store import FileBlobStore
from wasmrun.protocol.context import Context
from wasmrun.server import Server, create_app
from wasmrun.settings import Settings
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

SMALL = {
    "blob_count": 4, "blob_bytes": 3 * BLOB_MIN_CHARGE, "blobs_per_run": 2,
    "runs_per_minute": 3, "concurrent_runs": 1, "queued_runs": 1,
    "skills": 1, "skill_bytes": 20_000, "max_timeout_ms": 3000,
}


@pytest.fixture()
def tenant(settings: Settings) -> dict[str, str]:
    # The blob store is the session's: fresh names keep each test's usage its own.
    name = "small-" + uuid.uuid4().hex[:8]
    store = TenantStore(settings.data_dir)
    return {"small": store.add(name, SMALL), "other": store.add("other-" + name), "name": name}


@pytest.fixture()
def http(server: Server, tenant: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(server), base_url="http://localhost") as c:
        yield c


def _quota(answer: dict[str, Any], limit: str) -> dict[str, Any]:
    assert "error" in answer, answer
    error = answer["error"]
    assert error["code"] == -32002, error
    assert error["data"]["limit"] == limit and error["data"]["value"] == SMALL[limit]
    assert limit in error["message"]
    return error


def _stored(blob_store: FileBlobStore) -> set[str]:
    return {p.name for p in blob_store.root.glob("[0-9a-f][0-9a-f]/*")}


def test_empty_blobs_are_not_free_and_over_quota_stores_nothing(
    http: TestClient, tenant: dict[str, str], blob_store: FileBlobStore
) -> None:
    small = caller(http, tenant["small"])
    ids = [small("create_blob", {"content": c, "kind": "text/plain"})["result"]["blob_id"] for c in ("", "a", "b")]
    assert len(set(ids)) == 3
    before = _stored(blob_store)
    usage = blob_store.usage(tenant["name"])
    assert usage.bytes == 3 * BLOB_MIN_CHARGE and usage.count == 3
    _quota(small("create_blob", {"content": "", "kind": "text/csv"}), "blob_bytes")
    assert _stored(blob_store) == before and blob_store.usage(tenant["name"]) == usage
    # The same bytes again are the same blob: no new charge, no refusal.
    assert small("create_blob", {"content": "a", "kind": "text/plain"})["result"]["blob_id"] == ids[1]
    # Deleting gives the room back; another tenant was never affected.
    assert small("delete_blob", {"blob_id": ids[0]})["result"] == {"deleted": True}
    assert "result" in small("create_blob", {"content": "c", "kind": "text/plain"})
    other = caller(http, tenant["other"])
    assert "result" in other("create_blob", {"content": "", "kind": "text/plain"})


def test_a_run_cannot_write_past_its_blob_limits(http: TestClient, tenant: dict[str, str], blob_store: FileBlobStore) -> None:
    small = caller(http, tenant["small"])
    code = ("from runtime import blobs\ndef main(args):\n    for i in range(args['n']):\n"
            "        blobs.write_bytes(b'', kind=args['kind'] + str(i))\n")
    result = small("run_code", {"language": "python", "code": code, "args": {"n": 100, "kind": "x/"}})["result"]
    assert result["status"] == "failed" and result["error"]["type"] == "BlobQuotaExceeded"
    assert "blobs_per_run" in result["error"]["message"]
    assert len(result["output_blobs"]) == 2 == blob_store.usage(tenant["name"]).count
    again = small("run_code", {"language": "python", "code": code, "args": {"n": 2, "kind": "y/"}})["result"]
    assert again["status"] == "failed" and "blob_bytes" in again["error"]["message"]
    assert blob_store.usage(tenant["name"]).count == 3


def test_runs_per_minute_with_retry_after(http: TestClient, tenant: dict[str, str]) -> None:
    small = caller(http, tenant["small"])
    code = {"language": "python", "code": "def main(args):\n    return 1\n"}
    for _ in range(SMALL["runs_per_minute"]):
        assert small("run_code", code)["result"]["output"] == 1
    response = http.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": code},
                         headers={"authorization": "Bearer " + tenant["small"]})
    error = _quota(response.json(), "runs_per_minute")
    assert 1 <= int(response.headers["retry-after"]) <= 60 == 60
    assert error["data"]["retry_after_s"] == int(response.headers["retry-after"])
    assert caller(http, tenant["other"])("run_code", code)["result"]["output"] == 1


def test_concurrent_and_queued_runs(http: TestClient, context: Context, tenant: dict[str, str]) -> None:
    small = caller(http, tenant["small"])
    sleeper = {"language": "python", "code": "import time\ndef main(args):\n    time.sleep(2)\n    return 1\n"}
    answers: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda: answers.append(small("run_code", sleeper))) for _ in range(2)]
    for t in threads:
        t.start()
        for _ in range(600):  # until the gate holds it (running or waiting)
            if sum(context.gate.load().get(tenant["name"], (0, 0))) > len(answers) + threads.index(t):
                break
            time.sleep(0.01)
    assert context.gate.load()[tenant["name"]] == (1, 1)
    _quota(small("run_code", sleeper), "queued_runs")
    for t in threads:
        t.join(120)
    assert [a["result"]["output"] for a in answers] == [1, 1]


def test_a_tenant_cannot_ask_past_its_timeout_ceiling(http: TestClient, tenant: dict[str, str]) -> None:
    small = caller(http, tenant["small"])
    code = {"language": "python", "code": "def main(args):\n    return 1\n"}
    error = small("run_code", {**code, "limits": {"timeout_ms": 5000}})["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "limits.timeout_ms"
    assert error["data"]["limit"] == "max_timeout_ms" and error["data"]["value"] == 3000
    assert small("run_code", {**code, "limits": {"timeout_ms": 3000}})["result"]["output"] == 1
    error = small("execute_skill", {"name": "data.csv.profile", "timeout_ms": 3001})["error"]
    assert error["data"]["field"] == "timeout_ms"
    # The default timeout (30 s) is cut to the ceiling: an endless loop ends at 3 s.
    loop = small("run_code", {"language": "python", "code": "def main(args):\n    while True:\n        pass\n"})
    assert loop["result"]["error"]["type"] in ("Timeout", "CPULimitExceeded")


def test_created_skills_count_and_bytes(http: TestClient, tenant: dict[str, str], settings: Settings) -> None:
    small = caller(http, tenant["small"])

    def create(name: str, size: int) -> dict[str, Any]:
        manifest = {"name": name, "version": "1.0.0", "description": "d", "kind": "instruction"}
        return small("create_skill", {"manifest": manifest, "skill_md": "# x\n" + "y" * size})

    _quota(create("user.big", 30_000), "skill_bytes")
    assert "result" in create("user.one", 10)
    _quota(create("user.two", 10), "skills")
    owned = settings.skills_home / ("@" + tenant["name"])
    assert sorted(p.name for p in owned.iterdir()) == ["user.one"]


def test_a_flooding_tenant_leaves_a_sandbox_for_another(
    http: TestClient, context: Context, tenant: dict[str, str], settings: Settings
) -> None:
    # Two sandboxes (settings.workers == 2): "other" may hold one, whatever it asks.
    hostile, victim = caller(http, tenant["other"]), caller(http, tenant["small"])
    context.gate.queue_timeout = 120  # the queued hostile runs wait their turn, however slow this machine
    sleeper = {"language": "python", "code": "import time\ndef main(args):\n    time.sleep(4)\n    return 'slept'\n"}
    done: list[str] = []
    threads = [threading.Thread(target=lambda: done.append(hostile("run_code", sleeper)["result"]["output"]))
               for _ in range(3)]
    for t in threads:
        t.start()
    name = "other-" + tenant["name"]
    for _ in range(1000):
        if context.gate.load().get(name) == (1, 2):
            break
        time.sleep(0.01)
    assert context.gate.load()[name] == (1, 2)
    answer = victim("run_code", {"language": "python", "code": "def main(args):\n    return 'hello'\n"})
    assert answer["result"]["output"] == "hello"
    assert done == []  # served while every hostile run was still sleeping or queued
    for t in threads:
        t.join(120)
    assert done == ["slept"] * 3


def test_usage_is_recounted_from_disk(tmp_path: Any) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    store.create(b"x" * 10_000, "text/plain", owner="t1")
    store.create(b"", "text/plain", owner="t1")
    gone = store.create(b"y", "text/plain", owner="t2")
    store.delete(gone, "t2")
    # A crash between a blob and its ledger: the ledgers are wrong.
    for ledger in (tmp_path / "blobs" / ".usage").glob("*.json"):
        ledger.write_bytes(b'{"bytes": 999999, "count": 99}')
    found = store.recount()
    assert store.usage("t1").bytes == 10_000 + BLOB_MIN_CHARGE and store.usage("t1").count == 2
    assert store.usage("t2").count == 0 and store.usage("t2").bytes == 0
    assert set(found) == {"t1"}


def test_memory_and_cpu_ceilings_bound_a_tenants_runs(http: TestClient, settings: Settings) -> None:
    key = TenantStore(settings.data_dir).add("tight-" + uuid.uuid4().hex[:8], {"max_cpu_ms": 200, "max_memory_mb": 64})
    tight = caller(http, key)
    spin = tight("run_code", {"language": "python", "code": "def main(args):\n    while True:\n        pass\n",
                              "limits": {"timeout_ms": 60000}})["result"]
    assert spin["error"]["type"] == "CPULimitExceeded", spin
    grow = "def main(args):\n    return len(bytearray(100 * 1024 * 1024))\n"
    big = tight("run_code", {"language": "python", "code": grow})["result"]
    assert big["status"] == "failed" and big["error"]["type"] in ("MemoryLimitExceeded", "MemoryError"), big
