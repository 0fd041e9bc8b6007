"""Pydantic AI on wasmrun: a `pydantic_ai.workspaces` backend on one session.

    from pydantic_ai import Agent
    from wasmrun.adapters.pydantic_ai import WasmrunWorkspace

    agent = Agent("openai:gpt-5", capabilities=[WasmrunWorkspace("http://127.0.0.1:8080")])
    result = agent.run_sync("write fib.py and run it")

pydantic-ai-slim 2.62.0 (the pin) has no `pydantic_ai.sandboxes`; its interface for the environment a run
works in is `pydantic_ai.workspaces` (protocol.py). `WasmrunWorkspaceBackend` implements all of
it on one wasmrun session (wasmrun.adapters.sandbox):

- `WorkspaceBackend`: `ref` is `WorkspaceRef(provider="wasmrun", id=<session id>)`, None until
  the first operation creates the session; built with a ref it attaches, and a session that is
  gone (closed, expired, another tenant's) is `WorkspaceUnavailableError`.
- `SupportsCommands.run`: `run_command` in the session (the guest's shell, docs/commands.md).
  A non-zero exit is a result; the time limit is `WorkspaceTimeoutError`; output past the run's
  output cap is `WorkspaceOutputLimitError`; another limit (memory, files) is `WorkspaceError`.
- `SupportsFilesystem` and `SupportsRealpath`: each operation is one run in the session (files
  in and out as blobs), its errno raised as the builtin `OSError` subclass
  (`FileNotFoundError`, `IsADirectoryError`, `NotADirectoryError`, `FileExistsError`, ...).

What wasmrun cannot do (the guest runs no processes): `&` runs a job in the foreground to its
end, and there are no PIDs, signals or `setsid`, so a command cannot outlive its call, nor be
stopped by cancelling the caller (the run goes on to its end or its time limit, and the backend
waits for it). The backend serializes its own calls: a session runs one request at a time.

`WasmrunWorkspace` is the capability (as `LocalWorkspace` is for the local backend): it gives
each run a backend on a new session, or the one a `WorkspaceRef` in the message history names,
and by default the tools `run_command`, `read_file`, `write_file` and `list_dir`
(`workspace_tools()`). Install with `pip install 'wasmrun[adapters]'`.
"""

from __future__ import annotations

import errno
import math
import os
import posixpath
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

import anyio.to_thread
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset
from pydantic_ai.workspaces import (
    CommandResult,
    FileEntry,
    SupportsCommands,
    SupportsFilesystem,
    SupportsRealpath,
    WorkspaceBackend,
    WorkspaceCommand,
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceRef,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)

from wasmrun.adapters.sandbox import FileResult, WasmrunSandbox
from wasmrun.client import Client, InvalidParams, RunLimits
from wasmrun.protocol.errors import SessionNotFound
from wasmrun.protocol.types import RunError

__all__ = ["PROVIDER", "WasmrunWorkspace", "WasmrunWorkspaceBackend", "session_gone", "workspace_tools"]

# `WorkspaceRef.provider` of a wasmrun session; its `id` is the session's id.
PROVIDER = "wasmrun"

T = TypeVar("T")

# The session's working folder and the folders above it (and /home/user, the same folder under
# E2B's name): `remove` refuses them, so a model's `rm .` cannot empty the workspace.
_PROTECTED = frozenset({"/", "/workspace", "/home", "/home/user"})


