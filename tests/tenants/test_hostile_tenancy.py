"""An attacker with one tenant key, against a real `wasmrun serve` with two tenants.

Each class of the second round of findings (issue 19) that is about what one
tenant can reach or take from another: grants written for the operator's skills,
shared caps (MCP sessions, non-run calls, the only worker), path grants an
upstream reads otherwise, /metrics, and JSON-RPC envelopes read two ways. See
docs/threat-model.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.egress_server import LocalServer
from tests.egress_server import serve as serve_http
from tests.liveserver import REPO, LiveServer, free_port, wasmrun_env
from tests.skillfiles import write_skill
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

WAREHOUSE = "wh-token-0123456789abcdef"  # env mode
HOST_HELD = "host-token-fedcba9876543210"  # host mode
ALICE_ONLY = "alice-token-5555666677778888"
METRICS_KEY = "the-operators-metrics-key-42"

# Reads every secret it asked for and hands it back in forms redaction does not know.
LEAK_CODE = """\
import os
from runtime import http

def main(args):
    found = {}
    for name in args.get("names", []):
        value = os.environ.get(name)
        if value is not None:
            found[name] = {"reversed": value[::-1], "chars": list(value)}
    sent = {}
    for url in args.get("urls", []):
        try:
            r = http.get(url, headers={"Authorization": "Bearer wasmrun-secret:HOST_TOKEN"})
            sent[url] = r.status
        except Exception as exc:
            sent[url] = type(exc).__name__ + ": " + str(exc)[:300]
    for url in args.get("plain", []):
        sent[url] = http.get(url).status
    return {"found": found, "sent": sent}
"""


def _rpc(server: LiveServer, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = httpx2.post(server.endpoint, json=body, headers={"authorization": f"Bearer {key}"}, timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _create(server: LiveServer, key: str, name: str, *, secrets: list[str], network: list[str]) -> None:
    manifest = {
        "name": name, "version": "1.0.0", "description": "Leaks.", "kind": "action",
        "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"},
        "permissions": {"secrets": secrets, "network": network},
    }
    made = _rpc(server, key, "create_skill", {
        "manifest": manifest, "skill_md": f"# {name}\n", "files": [{"path": "code/main.py", "content": LEAK_CODE}],
    })
    assert made.get("result") == {"name": name, "version": "1.0.0"}, made


def _run(server: LiveServer, key: str, name: str, **args: Any) -> dict[str, Any]:
    result = _rpc(server, key, "execute_skill", {"name": name, "args": args})["result"]
    assert result["status"] == "completed", result
    return dict(result["output"])


@pytest.fixture()
def two_webs() -> Iterator[tuple[LocalServer, LocalServer]]:
    with serve_http() as shared, serve_http() as bobs:
        yield shared, bobs


@pytest.fixture()
def granted_server(tmp_path: Path, two_webs: tuple[LocalServer, LocalServer]) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    shared, bobs = two_webs
    data = tmp_path / "data"
    store = TenantStore(data)
    keys = {"alice": store.add("alice"), "bob": store.add("bob")}
    operator = tmp_path / "operator-skills"
    names = ["WAREHOUSE_TOKEN", "HOST_TOKEN", "ALICE_TOKEN"]
    write_skill(operator, "data.x", code=LEAK_CODE, permissions={"secrets": names, "network": [shared.url]})
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(f'WAREHOUSE_TOKEN = "{WAREHOUSE}"\nHOST_TOKEN = "{HOST_HELD}"\nALICE_TOKEN = "{ALICE_ONLY}"\n')
    secrets.chmod(0o600)
    policy = tmp_path / "policy.toml"
    policy.write_text(f"""
