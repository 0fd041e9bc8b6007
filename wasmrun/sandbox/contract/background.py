"""Guest work the server starts itself, outside any client's run: its limits and its tally.

Three kinds of runs execute guest code without a client call of their own:
a skill's *import run* (memory/skillpages.py: it makes the skill's pages in
the background), a *compile run* (compiled.py's bytecode for a skill, before
the run that needs it) and the *warm-up* runs an engine makes at start to learn
its hot pages. None of them takes the limits of the run that caused it: each
kind has fixed small limits of its own (below), so a skill that spins at
import is stopped there, whatever limits the client asked for, and a client
asking for tiny limits cannot make the build fail for everyone.

Each such run is tallied (kind, outcome, CPU time). A worker process sends
its tally with the next result it returns; the executor adds it up for
/metrics (`wasmrun_background_runs_total`, `wasmrun_background_cpu_seconds_total`).
"""

from __future__ import annotations

import threading

import msgspec

from wasmrun.limits import MiB
from wasmrun.sandbox.contract.limits import Limits

# A skill's import: generous for real imports (pandas takes about 2 s of CPU
# here), small against the 15 minutes a client run may have.
IMPORT_LIMITS = Limits(
    timeout_ms=20_000, cpu_ms=8_000, workspace_bytes=16 * MiB, workspace_files=100,
    blob_io_bytes=0, result_bytes=64 * 1024,
)
# Our own code compiling a skill's modules (it runs none of them), inside the
# call of the run that needs them (it holds that call's worker).
COMPILE_LIMITS = Limits(timeout_ms=60_000)
MAX_UNSENT = 1_000  # runs tallied in a worker and not yet sent; older ones are merged


class BackgroundRun(msgspec.Struct, frozen=True):
    """One background run, as /metrics counts it."""

    kind: str  # "import", "compile" or "warmup"
    outcome: str  # "completed", or the error type that ended it
    cpu_ms: float = 0.0


class BackgroundLog:
    """Background runs of one engine not yet reported (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: list[BackgroundRun] = []

    def add(self, run: BackgroundRun) -> None:
        with self._lock:
            if len(self._runs) >= MAX_UNSENT:
                self._runs = _merged(self._runs)
            self._runs.append(run)

    def drain(self) -> list[BackgroundRun]:
        with self._lock:
            runs, self._runs = self._runs, []
            return runs


def _merged(runs: list[BackgroundRun]) -> list[BackgroundRun]:
    """`runs` as one entry per (kind, outcome): their CPU summed. (Counts are
    then lost for the merged ones, CPU is not: a flood cannot grow the list.)"""
    cpu: dict[tuple[str, str], float] = {}
    for run in runs:
        cpu[run.kind, run.outcome] = cpu.get((run.kind, run.outcome), 0.0) + run.cpu_ms
    return [BackgroundRun(kind, outcome, ms) for (kind, outcome), ms in cpu.items()]


class BackgroundTotals:
    """Every background run reported so far, by (kind, outcome): (count, CPU seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str], tuple[int, float]] = {}

    def add(self, runs: list[BackgroundRun]) -> None:
        if not runs:
            return
        with self._lock:
            for run in runs:
                count, cpu_s = self._totals.get((run.kind, run.outcome), (0, 0.0))
                self._totals[run.kind, run.outcome] = (count + 1, cpu_s + run.cpu_ms / 1000)

    def snapshot(self) -> dict[tuple[str, str], tuple[int, float]]:
        with self._lock:
            return dict(self._totals)
