"""The calls on one identifier's session: code executed as a session run, its output and
result as the service gives them (results.py); files as the session's /mnt/data (the same
folder as /workspace), moved as the E2B door moves them: uploads streamed to disk within
the workspace quota, never held whole, downloads streamed from the blobs a run wrote."""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from wasmrun.azure import results
from wasmrun.azure.identifiers import MAX_PARTS, data_path, relative
from wasmrun.doors.cells import CellRefused, Step, split
from wasmrun.e2b import guestfiles, transfer
from wasmrun.e2b.calls import MAX_CODE_BODY, SESSION_GONE, FrontError, read_json_object
from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, E2BSandbox
from wasmrun.protocol.streaming import RUN_OUTPUT
from wasmrun.tenants.caller import Caller

if TYPE_CHECKING:
    from wasmrun.azure.front import AzureFront

DELETED = "this identifier's session was deleted while the call waited: send it again"

MAX_TIMEOUT_S = 3600


def _code(body: dict[str, Any]) -> tuple[str, int | None]:
    """The code of an execution request, and its `timeoutInSeconds` when given."""
    props = body.get("properties")
    if not isinstance(props, dict):
        raise FrontError(400, 'the body must be {"properties": {"codeInputType": "inline", "executionType":'
                              ' "synchronous", "code": "..."}}')
    if str(props.get("codeInputType", "inline")).lower() != "inline":
        raise FrontError(400, "codeInputType must be 'inline': the code is sent in the request")
    if str(props.get("executionType", "synchronous")).lower() != "synchronous":
        raise FrontError(400, "executionType must be 'synchronous': asynchronous executions are not served")
    code = props.get("code")
    if not isinstance(code, str) or "\x00" in code:
        raise FrontError(400, "properties.code must be a string (no NUL characters)")
    timeout = props.get("timeoutInSeconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)
                                or not 0 < timeout <= MAX_TIMEOUT_S):
        raise FrontError(400, f"timeoutInSeconds must be a whole number from 1 to {MAX_TIMEOUT_S}")
    return code, timeout


def _answer(props: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"$id": "1", "properties": {"$id": "2", **props}})


async def execute(front: AzureFront, request: Request, caller: Caller) -> Response:
    """`POST code/execute`: the code as runs of the identifier's session (its state kept
    from one call to the next), its output, result and time as the service answers them.
    The code is split as its Jupyter kernel would run it (the Jupyter door's `split`): a
    `!cmd` line is a command of the guest's shell in the same session (`!pip install` and
    `%pip install` too: they install on demand), the Python between them session runs."""
    code, timeout = _code(await read_json_object(request, MAX_CODE_BODY))
    key = front.key(request, caller)
    try:
        steps = split(code)
    except CellRefused as exc:  # a magic, an indented `!`: the kernel's transforms, not a sandbox's
        return _answer({"status": "Failure", "stdout": "", "stderr": f"{exc}\n", "result": "",
                        "executionTimeInMillis": 0})
    limits = {"limits": {"timeout_ms": timeout * 1000}} if timeout is not None else {}

    async def run(holder: E2BSandbox) -> dict[str, Any]:
        output = results.Output()
        RUN_OUTPUT.set(output.feed)
        context = holder.contexts[DEFAULT_CONTEXT]
        async with context.lock:
            if context.ended:  # the session was deleted while this call waited for it
                raise FrontError(404, DELETED)
            started = time.monotonic()  # the execution's time, not the wait for the one before it
            result = await _steps(front, caller, holder.session_id, steps, output, limits)
        millis = int((time.monotonic() - started) * 1000)
        blob = results.image_blob(result)
        content = {blob: await front.calls.read_blob(caller, blob)} if blob is not None else {}
        return results.properties(result, output, millis, content.get)

    return _answer(await front.in_session(key, caller, run))


async def _steps(
    front: AzureFront, caller: Caller, session_id: str, steps: list[Step], output: results.Output,
    limits: dict[str, Any],
) -> dict[str, Any]:
    """The cell's steps in order, until one fails: the last one's result, with the displays
    of them all (the last expression counts only in the last step, as IPython shows it)."""
    result: dict[str, Any] = {"status": "completed"}
    displays: list[Any] = []
    for number, step in enumerate(steps, start=1):
        if step.kind == "command":  # `!cmd`, and `!pip install` / `%pip install` (installs on demand)
            params = {"command": step.text, "session_id": session_id, "stream": True, **limits}
            try:
                result = await front.calls.call(caller, "run_command", params)
            except FrontError as exc:
                raise FrontError(502, SESSION_GONE) if exc.status == 404 else exc from None
        else:
            code = "\n" * (step.line - 1) + step.text
            result = await front.calls.run(caller, {
                "language": "python", "code": code, "session_id": session_id, "stream": True, **limits,
            })
        last = number == len(steps)
        displays += [d for d in result.get("displays") or [] if last or not (isinstance(d, dict) and d.get("main"))]
        if result.get("status") != "completed":
            break
    return {**result, "displays": displays}


