"""The MCP server, driven by the MCP SDK's own client: over streamable HTTP at
/mcp of a real `wasmrun serve`, and over stdio of `wasmrun mcp`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client as MCPClient
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.client import Client, InvalidParams
from wasmrun.tools import render_all

EIGHT = [t["name"] for t in render_all("mcp")]
BIG = "def main(args):\n    return ['row %d' % i for i in range(2000)]\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("mcp-data"))
    yield srv
    srv.stop()


def _structured(result: mcp_types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def _text(result: mcp_types.CallToolResult) -> str:
    assert result.content and isinstance(result.content[0], mcp_types.TextContent)
    return result.content[0].text


async def _exercise(target: Any, mode: str = "auto") -> dict[str, Any]:
    """List the tools, call each of the eight, read a blob a run wrote, a failing run, an error."""
    seen: dict[str, Any] = {}
    async with MCPClient(target, mode=mode) as mcp:
        listed = await mcp.list_tools()
        seen["tools"] = [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]

        guide = await mcp.call_tool("load_skills_protocol_guide", {})
        assert not guide.is_error and _text(guide).startswith("# Skills Protocol Overview")

        skills = _structured(await mcp.call_tool("list_skills", {"namespace": "data"}))
        assert [s["name"] for s in skills["skills"]] == ["data.csv.profile", "data.json.query"]

        described = await mcp.call_tool("describe_skill", {"name": "data.csv.profile"})
        seen["describe"] = _structured(described)
        assert json.loads(_text(described)) == seen["describe"]

        doc = await mcp.call_tool("read_skill_file", {"name": "data.csv.profile", "path": "SKILL.md"})
        assert "# data.csv.profile" in _text(doc) and _structured(doc)["encoding"] == "utf-8"

        blob = _structured(await mcp.call_tool("create_blob", {"content": "a,b\n1,2\n", "kind": "text/csv"}))
        profiled = await mcp.call_tool(
            "execute_skill", {"name": "data.csv.profile", "args": {"blob_id": blob["blob_id"]},
                              "input_blobs": [blob["blob_id"]]},
        )
        assert _structured(profiled)["status"] == "completed" and _structured(profiled)["output"]["rows"] == 1
        assert _text(profiled).startswith("completed: ")

        # a large output stays a blob; the text says where it went, read_blob reads it
        big = await mcp.call_tool("run_code", {"language": "python", "code": BIG})
        run = _structured(big)
        assert run["status"] == "completed" and run["output_blobs"]
        assert run["output"]["output_blob"] == run["output_blobs"][0]
        assert "read_blob" in _text(big) and run["output_blobs"][0] in _text(big)
        read = await mcp.call_tool("read_blob", {"blob_id": run["output_blobs"][0], "mode": "full"})
        assert json.loads(_text(read)) == [f"row {i}" for i in range(2000)]
        # ... and it is a resource, linked from the result
        links = [block for block in big.content if isinstance(block, mcp_types.ResourceLink)]
        assert [link.uri for link in links] == run["output_blobs"]
        templates = (await mcp.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["blob:{id}"]
        resource = (await mcp.read_resource(run["output_blobs"][0])).contents[0]
        assert isinstance(resource, mcp_types.TextResourceContents) and resource.mime_type == "application/json"
        assert json.loads(resource.text) == [f"row {i}" for i in range(2000)]
        binary = _structured(await mcp.call_tool(
            "create_blob", {"content": "AAH/", "kind": "application/octet-stream", "encoding": "base64"}))
        raw = (await mcp.read_resource(binary["blob_id"])).contents[0]
        assert isinstance(raw, mcp_types.BlobResourceContents) and raw.blob == "AAH/"
        for uri in ("blob:" + "0" * 32, "file:///etc/passwd"):
            with pytest.raises(MCPError) as lost:
                await mcp.read_resource(uri)
            assert lost.value.code == -32602

        code = "def main(args):\n    print('working')\n    raise ValueError('bad row 7')\n"
        failing = await mcp.call_tool("run_code", {"language": "python", "code": code})
        assert not failing.is_error  # a failed run is a result, as over JSON-RPC
        assert _structured(failing)["status"] == "failed" and _structured(failing)["error"]["type"] == "ValueError"
        assert "ValueError: bad row 7" in _text(failing) and "working" in _text(failing)

        missing = await mcp.call_tool("describe_skill", {"name": "no.such.skill"})
        assert missing.is_error
        seen["missing"] = _text(missing)
        assert _structured(missing)["error"]["code"] == -32602

        bad = await mcp.call_tool("read_blob", {"blob_id": blob["blob_id"], "max_bytes": "lots"})
        assert bad.is_error and "max_bytes" in _text(bad)

        unknown = await mcp.call_tool("create_skill", {"manifest": {}, "skill_md": ""})
        seen["create_skill"] = (unknown.is_error, _text(unknown))
    return seen


def _check(seen: dict[str, Any], rpc: Client) -> None:
    assert seen["tools"] == render_all("mcp")
    assert seen["describe"] == json.loads(json.dumps(rpc.call("describe_skill", {"name": "data.csv.profile"})))
    with pytest.raises(InvalidParams) as caught:
        rpc.describe_skill("no.such.skill")
    assert seen["missing"] == caught.value.message  # the same words as JSON-RPC
    assert seen["create_skill"][0] and "unknown tool" in seen["create_skill"][1]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_streamable_http_beside_rpc(server: LiveServer, mode: str) -> None:
    seen = asyncio.run(_exercise(server.base_url + "/mcp", mode))
    with Client(server.base_url) as rpc:
        _check(seen, rpc)


def test_stdio(server: LiveServer, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "wasmrun", "mcp", "--data-dir", str(tmp_path), "--workers", "1"],
        env=wasmrun_env(),
    )
    seen = asyncio.run(_exercise(params))
    with Client(server.base_url) as rpc:
        _check(seen, rpc)


def test_stdio_with_create_skill(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmrun", "mcp", "--data-dir", str(tmp_path), "--workers", "1", "--with-create-skill"],
        env=wasmrun_env(),
    )

    async def go() -> tuple[list[str], Any, Any]:
        async with MCPClient(params) as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            created = await mcp.call_tool("create_skill", {
                "manifest": {"name": "user.mcp.hello", "version": "0.1.0", "description": "Hi.", "kind": "action",
                             "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"}},
                "skill_md": "# hello\n",
                "files": [{"path": "code/main.py", "content": "def main(args):\n    return 'hi ' + args['who']\n"}],
            })
            escaping = await mcp.call_tool("create_skill", {
                "manifest": {"name": "user.mcp.evil", "version": "0.1.0", "description": "x", "kind": "instruction"},
                "skill_md": "# evil\n", "files": [{"path": "../../escape.txt", "content": "x"}],
            })
            ran = await mcp.call_tool("execute_skill", {"name": "user.mcp.hello", "args": {"who": "mcp"}})
            return names, (created, escaping), ran

    names, (created, escaping), ran = asyncio.run(go())
    assert names == [*EIGHT, "create_skill"]
    assert _structured(created) == {"name": "user.mcp.hello", "version": "0.1.0"}
    assert escaping.is_error and "path" in _text(escaping)
    assert not (tmp_path.parent / "escape.txt").exists()
    assert _structured(ran)["output"] == "hi mcp"


def _raw_call(server: LiveServer, body: str) -> dict[str, Any]:
    """Send `body` as written (JSON no client library would produce) in a new MCP session."""
    import httpx2

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    started = httpx2.post(server.base_url + "/mcp", json=init, headers=headers, timeout=60)
    headers["mcp-session-id"] = started.headers["mcp-session-id"]
    headers["mcp-protocol-version"] = "2025-06-18"
    answer: dict[str, Any] = httpx2.post(server.base_url + "/mcp", content=body, headers=headers, timeout=60).json()
    return answer


def test_non_finite_numbers_are_refused_as_over_rpc(server: LiveServer) -> None:
    """The SDK's JSON parser takes NaN; /rpc does not, and neither does /mcp."""
    body = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_code","arguments":'
            '{"language":"python","code":"def main(a):\\n    return a","args":{"x":NaN}}}}')
    answer = _raw_call(server, body)
    assert answer["result"]["isError"] and "NaN" in answer["result"]["content"][0]["text"]


