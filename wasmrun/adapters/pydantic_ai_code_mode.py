"""Pydantic AI's code mode on wasmrun: the harness's `CodeMode` with its `run_code` on a session.

    from pydantic_ai import Agent
    from wasmrun.adapters.pydantic_ai_code_mode import WasmrunCodeMode

    agent = Agent("openai:gpt-5", capabilities=[WasmrunCodeMode(url="http://127.0.0.1:8080")])

    @agent.tool_plain
    def get_weather(city: str) -> dict: ...

pydantic-ai-harness 0.62.0's `CodeMode` folds the agent's tools into one `run_code` tool whose
code calls them as functions; its runtime is Monty, a Python subset, and its one place for
another runtime (`monty_sandbox`) takes a pool of Monty workers (`pydantic_monty`'s own types,
which cannot be subclassed): it moves Monty, not the code, elsewhere. So this adapter keeps
the framework's code-mode loop (`CodeModeToolset`: which tools go into `run_code`, the catalog
of their signatures the model reads, each nested call dispatched through the agent's
`ToolManager` with its validation, hooks, approvals and usage limits, the nested calls kept in
the `run_code` return's metadata, the return's shape) and replaces the one step that runs a
snippet: `WasmrunCodeModeToolset.call_tool` runs it as `run_code` in a wasmrun session that
declares the folded tools (docs/code-mode.md). Each function is bound in the session to
`runtime.tools.<name>`; a batch of calls (all of an `asyncio.gather`'s) comes back as
`requires_action`, runs through the framework concurrently, and goes back with
`submit_tool_results`. The code is full CPython with the image's packages (pandas, numpy on
the data image), not Monty's subset, and the description the model reads says so.

State: one session per agent run, created at the first `run_code` and closed when the run ends;
variables and imports carry over between `run_code` calls, and `restart: true` starts a new
session. A tool's error reaches the code as `runtime.tools.ToolError` (type `ToolFailed`, the
message `<exception class>: <text>`); an error the code does not catch is a retry for the model
with the run's traceback, as the harness does with Monty's.

What differs from Monty: a tool marked `sequential` is called plainly, so it must be called
outside a cell that awaits (in one, every tool call is awaitable); the first line of the code
the model sees in a traceback is its line 2 (line 1 binds the functions); `mount`, `os_access`,
`eager`, `speculate`, `repl_store` and `resource_limits` are Monty's and refused here: limits
are the run's (`limits`, the server's caps). Install with `pip install 'wasmrun[adapters]'`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
from msgspec import UnsetType
from pydantic_ai import AbstractToolset, RunContext
from pydantic_ai.exceptions import ModelRetry, UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai_harness import CodeMode
from pydantic_ai_harness._monty_exec import PrintCapture
from pydantic_ai_harness.code_mode import CodeModeToolset
from pydantic_ai_harness.code_mode._parts import RUN_CODE_TOOL_NAME
from pydantic_ai_harness.code_mode._toolset import (
    RunCodeExecution,
    _base_description,
    _RunCodeTool,
    run_nested_call,
)
from pydantic_core import to_jsonable_python

from wasmrun.client import DEFAULT_URL, AsyncClient, RunLimits
from wasmrun.protocol.types import ExecutionResult, PendingToolCall

_MONTY_GATHER = " Monty does not support `asyncio.gather` keyword arguments or other task creation and wait APIs."

DESCRIPTION_HEAD = """\
Write and run Python code in a sandbox: CPython 3 in WebAssembly (wasmrun), with the standard \
library and the packages its image has (on the data image: numpy, pandas, scipy, matplotlib...). \
It has no network and no processes; files under /workspace and /tmp, and variables, imports and \
definitions, are kept between calls (REPL-style). Set `restart: true` to start afresh.

A tool that fails raises `runtime.tools.ToolError` where it is called (`.message` says why); \
catch it to go on without that result.

The last expression's value is automatically captured as the return value -- you do **not** need to \
`print()` it, and it must be JSON-like (numbers, strings, lists, dicts): convert a DataFrame or a numpy \
value first (`float(x)`, `df.to_dict("records")`). A final assignment returns nothing. With `print()` \
output and a final expression, returns `{"output": "<printed text>", "result": <last expression>}`; \
with `print()` output only, `{"output": "<printed text>"}`; with neither, `{}`.\
"""


