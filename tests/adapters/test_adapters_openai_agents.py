"""The OpenAI Agents SDK's sandbox (`openai-agents`, pinned in the test extra) on wasmrun through
its own E2B client (`agents.extensions.sandbox.e2b.E2BSandboxClient`), pointed at a live server
with E2B's variables (tests/e2benv.py), driven by a scripted model (no LLM): what works, and a
clear error for what wasmrun does not have (a PTY, exposed ports, restoring a tar snapshot).

The SDK's E2B client calls E2B's `commands.run` for everything, in code-interpreter mode too:
`mkdir -p ROOT` and `tar` with `cwd="/"`, its runtime helper installed with `sh -c SCRIPT sh
PATH` (a multi-line script with a function, a heredoc and `trap`), and each `exec_command` as
`sh -lc CMD` through `commands.run(background=True, on_stdout=...)`."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import RunConfig, Runner
from agents.extensions.sandbox.e2b import E2BSandboxClient, E2BSandboxClientOptions
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.sandbox import ExecTransportError, Manifest, SandboxAgent, SandboxRunConfig, WorkspaceArchiveWriteError
from agents.usage import Usage
from e2b import AsyncSandbox, InvalidArgumentException
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from tests.e2benv import e2b_environment
from tests.liveserver import LiveServer, wasmrun_env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("openai-agents") / "data", env=wasmrun_env())
    try:
        with e2b_environment(live, "any key: a server without tenants"):
            yield live
    finally:
        live.stop()


class ScriptedModel(Model):
    """A model that answers with the tool calls it is given, in turn, then a message; it keeps
    every input it was sent, so a test sees what reached the model's next turn."""

    def __init__(self, calls: list[dict[str, Any]], answer: str) -> None:
        self.calls, self.answer = list(calls), answer
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                           conversation_id: Any = None, prompt: Any = None) -> ModelResponse:
        self.inputs.append(input)
        turn = len(self.inputs)
        if self.calls:
            call = self.calls.pop(0)
            out: Any = ResponseFunctionToolCall(
                id=f"fc{turn}", call_id=f"call{turn}", type="function_call", name="exec_command", arguments=json.dumps(call)
            )
        else:
            out = ResponseOutputMessage(
                id=f"msg{turn}", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=self.answer, annotations=[])],
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run Runner.run, not streamed")

    def tool_outputs(self) -> list[str]:
        return [item["output"] for turn in self.inputs[1:] for item in turn[-1:] if item.get("type") == "function_call_output"]


OPTIONS = E2BSandboxClientOptions(sandbox_type="e2b_code_interpreter")


def run(coro: Any, within: float = 60) -> Any:
    """Awaited within `within` seconds: a call that cannot work must fail, never hang."""
    return asyncio.run(asyncio.wait_for(coro, within))


async def _session(manifest: Manifest | None = None, **options: Any) -> AsyncIterator[Any]:
    client = E2BSandboxClient()
    session = await client.create(manifest=manifest or Manifest(), options=E2BSandboxClientOptions(
        sandbox_type="e2b_code_interpreter", **options))
    try:
        yield session
    finally:
        await session.shutdown()


async def _with_session(body: Any, manifest: Manifest | None = None, **options: Any) -> Any:
    async for session in _session(manifest, **options):
        return await body(session)


# What works today


def test_the_client_makes_a_wasmrun_sandbox_and_runs_argv_commands(server: LiveServer) -> None:
    """`client.create()` makes a sandbox on wasmrun (E2B_API_URL / E2B_SANDBOX_URL); an argv
    command (`shell=False`) runs in the guest's shell over the sandbox's files."""

    async def body(session: Any) -> tuple[Any, Any, list[str]]:
        sandbox_id = session._inner.sandbox_id
        listed = [info.sandbox_id for info in await (AsyncSandbox.list()).next_items()]
        sum_ = await session.exec("python3", "-c", "print(6 * 7)", shell=False)
        where = await session.exec("pwd", shell=False)
        return sum_, where, [sandbox_id, *listed]

    sum_, where, ids = run(_with_session(body))
    assert ids[0] in ids[1:]
    assert (sum_.exit_code, sum_.stdout) == (0, b"42\n")
    assert where.stdout == b"/home/user\n"  # E2B's home: the sandbox's files


def test_the_sdks_setup_commands_start_at_the_guests_root(server: LiveServer) -> None:
    """The SDK runs `mkdir -p -- ROOT` and its `tar` commands with `cwd="/"` (E2B's
    `commands.run(cwd=...)`): a command may start at the guest's root or under /tmp as well as
    under /home/user; a folder the guest does not have is still InvalidArgumentException."""

    async def body() -> list[str]:
        sandbox = await AsyncSandbox.create()
        try:
            made = await sandbox.commands.run("mkdir -p -- /workspace/project && pwd", cwd="/")
            tmp = await sandbox.commands.run("pwd", cwd="/tmp")
            with pytest.raises(InvalidArgumentException, match="outside the sandbox's files.*or at /"):
                await sandbox.commands.run("pwd", cwd="/etc")
            with pytest.raises(InvalidArgumentException, match="outside"):
                await sandbox.commands.run("pwd", cwd="/tmp/../etc")
            return [made.stdout, tmp.stdout, str(await sandbox.files.exists("/home/user/project"))]
        finally:
            await sandbox.kill()

    # /workspace is the sandbox's files as the guest sees them: the same as /home/user.
    assert run(body()) == ["/\n", "/tmp\n", "True"]


