"""One wasmrun session as an agent framework's sandbox: commands, files in and out.

    from wasmrun.adapters.sandbox import WasmrunSandbox

    with WasmrunSandbox.connect("http://127.0.0.1:8080") as box:
        box.upload([("/workspace/data.csv", b"a,b\\n1,2\\n")])
        out = box.run("wc -l data.csv")          # starts in /workspace
        print(out.exit_code, out.stdout)
        [(path, content, error)] = box.download(["/workspace/data.csv"])

Framework-free: the deepagents and Pydantic AI adapters are thin layers on it.
Everything goes through the typed client's public methods (wasmrun.client), so
an adapter works against any wasmrun server the client reaches, local or not.

- Commands are `run_command` in the session: the shell runs inside the guest
  (bash syntax, the common commands, `python`), over the session's files.
- Files go in as blobs (`create_blob`, bytes as base64) that one run in the
  session copies to their paths, and come out the other way (the run writes each
  file as a blob, read whole with `read_blob` and deleted): binary-safe, and not
  bounded by a command's output cap. The blobs are deleted once copied, so they
  do not stay in the tenant's blob quota.
- The session is created on first use (or attached to by id), and closed by
  `close()` only when this object created it: a session handed in belongs to
  whoever made it.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wasmrun.client import Client, CommandResult, RunLimits
from wasmrun.protocol.types import RunError

__all__ = ["CommandOutput", "WasmrunSandbox", "WORKSPACE"]

# The session's writable home (also mounted at /home/user, E2B's home): commands start there.
WORKSPACE = "/workspace"

# The guest side of the file operations, run in the session under its own entry point, so
# the session's `main` (the agent's own code may define one) is never called or replaced.
# One run does a list of operations; each answers a dict, or its error as the errno's name
# (ENOENT, EISDIR...) for the adapters to map onto their framework's words. Paths are the
# guest's: absolute, or relative to the run's working folder (/workspace).
_FILES_ENTRY = "_wasmrun_adapter_files"
_FILES_CODE = """
import errno as _errno, os as _os, shutil as _shutil, stat as _stat
from runtime import blobs as _blobs

def _wasmrun_adapter_files(args):
    def error(exc):
        return {"error": _errno.errorcode.get(exc.errno or 0, "EIO"), "message": str(exc)}

    def parent_folder(path):
        # makedirs over a file says EEXIST; a file in the way of a path is ENOTDIR, as open() says.
        parent = _os.path.dirname(path)
        if parent and _os.path.exists(parent) and not _os.path.isdir(parent):
            raise NotADirectoryError(_errno.ENOTDIR, "Not a directory", parent)
        if parent:
            _os.makedirs(parent, exist_ok=True)

    def one(op, path):
        if op == "put":
            parent_folder(path)
            with open(path, "wb") as f:
                f.write(_blobs.read_bytes(args["blobs"][path]))
            return {}
        if op == "get":
            st = _os.stat(path)
            if _stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(_errno.EISDIR, "Is a directory", path)
            if not _stat.S_ISREG(st.st_mode):
                raise OSError(_errno.EINVAL, "Not a regular file", path)
            with open(path, "rb") as f:
                data = f.read()
            return {"blob": _blobs.write_bytes(data), "size": len(data)}
        if op == "stat":
            st = _os.stat(path)
            is_dir = _stat.S_ISDIR(st.st_mode)
            return {"is_dir": is_dir, "size": None if is_dir else st.st_size}
        if op == "list":
            entries = []
            with _os.scandir(path) as it:
                for entry in it:
                    try:  # follows a symbolic link; a loop or a dangling link is not a folder
                        is_dir = entry.is_dir()
                        size = None if is_dir else entry.stat().st_size
                    except OSError:
                        is_dir, size = False, None
                    entries.append({"name": entry.name, "is_dir": is_dir, "size": size})
            return {"entries": sorted(entries, key=lambda e: e["name"])}
        if op == "mkdir":
            _os.makedirs(path, exist_ok=True)
            return {}
        if op == "remove":
            if _os.path.isdir(path) and not _os.path.islink(path):
                _shutil.rmtree(path)
            else:
                _os.remove(path)
            return {}
        if op == "exists":
            return {"exists": _os.path.exists(path)}
        if op == "realpath":
            return {"path": _os.path.realpath(path)}
        raise ValueError(op)

    out = []
    for op, path in args["ops"]:
        try:
            out.append(one(op, path))
        except OSError as exc:
            out.append(error(exc))
    return out
