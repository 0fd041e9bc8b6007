"""Code mode (docs/code-mode.md): a run that calls the client's own tools, paused until it answers.

A run_code (fresh or in a session) or run_command may declare `tools`. The run itself goes
on in its worker as a task of this server's (`with_tools`); the call answers with the run's
result, or, as soon as the run calls tools, with `status: "requires_action"` and the pending
calls (run_id, call_id, name, arguments). `submit_tool_results` hands the answers to the
waiting run and answers the same way: its result, or its next calls. Over an event stream
(SSE on /rpc, MCP notifications) each batch is also sent as a `tool_calls` event while the
call stays open, then the same `requires_action` answer ends it; a submit_tool_results
streamed the same way (`stream: true` on /rpc, notifications asked for over MCP) carries the
run's output from there on, and its next batch as an event (`OutputRelay`).

Who may answer: only the tenant whose run it is (another tenant's submit is told the run does
not exist, as for an id that never was); call ids are unguessable (secrets.token_urlsafe in
the worker). Each batch is answered once, whole: a second submit, an unknown or missing call
id, or both `result` and `error` given, is -32602 naming the field, and nothing is sent.

A waiting run keeps its worker (its interpreter's memory lives there) and its tenant's run
slot: it counts against `max_concurrent_runs` as a running one does, bounded by
`tool_wait_ms` per batch. A run whose client never answers fails with ToolWaitTimeout; a
server restart loses its worker: the run is gone (a later submit: no such run) and a
session's state stays as it was before the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams
from wasmrun.protocol.streaming import RUN_OUTPUT, RUN_TOOL_CALLS, OutputListener, ToolCallsListener, output_listener
from wasmrun.protocol.types import (
    ExecutionResult,
    PendingToolCall,
    SubmitToolResultsParams,
    ToolDefinition,
)
from wasmrun.sandbox import OutputChunk, ToolAnswer, ToolAnswers, ToolBatch, ToolLimits, ToolSpec

logger = logging.getLogger("wasmrun.toolcalls")

ToolSink = Callable[[ToolBatch], None]
# How the call that started the run shapes its result (run_command: exit_code, stdout, stderr). A
# run's own result reaches the caller of a later submit_tool_results, which shapes it the same way.
ResultShape = Callable[[ExecutionResult], ExecutionResult]
RESULT_SHAPE: contextvars.ContextVar[ResultShape | None] = contextvars.ContextVar("wasmrun_result_shape", default=None)
# How long a run that ended while nobody listened keeps its result for a late submit_tool_results.
KEEP_ENDED_S = 300.0
_encode = msgspec.json.Encoder().encode


def tool_specs(tools: Sequence[ToolDefinition], field: str = "tools") -> list[ToolSpec]:
    """The declared tools as the sandbox takes them; a repeated name or a `parameters` that is
    no JSON Schema of an object is -32602 naming it."""
    seen: set[str] = set()
    specs = []
    for i, tool in enumerate(tools):
        where = f"{field}[{i}]"
        if tool.name in seen:
            raise InvalidParams(f"tool {tool.name!r} is declared twice", field=f"{where}.name")
        seen.add(tool.name)
        schema = tool.parameters
        if schema.get("type", "object") != "object":
            raise InvalidParams("a tool's parameters must be the JSON Schema of an object", field=f"{where}.parameters")
        encoded = _encode(schema)
        problem = _schema_problem(encoded)
        if problem is not None:
            raise InvalidParams(problem, field=f"{where}.parameters")
        specs.append(ToolSpec(tool.name, tool.description, encoded))
    return specs


@functools.lru_cache(maxsize=512)
def _schema_problem(encoded: bytes) -> str | None:
    """Why a tool's JSON Schema is none, or None. Remembered by its bytes: an agent declares the
    same tools at every run, and checking one against its metaschema takes 1-3 ms."""
    import jsonschema

    try:
        schema = json.loads(encoded)
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"parameters is not a valid JSON Schema: {exc.message[:300]}"
    except RecursionError:
        return "parameters is nested too deeply"
    return None


def tool_limits(wait_ms: int | None) -> ToolLimits:
    return ToolLimits() if wait_ms is None else msgspec.structs.replace(ToolLimits(), wait_ms=wait_ms)


class ToolCallsEvent(msgspec.Struct):
    """The params of a `tool_calls` event: the batch a run waits on, as `requires_action` lists it."""

    run_id: str
    tool_calls: list[PendingToolCall]


class OutputRelay:
    """A code-mode run's output listener: it passes the run's output on to the client of the call
    that waits on the run now (the call that started it, then each submit_tool_results), and to
    no one between them. A run outlives the call that started it, and its output sink is fixed
    when it starts, so the sink is this relay and each call points it at its own client."""

    def __init__(self, output: OutputListener | None, tool_calls: ToolCallsListener | None) -> None:
        self.output = output
        self.tool_calls = tool_calls

    def __call__(self, chunks: list[OutputChunk]) -> None:
        if self.output is not None:
            self.output(chunks)

    def point(self, output: OutputListener | None, tool_calls: ToolCallsListener | None) -> None:
        self.output, self.tool_calls = output, tool_calls


_RELAY: contextvars.ContextVar[OutputRelay | None] = contextvars.ContextVar("wasmrun_output_relay", default=None)


@contextlib.contextmanager
def relayed_output(declares_tools: bool) -> Iterator[None]:
    """Around a run method whose run may call tools: the transport's output listener (if any)
    is reached through the run's `OutputRelay`. One relay per call: run_command's run_code
    inside keeps the relay run_command made (so the relay is the one facing the client)."""
    if not declares_tools or _RELAY.get() is not None:
        yield
        return
    listener = RUN_OUTPUT.get()
    relay = OutputRelay(listener, RUN_TOOL_CALLS.get())
    relaying = _RELAY.set(relay)
    listening = RUN_OUTPUT.set(relay if listener is not None else None)  # streamed only if the call is
    try:
        yield
    finally:
        RUN_OUTPUT.reset(listening)
        _RELAY.reset(relaying)


class _WaitingRun:
    """A run with tools, going on as a task, and the batch it waits on (if any)."""

    def __init__(self, run_id: str, owner: str, limits: ToolLimits) -> None:
        self.run_id = run_id
        self.owner = owner
        self.limits = limits
        self.relay = _RELAY.get() or OutputRelay(None, None)
        self.batches: asyncio.Queue[ToolBatch] = asyncio.Queue()
        self.pending: dict[str, PendingToolCall] | None = None  # the batch not yet answered
        self.task: asyncio.Task[ExecutionResult] | None = None
        self.listeners = 0  # calls awaiting its next step now
        self.shape = RESULT_SHAPE.get()  # what the starting call makes of the run's result


_runs: dict[str, _WaitingRun] = {}  # run id -> its run, while it can still be answered


def waiting_runs() -> int:
    """Runs with tools in flight on this server (for docs/code-mode.md's measurements and tests)."""
    return len(_runs)


async def with_tools(
    ctx: Context, run_id: str, limits: ToolLimits, body: Callable[[ToolSink | None], Awaitable[ExecutionResult]],
) -> ExecutionResult:
    """`body(on_tools)` (the run, to its spec result) as a task; its result, or its first calls.
    The run method is inside `relayed_output`, so the run's output reaches this call's client."""
    run = _WaitingRun(run_id, ctx.caller.tenant, limits)
    run.task = asyncio.ensure_future(body(run.batches.put_nowait))
    _runs[run_id] = run
    run.task.add_done_callback(lambda _task: _forget_later(run))
    return await _next(run)


def _forget_later(run: _WaitingRun) -> None:
    if run.listeners:
        return  # its listener answers with the result and forgets it
    def forget() -> None:
        if _runs.get(run.run_id) is run:
            del _runs[run.run_id]

    asyncio.get_running_loop().call_later(KEEP_ENDED_S, forget)


async def _next(run: _WaitingRun) -> ExecutionResult:
    """The run's next step: its result once it ends, or `requires_action` with its next batch
    (sent first as a `tool_calls` event if the waiting call listens to events)."""
    assert run.task is not None
    run.listeners += 1
    getter = asyncio.ensure_future(run.batches.get())
    try:
        done, _ = await asyncio.wait({run.task, getter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        run.listeners -= 1
        if not getter.done():
            getter.cancel()
        tell = run.relay.tool_calls
        run.relay.point(None, None)  # this call's client hears no more of the run
    if getter in done and not getter.cancelled():
        batch = getter.result()
        calls = [
            PendingToolCall(run.run_id, call.call_id, call.name, msgspec.Raw(call.arguments_json))
            for call in batch.calls
        ]
        run.pending = {call.call_id: call for call in calls}
        if tell is not None:
            tell(_encode(ToolCallsEvent(run.run_id, calls)))
        return _requires_action(run.run_id, calls)
    if _runs.get(run.run_id) is run:
        del _runs[run.run_id]
    return run.task.result()  # an RPCError the run raised (quota, busy) is the call's


def _requires_action(run_id: str, calls: list[PendingToolCall]) -> ExecutionResult:
    names = ", ".join(dict.fromkeys(call.name for call in calls))
    return ExecutionResult(
        status="requires_action", run_id=run_id,
        summary=f"waiting for {len(calls)} tool call(s): {names}; answer with submit_tool_results",
        output_blobs=[], logs_preview="", tool_calls=calls,
    )


def _answer(run: _WaitingRun, i: int, call_id: str, result: Any, error: Any) -> ToolAnswer:
    where = f"results[{i}]"
    if (result is UNSET) == (error is UNSET):
        raise InvalidParams("give either result or error for each call, not both nor neither", field=where)
    if error is not UNSET:
        return ToolAnswer(call_id, error=str(error))
    try:
        raw = json.dumps(result, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        raise InvalidParams("result must be JSON (no NaN or infinity)", field=f"{where}.result") from None
    except UnicodeEncodeError:
        raise InvalidParams("result holds a lone surrogate: not UTF-8 text", field=f"{where}.result") from None
    if len(raw) > run.limits.max_result_bytes:
        # The run learns it as the call's error (ToolResultTooLarge) rather than taking the bytes.
        return ToolAnswer(call_id, refused_bytes=len(raw))
    return ToolAnswer(call_id, result_json=raw)


async def submit_tool_results(ctx: Context, p: SubmitToolResultsParams) -> ExecutionResult:
    listener = output_listener(p.stream)  # before anything is sent: a stream nobody hears is refused
    run = _runs.get(p.run_id)
    if run is None or run.owner != ctx.caller.tenant:  # another tenant's run is no run of its
        raise InvalidParams(f"no run {p.run_id[:128]!r} waits for tool results", field="run_id")
    pending = run.pending
    if pending is None:
        raise InvalidParams(
            "this run's tool calls were answered already; it waits for no other now", field="results",
        )
    answers = []
    for i, item in enumerate(p.results):
        if item.call_id not in pending:
            message = f"call {item.call_id[:128]!r} is not a pending call of this run"
            raise InvalidParams(message, field=f"results[{i}].call_id")
        answers.append(_answer(run, i, item.call_id, item.result, item.error))
    given = [a.call_id for a in answers]
    if len(set(given)) != len(given):
        raise InvalidParams("a call is answered twice in results", field="results")
    missing = sorted(set(pending) - set(given))
    if missing:
        raise InvalidParams(
            f"results must answer every pending call: {len(missing)} missing ({', '.join(missing[:5])})", field="results"
        )
    run.pending = None  # claimed: a concurrent submit is told it was answered
    run.relay.point(listener, RUN_TOOL_CALLS.get())  # the run's output from here on reaches this call's client
    try:  # (False: the run stopped waiting meanwhile, its tool_wait_ms passed: its result says so)
        await ctx.executor.answer_tools(ToolAnswers(run.run_id, answers))
    except BaseException:
        run.relay.point(None, None)
        raise
    result = await _next(run)
    # The run's result as the call that started it answers (run_command's exit_code, stdout, stderr).
    return result if run.shape is None else run.shape(result)

