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
