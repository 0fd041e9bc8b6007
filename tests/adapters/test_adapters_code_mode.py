"""Pydantic AI's own code-mode loop on wasmrun (wasmrun.adapters.pydantic_ai_code_mode), against a
live `wasmrun serve`: a `pydantic_ai.Agent` with the harness's `CodeMode` loop, its `run_code` run
in a wasmrun session, its model a scripted `FunctionModel` (the only stand-in: no LLM). The code
the model writes calls the agent's tools (one twice at once through asyncio.gather), combines
their results with pandas, and the agent's answer carries the value; a tool that raises is seen
by the run; an uncaught error is the model's retry with the run's traceback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.adapters.test_adapters_pydantic_ai import anyio_backend, live  # noqa: F401  (the module's server, reused)
from tests.liveserver import LiveServer
from wasmrun.adapters.pydantic_ai_code_mode import WasmrunCodeMode
from wasmrun.client import Client

pytestmark = [pytest.mark.images("data"), pytest.mark.anyio]

CODE = '''\
import asyncio
import pandas as pd
from runtime.tools import ToolError

paris, oslo = await asyncio.gather(get_weather(city="Paris"), get_weather(city="Oslo"))
people = await population(city="Paris")
try:
    await lookup(key="missing")
    failed = None
except ToolError as exc:
    failed = [exc.type, exc.message]
df = pd.DataFrame([paris, oslo])
print("rows", len(df))
{"mean_temp": float(df["temp"].mean()), "warmest": str(df.loc[df["temp"].idxmax(), "city"]),
 "people": people, "failed": failed}
'''


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [part for m in messages for part in m.parts if isinstance(part, ToolReturnPart)]


def make_agent(server: LiveServer, script: Any) -> tuple[Agent[None, str], list[tuple[str, str]]]:
    called: list[tuple[str, str]] = []
    started: list[asyncio.Event] = []
    agent: Agent[None, str] = Agent(FunctionModel(script), capabilities=[WasmrunCodeMode(url=server.base_url)])

    @agent.tool_plain
    async def get_weather(city: str) -> dict[str, Any]:
        """Today's weather in a city."""
        called.append(("get_weather", city))
        # Both gathered calls must be in flight together: each waits for the other to start.
        started.append(asyncio.Event())
        if len(started) == 2:
            started[0].set()
        else:
            await asyncio.wait_for(started[0].wait(), timeout=20)
        return {"city": city, "temp": {"Paris": 21.0, "Oslo": 9.0}[city]}

    @agent.tool_plain
    def population(city: str) -> int:
        """How many people live in a city."""
        called.append(("population", city))
        return 2_100_000

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up."""
        called.append(("lookup", key))
        raise ValueError(f"no such key: {key}")

    return agent, called


async def test_agent_code_calls_its_tools_and_combines_them_with_pandas(live: LiveServer) -> None:  # noqa: F811
    seen: list[AgentInfo] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        done = returns(messages)
        if not done:
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": CODE})])
        if len(done) == 1:  # the session keeps the first snippet's variables for the second
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": "len(df) * 10 + people // 1_000_000"})])
        first, second = done[0].content, done[1].content
        return ModelResponse(parts=[TextPart(f"answer: {json.dumps(first, sort_keys=True)} then {second}")])

    agent, called = make_agent(live, script)
    result = await agent.run("mean temperature of Paris and Oslo?")

    assert sorted(called) == [("get_weather", "Oslo"), ("get_weather", "Paris"), ("lookup", "missing"), ("population", "Paris")]
    first = returns(result.all_messages())[0]
    assert first.content == {
        "output": "rows 2\n",
        "result": {"mean_temp": 15.0, "warmest": "Paris", "people": 2_100_000,
                   "failed": ["ToolFailed", "ValueError: no such key: missing"]},
    }
    # The framework's own record of the nested calls, as for Monty.
    assert first.metadata is not None and first.metadata["code_mode"] is True
    nested = sorted(p.tool_name for p in first.metadata["tool_calls"].values())
    assert nested == ["get_weather", "get_weather", "lookup", "population"]
    assert sorted(first.metadata["tool_returns"]) == sorted(
        cid for cid, p in first.metadata["tool_calls"].items() if p.tool_name != "lookup"
    )
    assert '"mean_temp": 15.0' in result.output and result.output.endswith("then 22"), result.output
    # The model saw one tool, run_code, whose description is wasmrun's and lists the folded tools.
    tools = {t.name: t for t in seen[0].function_tools}
    assert list(tools) == ["run_code"]
    description = tools["run_code"].description or ""
    assert "CPython" in description and "pandas" in description and "Monty" not in description
    assert "async def get_weather(*, city: str)" in description and "async def population(*, city: str) -> int" in description


async def test_an_uncaught_tool_error_is_the_models_retry_and_the_session_is_closed(live: LiveServer) -> None:  # noqa: F811
    retries: list[ToolReturnPart] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        retried = [p for p in returns(messages) if p.outcome == "retried"]  # a retry answers its tool call
        if not retried:
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": 'x = 1\nawait lookup(key="k")\n'})])
        retries.extend(retried)
        return ModelResponse(parts=[TextPart("gave up")])

    agent, called = make_agent(live, script)
    with Client(live.base_url) as client:
        before = {s.session_id for s in client.list_sessions().sessions}
        result = await agent.run("look k up")
        after = {s.session_id for s in client.list_sessions().sessions}
    assert result.output == "gave up" and called == [("lookup", "k")]
    (retry,) = retries
    text = str(retry.content)
    assert text.startswith("Runtime error:") and "ToolError" in text and "ValueError: no such key: k" in text, text
    assert after == before  # the agent run's session ended with it
