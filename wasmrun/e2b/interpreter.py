"""The code interpreter's endpoints (`E2b-Sandbox-Port: 49999`): `POST /execute`
streaming line-delimited JSON events, and code contexts (each a session of its own).

A cell runs as session runs: IPython-style, its last expression is the main result. It is
split by the doors' cell splitter, as the Jupyter kernel splits it (wasmrun/doors/cells.py): a `!cmd` line, and
an install line (`!pip install x`, `%pip install -q x`, `!{sys.executable} -m pip install x`),
is a command of the guest's shell in the same session (its `pip install` installs on demand:
docs/packages.md), the Python between them session runs; another magic is an error."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from wasmrun.doors.cells import CellRefused, Step, split
from wasmrun.e2b import guestfiles, results
from wasmrun.e2b.calls import MAX_CODE_BODY, SESSION_GONE, Front, FrontError, read_json_object
from wasmrun.e2b.control import env_vars, new_session, set_envs, start_in
from wasmrun.e2b.paths import e2b_path, relative
from wasmrun.e2b.sandboxes import CONTEXT_ID, DEFAULT_CONTEXT, HOME, CodeContext, E2BSandbox, new_id
from wasmrun.protocol.streaming import RUN_OUTPUT
from wasmrun.sandbox import OutputChunk

# Cells running or queued on one context at once: each holds its tenant's request place
# (concurrent_requests) too, until it has run or been dropped.
MAX_QUEUED_CELLS = 8
# What a cell's queue ends with when its sandbox was killed under it: its answer is cut.
CUT = b""


class SandboxGone(Exception):
    """A cell's sandbox was killed or timed out while it ran or waited: its answer stops
    mid-stream, as E2B's does when the sandbox goes away under a cell (the SDK then finds
    it gone and raises its own "killed while the request was in progress")."""


def _context(sandbox: E2BSandbox, context_id: Any) -> CodeContext:
    if context_id is None:
        return sandbox.contexts[DEFAULT_CONTEXT]
    found = sandbox.contexts.get(context_id) if isinstance(context_id, str) else None
    if found is None:
        raise FrontError(404, f"context {str(context_id)[:80]!r} not found")
    return found


def _language(body: dict[str, Any]) -> None:
    language = body.get("language")
    if language is not None and language not in ("python", "py", "python3"):
        raise FrontError(400, f"language {str(language)[:40]!r} is not served: wasmrun runs Python only")


class CellStream:
    """A cell's lines on their way to its client: the queue the cell writes and the client
    reads, and the room its results take of the tenant's (Front.take_room) from when the
    cell ends until they are sent or their client has gone. What waits is bytes."""

    def __init__(self, front: Front, tenant: str) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.front, self.tenant = front, tenant
        self.held = 0
        self.gone = False

    def take_room(self, wanted: int) -> int:
        self.held = self.front.take_room(self.tenant, wanted)
        return self.held

    def keep(self, used: int) -> None:
        """Keeps `used` bytes of the room taken (none once its client has gone: a leave
        may have given the room back already) and gives back the rest."""
        kept = 0 if self.gone else used
        self.front.give_room(self.tenant, self.held - kept)
        self.held = kept

    def leave(self) -> None:
        """Its client has gone (or read it all): nothing more is kept for it."""
        self.gone = True
        self.keep(0)


class CellResponse(StreamingResponse):
    """A cell's events; `work` is the cell itself, which holds its tenant's request place
    until it has run or been dropped, whether or not its client stays to read it."""

    def __init__(self, stream: CellStream, work: asyncio.Task[None]) -> None:
        super().__init__(_lines(stream), media_type="application/x-ndjson")
        self.stream, self.work = stream, work


async def execute(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    body = await read_json_object(request, MAX_CODE_BODY)
    code = body.get("code")
    if not isinstance(code, str) or "\x00" in code:
        raise FrontError(400, "code must be a string (no NUL characters)")
    _language(body)
    context = _context(sandbox, body.get("context_id"))
    envs = env_vars(body.get("env_vars"), "env_vars")
    try:
        steps = split(code)
    except CellRefused as exc:
        lines = [{"type": "error", "name": "SyntaxError", "value": str(exc), "traceback": str(exc)}]
        return StreamingResponse(_fixed(lines), media_type="application/x-ndjson")
    if context.ended:
        raise FrontError(502, f"The sandbox {sandbox.sandbox_id} has ended")
    if len(context.cells) >= MAX_QUEUED_CELLS:
        raise FrontError(429, (
            f"this context already has {len(context.cells)} cells running or queued, its most ({MAX_QUEUED_CELLS}):"
            " wait for one to end before sending another"
        ))
    stream = CellStream(front, sandbox.caller.tenant)
    work = asyncio.get_running_loop().create_task(_run_cell_events(front, sandbox, context, steps, envs, stream))
    context.cells.add(work)
    work.add_done_callback(context.cells.discard)
    return CellResponse(stream, work)


async def _fixed(events: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    for event in events:
        yield results.line(event)
    yield results.line({"type": "end_of_execution"})


async def _lines(stream: CellStream) -> AsyncIterator[bytes]:
    try:
        while (line := await stream.queue.get()) is not None:
            if line is CUT:
                raise SandboxGone
            yield line
    finally:
        stream.leave()


async def _run_cell_events(
    front: Front, sandbox: E2BSandbox, context: CodeContext, steps: list[Step], envs: dict[str, str],
    stream: CellStream,
) -> None:
    """Runs the cell after those queued before it on its context (one at a time, as a
    Jupyter kernel does), its output streamed as it is written; a cell still queued when
    its sandbox or context ends is dropped, not run."""
    lines = results.Lines()

    def on_output(chunks: list[OutputChunk]) -> None:
        # Displays are taken from the run's result, once, at its end (where their large
        # forms can be read back from blobs); here only the streams' text.
        for chunk in chunks:
            if isinstance(chunk, OutputChunk) and chunk.stream != "display":
                for event in lines.feed(chunk.stream, chunk.text):
                    stream.queue.put_nowait(results.line(event))

    RUN_OUTPUT.set(on_output)
    ending: list[bytes] = []
    try:
        async with context.lock:
            if context.ended:
                raise FrontError(502, f"The sandbox {sandbox.sandbox_id} ended before this cell ran: it was dropped")
            ending = await _run_cell(front, sandbox, context, steps, envs, stream)
    except FrontError as exc:
        ending = [results.line({"type": "error", "name": "SandboxError", "value": exc.message, "traceback": exc.message})]
    finally:
        if sandbox.ended:  # killed or timed out meanwhile: what it printed, then the answer cut
            ending = [*map(results.line, lines.flush()), CUT]
        else:
            ending += map(results.line, [*lines.flush(), {"type": "end_of_execution"}])
        for line in ending:
            stream.queue.put_nowait(line)
        stream.queue.put_nowait(None)


async def _counted(front: Front, sandbox: E2BSandbox, context: CodeContext) -> None:
    """One more cell counted in the context, and in its record (a restart, or the next
    cell on another server, counts on from there)."""
    context.executions += 1
    count, context_id = context.executions, context.context_id

    def edit(stored: E2BSandbox) -> None:
        if context_id in stored.contexts:
            stored.contexts[context_id].executions = count

    with contextlib.suppress(FrontError):  # ended meanwhile: the cell has run all the same
        await front.change(sandbox, edit)


async def _run_cell(
    front: Front, sandbox: E2BSandbox, context: CodeContext, steps: list[Step], envs: dict[str, str],
    stream: CellStream,
) -> list[bytes]:
    """The cell's steps in order until a Python step fails, and the lines of what it ended
    with (its results, its error, its count), encoded at once: what waits for a client that
    does not read is these bytes, within the room taken for them, never the run's objects.
    A command's failure (a refused `pip install`) is its stderr and the cell goes on, as in
    IPython."""
    await set_envs(front, sandbox.caller, context.session_id, envs)
    if not steps:
        await _counted(front, sandbox, context)
        return [results.line({"type": "number_of_executions", "execution_count": context.executions})]
    result: dict[str, Any] = {"status": "completed"}
    displays: list[Any] = []
    try:
        for number, step in enumerate(steps, start=1):
            if step.kind == "command":
                ran = await _command(front, sandbox, context, step.text)
                result = {"status": "completed", "displays": ran.get("displays") or []}
            else:
                code = "\n" * (step.line - 1) + step.text
                params = {"language": "python", "code": code, "session_id": context.session_id, "stream": True}
                result = await front.run(sandbox.caller, params)
            last = number == len(steps)
            displays += [d for d in result.get("displays") or [] if last or not (isinstance(d, dict) and d.get("main"))]
            if result.get("status") != "completed":
                break
    finally:
        await _counted(front, sandbox, context)
    result = {**result, "displays": displays}
    if stream.gone:  # its client left: the session has the cell's effects; nobody reads its results
        return []
    room = stream.take_room(front.dispatcher.context.limits.defaults.result_bytes)
    blobs = await _display_blobs(front, sandbox, result, room)
    ending = [] if stream.gone else [results.line(e) for e in results.run_events(result, context.executions, blobs.get, room)]
    stream.keep(sum(map(len, ending)))
    return ending


async def _command(front: Front, sandbox: E2BSandbox, context: CodeContext, command: str) -> dict[str, Any]:
    """A `!cmd` line through the guest's shell in the cell's session (its output streamed)."""
    params = {"command": command, "session_id": context.session_id, "stream": True}
    try:
        return await front.call(sandbox.caller, "run_command", params)
    except FrontError as exc:
        raise FrontError(502, SESSION_GONE) if exc.status == 404 else exc from None


async def _display_blobs(front: Front, sandbox: E2BSandbox, result: dict[str, Any], budget: int) -> dict[str, bytes]:
    """The blobs the run's results name (large display forms, pictures), each read once as
    the tenant, in the order they are first named, until what is read fills the budget
    (what the results may expand to: a blob past it could not be sent anyway)."""
    read: dict[str, bytes] = {}
    held = 0
    for blob_id in results.image_blobs(result):
        if held >= budget:
            break
        try:
            read[blob_id] = content = await front.read_blob(sandbox.caller, blob_id)
        except FrontError:  # deleted since, or past the server's full-read limit: its forms are left out
            continue
        held += len(content)
    return read


def _context_json(context: CodeContext) -> dict[str, str]:
    return {"id": context.context_id, "language": context.language, "cwd": context.cwd}


async def create_context(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    body = await read_json_object(request)
    _language(body)
    cwd = body.get("cwd") or HOME
    if not isinstance(cwd, str):
        raise FrontError(400, "cwd must be a path")
    relative(cwd)  # refused (400) before a session is made for it
    context = CodeContext(new_id()[:20], await new_session(front, sandbox.caller), cwd)
    try:
        await _chdir(front, sandbox, context.session_id, cwd)
        _still_there(front, sandbox)
    except FrontError:
        await front.close_session(sandbox.caller, context.session_id)
        raise
    made = CodeContext(context.context_id, context.session_id, cwd)
    try:
        await front.change(sandbox, lambda s: s.contexts.__setitem__(made.context_id, made))
    except FrontError:
        await front.close_session(sandbox.caller, context.session_id)
        raise
    return JSONResponse(_context_json(context))


async def _chdir(front: Front, sandbox: E2BSandbox, session_id: str, cwd: str) -> None:
    """The session's runs start in the context's folder (made when missing), when it is not
    HOME, where new_session started them (the same path inside as the files API's)."""
    folder = e2b_path(relative(cwd))
    if folder != HOME and not await start_in(front, sandbox.caller, session_id, folder):
        raise FrontError(400, f"cwd {cwd[:200]!r} cannot be made the context's folder")


def _still_there(front: Front, sandbox: E2BSandbox, context: CodeContext | None = None) -> None:
    """After the waits of making a session for it: the sandbox (and the context) not ended
    meanwhile, or the new session would be reached by nothing, yet count in the tenant's."""
    if front.table.find(sandbox.sandbox_id) is not sandbox or (context is not None and context.ended):
        raise FrontError(502, f"The sandbox {sandbox.sandbox_id} (or this context) ended meanwhile")


async def list_contexts(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    return JSONResponse([_context_json(c) for c in sandbox.contexts.values()])


def _named_context(request: Request, sandbox: E2BSandbox) -> CodeContext:
    context_id = request.path_params["context_id"]
    if not CONTEXT_ID.fullmatch(context_id) or context_id not in sandbox.contexts:
        raise FrontError(404, f"context {context_id[:80]!r} not found")
    return sandbox.contexts[context_id]


async def remove_context(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    context = _named_context(request, sandbox)
    if context.context_id == DEFAULT_CONTEXT:
        raise FrontError(400, "the default context is the sandbox itself: kill the sandbox to end it")
    await front.change(sandbox, lambda s: _drop_context(s, context.context_id))  # its queued cells dropped
    context.ended = True
    await front.close_session(sandbox.caller, context.session_id)
    return Response(status_code=204)


def _drop_context(sandbox: E2BSandbox, context_id: str) -> None:
    sandbox.contexts.pop(context_id, None)


async def restart_context(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    """A fresh interpreter: a new session in the context's place, with the old one's files
    (as a Jupyter kernel's restart keeps the machine's)."""
    context = _named_context(request, sandbox)
    async with context.lock:
        fresh = await new_session(front, sandbox.caller)
        try:
            await guestfiles.carry_files(front, sandbox, context.session_id, fresh)
            await _chdir(front, sandbox, fresh, context.cwd)
            _still_there(front, sandbox, context)
        except FrontError:
            await front.close_session(sandbox.caller, fresh)
            raise
        old, context_id = context.session_id, context.context_id

        def replace(stored: E2BSandbox) -> None:
            if context_id in stored.contexts:
                stored.contexts[context_id].session_id, stored.contexts[context_id].executions = fresh, 0

        try:
            await front.change(sandbox, replace)  # this server's context too: its queue and lock kept
        except FrontError:
            await front.close_session(sandbox.caller, fresh)
            raise
        await front.close_session(sandbox.caller, old)
    return Response(status_code=204)
