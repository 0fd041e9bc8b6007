"""The session's files, read and written by the session itself: each operation is a
run of FILE_PROGRAM in the session, so the sandbox's path rules (it sees only its own
/workspace and /tmp), the workspace quota, the run's limits, audit and metrics all
apply, and a write lands in the session's next version like any run's. File contents
never pass through the run's arguments or answer: an upload comes in as input blobs, a
download goes out as blobs the run writes (transfer.py). What the run answers is the
guest's, only as good as the session's modules, so it is checked (`checked_output`)."""

from __future__ import annotations

import textwrap
from typing import Any

from wasmrun.e2b.calls import Front, FrontError, killed
from wasmrun.e2b.paths import GUEST_HOME, e2b_path
from wasmrun.e2b.sandboxes import E2BSandbox

# Paths reach it relative to /workspace, already checked by paths.relative (no `..`,
# no NUL); it refuses to follow a symlink out of /workspace all the same.
_BODY = '''
globals().pop("_wasmrun_e2b_files", None)  # the user's namespace keeps no trace of it
import os, stat
HOME = "/workspace"  # paths.GUEST_HOME
def _at(rel):
    path = os.path.join(HOME, rel) if rel else HOME
    real = os.path.realpath(path)
    if real != HOME and not real.startswith(HOME + "/"):
        raise PermissionError("the path leads out of the sandbox's files")
    return path
def _entry(path, rel):
    st = os.lstat(path)
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
    return {"rel": rel, "name": os.path.basename(path.rstrip("/")) or "", "type": kind, "size": st.st_size,
            "mode": st.st_mode & 0o7777, "mtime": st.st_mtime,
            "link": os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""}
def _parent(path):
    # Not os.makedirs(HOME, exist_ok=True): on the data image it walks up to "/" and fails there.
    folder = os.path.dirname(path)
    if folder != HOME and not os.path.isdir(folder):
        os.makedirs(folder)
def _walk(rel, depth):
    out = []
    for name in sorted(os.listdir(_at(rel))):
        child = rel + "/" + name if rel else name
        # The entry itself (lstat: a link is listed, never followed), so one link out of the
        # files does not refuse the whole listing; only a real folder is walked into.
        entry = _entry(os.path.join(_at(rel), name), child)
        out.append(entry)
        if entry["type"] == "dir" and depth > 1:
            out.extend(_walk(child, depth - 1))
    return out
def _upload(files):
    # Each file from its input blob (/blobs/<id>, read-only) a MiB at a time: never whole in memory.
    import shutil
    for item in files:
        rel, path = item["path"], _at(item["path"])
        _parent(path)
        try:
            with open("/blobs/" + item["blob"], "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError:
            if os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)  # nothing partial under the name
            raise
    return {}
def _export(rel, kind, chunk, most):
    # The file as blobs of `chunk` bytes each, in order: the host streams them out.
    import _wasmrun
    with open(_at(rel), "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(rel)
        if st.st_size > most:
            return {"error": "too_large", "message": f"{st.st_size} bytes, over the {most} one download moves here"}
        blobs = []
        while True:
            data = f.read(chunk)
            if not data:
                return {"blobs": blobs, "size": st.st_size}
            blobs.append(_wasmrun.blob_write(data, kind))
def main(args):
    op, rel = args["op"], args["path"]
    try:
        if op == "upload":
            return _upload(args["files"])
        if op == "export":
            return _export(rel, args["kind"], args["chunk"], args["most"])
        if op == "stat":
            return {"entry": _entry(_at(rel), rel)}
        if op == "list":
            if not os.path.isdir(_at(rel)):
                raise NotADirectoryError(rel)
            return {"entries": _walk(rel, args.get("depth", 1))}
        if op == "mkdir":
            if os.path.isdir(_at(rel)):
                return {"exists": True}
            os.makedirs(_at(rel))
            return {"entry": _entry(_at(rel), rel)}
        if op == "move":
            target = _at(args["to"])
            _parent(target)
            os.rename(_at(rel), target)
            return {"entry": _entry(target, args["to"])}
        if op == "remove":
            path = _at(rel)
            if os.path.isdir(path) and not os.path.islink(path):
                import shutil
                shutil.rmtree(path)
            else:
                os.remove(path)
            return {}
    except FileNotFoundError:
        return {"error": "not_found"}
    except (IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        return {"error": "invalid", "message": type(exc).__name__}
    except PermissionError as exc:
        return {"error": "denied", "message": str(exc)}
    except OSError as exc:  # a name too long, a folder not empty, ...: the caller's to change
        return {"error": "invalid", "message": f"{type(exc).__name__}: {exc.strerror or exc}"}
    raise ValueError("unknown operation")
return main(args)
'''
# One global in the session's namespace, never `main` (the user's code may define one).
ENTRYPOINT = "_wasmrun_e2b_files"
FILE_PROGRAM = f"def {ENTRYPOINT}(args):\n" + textwrap.indent(_BODY.strip("\n"), "    ") + "\n"

if GUEST_HOME != "/workspace":  # the folder FILE_PROGRAM names
    raise ImportError("FILE_PROGRAM's HOME and paths.GUEST_HOME differ")
