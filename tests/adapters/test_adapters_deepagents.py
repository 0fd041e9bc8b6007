"""deepagents on wasmrun (wasmrun.adapters.deepagents): a real deepagents agent, driven by a
scripted chat model (the only stand-in: no LLM), calls its own file tools and `execute` against
a live `wasmrun serve`; the files are then read back from the same session with run_code."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from deepagents import create_deep_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from tests.liveserver import LiveServer
from wasmrun.adapters.deepagents import WasmrunBackend
from wasmrun.client import Client


class ScriptedModel(BaseChatModel):
    """Answers each call with the next scripted AIMessage (tool calls included); accepts bound tools."""

    script: list[AIMessage]
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        message = self.script[self.calls] if self.calls < len(self.script) else AIMessage(content="done")
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=message)])


def call(name: str, n: int, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{n}", "type": "tool_call"}])


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("adapters-deepagents"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def client(live: LiveServer) -> Iterator[Client]:
    with Client(live.base_url) as c:
        yield c


def tool_results(messages: list[BaseMessage]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}


def test_agent_tools_work_in_the_session(client: Client) -> None:
    backend = WasmrunBackend.on(client)
    try:
        script = [
            call("write_file", 1, file_path="/workspace/notes/plan.txt", content="alpha\nbeta\ngamma\n"),
            call("read_file", 2, file_path="/workspace/notes/plan.txt"),
            call("edit_file", 3, file_path="/workspace/notes/plan.txt", old_string="beta", new_string="BETA"),
            call("ls", 4, path="/workspace/notes"),
            call("grep", 5, pattern="BETA", path="/workspace"),
            call("glob", 6, pattern="**/*.txt", path="/workspace"),
            call("execute", 7, command="cd /workspace/notes && wc -l plan.txt && python -c 'print(6*7)'"),
            call("execute", 8, command="cat /workspace/missing.txt"),
            AIMessage(content="all done"),
        ]
        model = ScriptedModel(script=script)
        agent = create_deep_agent(model=model, backend=backend)
        state = agent.invoke({"messages": [{"role": "user", "content": "work on the notes"}]})
        results = tool_results(state["messages"])
        assert state["messages"][-1].content == "all done"

        assert "plan.txt" in results["call_1"] and "rror" not in results["call_1"], results["call_1"]
        assert "beta" in results["call_2"] and "gamma" in results["call_2"], results["call_2"]
        assert "rror" not in results["call_3"], results["call_3"]
        assert "/workspace/notes/plan.txt" in results["call_4"], results["call_4"]
        assert "/workspace/notes/plan.txt" in results["call_5"], results["call_5"]
        assert "plan.txt" in results["call_6"], results["call_6"]
        assert "3 plan.txt" in results["call_7"] and "42" in results["call_7"], results["call_7"]
        assert "exit code 0" in results["call_7"] or "succeeded" in results["call_7"], results["call_7"]
        assert "missing.txt" in results["call_8"] and "exit code 1" in results["call_8"], results["call_8"]

        # The file is really in the session: read back by a plain run in it.
        out = client.run_code(
            "def main():\n    return open('/workspace/notes/plan.txt').read()\n", session_id=backend.id
        )
        assert out.status == "completed", out.summary
        assert out.output == "alpha\nBETA\ngamma\n"
    finally:
        backend.close()


def test_upload_download_and_errors(client: Client) -> None:
    backend = WasmrunBackend.on(client)
    try:
        blob = bytes(range(256)) * 4
        up = backend.upload_files([("/workspace/bin/data.bin", blob), ("relative.txt", b"x"), ("/home/user/h.txt", b"hi")])
        assert [u.error for u in up] == [None, "invalid_path", None]
        down = backend.download_files(["/workspace/bin/data.bin", "/workspace/nope", "/workspace/bin", "/workspace/h.txt"])
        assert down[0].content == blob and down[0].error is None
        assert down[1].error == "file_not_found"
        assert down[2].error == "is_directory"
        assert down[3].content == b"hi"  # /home/user is the same folder as /workspace
        r = backend.execute("ls -l /workspace/bin/data.bin | awk '{print $5}'; exit 3")
        assert r.exit_code == 3 and r.output.strip() == "1024", r
        slow = backend.execute("python -c 'while True: pass'", timeout=1)
        assert slow.exit_code == 124 and "timed out" in slow.output, slow
        assert backend.execute("echo still here").output == "still here\n"
    finally:
        backend.close()
