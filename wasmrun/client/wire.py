"""How the typed client speaks JSON-RPC over HTTP: the request body, the answer
decoded into the result's Struct or raised as the exception of its error code,
and a streamed run's Server-Sent Events (docs/streaming.md). wasmrun/client/__init__.py
builds on it."""

from __future__ import annotations

import itertools
from typing import Any, Generic, TypeVar

import httpx2
import msgspec
from msgspec import UNSET, UnsetType

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
    Display,
    ExecuteSkillParams,
    ExecutionResult,
    Params,
    PendingToolCall,
    RunCodeParams,
)

T = TypeVar("T")

EVENT_STREAM = "text/event-stream"
OUTPUT_METHOD = "run/output"
DISPLAY_METHOD = "run/display"
TOOL_CALLS_METHOD = "run/tool_calls"

ERRORS: dict[int, type[RPCError]] = {
    cls.code: cls for cls in (ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError, ServerBusy)
}


class HTTPError(Exception):
    """The server answered with an HTTP status and no JSON-RPC body."""

    def __init__(self, status_code: int, text: str) -> None:
        super().__init__(f"HTTP {status_code}: {text[:500]}")
        self.status_code = status_code
        self.text = text


class _ErrorObject(msgspec.Struct):
    code: int
    message: str
    data: Any = None


class _Response(msgspec.Struct, Generic[T]):
    result: T | UnsetType = UNSET
    error: _ErrorObject | UnsetType = UNSET


class OutputEvent(msgspec.Struct, frozen=True):
    """Output a streamed run wrote: `stream` is "stdout", "stderr" or "log" (runtime.log
    lines, and the server's own markers: `truncated` when the output cap was reached,
    `dropped` characters when this client read too slowly for the server to keep them)."""

    stream: str
    text: str
    dropped: int = 0
    truncated: bool = False


class DisplayEvent(msgspec.Struct, frozen=True):
    """A display result a streamed run showed (`display(obj)`, a last expression,
    `plt.show()`), as it happened; the result's `displays` hold them all again."""

    display: Display


class ToolCallsEvent(msgspec.Struct, frozen=True):
    """A code-mode run waits on these calls of the client's tools (docs/code-mode.md): the
    same calls as the `requires_action` result that follows; answer them with
    `submit_tool_results` (or `submit_tool_results_stream`)."""

    run_id: str
    tool_calls: list[PendingToolCall]


class _Message(msgspec.Struct):
    """One event's JSON-RPC message: a notification, or the call's response."""

    method: str | UnsetType = UNSET
    params: msgspec.Raw = msgspec.Raw(b"null")


class EventParser:
    """Server-Sent Events, line by line: the `data` of each complete event."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> bytes | None:
        if not line:
            data, self._data = self._data, []
            return "\n".join(data).encode() if data else None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None  # comments (keep-alives) and other fields


StreamEvent = OutputEvent | DisplayEvent | ToolCallsEvent | ExecutionResult


def decode_event(data: bytes) -> StreamEvent:
    message = msgspec.json.decode(data, type=_Message)
    if message.method == OUTPUT_METHOD:
        return msgspec.json.decode(message.params, type=OutputEvent)
    if message.method == DISPLAY_METHOD:
        return msgspec.json.decode(message.params, type=DisplayEvent)
    if message.method == TOOL_CALLS_METHOD:
        return msgspec.json.decode(message.params, type=ToolCallsEvent)
    return decode_result(data, 200, ExecutionResult)


def decode_result(content: bytes, status: int, result_type: type[T]) -> T:
    try:
        answer = msgspec.json.decode(content, type=_Response[result_type])  # type: ignore[valid-type]
    except msgspec.DecodeError:
        raise HTTPError(status, content.decode("utf-8", "replace")) from None
    if answer.error is not UNSET:
        raise rpc_error(answer.error.code, answer.error.message, answer.error.data)
    if answer.result is UNSET:
        raise HTTPError(status, content.decode("utf-8", "replace"))
    result: T = answer.result
    return result


def is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip() == EVENT_STREAM


def ended_early(response: httpx2.Response) -> HTTPError:
    return HTTPError(response.status_code, "the event stream ended before the run's result")


def rpc_error(code: int, message: str, data: Any = None) -> RPCError:
    """The exception for a JSON-RPC error object, typed by its code."""
    cls = ERRORS.get(code, RPCError)
    details: dict[str, Any] | None = data if isinstance(data, dict) or data is None else {"data": data}
    error = cls(message, **(details or {})) if cls is InvalidParams else cls(message, details)
    if cls is RPCError:
        error.code = code
    return error


def base_url_of(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix("/rpc")


def request_headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def plain_params(params: Params | dict[str, Any]) -> dict[str, Any]:
    """Params without the members left out (the spec's servers need not take `null`)."""
    plain = msgspec.to_builtins(params) if isinstance(params, Params) else params
    limits = plain.get("limits")
    if isinstance(params, (RunCodeParams, ExecuteSkillParams)) and isinstance(limits, dict):
        plain["limits"] = {key: value for key, value in limits.items() if value is not None} or None
    if plain.get("stream") is False:  # an extension: not sent unless asked for
        del plain["stream"]
    return {key: value for key, value in plain.items() if value is not None}


class Calls:
    """Encoding calls and decoding answers, shared by both clients."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def _request(self, method: str, params: Params | dict[str, Any]) -> bytes:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": plain_params(params)}
        return msgspec.json.encode(body)

    @staticmethod
    def _answer(response: httpx2.Response, result_type: type[T]) -> T:
        return decode_result(response.content, response.status_code, result_type)