# FILE_PROGRAM's errors: the status each answers, and what it says when the guest says nothing.
ERRORS = {"not_found": (404, "no such file or directory"), "invalid": (400, "not possible"),
          "denied": (403, "permission denied"), "too_large": (413, "too large to move in one call on this server")}


def failure(result: dict[str, Any]) -> tuple[str, str]:
    """A failed run's error type and the line that says why: a traceback's last line
    (the exception), not its first ("Traceback (most recent call last):")."""
    error = result.get("error") or {}
    kind = str(error.get("type", "Error"))
    lines = [line for line in str(error.get("message", "")).splitlines() if line.strip()]
    return kind, (lines[-1].strip()[:300] if lines else kind)


# The failed runs answered 507 (the SDK's NotEnoughSpaceException): each error type, what it says.
FULL = {"WorkspaceQuotaExceeded": "the sandbox's files are over their quota",
        "SessionBytesExceeded": "the tenant's sessions are over their storage quota",
        "BlobQuotaExceeded": "the tenant's blob storage cannot hold the file while it is moved"}


async def run_file_program(
    front: Front, sandbox: E2BSandbox, args: dict[str, Any], input_blobs: list[str] | None = None
) -> dict[str, Any]:
    """FILE_PROGRAM's run in the sandbox (its default context's session), queued behind
    a cell that is running, as envd's are not but a session's runs must be: the whole
    result, its `output` still the guest's (unchecked). A sandbox killed before or while it
    runs fails it as E2B's does (`killed`), whatever the run made of it."""
    context = sandbox.contexts["default"]
    async with context.lock:
        if sandbox.ended:
            raise killed(sandbox)
        try:
            result = await front.run(sandbox.caller, {
                "language": "python", "code": FILE_PROGRAM, "session_id": context.session_id, "args": args,
                "entrypoint": ENTRYPOINT, "input_blobs": input_blobs or [],
            })
        except FrontError:
            if sandbox.ended:
                raise killed(sandbox) from None
            raise
    if sandbox.ended:
        raise killed(sandbox)
    return result


def checked_output(result: dict[str, Any], rel: str) -> dict[str, Any]:
    """A file run's output, or its failure as a FrontError. The output is the guest's: code
    the user ran in the session before may have changed `os` or `stat`, so it is checked."""
    if result.get("status") != "completed":
        kind, reason = failure(result)
        if kind in FULL:
            raise FrontError(507, f"{FULL[kind]}: {reason}")
        if kind == "BlobBudgetExceeded":
            raise FrontError(413, f"{e2b_path(rel)} is too large to move in one call on this server ({reason})")
        raise FrontError(500, f"the file operation failed: {kind}: {reason}")
    output = result.get("output")
    if not isinstance(output, dict):
        raise unexpected("answer", output)
    if "error" in output:
        error, message = output["error"], output.get("message")
        if not isinstance(error, str) or error not in ERRORS or not isinstance(message, str | None):
            raise unexpected("error", error)
        status, default = ERRORS[error]
        raise FrontError(status, f"{e2b_path(rel)}: {(message or default)[:300]}")
    return output


def unexpected(what: str, value: Any) -> FrontError:
    """The answer to a file run whose output is not what FILE_PROGRAM gives."""
    return FrontError(500, (
        f"the sandbox's file program gave back an unexpected {what} ({type(value).__name__}): code run in"
        " the sandbox may have replaced part of a module it uses (os, stat, _wasmrun); restart the code"
        " context to undo it"
    ))


async def file_op(front: Front, sandbox: E2BSandbox, op: str, rel: str, **extra: Any) -> dict[str, Any]:
    """One operation on the sandbox's files: its checked output."""
    return checked_output(await run_file_program(front, sandbox, {"op": op, "path": rel, **extra}), rel)


# A restart's fresh interpreter keeps the sandbox's files: packed as a tar in the old
# session, unpacked in the new one (each function removes its own name as it runs).
PACK = """
def _wasmrun_e2b_pack(args):
    globals().pop("_wasmrun_e2b_pack", None)
    import base64, io, os, tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir("/workspace")):
            tar.add("/workspace/" + name, arcname=name)
    return base64.b64encode(buf.getvalue()).decode()
"""
UNPACK = """
def _wasmrun_e2b_unpack(args):
    globals().pop("_wasmrun_e2b_unpack", None)
    import base64, io, tarfile
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(args["tar"])), mode="r") as tar:
        tar.extractall("/workspace", filter="data")
"""


async def _program(front: Front, caller: Any, session_id: str, code: str, entrypoint: str, args: dict[str, Any]) -> Any:
    result = await front.run(caller, {
        "language": "python", "code": code, "session_id": session_id, "entrypoint": entrypoint, "args": args,
    })
    if result.get("status") != "completed":
        kind, reason = failure(result)
        raise FrontError(413, f"the sandbox's files could not be carried over: {kind}: {reason}")
    return result.get("output")


async def carry_files(front: Front, sandbox: E2BSandbox, source: str, target: str) -> None:
    """The files of session `source` into session `target` (a fresh one)."""
    packed = await _program(front, sandbox.caller, source, PACK, "_wasmrun_e2b_pack", {})
    await _program(front, sandbox.caller, target, UNPACK, "_wasmrun_e2b_unpack", {"tar": packed})
