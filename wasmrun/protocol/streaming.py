"""Who listens to a run's output while it runs: the transport sets `RUN_OUTPUT`
for the call it answers as a stream (wire/events.py for /rpc, the MCP server
for a tool call that asked for progress or log notifications), and the run
methods hand the sandbox that listener (protocol/running.py). The same
transports set `RUN_TOOL_CALLS`: code mode (protocol/toolcalls.py) tells it each
batch of tool calls a run waits on, as an event, before the call's answer.

A call with `stream: true` that no transport listens to is refused (-32602
naming `stream`) rather than answered silently without streaming: its client
expected events and would wait for them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from wasmrun.protocol.errors import InvalidParams
from wasmrun.sandbox import OutputChunk

OutputListener = Callable[[list[OutputChunk]], None]

RUN_OUTPUT: ContextVar[OutputListener | None] = ContextVar("wasmrun_run_output", default=None)
# The JSON of a `tool_calls` event's params: {"run_id": ..., "tool_calls": [{run_id, call_id, name, arguments}]}
ToolCallsListener = Callable[[bytes], None]
RUN_TOOL_CALLS: ContextVar[ToolCallsListener | None] = ContextVar("wasmrun_run_tool_calls", default=None)

NOT_STREAMABLE = (
    "stream: true answers the call as an event stream: post it alone (not in a batch) to /rpc with"
    " `Accept: text/event-stream` (over MCP, ask for progress or log notifications instead)"
)


def output_listener(stream: bool) -> OutputListener | None:
    """The listener of this call's run output, if any; `stream` is what the call asked."""
    listener = RUN_OUTPUT.get()
    if stream and listener is None:
        raise InvalidParams(NOT_STREAMABLE, field="stream")
    return listener
