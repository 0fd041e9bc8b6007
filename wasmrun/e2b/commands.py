"""envd's `process.Process` Connect RPCs: E2B's `commands.run`, `list` and `kill`.

What the SDK sends (e2b 2.63.0, connectrpc with envd's JSON codec): `POST
/process.Process/Start`, `content-type: application/connect+json`, a body of one Connect
envelope (a flags byte, a 4-byte big-endian length, the JSON of a StartRequest):
`{"process": {"cmd": "/bin/bash", "args": ["-l", "-c", CMD], "envs": {...}, "cwd": ...},
"stdin": false}`, with `connect-timeout-ms` the command's `timeout`. It reads back
envelopes of StartResponse: `{"event": {"start": {"pid": N}}}` first, then `{"event":
{"data": {"stdout"|"stderr": <base64 bytes>}}}`, then `{"event": {"end": {"exitCode": n,
"exited": true, "status": "exit status n"}}}`, and the end-of-stream envelope (flags 0x02)
`{}` or `{"error": {"code", "message"}}`. List and SendSignal are unary JSON.

A command is a `run_command` call (wasmrun/protocol/commands.py: the guest's shell,
`runtime.commands.run`, bash syntax over the session's own files, the values passed as
JSON data, never spliced into code) in the sandbox's session (its default context's),
streamed. It queues behind a cell or file call on the same context's lock, as one of the
context's cells: a command and a cell never share the session at once.

The SDK's Start is the same for `background=True` as for a foreground run, so the server
cannot tell them apart: a command runs to its end (within its timeout) whichever it is;
List shows it while it is queued or running, SendSignal ends its stream."""

from __future__ import annotations

import asyncio
import base64
import json
import posixpath
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from wasmrun.e2b.calls import Front, FrontError, read_body, read_json_object, whole_number
from wasmrun.e2b.control import env_vars
from wasmrun.e2b.guestfiles import failure
from wasmrun.e2b.interpreter import MAX_QUEUED_CELLS
from wasmrun.e2b.paths import e2b_path, relative
from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, HOME, E2BSandbox
from wasmrun.protocol.running import tenant_policy
from wasmrun.protocol.streaming import RUN_OUTPUT
from wasmrun.sandbox import OutputChunk

STREAM_TYPE = "application/connect+json"
END_STREAM = 0x02
COMPRESSED = 0x01
# A Start request is one command line: a megabyte is far past any agent's (bash's own
# ARG_MAX is 2 MiB of argv and environment together).
MAX_START_BODY = 1024 * 1024
MAX_ARGS = 4096
# Shells whose `-c SCRIPT` is bash syntax for the guest's shell; any other `cmd` is argv.
SHELLS = frozenset({"/bin/bash", "bash", "/usr/bin/bash", "/bin/sh", "sh", "/usr/bin/sh"})
NO_PTY = (
    "PTY is not available on wasmrun: a sandbox has no terminal. Use sandbox.commands.run(cmd)"
    " (foreground) or sandbox.run_code(...)"
)
NO_STDIN = (
    "a command's stdin stream (stdin=True, send_stdin) is not available on wasmrun: the command"
    " runs to its end in one run. Write the input to a file and redirect it (`cmd < file`)"
)
NO_CONNECT = "reconnecting to a command is not available on wasmrun: a command's output goes to the call that ran it"
KILLED = "signal: killed"
# The guest's own folders outside E2B's home that a command may start in (`cwd`): its root
# (listing its mounts: home, lib, skills, tmp, workspace) and its /tmp, and below /tmp.
GUEST_TMP = "/tmp"
GUEST_CWDS = frozenset({"/", GUEST_TMP})
CUT = (
    "wasmrun: the command's output was cut at the run's output limit (output_bytes, stdout and"
    " stderr together): write large output to a file and read it with files.read or head/tail"
)


@dataclass
class RunningCommand:
    """A command of the sandbox from its Start until its end: what List shows, and what
    SendSignal ends."""

    pid: int
    cmd: str
    args: list[str]
    envs: dict[str, str]
    cwd: str
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue, repr=False)
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    started: bool = False  # its run has begun (past the context's lock): a kill cannot stop the run
    killed: bool = False


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def _event(event: dict[str, Any]) -> bytes:
    return envelope({"event": event})


