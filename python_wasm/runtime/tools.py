"""The client's own tools, callable from inside a run ("code mode", docs/code-mode.md).

A run may declare tools (`tools` on run_code, a session's run, run_command): each is
a function of the client's, which the client runs. Here each is one callable:

    from runtime import tools
    weather = tools.get_weather(city="Paris")            # plain: waits for the answer
    a, b = await asyncio.gather(tools.a(), tools.b())   # awaited: both reach the client together

Called while an asyncio event loop runs (async code), a tool call returns an awaitable;
the calls made before the loop next runs (all of a `gather`'s) go to the client as one
batch. Called plainly (no loop running), it waits for the answer and returns it.

The run waits in the host while the client runs its tools: that time is not the run's
CPU and does not count against `timeout_ms` (`tool_wait_ms` bounds it). The host checks
each call's arguments against the tool's JSON Schema; an unknown tool, bad arguments or
a failure the client reports raise `ToolError` here, with the host's or client's message.
"""

from __future__ import annotations

import json

import _wasmrun

__all__ = ["ToolError"]


class ToolError(Exception):
    """A tool call failed: unknown tool, arguments its schema refuses, or the client's own error.
    `type` says which (UnknownTool, InvalidToolArguments, ToolFailed, ...), `tool` names the tool."""

    def __init__(self, tool: str, type: str, message: str) -> None:
        super().__init__(f"{tool}: {message}")
        self.tool = tool
        self.type = type
        self.message = message


def _call_batch(calls: list[tuple[str, dict]]) -> list:
    """One host call for `calls` (name, arguments): their answers, in order (a ToolError for a failed one)."""
    try:
        payload = json.dumps(
            [{"name": name, "arguments": arguments} for name, arguments in calls],
            ensure_ascii=False, allow_nan=False,
        ).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError) as exc:
        raise ToolError(calls[0][0], "InvalidToolArguments", f"arguments must be JSON: {exc}") from None
    answers = json.loads(_wasmrun.tool_call(payload))
    out = []
    for (name, _), answer in zip(calls, answers, strict=False):
        if answer.get("ok"):
            out.append(answer.get("result"))
        else:
            error = answer.get("error") or {}
            out.append(ToolError(name, str(error.get("type", "ToolFailed")), str(error.get("message", ""))))
    return out


class _Batch:
    """The awaited calls waiting for the event loop's next turn, sent together then."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, dict, object]] = []  # (name, arguments, future)

    def add(self, loop, name: str, arguments: dict):
        future = loop.create_future()
        if not self.pending:
            loop.call_soon(self.flush)
        self.pending.append((name, arguments, future))
        return future

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        try:
            answers = _call_batch([(name, arguments) for name, arguments, _ in pending])
        except BaseException as exc:  # the whole batch failed (or the run is being stopped)
            for _, _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, future), answer in zip(pending, answers, strict=False):
            if future.done():  # cancelled meanwhile
                continue
            if isinstance(answer, ToolError):
                future.set_exception(answer)
            else:
                future.set_result(answer)


_BATCH = _Batch()


def _running_loop():
    import sys

    events = sys.modules.get("asyncio.events")  # no asyncio imported: no loop can be running
    return events._get_running_loop() if events is not None else None


class _Tool:
    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args, **arguments):
        if args:
            if len(args) == 1 and isinstance(args[0], dict) and not arguments:
                arguments = dict(args[0])
            else:
                raise TypeError(f"tools.{self.__name__}() takes keyword arguments (or one dict of them)")
        loop = _running_loop()
        if loop is not None:
            return _BATCH.add(loop, self.__name__, arguments)
        (answer,) = _call_batch([(self.__name__, arguments)])
        if isinstance(answer, ToolError):
            raise answer
        return answer

    def __repr__(self) -> str:
        return f"<tool {self.__name__}>"


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Tool(name)  # the host says whether the run declared it (UnknownTool)