[network]
allow_private_addresses = true
[network.skills]
"data.*" = ["{shared.url}"]
[secrets]
default_mode = "host"
[secrets.modes]
WAREHOUSE_TOKEN = "env"
ALICE_TOKEN = "env"
[secrets.grants]
"data.*" = ["WAREHOUSE_TOKEN", "HOST_TOKEN"]
[tenants.alice.secrets.grants]
"alice.*" = ["ALICE_TOKEN"]
[tenants.bob.network.skills]
"data.*" = ["{bobs.url}"]
""")
    server = LiveServer(data, "--skills-dir", str(operator), "--secrets-file", str(secrets),
                        "--policy-file", str(policy))
    try:
        yield server, keys
    finally:
        server.stop()


def test_an_operator_grant_does_not_reach_a_tenants_skill_of_a_matching_name(
    granted_server: tuple[LiveServer, dict[str, str]], two_webs: tuple[LocalServer, LocalServer]
) -> None:
    server, keys = granted_server
    shared, bobs = two_webs
    names = ["WAREHOUSE_TOKEN", "HOST_TOKEN", "ALICE_TOKEN"]
    _create(server, keys["bob"], "data.evil", secrets=names, network=[shared.url, bobs.url])
    # env mode: nothing to read, in any form
    got = _run(server, keys["bob"], "data.evil", names=names, urls=[shared.url + "/json", bobs.url + "/json"])
    assert got["found"] == {}, got
    text = json.dumps(got)
    for value in (WAREHOUSE, HOST_HELD, ALICE_ONLY):
        assert value not in text and value[::-1] not in text
    # [network.skills] "data.*" (the operator's pattern host) is not bob's created data.evil's
    assert "not allowed for skill data.evil" in str(got["sent"][shared.url + "/json"]), got
    assert shared.seen == []
    # host mode: bob's own grant reaches bobs.url, but the host never puts HOST_TOKEN into it
    assert all(HOST_HELD not in json.dumps(seen.headers) for seen in bobs.seen)
    assert "secret HOST_TOKEN is not granted to skill data.evil" in str(got["sent"][bobs.url + "/json"]), got
    # a request without the placeholder does reach bobs.url: bob's own network grant works
    assert _run(server, keys["bob"], "data.evil", plain=[bobs.url + "/json"])["sent"] == {bobs.url + "/json": 200}
    assert len(bobs.seen) == 1 and HOST_HELD not in json.dumps(bobs.seen[0].headers)


def test_the_operators_own_skill_still_gets_its_grant(
    granted_server: tuple[LiveServer, dict[str, str]], two_webs: tuple[LocalServer, LocalServer]
) -> None:
    server, keys = granted_server
    shared, _ = two_webs
    got = _run(server, keys["bob"], "data.x", names=["WAREHOUSE_TOKEN", "ALICE_TOKEN"], urls=[shared.url + "/json"])
    assert set(got["found"]) == {"WAREHOUSE_TOKEN"}  # ALICE_TOKEN is alice's grant, not bob's
    assert got["found"]["WAREHOUSE_TOKEN"]["reversed"] == WAREHOUSE[::-1]  # the operator's code: trusted
    assert got["sent"] == {shared.url + "/json": 200}
    assert shared.seen[-1].headers["Authorization"] == f"Bearer {HOST_HELD}"  # host mode: sent for it


def test_a_tenants_own_grant_reaches_its_created_skill_only(
    granted_server: tuple[LiveServer, dict[str, str]]
) -> None:
    server, keys = granted_server
    for who in ("alice", "bob"):
        _create(server, keys[who], "alice.report", secrets=["ALICE_TOKEN"], network=[])
    assert _run(server, keys["alice"], "alice.report", names=["ALICE_TOKEN"])["found"]["ALICE_TOKEN"]["chars"] == list(
        ALICE_ONLY
    )
    assert _run(server, keys["bob"], "alice.report", names=["ALICE_TOKEN"])["found"] == {}


# -- shared caps are per tenant ------------------------------------------------------


@pytest.fixture()
def two_tenants(tmp_path: Path) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    data = tmp_path / "data"
    store = TenantStore(data)
    keys = {
        "alice": store.add("alice", {"concurrent_calls": 1, "queued_calls": 0, "mcp_sessions": 2}),
        "bob": store.add("bob"),
    }
    server = LiveServer(data, env={**wasmrun_env(), "WASMRUN_METRICS_KEY": METRICS_KEY})
    try:
        yield server, keys
    finally:
        server.stop()


def test_one_tenants_calls_past_its_cap_are_busy_for_it_alone(two_tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = two_tenants
    blob = _rpc(server, keys["alice"], "create_blob", {"content": "x" * 100_000, "kind": "text/plain"})["result"]
    # A batch starts its calls together: alice may have one in flight and none waiting.
    batch = [{"jsonrpc": "2.0", "id": i, "method": "read_blob", "params": {"blob_id": blob["blob_id"]}}
             for i in range(4)]
    answer = httpx2.post(server.endpoint, json=batch, headers={"authorization": f"Bearer {keys['alice']}"}, timeout=60)
    replies = answer.json()
    served = [r for r in replies if "result" in r]
    busy = [r for r in replies if "error" in r]
    assert len(served) == 1 and len(busy) == 3, replies
    error = busy[0]["error"]
    assert error["code"] == -32002 and "busy for this tenant" in error["message"]
    assert error["data"]["limit"] == "concurrent_calls" and error["data"]["value"] == 1
    # bob's batch of the same size is served whole: his limits are his own
    theirs = _rpc(server, keys["bob"], "create_blob", {"content": "y", "kind": "text/plain"})["result"]["blob_id"]
    batch = [{**call, "params": {"blob_id": theirs}} for call in batch]
    answer = httpx2.post(server.endpoint, json=batch, headers={"authorization": f"Bearer {keys['bob']}"}, timeout=60)
    assert all("result" in r for r in answer.json()), answer.json()
    # the refusals are counted as calls, for the operator to see
    metrics = httpx2.get(server.base_url + "/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=30)
    assert 'wasmrun_calls_total{method="read_blob",status="-32002",tenant="alice"} 3.0' in metrics.text


def _open_mcp(server: LiveServer, key: str) -> httpx2.Response:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {key}"}
    return httpx2.post(server.base_url + "/mcp", json=hello, headers=headers, timeout=60)


def test_mcp_sessions_are_capped_per_tenant(two_tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = two_tenants
    opened = [_open_mcp(server, keys["alice"]) for _ in range(2)]
    assert all(r.status_code == 200 and r.headers.get("mcp-session-id") for r in opened)
    refused = _open_mcp(server, keys["alice"])
    assert refused.status_code == 429, refused.text
    assert "busy for this tenant" in refused.json()["error"]["message"]
    assert refused.json()["error"]["data"] == {"limit": "mcp_sessions", "value": 2}
    assert refused.headers["retry-after"] == "1"  # a hint to poll: when a session frees up is not known
    # bob opens his as if alice had none
    assert _open_mcp(server, keys["bob"]).status_code == 200
    # bob cannot end (nor use) alice's session with her session id
    stolen = httpx2.delete(server.base_url + "/mcp", headers={
        "authorization": f"Bearer {keys['bob']}", "mcp-session-id": opened[1].headers["mcp-session-id"],
        "accept": "application/json, text/event-stream"}, timeout=60)
    assert stolen.status_code == 404
    assert _open_mcp(server, keys["alice"]).status_code == 429  # hers are still both open
    # alice ending one session frees its place
    ended = httpx2.delete(server.base_url + "/mcp", headers={
        "authorization": f"Bearer {keys['alice']}", "mcp-session-id": opened[0].headers["mcp-session-id"],
        "accept": "application/json, text/event-stream"}, timeout=60)
    assert ended.status_code < 400, ended.text
    assert _open_mcp(server, keys["alice"]).status_code == 200


def test_metrics_are_the_operators_even_from_loopback(two_tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = two_tenants
    url = server.base_url + "/metrics"
    assert httpx2.get(url, timeout=30).status_code == 403
    for key in (keys["alice"], METRICS_KEY + "x", METRICS_KEY[:-1]):
        refused = httpx2.get(url, headers={"authorization": f"Bearer {key}"}, timeout=30)
        assert refused.status_code == 403 and "alice" not in refused.text
    shown = httpx2.get(url, headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=30)
    assert shown.status_code == 200 and "wasmrun_workers_free" in shown.text
    assert "wasmrun_calls_running" in shown.text


def test_a_second_tenant_on_one_worker_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = TenantStore(data)
    store.add("alice")
    store.add("bob")
    cmd = [sys.executable, "-m", "wasmrun", "serve", "--port", str(free_port()), "--data-dir", str(data),
           "--workers", "1"]
    done = subprocess.run(cmd, env=wasmrun_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--workers 1 with 2 tenants" in done.stderr and "--allow-one-worker" in done.stderr
    # with the flag it serves (and says so)
    server = LiveServer(data, "--workers", "1", "--allow-one-worker")
    try:
        assert "one sandbox" in server.stop()
    finally:
        if server.process.poll() is None:
            server.process.kill()


# -- the wire, read one way ----------------------------------------------------------


@pytest.mark.parametrize(
    "body, member",
    [
        ('{"jsonrpc":"2.0","id":1,"method":"list_skills","method":"create_blob","params":{}}', "method"),
        ('{"jsonrpc":"2.0","id":1,"method":"list_skills","\\u006dethod":"create_blob"}', "method"),
        ('{"jsonrpc":"2.0","id":1,"method":"list_skills","params":{},"params":{"detail":"summary"}}', "params"),
        ('{"jsonrpc":"2.0","id":1,"method":"read_blob","params":{"blob_id":"a","blob_id":"b"}}', "params.blob_id"),
        ('{"jsonrpc":"2.0","id":1,"jsonrpc":"2.0","method":"list_skills"}', "jsonrpc"),
    ],
)
def test_a_member_given_twice_is_refused(two_tenants: tuple[LiveServer, dict[str, str]], body: str, member: str) -> None:
    server, keys = two_tenants
    answer = httpx2.post(server.endpoint, content=body.encode(), timeout=30,
                         headers={"authorization": f"Bearer {keys['bob']}", "content-type": "application/json"})
    error = answer.json()["error"]
    assert error["code"] == -32600 and error["data"] == {"member": member}, error


def test_the_same_name_deeper_in_args_is_data(two_tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = two_tenants
    code = "def main(args):\\n    return args"
    body = ('{"jsonrpc":"2.0","id":1,"method":"run_code","params":{"language":"python","code":"' + code + '",'
            '"args":{"method":"a","x":{"method":"b","method":"c"}}}}')
    answer = httpx2.post(server.endpoint, content=body.encode(), timeout=60,
                         headers={"authorization": f"Bearer {keys['bob']}", "content-type": "application/json"})
    assert answer.json()["result"]["output"] == {"method": "a", "x": {"method": "c"}}


def test_args_nest_exactly_as_deep_as_documented(two_tenants: tuple[LiveServer, dict[str, str]]) -> None:
    from wasmrun.protocol.types import MAX_ARGS_DEPTH

    server, keys = two_tenants

    def run(depth: int) -> dict[str, Any]:  # args itself is one level: {"x": [[...]]}
        inner = "[" * (depth - 1) + "]" * (depth - 1)
        body = ('{"jsonrpc":"2.0","id":1,"method":"run_code","params":{"language":"python",'
                '"code":"def main(args):\\n    return 1","args":{"x":' + inner + '}}}')
        answer = httpx2.post(server.endpoint, content=body.encode(), timeout=60,
                             headers={"authorization": f"Bearer {keys['bob']}", "content-type": "application/json"})
        return dict(answer.json())

    assert run(MAX_ARGS_DEPTH)["result"]["output"] == 1
    deeper = run(MAX_ARGS_DEPTH + 1)["error"]
    assert deeper["code"] == -32602 and deeper["data"]["field"] == "args"
    assert f"deeper than {MAX_ARGS_DEPTH} levels" in deeper["message"]
    docs = (REPO / "docs" / "protocol-server.md").read_text()
    assert f"{MAX_ARGS_DEPTH} levels" in docs


def test_a_path_grant_refuses_what_an_upstream_could_read_otherwise(tmp_path: Path) -> None:
    with serve_http() as web:
        data = tmp_path / "data"
        store = TenantStore(data)
        key = store.add("alice")
        store.add("bob")
        policy = tmp_path / "policy.toml"
        policy.write_text(f'[network]\nallow_private_addresses = true\nrun_code = ["{web.url}/v1"]\n')
        server = LiveServer(data, "--policy-file", str(policy))
        try:
            code = ("from runtime import http\n"
                    "def main(args):\n"
                    "    out = {}\n"
                    "    for p in args['paths']:\n"
                    "        try:\n"
                    "            out[p] = http.get(args['base'] + p).status\n"
                    "        except Exception as exc:\n"
                    "            out[p] = str(exc)[:300]\n"
                    "    return out\n")
            paths = ["/v1/json", "/v1/..;/admin", "/v1/..%2fadmin", "/v1/..%5cadmin", "/v1/%2e%2e/admin",
                     "/v1/%252e%252e/admin", "/v1/x;a=b"]
            result = _rpc(server, key, "run_code", {"language": "python", "code": code,
                                                    "args": {"base": web.url, "paths": paths}})["result"]
            out = result["output"]
            assert out["/v1/json"] == 404  # served (the web has no /v1/json route): the grant held
            for path in paths[1:]:
                assert "path-prefix grant cannot judge" in str(out[path]), (path, out[path])
            assert web.paths() == ["/v1/json"]
        finally:
            server.stop()


def test_mcp_arguments_nest_as_deep_as_rpc_args() -> None:
    from wasmrun.mcp.server import MAX_ARGS_DEPTH as MCP_DEPTH
    from wasmrun.protocol.types import MAX_ARGS_DEPTH

    assert MCP_DEPTH == MAX_ARGS_DEPTH


def test_one_tenants_bytes_are_paced_for_it_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = TenantStore(data)
    keys = {"alice": store.add("alice", {"call_bytes_per_s": 1000}), "bob": store.add("bob")}
    server = LiveServer(data)
    try:
        made = _rpc(server, keys["alice"], "create_blob", {"content": "x" * 100_000, "kind": "text/plain"})
        # 100 kB at 1 kB/s: alice's next call would have to wait far past the queue timeout
        busy = _rpc(server, keys["alice"], "list_skills", {})["error"]
        assert busy["code"] == -32002 and "busy for this tenant" in busy["message"]
        assert busy["data"]["limit"] == "call_bytes_per_s" and busy["data"]["value"] == 1000
        theirs = _rpc(server, keys["bob"], "create_blob", {"content": "y" * 100_000, "kind": "text/plain"})
        assert "result" in theirs and "result" in made
        assert "result" in _rpc(server, keys["bob"], "list_skills", {})
    finally:
        server.stop()


def test_a_whole_batch_of_small_calls_waits_rather_than_failing(two_tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = two_tenants
    batch = [{"jsonrpc": "2.0", "id": i, "method": "list_skills", "params": {}} for i in range(100)]
    answer = httpx2.post(server.endpoint, json=batch, headers={"authorization": f"Bearer {keys['bob']}"}, timeout=60)
    assert all("result" in r for r in answer.json())  # bob's defaults: 8 in flight, the rest wait their turn


def test_a_tenants_requests_in_flight_are_capped_for_it_alone(tmp_path: Path) -> None:
    """alice's one allowed request is a body that never finishes arriving: her next request
    is 429 at once, bob's are served, and once hers ends she is served again."""
    import socket
    import time

    data = tmp_path / "data"
    store = TenantStore(data)
    keys = {"alice": store.add("alice", {"concurrent_requests": 1}), "bob": store.add("bob")}
    server = LiveServer(data)
    slow = socket.create_connection(("127.0.0.1", server.port))
    try:
        slow.sendall(
            b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {keys['alice']}\r\nContent-Length: 1000\r\n\r\n".encode() + b'{"jsonrpc":'
        )

        def alice_answer() -> httpx2.Response:
            return httpx2.post(server.endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "list_skills"},
                               headers={"authorization": f"Bearer {keys['alice']}"}, timeout=30)

        for _ in range(100):  # until the server has read the slow request's headers
            refused = alice_answer()
            if refused.status_code == 429:
                break
            time.sleep(0.05)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == -32002 and error["data"]["limit"] == "concurrent_requests"
        assert "busy for this tenant" in error["message"]
        assert int(refused.headers["retry-after"]) == error["data"]["retry_after_s"]
        # /mcp counts against the same cap, refused before the MCP SDK sees it, with the same wait
        over_mcp = _open_mcp(server, keys["alice"])
        assert over_mcp.status_code == 429, over_mcp.text
        mcp_error = over_mcp.json()["error"]
        assert mcp_error["code"] == -32002 and mcp_error["data"]["limit"] == "concurrent_requests"
        assert int(over_mcp.headers["retry-after"]) == mcp_error["data"]["retry_after_s"]
        assert "result" in _rpc(server, keys["bob"], "list_skills", {})
        slow.close()
        for _ in range(100):
            if alice_answer().status_code == 200:
                break
            time.sleep(0.05)
        assert alice_answer().status_code == 200
    finally:
        slow.close()
        server.stop()
