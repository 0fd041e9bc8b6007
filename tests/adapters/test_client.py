"""wasmrun.client against a real `wasmrun serve`: typed results, typed errors,
binary blobs, timeouts, API key, connection reuse, the async client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx2
import msgspec
import pytest

from tests.liveserver import LiveServer
from wasmrun.client import AsyncClient, Client, HTTPError, InvalidParams, MethodNotFound, RPCError, rpc_error
from wasmrun.protocol.errors import ServerBusy
from wasmrun.protocol.types import (
    CreateBlobResult,
    DescribeSkillResult,
    ExecutionResult,
    ListSkillsResult,
    LoadGuideResult,
    ReadBlobResult,
    ReadSkillFileResult,
    RunUsage,
)
from wasmrun.tools import render_all


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("client-data"))
    yield srv
    srv.stop()


@pytest.fixture()
def client(server: LiveServer) -> Iterator[Client]:
    with Client(server.base_url) as c:
        yield c


def test_every_method_answers_its_struct(client: Client) -> None:
    guide = client.load_skills_protocol_guide()
    assert isinstance(guide, LoadGuideResult) and guide.content.startswith("# Skills Protocol Overview")

    listed = client.list_skills(namespace="data", detail="summary")
    assert isinstance(listed, ListSkillsResult)
    assert [s.name for s in listed.skills] == ["data.csv.profile", "data.json.query"]
    assert listed.skills[0].title == "CSV Profile"

    page = client.list_skills(limit=1)
    assert len(page.skills) == 1 and page.next_cursor
    assert client.list_skills(limit=1, cursor=page.next_cursor).skills[0].name != page.skills[0].name

    described = client.describe_skill("data.csv.profile", detail="full")
    assert isinstance(described, DescribeSkillResult)
    assert described.skill.manifest["name"] == "data.csv.profile" and "SKILL.md" in (described.skill.files or [])

    doc = client.read_skill_file("data.csv.profile", "SKILL.md")
    assert isinstance(doc, ReadSkillFileResult) and doc.encoding == "utf-8" and "# data.csv.profile" in doc.content

    blob = client.create_blob("a,b\n1,2\n3,4\n", kind="text/csv")
    assert isinstance(blob, CreateBlobResult) and blob.size_bytes == 12

    head = client.read_blob(blob.blob_id, mode="sample_tail", max_bytes=4)
    assert isinstance(head, ReadBlobResult) and head.content == "3,4\n" and head.truncated

    run = client.execute_skill("data.csv.profile", args={"blob_id": blob.blob_id}, input_blobs=[blob.blob_id])
    assert isinstance(run, ExecutionResult) and run.status == "completed" and run.output["rows"] == 2

    code = "from skills.data.csv.profile import main as profile\n" \
           "def go(args):\n    return profile({'blob_id': args['b']})['rows'] * args['k']\n"
    run = client.run_code(code, entrypoint="go", args={"b": blob.blob_id, "k": 10},
                          mount_skills=["data.csv.profile"], input_blobs=[blob.blob_id], timeout_ms=30000)
    assert run.status == "completed" and run.output == 20 and run.usage is not msgspec.UNSET


def test_create_skill_then_use_it(client: Client) -> None:
    created = client.create_skill(
        {"name": "user.client.echo", "version": "1.0.0", "description": "Echo.", "kind": "action",
         "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"}},
        "# echo\n",
        files=[{"path": "code/main.py", "content": "def main(args):\n    return args\n"}],
    )
    assert (created.name, created.version) == ("user.client.echo", "1.0.0")
    assert client.execute_skill("user.client.echo", args={"x": [1, None]}).output == {"x": [1, None]}


def test_binary_blobs_travel_as_base64(client: Client) -> None:
    data = bytes(range(256))
    blob = client.create_blob(data, kind="application/octet-stream")
    back = client.read_blob(blob.blob_id, mode="full")
    assert back.encoding == "base64" and back.size_bytes == 256
    import base64

    assert base64.b64decode(back.content) == data


def test_a_failed_run_is_a_result_not_an_exception(client: Client) -> None:
    run = client.run_code("def main(args):\n    raise KeyError('missing')\n")
    assert run.status == "failed" and run.error is not msgspec.UNSET
    assert run.error.type == "KeyError" and run.output is msgspec.UNSET


def test_errors_are_typed_by_code(client: Client, server: LiveServer) -> None:
    with pytest.raises(InvalidParams) as caught:
        client.describe_skill("no.such.skill")
    assert caught.value.code == -32602 and caught.value.data == {"field": "name"}
    assert "no.such.skill" in caught.value.message
    with pytest.raises(InvalidParams, match="max_bytes"):
        client.read_blob("blob:" + "0" * 32, max_bytes=-1)
    with pytest.raises(MethodNotFound) as missing:
        client.call("delete_everything")
    assert missing.value.code == -32601 and "list_skills" in missing.value.data["methods"]
    with pytest.raises(HTTPError) as http:
        with Client(server.base_url + "/nowhere") as lost:
            lost.list_skills()
    assert http.value.status_code == 404


def test_rpc_error_mapping() -> None:
    assert isinstance(rpc_error(-32000, "busy"), ServerBusy)
    other = rpc_error(-31999, "custom", [1, 2])
    assert type(other) is RPCError and other.code == -31999 and other.data == {"data": [1, 2]}
    assert rpc_error(-32602, "bad", {"field": "x", "limit": 3}).data == {"field": "x", "limit": 3}


def test_call_is_the_untyped_way_in(client: Client) -> None:
    answer = client.call("run_code", {"language": "python", "code": "def main(args):\n    return {'n': 1}\n"})
    assert answer["status"] == "completed" and answer["output"] == {"n": 1}


def test_tools_from_the_server(client: Client) -> None:
    assert client.tools("anthropic") == render_all("anthropic")
    assert client.tools("openai", strict=True, with_create_skill=True) == render_all(
        "openai", strict=True, with_create_skill=True
    )
    with pytest.raises(HTTPError, match="unknown format"):
        client.tools("nope")


def test_timeout_is_the_clients(server: LiveServer) -> None:
    slow = "import time\ndef main(args):\n    end = time.monotonic() + 5\n    while time.monotonic() < end:\n        pass\n"
    with Client(server.base_url, timeout=0.5) as impatient, pytest.raises(httpx2.TimeoutException):
        impatient.run_code(slow, timeout_ms=20000)


def test_connections_are_reused(server: LiveServer) -> None:
    opened: list[object] = []

    class Counting(httpx2.HTTPTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            response = super().handle_request(request)
            opened.extend(c for c in self._pool.connections if c not in opened)
            return response

    with Client(server.base_url, transport=Counting()) as c:
        for _ in range(10):
            c.load_skills_protocol_guide()
    assert len(opened) == 1


def test_api_key_goes_as_a_bearer_header() -> None:
    seen: list[str | None] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization"))
        body = json.loads(request.content)
        return httpx2.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": {
            "content": "# guide", "name": "skills.protocol.guide", "version": "0.1.0"}})

    with Client("http://wasmrun.invalid/rpc", api_key="k-123", transport=httpx2.MockTransport(answer)) as c:
        assert c.load_skills_protocol_guide().content == "# guide"
    with Client("http://wasmrun.invalid", transport=httpx2.MockTransport(answer)) as c:
        c.load_skills_protocol_guide()
    assert seen == ["Bearer k-123", None]


def test_a_result_with_another_servers_usage_members_decodes() -> None:
    """`usage` is an extension: a server reporting other members (wasmrun before cpu_ms
    reported fuel_used) still gives a result, with the members it lacks at zero."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        return httpx2.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": {
            "status": "completed", "run_id": "run_1", "summary": "ok", "output": 1, "output_blobs": [],
            "logs_preview": "", "usage": {"fuel_used": 563033, "peak_memory_bytes": 21757952, "total_ms": 1.7}}})

    with Client("http://wasmrun.invalid", transport=httpx2.MockTransport(answer)) as c:
        result = c.run_code("def main(args):\n    return 1\n")
    assert result.output == 1
    assert isinstance(result.usage, RunUsage)
    assert result.usage.peak_memory_bytes == 21757952 and result.usage.cpu_ms == 0.0


def test_async_client(server: LiveServer) -> None:
    async def flow() -> list[ExecutionResult]:
        async with AsyncClient(server.endpoint) as c:
            blob = await c.create_blob("one two three", kind="text/plain")
            assert (await c.read_blob(blob.blob_id)).content == "one two three"
            assert (await c.describe_skill("text.stats")).skill.manifest["name"] == "text.stats"
            with pytest.raises(InvalidParams):
                await c.read_skill_file("text.stats", "../../etc/passwd")
            runs = [c.run_code("def main(args):\n    return args['i'] ** 2\n", args={"i": i}) for i in range(5)]
            return list(await asyncio.gather(*runs))

    results = asyncio.run(flow())
    assert [r.output for r in results] == [0, 1, 4, 9, 16]
