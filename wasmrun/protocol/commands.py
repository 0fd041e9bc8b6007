"""run_command (an extension, docs/commands.md): a command line run by the guest's shell.

The shell lives inside the sandbox (python_wasm/runtime/commands.py: just-bash over the
run's own files, `python` and `pip` on the sandbox's interpreter), so a command is a run
like any other: this method hands run_code (in a fresh sandbox, or in `session_id`'s) a
one-expression program that calls `runtime.commands.run` and answers its exit code. Every
limit, quota, audit record and metric of run_code applies unchanged, and the session
keeps what the command wrote.

What a process gives that a run does not, its two streams apart, comes from the run's
output as it is written: the run is always streamed to a listener here, which keeps each
stream's text (the sandbox caps them together at the run's output_bytes) and passes the
chunks on to the caller's own listener when the call itself streams.

The program's data (the command, cwd, env, stdin) is JSON inside a Python string literal
(`repr` of the JSON text), never spliced into code: whatever a client sends stays data.
"""

from __future__ import annotations

import json

import msgspec
from msgspec import UNSET, UnsetType

from wasmrun.protocol import sessions, toolcalls
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams
from wasmrun.protocol.run_result import failure_summary
from wasmrun.protocol.streaming import RUN_OUTPUT, OutputListener, output_listener
from wasmrun.protocol.types import (
    MAX_COMMAND_BYTES,
    CommandResult,
    ExecutionResult,
    RunCodeParams,
    RunCommandParams,
    RunError,
)
from wasmrun.sandbox import OutputChunk

# One expression: it defines no name in a session's globals (a session's `main` or `json`
# stays the user's), and its value, the exit code, is the run's output.
PROGRAM = "__import__('runtime.commands', fromlist=['run']).run(**__import__('json').loads({data}))"


class _Streams:
    """Each stream's text as the run writes it; the caller's listener gets every chunk too."""

    def __init__(self, passed_on: OutputListener | None) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.truncated = False
        self._passed_on = passed_on

    def __call__(self, chunks: list[OutputChunk]) -> None:
        for chunk in chunks:
            if chunk.stream == "stdout":
                self.stdout.append(chunk.text)
            elif chunk.stream == "stderr":
                self.stderr.append(chunk.text)
            self.truncated = self.truncated or chunk.truncated
        if self._passed_on is not None:
            # The shell program's own value (the exit code) is shown as the run's main display:
            # a command has none, so its listener is not told of it.
            passed = [chunk for chunk in chunks if not _is_main_display(chunk)]
            if passed:
                self._passed_on(passed)


def _is_main_display(chunk: OutputChunk) -> bool:
    return chunk.stream == "display" and json.loads(chunk.text).get("main") is True


def _head(text: str, most: int = 200) -> str:
    return text if len(text) <= most else text[:most] + "..."


def _said_on_stderr(streams: _Streams, exit_code: int) -> str:
    """A failed command's last line on stderr, in the summary a model reads first."""
    lines = "".join(streams.stderr).strip().splitlines()
    return f" Its stderr ends: {_head(lines[-1])!r}" if exit_code and lines else ""


def _checked_text(value: str, field: str, nul_allowed: bool = False) -> None:
    """Text the guest can be given: no lone surrogate (it has no UTF-8 form) and, but in
    stdin (data, which a pipe carries whatever its bytes), no NUL: no file name, argument or
    variable holds one."""
    if not nul_allowed and "\x00" in value:
        raise InvalidParams(f"{field} holds a NUL character, which no command line, path or variable can", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidParams(f"{field} is not valid Unicode text (a lone surrogate)", field=field) from None


def _program(p: RunCommandParams) -> str:
    words = [p.command] if isinstance(p.command, str) else p.command
    for i, word in enumerate(words):
        _checked_text(word, "command" if isinstance(p.command, str) else f"command[{i}]")
    if sum(len(word) for word in words) > MAX_COMMAND_BYTES:
        raise InvalidParams(f"command is over {MAX_COMMAND_BYTES} characters", field="command")
    if p.cwd is not None:
        _checked_text(p.cwd, "cwd")
    for name, value in p.env.items():
        _checked_text(value, f"env.{name}")
    if p.stdin is not None:
        _checked_text(p.stdin, "stdin", nul_allowed=True)
    data = {"command": p.command, "cwd": p.cwd, "env": p.env or None, "stdin": p.stdin}
    return PROGRAM.format(data=repr(json.dumps(data)))


async def run_command(ctx: Context, p: RunCommandParams) -> CommandResult:
    with toolcalls.relayed_output(bool(p.tools)):  # code mode: the client's output beyond the command's own
        return await _run_command(ctx, p)


async def _run_command(ctx: Context, p: RunCommandParams) -> CommandResult:
    program = _program(p)
    streams = _Streams(output_listener(p.stream))
    listening = RUN_OUTPUT.set(streams)
    # Code mode: a submit_tool_results that ends the run answers as this call does (toolcalls.py).
    shaping = toolcalls.RESULT_SHAPE.set(lambda result: _command_result(p, streams, result))
    try:
        result = await sessions.run_code(ctx, RunCodeParams(
            language="python", code=program, mount_skills=p.mount_skills, input_blobs=p.input_blobs,
            limits=p.limits, session_id=p.session_id, stream=True, packages=p.packages,
            tools=p.tools, tool_wait_ms=p.tool_wait_ms,  # code mode: `python` in the command may call them
        ))
    finally:
        toolcalls.RESULT_SHAPE.reset(shaping)
        RUN_OUTPUT.reset(listening)
    return _command_result(p, streams, result)


def _command_result(p: RunCommandParams, streams: _Streams, result: ExecutionResult) -> CommandResult:
    """The shell run's result as a command's: its exit code, stdout and stderr."""
    fields = {name: getattr(result, name) for name in result.__struct_fields__}
    exit_code: int | UnsetType = UNSET
    if result.status == "completed" and isinstance(result.output, msgspec.Raw):
        exit_code = msgspec.json.decode(result.output, type=int)
        fields["output"] = exit_code
        # The exit code is the program's value, shown as its main display: not the command's.
        shown = [d for d in result.displays or () if not d.main]
        fields["displays"] = shown or UNSET
        took = result.usage.total_ms if result.usage else 0.0
        fields["summary"] = f"The command exited {exit_code} after {took:.0f} ms." + _said_on_stderr(streams, exit_code)
    elif result.error:
        # A limit stopped the shell: its first line says which; the traceback of our one-line
        # program and the shell's frames say nothing to the caller, the command does.
        first = result.error.message.split("\n", 1)[0].rstrip(":; ")
        what = p.command if isinstance(p.command, str) else " ".join(p.command)
        message = f"{first} (while running the command {_head(what)!r})"
        fields["error"] = RunError(type=result.error.type, message=message)
        fields["summary"] = failure_summary(result.error.type, message)
    return CommandResult(
        **fields, exit_code=exit_code, stdout="".join(streams.stdout), stderr="".join(streams.stderr),
        output_truncated=streams.truncated,
    )
