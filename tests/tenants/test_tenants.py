"""Tenants over HTTP: API keys, and what one tenant's key can reach of another's."""

from __future__ import annotations

import dataclasses
import itertools
import json
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from skillfiles import GUEST_BASE_ENV
from starlette.testclient import TestClient

from wasmrun.cli.main import main
from wasmrun.protocol.context import Context
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import Server, assemble, create_app
from wasmrun.settings import Settings
from wasmrun.tenants.store import TenantStore

Call = Callable[..., dict[str, Any]]
_ids = itertools.count(1)


@pytest.fixture()
def keys(settings: Settings) -> dict[str, str]:
    store = TenantStore(settings.data_dir)
    return {"alice": store.add("alice"), "bob": store.add("bob")}


@pytest.fixture()
def http(server: Server, keys: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(server), base_url="http://localhost") as c:
        yield c


def caller(http: TestClient, key: str | None) -> Call:
    def call(method: str, params: Any = None) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
        if params is not None:
            body["params"] = params
        headers = {"authorization": f"Bearer {key}"} if key is not None else {}
        response = http.post("/rpc", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    return call


def _refusal(http: TestClient, headers: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = http.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "list_skills"}, headers=headers)
    return response.status_code, response.json()


# -- identity ---------------------------------------------------------------------


def test_a_call_without_a_valid_key_is_401_and_says_nothing_more(http: TestClient, keys: dict[str, str]) -> None:
    answers = [
        _refusal(http, {}),
        _refusal(http, {"authorization": "Bearer wrk_not-a-key"}),
        _refusal(http, {"authorization": "Basic " + keys["alice"]}),
        _refusal(http, {"authorization": "Bearer " + keys["alice"][:-1]}),
        _refusal(http, {"authorization": b"Bearer \xff\xfe" + b"x" * 5000}),  # type: ignore[dict-item]
    ]
    for status, body in answers:
        assert status == 401
        assert body == answers[0][1]
        assert body["error"]["code"] == -32001
    assert "alice" not in json.dumps(answers)


def test_a_valid_key_is_served(http: TestClient, keys: dict[str, str]) -> None:
    assert "result" in caller(http, keys["alice"])("list_skills")
    status, _ = _refusal(http, {"authorization": "bearer " + keys["bob"]})
    assert status == 200


def test_rotation_then_revocation(http: TestClient, settings: Settings, keys: dict[str, str]) -> None:
    store = TenantStore(settings.data_dir)
    new = store.rotate("alice")
    assert "result" in caller(http, keys["alice"])("list_skills")
    assert "result" in caller(http, new)("list_skills")
    store.revoke("alice", old_only=True)
    assert _refusal(http, {"authorization": "Bearer " + keys["alice"]})[0] == 401
    assert "result" in caller(http, new)("list_skills")
    store.revoke("alice")
    assert _refusal(http, {"authorization": "Bearer " + new})[0] == 401
    assert "result" in caller(http, keys["bob"])("list_skills")