def _when(mtime: Any) -> str:
    stamp = datetime.datetime.fromtimestamp(float(mtime), datetime.UTC)
    return stamp.isoformat().replace("+00:00", "Z")


def _metadata(entry: Any) -> dict[str, Any]:
    """A file as the service lists it; the entry is the guest's answer, so it is checked."""
    if not isinstance(entry, dict):
        raise guestfiles.unexpected("entry", entry)
    rel, size, mtime = entry.get("rel"), entry.get("size"), entry.get("mtime")
    if not isinstance(rel, str) or isinstance(size, bool) or not isinstance(size, int):
        raise guestfiles.unexpected("entry", entry)
    if isinstance(mtime, bool) or not isinstance(mtime, int | float):
        raise guestfiles.unexpected("time", mtime)
    return {"filename": rel, "size": size, "lastModifiedTime": _when(mtime), "type": entry.get("type", "file")}


async def _files(front: AzureFront, holder: E2BSandbox, rel: str) -> list[dict[str, Any]]:
    """The files under `rel` in /mnt/data, its folders walked (links listed, never followed)."""
    listed = await guestfiles.file_op(front.calls, holder, "list", rel, depth=MAX_PARTS)
    entries = listed.get("entries")
    if not isinstance(entries, list):
        raise guestfiles.unexpected("list of entries", entries)
    return [m for m in map(_metadata, entries) if m["type"] == "file"]


def _value(files: list[dict[str, Any]]) -> JSONResponse:
    return JSONResponse({"$id": "1", "value": [
        {"$id": str(n + 2), "properties": {k: v for k, v in f.items() if k != "type"}} for n, f in enumerate(files)
    ]})


async def upload(front: AzureFront, request: Request, caller: Caller) -> Response:
    """`POST files/upload` (multipart, each part's file name relative to /mnt/data or under
    it): each file streamed to disk within the workspace quota, then into the session."""
    key = front.key(request, caller)
    folder = relative(request.query_params.get("path") or data_path(""))
    async with transfer.received(request, front.calls) as received:
        named = [(_joined(folder, name), source) for name, source in received]

        async def put(holder: E2BSandbox) -> list[dict[str, Any]]:
            for _, source in named:
                source.seek(0)  # a second try, on a new session, sends it all again
            await transfer.upload(front.calls, holder, named)
            return await _files(front, holder, "")

        listed = {f["filename"]: f for f in await front.in_session(key, caller, put)}
    return _value([listed[rel] for rel, _ in named if rel in listed])


def _joined(folder: str, name: str) -> str:
    rel = relative(name)
    if not rel:
        raise FrontError(400, "each uploaded file needs a name (its part's filename)")
    return rel if name.startswith(data_path("")) or not folder else f"{folder}/{rel}"


async def list_files(front: AzureFront, request: Request, caller: Caller) -> Response:
    """`GET files`: every file under /mnt/data (or under `?path=`), with its size and time."""
    key = front.key(request, caller)
    rel = relative(request.query_params.get("path") or data_path(""))
    return _value(await front.in_session(key, caller, lambda holder: _files(front, holder, rel)))


def _named(request: Request) -> str:
    rel = relative(request.path_params["name"])
    if not rel:
        raise FrontError(400, f"name a file under {data_path('')}")
    return rel


async def content(front: AzureFront, request: Request, caller: Caller) -> Response:
    """`GET files/content/{name}`: the file's bytes, streamed."""
    rel, key = _named(request), front.key(request, caller)
    return await front.in_session(key, caller, lambda holder: transfer.download(front.calls, holder, rel))


async def file_info(front: AzureFront, request: Request, caller: Caller) -> Response:
    rel, key = _named(request), front.key(request, caller)
    found = await front.in_session(key, caller, lambda holder: guestfiles.file_op(front.calls, holder, "stat", rel))
    return JSONResponse({"$id": "1", "properties": {
        k: v for k, v in _metadata(found.get("entry")).items() if k != "type"
    }})


async def delete_file(front: AzureFront, request: Request, caller: Caller) -> Response:
    rel, key = _named(request), front.key(request, caller)
    await front.in_session(key, caller, lambda holder: guestfiles.file_op(front.calls, holder, "remove", rel))
    return Response(status_code=204)