def _end_stream(code: str | None = None, message: str = "") -> bytes:
    return envelope({"error": {"code": code, "message": message}} if code else {}, END_STREAM)


def one_message(body: bytes) -> dict[str, Any]:
    """The one message of a Connect streaming request body (an envelope), as a JSON object."""
    if len(body) < 5:
        raise FrontError(400, "the request is not a Connect envelope (application/connect+json)")
    flags, length = struct.unpack(">BI", body[:5])
    if flags & COMPRESSED:
        raise FrontError(400, "compressed messages are not accepted: send them uncompressed")
    if length != len(body) - 5:
        raise FrontError(400, f"the envelope says {length} bytes, the body holds {len(body) - 5}")
    try:
        value = msgspec.json.decode(body[5:])
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise FrontError(400, "the message is not valid JSON (UTF-8)") from None
    if not isinstance(value, dict):
        raise FrontError(400, "the message must be a JSON object")
    return value


def _text(value: Any, name: str, most: int = MAX_START_BODY) -> str:
    if not isinstance(value, str) or "\x00" in value or len(value) > most:
        raise FrontError(400, f"{name} must be a string without NUL")
    return value


def parse_config(config: Any) -> tuple[str, list[str], str | list[str]]:
    """`cmd`, `args` and what the guest's shell runs: a `bash -c SCRIPT` as the script (bash
    syntax; the words after it are its $0, $1...), any other program as an argv list."""
    if not isinstance(config, dict):
        raise FrontError(400, "process must be an object with cmd, args, envs and cwd")
    cmd = _text(config.get("cmd", ""), "process.cmd")
    args = config.get("args") or []
    if not isinstance(args, list) or len(args) > MAX_ARGS:
        raise FrontError(400, f"process.args must be a list of at most {MAX_ARGS} strings")
    args = [_text(a, f"process.args[{i}]") for i, a in enumerate(args)]
    if not cmd:
        raise FrontError(400, "process.cmd must name the program to run")
    if cmd in SHELLS:
        # `-l`, `-e` and the like before `-c`: the guest's shell is a fresh non-login one each time.
        flags = 0
        while flags < len(args) and args[flags].startswith("-") and args[flags] != "-c":
            flags += 1
        if flags < len(args) - 1 and args[flags] == "-c":
            rest = args[flags + 2:]
            if not rest:
                return cmd, args, args[flags + 1]
            # bash -c SCRIPT NAME ARG...: the script sees them as $0 $1 ...; the guest's shell
            # takes an argv, so the script runs under `bash -c` of its own.
            return cmd, args, ["bash", "-c", args[flags + 1], *rest]
    return cmd, args, [cmd, *args]


def _command_cwd(value: Any) -> str:
    """The command's folder as the guest sees it: under /home/user (E2B's home, the
    session's files), by default /home/user itself; or one of the guest's own folders
    outside it (GUEST_CWDS: its root, where its mounts are, and /tmp), which frameworks
    start setup commands in (the OpenAI Agents SDK runs `mkdir -p ROOT` and its `tar`
    commands with `cwd="/"`). Anywhere else is refused: the guest has nothing there."""
    if value is None or value == "":
        return HOME
    text = _text(value, "process.cwd", 4096)
    if text.startswith("/"):
        normal = posixpath.normpath(text)
        if normal in GUEST_CWDS or normal.startswith(GUEST_TMP + "/"):
            return normal
    try:
        return e2b_path(relative(text))
    except FrontError as exc:
        raise FrontError(400, (
            f"cwd: {exc.message}; a command starts under {HOME} (the sandbox's files), under {GUEST_TMP}, or at /"
        )) from None


def _timeout_ms(front: Front, sandbox: E2BSandbox, request: Request) -> int:
    """The run's wall-clock limit: the SDK's `timeout` (its `connect-timeout-ms`) within the
    tenant's ceiling, or the tenant's ceiling when the SDK sets none (`timeout=0`)."""
    ceiling = tenant_policy(front.dispatcher.context.limits, sandbox.caller.limits).ceilings.timeout_ms
    asked = whole_number(request.headers.get("connect-timeout-ms", ""), digits=12)
    return ceiling if asked is None or asked <= 0 else min(asked, ceiling)