def test_tenants_add_prints_the_key_alone_and_stores_a_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert main(["tenants", "add", "team-a", "--limit", "concurrent_runs=2", "--data-dir", str(data)]) == 0
    out, err = capsys.readouterr()
    key = out.strip()
    assert out == key + "\n" and key.startswith("wrk_") and len(key) > 40
    assert "only this once" in err
    file = data / "tenants.json"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert key not in file.read_text()
    assert main(["tenants", "add", "team-a", "--data-dir", str(data)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["tenants", "set", "team-a", "--limit", "runs_per_minute=5", "--data-dir", str(data)]) == 0
    assert main(["tenants", "set", "team-a", "--limit", "bogus=5", "--data-dir", str(data)]) == 2
    assert main(["tenants", "list", "--data-dir", str(data)]) == 0
    listing = capsys.readouterr().out
    assert "team-a" in listing and "concurrent_runs=2" in listing and "runs_per_minute=5" in listing
    assert main(["tenants", "revoke", "nobody", "--data-dir", str(data)]) == 2
    assert main(["tenants", "add", "../etc", "--data-dir", str(data)]) == 2


def test_no_tenants_on_loopback_is_the_local_tenant(rpc: Call) -> None:
    assert "result" in rpc("list_skills")


def test_a_non_loopback_host_starts_once_tenants_exist(tmp_path: Path, executor: InProcessExecutor) -> None:
    settings = Settings(host="0.0.0.0", data_dir=tmp_path, workers=2)
    with pytest.raises(ValueError, match="--insecure"):
        assemble(settings, serving=True)  # refused before any worker starts
    TenantStore(tmp_path).add("ops")
    assert assemble(settings, executor=executor, serving=True).tenants.has_tenants()


# -- isolation --------------------------------------------------------------------

REPORT_CODE = "import os\ndef main(args):\n    return {'who': WHO, 'env': dict(os.environ)}\n"


def _create_report(call: Call, who: str) -> dict[str, Any]:
    manifest = {
        "name": "user.report", "version": "1.0.0", "description": "A report.", "kind": "action",
        "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"},
        "permissions": {"secrets": ["DEMO_TOKEN"]},
    }
    code = REPORT_CODE.replace("WHO", repr(who))
    return call("create_skill", {
        "manifest": manifest, "skill_md": f"# report of {who}\n", "files": [{"path": "code/main.py", "content": code}],
    })


def _same_not_found(answer: dict[str, Any], never: dict[str, Any], their_id: str, never_id: str) -> None:
    assert "error" in answer, answer
    assert answer["error"]["code"] == never["error"]["code"] == -32602
    assert answer["error"].get("data") == never["error"].get("data")
    assert answer["error"]["message"].replace(their_id, "ID") == never["error"]["message"].replace(never_id, "ID")


def test_a_tenant_cannot_reach_another_tenants_blobs(http: TestClient, keys: dict[str, str]) -> None:
    alice, bob = caller(http, keys["alice"]), caller(http, keys["bob"])
    theirs = alice("create_blob", {"content": "alice's secret notes", "kind": "text/plain"})["result"]["blob_id"]
    never = "blob:" + "0" * 32
    _same_not_found(bob("read_blob", {"blob_id": theirs}), bob("read_blob", {"blob_id": never}), theirs, never)
    code = "def main(args):\n    return 1\n"
    _same_not_found(
        bob("run_code", {"language": "python", "code": code, "input_blobs": [theirs]}),
        bob("run_code", {"language": "python", "code": code, "input_blobs": [never]}),
        theirs, never,
    )
    _same_not_found(bob("delete_blob", {"blob_id": theirs}), bob("delete_blob", {"blob_id": never}), theirs, never)
    # From inside a run, with the id in hand:
    peek = ("from runtime import blobs\ndef main(args):\n    try:\n        return blobs.read_text(args['id'])\n"
            "    except Exception as exc:\n        return type(exc).__name__\n")
    inside = bob("run_code", {"language": "python", "code": peek, "args": {"id": theirs}})["result"]
    assert inside["output"] == "BlobNotFound"
    # The same bytes stored by bob are bob's own blob, with another id.
    mine = bob("create_blob", {"content": "alice's secret notes", "kind": "text/plain"})["result"]["blob_id"]
    assert mine != theirs
    assert alice("read_blob", {"blob_id": theirs, "mode": "full"})["result"]["content"] == "alice's secret notes"
    assert "error" in alice("read_blob", {"blob_id": mine})
    # A blob a run writes is its tenant's too.
    write = "from runtime import blobs\ndef main(args):\n    return blobs.write_text('from a run')\n"
    written = alice("run_code", {"language": "python", "code": write})["result"]["output"]
    assert alice("read_blob", {"blob_id": written})["result"]["content"] == "from a run"
    assert "error" in bob("read_blob", {"blob_id": written})


