"""Code mode (docs/code-mode.md): a run calls the client's own tools, pauses, and goes on with
their answers. A real server with its worker pool, over plain JSON-RPC: a run calling three
tools (two together through asyncio.gather, one failing), fresh and in a session, and the
hostile cases: unknown tool, bad arguments, a result too large, never answered, answered twice,
another tenant answering, garbage call ids, a schema that is none."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest

from tests.liveserver import LiveServer
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("data", "stdlib")

WEATHER = {
    "name": "get_weather",
    "description": "Today's weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 100}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
LOOKUP = {
    "name": "lookup", "description": "Look a key up", "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
}
TOOLS = [WEATHER, LOOKUP]

THREE_CALLS = '''
import asyncio
from runtime import tools
from runtime.tools import ToolError

async def both():
    return await asyncio.gather(tools.get_weather(city="Paris"), tools.get_weather(city="Oslo"))

def main(args):
    paris, oslo = asyncio.run(both())
    try:
        tools.lookup(key="missing")
        failed = None
    except ToolError as exc:
        failed = [type(exc).__name__, exc.type, exc.message]
    global kept
    kept = paris["temp"] + oslo["temp"]
    return {"paris": paris, "oslo": oslo, "failed": failed}
'''


class Caller:
    def __init__(self, server: LiveServer, key: str) -> None:
        self.server, self.key = server, key

    def __call__(self, method: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer: dict[str, Any] = httpx2.post(  # json.dumps: a lone surrogate goes as its \\u escape
            self.server.endpoint, content=json.dumps(body).encode(), timeout=120,
            headers={"authorization": f"Bearer {self.key}", "content-type": "application/json"},
        ).json()
        return answer

    def result(self, method: str, **params: Any) -> Any:
        answer = self(method, **params)
        assert "result" in answer, answer
        return answer["result"]

    def error(self, method: str, **params: Any) -> dict[str, Any]:
        answer = self(method, **params)
        assert "error" in answer, answer
        error: dict[str, Any] = answer["error"]
        return error


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Caller, Caller]]:
    data: Path = tmp_path_factory.mktemp("codemode")
    store = TenantStore(data)
    alice, bob = store.add("alice", {}), store.add("bob", {})
    live = LiveServer(data)
    yield Caller(live, alice), Caller(live, bob)
    live.stop()


def answer_three(call: Caller, first: dict[str, Any]) -> dict[str, Any]:
    """Answer THREE_CALLS's two batches as a client would: the weather, then an error."""
    assert first["status"] == "requires_action", first
    calls = first["tool_calls"]
    assert [(c["name"], c["arguments"]) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"}),
    ]  # gathered: both reach the client together, in one answer
    assert all(c["run_id"] == first["run_id"] and len(c["call_id"]) >= 20 for c in calls)
    temps = {"Paris": 21, "Oslo": 9}
    second = call.result("submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": c["call_id"], "result": {"city": c["arguments"]["city"], "temp": temps[c["arguments"]["city"]]}}
        for c in calls
    ])
    assert second["status"] == "requires_action", second
    (lookup,) = second["tool_calls"]
    assert lookup["name"] == "lookup" and lookup["arguments"] == {"key": "missing"}
    done: dict[str, Any] = call.result("submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": lookup["call_id"], "error": "no such key: missing"},
    ])
    return done