async def start(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    try:
        body = await read_body(request, MAX_START_BODY)
    except FrontError as exc:
        # A command too long is the caller's to shorten (InvalidArgumentException), not a
        # rate limit (resource_exhausted, which the SDK raises as RateLimitException).
        if exc.status == 413:
            raise FrontError(400, f"the command is over {MAX_START_BODY} bytes: write it to a file and run that") from None
        raise
    message = one_message(body)
    if message.get("pty") is not None:
        raise FrontError(501, NO_PTY)
    if message.get("stdin") is True:
        raise FrontError(501, NO_STDIN)
    config = message.get("process")
    cmd, args, command = parse_config(config)
    assert isinstance(config, dict)
    envs = env_vars(config.get("envs"), "process.envs")
    cwd = _command_cwd(config.get("cwd"))
    context = sandbox.contexts[DEFAULT_CONTEXT]
    if context.ended:
        raise FrontError(502, f"The sandbox {sandbox.sandbox_id} has ended")
    if len(context.cells) >= MAX_QUEUED_CELLS:
        raise FrontError(429, (
            f"this sandbox already has {len(context.cells)} cells, commands or calls running or queued, its most"
            f" ({MAX_QUEUED_CELLS}): wait for one to end before sending another"
        ))
    sandbox.next_pid += 1
    running = RunningCommand(sandbox.next_pid, cmd, args, envs, cwd)
    timeout_ms = _timeout_ms(front, sandbox, request)
    work = asyncio.get_running_loop().create_task(_run(front, sandbox, running, command, timeout_ms))
    running.task = work
    sandbox.commands[running.pid] = running
    context.cells.add(work)
    work.add_done_callback(context.cells.discard)
    work.add_done_callback(lambda _: sandbox.commands.pop(running.pid, None))
    running.queue.put_nowait(_event({"start": {"pid": running.pid}}))
    return CommandResponse(running, work)


class CommandResponse(StreamingResponse):
    """A command's events; `work` is the command's run, which holds its tenant's request
    place (front._Held) until it has ended or been dropped, whether or not its client stays."""

    def __init__(self, running: RunningCommand, work: asyncio.Task[None]) -> None:
        super().__init__(_envelopes(running), media_type=STREAM_TYPE)
        self.running, self.work = running, work


async def _envelopes(running: RunningCommand) -> AsyncIterator[bytes]:
    while (item := await running.queue.get()) is not None:
        yield item


def _end(exit_code: int, error: str | None = None) -> bytes:
    end: dict[str, Any] = {"exitCode": exit_code, "exited": exit_code >= 0,
                           "status": f"exit status {exit_code}" if exit_code >= 0 else KILLED}
    if error:
        end["error"] = error
    return _event({"end": end})


async def _run(front: Front, sandbox: E2BSandbox, running: RunningCommand, command: str | list[str], timeout_ms: int) -> None:
    """The command's run after what is queued before it on the context; its output sent
    as it is written, then its end. A command killed while still queued never runs."""
    queue = running.queue

    def on_output(chunks: list[OutputChunk]) -> None:
        for chunk in chunks:
            if running.killed or not isinstance(chunk, OutputChunk) or chunk.stream not in ("stdout", "stderr"):
                continue
            if chunk.text:
                data = base64.b64encode(chunk.text.encode("utf-8", "replace")).decode()
                queue.put_nowait(_event({"data": {chunk.stream: data}}))

    RUN_OUTPUT.set(on_output)
    context = sandbox.contexts[DEFAULT_CONTEXT]
    ending: list[bytes] = []
    try:
        async with context.lock:
            if running.killed:
                return
            if context.ended:
                raise FrontError(502, f"The sandbox {sandbox.sandbox_id} ended before this command ran: it was dropped")
            running.started = True
            # run_command (wasmrun/protocol/commands.py): the guest's shell in the session,
            # through run_code's own path (limits, quotas, audit), its output streamed
            # to on_output as it is written; busy on another server, it waits its turn.
            result = await front.in_turn(sandbox.caller, "run_command", {
                "command": command, "cwd": running.cwd, "env": running.envs, "stream": True,
                "session_id": context.session_id, "limits": {"timeout_ms": timeout_ms},
            })
        if not running.killed:
            ending = _outcome(result, running)
    except FrontError as exc:
        from wasmrun.e2b.envd import CONNECT_CODES  # envd imports this module

        ending = [_end_stream(CONNECT_CODES.get(exc.status, "internal"), exc.message)]
    finally:
        if not running.killed:
            for line in ending or [_end_stream("internal", "the command ended without an answer")]:
                queue.put_nowait(line)
            queue.put_nowait(None)


def _outcome(result: dict[str, Any], running: RunningCommand) -> list[bytes]:
    """The stream's last envelopes for a run that ended: the exit code, or why it has none."""
    if result.get("status") != "completed":
        kind, reason = failure(result)
        if kind in ("Timeout", "TimeoutError", "WallClockTimeout") or "timeout" in kind.lower():
            return [_end_stream("deadline_exceeded", f"the command ran past its timeout: {reason}")]
        if "output" in kind.lower():
            return [_end(1, f"{kind}: {reason}"), _end_stream()]
        return [_end(1, f"the command's run failed: {kind}: {reason}"), _end_stream()]
    code = result.get("exit_code")
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        return [_end_stream("internal", (
            "the sandbox's shell gave back no exit code: code run in the sandbox may have replaced"
            " part of the module it uses (runtime.commands); restart the code context to undo it"
        ))]
    if result.get("output_truncated"):
        # The command ran to its end, but the run's output cap (output_bytes, stdout and
        # stderr together) kept back some of what it wrote: said on stderr, where an agent
        # reads, and as the end's error (CommandResult.error), never a silent loss.
        note = CUT + "\n"
        cut = _event({"data": {"stderr": base64.b64encode(note.encode()).decode()}})
        return [cut, _end(code, CUT), _end_stream()]
    return [_end(code), _end_stream()]


def _unary(request: Request) -> None:
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind not in ("application/json", ""):
        raise FrontError(415, f"content-type {kind[:80]!r}: this method takes application/json")


async def _unary_body(request: Request) -> dict[str, Any]:
    _unary(request)
    return await read_json_object(request)


def _pid(body: dict[str, Any]) -> int:
    selector = body.get("process")
    if not isinstance(selector, dict):
        raise FrontError(400, "process must select a command by its pid")
    if "tag" in selector:
        raise FrontError(404, "no command has that tag: wasmrun's commands have no tags")
    pid = selector.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < 1 << 32:
        raise FrontError(400, "process.pid must be a whole number")
    return pid


async def list_commands(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    await _unary_body(request)
    return JSONResponse({"processes": [
        {"pid": c.pid, "config": {"cmd": c.cmd, "args": c.args, "envs": c.envs, "cwd": c.cwd}}
        for c in sandbox.commands.values()
    ]})


async def send_signal(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    """SIGKILL or SIGTERM for a command of this sandbox: its stream ends at once (exit -1,
    `signal: killed`); one still queued never runs. A run in progress is not interrupted
    midway (wasmrun's runs are not): it goes on to its end, within its timeout, and the
    sandbox's next call waits for it. Its output is no longer sent."""
    body = await _unary_body(request)
    running = sandbox.commands.get(_pid(body))
    if running is None or running.killed:
        raise FrontError(404, f"no running command has pid {body['process']['pid']}")
    running.killed = True
    sandbox.commands.pop(running.pid, None)  # gone from List at once, as a killed process is
    running.queue.put_nowait(_end(-1, KILLED))
    running.queue.put_nowait(_end_stream())
    running.queue.put_nowait(None)
    return JSONResponse({})


async def process_rpc(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    method = request.path_params["method"]
    if method == "Start":
        return await start(front, request, sandbox)
    if method == "List":
        return await list_commands(front, request, sandbox)
    if method == "SendSignal":
        return await send_signal(front, request, sandbox)
    if method == "Connect":
        raise FrontError(501, NO_CONNECT)
    if method in ("SendInput", "StreamInput", "CloseStdin"):
        raise FrontError(501, NO_STDIN)
    if method == "Update":
        raise FrontError(501, NO_PTY)
    raise FrontError(404, f"process {method[:80]} is not a method of envd's process service")
