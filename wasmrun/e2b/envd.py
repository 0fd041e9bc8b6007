"""envd's endpoints (`E2b-Sandbox-Port: 49983`): health, HTTP `/files` upload and
download, the filesystem Connect RPCs (JSON codec), on the sandbox's files; the
process and PTY RPCs answer `unimplemented`, naming `run_code` (no processes here)."""

from __future__ import annotations

import email.parser
import email.policy
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from wasmrun.e2b import guestfiles
from wasmrun.e2b.calls import Front, FrontError, read_body, read_json_object
from wasmrun.e2b.paths import e2b_path, relative
from wasmrun.e2b.sandboxes import E2BSandbox

MAX_UPLOAD = 64 * 1024 * 1024
CONNECT_CODES = {
    400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
    409: "already_exists", 413: "resource_exhausted", 429: "resource_exhausted", 501: "unimplemented",
    502: "unavailable", 503: "unavailable", 507: "resource_exhausted",
}
NO_PROCESSES = (
    "commands and PTY are not available on wasmrun: a sandbox runs Python, not processes."
    " Use sandbox.run_code(...) instead; packages are added by the operator (`wasmrun packages add`)."
)


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
    if service.startswith("process.Process/"):
        raise FrontError(501, NO_PROCESSES)
    raise FrontError(404, f"{request.method} /{service[:200]} is not an endpoint of a wasmrun sandbox (docs/e2b.md)")


async def download(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    rel = relative(request.query_params.get("path", ""))
    content = await guestfiles.read_bytes(front, sandbox, rel)
    return Response(content, media_type="application/octet-stream")


def _multipart_files(content_type: str, body: bytes) -> list[tuple[str, bytes]]:
    """The files of a multipart/form-data body: (the name it was sent with, content)."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1", "replace")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise FrontError(400, "the upload is not a multipart/form-data body")
    files: list[tuple[str, bytes]] = []
    for part in message.iter_parts():
        payload = part.get_payload(decode=True)
        files.append((part.get_filename() or "", payload if isinstance(payload, bytes) else b""))
    return files


async def upload(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    body = await read_body(request, MAX_UPLOAD)
    content_type = request.headers.get("content-type", "")
    path = request.query_params.get("path")
    if content_type.startswith("multipart/form-data"):
        files = _multipart_files(content_type, body)
    else:
        if request.headers.get("content-encoding"):
            raise FrontError(400, "compressed uploads are not accepted: send the file as it is")
        files = [(path or "", body)]
    if not files:
        raise FrontError(400, "the upload has no file")
    written = []
    for name, content in files:
        rel = relative(path if path and len(files) == 1 else name)
        await guestfiles.write_bytes(front, sandbox, rel, content)
        written.append({"name": rel.rsplit("/", 1)[-1], "type": "file", "path": e2b_path(rel)})
    return JSONResponse(written)


def entry_info(entry: dict[str, Any]) -> dict[str, Any]:
    """A file's facts from the session, as envd's EntryInfo (protobuf JSON)."""
    rel = str(entry.get("rel", ""))
    kind = "FILE_TYPE_DIRECTORY" if entry.get("type") == "dir" else "FILE_TYPE_FILE"
    # WASI reports no permission bits: the mode a user's own file or folder has.
    mode = int(entry.get("mode", 0)) or (0o755 if kind == "FILE_TYPE_DIRECTORY" else 0o644)
    info: dict[str, Any] = {
        "name": rel.rsplit("/", 1)[-1] if rel else "user", "type": kind, "path": e2b_path(rel),
        "size": str(int(entry.get("size", 0))), "mode": mode,
        "permissions": ("d" if kind == "FILE_TYPE_DIRECTORY" else "-") + _rwx(mode),
        "owner": "user", "group": "user",
        "modifiedTime": datetime.fromtimestamp(float(entry.get("mtime", 0)), UTC).isoformat().replace("+00:00", "Z"),
    }
    if entry.get("link"):
        info["symlinkTarget"] = entry["link"]
    return info


def _rwx(mode: int) -> str:
    return "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))


async def filesystem_rpc(front: Front, request: Request, sandbox: E2BSandbox) -> Response:
    method = request.path_params["method"]
    body = await read_json_object(request)
    if method == "Stat":
        found = await guestfiles.file_op(front, sandbox, "stat", relative(body.get("path", "")))
        return JSONResponse({"entry": entry_info(found["entry"])})
    if method == "ListDir":
        depth = body.get("depth") or 1
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 16:
            raise FrontError(400, "depth must be from 1 to 16")
        found = await guestfiles.file_op(front, sandbox, "list", relative(body.get("path", "")), depth=depth)
        return JSONResponse({"entries": [entry_info(e) for e in found["entries"]]})
    if method == "MakeDir":
        found = await guestfiles.file_op(front, sandbox, "mkdir", relative(body.get("path", "")))
        if found.get("exists"):
            raise FrontError(409, f"{body.get('path')} already exists")
        return JSONResponse({"entry": entry_info(found["entry"])})
    if method == "Move":
        source, target = relative(body.get("source", "")), relative(body.get("destination", ""))
        if not source or not target:
            raise FrontError(400, "the sandbox's home folder itself cannot be moved")
        found = await guestfiles.file_op(front, sandbox, "move", source, to=target)
        return JSONResponse({"entry": entry_info(found["entry"])})
    if method == "Remove":
        rel = relative(body.get("path", ""))
        if not rel:
            raise FrontError(400, "the sandbox's home folder itself cannot be removed")
        await guestfiles.file_op(front, sandbox, "remove", rel)
        return JSONResponse({})
    raise FrontError(501, f"filesystem {method[:80]} is not available on wasmrun (watching folders is not)")