def test_three_tools_fresh(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    first = alice.result("run_code", language="python", code=THREE_CALLS, tools=TOOLS)
    done = answer_three(alice, first)
    assert done["status"] == "completed", done
    assert done["output"] == {
        "paris": {"city": "Paris", "temp": 21}, "oslo": {"city": "Oslo", "temp": 9},
        "failed": ["ToolError", "ToolFailed", "no such key: missing"],
    }


def test_three_tools_in_a_session_keeps_its_state(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    session = alice.result("create_session", language="python")["session_id"]
    first = alice.result("run_code", language="python", code=THREE_CALLS, tools=TOOLS, session_id=session)
    done = answer_three(alice, first)
    assert done["status"] == "completed" and done["output"]["failed"][1] == "ToolFailed", done
    after = alice.result("run_code", language="python", code="kept", session_id=session)
    assert after["output"] == 30


def test_waiting_does_not_count_against_timeout(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    code = "from runtime import tools\nx = tools.lookup(key='k')\nx"
    first = alice.result("run_code", language="python", code=code, tools=TOOLS, limits={"timeout_ms": 1000})
    time.sleep(1.5)  # past the run's own timeout_ms: waiting for the client is not its time
    done = alice.result("submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": first["tool_calls"][0]["call_id"], "result": [1, "two", None]},
    ])
    assert done["status"] == "completed" and done["output"] == [1, "two", None], done


def test_unknown_tool_and_bad_arguments_raise_in_the_run(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    code = '''
from runtime import tools
from runtime.tools import ToolError
seen = []
for call in (lambda: tools.send_email(to="x"), lambda: tools.get_weather(city=5),
             lambda: tools.get_weather(city="x", extra=1), lambda: tools.get_weather(city="x" * 101)):
    try:
        call()
    except ToolError as exc:
        seen.append([exc.type, exc.message[:60]])
seen
'''
    done = alice.result("run_code", language="python", code=code, tools=TOOLS)
    assert done["status"] == "completed", done  # refused in the host: no round trip to the client
    kinds = [kind for kind, _ in done["output"]]
    assert kinds == ["UnknownTool"] + ["InvalidToolArguments"] * 3, done["output"]
    assert "send_email" in done["output"][0][1] and "city" in done["output"][1][1]


def test_result_too_large_is_the_calls_error(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    code = '''
from runtime import tools
from runtime.tools import ToolError
try:
    tools.lookup(key="big")
    out = "no error"
except ToolError as exc:
    out = exc.type
out
'''
    first = alice.result("run_code", language="python", code=code, tools=TOOLS)
    done = alice.result("submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": first["tool_calls"][0]["call_id"], "result": "x" * (1024 * 1024 + 10)},
    ])
    assert done["status"] == "completed" and done["output"] == "ToolResultTooLarge", done


def test_never_answered_fails_with_its_type_and_a_session_rolls_back(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    session = alice.result("create_session", language="python")["session_id"]
    alice.result("run_code", language="python", code="state = 'before'", session_id=session)
    code = "from runtime import tools\nstate = 'after'\ntools.lookup(key='k')"
    first = alice.result("run_code", language="python", code=code, tools=TOOLS, tool_wait_ms=300, session_id=session)
    assert first["status"] == "requires_action"
    time.sleep(1.0)
    late = alice.result("submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": first["tool_calls"][0]["call_id"], "result": 1},
    ])
    assert late["status"] == "failed" and late["error"]["type"] == "ToolWaitTimeout", late
    assert "tool_wait_ms" in late["error"]["message"] and late["session_rolled_back"] is True
    assert alice.result("run_code", language="python", code="state", session_id=session)["output"] == "before"
    # and the run is gone: a submit now is about no run
    assert alice.error("submit_tool_results", run_id=first["run_id"], results=[])["data"]["field"] == "run_id"


def test_answers_are_checked_before_anything_is_sent(servers: tuple[Caller, Caller]) -> None:
    alice, bob = servers
    first = alice.result("run_code", language="python", code=THREE_CALLS, tools=TOOLS)
    run_id = first["run_id"]
    ids = [c["call_id"] for c in first["tool_calls"]]
    ok = {"city": "x", "temp": 1}
    # another tenant: the run is no run of theirs (the same answer as an id that never was)
    other = bob.error("submit_tool_results", run_id=run_id, results=[{"call_id": i, "result": ok} for i in ids])
    assert other["code"] == -32602 and other["data"]["field"] == "run_id"
    assert alice.error("submit_tool_results", run_id="run_" + "A" * 30, results=[])["data"]["field"] == "run_id"
    garbage = alice.error("submit_tool_results", run_id=run_id, results=[{"call_id": "\udcff../" * 10, "result": 1}])
    assert garbage["code"] == -32700 and "surrogate" in garbage["message"], garbage  # refused as the body is read
    unknown = alice.error("submit_tool_results", run_id=run_id, results=[{"call_id": "nope", "result": 1}])
    assert unknown["data"]["field"] == "results[0].call_id"
    missing = alice.error("submit_tool_results", run_id=run_id, results=[{"call_id": ids[0], "result": ok}])
    assert missing["data"]["field"] == "results" and "missing" in missing["message"]
    both = alice.error("submit_tool_results", run_id=run_id, results=[
        {"call_id": ids[0], "result": ok, "error": "x"}, {"call_id": ids[1], "result": ok},
    ])
    assert both["data"]["field"] == "results[0]"
    twice = alice.error("submit_tool_results", run_id=run_id, results=[
        {"call_id": ids[0], "result": ok}, {"call_id": ids[0], "result": ok},
    ])
    assert twice["data"]["field"] in ("results", "results[1].call_id")
    # none of those reached the run: it still waits for these same calls
    second = alice.result("submit_tool_results", run_id=run_id, results=[{"call_id": i, "result": ok} for i in ids])
    assert second["status"] == "requires_action"
    again = alice.error("submit_tool_results", run_id=run_id, results=[{"call_id": i, "result": ok} for i in ids])
    assert again["code"] == -32602 and again["data"]["field"] == "results[0].call_id"
    done = alice.result("submit_tool_results", run_id=run_id, results=[
        {"call_id": second["tool_calls"][0]["call_id"], "result": None},
    ])
    assert done["status"] == "completed" and done["output"]["failed"] is None