def test_a_tenant_cannot_reach_another_tenants_skills(http: TestClient, keys: dict[str, str]) -> None:
    alice, bob = caller(http, keys["alice"]), caller(http, keys["bob"])
    assert _create_report(alice, "alice")["result"] == {"name": "user.report", "version": "1.0.0"}
    names = [s["name"] for s in bob("list_skills", {"limit": 200})["result"]["skills"]]
    assert "user.report" not in names and "data.csv.profile" in names
    assert "user.report" in [s["name"] for s in alice("list_skills", {"limit": 200})["result"]["skills"]]
    never = "user.never"
    for method, params in [
        ("describe_skill", {}), ("read_skill_file", {"path": "code/main.py"}), ("execute_skill", {}),
        ("describe_skill", {"version": "1.0.0"}),
    ]:
        answer = bob(method, {"name": "user.report", **params})
        _same_not_found(answer, bob(method, {"name": never, **params}), "user.report", never)
    mount = {"language": "python", "code": "def main(args):\n    return 1\n"}
    _same_not_found(
        bob("run_code", {**mount, "mount_skills": ["user.report"]}),
        bob("run_code", {**mount, "mount_skills": [never]}), "user.report", never,
    )
    # Both may have a user.report; each runs its own.
    assert _create_report(bob, "bob")["result"] == {"name": "user.report", "version": "1.0.0"}
    assert bob("execute_skill", {"name": "user.report"})["result"]["output"]["who"] == "bob"
    assert alice("execute_skill", {"name": "user.report"})["result"]["output"]["who"] == "alice"


@pytest.fixture()
def granted(settings: Settings, context: Context, keys: dict[str, str]) -> Iterator[TestClient]:
    from wasmrun.egress.grants import Grant
    from wasmrun.tenants.policy import AccessPolicy

    policy = AccessPolicy(tenant_secret_grants={"alice": (Grant("user.report", ("DEMO_TOKEN",), "any"),)})
    app = create_app(assemble(dataclasses.replace(settings, access=policy), blobs=context.blobs, executor=context.executor))
    with TestClient(app, base_url="http://localhost") as c:
        yield c


def test_secrets_are_granted_per_tenant(granted: TestClient, keys: dict[str, str]) -> None:
    alice, bob = caller(granted, keys["alice"]), caller(granted, keys["bob"])
    _create_report(alice, "alice")
    _create_report(bob, "bob")
    # (a secret's value is replaced by its placeholder in what a run returns)
    assert alice("execute_skill", {"name": "user.report"})["result"]["output"]["env"] == {
        **GUEST_BASE_ENV,
        "DEMO_TOKEN": "wasmrun-secret:DEMO_TOKEN"
    }
    assert bob("execute_skill", {"name": "user.report"})["result"]["output"]["env"] == GUEST_BASE_ENV


def test_deleting_a_blob_a_run_is_reading_does_not_crash_the_run(http: TestClient, keys: dict[str, str]) -> None:
    alice = caller(http, keys["alice"])
    blob_id = alice("create_blob", {"content": "x" * 1000, "kind": "text/plain"})["result"]["blob_id"]
    code = (
        "import time\nfrom runtime import blobs\n"
        "def main(args):\n"
        "    reads = 0\n"
        "    for _ in range(400):\n"
        "        try:\n"
        "            blobs.read_bytes(args['id'], 0, 10)\n"
        "        except Exception as exc:\n"
        "            return {'reads': reads, 'then': type(exc).__name__}\n"
        "        reads += 1\n"
        "        time.sleep(0.05)\n"
        "    return {'reads': reads, 'then': 'never deleted'}\n"
    )
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome.update(alice("run_code", {"language": "python", "code": code, "args": {"id": blob_id},
                                          "input_blobs": [blob_id], "limits": {"timeout_ms": 60000}}))

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    assert alice("delete_blob", {"blob_id": blob_id})["result"] == {"deleted": True}
    thread.join(120)
    result = outcome["result"]
    assert result["status"] == "completed", result
    assert result["output"]["then"] == "BlobNotFound"
    assert "error" in alice("read_blob", {"blob_id": blob_id})


