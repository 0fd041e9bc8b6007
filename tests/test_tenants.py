"""Tenants over HTTP: API keys, and what one tenant's key can reach of another's."""

from __future__ import annotations

import itertools
import json
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from wasmrun.cli import main
from wasmrun.protocol.context import Context
from wasmrun.server import create_app
from wasmrun.settings import Settings
from wasmrun.tenants.store import TenantStore

Call = Callable[..., dict[str, Any]]
_ids = itertools.count(1)


@pytest.fixture()
def keys(settings: Settings) -> dict[str, str]:
    store = TenantStore(settings.data_dir)
    return {"alice": store.add("alice"), "bob": store.add("bob")}


@pytest.fixture()
def http(settings: Settings, context: Context, keys: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(settings, context), base_url="http://localhost") as c:
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


def test_a_non_loopback_host_starts_once_tenants_exist(tmp_path: Path) -> None:
    from wasmrun.server import check_exposure

    settings = Settings(host="0.0.0.0", data_dir=tmp_path)
    with pytest.raises(ValueError, match="--insecure"):
        check_exposure(settings)
    TenantStore(tmp_path).add("ops")
    check_exposure(settings)
