"""smolagents on wasmrun (wasmrun.adapters.smolagents), against a live `wasmrun serve`: smolagents'
own `CodeAgent` loop with `executor=WasmrunExecutor(...)`, its model a scripted `Model` (the only
stand-in: no LLM) that answers each step with a code block, some of them written from what the
previous step's observation said."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from smolagents import CodeAgent, tool
from smolagents.memory import ActionStep
from smolagents.models import ChatMessage, MessageRole, Model
from smolagents.monitoring import TokenUsage
from smolagents.utils import AgentError

from tests.liveserver import LiveServer
from wasmrun.adapters.smolagents import WasmrunExecutor
from wasmrun.client import Client

Step = str | Callable[[str], str]


def text_of(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content)
    return content or ""


class ScriptedModel(Model):
    """Answers step N with script[N]: a code string, or a function of the conversation so far."""

    def __init__(self, script: list[Step]) -> None:
        super().__init__(model_id="scripted")
        self.script = list(script)
        self.calls = 0

    def generate(self, messages: list[Any], stop_sequences: list[str] | None = None, **kwargs: Any) -> ChatMessage:
        step = self.script[self.calls]
        self.calls += 1
        seen = "\n".join(text_of(m) if isinstance(m, ChatMessage) else str(m.get("content", "")) for m in messages)
        code = step(seen) if callable(step) else step
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Thought: step {self.calls}.\n<code>\n{code}\n</code>",
            token_usage=TokenUsage(input_tokens=0, output_tokens=0),
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("adapters-smolagents"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(live: LiveServer) -> Iterator[Client]:
    with Client(live.base_url) as c:
        yield c


def agent_on(client: Client, script: list[Step], tools: list[Any] | None = None, **options: Any) -> CodeAgent:
    executor = WasmrunExecutor(client=client, **options)
    return CodeAgent(tools=tools or [], model=ScriptedModel(script), executor=executor, max_steps=len(script), verbosity_level=0)


def steps(agent: CodeAgent) -> list[ActionStep]:
    return [s for s in agent.memory.steps if isinstance(s, ActionStep)]


def test_state_logs_error_and_final_answer_through_the_agent_loop(client: Client) -> None:
    def recover(seen: str) -> str:
        # Written only if the model was shown the error of the step before.
        assert "ZeroDivisionError" in seen and "    1 / 0" in seen, seen[-2000:]  # with its traceback
        return 'final_answer({"x": x, "y": y, "recovered": True})'

    agent = agent_on(client, [
        # a `def main` of the agent's is not called by the run contract
        'x = 6 * 7\nprint("x is", x)\ndef main(args):\n    raise SystemExit("main was called")',
        'y = x + 1\nprint("y is", y)',
        "print('before the error')\n1 / 0",
        recover,
    ])
    try:
        result = agent.run("compute")
        session_id = agent.python_executor.session_id
    finally:
        agent.cleanup()
    assert result == {"x": 42, "y": 43, "recovered": True}
    done = steps(agent)
    assert len(done) == 4
    assert "x is 42" in (done[0].observations or "")
    assert "y is 43" in (done[1].observations or "")  # state from step 1
    assert done[2].error is not None and "ZeroDivisionError" in str(done[2].error)
    assert "before the error" in str(done[2].error)  # the logs printed before it
    assert done[3].is_final_answer
    assert session_id not in [s.session_id for s in client.list_sessions().sessions]  # cleanup closed it


def test_tool_runs_in_the_session_and_variables_are_sent(client: Client) -> None:
    @tool
    def where() -> str:
        """The platform the code runs on."""
        import sys

        return sys.platform

    agent = agent_on(client, ["p = where()\nprint(p)", "final_answer([p, sum(numbers)])"], tools=[where])
    try:
        result = agent.run("where are you?", additional_args={"numbers": [1, 2, 3]})
    finally:
        agent.cleanup()
    # The tool's source was sent into the session and ran there: the guest is CPython on WASI.
    assert result == ["wasi", 6]


def test_large_final_answer_comes_back_whole(client: Client) -> None:
    agent = agent_on(client, ['final_answer("z" * 300_000)'])
    try:
        assert agent.run("big") == "z" * 300_000
    finally:
        agent.cleanup()


def test_ten_megabytes_printed_are_cut_and_the_agent_goes_on(client: Client) -> None:
    agent = agent_on(client, ["a = 1\nprint('A' * 10_000_000)", "final_answer(a + 1)"])
    try:
        assert agent.run("flood") == 2
    finally:
        agent.cleanup()
    observation = steps(agent)[0].observations or ""
    assert "the output was cut" in observation
    assert 40_000 < len(observation) < 60_000


def test_infinite_loop_stopped_by_the_limit_with_a_clear_error(client: Client) -> None:
    def after(seen: str) -> str:
        assert "Timeout" in seen and "time limit of 2000 ms" in seen, seen[-2000:]
        return "final_answer(kept)"

    agent = agent_on(client, ["kept = 'before the loop'", "kept = 'inside'\nwhile True:\n    pass", after], timeout_ms=2000)
    try:
        result = agent.run("loop")
    finally:
        agent.cleanup()
    error = str(steps(agent)[1].error)
    assert "the step was undone" in error and "    while True:" in error and "_wasmrun_smolagents_step" not in error
    assert result == "before the loop"  # the stopped step was rolled back


def test_imports_not_in_the_session_are_refused_by_name(client: Client) -> None:
    with pytest.raises(AgentError, match="no_such_module_xyz not importable.*packages=") as info:
        WasmrunExecutor(["json", "no_such_module_xyz"], client=client)
    assert "json" not in info.value.message.split(" not importable")[0]
    executor = WasmrunExecutor(["json", "collections.abc", "*"], client=client)
    try:
        assert executor.installed_packages == ["json", "collections.abc", "*"]
    finally:
        executor.cleanup()
