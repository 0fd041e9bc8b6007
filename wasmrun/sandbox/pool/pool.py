"""A pool of worker processes, each with its own engine and compiled guest.

Threads in one process scale badly for short runs (the GIL is taken for
every host call), so the server spreads runs over processes: one per core
by default. Each worker loads the compiled snapshot once (about 0.1 s from
the cache) and then serves runs one at a time over a pipe.

A streamed run's output (RunRequest.stream) comes over the same pipe while
it runs, as messages tagged `OUTPUT` (a RunResult's msgpack never starts
with that byte), before its result.

The worker process's side is poolworker.py, the pool's handle on one
worker (its pipes and framing) workerprocess.py.

A worker that dies mid-run (killed, out of host memory, a wasmtime crash)
fails that run with `WorkerCrashed` and is replaced; a worker that does not
answer well past the run's own timeout is killed the same way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import select
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from wasmrun import tracing
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.background import BackgroundTotals
from wasmrun.sandbox.contract.ids import new_run_id
from wasmrun.sandbox.contract.tools import ToolAnswers, ToolSink
from wasmrun.sandbox.contract.types import RunError, RunRequest, RunResult, host_failure
from wasmrun.sandbox.files import workroots
from wasmrun.sandbox.guest.outstream import OUTPUT, OutputSink
from wasmrun.sandbox.pool.executor import Busy, ExecutorHealth
from wasmrun.sandbox.pool.poolworker import BlobOpener, WorkerSetup, encoder, result_decoder
from wasmrun.sandbox.pool.workerprocess import WorkerProcess

logger = logging.getLogger("wasmrun.pool")

# Past the run's own timeout, how long a silent worker is given before it is killed.
WATCHDOG_GRACE_S = 10.0
# How often the monitor looks at the list of workers again (it sees a death at once).
MONITOR_REFRESH_S = 0.25
# A replacement worker that fails to start is retried after this, doubling up to the max.
REPLACE_RETRY_S = 0.5
REPLACE_RETRY_MAX_S = 10.0


class _IdleWorkers:
    """Idle workers (last in, first out) and the runs waiting for one (first in,
    first out). A worker given back goes straight to the longest waiting run;
    one handed to a run that gave up meanwhile (timed out, cancelled) is passed
    on, never dropped. Workers come back from the event loop and from
    replacement threads, so the state is under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[WorkerProcess] = []
        self._waiting: collections.deque[asyncio.Future[WorkerProcess]] = collections.deque()

    def count(self) -> tuple[int, int]:
        """Idle workers alive, and idle ones found dead (a system call each: for /healthz)."""
        with self._lock:
            dead = sum(w.process.poll() is not None for w in self._idle)
            return len(self._idle) - dead, dead

    def __len__(self) -> int:
        return len(self._idle)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def put(self, worker: WorkerProcess) -> None:
        with self._lock:
            while self._waiting:
                waiter = self._waiting.popleft()
                if not waiter.done():
                    break
            else:
                self._idle.append(worker)
                return
        loop = waiter.get_loop()
        if _running_loop() is loop:
            waiter.set_result(worker)
            return
        try:
            loop.call_soon_threadsafe(self._hand, waiter, worker)
        except RuntimeError:  # that loop is closed: its waiter is gone
            self.put(worker)

    def _hand(self, waiter: asyncio.Future[WorkerProcess], worker: WorkerProcess) -> None:
        if waiter.done():
            self.put(worker)
        else:
            waiter.set_result(worker)

    def remove(self, worker: WorkerProcess) -> bool:
        """Take `worker` out if it is idle (False: a run has it)."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False

    def take_all(self) -> list[WorkerProcess]:
        with self._lock:
            taken, self._idle = self._idle, []
            return taken

    async def get(self, timeout: float) -> WorkerProcess:
        """An idle worker, or TimeoutError after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._idle:  # the common case: no future, no timer
                return self._idle.pop()
            waiter: asyncio.Future[WorkerProcess] = loop.create_future()
            self._waiting.append(waiter)

        def expire() -> None:
            if not waiter.done():
                waiter.set_exception(TimeoutError())

        timer = loop.call_later(timeout, expire)
        try:
            return await waiter
        except BaseException:
            with self._lock:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.put(waiter.result())  # handed over just as this run gave up
            raise
        finally:
            timer.cancel()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class WorkerPool:
    """The `Executor` the server uses: runs spread over worker processes.

    The pool never loses a worker: every run that takes one gives it back, or
    hands it to a background drain (the run was cancelled: the worker finishes
    it and returns) or to a replacement thread (it crashed, stopped answering
    or anything else went wrong), which starts a new one, retrying until it can.
    """

    def __init__(
        self,
        open_blobs: BlobOpener,
        workers: int | None = None,
        queue_timeout: float = 5.0,
        watchdog_grace: float = WATCHDOG_GRACE_S,
        workspace_parent: Path | None = None,
        image: str = "stdlib",
        packages: Path | None = None,
    ) -> None:
        """`open_blobs`: how each worker opens the blob store; `packages`: the
        operator's package layers (<data_dir>/packages), None for none."""
        self.size = max(1, workers or os.cpu_count() or 1)
        self.image = image
        self.packages = packages
        self.queue_timeout = queue_timeout
        self.watchdog_grace = watchdog_grace
        self.workspace_parent = workspace_parent or workroots.default_parent()
        self._open_blobs = open_blobs
        self.background = BackgroundTotals()  # the workers' own runs, as their results report them
        self._workers: list[WorkerProcess] = []
        self._idle = _IdleWorkers()
        self._unavailable = 0
        self._closed = False
        self._lock = threading.Lock()
        workroots.sweep(self.workspace_parent)  # orphans of earlier crashes
        starting: list[WorkerProcess] = []
        try:
            starting.extend(WorkerProcess(self._setup()) for _ in range(self.size))
            for worker in starting:
                worker.wait_ready()
        except BaseException:
            for worker in starting:
                worker.kill()
            raise
        self._workers = starting
        for worker in starting:
            self._idle.put(worker)
        threading.Thread(target=self._monitor, name="wasmrun-pool-monitor", daemon=True).start()

    def _setup(self) -> WorkerSetup:
        """What a worker started now serves (the image changes with `roll`)."""
        packages = str(self.packages) if self.packages is not None else None
        return WorkerSetup(self._open_blobs, str(self.workspace_parent), self.image, packages)

    def capacity(self) -> tuple[int, int]:
        """(busy, free) workers, for /metrics (no system call: see `health` for /healthz)."""
        free = len(self._idle)
        return max(0, self.size - free), free

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers]

    def health(self) -> ExecutorHealth:
        free, dead = self._idle.count()
        with self._lock:
            unavailable = self.size if self._closed else self._unavailable + dead
        return ExecutorHealth(total=self.size, free=free, unavailable=unavailable, queued=self._idle.waiting)

    async def run(
        self, request: RunRequest, on_output: OutputSink | None = None, on_tools: ToolSink | None = None,
    ) -> RunResult:
        if not tracing.enabled():
            return await self._run(request, on_output, on_tools)
        with tracing.span("pool.dispatch"):  # the worker's span is this one's child, through the request
            traced = msgspec.structs.replace(request, traceparent=tracing.traceparent())
            return await self._run(traced, on_output, on_tools)

    async def _run(
        self, request: RunRequest, on_output: OutputSink | None = None, on_tools: ToolSink | None = None,
    ) -> RunResult:
        """With `on_output` (and `request.stream`), the run's output chunks are
        handed there, on the event loop, as the worker sends them; with `on_tools`,
        its batches of tool calls (code mode), answered through `answer_tools`."""
        if self._closed:
            raise Busy("the sandbox pool is shutting down")
        if not request.run_id:  # named here so that even a lost run has an id
            request = msgspec.structs.replace(request, run_id=new_run_id())
        try:  # before a worker is taken
            payload = encoder.encode(request)
        except Exception:
            return host_failure(request, "the sandbox could not be sent this run")
        deadline = request.limits.timeout_ms / 1000 + self.watchdog_grace
        try:
            async with self._worker() as worker:
                raw = await worker.exchange(
                    payload, deadline, on_output, request.run_id, on_tools, request.tool_limits.wait_ms / 1000,
                )
        except Busy:
            raise
        except (EOFError, OSError, TimeoutError) as exc:
            logger.warning("worker lost during run %s: %r", request.run_id, exc)
            return _lost(request, exc)
        except Exception:
            return host_failure(request, "the sandbox host failed; the run was lost")
        try:
            result = result_decoder.decode(raw)
        except Exception:
            return host_failure(request, "the sandbox sent a malformed result")
        result.run_id = request.run_id
        self.background.add(result.background)
        result.background = []
        return result

    def interrupt(self, run_id: str) -> bool:
        """Stop the run `run_id` if a worker of this pool is running it (True: asked; the
        run then fails with `Interrupted` within its grace, and its caller gets that result)."""
        with self._lock:
            workers = [w for w in self._workers if run_id and w.running == run_id]
        return any(worker.interrupt(run_id) for worker in workers)

    async def answer_tools(self, answers: ToolAnswers) -> bool:
        """The client's answers to the tool calls run `answers.run_id` waits for (True: sent to its worker)."""
        with self._lock:
            worker = next((w for w in self._workers if answers.run_id and w.running == answers.run_id), None)
        return worker is not None and await worker.answer_tools(answers)

    @contextlib.asynccontextmanager
    async def _worker(self) -> AsyncIterator[WorkerProcess]:
        """A live worker for one exchange; given back whatever happens in it."""
        with tracing.span("pool.queue"):  # waiting for a free worker
            worker = await self._take()
        try:
            yield worker
        except asyncio.CancelledError:  # e.g. the client went away: the run goes on
            self._drain_later(worker)
            raise
        except BaseException:
            self._retire(worker)
            raise
        self._idle.put(worker)

    async def _take(self) -> WorkerProcess:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.queue_timeout
        while True:
            try:
                worker = await self._idle.get(max(0.0, give_up - loop.time()))
            except TimeoutError:
                raise Busy(f"all {self.size} sandbox workers are busy; try again shortly") from None
            if worker.alive():
                return worker
            self._retire(worker)  # died while idle: replaced in the background

    def _drain_later(self, worker: WorkerProcess) -> None:
        """Let a cancelled run's worker finish it, then give it back. On a thread,
        not a task: the loop may be shutting down (that is what cancelled it)."""
        worker.reader.detach()  # here, on the loop's thread
        with self._lock:
            self._unavailable += 1  # not serving until it has answered
        threading.Thread(target=self._drain, args=(worker,), name="wasmrun-drain", daemon=True).start()

    def _drain(self, worker: WorkerProcess) -> None:
        try:
            try:
                while worker.reader.read_blocking(max(0.0, worker.answer_by - time.monotonic()))[:1] == OUTPUT:
                    pass  # a streamed run's output: nobody is listening any more
            except Exception as exc:
                logger.warning("worker %s lost finishing a cancelled run: %r", worker.pid, exc)
                self._replace(worker)
            else:
                worker.running = ""
                self._idle.put(worker)
        finally:
            with self._lock:
                self._unavailable -= 1

    def _monitor(self) -> None:
        """Replace a worker that dies while idle as soon as it dies, not when the
        next run picks it (a run that has one finds out itself: EOF)."""
        pidfds: dict[WorkerProcess, int] = {}
        try:
            while not self._closed:
                with self._lock:
                    workers = list(self._workers)
                for worker in [w for w in pidfds if w not in workers]:
                    fd = pidfds.pop(worker)
                    if fd >= 0:
                        os.close(fd)
                for worker in workers:
                    if worker not in pidfds:
                        pidfds[worker] = _pidfd(worker)
                watched = {fd: w for w, fd in pidfds.items() if fd >= 0}
                select.select(list(watched), [], [], MONITOR_REFRESH_S)
                for worker in workers:
                    if worker.process.poll() is None:
                        continue
                    if pidfds[worker] >= 0:  # seen: watched no more until it leaves the list
                        os.close(pidfds[worker])
                        pidfds[worker] = -1
                    if self._idle.remove(worker):
                        logger.warning("worker %s died while idle; replacing it", worker.pid)
                        self._retire_from_monitor(worker)
        finally:
            for fd in pidfds.values():
                if fd >= 0:
                    os.close(fd)

    def _retire_from_monitor(self, dead: WorkerProcess) -> None:
        """`_retire` belongs on the loop whose reader the worker's pipe is on."""
        loop = dead.reader.loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._retire, dead)
                return
            except RuntimeError:  # that loop is closed: its registration is gone
                dead.reader.loop = None
        self._retire(dead)

    def _retire(self, dead: WorkerProcess) -> None:
        """Kill `dead` and start its replacement, off the event loop."""
        dead.reader.detach()  # here, on the loop's thread
        with self._lock:
            self._unavailable += 1
        threading.Thread(target=self._replace_counted, args=(dead,), name="wasmrun-replace", daemon=True).start()

    def _replace_counted(self, dead: WorkerProcess) -> None:
        try:
            self._replace(dead)
        finally:
            with self._lock:
                self._unavailable -= 1

    def _replace(self, dead: WorkerProcess) -> None:
        """Kill `dead`, remove its workspaces, start a new worker in its place:
        retried until one starts (or the pool closes), so the pool keeps its size."""
        try:
            dead.kill()
        except Exception:
            logger.exception("could not stop worker %s", dead.pid)
        workroots.sweep(self.workspace_parent)  # the dead worker's workspaces
        delay = REPLACE_RETRY_S
        while not self._closed:
            fresh = self._start_worker()
            if fresh is not None:
                with self._lock:
                    if not self._closed:
                        self._workers[self._workers.index(dead)] = fresh
                        self._idle.put(fresh)
                        return
                fresh.kill()
                return
            time.sleep(delay)
            delay = min(delay * 2, REPLACE_RETRY_MAX_S)

    def _start_worker(self) -> WorkerProcess | None:
        try:
            fresh = WorkerProcess(self._setup())
        except Exception:
            logger.exception("could not start a replacement worker; retrying")
            return None
        try:
            fresh.wait_ready()
        except Exception:
            logger.exception("a replacement worker did not start; retrying")
            fresh.kill()
            return None
        return fresh

    def roll(self, image: str) -> None:
        """Serve `image` from now on, without a restart: each worker in turn is replaced by
        one started on `image`, ready before the old one leaves (a busy one first finishes
        its run). Blocks until done: call it off the event loop (warmup.py does)."""
        self.image = image
        with self._lock:
            old_workers = list(self._workers)
        for old in old_workers:
            fresh = self._start_worker()
            while fresh is None and not self._closed:
                time.sleep(REPLACE_RETRY_S)
                fresh = self._start_worker()
            if fresh is None:
                return  # the pool closed
            while not self._closed and old in self._workers and not self._idle.remove(old):
                time.sleep(0.05)  # busy: its run ends first
            with self._lock:
                swapped = not self._closed and old in self._workers
                if swapped:  # (else it died meanwhile, and its replacement is on `image` already)
                    self._workers[self._workers.index(old)] = fresh
                    self._idle.put(fresh)
            if swapped:
                _dismiss(old)
            else:
                fresh.kill()
        logger.info("all %d workers now serve the %s image", self.size, image)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._workers)
        self._idle.take_all()
        for worker in workers:
            worker.hang_up()  # the worker sees EOF and exits
        for worker in workers:
            try:
                worker.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=5)
            worker.close_pipes()


