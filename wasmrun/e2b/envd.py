"""envd's endpoints (`E2b-Sandbox-Port: 49983`): health, HTTP `/files` upload and
download, the filesystem Connect RPCs (JSON codec), on the sandbox's files; the process
RPCs (commands.run, list, kill) are commands.py's, and PTY answers `unimplemented`."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from wasmrun.e2b import guestfiles, transfer
from wasmrun.e2b.calls import Front, FrontError, read_json_object
from wasmrun.e2b.paths import MAX_PATH, e2b_path, relative
from wasmrun.e2b.sandboxes import E2BSandbox

CONNECT_CODES = {
    400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
    409: "already_exists", 413: "resource_exhausted", 415: "invalid_argument", 429: "resource_exhausted", 501: "unimplemented",
    502: "unavailable", 503: "unavailable", 507: "resource_exhausted",
}


def error_response(request: Request, exc: FrontError) -> Response:
    """A Connect RPC's error as Connect's JSON error; any other as envd's `{code, message}`."""
    if "." in request.url.path.rsplit("/", 2)[-2]:  # /<package>.<Service>/<Method>
        code = CONNECT_CODES.get(exc.status, "internal")
        return JSONResponse({"code": code, "message": exc.message}, status_code=exc.status if exc.status < 600 else 500)
    if request.url.path.endswith(("/execute", "/contexts")) or "/contexts/" in request.url.path:
        return PlainTextResponse(exc.message, status_code=exc.status)
    return JSONResponse({"code": exc.status, "message": exc.message}, status_code=exc.status)


async def health(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    return Response(status_code=204)


async def refused(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    service = request.path_params.get("rest", "")
    raise FrontError(404, f"{request.method} /{service[:200]} is not an endpoint of a wasmrun sandbox (docs/e2b.md)")


async def download(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    return await transfer.download(front, sandbox, relative(request.query_params.get("path", "")))


async def upload(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    """envd's POST /files: an octet-stream body to `path`, or each file of a multipart body
    (to `path` when it is the only one, else to the name it was sent with)."""
    path = request.query_params.get("path")
    multipart = request.headers.get("content-type", "").startswith("multipart/form-data")
    if not multipart:
        relative(path or "")  # a bad path is refused before the body is read
    async with transfer.received(request, front, sandbox) as files:
        named = [(relative(path if path and len(files) == 1 else name), content) for name, content in files]
        await transfer.upload(front, sandbox, named)
    return JSONResponse([{"name": rel.rsplit("/", 1)[-1], "type": "file", "path": e2b_path(rel)} for rel, _ in named])


def entry_info(entry: Any) -> dict[str, Any]:
    """A file's facts from the session, as envd's EntryInfo (protobuf JSON). Checked: the
    guest's answer is only as good as the session's `os` and `stat`, which a cell may have
    replaced; a value out of shape is a clear 500, never a server error."""
    if not isinstance(entry, dict):
        raise guestfiles.unexpected("entry", entry)
    rel, size, mode, link = entry.get("rel"), entry.get("size"), entry.get("mode"), entry.get("link", "")
    for name, value, fine in (
        ("path", rel, isinstance(rel, str) and len(rel) <= MAX_PATH and "\x00" not in rel),
        ("file type", entry.get("type"), entry.get("type") in ("dir", "file")),
        ("size", size, _count(size, 1 << 63)), ("mode", mode, _count(mode, 0o7777)),
        ("symlink target", link, isinstance(link, str) and len(link) <= MAX_PATH),
    ):
        if not fine:
            raise guestfiles.unexpected(name, value)
    assert isinstance(rel, str) and isinstance(size, int) and isinstance(mode, int) and isinstance(link, str)
    kind = "FILE_TYPE_DIRECTORY" if entry["type"] == "dir" else "FILE_TYPE_FILE"
    # WASI reports no permission bits: the mode a user's own file or folder has.
    mode = mode or (0o755 if kind == "FILE_TYPE_DIRECTORY" else 0o644)
    info: dict[str, Any] = {
        "name": rel.rsplit("/", 1)[-1] if rel else "user", "type": kind, "path": e2b_path(rel),
        "size": str(size), "mode": mode,
        "permissions": ("d" if kind == "FILE_TYPE_DIRECTORY" else "-") + _rwx(mode),
        "owner": "user", "group": "user", "modifiedTime": _iso(entry.get("mtime")),
    }
    if link:
        info["symlinkTarget"] = link
    return info


def _count(value: Any, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def _iso(mtime: Any) -> str:
    """A modification time (seconds since 1970, as os.stat gives it) as protobuf JSON's."""
    try:
        if isinstance(mtime, bool) or not isinstance(mtime, int | float) or not math.isfinite(mtime):
            raise ValueError(mtime)
        return datetime.fromtimestamp(mtime, UTC).isoformat().replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        raise guestfiles.unexpected("modification time", mtime) from None


def _entries(found: dict[str, Any]) -> list[dict[str, Any]]:
    entries = found.get("entries")
    if not isinstance(entries, list):
        raise guestfiles.unexpected("listing", entries)
    return [entry_info(e) for e in entries]


def _rwx(mode: int) -> str:
    return "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))


async def filesystem_rpc(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    method = request.path_params["method"]
    body = await read_json_object(request)
    if method == "Stat":
        found = await guestfiles.file_op(front, sandbox, "stat", relative(body.get("path", "")))
        return JSONResponse({"entry": entry_info(found.get("entry"))})
    if method == "ListDir":
        depth = body.get("depth") or 1
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 16:
            raise FrontError(400, "depth must be from 1 to 16")
        found = await guestfiles.file_op(front, sandbox, "list", relative(body.get("path", "")), depth=depth)
        return JSONResponse({"entries": _entries(found)})
    if method == "MakeDir":
        found = await guestfiles.file_op(front, sandbox, "mkdir", relative(body.get("path", "")))
        if found.get("exists") is True:
            raise FrontError(409, f"{body.get('path')} already exists")
        return JSONResponse({"entry": entry_info(found.get("entry"))})
    if method == "Move":
        source, target = relative(body.get("source", "")), relative(body.get("destination", ""))
        if not source or not target:
            raise FrontError(400, "the sandbox's home folder itself cannot be moved")
        found = await guestfiles.file_op(front, sandbox, "move", source, to=target)
        return JSONResponse({"entry": entry_info(found.get("entry"))})
    if method == "Remove":
        rel = relative(body.get("path", ""))
        if not rel:
            raise FrontError(400, "the sandbox's home folder itself cannot be removed")
        await guestfiles.file_op(front, sandbox, "remove", rel)
        return JSONResponse({})
    raise FrontError(501, f"filesystem {method[:80]} is not available on wasmrun (watching folders is not)")
