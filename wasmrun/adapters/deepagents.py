"""LangChain deepagents on wasmrun: a `SandboxBackendProtocol` backend on one session.

    from deepagents import create_deep_agent
    from wasmrun.adapters.deepagents import WasmrunBackend

    backend = WasmrunBackend.connect("http://127.0.0.1:8080")
    agent = create_deep_agent(model=..., backend=backend)

deepagents' `BaseSandbox` builds the agent's ls / read_file / write_file / edit_file /
grep / glob tools out of `execute(command)` (scripts it runs with `python3 -c`, which the
guest's shell runs on the sandbox's own interpreter) and `upload_files` /
`download_files`; the `execute` tool is `execute` itself. This class supplies those
four members, each on the session (wasmrun.adapters.sandbox): commands through
`run_command`, files through blobs and one run in the session. Install with
`pip install 'wasmrun[adapters]'`.
"""

from __future__ import annotations

import posixpath
from typing import Any

from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox

from wasmrun.adapters.sandbox import WasmrunSandbox
from wasmrun.client import Client

__all__ = ["WasmrunBackend"]

# deepagents' own words for the file errors its tools explain to the model
# (deepagents.backends.protocol.FileOperationError); others go through as the errno's name.
_FILE_ERRORS = {
    "ENOENT": "file_not_found",
    "EACCES": "permission_denied",
    "EPERM": "permission_denied",
    "EROFS": "permission_denied",
    "EISDIR": "is_directory",
    "ENOTDIR": "invalid_path",
    "EINVAL": "invalid_path",
    "ENAMETOOLONG": "invalid_path",
}
# What a timed-out command exits with, as `timeout(1)` and deepagents' local shell say.
TIMEOUT_EXIT = 124


class WasmrunBackend(BaseSandbox):
    """deepagents' sandbox backend on one wasmrun session.

    `sandbox`: the session (a `WasmrunSandbox`); the session is created now, since `id` is
    asked for before any command. `close()` closes a session this backend created.
    """

    def __init__(self, sandbox: WasmrunSandbox) -> None:
        self.sandbox = sandbox
        self._id = sandbox.ensure_session()

    @classmethod
    def connect(cls, url: str, *, api_key: str | None = None, **options: Any) -> WasmrunBackend:
        """A backend on a new session of the server at `url`, on its own client."""
        return cls(WasmrunSandbox.connect(url, api_key=api_key, **options))

    @classmethod
    def on(cls, client: Client, session_id: str | None = None, **options: Any) -> WasmrunBackend:
        """A backend on `client` (its owner closes it): on `session_id`, or on a new session."""
        return cls(WasmrunSandbox(client, session_id, **options))

    def close(self) -> None:
        self.sandbox.close()

    @property
    def id(self) -> str:
        """The session's id (`ses_...`)."""
        return self._id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run `command` (bash syntax) in the session, starting in /workspace. `timeout` in
        seconds (None or 0: the sandbox's default). The output is stdout then stderr, as a
        terminal shows them; the exit code is the command's."""
        timeout_ms = timeout * 1000 if timeout else None
        out = self.sandbox.run(command, timeout_ms=timeout_ms)
        output = out.stdout + out.stderr
        if out.timed_out:
            seconds = f"{timeout} seconds" if timeout else "the sandbox's time limit"
            return ExecuteResponse(
                output=f"{output}\nError: Command timed out after {seconds}.".lstrip("\n"),
                exit_code=TIMEOUT_EXIT, truncated=out.truncated,
            )
        return ExecuteResponse(output=output, exit_code=out.exit_code, truncated=out.truncated)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each (absolute path, bytes), creating parent folders; a per-file error, never an exception."""
        relative = {path for path, _ in files if not posixpath.isabs(path)}
        results = {r.path: r for r in self.sandbox.upload([(p, c) for p, c in files if p not in relative])}
        return [
            FileUploadResponse(path=path, error="invalid_path" if path in relative else _error(results[path].error))
            for path, _ in files
        ]

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Each file's bytes, or its error (file_not_found, is_directory, ...), in order."""
        absolute = [path for path in paths if posixpath.isabs(path)]
        results = iter(self.sandbox.download(absolute))
        responses = []
        for path in paths:
            if not posixpath.isabs(path):
                responses.append(FileDownloadResponse(path=path, content=None, error="invalid_path"))
                continue
            result = next(results)
            responses.append(FileDownloadResponse(path=path, content=result.content, error=_error(result.error)))
        return responses


def _error(errno_name: str | None) -> str | None:
    return None if errno_name is None else _FILE_ERRORS.get(errno_name, errno_name)
