"""One call as the operator sees it: who, what, how it ended, what it cost.

Never the code, the args or any secret: only names, ids, sizes and outcomes.
"""

from __future__ import annotations

from typing import Protocol

import msgspec


class CallRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    time: str  # ISO 8601, UTC, when the call ended
    tenant: str
    method: str
    status: str  # "ok", or "error" (a JSON-RPC error answered)
    duration_ms: float
    bytes_in: int  # the call's params as sent
    bytes_out: int  # the result as answered (0 for an error)
    error_code: int | None = None  # the JSON-RPC error's code
    error_type: str | None = None  # the run's error type, or the protocol error's class
    skill: str | None = None
    version: str | None = None
    run_id: str | None = None
    run_status: str | None = None  # a run method's outcome, "completed" or "failed"; None for other calls
    blobs_created: list[str] = []
    session: str | None = None  # the session the call named (a prefix of its key, never its id)
    session_created: str | None = None  # the session create_session / fork_session made
    session_rolled_back: bool | None = None  # a run in a session that a limit or a crash undid
    # An on-demand install (method "packages.install", wasmrun/packages/ondemand.py): the set's
    # name==version pins, its id, and whether it was there already (bytes_in: what was downloaded).
    packages: list[str] = []
    package_set: str | None = None
    packages_cached: bool | None = None


class Observer(Protocol):
    def record(self, call: CallRecord) -> None: ...


class Observers:
    """Several observers as one; one that fails is logged, never fails the call."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def record(self, call: CallRecord) -> None:
        import logging

        for observer in self.observers:
            try:
                observer.record(call)
            except Exception:
                logging.getLogger("wasmrun.observe").exception("observer %r failed", observer)
