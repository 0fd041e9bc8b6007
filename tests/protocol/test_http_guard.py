"""A web page cannot drive a local server: Content-Type, Host (DNS rebinding) and Origin
checks, and no anonymous serving on a non-loopback address unless --insecure."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from wasmrun.cli.main import main
from wasmrun.protocol.context import Context
from wasmrun.server import assemble, create_app
from wasmrun.settings import Settings

CALL = {"jsonrpc": "2.0", "id": 1, "method": "list_skills"}
CREATE = {"jsonrpc": "2.0", "id": 2, "method": "create_blob", "params": {"content": "x", "kind": "text/plain"}}


def test_a_text_plain_post_is_refused(client: TestClient) -> None:
    # What a <form> or fetch(no-cors) from any page can send without a preflight.
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"content-type": content_type} if content_type else {}
        response = client.post("/rpc", content=json.dumps(CREATE), headers=headers)
        assert response.status_code == 415, content_type
        assert response.json()["error"]["code"] == -32600
    ok = client.post("/rpc", content=json.dumps(CALL), headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200 and "result" in ok.json()


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "127.0.0.1.nip.io", ""])
def test_a_host_the_server_does_not_answer_is_refused(client: TestClient, host: str) -> None:
    response = client.post("/rpc", json=CREATE, headers={"host": host})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == -32003
    assert client.get("/healthz", headers={"host": host}).status_code == 403


@pytest.mark.parametrize("host", ["localhost:8080", "127.0.0.1:9", "[::1]:8080", "LOCALHOST"])
def test_loopback_hosts_are_answered(client: TestClient, host: str) -> None:
    assert client.post("/rpc", json=CALL, headers={"host": host}).status_code == 200


def test_a_foreign_origin_is_refused(client: TestClient) -> None:
    response = client.post("/rpc", json=CREATE, headers={"origin": "https://evil.example"})
    assert response.status_code == 403 and response.json()["error"]["code"] == -32003
    assert client.post("/rpc", json=CREATE, headers={"origin": "null"}).status_code == 403


@pytest.fixture()
def configured(settings: Settings, context: Context) -> Iterator[TestClient]:
    policy = dataclasses.replace(
        settings.access, allowed_hosts=("wasmrun.internal",), allowed_origins=("https://agents.example.com",)
    )
    app = create_app(assemble(dataclasses.replace(settings, access=policy), blobs=context.blobs, executor=context.executor))
    with TestClient(app, base_url="http://wasmrun.internal") as c:
        yield c


def test_both_lists_are_configurable(configured: TestClient) -> None:
    assert configured.post("/rpc", json=CALL).status_code == 200
    assert configured.post("/rpc", json=CALL, headers={"origin": "https://agents.example.com"}).status_code == 200
    assert configured.post("/rpc", json=CALL, headers={"origin": "https://evil.example"}).status_code == 403
    assert configured.post("/rpc", json=CALL, headers={"host": "other.internal"}).status_code == 403


def test_non_loopback_host_without_keys_refuses_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--host", "192.0.2.1", "--port", "1", "--data-dir", str(tmp_path / "d")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--insecure" in err and "tenants add" in err


def test_insecure_says_so_loudly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from wasmrun.server import check_exposure
    from wasmrun.tenants.limits import TenantLimits
    from wasmrun.tenants.store import TenantDirectory, TenantStore

    tenants = TenantDirectory(TenantStore(tmp_path), TenantLimits(), anonymous=None)
    check_exposure("0.0.0.0", tenants, insecure=True)
    assert any("INSECURE" in r.getMessage() for r in caplog.records)
    check_exposure("127.0.0.1", tenants, insecure=False)  # loopback: fine as it was