def test_declared_tools_are_checked(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    bad_schema = alice.error("run_code", language="python", code="1", tools=[
        {"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}},
    ])
    assert bad_schema["data"]["field"] == "tools[0].parameters"
    twice = alice.error("run_code", language="python", code="1", tools=[WEATHER, WEATHER])
    assert twice["data"]["field"] == "tools[1].name"
    bad_name = alice.error("run_code", language="python", code="1", tools=[{"name": "../etc"}])
    assert bad_name["code"] == -32602 and "tools" in json.dumps(bad_name)
    no_tools = alice.result("run_code", language="python", code="from runtime import tools\ntools.x()")
    assert no_tools["status"] == "failed" and "declared no tools" in no_tools["error"]["message"]
    # the server goes on serving
    assert alice.result("run_code", language="python", code="1 + 1")["output"] == 2


COMMAND_CALLING_A_TOOL = (
    "echo before && python -c \"import sys; from runtime import tools; t = tools.get_weather(city='Paris'); "
    "print('temp', t['temp']); print('warm' if t['temp'] > 20 else 'cold', file=sys.stderr); sys.exit(3)\""
)


@pytest.mark.parametrize("in_session", [False, True], ids=["fresh", "session"])
def test_run_command_with_tools_answers_as_a_command_after_submit(servers: tuple[Caller, Caller], in_session: bool) -> None:
    """run_command's final answer, reached through submit_tool_results, is a command's: the exit
    code, and what the command wrote on stdout and stderr, before and after the tool call."""
    alice, _ = servers
    where = {"session_id": alice.result("create_session", language="python")["session_id"]} if in_session else {}
    first = alice.result("run_command", command=COMMAND_CALLING_A_TOOL, tools=[WEATHER], **where)
    assert first["status"] == "requires_action", first
    assert "exit_code" not in first  # the command has not ended
    (call,) = first["tool_calls"]
    assert call["name"] == "get_weather" and call["arguments"] == {"city": "Paris"}
    done = alice.result("submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": call["call_id"], "result": {"temp": 21}},
    ])
    assert done["status"] == "completed", done
    assert (done["exit_code"], done["stdout"], done["stderr"]) == (3, "before\ntemp 21\n", "warm\n"), done
    assert done["output"] == 3 and done["summary"].startswith("The command exited 3 after"), done


# -- the event stream (SSE on /rpc) and MCP: each batch is an event before the answer --------

TALKING_THREE_CALLS = THREE_CALLS.replace(
    "    paris, oslo = asyncio.run(both())\n",
    "    print('before')\n    paris, oslo = asyncio.run(both())\n    print('between')\n",
).replace("    global kept\n", "    print('after')\n    global kept\n")


