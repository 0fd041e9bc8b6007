"""The identifiers this server holds: each (tenant, pool, identifier) one wasmrun session,
made on its first use, ended after its cooldown unused as the service's are.

An identifier names a session of the caller's tenant only: the same identifier sent with
another tenant's key is another session (never a way into the first). The table lives in
the server process, on the event loop's thread (no lock)."""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from dataclasses import dataclass, field

from wasmrun.abi import AZURE_DATA
from wasmrun.doors import paths as doors_paths
from wasmrun.doors.paths import PathRefused, Refusal
from wasmrun.e2b.calls import FrontError
from wasmrun.e2b.sandboxes import E2BSandbox
from wasmrun.tenants.caller import Caller

DATA = AZURE_DATA  # "/mnt/data": the session's working folder, /workspace mounted again
# The service's sessions end after their pool's cooldown unused (300 s by default); here at
# most the server's session idle timeout allows.
COOLDOWN_S = 300
MAX_IDENTIFIER = 128
# Printable ASCII, as the service allows (letters, digits and its punctuation), no spaces.
IDENTIFIER = re.compile(rf"[!-~]{{1,{MAX_IDENTIFIER}}}")
POOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MAX_PATH = 1024
MAX_PARTS = 32
# Calls on one identifier running or waiting at once (each holds its tenant's request place).
MAX_QUEUED = 8

Key = tuple[str, str, str]  # tenant, pool, identifier


def checked_identifier(identifier: str | None) -> str:
    if identifier is None or not IDENTIFIER.fullmatch(identifier):
        raise FrontError(400, (
            f"identifier must be 1 to {MAX_IDENTIFIER} printable ASCII characters without spaces"
            " (the session's name, chosen by the client)"
        ))
    return identifier


def checked_pool(pool: str) -> str:
    if not POOL.fullmatch(pool):
        raise FrontError(404, "no such session pool: its name is 1 to 63 letters, digits, '.', '_' or '-'")
    return pool


def relative(name: str) -> str:
    """A file name within /mnt/data ("" for the folder itself): relative to it, or absolute
    under it. Anything else (another absolute path, `..`, NUL, too long) is refused (the
    doors' check, wasmrun/doors/paths.py), a 400 in the service's words."""
    try:
        return doors_paths.relative(name, (DATA,), max_chars=MAX_PATH, max_parts=MAX_PARTS)
    except PathRefused as refused:
        raise FrontError(400, _WORDS[refused.why].format(name=refused.shown)) from None


_WORDS = {
    Refusal.MALFORMED: f"the file name must be 1 to {MAX_PATH} characters, without NUL",
    Refusal.OUTSIDE: "{name!r} is outside the session's files: they are under " + DATA,
    Refusal.LEADS_OUT: "{name!r} leads out of " + DATA + " with '..'",
    Refusal.TOO_DEEP: f"the file name is deeper than {MAX_PARTS} folders",
}


def data_path(rel: str) -> str:
    return posixpath.join(DATA, rel) if rel else DATA


@dataclass
class AzureSession:
    """One identifier's session: `holder` is the wasmrun session as the E2B door's file
    code takes it (its one context, whose lock queues the session's calls)."""

    key: Key
    caller: Caller
    holder: E2BSandbox | None = None
    last_used: float = field(default_factory=time.monotonic)
    waiting: int = 0  # calls running or queued on it
    making: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def session_id(self) -> str | None:
        return None if self.holder is None else self.holder.session_id


class IdentifierTable:
    def __init__(self, cooldown_s: float) -> None:
        self.cooldown_s = cooldown_s
        self._sessions: dict[Key, AzureSession] = {}

    def get_or_add(self, key: Key, caller: Caller) -> AzureSession:
        found = self._sessions.get(key)
        if found is None:
            found = self._sessions[key] = AzureSession(key, caller)
        return found

    def find(self, key: Key) -> AzureSession | None:
        return self._sessions.get(key)

    def remove(self, key: Key) -> AzureSession | None:
        return self._sessions.pop(key, None)

    def take_idle(self, now: float | None = None) -> list[AzureSession]:
        """The sessions unused past their cooldown (nothing running or queued), out of the
        table: their wasmrun sessions expire by themselves; the caller closes them anyway."""
        now = time.monotonic() if now is None else now
        gone = [s for s in self._sessions.values() if not s.waiting and now - s.last_used > self.cooldown_s]
        for entry in gone:
            del self._sessions[entry.key]
        return gone

    def __len__(self) -> int:
        return len(self._sessions)