"""


@dataclass(frozen=True)
class CommandOutput:
    """What one command line did: its exit code and its output, stdout and stderr apart."""

    exit_code: int
    stdout: str
    stderr: str
    # The run stopped at its time (or CPU) limit: the command did not finish.
    timed_out: bool
    # Output past the run's output cap was dropped.
    truncated: bool
    # The whole run result (receipt, run id, error) for a caller that wants more.
    result: CommandResult


@dataclass(frozen=True)
class FileResult:
    """One file of an upload or download: `error` is the errno's name (ENOENT, EISDIR...) or None."""

    path: str
    content: bytes | None
    error: str | None
    message: str = ""


class WasmrunSandbox:
    """One session of a wasmrun server, used as a sandbox.

    `client`: a `wasmrun.client.Client` (kept open by its owner; `connect` makes one this
    object owns). `session_id`: attach to that session instead of creating one on first use.
    `limits` / `idle_timeout_s`: the new session's (docs/sessions.md). `timeout_ms`: each
    command's default time limit (the session's own when None).
    Safe to share between threads: the session is created once, under a lock; the server
    runs one request of a session at a time (a second gets SessionBusy).
    """

    def __init__(
        self,
        client: Client,
        session_id: str | None = None,
        *,
        limits: RunLimits | dict[str, int] | None = None,
        idle_timeout_s: int | None = None,
        timeout_ms: int | None = None,
        cwd: str = WORKSPACE,
        owns_client: bool = False,
    ) -> None:
        self.client = client
        self.cwd = cwd
        self.timeout_ms = timeout_ms
        self._session_id = session_id
        self._created_here = False
        self._limits = limits
        self._idle_timeout_s = idle_timeout_s
        self._owns_client = owns_client
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, url: str, *, api_key: str | None = None, timeout: float = 120.0, **options: Any) -> WasmrunSandbox:
        """A sandbox on its own client for `url` (closed with it)."""
        return cls(Client(url, api_key=api_key, timeout=timeout), owns_client=True, **options)

    def __enter__(self) -> WasmrunSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_id(self) -> str | None:
        """The session's id: None until the first operation creates it (or the one attached to)."""
        return self._session_id

    def ensure_session(self) -> str:
        """The session's id, creating the session now if there is none yet (once, whoever asks first)."""
        with self._lock:
            if self._session_id is None:
                self._session_id = self.client.create_session(
                    limits=self._limits, idle_timeout_s=self._idle_timeout_s
                ).session_id
                self._created_here = True
            return self._session_id

    def close(self) -> None:
        """Close the session if this object created it; then the client if it owns it."""
        try:
            if self._created_here and self._session_id is not None:
                self.client.close_session(self._session_id)
                self._created_here = False
        finally:
            if self._owns_client:
                self.client.close()

    # -- commands -------------------------------------------------------------

    def run(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_ms: int | None = None,
    ) -> CommandOutput:
        """Run a command line (bash syntax) or an argv list in the session; starts in `cwd`
        (default: the sandbox's, /workspace). A non-zero exit is a result, not an exception;
        a protocol error (an unknown session, SessionBusy, a limit the tenant lacks) raises the
        client's exception."""
        session_id = self.ensure_session()
        result = self.client.run_command(
            command if isinstance(command, str) else list(command),
            cwd=cwd or self.cwd,
            env=dict(env) if env else None,
            stdin=stdin,
            timeout_ms=timeout_ms if timeout_ms is not None else self.timeout_ms,
            session_id=session_id,
        )
        return command_output(result)

    # -- files ----------------------------------------------------------------

    def files(self, ops: Sequence[tuple[str, str]], *, blobs: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Run file operations (op, path) in the session, in one run: "stat", "list", "mkdir",
        "remove", "exists", "realpath", "get" (the file as a blob to read and delete), "put"
        (from `blobs[path]`, mounted). One answer per operation, in order; a failed one is
        {"error": errno name, "message": ...}."""
        input_blobs = sorted(set((blobs or {}).values()))
        result = self.client.run_code(
            _FILES_CODE, entrypoint=_FILES_ENTRY, args={"ops": [list(op) for op in ops], "blobs": dict(blobs or {})},
            input_blobs=input_blobs, session_id=self.ensure_session(),
        )
        output = result.output
        if result.status == "completed" and isinstance(output, dict) and "output_blob" in output:
            output = self._stored_output(output["output_blob"], output.get("size_bytes", 0))
        if result.status != "completed" or not isinstance(output, list):
            error = result.error.message if isinstance(result.error, RunError) else result.summary
            raise RuntimeError(f"wasmrun: the file operations failed in session: {error}")
        answers: list[dict[str, Any]] = output
        return answers

    def _stored_output(self, blob_id: str, size: int) -> Any:
        """A run's output that was too large to answer inline (a long listing, long paths): the
        server stored it as a JSON blob; read whole, then deleted."""
        try:
            blob = self.client.read_blob(blob_id, mode="full", max_bytes=max(size, 1))
        finally:
            self.client.delete_blob(blob_id)
        if blob.truncated:
            raise RuntimeError(f"wasmrun: the file operations' answer ({size} bytes) is larger than the server's full-read cap")
        text = base64.b64decode(blob.content).decode() if blob.encoding == "base64" else blob.content
        return json.loads(text)

    def upload(self, files: Sequence[tuple[str, bytes]]) -> list[FileResult]:
        """Write each (path, bytes), creating missing parent folders; one result per file, in order.
        A path given twice gets its last content."""
        if not files:
            return []
        blobs = {path: self.client.create_blob(content, kind="application/octet-stream").blob_id for path, content in files}
        try:
            answers = self.files([("put", path) for path, _ in files], blobs=blobs)
        finally:
            for blob_id in set(blobs.values()):
                self.client.delete_blob(blob_id)
        return [FileResult(path, None, a.get("error"), a.get("message", "")) for (path, _), a in zip(files, answers, strict=True)]

    def download(self, paths: Sequence[str]) -> list[FileResult]:
        """Each file's bytes, or its error; one result per path, in order."""
        answers = self.files([("get", path) for path in paths]) if paths else []
        return [self.fetched(path, answer) for path, answer in zip(paths, answers, strict=True)]

    def fetched(self, path: str, answer: dict[str, Any]) -> FileResult:
        """A "get" answer as the file's bytes: its blob read whole, then deleted."""
        if "blob" not in answer:
            return FileResult(path, None, answer.get("error", "EIO"), answer.get("message", ""))
        try:
            blob = self.client.read_blob(answer["blob"], mode="full", max_bytes=max(answer["size"], 1))
        finally:
            self.client.delete_blob(answer["blob"])
        if blob.truncated:  # larger than the server lets one read return (WASMRUN_MAX_FULL_READ_BYTES, 10 MiB)
            return FileResult(path, None, "EFBIG", f"{path} is larger than the server's full-read cap")
        content = base64.b64decode(blob.content) if blob.encoding == "base64" else blob.content.encode()
        return FileResult(path, content, None)


# What a run stopped by a limit says (wasmrun/sandbox/contract/errors.py): the command did not finish.
_STOPPED = {"Timeout", "CPULimitExceeded"}


def command_output(result: CommandResult) -> CommandOutput:
    """A `run_command` result as a CommandOutput. A run that a limit stopped has no exit code:
    it gets -1 here, with `timed_out` for a time limit and the error's message in stderr."""
    error = result.error if isinstance(result.error, RunError) else None
    exit_code = result.exit_code if isinstance(result.exit_code, int) else -1
    stderr = result.stderr
    if error is not None and not isinstance(result.exit_code, int):
        stderr = f"{stderr}{'' if not stderr or stderr.endswith(chr(10)) else chr(10)}{error.type}: {error.message}\n"
    return CommandOutput(
        exit_code=exit_code, stdout=result.stdout, stderr=stderr,
        timed_out=error is not None and error.type in _STOPPED, truncated=result.output_truncated, result=result,
    )
