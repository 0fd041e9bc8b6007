"""examples/: the OpenAI and Anthropic agent loops, replaying a scripted model (the
tool calls a model would make, in each format's exact shape) against a real
`wasmrun serve`, offline. Every scripted call is checked against the schema the
loop handed to the model."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from tests.liveserver import REPO, LiveServer
from wasmrun.client import Client

CSV = "city,temp\nOslo,3\nLima,19\nPune,31\n"


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("examples-data"))
    yield srv
    srv.stop()


def test_openai_loop(server: LiveServer) -> None:
    example = _example("openai_agent")
    seen_tools: list[list[dict[str, Any]]] = []

    def call(id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}

    def last_tool_result(messages: list[dict[str, Any]]) -> Any:
        return json.loads(next(m for m in reversed(messages) if m["role"] == "tool")["content"])

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        seen_tools.append(tools)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn == 0:
            calls = [call("c1", "load_skills_protocol_guide", {}),
                     call("c2", "create_blob", {"content": CSV, "kind": "text/csv"})]
        elif turn == 1:
            blob = last_tool_result(messages)["blob_id"]
            code = ("import csv, io\nfrom runtime import blobs\n"
                    "def main(args):\n    rows = list(csv.DictReader(io.StringIO(blobs.read_text(args['b']))))\n"
                    "    return max(rows, key=lambda r: int(r['temp']))['city']\n")
            calls = [call("c3", "run_code", {"language": "python", "code": code, "args": {"b": blob},
                                             "input_blobs": [blob]}),
                     call("c4", "describe_skill", {"name": "no.such.skill", "version": None, "detail": None})]
        else:
            hottest = json.loads(messages[-2]["content"])["output"]
            error = json.loads(messages[-1]["content"])["error"]["message"]
            return {"role": "assistant", "content": f"Hottest: {hottest}. ({error})"}
        return {"role": "assistant", "content": None, "tool_calls": calls}

    with Client(server.base_url) as client:
        answer = example.run_agent(model, client, "Which city is hottest?")
        assert answer == "Hottest: Pune. (no skill named 'no.such.skill')"
        tools = client.tools("openai", strict=True)
    assert all(t == tools for t in seen_tools)
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    jsonschema.validate({"name": "no.such.skill", "version": None, "detail": None}, by_name["describe_skill"])
    jsonschema.validate({"content": CSV, "kind": "text/csv"}, by_name["create_blob"])


def test_anthropic_loop(server: LiveServer) -> None:
    example = _example("anthropic_agent")
    results: list[list[dict[str, Any]]] = []

    def use(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": id, "name": name, "input": input}

    def model(system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        schemas = {t["name"]: t["input_schema"] for t in tools}
        if messages[-1]["role"] == "user" and isinstance(messages[-1]["content"], list):
            results.append(messages[-1]["content"])
        turn = len(results)
        if turn == 0:
            content = [{"type": "text", "text": "Let me look."},
                       use("t1", "list_skills", {"namespace": "data", "detail": "summary"}),
                       use("t2", "create_blob", {"content": CSV, "kind": "text/csv"})]
        elif turn == 1:
            blob = json.loads(results[0][1]["content"])["blob_id"]
            content = [use("t3", "execute_skill", {"name": "data.csv.profile", "args": {"blob_id": blob},
                                                   "input_blobs": [blob]}),
                       use("t4", "read_blob", {"blob_id": "blob:" + "0" * 32})]
        else:
            profile = json.loads(results[1][0]["content"])
            return {"role": "assistant", "stop_reason": "end_turn",
                    "content": [{"type": "text", "text": f"{profile['output']['rows']} rows."}]}
        for block in content:
            if block["type"] == "tool_use":
                jsonschema.validate(block["input"], schemas[block["name"]])
        return {"role": "assistant", "stop_reason": "tool_use", "content": content}

    with Client(server.base_url) as client:
        assert example.run_agent(model, client, "How many rows?") == "3 rows."
    listed = json.loads(results[0][0]["content"])
    assert [s["name"] for s in listed["skills"]] == ["data.csv.profile", "data.json.query"]
    assert results[0][0]["tool_use_id"] == "t1" and not results[0][0]["is_error"]
    missing = results[1][1]
    assert missing["tool_use_id"] == "t4" and missing["is_error"] and "blob" in missing["content"]



def test_typed_client_example(server: LiveServer) -> None:
    result = _example("typed_client").demo(server.base_url)
    assert result["output"] == {"rows": 3, "hottest": "Pune"}
    assert result["typo_warnings"] and "defines mian()" in result["typo_warnings"][0]
    assert result["runaway_error"] == "CPULimitExceeded" and "line 1, in <module>" in result["runaway_message"]
    assert result["deleted"] is True


def test_async_client_example(server: LiveServer) -> None:
    import asyncio

    assert asyncio.run(_example("async_client").squares(server.base_url, 5)) == [0, 1, 4, 9, 16]
