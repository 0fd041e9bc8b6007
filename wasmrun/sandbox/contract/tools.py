"""Code mode's contract: the client's tools a run declares, their limits, and the calls and
answers that cross between the run (suspended in its worker) and the protocol layer
(docs/code-mode.md). Plain data: msgspec Structs, sent over the worker's pipes as msgpack."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

# Error types of a run or of one call (a call's reach the guest as runtime.tools.ToolError).
TOOL_WAIT_TIMEOUT = "ToolWaitTimeout"  # the client did not answer within tool_wait_ms: the run fails
TOOL_CALL_LIMIT = "ToolCallLimitExceeded"  # more calls than max_tool_calls, or a batch too large: the run fails
UNKNOWN_TOOL = "UnknownTool"  # a call of a tool the run did not declare
INVALID_TOOL_ARGUMENTS = "InvalidToolArguments"  # arguments the tool's schema refuses
TOOL_FAILED = "ToolFailed"  # the client answered with an error
TOOL_RESULT_TOO_LARGE = "ToolResultTooLarge"  # the client's result was over max_tool_result_bytes


class ToolSpec(msgspec.Struct, frozen=True):
    """One tool of the client's: its name (a Python identifier), what it does, and the JSON
    Schema of its arguments (JSON text, checked as a schema by the protocol layer)."""

    name: str
    description: str = ""
    schema_json: bytes = b"{}"


class ToolLimits(msgspec.Struct, frozen=True):
    wait_ms: int = 60_000  # how long one batch may wait for the client's answers (not timeout_ms's)
    max_calls: int = 100  # calls a run may make in all (Pydantic AI's CodeMode allows 100)
    max_argument_bytes: int = 256 * 1024  # one batch's calls, as JSON
    max_result_bytes: int = 1024 * 1024  # one answer's result, as JSON


class ToolCall(msgspec.Struct, frozen=True):
    """A call the client must answer: `call_id` unguessable, `arguments_json` checked against its schema."""

    call_id: str
    name: str
    arguments_json: bytes


class ToolBatch(msgspec.Struct, frozen=True):
    """Calls the guest made together (an asyncio.gather's): they reach the client together."""

    run_id: str
    calls: list[ToolCall]


class ToolAnswer(msgspec.Struct, frozen=True):
    """The client's answer to one call: its result (JSON text) or its error message."""

    call_id: str
    result_json: bytes | None = None
    error: str | None = None
    refused_bytes: int = 0  # the result's size, when it was over max_result_bytes and not sent


class ToolAnswers(msgspec.Struct, frozen=True):
    run_id: str
    answers: list[ToolAnswer]


ToolSink = Callable[[ToolBatch], None]  # where a run's batches go (a worker's pipe, an event loop)
