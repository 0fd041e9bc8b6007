"""Code mode's host side: a run's call of the client's tools suspends it until they are answered.

The guest (python_wasm/runtime/tools.py) sends a batch of calls, JSON `[{name, arguments}]`,
through the `tool_call` host call. Each is checked here (a declared tool, arguments its
JSON Schema accepts, the run's call and byte limits); the valid ones get unguessable ids and
go to the process's *sink* as one ToolBatch (a worker's: its pipe to the server,
poolworker.py; the in-process executor's: its event loop), and the run's thread waits on
an Event for the ToolAnswers that `answer()` hands it from another thread (a worker's
control-pipe reader, or the event loop). While it waits the run uses no CPU (its budget
is its thread's CPU clock) and its wall-clock deadline is pushed back (`pause`), so
`timeout_ms` counts the run's own time only; `tool_wait_ms` bounds the wait itself.

The reply to the guest, JSON in the calls' order: `{"ok": true, "result": ...}` or
`{"ok": false, "error": {"type", "message"}}` (raised there as runtime.tools.ToolError).
"""

from __future__ import annotations

import functools
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.tools import (
    INVALID_TOOL_ARGUMENTS,
    TOOL_CALL_LIMIT,
    TOOL_FAILED,
    TOOL_RESULT_TOO_LARGE,
    TOOL_WAIT_TIMEOUT,
    UNKNOWN_TOOL,
    ToolAnswer,
    ToolAnswers,
    ToolBatch,
    ToolCall,
    ToolLimits,
    ToolSink,
    ToolSpec,
)

WAIT_SLICE_S = 0.05  # how often a waiting run looks whether it was interrupted meanwhile


class _GuestCall(msgspec.Struct):
    name: str
    arguments: msgspec.Raw = msgspec.Raw(b"{}")


_decode_calls = msgspec.json.Decoder(list[_GuestCall]).decode
_encode_json = msgspec.json.Encoder().encode
_OK_RESULT = b'{"ok":true,"result":'


@functools.lru_cache(maxsize=512)
def _validator(schema_json: bytes) -> Any:
    """A tool's JSON Schema compiled into its validator, once per process and schema bytes: an
    agent declares the same tools at every run (a validator's making is most of a call's check)."""
    import jsonschema  # only a run that calls a tool pays for its import

    schema = json.loads(schema_json)
    return jsonschema.validators.validator_for(schema)(schema)


class _Waiting:
    def __init__(self, call_ids: set[str]) -> None:
        self.call_ids = call_ids
        self.answers: dict[str, ToolAnswer] | None = None
        self.event = threading.Event()


_lock = threading.Lock()
_waiting: dict[str, _Waiting] = {}  # run id -> its batch waiting for answers
_sinks: dict[str, ToolSink] = {}  # run id -> where its batches go ("" : every run of this process)


def set_sink(sink: ToolSink | None, run_id: str = "") -> None:
    """Where the batches of `run_id` go ("": of every run here, a worker process's pipe)."""
    with _lock:
        if sink is None:
            _sinks.pop(run_id, None)
        else:
            _sinks[run_id] = sink


def answer(answers: ToolAnswers) -> bool:
    """From any thread: hand the client's answers to the run waiting for them. False when
    that run waits for no such batch (it ended, or the ids are not its pending calls' ids):
    the protocol layer checked them, so this is a race it has lost, never a partial answer."""
    with _lock:
        waiting = _waiting.get(answers.run_id)
        given = {a.call_id: a for a in answers.answers}
        if waiting is None or waiting.answers is not None or set(given) != waiting.call_ids:
            return False
        waiting.answers = given
    waiting.event.set()
    return True


def _refusal(kind: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"type": kind, "message": message}}