def test_mcp_refuses_a_foreign_host_header(server: LiveServer) -> None:
    """A loopback server refuses DNS-rebinding requests at /mcp."""
    import httpx2

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx2.post(
        server.base_url + "/mcp", json=body,
        headers={"Host": "evil.example", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code in (403, 421)


def test_stdio_workers_cannot_write_into_the_mcp_stream(tmp_path: Path) -> None:
    """The sandbox worker processes of `wasmrun mcp` do not hold the MCP stdout pipe."""
    import os
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "wasmrun", "mcp", "--data-dir", str(tmp_path), "--workers", "2"],
        env=wasmrun_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        process.stdin.write((json.dumps(init) + "\n").encode())
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1
        pipe = f"pipe:[{os.fstat(process.stdout.fileno()).st_ino}]"
        children = [
            int(pid) for task in Path(f"/proc/{process.pid}/task").iterdir()
            for pid in (task / "children").read_text().split()
        ]
        assert len(children) == 2
        for child in children:
            assert os.readlink(f"/proc/{child}/fd/1") != pipe
    finally:
        process.kill()
        process.wait(timeout=30)


def test_streamable_http_with_tenants(tmp_path: Path) -> None:
    """/mcp sits behind the same API keys as /rpc: no key is a 401 before MCP starts, and
    each tool call runs as the key's tenant (another tenant's blob is not found)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from wasmrun.tenants.store import TenantStore

    data = tmp_path / "data"
    store = TenantStore(data)
    alice, bob = store.add("alice"), store.add("bob")
    srv = LiveServer(data)
    try:
        url = srv.base_url + "/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "t", "version": "0"}}}
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        for key in (None, "wrong", f"{alice}x"):
            sent = headers if key is None else {**headers, "authorization": f"Bearer {key}"}
            refused = httpx2.post(url, json=hello, headers=sent, timeout=60)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == -32001

        async def as_tenant(key: str, call: Any) -> Any:
            async with httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=60) as http:
                async with MCPClient(streamable_http_client(url, http_client=http)) as mcp:
                    return await call(mcp)

        async def make_blob(mcp: Any) -> str:
            made = await mcp.call_tool("create_blob", {"content": "alice's", "kind": "text/plain"})
            return str(_structured(made)["blob_id"])

        blob = asyncio.run(as_tenant(alice, make_blob))

        async def read(mcp: Any) -> mcp_types.CallToolResult:
            result: mcp_types.CallToolResult = await mcp.call_tool("read_blob", {"blob_id": blob})
            return result

        assert _text(asyncio.run(as_tenant(alice, read))) == "alice's"
        theirs = asyncio.run(as_tenant(bob, read))
        assert theirs.is_error and "alice's" not in _text(theirs)
    finally:
        srv.stop()


def test_arguments_nested_deeper_than_rpc_allows_are_refused(server: LiveServer) -> None:
    """/mcp's JSON parser allows about 250 levels; /rpc allows 64. Both refuse past 64."""
    deep = "[" * 150 + "]" * 150
    body = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_code","arguments":'
            '{"language":"python","code":"def main(a):\\n    return 1","args":{"x":' + deep + '}}}}')
    answer = _raw_call(server, body)
    assert answer["result"]["isError"] and "nest deeper" in answer["result"]["content"][0]["text"]


