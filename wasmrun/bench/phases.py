"""One hello broken down by phase, through the real dispatcher, admission, sandbox and audit log.

In-process (the dispatcher of `wasmrun run`, with an audit log as the server has):
the marks of wasmrun/phases.py, each run after the sandbox settled. The
marks are off in production; what they cost off is measured here too.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from wasmrun import phases
from wasmrun.bench.systems import HELLO, InProcess, as_run_code
from wasmrun.observe.audit import AuditLog
from wasmrun.observe.record import Observers
from wasmrun.protocol.methods import Dispatcher
from wasmrun.sandbox import BackgroundTotals, ExecutorHealth, OutputSink, RunRequest, RunResult, ToolAnswers, ToolBatch
from wasmrun.server import assemble_local
from wasmrun.settings import Settings

# (phase, from mark, to mark)
PHASES = (
    ("admission", "call", "admitted"),
    ("to the sandbox thread", "admitted", "sandbox"),
    ("instance", "sandbox", "instance"),
    ("guest entry", "instance", "entry"),
    ("guest (the run itself)", "entry", "guest"),
    ("capture", "guest", "captured"),
    ("result", "captured", "answered"),
    ("audit", "answered", "audited"),
)


class _SharedEngine:
    """The bench's in-process engine as the dispatcher's executor (one engine in the process)."""

    def __init__(self, inproc: InProcess) -> None:
        self.engine = inproc.engine
        self.background = BackgroundTotals()

    async def run(
        self, request: RunRequest, on_output: OutputSink | None = None, on_tools: Callable[[ToolBatch], None] | None = None,
    ) -> RunResult:
        if on_tools is not None:  # the phases measured here are of runs that declare no tools
            raise ValueError("the phases bench's executor runs no code-mode runs")
        try:
            return await asyncio.to_thread(self.engine.run, request, on_output)
        finally:
            self.background.add(self.engine.loop.background.drain())  # as InProcessExecutor does

    def health(self) -> ExecutorHealth:
        return ExecutorHealth(total=1, free=1, unavailable=0, queued=0)

    def interrupt(self, run_id: str) -> bool:
        return self.engine.interrupt(run_id)

    async def answer_tools(self, answers: ToolAnswers) -> bool:
        return False  # no run here waits for tools (see run)

    def capacity(self) -> tuple[int, int]:
        return 0, 1

    def close(self) -> None:
        pass


def measure(inproc: InProcess, data_dir: Path, samples: int) -> dict[str, Any]:
    settings = Settings(data_dir=data_dir, workers=1, audit_log=data_dir / "audit.log")
    context = assemble_local(settings, blobs=inproc.blobs, executor=_SharedEngine(inproc)).context
    audit = AuditLog(data_dir / "audit.log")
    dispatcher = Dispatcher(context, Observers(audit))
    raw = msgspec.Raw(msgspec.json.encode({"language": "python", "code": as_run_code(HELLO)}))
    loop = asyncio.new_event_loop()
    per_phase: dict[str, list[float]] = {name: [] for name, _, _ in PHASES}
    totals: dict[str, list[float]] = {"marks recording": [], "marks off": []}
    try:
        for i in range(samples + 5):
            for recording in ((True, False) if i % 2 else (False, True)):
                inproc.settle()
                time.sleep(0.005)
                t = time.perf_counter()
                if recording:
                    with phases.recording() as marks:
                        loop.run_until_complete(dispatcher("run_code", raw))
                else:
                    loop.run_until_complete(dispatcher("run_code", raw))
                if i < 5:
                    continue  # warm-up
                totals["marks recording" if recording else "marks off"].append(time.perf_counter() - t)
                if recording:
                    at = dict(marks)
                    for name, start, end in PHASES:
                        per_phase[name].append((at[end] - at[start]) / 1e6)
    finally:
        loop.close()
        audit.close()
    off_ms = statistics.median(totals["marks off"]) * 1000
    mark_ns = min(timeit.repeat(lambda: phases.mark("x"), number=100_000, repeat=5)) / 100_000 * 1e9
    return {
        "samples": samples,
        "phases_ms": {name: statistics.median(v) for name, v in per_phase.items()},
        "hello_p50_ms": {k: statistics.median(v) * 1000 for k, v in totals.items()},
        "mark_off_ns": mark_ns,
        "marks_per_run": len(PHASES) + 2,
        "marks_share_of_hello": mark_ns * (len(PHASES) + 2) / (off_ms * 1e6),
    }
