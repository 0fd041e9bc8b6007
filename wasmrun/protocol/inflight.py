"""The run each session of this server is running now, so that `interrupt_session` can
name it to the executor. A session runs one request at a time (its hold in the session
store), so a session has at most one; a run held on another server of a shared
deployment is not here, and that server is the one that can interrupt it."""

from __future__ import annotations


class SessionRuns:
    def __init__(self) -> None:
        self._runs: dict[str, str] = {}  # session id -> run id

    def start(self, session_id: str, run_id: str) -> None:
        self._runs[session_id] = run_id

    def end(self, session_id: str, run_id: str) -> None:
        if self._runs.get(session_id) == run_id:
            del self._runs[session_id]

    def of(self, session_id: str) -> str | None:
        return self._runs.get(session_id)