def test_the_sdk_loads_on_the_first_mcp_request_only(tmp_path: Path) -> None:
    """A server whose clients never use /mcp does not import the MCP SDK (~34 MB); nor
    does a /mcp request without a valid key (401 first). The first authenticated /mcp
    request loads it and is served, and shutdown stops its sessions."""
    from wasmrun.tenants.store import TenantStore

    data = tmp_path / "data"
    key = TenantStore(data).add("alice")
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from starlette.testclient import TestClient\n"
        "from wasmrun.server import assemble, create_app\n"
        "from wasmrun.settings import Settings\n"
        f"app = create_app(assemble(Settings(data_dir=Path({str(data)!r}), workers=1)))\n"
        f"auth = {{'authorization': 'Bearer {key}'}}\n"
        "accept = {'accept': 'application/json, text/event-stream'}\n"
        "init = {'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {'protocolVersion': '2025-06-18',\n"
        "        'capabilities': {}, 'clientInfo': {'name': 't', 'version': '1'}}}\n"
        "with TestClient(app, base_url='http://localhost') as client:\n"
        "    rpc = client.post('/rpc', json={'jsonrpc': '2.0', 'id': 1, 'method': 'list_skills'}, headers=auth)\n"
        "    refused = client.post('/mcp', json=init, headers=accept)\n"
        "    before = 'mcp' in sys.modules\n"
        "    answer = client.post('/mcp', json=init, headers={**accept, **auth})\n"
        "    print(rpc.status_code, refused.status_code, before, 'mcp' in sys.modules, answer.status_code,\n"
        "          answer.json()['result']['serverInfo']['name'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=wasmrun_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "401", "False", "True", "200", "wasmrun"]
