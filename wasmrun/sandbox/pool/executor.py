"""Running sandboxes off the event loop, with a bound on how many at once.

The protocol layer holds one `Executor` and awaits `run()`. Past the bound a
request waits up to `queue_timeout` seconds for a slot and then gets `Busy`,
never an unbounded queue.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

import msgspec

from wasmrun.sandbox.contract.background import BackgroundTotals
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.ids import new_run_id
from wasmrun.sandbox.contract.tools import ToolAnswers, ToolBatch, ToolSink
from wasmrun.sandbox.contract.types import RunRequest, RunResult
from wasmrun.sandbox.guest import toolwait
from wasmrun.sandbox.guest.outstream import OutputChunk, OutputSink


class Busy(Exception):
    """Every sandbox slot stayed taken for the whole wait."""


class ExecutorHealth(msgspec.Struct):
    """What /healthz reports about the sandboxes."""

    total: int  # sandbox workers (or slots) the executor keeps
    free: int  # idle, ready for a run now
    unavailable: int  # dead, being restarted, or finishing a cancelled run
    queued: int  # runs waiting for a free one

    @property
    def serving(self) -> bool:
        """Whether any worker is up, busy or not: a run can still be served."""
        return self.total - self.unavailable > 0


class Executor(Protocol):
    # Runs the sandboxes made for no client (background.py), for /metrics.
    background: BackgroundTotals

    async def run(
        self, request: RunRequest, on_output: OutputSink | None = None, on_tools: ToolSink | None = None,
    ) -> RunResult:
        """The run's result; with `on_output` (and `request.stream`), its output
        chunks are handed there on the event loop while it runs; with `on_tools`, its
        batches of tool calls (code mode), answered through `answer_tools`."""

    async def answer_tools(self, answers: ToolAnswers) -> bool:
        """Hand the client's answers to the run waiting for them (True: it was waiting here)."""
        ...

    def health(self) -> ExecutorHealth: ...

    def interrupt(self, run_id: str) -> bool:
        """Stop the run `run_id` if it is in flight here (True); it fails with `Interrupted`."""
        ...

    def capacity(self) -> tuple[int, int]:
        """(busy, free) sandboxes."""

    def close(self) -> None: ...


class _Slots:
    def __init__(self, slots: int, queue_timeout: float) -> None:
        self.slots = slots
        self.queue_timeout = queue_timeout
        self.taken = 0
        self.waiting = 0
        self._sem: asyncio.Semaphore | None = None

    async def acquire(self) -> None:
        # Created lazily: the semaphore belongs to the running event loop.
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        self.waiting += 1
        try:
            await asyncio.wait_for(self._sem.acquire(), self.queue_timeout)
        except TimeoutError:
            raise Busy(f"all {self.slots} sandboxes are busy; try again shortly") from None
        finally:
            self.waiting -= 1
        self.taken += 1

    def release(self) -> None:
        assert self._sem is not None
        self.taken -= 1
        self._sem.release()

    def free(self) -> int:
        return self._sem._value if self._sem is not None else self.slots


class InProcessExecutor:
    """Sandboxes in this process, on worker threads (one engine, shared).

    Simple and used by tests and `wasmrun run`; the server uses worker
    processes (see pool.py), which scale across cores.
    """

    def __init__(
        self,
        blobs: BlobAccess,
        slots: int = 1,
        queue_timeout: float = 5.0,
        workspace_root: Path | None = None,
        packages: Path | None = None,
        image: str = "stdlib",
    ) -> None:
        from wasmrun.sandbox.engines import make_engine

        self.engine = make_engine(image, blobs, workspace_root, packages=packages)
        self._slots = _Slots(slots, queue_timeout)
        self.background = BackgroundTotals()

    async def run(
        self, request: RunRequest, on_output: OutputSink | None = None, on_tools: ToolSink | None = None,
    ) -> RunResult:
        await self._slots.acquire()
        loop = asyncio.get_running_loop()
        if on_tools is not None:
            if not request.run_id:
                request = msgspec.structs.replace(request, run_id=new_run_id())
            tools_sink = on_tools

            def forward_tools(batch: ToolBatch) -> None:
                loop.call_soon_threadsafe(tools_sink, batch)

            toolwait.set_sink(forward_tools, request.run_id)
        try:
            if on_output is None or not request.stream:
                return await asyncio.to_thread(self.engine.run, request)
            sink = on_output

            def forward(chunks: list[OutputChunk]) -> None:
                loop.call_soon_threadsafe(sink, chunks)

            return await asyncio.to_thread(self.engine.run, request, forward)
        finally:
            if on_tools is not None:
                toolwait.set_sink(None, request.run_id)
            self._slots.release()
            self.background.add(self.engine.loop.background.drain())

    def interrupt(self, run_id: str) -> bool:
        return self.engine.interrupt(run_id)

    async def answer_tools(self, answers: ToolAnswers) -> bool:
        return toolwait.answer(answers)

    def health(self) -> ExecutorHealth:
        slots = self._slots
        return ExecutorHealth(total=slots.slots, free=slots.slots - slots.taken, unavailable=0, queued=slots.waiting)

    def capacity(self) -> tuple[int, int]:
        """(busy, free) slots, for /metrics."""
        free = self._slots.free()
        return self._slots.slots - free, free

    def close(self) -> None:
        self.engine.close()