def streamed(call: Caller, method: str, **params: Any) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a `stream: true` call, in the order they arrived."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "stream": True}}
    headers = {"authorization": f"Bearer {call.key}", "accept": "text/event-stream"}
    messages, data = [], []
    with httpx2.stream("POST", call.server.endpoint, json=body, headers=headers, timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream"), response.headers
        for line in response.iter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                messages.append(json.loads("\n".join(data)))
                data = []
    return messages


def events_then_answer(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(stdout streamed, the run/tool_calls events' params, the call's result): the answer is last."""
    *events, last = messages
    assert "result" in last, last
    assert all(m.get("method") in ("run/output", "run/tool_calls") for m in events), events
    out = "".join(m["params"]["text"] for m in events if m["method"] == "run/output" and m["params"]["stream"] == "stdout")
    return out, [m["params"] for m in events if m["method"] == "run/tool_calls"], last["result"]


@pytest.mark.parametrize("in_session", [False, True], ids=["fresh", "session"])
def test_three_tools_over_the_event_stream(servers: tuple[Caller, Caller], in_session: bool) -> None:
    """Each batch comes as a `run/tool_calls` event (run_id, call_id, name, arguments) after the
    output written before it and before the `requires_action` answer; a streamed
    submit_tool_results carries the run's output from there on, and its next batch."""
    alice, _ = servers
    where = {"session_id": alice.result("create_session", language="python")["session_id"]} if in_session else {}
    out, told, first = events_then_answer(streamed(alice, "run_code", language="python", code=TALKING_THREE_CALLS,
                                                   tools=TOOLS, **where))
    assert out == "before\n" and first["status"] == "requires_action", (out, first)
    assert told == [{"run_id": first["run_id"], "tool_calls": first["tool_calls"]}]
    assert [(c["name"], c["arguments"]) for c in told[0]["tool_calls"]] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"}),
    ]
    temps = {"Paris": 21, "Oslo": 9}
    out, told, second = events_then_answer(streamed(alice, "submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": c["call_id"], "result": {"city": c["arguments"]["city"], "temp": temps[c["arguments"]["city"]]}}
        for c in first["tool_calls"]
    ]))
    assert out == "between\n" and second["status"] == "requires_action", (out, second)
    assert [c["name"] for c in told[0]["tool_calls"]] == ["lookup"] and told[0]["tool_calls"] == second["tool_calls"]
    out, told, done = events_then_answer(streamed(alice, "submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": second["tool_calls"][0]["call_id"], "error": "no such key: missing"},
    ]))
    assert (out, told) == ("after\n", []) and done["status"] == "completed", (out, done)
    assert done["output"]["failed"] == ["ToolError", "ToolFailed", "no such key: missing"]
    assert done["logs_preview"] == "before\nbetween\nafter\n"  # the result still holds all of it
    if in_session:
        assert alice.result("run_code", language="python", code="kept", session_id=where["session_id"])["output"] == 30


def test_a_plain_submit_hears_no_events_and_a_stream_nobody_hears_is_refused(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    _, _, first = events_then_answer(streamed(alice, "run_code", language="python", code=TALKING_THREE_CALLS, tools=TOOLS))
    answers = [{"call_id": c["call_id"], "result": {"temp": 1}} for c in first["tool_calls"]]
    # stream: true posted without `Accept: text/event-stream`: refused before the answers reach the run
    refused = alice.error("submit_tool_results", run_id=first["run_id"], results=answers, stream=True)
    assert refused["code"] == -32602 and refused["data"]["field"] == "stream", refused
    second = alice.result("submit_tool_results", run_id=first["run_id"], results=answers)  # plain JSON: as before
    assert second["status"] == "requires_action" and second["tool_calls"][0]["name"] == "lookup"
    out, told, done = events_then_answer(streamed(alice, "submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": second["tool_calls"][0]["call_id"], "result": None},
    ]))
    assert (out, told) == ("after\n", []) and done["status"] == "completed" and done["output"]["failed"] is None


