"""A typed Python client for a Skills Protocol runtime: `Client` and `AsyncClient`.

    from wasmrun.client import Client

    with Client("http://127.0.0.1:8080", api_key="...") as skills:
        blob = skills.create_blob("a,b\\n1,2\\n", kind="text/csv")
        run = skills.execute_skill("data.csv.profile", args={"blob_id": blob.blob_id},
                                   input_blobs=[blob.blob_id])
        print(run.status, run.output)

One method per protocol method; results are the msgspec Structs the server
itself answers with (wasmrun/protocol/types.py). A JSON-RPC error is raised as
the exception class of its code (wasmrun/protocol/errors.py: `InvalidParams`,
`MethodNotFound`, `ServerBusy`, ...), with the server's `message` and `data`.
An answer that is not JSON-RPC (a proxy's 502, an auth layer's 401 without a
JSON-RPC body) is an `HTTPError`; a connection failure or timeout is httpx2's
`TransportError` / `TimeoutException`, as raised.

`run_code_stream` and `execute_skill_stream` give a streamed run as an
iterator: `OutputEvent`s as the guest writes, `DisplayEvent`s as it shows
display results (`display(df)`, `plt.show()`), `ToolCallsEvent`s when a code-mode
run waits on the client's tools (`submit_tool_results_stream` goes on), then the
`ExecutionResult`, last (docs/streaming.md, docs/code-mode.md):

    for event in skills.run_code_stream(code):
        if isinstance(event, OutputEvent):
            print(event.text, end="")
        else:
            print(event.status)

A run that fails inside the sandbox is not an exception: it is an `ExecutionResult`
with `status == "failed"` and an `error`, as the spec has it.

Both clients keep one connection pool (keep-alive) for their lifetime: use them
as context managers or call `close()`. `call(method, params)` is the untyped
way in, for dispatching an LLM's tool calls by name (see examples/).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal, TypeVar

import httpx2

from wasmrun.client.params import (
    Language,
    Limits,
    ToolList,
    blob_params,
    create_session_params,
    execute_skill_params,
    run_code_params,
    run_command_params,
    run_limits,
    skill_files,
    streamed,
    submit_params,
)
from wasmrun.client.wire import (
    EVENT_STREAM,
    Calls,
    DisplayEvent,
    EventParser,
    HTTPError,
    OutputEvent,
    StreamEvent,
    ToolCallsEvent,
    base_url_of,
    decode_event,
    ended_early,
    is_event_stream,
    request_headers,
    rpc_error,
)
from wasmrun.protocol.errors import (
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    RPCError,
    ServerBusy,
)
from wasmrun.protocol.types import (
    CloseSessionResult,
    CommandResult,
    CreateBlobResult,
    CreateSkillParams,
    CreateSkillResult,
    DeleteBlobParams,
    DeleteBlobResult,
    DescribeSkillParams,
    DescribeSkillResult,
    Display,
    ExecutionResult,
    ForkSessionResult,
    InterruptSessionResult,
    ListSessionsParams,
    ListSessionsResult,
    ListSkillsParams,
    ListSkillsResult,
    LoadGuideParams,
    LoadGuideResult,
    Params,
    ReadBlobParams,
    ReadBlobResult,
    ReadSkillFileParams,
    ReadSkillFileResult,
    RunLimits,
    SessionInfo,
    SessionRef,
    SkillFile,
    ToolDefinition,
    ToolResult,
)

__all__ = [
    "AsyncClient",
    "Client",
    "CommandResult",
    "Display",
    "DisplayEvent",
    "HTTPError",
    "OutputEvent",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "ParseError",
    "RPCError",
    "RunLimits",
    "ExecutionResult",
    "ServerBusy",
    "StreamEvent",
    "ToolCallsEvent",
    "ToolDefinition",
    "ToolResult",
    "rpc_error",
]

T = TypeVar("T")
ListDetail = Literal["names", "summary"]
DescribeDetail = Literal["manifest", "summary", "full"]
ReadMode = Literal["sample_head", "sample_tail", "full"]

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 120.0  # seconds; a run may take as long as its own timeout_ms and the queue wait

class Client(Calls):
    """Blocking client. `url` is the server's base URL (or its `/rpc` endpoint)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        super().__init__()
        self.base_url = base_url_of(url)
        self._http = httpx2.Client(
            base_url=self.base_url, headers=request_headers(api_key), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, params: Params | dict[str, Any], result_type: type[T]) -> T:
        response = self._http.post("/rpc", content=self._request(method, params))
        return self._answer(response, result_type)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Any method by name; the result as plain JSON values."""
        return self._call(method, params or {}, Any)

    def tools(self, format: str = "jsonschema", *, strict: bool = False, with_create_skill: bool = False) -> list[Any]:
        """The server's tool definitions for an LLM (`GET /tools`)."""
        query = {"format": format, "strict": str(strict).lower(), "with_create_skill": str(with_create_skill).lower()}
        response = self._http.get("/tools", params=query)
        if response.status_code != 200:
            raise HTTPError(response.status_code, response.text)
        tools: list[Any] = response.json()
        return tools

    def list_skills(
        self, namespace: str | None = None, detail: ListDetail = "names", limit: int = 50, cursor: str | None = None
    ) -> ListSkillsResult:
        params = ListSkillsParams(namespace=namespace, detail=detail, limit=limit, cursor=cursor)
        return self._call("list_skills", params, ListSkillsResult)

    def describe_skill(self, name: str, version: str | None = None, detail: DescribeDetail = "summary") -> DescribeSkillResult:
        params = DescribeSkillParams(name=name, version=version, detail=detail)
        return self._call("describe_skill", params, DescribeSkillResult)

    def read_skill_file(self, name: str, path: str, version: str | None = None) -> ReadSkillFileResult:
        return self._call("read_skill_file", ReadSkillFileParams(name=name, path=path, version=version), ReadSkillFileResult)

    def execute_skill(
        self, name: str, args: dict[str, Any] | None = None, version: str | None = None,
        input_blobs: list[str] | None = None, timeout_ms: int | None = None, limits: Limits | None = None,
    ) -> ExecutionResult:
        params = execute_skill_params(name, args, version, input_blobs, timeout_ms, limits)
        return self._call("execute_skill", params, ExecutionResult)

    def run_code(
        self, code: str, language: Language = "python", entrypoint: str = "main", args: dict[str, Any] | None = None,
        mount_skills: list[str] | None = None, input_blobs: list[str] | None = None, timeout_ms: int | None = None,
        limits: Limits | None = None,
        session_id: str | None = None, packages: list[str] | None = None,
        tools: ToolList | None = None, tool_wait_ms: int | None = None,
    ) -> ExecutionResult:
        """`limits`: a RunLimits or a dict (timeout_ms, memory_mb, cpu_ms, workspace_mb, output_bytes).
        With `session_id`: inside that session (create_session). `packages`: pip requirements
        installed on demand for a fresh run (docs/packages.md). `tools`: the client's own tools the
        code may call; the answer may then be status "requires_action" (docs/code-mode.md)."""
        params = run_code_params(
            code, language, entrypoint, args, mount_skills, input_blobs, run_limits(limits, timeout_ms), session_id,
            packages, tools, tool_wait_ms,
        )
        return self._call("run_code", params, ExecutionResult)

    def submit_tool_results(
        self, run_id: str, results: list[ToolResult] | list[dict[str, Any]],
    ) -> ExecutionResult:
        """Answer a run's pending tool calls: each {"call_id", "result"} or {"call_id", "error"}.
        The run's result, or "requires_action" with its next tool_calls (docs/code-mode.md)."""
        return self._call("submit_tool_results", submit_params(run_id, results), ExecutionResult)

    def run_command(
        self, command: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
        stdin: str | None = None, timeout_ms: int | None = None, limits: Limits | None = None,
        session_id: str | None = None, packages: list[str] | None = None,
    ) -> CommandResult:
        """A command line (bash syntax) or an argv list, run by the sandbox's shell over its files
        (docs/commands.md): `exit_code`, `stdout`, `stderr`. With `session_id`: in that session."""
        params = run_command_params(command, cwd, env, stdin, timeout_ms, limits, session_id, packages)
        return self._call("run_command", params, CommandResult)

    def create_session(
        self, limits: RunLimits | dict[str, int] | None = None, idle_timeout_s: int | None = None,
        skills: list[str] | None = None, packages: list[str] | None = None,
    ) -> SessionInfo:
        """A new Python session: its globals, imports, /workspace and /tmp carry over between runs;
        `packages` (pip requirements) installed on demand and kept by its runs and forks."""
        params = create_session_params(limits, idle_timeout_s, skills, packages)
        return self._call("create_session", params, SessionInfo)

    def fork_session(self, session_id: str) -> ForkSessionResult:
        return self._call("fork_session", SessionRef(session_id=session_id), ForkSessionResult)

    def close_session(self, session_id: str) -> CloseSessionResult:
        return self._call("close_session", SessionRef(session_id=session_id), CloseSessionResult)

    def interrupt_session(self, session_id: str) -> InterruptSessionResult:
        """Stop the session's run in flight (it fails with `Interrupted`); from another thread."""
        return self._call("interrupt_session", SessionRef(session_id=session_id), InterruptSessionResult)

    def list_sessions(self) -> ListSessionsResult:
        return self._call("list_sessions", ListSessionsParams(), ListSessionsResult)

    def run_code_stream(
        self, code: str, language: Language = "python", entrypoint: str = "main", args: dict[str, Any] | None = None,
        mount_skills: list[str] | None = None, input_blobs: list[str] | None = None, timeout_ms: int | None = None,
        limits: Limits | None = None, session_id: str | None = None,
        tools: ToolList | None = None, tool_wait_ms: int | None = None,
    ) -> Iterator[StreamEvent]:
        """`run_code` streamed: `OutputEvent`s as the guest writes, then the `ExecutionResult`.
        With `tools`, a `ToolCallsEvent` for each batch the run waits on, before the
        "requires_action" result; go on with `submit_tool_results_stream`."""
        params = run_code_params(
            code, language, entrypoint, args, mount_skills, input_blobs, run_limits(limits, timeout_ms), session_id,
            tools=tools, tool_wait_ms=tool_wait_ms,
        )
        return self._stream("run_code", streamed(params))

    def submit_tool_results_stream(
        self, run_id: str, results: list[ToolResult] | list[dict[str, Any]],
    ) -> Iterator[StreamEvent]:
        """`submit_tool_results` streamed: the run's output from here on, its next `ToolCallsEvent`,
        then its result (or "requires_action" again)."""
        return self._stream("submit_tool_results", streamed(submit_params(run_id, results)))

    def execute_skill_stream(
        self, name: str, args: dict[str, Any] | None = None, version: str | None = None,
        input_blobs: list[str] | None = None, timeout_ms: int | None = None,
        limits: Limits | None = None,
    ) -> Iterator[StreamEvent]:
        """`execute_skill` streamed: `OutputEvent`s as the skill writes, then the `ExecutionResult`."""
        params = execute_skill_params(name, args, version, input_blobs, timeout_ms, limits)
        return self._stream("execute_skill", streamed(params))

    def _stream(self, method: str, params: Params) -> Iterator[StreamEvent]:
        body = self._request(method, params)
        with self._http.stream("POST", "/rpc", content=body, headers={"Accept": EVENT_STREAM}) as response:
            if not is_event_stream(response):  # an error answered before any run (401, 429, ...)
                response.read()
                yield self._answer(response, ExecutionResult)
                return
            parser = EventParser()
            for line in response.iter_lines():
                data = parser.feed(line)
                if data is not None:
                    event = decode_event(data)
                    yield event
                    if isinstance(event, ExecutionResult):
                        return
            raise ended_early(response)

    def create_blob(self, content: str | bytes, kind: str = "text/plain") -> CreateBlobResult:
        """`bytes` travel as base64; a `str` as text."""
        return self._call("create_blob", blob_params(content, kind), CreateBlobResult)

    def read_blob(self, blob_id: str, mode: ReadMode = "sample_head", max_bytes: int = 2000) -> ReadBlobResult:
        params = ReadBlobParams(blob_id=blob_id, mode=mode, max_bytes=max_bytes)
        return self._call("read_blob", params, ReadBlobResult)

    def delete_blob(self, blob_id: str) -> DeleteBlobResult:
        return self._call("delete_blob", DeleteBlobParams(blob_id=blob_id), DeleteBlobResult)

    def load_skills_protocol_guide(self) -> LoadGuideResult:
        return self._call("load_skills_protocol_guide", LoadGuideParams(), LoadGuideResult)

    def create_skill(
        self, manifest: dict[str, Any], skill_md: str, files: list[SkillFile] | list[dict[str, str]] | None = None
    ) -> CreateSkillResult:
        params = CreateSkillParams(manifest=manifest, skill_md=skill_md, files=skill_files(files))
        return self._call("create_skill", params, CreateSkillResult)