def test_a_background_exec_streams_its_output_back(server: LiveServer) -> None:
    """The SDK's `exec_command` tool without a TTY is `commands.run(background=True,
    on_stdout=..., on_stderr=...)` and `handle.wait()`: the output and exit code come back."""

    async def body(session: Any) -> Any:
        return await session.pty_exec_start("python3", "-c", "import sys; print('out'); sys.exit(3)", shell=False, tty=False)

    update = run(_with_session(body))
    assert (update.output, update.exit_code, update.process_id) == (b"out\n", 3, None)


# What wasmrun does not have: a clear error, not a hang or a 500


def test_a_tty_is_a_clear_error(server: LiveServer) -> None:
    """`exec_command(tty=true)` opens E2B's `pty.create`: wasmrun has no terminal, so the SDK
    raises its ExecTransportError carrying E2B's UNIMPLEMENTED at once."""

    async def body(session: Any) -> Any:
        with pytest.raises(ExecTransportError) as refused:
            await session.pty_exec_start("echo", "x", shell=False, tty=True)
        return refused.value

    began = time.monotonic()
    error = run(_with_session(body))
    assert "PTY is not available on wasmrun" in str(error.context["provider_error"])
    assert time.monotonic() - began < 30


def test_restoring_a_tar_snapshot_is_a_clear_error(server: LiveServer) -> None:
    """`hydrate_workspace(tar)` (resuming from a tar snapshot) uploads the tar to
    /tmp/sandbox-hydrate-*.tar with `files.write`: the E2B door's files are /home/user's only,
    so the SDK raises WorkspaceArchiveWriteError caused by an InvalidArgumentException naming it."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("restored.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"ok\n"))

    async def body(session: Any) -> Any:
        with pytest.raises(WorkspaceArchiveWriteError) as refused:
            await session.hydrate_workspace(io.BytesIO(archive.getvalue()))
        return refused.value

    error = run(_with_session(body))
    assert isinstance(error.__cause__, InvalidArgumentException)
    assert "/tmp/sandbox-hydrate-" in str(error.__cause__) and "outside" in str(error.__cause__)


def test_an_exposed_port_is_not_served(server: LiveServer) -> None:
    """`resolve_exposed_port(p)` is E2B's `get_host(p)`, computed by the SDK without asking the
    server (`{port}-{sandbox_id}.{E2B_DOMAIN or e2b.app}`): wasmrun serves no port of a sandbox,
    and the endpoint it gives is on E2B's domain, never this server."""

    async def body(session: Any) -> Any:
        return await session.resolve_exposed_port(8000)

    endpoint = run(_with_session(body, exposed_ports=(8000,)))
    assert endpoint.host.startswith("8000-") and endpoint.host.endswith(".e2b.app")
    assert str(server.port) not in endpoint.host and endpoint.host != "127.0.0.1"


# The guest's shell as the SDK drives it: `sh -lc CMD` for every exec, a multi-line `sh -c` with a
# function, a heredoc and `trap` for its runtime helper, `tar -cf - . | base64 -w0` for snapshots.


def test_a_sandbox_agent_runs_commands_and_answers(server: LiveServer) -> None:
    """A SandboxAgent with the default capabilities (exec_command, apply_patch, view_image);
    the model lists the files, runs Python, writes a file and cats it; each command's output
    reaches its next turn, and its answer is the run's final output."""
    model = ScriptedModel([
        {"cmd": "ls"},
        {"cmd": "python3 -c 'print(6*7)'"},
        {"cmd": "echo hello from the agent > note.txt && cat note.txt"},
    ], answer="the answer is 42")
    agent = SandboxAgent(name="worker", instructions="Use the shell.", model=model)
    config = RunConfig(tracing_disabled=True, sandbox=SandboxRunConfig(client=E2BSandboxClient(), options=OPTIONS))
    result = run(Runner.run(agent, "compute 6*7", run_config=config), within=120)
    outputs = model.tool_outputs()
    assert len(outputs) == 3 and all("Process exited with code 0" in out for out in outputs), outputs
    assert outputs[1].endswith("Output:\n42\n") and outputs[2].endswith("Output:\nhello from the agent\n")
    assert result.final_output == "the answer is 42"


def test_the_sessions_file_calls_after_start(server: LiveServer) -> None:
    """After `start()` (which installs the SDK's path-check helper under /tmp/openai-agents), the
    session's write, read and ls go through E2B's files API and the helper."""

    async def body(session: Any) -> tuple[bytes, list[str]]:
        await session.start()
        await session.write(Path("notes/a.txt"), io.BytesIO(b"data\n"))
        read = (await session.read(Path("notes/a.txt"))).read()
        return read, [entry.path for entry in await session.ls("notes")]

    read, listed = run(_with_session(body))
    assert read == b"data\n" and listed == ["/workspace/notes/a.txt"]


def test_a_tar_snapshot_of_text_files(server: LiveServer) -> None:
    """`persist_workspace()` (tar persistence) runs `tar -C ROOT -cf - . | base64 -w0` with
    `cwd="/"` and decodes the output: text files come back whole."""

    async def body(session: Any) -> dict[str, bytes]:
        await session._inner._sandbox.files.write("/home/user/notes.txt", "text\n")
        archive = tarfile.open(fileobj=await session.persist_workspace())
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]

    assert run(_with_session(body)) == {"./notes.txt": b"text\n"}


def test_a_tar_snapshot_of_a_binary_file(server: LiveServer) -> None:
    """The same snapshot of a file that is not UTF-8 (every byte value): its bytes come back
    whole through the guest's pipes."""
    async def body(session: Any) -> bytes:
        await session._inner._sandbox.files.write("/home/user/blob.bin", bytes(range(256)))
        archive = tarfile.open(fileobj=await session.persist_workspace())
        return archive.extractfile("./blob.bin").read()  # type: ignore[union-attr]

    assert run(_with_session(body)) == bytes(range(256))