class _RunStdout(PrintCapture):
    """What the run printed, where the harness's return building reads a Monty capture."""

    def __init__(self) -> None:  # no Monty collector: the run's output comes from wasmrun
        self.text = ""

    @property
    def joined(self) -> str:
        return self.text


@dataclass
class _Session:
    """The agent run's wasmrun client and session (created at its first `run_code`)."""

    client: AsyncClient
    limits: RunLimits | None
    session_id: str | None = None

    async def id(self) -> str:
        if self.session_id is None:
            self.session_id = (await self.client.create_session(limits=self.limits)).session_id
        return self.session_id

    async def close_session(self) -> None:
        session_id, self.session_id = self.session_id, None
        if session_id is not None:
            try:
                await self.client.close_session(session_id)
            except Exception:  # expired or gone with the server: nothing is left to close
                pass


@dataclass
class WasmrunCodeModeToolset(CodeModeToolset[AgentDepsT]):
    """`CodeModeToolset` whose `run_code` runs in a wasmrun session (see the module's doc)."""

    url: str = field(default=DEFAULT_URL, kw_only=True)
    api_key: str | None = field(default=None, kw_only=True, repr=False)
    limits: RunLimits | None = field(default=None, kw_only=True)
    """The session's run limits (timeout_ms, memory_mb...); None: the server's defaults."""
    tool_wait_ms: int | None = field(default=None, kw_only=True)
    """How long a run waits for one batch of tool answers (wasmrun's default: 60 s)."""
    _wasmrun: _Session | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("mount", "os_access", "repl_store", "resource_limits", "monty_sandbox"):
            if getattr(self, name) is not None:
                raise UserError(f"`{name}` is Monty's; wasmrun runs the code (its limits: `limits`)")

    async def for_run_step(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        new_self = await super().for_run_step(ctx)
        if isinstance(new_self, WasmrunCodeModeToolset) and new_self is not self:
            new_self._wasmrun = self._wasmrun  # the same session for the whole agent run
        return new_self

    async def __aenter__(self) -> WasmrunCodeModeToolset[AgentDepsT]:
        await super().__aenter__()  # the wrapped toolset; its Monty pool is lazy and never used here
        self._wasmrun = _Session(AsyncClient(self.url, api_key=self.api_key), self.limits)
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        state, self._wasmrun = self._wasmrun, None
        try:
            return await super().__aexit__(*args)
        finally:
            if state is not None:
                await state.close_session()
                await state.client.close()

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        """The harness's tools, `run_code`'s description saying what runs the code here."""
        tools = await super().get_tools(ctx)
        run_code = tools[RUN_CODE_TOOL_NAME]
        described = run_code.tool_def.description or ""
        monty_head = _base_description(has_os=False, has_mount=False)
        rest = described[len(monty_head):] if described.startswith(monty_head) else ""
        description = DESCRIPTION_HEAD + rest.replace(_MONTY_GATHER, "")
        tools[RUN_CODE_TOOL_NAME] = replace(run_code, tool_def=replace(run_code.tool_def, description=description))
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        if not isinstance(tool, _RunCodeTool):
            return await super().call_tool(name, tool_args, ctx, tool)  # a native tool
        state = self._wasmrun
        if state is None:
            raise UserError("`WasmrunCodeModeToolset` must be entered before calling `run_code`")
        if tool_args.get("restart", False):
            await state.close_session()
        execution = RunCodeExecution(parent_tool_call_id=ctx.tool_call_id or "pyd_ai_code_mode", capture=_RunStdout())
        result = await self._run(state, str(tool_args["code"]), ctx, tool, execution)
        return await self._complete(ctx, execution, result)

    async def _run(
        self, state: _Session, code: str, ctx: RunContext[AgentDepsT], tool: _RunCodeTool[AgentDepsT],
        execution: RunCodeExecution,
    ) -> Any:
        """The snippet as a run in the session, each batch of its calls answered through the framework."""
        parent = ctx.tool_manager
        assert parent is not None, "a tool is called with the run's tool manager"
        # The nested calls go through the wrapped toolset's tools, with the agent's capabilities (as the harness).
        tool_manager = ToolManager(
            toolset=self.wrapped, root_capability=parent.root_capability, ctx=ctx, tools=tool.wrapped_tools,
        )
        declared = [
            {"name": fn, "description": td.description or fn, "parameters": td.parameters_json_schema}
            for fn, td in tool.callable_defs.items()
        ]
        # One line, so the model's line n is the run's n + 1.
        bind = "; ".join(f"{fn} = _wasmrun_tools.{fn}" for fn in tool.callable_defs)
        prelude = f"from runtime import tools as _wasmrun_tools; {bind}\n" if bind else ""
        answer = await state.client.run_code(
            prelude + code, session_id=await state.id(), tools=declared or None, tool_wait_ms=self.tool_wait_ms,
        )
        while answer.status == "requires_action" and answer.tool_calls:
            results = await asyncio.gather(*(
                self._answer(call, execution, tool_manager, tool.sanitized_to_original) for call in answer.tool_calls
            ))
            answer = await state.client.submit_tool_results(answer.run_id, list(results))
        if execution.usage_limit_exceeded is not None:
            raise execution.usage_limit_exceeded
        assert isinstance(execution.capture, _RunStdout)
        execution.capture.text = answer.logs_preview
        if answer.status != "completed":
            raise ModelRetry(f"Runtime error:\n{execution.capture.prepend_to(_failure(answer))}")
        return None if isinstance(answer.output, UnsetType) else answer.output

    async def _answer(
        self, call: PendingToolCall, execution: RunCodeExecution, tool_manager: ToolManager[AgentDepsT],
        sanitized_to_original: dict[str, str],
    ) -> dict[str, Any]:
        """One call of the run's through the framework's nested-call path: its result, or its error."""
        try:
            call_id = execution.next_tool_call_id(max_tool_calls=self.max_tool_calls)
        except RuntimeError as exc:  # the snippet's nested-call budget (max_tool_calls)
            return {"call_id": call.call_id, "error": str(exc)}
        arguments = msgspec.json.decode(call.arguments)  # checked against the tool's schema by the server
        part = ToolCallPart(tool_name=sanitized_to_original.get(call.name, call.name), args=arguments, tool_call_id=call_id)
        execution.nested_calls[call_id] = part
        try:
            value = execution.finish(part, await run_nested_call(tool_manager, part))
        except Exception as exc:  # the tool's error, as the code sees it at the call
            return {"call_id": call.call_id, "error": f"{type(exc).__name__}: {exc}"}
        return {"call_id": call.call_id, "result": to_jsonable_python(value, bytes_mode="base64")}


def _failure(answer: ExecutionResult) -> str:
    """The failed run's error as the model reads it: its type and message (the traceback)."""
    error = answer.error
    return answer.summary if isinstance(error, UnsetType) else f"{error.type}: {error.message}"


@dataclass
class WasmrunCodeMode(CodeMode[AgentDepsT]):
    """`CodeMode` whose `run_code` runs on a wasmrun server (`url`), one session per agent run."""

    url: str = field(default=DEFAULT_URL, kw_only=True)
    api_key: str | None = field(default=None, kw_only=True, repr=False)
    limits: RunLimits | None = field(default=None, kw_only=True)
    tool_wait_ms: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.eager or self.speculate is not None:
            raise UserError("`eager` and `speculate` run code while the model streams, in Monty; not on wasmrun")

    def get_wrapper_toolset(self, toolset: AbstractToolset[AgentDepsT]) -> AbstractToolset[AgentDepsT] | None:
        return WasmrunCodeModeToolset(
            wrapped=toolset,
            tool_selector=self.tools,
            max_retries=self.max_retries,
            max_tool_calls=self.max_tool_calls,
            dynamic_catalog=self.dynamic_catalog,
            capability=self,
            url=self.url,
            api_key=self.api_key,
            limits=self.limits,
            tool_wait_ms=self.tool_wait_ms,
        )