class WasmrunWorkspaceBackend(WorkspaceBackend, SupportsCommands, SupportsFilesystem, SupportsRealpath):
    """Pydantic AI's workspace backend on one wasmrun session.

    `sandbox`: the session (a `WasmrunSandbox`, created on its first operation or attached to by
    its id). `env`: variables for every command (a call's `env` goes on top). Nothing is done
    when it is built; `close()` closes a session this backend created (the core never does:
    whoever holds the ref decides when the session ends).
    """

    def __init__(self, sandbox: WasmrunSandbox, *, env: Mapping[str, str] | None = None) -> None:
        self.sandbox = sandbox
        self._env = _checked_env(env)
        self._lock = threading.Lock()
        self._working_dir: str | None = None

    @classmethod
    def connect(
        cls, url: str, ref: WorkspaceRef | None = None, *, api_key: str | None = None,
        env: Mapping[str, str] | None = None, **options: Any,
    ) -> WasmrunWorkspaceBackend:
        """A backend on its own client for the server at `url`: a new session, or the one `ref` names."""
        return cls(WasmrunSandbox.connect(url, api_key=api_key, session_id=_session_of(ref), **options), env=env)

    @classmethod
    def on(
        cls, client: Client, ref: WorkspaceRef | None = None, *, env: Mapping[str, str] | None = None, **options: Any
    ) -> WasmrunWorkspaceBackend:
        """A backend on `client` (its owner closes it): a new session, or the one `ref` names."""
        return cls(WasmrunSandbox(client, _session_of(ref), **options), env=env)

    def close(self) -> None:
        """Close the session if this backend created it (and the client if it owns it)."""
        self.sandbox.close()

    @property
    def ref(self) -> WorkspaceRef | None:
        session_id = self.sandbox.session_id
        return None if session_id is None else WorkspaceRef(provider=PROVIDER, id=session_id)

    # -- calls ----------------------------------------------------------------

    async def _call(self, fn: Callable[[], T]) -> T:
        """`fn` (blocking client calls) in a worker thread, one at a time: a session runs one
        request at a time and would answer a second with SessionBusy. A session that is gone is
        WorkspaceUnavailableError; other client errors (transport, ServerBusy) go through as
        raised, for the caller's retries."""

        def locked() -> T:
            with self._lock:
                try:
                    return fn()
                except InvalidParams as exc:
                    if not session_gone(exc):
                        raise
                    raise WorkspaceUnavailableError(
                        f"wasmrun session {self.sandbox.session_id} is gone (closed, expired or not this tenant's): {exc}"
                    ) from exc

        return await anyio.to_thread.run_sync(locked)

    async def _op(self, op: str, path: str) -> dict[str, Any]:
        """One file operation in the session; its error as the builtin OSError subclass."""
        [answer] = await self._call(lambda: self.sandbox.files([(op, path)]))
        if "error" in answer:
            raise _os_error(answer["error"], path)
        return answer

    async def working_dir(self) -> str:
        """The folder commands start in, as the session resolves it (/workspace). The first call
        creates the session, or checks that the attached one is there."""
        if self._working_dir is None:
            self._working_dir = (await self._op("realpath", self.sandbox.cwd))["path"]
        return self._working_dir

    # -- commands -------------------------------------------------------------

    async def run(
        self,
        command: WorkspaceCommand,
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Run `command` in the session with run_command, starting in the working folder, stdin
        at EOF. A string is a command line for the guest's shell (bash syntax; `shell=True`), a
        sequence an argv (`shell=False`). `timeout` in seconds; without it, the session's own
        time limit, which raises WorkspaceTimeoutError as well."""
        argv = _checked_command(command, shell=shell)
        timeout_ms = _timeout_ms(timeout)
        merged_env = {**self._env, **_checked_env(env)}

        def call() -> Any:
            try:
                return self.sandbox.run(argv, env=merged_env or None, timeout_ms=timeout_ms)
            except InvalidParams as exc:  # e.g. a timeout above what the server allows
                if session_gone(exc):
                    raise
                raise ValueError(f"wasmrun refused the command: {exc}") from exc

        out = await self._call(call)
        stderr = out.result.stderr  # without the limit's line that CommandOutput adds
        if out.timed_out:
            limit = f"after {timeout:g}s" if timeout is not None else "at the sandbox's time limit"
            raise WorkspaceTimeoutError(f"command timed out {limit} and was stopped", stdout=out.stdout, stderr=stderr)
        if out.truncated:
            captured = len(out.stdout.encode()) + len(stderr.encode())
            raise WorkspaceOutputLimitError(
                "the command's output exceeded the sandbox's output cap (the run's output_bytes); "
                "redirect it to a file and read part of it instead",
                limit=captured, stdout=out.stdout, stderr=stderr,
            )
        if not isinstance(out.result.exit_code, int):  # stopped by another limit: memory, files, CPU
            error = out.result.error
            what = f"{error.type}: {error.message}" if isinstance(error, RunError) else out.result.summary
            raise WorkspaceError(f"the command did not finish: {what}")
        return CommandResult(exit_code=out.exit_code, stdout=out.stdout, stderr=out.stderr)

    # -- files ----------------------------------------------------------------

    async def read_bytes(self, path: str) -> bytes:
        path = _checked_path(path)
        [result] = await self._call(lambda: self.sandbox.download([path]))
        return _content(result)

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Write `data` to `path`, creating missing parent folders, through a symbolic link."""
        path = _checked_path(path)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        content = bytes(data)
        [result] = await self._call(lambda: self.sandbox.upload([(path, content)]))
        if result.error is not None:
            raise _os_error(result.error, path)

    async def stat(self, path: str) -> FileEntry:
        path = _checked_path(path)
        answer = await self._op("stat", path)
        name = posixpath.basename(posixpath.normpath(path))
        return FileEntry(name=name, path=path, is_dir=answer["is_dir"], size=answer["size"])

    async def list_dir(self, path: str) -> Sequence[FileEntry]:
        path = _checked_path(path)
        answer = await self._op("list", path)
        return [
            FileEntry(name=e["name"], path=posixpath.join(path, e["name"]), is_dir=e["is_dir"], size=e["size"])
            for e in answer["entries"]
        ]

    async def make_dir(self, path: str) -> None:
        await self._op("mkdir", _checked_path(path))

    async def remove(self, path: str) -> None:
        """Remove a file, a symbolic link (itself) or a folder and what it holds; refuses the
        working folder and the folders above it with ValueError."""
        path = _checked_path(path)
        parent, name = posixpath.split(posixpath.normpath(path))

        def where() -> list[dict[str, Any]]:
            return self.sandbox.files([("realpath", path), ("realpath", parent or "/")])

        real, real_parent = await self._call(where)
        is_link = name not in ("", ".", "..") and real.get("path") != posixpath.join(real_parent.get("path", ""), name)
        if not is_link and real.get("path") in _PROTECTED | {await self.working_dir()}:
            raise ValueError(f"refusing to remove {path!r}: it is the workspace's folder or one above it")
        await self._op("remove", path)

    async def exists(self, path: str) -> bool:
        exists: bool = (await self._op("exists", _checked_path(path)))["exists"]
        return exists

    async def realpath(self, path: str) -> str:
        resolved: str = (await self._op("realpath", _checked_path(path)))["path"]
        return resolved


def session_gone(exc: InvalidParams) -> bool:
    """The server's answer for a session that is not there (closed, expired, another tenant's):
    SessionNotFound, which a client sees as InvalidParams about the `session_id` field."""
    return isinstance(exc, SessionNotFound) or (isinstance(exc.data, dict) and exc.data.get("field") == "session_id")


def _session_of(ref: WorkspaceRef | None) -> str | None:
    if ref is None:
        return None
    if ref.provider != PROVIDER:
        raise ValueError(f"not a wasmrun workspace: {ref!r} (its provider is not {PROVIDER!r})")
    return ref.id


def _checked_path(path: str) -> str:
    """A path the session can be asked about: a str, absolute, no NUL, UTF-8 (the sandbox's
    names are UTF-8 only). What is wrong is a ValueError/TypeError here, not a run."""
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, not {type(path).__name__}")
    if "\0" in path:
        raise ValueError("path holds a NUL character, which no path can")
    if not posixpath.isabs(path):
        raise ValueError(f"path must be absolute, got {path[:200]!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"path is not valid UTF-8 (the sandbox's file names are UTF-8 only): {path[:200]!r}") from exc
    return path


def _checked_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{what} holds a NUL character, which no command line, path or variable can")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8") from exc
    return value


def _checked_command(command: WorkspaceCommand, *, shell: bool) -> str | list[str]:
    if isinstance(command, str):
        if not shell:
            raise TypeError("a string command requires shell=True; pass an argv sequence otherwise")
        return _checked_text(command, "command")
    if shell:
        raise TypeError("an argv sequence cannot be combined with shell=True; pass a single command string")
    if isinstance(command, (bytes, bytearray)) or not isinstance(command, Sequence):
        raise TypeError(f"command must be a str or a sequence of str, not {type(command).__name__}")
    argv = [_checked_text(word, f"command[{i}]") for i, word in enumerate(command)]
    if not argv:
        raise ValueError("command must not be empty")
    return argv  # `/bin/sh`, `/usr/bin/env`...: the guest's shell runs them as its commands


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str, not {type(env).__name__}")
    out = {}
    for name, value in env.items():
        _checked_text(name, "an env name")
        if not name or "=" in name:
            raise ValueError(f"env name {name[:100]!r} is empty or holds '='")
        out[name] = _checked_text(value, f"env[{name[:100]!r}]")
    return out


def _timeout_ms(timeout: float | None) -> int | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError("timeout must be a positive finite number or None")
    return max(1, math.ceil(timeout * 1000))


def _os_error(name: str, path: str, message: str = "") -> OSError:
    """An errno's name (ENOENT...) as the builtin exception OSError(errno, ...) builds for it
    (FileNotFoundError, IsADirectoryError...). The host's strerror: the guest's errno numbers are WASI's."""
    number = getattr(errno, name, None)
    if not isinstance(number, int):
        return OSError(f"{name}: {message or 'the sandbox could not do that'}: {path[:200]!r}")
    return OSError(number, message or os.strerror(number), path)


def _content(result: FileResult) -> bytes:
    if result.error is not None:
        raise _os_error(result.error, result.path, result.message if result.error == "EFBIG" else "")
    assert result.content is not None
    return result.content


# -- the capability and its tools ---------------------------------------------------------


def workspace_tools() -> FunctionToolset[Any]:
    """Four tools over the run's workspace (`ctx.workspace`, any backend): `run_command`,
    `read_file`, `write_file`, `list_dir`. A failure the model can act on (a missing file, a
    command over its time or output limit) comes back as the tool's text, starting `Error:`."""

    async def run_command(ctx: RunContext[Any], command: str, timeout_s: float | None = None) -> str:
        """Run a shell command line (bash syntax; ls, cat, grep, sed, awk, wc, python ...) in the
        working folder. Returns the exit code, then stdout and stderr."""
        try:
            result = await ctx.workspace.run(command, shell=True, timeout=timeout_s)
        except WorkspaceUnavailableError:
            raise  # the session is gone: that ends the run
        except (WorkspaceError, OSError, ValueError) as exc:  # timed out, output or another limit, a bad cwd
            return f"Error: {exc}"
        text = f"exit code {result.exit_code}\n"
        if result.stdout:
            text += f"stdout:\n{result.stdout}"
        if result.stderr:
            text += f"{'' if text.endswith(chr(10)) else chr(10)}stderr:\n{result.stderr}"
        return text

    async def read_file(ctx: RunContext[Any], path: str) -> str:
        """Read a text file (a path relative to the working folder, or absolute)."""
        try:
            return (await ctx.workspace.read_bytes(path)).decode("utf-8", errors="replace")
        except (OSError, ValueError) as exc:
            return f"Error: {_explained(exc, path)}"

    async def write_file(ctx: RunContext[Any], path: str, content: str) -> str:
        """Write a text file, creating its folders (a path relative to the working folder, or absolute)."""
        try:
            await ctx.workspace.write_text(path, content)
        except (OSError, ValueError) as exc:
            return f"Error: {_explained(exc, path)}"
        return f"wrote {len(content.encode())} bytes to {await ctx.workspace.resolve(path)}"

    async def list_dir(ctx: RunContext[Any], path: str = ".") -> str:
        """List a folder: one entry a line, folders ending in /, files with their size."""
        try:
            entries = await ctx.workspace.list_dir(path)
        except (OSError, ValueError) as exc:
            return f"Error: {_explained(exc, path)}"
        lines = [f"{e.name}/" if e.is_dir else f"{e.name}\t{e.size if e.size is not None else '?'} bytes" for e in entries]
        return "\n".join(lines) or "(empty)"

    return FunctionToolset([run_command, read_file, write_file, list_dir])


def _explained(exc: BaseException, path: str) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {path}"
    return str(exc)


@dataclass
class WasmrunWorkspace(AbstractCapability[Any]):
    """Gives each run a workspace on a wasmrun server: a new session, or the one a
    `WorkspaceRef(provider="wasmrun", ...)` in the message history (or `workspace=`) names.

    `url` / `api_key`: the server; or `client`, a `wasmrun.client.Client` its owner closes.
    `limits` / `idle_timeout_s`: each new session's (docs/sessions.md). `env`: variables for every
    command. `tools`: add `workspace_tools()` to the agent (False: bring your own).
    The sessions are not closed when a run ends (the core never tears a workspace down): close
    one with `result.workspace.backend.close()` or `client.close_session(ref.id)`, or let its idle
    timeout end it. `close()` closes the client this capability made.
    """

    url: str = "http://127.0.0.1:8080"
    _: KW_ONLY
    api_key: str | None = None
    client: Client | None = None
    limits: RunLimits | dict[str, int] | None = None
    idle_timeout_s: int | None = None
    env: Mapping[str, str] | None = None
    tools: bool = True
    id: str | None = "wasmrun_workspace"
    _own_client: Client | None = field(default=None, init=False, repr=False)

    def _client(self) -> Client:
        if self.client is not None:
            return self.client
        if self._own_client is None:  # an HTTP connection pool, opened on the first request
            self._own_client = Client(self.url, api_key=self.api_key)
        return self._own_client

    def close(self) -> None:
        if self._own_client is not None:
            self._own_client.close()
            self._own_client = None

    @classmethod
    def combine(cls, capabilities: Sequence[AbstractCapability[Any]]) -> AbstractCapability[Any]:
        return capabilities[-1]

    def get_workspace(self, ctx: RunContext[Any], *, ref: WorkspaceRef | None) -> WorkspaceBackend | None:
        if ref is not None and ref.provider != PROVIDER:
            return None
        sandbox = WasmrunSandbox(
            self._client(), None if ref is None else ref.id, limits=self.limits, idle_timeout_s=self.idle_timeout_s
        )
        return WasmrunWorkspaceBackend(sandbox, env=self.env)

    def get_toolset(self) -> AbstractToolset[Any] | None:
        return workspace_tools() if self.tools else None