class AsyncClient(Calls):
    """The same methods as `Client`, awaitable; one connection pool per client."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__()
        self.base_url = base_url_of(url)
        self._http = httpx2.AsyncClient(
            base_url=self.base_url, headers=request_headers(api_key), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, params: Params | dict[str, Any], result_type: type[T]) -> T:
        response = await self._http.post("/rpc", content=self._request(method, params))
        return self._answer(response, result_type)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self._call(method, params or {}, Any)

    async def tools(
        self, format: str = "jsonschema", *, strict: bool = False, with_create_skill: bool = False
    ) -> list[Any]:
        query = {"format": format, "strict": str(strict).lower(), "with_create_skill": str(with_create_skill).lower()}
        response = await self._http.get("/tools", params=query)
        if response.status_code != 200:
            raise HTTPError(response.status_code, response.text)
        tools: list[Any] = response.json()
        return tools

    async def list_skills(
        self, namespace: str | None = None, detail: ListDetail = "names", limit: int = 50, cursor: str | None = None
    ) -> ListSkillsResult:
        params = ListSkillsParams(namespace=namespace, detail=detail, limit=limit, cursor=cursor)
        return await self._call("list_skills", params, ListSkillsResult)

    async def describe_skill(
        self, name: str, version: str | None = None, detail: DescribeDetail = "summary"
    ) -> DescribeSkillResult:
        params = DescribeSkillParams(name=name, version=version, detail=detail)
        return await self._call("describe_skill", params, DescribeSkillResult)

    async def read_skill_file(self, name: str, path: str, version: str | None = None) -> ReadSkillFileResult:
        params = ReadSkillFileParams(name=name, path=path, version=version)
        return await self._call("read_skill_file", params, ReadSkillFileResult)

    async def execute_skill(
        self, name: str, args: dict[str, Any] | None = None, version: str | None = None,
        input_blobs: list[str] | None = None, timeout_ms: int | None = None, limits: Limits | None = None,
    ) -> ExecutionResult:
        params = execute_skill_params(name, args, version, input_blobs, timeout_ms, limits)
        return await self._call("execute_skill", params, ExecutionResult)

    async def run_code(
        self, code: str, language: Language = "python", entrypoint: str = "main", args: dict[str, Any] | None = None,
        mount_skills: list[str] | None = None, input_blobs: list[str] | None = None, timeout_ms: int | None = None,
        limits: Limits | None = None,
        session_id: str | None = None, packages: list[str] | None = None,
        tools: ToolList | None = None, tool_wait_ms: int | None = None,
    ) -> ExecutionResult:
        """`limits`: a RunLimits or a dict (timeout_ms, memory_mb, cpu_ms, workspace_mb, output_bytes).
        With `session_id`: inside that session (create_session). `packages`: pip requirements
        installed on demand for a fresh run (docs/packages.md). `tools`: the client's own tools the
        code may call; the answer may then be status "requires_action" (docs/code-mode.md)."""
        params = run_code_params(
            code, language, entrypoint, args, mount_skills, input_blobs, run_limits(limits, timeout_ms), session_id,
            packages, tools, tool_wait_ms,
        )
        return await self._call("run_code", params, ExecutionResult)

    async def submit_tool_results(
        self, run_id: str, results: list[ToolResult] | list[dict[str, Any]],
    ) -> ExecutionResult:
        """Answer a run's pending tool calls: each {"call_id", "result"} or {"call_id", "error"}.
        The run's result, or "requires_action" with its next tool_calls (docs/code-mode.md)."""
        return await self._call("submit_tool_results", submit_params(run_id, results), ExecutionResult)

    async def run_command(
        self, command: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
        stdin: str | None = None, timeout_ms: int | None = None, limits: Limits | None = None,
        session_id: str | None = None, packages: list[str] | None = None,
    ) -> CommandResult:
        """As Client.run_command."""
        params = run_command_params(command, cwd, env, stdin, timeout_ms, limits, session_id, packages)
        return await self._call("run_command", params, CommandResult)

    async def create_session(
        self, limits: RunLimits | dict[str, int] | None = None, idle_timeout_s: int | None = None,
        skills: list[str] | None = None, packages: list[str] | None = None,
    ) -> SessionInfo:
        """A new Python session: its globals, imports, /workspace and /tmp carry over between runs;
        `packages` (pip requirements) installed on demand and kept by its runs and forks."""
        params = create_session_params(limits, idle_timeout_s, skills, packages)
        return await self._call("create_session", params, SessionInfo)

    async def fork_session(self, session_id: str) -> ForkSessionResult:
        return await self._call("fork_session", SessionRef(session_id=session_id), ForkSessionResult)

    async def close_session(self, session_id: str) -> CloseSessionResult:
        return await self._call("close_session", SessionRef(session_id=session_id), CloseSessionResult)

    async def interrupt_session(self, session_id: str) -> InterruptSessionResult:
        """Stop the session's run in flight (it fails with `Interrupted`)."""
        return await self._call("interrupt_session", SessionRef(session_id=session_id), InterruptSessionResult)

    async def list_sessions(self) -> ListSessionsResult:
        return await self._call("list_sessions", ListSessionsParams(), ListSessionsResult)

    def run_code_stream(
        self, code: str, language: Language = "python", entrypoint: str = "main", args: dict[str, Any] | None = None,
        mount_skills: list[str] | None = None, input_blobs: list[str] | None = None, timeout_ms: int | None = None,
        limits: Limits | None = None, session_id: str | None = None,
        tools: ToolList | None = None, tool_wait_ms: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """`run_code` streamed: `OutputEvent`s as the guest writes, then the `ExecutionResult`.
        With `tools`, a `ToolCallsEvent` for each batch the run waits on, before the
        "requires_action" result; go on with `submit_tool_results_stream`."""
        params = run_code_params(
            code, language, entrypoint, args, mount_skills, input_blobs, run_limits(limits, timeout_ms), session_id,
            tools=tools, tool_wait_ms=tool_wait_ms,
        )
        return self._stream("run_code", streamed(params))

    def submit_tool_results_stream(
        self, run_id: str, results: list[ToolResult] | list[dict[str, Any]],
    ) -> AsyncIterator[StreamEvent]:
        """`submit_tool_results` streamed: the run's output from here on, its next `ToolCallsEvent`,
        then its result (or "requires_action" again)."""
        return self._stream("submit_tool_results", streamed(submit_params(run_id, results)))

    def execute_skill_stream(
        self, name: str, args: dict[str, Any] | None = None, version: str | None = None,
        input_blobs: list[str] | None = None, timeout_ms: int | None = None,
        limits: Limits | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """`execute_skill` streamed: `OutputEvent`s as the skill writes, then the `ExecutionResult`."""
        params = execute_skill_params(name, args, version, input_blobs, timeout_ms, limits)
        return self._stream("execute_skill", streamed(params))

    async def _stream(self, method: str, params: Params) -> AsyncIterator[StreamEvent]:
        body = self._request(method, params)
        async with self._http.stream("POST", "/rpc", content=body, headers={"Accept": EVENT_STREAM}) as response:
            if not is_event_stream(response):
                await response.aread()
                yield self._answer(response, ExecutionResult)
                return
            parser = EventParser()
            async for line in response.aiter_lines():
                data = parser.feed(line)
                if data is not None:
                    event = decode_event(data)
                    yield event
                    if isinstance(event, ExecutionResult):
                        return
            raise ended_early(response)

    async def create_blob(self, content: str | bytes, kind: str = "text/plain") -> CreateBlobResult:
        return await self._call("create_blob", blob_params(content, kind), CreateBlobResult)

    async def read_blob(self, blob_id: str, mode: ReadMode = "sample_head", max_bytes: int = 2000) -> ReadBlobResult:
        params = ReadBlobParams(blob_id=blob_id, mode=mode, max_bytes=max_bytes)
        return await self._call("read_blob", params, ReadBlobResult)

    async def delete_blob(self, blob_id: str) -> DeleteBlobResult:
        return await self._call("delete_blob", DeleteBlobParams(blob_id=blob_id), DeleteBlobResult)

    async def load_skills_protocol_guide(self) -> LoadGuideResult:
        return await self._call("load_skills_protocol_guide", LoadGuideParams(), LoadGuideResult)

    async def create_skill(
        self, manifest: dict[str, Any], skill_md: str, files: list[SkillFile] | list[dict[str, str]] | None = None
    ) -> CreateSkillResult:
        params = CreateSkillParams(manifest=manifest, skill_md=skill_md, files=skill_files(files))
        return await self._call("create_skill", params, CreateSkillResult)