def _dismiss(worker: WorkerProcess) -> None:
    """An idle worker out of the pool: its pipe's reader detached on its loop's thread,
    then EOF on its request pipe (it exits), killed if it has not within 5 s."""

    def stop() -> None:
        worker.hang_up()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(timeout=5)
        worker.kill()

    def detach_and_stop() -> None:
        worker.reader.detach()
        threading.Thread(target=stop, name="wasmrun-dismiss", daemon=True).start()

    loop = worker.reader.loop
    if loop is not None:
        try:
            loop.call_soon_threadsafe(detach_and_stop)
            return
        except RuntimeError:  # that loop is closed: its registration is gone
            worker.reader.loop = None
    detach_and_stop()


def _pidfd(worker: WorkerProcess) -> int:
    """A descriptor that becomes readable when the worker exits (-1: none;
    the monitor then notices the death at its next refresh)."""
    try:
        return os.pidfd_open(worker.pid)
    except (AttributeError, OSError):
        return -1


def _lost(request: RunRequest, exc: BaseException) -> RunResult:
    message = (
        "the process running this sandbox stopped answering and was replaced; the run was lost"
        if isinstance(exc, TimeoutError)
        else "the process running this sandbox died and was replaced; the run was lost"
    )
    return RunResult(run_id=request.run_id, status="failed", error=RunError(errors.WORKER_CRASHED, message))