def test_run_command_streams_its_tool_calls(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    before, told, first = events_then_answer(streamed(alice, "run_command", command=COMMAND_CALLING_A_TOOL,
                                                      tools=[WEATHER]))
    assert first["status"] == "requires_action" and "exit_code" not in first, first
    (call,) = told[0]["tool_calls"]
    assert call == first["tool_calls"][0] and call["arguments"] == {"city": "Paris"}
    after, told, done = events_then_answer(streamed(alice, "submit_tool_results", run_id=first["run_id"], results=[
        {"call_id": call["call_id"], "result": {"temp": 5}},
    ]))
    # (the shell hands on a command line's output as its commands end: `echo` may come before the
    # call or with the rest)
    assert before + after == "before\ntemp 5\n" and told == [], (before, after)
    assert (done["exit_code"], done["stdout"], done["stderr"]) == (3, "before\ntemp 5\n", "cold\n"), done


@pytest.mark.parametrize("in_session", [False, True], ids=["fresh", "session"])
def test_three_tools_over_mcp(servers: tuple[Caller, Caller], in_session: bool) -> None:
    """With the official MCP SDK's client, log level asked: each batch is a `notifications/message`
    (`{"stream": "tool_calls", run_id, tool_calls}`) before the tool's result, which is the
    `requires_action` answer; the `submit_tool_results` tool answers and goes on the same way."""
    import asyncio

    from mcp import Client as MCPClient
    from mcp.client.streamable_http import streamable_http_client

    alice, _ = servers
    where = {"session_id": alice.result("create_session", language="python")["session_id"]} if in_session else {}

    async def agent() -> tuple[list[Any], list[dict[str, Any]]]:
        logs: list[Any] = []
        results: list[dict[str, Any]] = []

        async def on_log(params: Any) -> None:
            logs.append(params.data)

        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {alice.key}"}, timeout=120) as http:
            client = MCPClient(streamable_http_client(alice.server.base_url + "/mcp", http_client=http),
                               logging_callback=on_log, log_level="info")  # type: ignore[arg-type]
            async with client as mcp:
                answer = await mcp.call_tool("run_code", {"language": "python", "code": TALKING_THREE_CALLS,
                                                          "tools": TOOLS, **where})
                while answer.structured_content["status"] == "requires_action":
                    step = answer.structured_content
                    results.append(step)
                    answers = [
                        {"call_id": c["call_id"], "result": {"city": c["arguments"]["city"], "temp": 10}}
                        if c["name"] == "get_weather" else {"call_id": c["call_id"], "error": "no such key"}
                        for c in step["tool_calls"]
                    ]
                    answer = await mcp.call_tool("submit_tool_results", {"run_id": step["run_id"], "results": answers})
                results.append(answer.structured_content)
        return logs, results

    logs, results = asyncio.run(agent())
    first, second, done = results
    told = [entry for entry in logs if entry.get("stream") == "tool_calls"]
    assert told == [
        {"stream": "tool_calls", "run_id": first["run_id"], "tool_calls": first["tool_calls"]},
        {"stream": "tool_calls", "run_id": first["run_id"], "tool_calls": second["tool_calls"]},
    ], logs
    printed = [entry["text"] for entry in logs if entry.get("stream") == "stdout"]
    assert printed == ["before\n", "between\n", "after\n"], logs
    assert logs.index(told[1]) < logs.index({"stream": "stdout", "text": "after\n"})  # in the run's order
    assert done["status"] == "completed" and done["output"]["paris"]["temp"] == 10
    assert done["output"]["failed"] == ["ToolError", "ToolFailed", "no such key"]


def test_the_typed_client_streams_a_code_mode_run(servers: tuple[Caller, Caller]) -> None:
    """wasmrun.client: run_code_stream(tools=...) gives a ToolCallsEvent before the requires_action
    result, and submit_tool_results_stream the output from there on, sync and async alike."""
    import asyncio

    from wasmrun.client import AsyncClient, Client, ExecutionResult, OutputEvent, ToolCallsEvent

    alice, _ = servers
    code = "from runtime import tools\nprint('asking')\nt = tools.lookup(key='k')\nprint('got', t)\nt * 2"

    def answers(events: list[Any]) -> tuple[str, list[Any], ExecutionResult]:
        *before, result = events
        assert isinstance(result, ExecutionResult), events
        printed = "".join(e.text for e in before if isinstance(e, OutputEvent) and e.stream == "stdout")
        return printed, [e for e in before if isinstance(e, ToolCallsEvent)], result

    with Client(alice.server.base_url, api_key=alice.key) as client:
        printed, told, first = answers(list(client.run_code_stream(code, tools=[LOOKUP])))
        assert printed == "asking\n" and first.status == "requires_action" and told[0].run_id == first.run_id
        (call,) = told[0].tool_calls
        assert call.name == "lookup" and msgspec.json.decode(call.arguments) == {"key": "k"}
        printed, told, done = answers(list(client.submit_tool_results_stream(
            first.run_id, [{"call_id": call.call_id, "result": 21}])))
        assert (printed, told, done.status, done.output) == ("got 21\n", [], "completed", 42), done

    async def on_async() -> Any:
        async with AsyncClient(alice.server.base_url, api_key=alice.key) as client:
            events = [e async for e in client.run_code_stream(code, tools=[LOOKUP])]
            (call,) = answers(events)[1][0].tool_calls
            return answers([e async for e in client.submit_tool_results_stream(
                events[-1].run_id, [{"call_id": call.call_id, "error": "down"}])])

    printed, told, done = asyncio.run(on_async())
    assert done.status == "failed" and done.error.type == "ToolError" and "down" in done.error.message, done
