"""POST /rpc the short way (wire/rpc_asgi.py) answers exactly as through Starlette's stack:
the same status, body and headers for good calls and for every refusal (Host, Origin,
Content-Type, API key, body limit, slow body, invalid bodies), with the real dispatcher
and sandbox behind both."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from wasmrun.protocol.context import Context
from wasmrun.server import assemble, create_app
from wasmrun.settings import Settings
from wasmrun.tenants.store import TenantStore
from wasmrun.wire.rpc_asgi import RpcFront

HELLO = "def main(args):\n    print('hi')\n    return 1\n"


@pytest.fixture()
def key(settings: Settings) -> str:
    return TenantStore(settings.data_dir).add("alice")


@pytest.fixture()
def app(settings: Settings, context: Context, key: str) -> Iterator[RpcFront]:
    small = dataclasses.replace(settings, max_body_bytes=4096)
    made = create_app(assemble(small, blobs=context.blobs, executor=context.executor))
    assert isinstance(made, RpcFront) and made.rpc is not None
    yield made


def both(app: RpcFront, send: Any) -> tuple[Any, Any]:
    """(the short way's answer, Starlette's) to the same request."""
    short = app.rpc
    answers = []
    for rpc in (short, None):
        app.rpc = rpc
        with TestClient(app, base_url="http://localhost") as client:
            answers.append(send(client))
    app.rpc = short
    return answers[0], answers[1]


def same(a: Any, b: Any) -> None:
    assert a.status_code == b.status_code
    assert a.content == b.content
    kept = ("content-type", "content-length", "www-authenticate", "retry-after", "connection", "allow")
    assert {k: a.headers.get(k) for k in kept} == {k: b.headers.get(k) for k in kept}


def rpc_call(method: str, params: Any = None, id: Any = 1) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


GOOD = rpc_call("list_skills", {})
# The answer's HTTP status, for each case (a JSON-RPC error inside a 200 for a call that was read).
STATUS = {
    "no key": 401, "unknown key": 401, "text/plain": 415, "no content-type": 415, "foreign host": 403,
    "foreign origin": 403, "body over the limit": 413, "notification": 204,
}
CASES: dict[str, tuple[dict[str, str], bytes]] = {
    "no key": ({"content-type": "application/json"}, GOOD),
    "unknown key": ({"content-type": "application/json", "authorization": "Bearer nope"}, GOOD),
    "text/plain": ({"content-type": "text/plain", "authorization": "KEY"}, GOOD),
    "no content-type": ({"authorization": "KEY"}, GOOD),
    "foreign host": ({"content-type": "application/json", "authorization": "KEY", "host": "evil.example"}, GOOD),
    "foreign origin": (
        {"content-type": "application/json", "authorization": "KEY", "origin": "https://evil.example"}, GOOD,
    ),
    "body over the limit": ({"content-type": "application/json", "authorization": "KEY"}, b" " * 5000 + GOOD),
    "invalid UTF-8": ({"content-type": "application/json", "authorization": "KEY"}, b'{"jsonrpc":"2.0\xff"}'),
    "lone surrogate": (
        {"content-type": "application/json", "authorization": "KEY"}, rpc_call("list_skills", {"x": "\ud800"}),
    ),
    "deep nesting": ({"content-type": "application/json", "authorization": "KEY"}, b"[" * 1500 + b"]" * 1500),
    "not JSON": ({"content-type": "application/json", "authorization": "KEY"}, b"{nope"),
    "empty batch": ({"content-type": "application/json", "authorization": "KEY"}, b"[]"),
    "notification": (
        {"content-type": "application/json", "authorization": "KEY"}, b'{"jsonrpc":"2.0","method":"list_skills"}',
    ),
    "batch": ({"content-type": "application/json; charset=utf-8", "authorization": "KEY"}, b"[" + GOOD + b"," + GOOD + b"]"),
    "duplicate member": (
        {"content-type": "application/json", "authorization": "KEY"},
        b'{"jsonrpc":"2.0","id":1,"method":"list_skills","method":"run_code"}',
    ),
    "unknown method": ({"content-type": "application/json", "authorization": "KEY"}, rpc_call("nope", {})),
    "a run": (
        {"content-type": "application/json", "authorization": "KEY"},
        rpc_call("run_code", {"language": "python", "code": HELLO}),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_short_way_answers_as_starlette_did(app: RpcFront, key: str, case: str) -> None:
    headers, body = CASES[case]
    headers = {k: (f"Bearer {key}" if v == "KEY" else v) for k, v in headers.items()}
    short, starlette = both(app, lambda client: client.post("/rpc", content=body, headers=headers))
    if case == "a run":  # run ids and timings differ run to run; the shape may not
        assert short.status_code == starlette.status_code == 200
        for answer in (short, starlette):
            assert answer.json()["result"]["status"] == "completed" and answer.json()["result"]["output"] == 1
        return
    same(short, starlette)
    assert short.status_code == STATUS.get(case, 200)
    if short.status_code != 204:
        assert short.headers["content-type"] == "application/json"
        assert short.headers["content-length"] == str(len(short.content))
        assert "error" in short.json() or "result" in short.json() or isinstance(short.json(), list)


def test_a_body_without_a_length_over_the_limit_is_refused_the_same(app: RpcFront, key: str) -> None:
    def chunked(client: TestClient) -> Any:
        chunks = iter([b"[", b" " * 3000, b" " * 3000, b"]"])
        return client.post("/rpc", content=chunks, headers={"content-type": "application/json",
                                                            "authorization": f"Bearer {key}"})

    short, starlette = both(app, chunked)
    assert short.status_code == 413
    same(short, starlette)


def test_other_methods_and_paths_still_go_to_starlette(app: RpcFront, key: str) -> None:
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/rpc").status_code == 405
        assert client.get("/healthz").status_code == 200
        answer = client.post("/rpc", content=GOOD, headers={"content-type": "application/json",
                                                             "authorization": f"Bearer {key}"})
        assert answer.status_code == 200 and "result" in answer.json()