def test_a_broken_tenants_file_refuses_everyone(http: TestClient, settings: Settings, keys: dict[str, str]) -> None:
    assert "result" in caller(http, keys["alice"])("list_skills")
    (settings.data_dir / "tenants.json").write_text('{"tenants": {"alice": ')
    assert _refusal(http, {"authorization": "Bearer " + keys["bob"]})[0] == 200  # the keys last read
    assert _refusal(http, {})[0] == 401  # never anonymous
    assert main(["tenants", "list", "--data-dir", str(settings.data_dir)]) == 2


def test_a_real_server_with_tenants(tmp_path: Path) -> None:
    """`wasmrun serve` end to end: keys, isolation, the guard, the audit log and /metrics."""
    import requests

    from tests.liveserver import wasmrun_env
    from tests.protocol.test_e2e_client import Server

    data = tmp_path / "data"
    store = TenantStore(data)
    alice, bob = store.add("alice"), store.add("bob")
    server = Server(data, env={**wasmrun_env(), "WASMRUN_METRICS_KEY": "metrics-key-for-the-operator"})
    try:
        def call(key: str | None, method: str, params: dict[str, Any], **headers: str) -> requests.Response:
            sent = {"content-type": "application/json", **headers}
            if key:
                sent["authorization"] = f"Bearer {key}"
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            return requests.post(server.endpoint, data=body, headers=sent, timeout=60)

        assert call(None, "list_skills", {}).status_code == 401
        blob = call(alice, "create_blob", {"content": "hi", "kind": "text/plain"}).json()["result"]["blob_id"]
        assert call(alice, "read_blob", {"blob_id": blob}).json()["result"]["content"] == "hi"
        assert call(bob, "read_blob", {"blob_id": blob}).json()["error"]["code"] == -32602
        ran = call(bob, "run_code", {"language": "python", "code": "def main(args):\n    return 2\n"}).json()
        assert ran["result"]["output"] == 2
        assert call(alice, "list_skills", {}, host="evil.example").status_code == 403
        assert call(alice, "list_skills", {}, origin="https://evil.example").status_code == 403
        plain = requests.post(server.endpoint, data="{}", headers={"content-type": "text/plain",
                                                                   "authorization": f"Bearer {alice}"}, timeout=60)
        assert plain.status_code == 415
        metrics_url = server.endpoint.replace("/rpc", "/metrics")
        assert requests.get(metrics_url, timeout=60).status_code == 403  # loopback, but tenants exist
        assert requests.get(metrics_url, headers={"authorization": f"Bearer {alice}"}, timeout=60).status_code == 403
        metrics = requests.get(
            metrics_url, headers={"authorization": "Bearer metrics-key-for-the-operator"}, timeout=60
        ).text
        assert 'wasmrun_runs_total{method="run_code",status="completed",tenant="bob"} 1.0' in metrics
    finally:
        server.stop()
    audit = [json.loads(line) for line in (data / "audit.log").read_text().splitlines()]
    assert [(a["tenant"], a["method"]) for a in audit] == [
        ("alice", "create_blob"), ("alice", "read_blob"), ("bob", "read_blob"), ("bob", "run_code"),
    ]


def test_the_servers_dispatcher_refuses_a_call_without_a_caller(settings: Settings, context: Context) -> None:
    """A transport that forgets to authenticate (e.g. a new endpoint) fails closed."""
    import asyncio

    import msgspec

    from wasmrun.protocol.errors import Unauthorized
    from wasmrun.protocol.methods import Dispatcher

    with pytest.raises(Unauthorized):
        asyncio.run(Dispatcher(context, require_caller=True)("list_skills", msgspec.Raw(b"{}")))
