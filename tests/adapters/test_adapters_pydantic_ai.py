"""Pydantic AI on wasmrun (wasmrun.adapters.pydantic_ai), against a live `wasmrun serve`:
pydantic-ai's own conformance suite for workspace backends (pydantic_ai.workspaces.conformance),
then a real `pydantic_ai.Agent` whose model is a scripted `FunctionModel` (the only stand-in: no
LLM) calling the workspace's tools, then hostile arguments on the backend's paths."""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.workspaces import (
    Workspace,
    WorkspaceBackend,
    WorkspaceOutputLimitError,
    WorkspaceRef,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite

from tests.liveserver import LiveServer
from wasmrun.adapters.pydantic_ai import WasmrunWorkspace, WasmrunWorkspaceBackend
from wasmrun.client import Client

# Rules the suite checks that wasmrun's sandbox cannot meet, each for a reason of the sandbox
# (docs/commands.md "What differs from bash"), not of the adapter.
NO_PROCESSES = (
    "the guest runs no processes: `&` runs a job in the foreground to its end, and there is no PID, "
    "`kill` or signal, so {what}"
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("adapters-pydantic-ai"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(live: LiveServer) -> Iterator[Client]:
    with Client(live.base_url) as c:
        yield c


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def made(client: Client) -> Iterator[list[WasmrunWorkspaceBackend]]:
    """Every backend a test makes, closed afterwards (each closes the session it created)."""
    backends: list[WasmrunWorkspaceBackend] = []
    yield backends
    for backend in backends:
        try:
            backend.close()
        except Exception:  # a session the test destroyed on purpose
            pass


class TestConformance(WorkspaceBackendSuite):
    """pydantic-ai 2.62.0's conformance suite, every rule it has, on a session of the live server."""

    @pytest.fixture
    def backend(self, client: Client, made: list[WasmrunWorkspaceBackend]) -> WorkspaceBackend:
        made.append(WasmrunWorkspaceBackend.on(client))
        return made[-1]

    @pytest.fixture
    def fresh_backend(self, client: Client, made: list[WasmrunWorkspaceBackend]) -> Callable[[], WorkspaceBackend]:
        def fresh() -> WorkspaceBackend:
            made.append(WasmrunWorkspaceBackend.on(client))
            return made[-1]

        return fresh

    @pytest.fixture
    def attach_backend(self, client: Client) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        return lambda ref: WasmrunWorkspaceBackend.on(client, ref)

    @pytest.fixture
    def destroy_environment(self, client: Client) -> Callable[[WorkspaceBackend], Awaitable[None]]:
        async def destroy(backend: WorkspaceBackend) -> None:
            assert backend.ref is not None
            await anyio.to_thread.run_sync(client.close_session, backend.ref.id)

        return destroy

    @pytest.mark.skip(reason=NO_PROCESSES.format(what="a background child cannot outlive the command"))
    async def test_background_child_does_not_hold_up_completed_command(self, *args: Any, **kwargs: Any) -> None: ...

    @pytest.mark.skip(reason=NO_PROCESSES.format(
        what="a command cannot be stopped by cancelling its caller: it runs to its end or its time limit"))
    async def test_cancellation_stops_foreground_work(self, *args: Any, **kwargs: Any) -> None: ...

    @pytest.mark.skip(reason="wasmrun refuses to close a session while it runs a request (SessionBusy), so the "
                             "environment cannot be destroyed during a command")
    async def test_destroying_environment_during_command_raises_unavailable(self, *args: Any, **kwargs: Any) -> None: ...

    @pytest.mark.skip(reason="WASI keeps no permission bits: `chmod 000` is remembered by the shell only, and "
                             "the file operations (Python runs in the session) can still read the file")
    async def test_permission_denied_uses_builtin_error(self, *args: Any, **kwargs: Any) -> None: ...


# -- an agent loop -----------------------------------------------------------------------

CSV = "region,amount\nnorth,10\nsouth,20\nnorth,5\n"
TOTAL = "python3 -c \"import csv; print(sum(int(r['amount']) for r in csv.DictReader(open('data/sales.csv'))))\""


def scripted(calls: list[tuple[str, dict[str, object]]]) -> FunctionModel:
    """A model that makes `calls` one by one, then answers with every tool result it was sent."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # This run's messages: from its user prompt on (a run given a history gets the earlier ones too).
        start = max(i for i, m in enumerate(messages) if isinstance(m, ModelRequest)
                    and any(isinstance(p, UserPromptPart) for p in m.parts))
        messages = messages[start:]
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step < len(calls):
            name, args = calls[step]
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{step + 1}")])
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart("\n".join(f"[{p.tool_call_id}] {p.content}" for p in returns))])

    return FunctionModel(model)


def test_agent_works_in_the_session_and_continues_there(client: Client) -> None:
    workspace = WasmrunWorkspace(client=client)
    agent = Agent(scripted([
        ("write_file", {"path": "data/sales.csv", "content": CSV}),
        ("run_command", {"command": f"wc -l data/sales.csv && {TOTAL}"}),
        ("read_file", {"path": "/workspace/data/sales.csv"}),
        ("list_dir", {"path": "data"}),
        ("read_file", {"path": "missing.txt"}),
        ("run_command", {"command": "cat missing.txt"}),
    ]), capabilities=[workspace])
    result = agent.run_sync("total the sales")
    answer = result.output
    assert result.workspace.ref is not None
    try:
        assert f"[call_1] wrote {len(CSV)} bytes to /workspace/data/sales.csv" in answer, answer
        assert "[call_2] exit code 0\nstdout:\n4 data/sales.csv\n35\n" in answer, answer
        assert f"[call_3] {CSV}" in answer, answer
        assert f"[call_4] sales.csv\t{len(CSV)} bytes" in answer, answer
        assert "[call_5] Error: No such file or directory: missing.txt" in answer, answer
        assert "[call_6] exit code 1" in answer and "missing.txt" in answer.split("[call_6]")[1], answer

        # The run's session is recorded on its last response, and the files are really in it.
        ref = result.workspace.ref
        assert ref is not None and ref.provider == "wasmrun" and ref.id.startswith("ses_")
        assert result.all_messages()[-1].workspace_ref == ref  # type: ignore[union-attr]
        out = client.run_code("def main():\n    return open('/workspace/data/sales.csv').read()\n", session_id=ref.id)
        assert out.status == "completed" and out.output == CSV, out.summary

        # The next turn, given the history, continues in the same session (the capability attaches by ref).
        again = Agent(scripted([("run_command", {"command": "tail -1 data/sales.csv"})]), capabilities=[workspace])
        follow = again.run_sync("and the last row?", message_history=result.all_messages())
        assert "[call_1] exit code 0\nstdout:\nnorth,5\n" in follow.output, follow.output
        assert follow.workspace.ref == ref
    finally:
        client.close_session(result.workspace.ref.id)


def test_a_closed_session_ends_the_run(client: Client) -> None:
    """A ref whose session is gone is WorkspaceUnavailableError, which ends the run (never a new session)."""
    ref = WorkspaceRef(provider="wasmrun", id=client.create_session().session_id)
    client.close_session(ref.id)
    agent = Agent(scripted([("run_command", {"command": "ls"})]), capabilities=[WasmrunWorkspace(client=client)])
    with pytest.raises(WorkspaceUnavailableError, match="is gone"):
        agent.run_sync("ls", workspace=ref)


# -- hostile input -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_hostile_paths_and_commands(client: Client, made: list[WasmrunWorkspaceBackend]) -> None:
    made.append(WasmrunWorkspaceBackend.on(client))
    backend = made[-1]
    ws = Workspace(backend)
    await ws.write_text("ok.txt", "fine")

    # `..` out of the mounts reaches nothing (the facade collapses it as text; the raw path as well).
    for path in ("../../etc/passwd", "/workspace/../../etc/passwd"):
        with pytest.raises(FileNotFoundError):
            await ws.read_bytes(path)  # /etc/passwd: not in the sandbox
    with pytest.raises(PermissionError):  # WASI refuses a path that climbs out of its mount
        await backend.read_bytes("/workspace/../../etc/passwd")
    assert not await ws.exists("../../../proc/self/environ")

    # A NUL anywhere: ValueError, before any run.
    for operation in (backend.read_bytes, backend.stat, backend.list_dir, backend.exists, backend.remove):
        with pytest.raises(ValueError, match="NUL"):
            await operation("/workspace/a\0b")
    with pytest.raises(ValueError, match="NUL"):
        await backend.write_bytes("/workspace/a\0b", b"x")
    with pytest.raises(ValueError, match="NUL"):
        await backend.run(["echo", "a\0b"])
    with pytest.raises(ValueError, match="NUL"):
        await backend.run("echo hi", shell=True, env={"X": "a\0b"})

    # Not absolute, not UTF-8, not a str: ValueError / TypeError.
    with pytest.raises(ValueError, match="absolute"):
        await backend.read_bytes("ok.txt")
    with pytest.raises(ValueError, match="UTF-8"):
        await backend.write_bytes("/workspace/\udcff.txt", b"x")
    with pytest.raises(TypeError):
        await backend.read_bytes(b"/workspace/ok.txt")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await backend.write_bytes("/workspace/t.txt", "text")  # type: ignore[arg-type]

    # 5,000 characters: the filesystem's own error, as the builtin exception.
    long = "/workspace/" + "a" * 5000
    for operation in (backend.read_bytes, backend.stat):
        with pytest.raises(OSError) as caught:
            await operation(long)
        assert caught.value.errno == errno.ENAMETOOLONG, caught.value
    with pytest.raises(OSError) as caught:
        await backend.write_bytes(long, b"x")
    assert caught.value.errno == errno.ENAMETOOLONG, caught.value
    assert not await backend.exists(long)
    result = await backend.run(["echo", "b" * 5000])
    assert (result.exit_code, len(result.stdout)) == (0, 5001)

    # An answer past the server's inline output (4 KiB) comes back whole (stored as a blob, read, deleted).
    names = [f"{i:03d}-" + "n" * 120 for i in range(60)]
    result = await backend.run(f"mkdir many && cd many && touch {' '.join(names)}", shell=True)
    assert result.exit_code == 0, result
    assert [e.name for e in await backend.list_dir("/workspace/many")] == names

    # Bytes that are not UTF-8 come back as bytes from read_bytes; commands see text and go on.
    await backend.write_bytes("/workspace/bin.dat", b"\xff\xfe\x00ok\n")
    assert await backend.read_bytes("/workspace/bin.dat") == b"\xff\xfe\x00ok\n"
    result = await backend.run("cat bin.dat; echo after", shell=True)
    assert result.exit_code == 0 and result.stdout.endswith("ok\nafter\n"), result
    assert "ok" in (await ws.read_bytes("bin.dat")).decode("utf-8", errors="replace")

    # Timeouts: invalid values and one past the server's limit are ValueError; the limit itself is a timeout.
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            await backend.run(["true"], timeout=timeout)
    with pytest.raises(ValueError, match="timeout_ms"):
        await backend.run(["true"], timeout=10**7)
    with pytest.raises(WorkspaceTimeoutError):
        await backend.run("python3 -c 'while True: pass'", shell=True, timeout=0.5)
    assert (await backend.run(["ls", "ok.txt"])).stdout == "ok.txt\n"  # the session is still there

    # Output past the run's output cap (64 KiB by default) is an error, never a truncated success.
    with pytest.raises(WorkspaceOutputLimitError) as cut:
        await backend.run(["python3", "-c", "print('x' * 200_000)"])
    assert 0 < len(cut.value.stdout) < 200_000 and cut.value.limit > 0

    # remove never takes the workspace itself, under either of its names.
    for path in ("/", "/workspace", "/workspace/.", "/home/user", "/home"):
        with pytest.raises(ValueError, match="refusing"):
            await backend.remove(path)
    assert await backend.exists("/workspace/ok.txt")


@pytest.mark.anyio
async def test_relative_symlinks(client: Client, made: list[WasmrunWorkspaceBackend]) -> None:
    """The suite's symlink rules make absolute links, which WASI refuses (EPERM); the same rules on
    relative links, which the sandbox has."""
    made.append(WasmrunWorkspaceBackend.on(client))
    backend = made[-1]
    await backend.write_bytes("/workspace/s/target.txt", b"old")
    await backend.make_dir("/workspace/s/dir")
    for target, link in (("target.txt", "link.txt"), ("dir", "dirlink"), ("../out", "up"), ("loop", "loop")):
        assert (await backend.run(["ln", "-s", target, f"/workspace/s/{link}"])).exit_code == 0
    await backend.write_bytes("/workspace/s/link.txt", b"new")  # writes through the link
    assert await backend.read_bytes("/workspace/s/target.txt") == b"new"
    assert await backend.realpath("/workspace/s/link.txt") == "/workspace/s/target.txt"
    assert await backend.realpath("/workspace/s/dirlink/missing") == "/workspace/s/dir/missing"
    assert await backend.realpath("/workspace/s/up/missing") == "/workspace/out/missing"
    assert (await backend.stat("/workspace/s/dirlink")).is_dir
    entries = {e.name: e.is_dir for e in await backend.list_dir("/workspace/s")}
    assert entries == {"dir": True, "dirlink": True, "link.txt": False, "loop": False, "target.txt": False, "up": False}
    await backend.remove("/workspace/s/dirlink")  # the link itself, not what it points at
    assert await backend.exists("/workspace/s/dir") and not await backend.exists("/workspace/s/dirlink")


@pytest.mark.anyio
async def test_a_program_named_by_its_path_runs(client: Client, made: list[WasmrunWorkspaceBackend]) -> None:
    """pydantic-ai's `Workspace.run(argv, cwd=...)` starts `/bin/sh -c ...`: the guest's shell
    runs such paths as its own commands."""
    made.append(WasmrunWorkspaceBackend.on(client))
    backend = made[-1]
    assert (await backend.run(["/bin/sh", "-c", "echo hi"])).stdout == "hi\n"
    assert (await backend.run(["/usr/bin/env", "python3", "-c", "print(6 * 7)"])).stdout == "42\n"
    assert (await backend.run(["/usr/bin/no-such-program"])).exit_code == 127