class ToolSession:
    """One run's tools: checks its calls, counts them, and waits for their answers."""

    def __init__(self, run_id: str, tools: list[ToolSpec], limits: ToolLimits) -> None:
        self.run_id = run_id
        self.tools = {tool.name: tool for tool in tools}
        self.limits = limits
        self.calls_made = 0
        self.interrupted: threading.Event | None = None  # the run's watch's: set when it must stop
        self.pause: Callable[[float], None] = lambda seconds: None  # pushes the run's deadline back

    def _problem(self, call: _GuestCall) -> dict[str, Any] | None:
        tool = self.tools.get(call.name)
        if tool is None:
            declared = ", ".join(sorted(self.tools)) or "none"
            return _refusal(UNKNOWN_TOOL, f"the run declared no tool {call.name[:100]!r} (declared: {declared})")
        try:
            arguments = json.loads(bytes(call.arguments))
        except (ValueError, RecursionError):
            return _refusal(INVALID_TOOL_ARGUMENTS, "the arguments are not JSON the host can read")
        if not isinstance(arguments, dict):
            return _refusal(INVALID_TOOL_ARGUMENTS, "the arguments must be an object of named arguments")
        try:
            problem = next(iter(_validator(tool.schema_json).iter_errors(arguments)), None)
        except RecursionError:
            return _refusal(INVALID_TOOL_ARGUMENTS, "the arguments are nested too deeply")
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "(the arguments)"
            return _refusal(INVALID_TOOL_ARGUMENTS, f"at {where}: {problem.message[:500]}")
        return None

    def handle(self, raw: bytes) -> bytes:
        """The guest's batch `raw` answered (see the module docstring); a batch past the
        run's limits, an unanswered wait or an interrupt stops the run (RunAborted)."""
        try:
            calls = _decode_calls(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise errors.RunAborted(errors.HOST_CALL_ERROR, "the guest sent tool calls the host cannot read") from None
        self.calls_made += len(calls)
        if self.calls_made > self.limits.max_calls:
            raise errors.RunAborted(
                TOOL_CALL_LIMIT, f"the run made more than {self.limits.max_calls} tool calls (max_tool_calls)"
            )
        replies: list[dict[str, Any] | bytes | None] = []
        pending: list[ToolCall] = []
        for call in calls:
            problem = self._problem(call)
            replies.append(problem)
            if problem is None:
                pending.append(ToolCall(secrets.token_urlsafe(16), call.name, bytes(call.arguments)))
        if pending:
            answers = self._wait(pending)
            asked = iter(pending)
            for i, reply in enumerate(replies):
                if reply is None:
                    replies[i] = self._reply(answers[next(asked).call_id])
        # A result is the client's JSON as the server wrote it (valid, UTF-8): spliced in, not parsed again.
        return b"[" + b",".join(r if isinstance(r, bytes) else _encode_json(r) for r in replies) + b"]"

    def _reply(self, answer: ToolAnswer) -> dict[str, Any] | bytes:
        if answer.error is not None:
            return _refusal(TOOL_FAILED, answer.error[: self.limits.max_result_bytes])
        raw = answer.result_json if answer.result_json is not None else b"null"
        size = answer.refused_bytes or len(raw)
        if size > self.limits.max_result_bytes:
            return _refusal(
                TOOL_RESULT_TOO_LARGE,
                f"the result was {size} bytes of JSON, over max_tool_result_bytes ({self.limits.max_result_bytes});"
                " the client may store a large result as a blob and return its id",
            )
        return _OK_RESULT + raw + b"}"

    def _wait(self, calls: list[ToolCall]) -> dict[str, ToolAnswer]:
        with _lock:
            sink = _sinks.get(self.run_id) or _sinks.get("")
        if sink is None:  # no client can answer here (a run outside the server, `wasmrun run`)
            raise errors.RunAborted(TOOL_WAIT_TIMEOUT, "tool calls cannot be answered where this run runs")
        waiting = _Waiting({call.call_id for call in calls})
        with _lock:
            _waiting[self.run_id] = waiting
        budget = self.limits.wait_ms / 1000
        self.pause(budget)  # before the wait: the watchdog must not time the run out meanwhile
        started = time.monotonic()
        try:
            sink(ToolBatch(self.run_id, calls))
            while not waiting.event.wait(min(WAIT_SLICE_S, max(0.0, started + budget - time.monotonic()))):
                if self.interrupted is not None and self.interrupted.is_set():
                    raise errors.RunAborted(errors.INTERRUPTED, errors.interrupted())
                if time.monotonic() - started >= budget:
                    names = ", ".join(sorted({call.name for call in calls}))
                    raise errors.RunAborted(
                        TOOL_WAIT_TIMEOUT,
                        f"the client did not answer the call(s) of {names} within tool_wait_ms"
                        f" ({self.limits.wait_ms} ms)",
                    )
        finally:
            with _lock:
                _waiting.pop(self.run_id, None)
            self.pause(-max(0.0, budget - (time.monotonic() - started)))  # the unused part back
        assert waiting.answers is not None
        return waiting.answers
