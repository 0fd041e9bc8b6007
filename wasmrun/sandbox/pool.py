"""A pool of worker processes, each with its own engine and compiled guest.

Threads in one process scale badly for short runs (the GIL is taken for
every host call), so the server spreads runs over processes: one per core
by default. Each worker loads the compiled snapshot once (about 0.1 s from
the cache) and then serves runs one at a time over a pipe.

A worker that dies mid-run (killed, out of host memory, a wasmtime crash)
fails that run with `WorkerCrashed` and is replaced; a worker that does not
answer well past the run's own timeout is killed the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing.connection
import os
import signal
import struct
import subprocess
import sys
import threading

import msgspec

from wasmrun.sandbox import errors
from wasmrun.sandbox.executor import Busy
from wasmrun.sandbox.ids import new_run_id
from wasmrun.sandbox.types import RunError, RunRequest, RunResult

logger = logging.getLogger("wasmrun.pool")

# Past the run's own timeout, how long a silent worker is given before it is killed.
WATCHDOG_GRACE_S = 10.0
READY = b"ready"

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(RunRequest)
_result_decoder = msgspec.msgpack.Decoder(RunResult)


def _worker_main(argv: list[str] | None = None) -> None:
    """Entry point of a worker process (`python -m wasmrun.sandbox.pool ...`)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--blobs", required=True, help="module:callable that opens the blob store")
    parser.add_argument("--blobs-args", default="[]", help="JSON list of arguments for it")
    args = parser.parse_args(argv)
    # The parent handles Ctrl-C and shuts workers down by closing the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from wasmrun.sandbox.engine import SandboxEngine

    module, _, name = args.blobs.partition(":")
    open_blobs = getattr(importlib.import_module(module), name)
    engine = SandboxEngine(open_blobs(*json.loads(args.blobs_args)))
    inbox = multiprocessing.connection.Connection(args.fd_in, writable=False)
    outbox = multiprocessing.connection.Connection(args.fd_out, readable=False)
    outbox.send_bytes(READY)
    try:
        while True:
            try:
                raw = inbox.recv_bytes()
            except (EOFError, OSError):
                return
            result = engine.run(_request_decoder.decode(raw))
            outbox.send_bytes(_encoder.encode(result))
    finally:
        engine.close()


class BlobOpener(msgspec.Struct, frozen=True):
    """How a worker process opens the blob store: `module:callable` and its
    (JSON) arguments. A spec, not an object, because it crosses a process."""

    target: str
    args: list[str] = []


PIPE_CAPACITY = 64 * 1024  # Linux's default: a smaller write never blocks on an idle worker


def _frame(payload: bytes) -> bytes:
    """multiprocessing.connection's framing, which the worker reads with recv_bytes."""
    if len(payload) > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", len(payload)) + payload
    return struct.pack("!i", len(payload)) + payload


