"""The E2B sandboxes this server holds: each one a wasmrun session of one tenant, with
what E2B says about it (template, metadata, end time, paused) and its code contexts.

What E2B says about a sandbox is its record, stored beside the sessions (records.py); the
table here is one server's copy of the sandboxes it serves, with what lives only while a
request does (cell queues, commands), on the event loop's thread only (no lock). The
sandbox id is random (128 bits) and never the session id: a session id is a bearer
secret of /rpc, a sandbox id is listed to its tenant and sent in every sandbox request."""

from __future__ import annotations

import asyncio
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from wasmrun.abi import USER_HOME
from wasmrun.tenants.caller import Caller

DEFAULT_CONTEXT = "default"
HOME = USER_HOME  # E2B's home, "/home/user": every run mounts its /workspace there again
SANDBOX_ID = re.compile(r"[a-z0-9]{32}")
CONTEXT_ID = re.compile(r"[a-z0-9]{1,40}")


@dataclass
class CodeContext:
    """One place code runs in: the sandbox's own session (the default context) or one
    made by `create_code_context` (a session of its own)."""

    context_id: str
    session_id: str
    cwd: str = HOME
    language: str = "python"
    executions: int = 0
    # One cell at a time, queued as in a Jupyter kernel (a session refuses a second run).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    # The cells running or queued (interpreter.MAX_QUEUED_CELLS at most); once `ended`
    # (the sandbox killed or timed out, the context removed, its session gone) those still
    # queued are dropped as they come to the lock, and no new one is taken.
    cells: set[asyncio.Task[None]] = field(default_factory=set, repr=False)
    ended: bool = False


@dataclass
class E2BSandbox:
    sandbox_id: str
    caller: Caller
    template: str
    metadata: dict[str, str]
    started_at: float
    end_at: float
    access_token: str
    contexts: dict[str, CodeContext] = field(default_factory=dict)
    paused: bool = False
    envs: dict[str, str] = field(default_factory=dict)
    # Its commands from Start to end (commands.RunningCommand, by pid): what List shows.
    commands: dict[int, Any] = field(default_factory=dict, repr=False)
    next_pid: int = 1000  # pids as envd's look: each command of the sandbox its own
    # Killed, timed out or gone from the records: a call still in progress fails as E2B's
    # does for a sandbox killed under it (calls.killed).
    ended: bool = False

    @property
    def session_id(self) -> str:
        return self.contexts[DEFAULT_CONTEXT].session_id

    @property
    def state(self) -> str:
        return "paused" if self.paused else "running"


def new_id() -> str:
    return secrets.token_hex(16)


class SandboxTable:
    def __init__(self) -> None:
        self._sandboxes: dict[str, E2BSandbox] = {}

    def add(self, sandbox: E2BSandbox) -> None:
        self._sandboxes[sandbox.sandbox_id] = sandbox

    def find(self, sandbox_id: str, tenant: str | None = None) -> E2BSandbox | None:
        """The sandbox, or None when unknown, malformed, or (with `tenant`) another
        tenant's: the same answer for each."""
        if not isinstance(sandbox_id, str) or not SANDBOX_ID.fullmatch(sandbox_id):
            return None
        found = self._sandboxes.get(sandbox_id)
        if found is None or (tenant is not None and found.caller.tenant != tenant):
            return None
        return found

    def remove(self, sandbox_id: str) -> E2BSandbox | None:
        return self._sandboxes.pop(sandbox_id, None)

    def tenants(self) -> set[str]:
        return {s.caller.tenant for s in self._sandboxes.values()}

    def owned(self, tenant: str) -> list[E2BSandbox]:
        return sorted((s for s in self._sandboxes.values() if s.caller.tenant == tenant), key=lambda s: s.started_at)

    def count(self, tenant: str) -> int:
        return sum(1 for s in self._sandboxes.values() if s.caller.tenant == tenant)

    def drop(self, sandbox_id: str) -> E2BSandbox | None:
        """Out of this server's table, its queued cells dropped (its record is gone: killed,
        expired or ended, here or on another server, which ends its sessions)."""
        sandbox = self._sandboxes.pop(sandbox_id, None)
        if sandbox is not None:
            sandbox.ended = True
            for context in sandbox.contexts.values():
                context.ended = True
        return sandbox