class _FrameReader:
    """Reads framed messages from a non-blocking pipe, inside the event loop."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiting: asyncio.Future[bytes] | None = None
        self.failure: BaseException | None = None

    def _complete(self) -> bytes | None:
        if len(self.buffer) < 4:
            return None
        (size,) = struct.unpack("!i", self.buffer[:4])
        start = 4
        if size == -1:
            if len(self.buffer) < 12:
                return None
            (size,) = struct.unpack("!Q", self.buffer[4:12])
            start = 12
        if len(self.buffer) < start + size:
            return None
        message = bytes(self.buffer[start : start + size])
        del self.buffer[: start + size]
        return message

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fail(exc)
            return
        if not chunk:
            self._fail(EOFError("worker closed its pipe"))
            return
        self.buffer += chunk
        if self.waiting is not None and not self.waiting.done():
            message = self._complete()
            if message is not None:
                self.waiting.set_result(message)

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc
        self.detach()
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_exception(exc)

    def attach(self) -> None:
        """Register with the running loop. The pipe stays registered between
        messages (so a worker dying while idle is seen at once): adding and
        removing it for each run would cost two system calls a run."""
        loop = asyncio.get_running_loop()
        if self.loop is not loop and self.failure is None:
            self.detach()
            loop.add_reader(self.fd, self._on_readable)
            self.loop = loop

    async def read(self, timeout: float) -> bytes:
        """The next message, or TimeoutError after `timeout` seconds."""
        self.attach()
        message = self._complete()
        if message is not None:
            return message
        if self.failure is not None:
            raise self.failure
        loop = asyncio.get_running_loop()
        waiting: asyncio.Future[bytes] = loop.create_future()
        self.waiting = waiting

        def expire() -> None:
            if not waiting.done():
                waiting.set_exception(TimeoutError("worker did not answer in time"))

        # A timer on the future itself, cheaper than wrapping it in wait_for's task.
        timer = loop.call_later(timeout, expire)
        try:
            return await waiting
        finally:
            timer.cancel()
            self.waiting = None

    def detach(self) -> None:
        """Unregister from the loop (a no-op once that loop is closed)."""
        if self.loop is not None:
            try:
                self.loop.remove_reader(self.fd)
            except (RuntimeError, ValueError):
                pass
            self.loop = None


class _Worker:
    def __init__(self, opener: BlobOpener) -> None:
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        cmd = [
            sys.executable, "-m", "wasmrun.sandbox.pool",
            "--fd-in", str(to_child_r), "--fd-out", str(from_child_w),
            "--blobs", opener.target, "--blobs-args", json.dumps(opener.args),
        ]
        # A fresh interpreter, not fork: the server process has threads
        # (uvicorn, the epoch ticker) and forking those is unsafe.
        self.process = subprocess.Popen(cmd, pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.reader = _FrameReader(self.from_child)
        self._closed = False

    def wait_ready(self, timeout: float = 120.0) -> None:
        greeting = multiprocessing.connection.Connection(os.dup(self.from_child), writable=False)
        try:
            if not greeting.poll(timeout) or greeting.recv_bytes() != READY:
                raise RuntimeError("worker did not start")
        finally:
            greeting.close()
        os.set_blocking(self.from_child, False)

    async def exchange(self, payload: bytes, deadline: float) -> bytes:
        framed = _frame(payload)
        if len(framed) <= PIPE_CAPACITY:
            os.write(self.to_child, framed)
        else:  # a large request may fill the pipe: write it off the loop
            await asyncio.to_thread(_write_all, self.to_child, framed)
        return await self.reader.read(deadline)

    def alive(self) -> bool:
        # A worker that died is seen by the registered pipe (EOF), without a
        # system call; poll() covers a worker never yet used in this loop.
        return self.reader.failure is None and (self.reader.loop is not None or self.process.poll() is None)

    def close_pipes(self) -> None:
        if not self._closed:
            self._closed = True
            self.reader.detach()
            os.close(self.to_child)
            os.close(self.from_child)

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=5)
        self.close_pipes()

    @property
    def pid(self) -> int:
        return self.process.pid


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _lost_message(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the process running this sandbox stopped answering and was replaced; the run was lost"
    return "the process running this sandbox died and was replaced; the run was lost"


class WorkerPool:
    """The `Executor` the server uses: runs spread over worker processes."""

    def __init__(
        self,
        open_blobs: BlobOpener,
        workers: int | None = None,
        queue_timeout: float = 5.0,
        watchdog_grace: float = WATCHDOG_GRACE_S,
    ) -> None:
        self.size = max(1, workers or os.cpu_count() or 1)
        self.queue_timeout = queue_timeout
        self.watchdog_grace = watchdog_grace
        self._open_blobs = open_blobs
        self._workers: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] | None = None
        self._closed = False
        self._lock = threading.Lock()
        starting = [_Worker(open_blobs) for _ in range(self.size)]
        try:
            for worker in starting:
                worker.wait_ready()
        except BaseException:
            for worker in starting:
                worker.kill()
            raise
        self._workers = starting

    def _idle_queue(self) -> asyncio.Queue[_Worker]:
        # Bound to the event loop that first uses the pool. Last in, first
        # out: sequential requests stay on one warm worker whose housekeeping
        # waits for a pause, while spreading them (FIFO) put one worker's
        # housekeeping beside the other's run: measured here, 1.3 ms against
        # 2.4 ms a hello-world round trip. Under load every worker is busy anyway.
        if self._idle is None:
            self._idle = asyncio.LifoQueue()
            for worker in self._workers:
                self._idle.put_nowait(worker)
        return self._idle

    def capacity(self) -> tuple[int, int]:
        """(busy, free) workers, for /metrics."""
        free = self._idle.qsize() if self._idle is not None else len(self._workers)
        return max(0, self.size - free), free

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    async def run(self, request: RunRequest) -> RunResult:
        if self._closed:
            raise Busy("the sandbox pool is shutting down")
        if not request.run_id:  # named here so that even a lost run has an id
            request.run_id = new_run_id()
        idle = self._idle_queue()
        try:
            # An idle worker is usually there: take it without wait_for's task.
            worker = idle.get_nowait() if not idle.empty() else await asyncio.wait_for(idle.get(), self.queue_timeout)
        except TimeoutError:
            raise Busy(f"all {self.size} sandbox workers are busy; try again shortly") from None
        if not worker.alive():  # died while idle: replace it before use
            replacement = await self._replace(worker)
            if replacement is None:
                raise Busy("no sandbox worker could be started")
            worker = replacement
        payload = _encoder.encode(request)
        deadline = request.limits.timeout_ms / 1000 + self.watchdog_grace
        try:
            raw = await worker.exchange(payload, deadline)
        except (EOFError, OSError, TimeoutError) as exc:
            logger.warning("worker %s lost during run %s: %r", worker.pid, request.run_id, exc)
            fresh = await self._replace(worker)
            if fresh is not None:
                idle.put_nowait(fresh)
            return RunResult(
                run_id=request.run_id,
                status="failed",
                error=RunError(errors.WORKER_CRASHED, _lost_message(exc)),
            )
        idle.put_nowait(worker)
        return _result_decoder.decode(raw)

    async def _replace(self, dead: _Worker) -> _Worker | None:
        dead.reader.detach()  # here, on the loop's thread
        return await asyncio.to_thread(self._replace_blocking, dead)

    def _replace_blocking(self, dead: _Worker) -> _Worker | None:
        dead.kill()
        with self._lock:
            if self._closed:
                return None
            fresh = _Worker(self._open_blobs)
            try:
                fresh.wait_ready()
            except (EOFError, OSError, RuntimeError):
                fresh.kill()
                logger.error("could not start a replacement worker")
                self._workers.remove(dead)
                return None
            self._workers[self._workers.index(dead)] = fresh
            return fresh

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for worker in self._workers:
                os.close(worker.to_child)  # the worker sees EOF and exits
            for worker in self._workers:
                try:
                    worker.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    worker.process.kill()
                    worker.process.wait(timeout=5)
                worker.reader.detach()
                os.close(worker.from_child)


if __name__ == "__main__":
    _worker_main()
