"""The pool's handle on one worker process (poolworker.py): its start, its pipes, its messages.

Its setup (poolworker.WorkerSetup), then requests, go down one pipe and results (a streamed run's output first) come
up another, framed as multiprocessing.connection frames them; the parent
reads them inside its event loop (FrameReader), or on a thread when it
drains a worker whose run was cancelled.
"""

from __future__ import annotations

import asyncio
import multiprocessing.connection
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Callable

from wasmrun.offload import for_run
from wasmrun.sandbox.contract.tools import ToolAnswers, ToolBatch
from wasmrun.sandbox.guest.outstream import OUTPUT, OutputSink, decode_chunks
from wasmrun.sandbox.pool.poolworker import READY, TOOL_ANSWERS, TOOL_CALLS, WorkerSetup, encoder, tool_batch_decoder

# Workers run `python -m` on this package (pool/__main__.py): named by the module, never a string.
WORKER_PACKAGE = __name__.rpartition(".")[0]
PIPE_CAPACITY = 64 * 1024  # Linux's default: a smaller write never blocks on an idle worker


def frame(payload: bytes) -> bytes:
    """multiprocessing.connection's framing, which the worker reads with recv_bytes."""
    if len(payload) > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", len(payload)) + payload
    return struct.pack("!i", len(payload)) + payload


class FrameReader:
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

    def read_blocking(self, timeout: float) -> bytes:
        """The next message, read on this thread (detached from any loop first),
        or TimeoutError after `timeout` seconds."""
        give_up = time.monotonic() + timeout
        while (message := self._complete()) is None:
            if self.failure is not None:
                raise self.failure
            left = give_up - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError("worker did not answer in time")
            self._on_readable()
        return message

    def detach(self) -> None:
        """Unregister from the loop (a no-op once that loop is closed)."""
        if self.loop is not None:
            try:
                self.loop.remove_reader(self.fd)
            except (RuntimeError, ValueError):
                pass
            self.loop = None


class WorkerProcess:
    """One worker process, started at once on `setup`; `wait_ready` before its first run."""

    def __init__(self, setup: WorkerSetup) -> None:
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        control_r, self.control = os.pipe()
        os.set_blocking(self.control, False)  # an interrupt is never worth blocking the loop for
        cmd = [
            sys.executable, "-m", WORKER_PACKAGE,
            "--fd-in", str(to_child_r), "--fd-out", str(from_child_w), "--fd-control", str(control_r),
        ]
        # A fresh interpreter, not fork: the server process has threads
        # (uvicorn, the epoch ticker) and forking those is unsafe.
        try:
            self.process = subprocess.Popen(
                cmd, pass_fds=(to_child_r, from_child_w, control_r), stdin=subprocess.DEVNULL
            )
        except BaseException:
            for fd in (to_child_r, self.to_child, self.from_child, from_child_w, control_r, self.control):
                os.close(fd)
            raise
        os.close(to_child_r)
        os.close(from_child_w)
        os.close(control_r)
        self.reader = FrameReader(self.from_child)
        self.answer_by = 0.0  # time.monotonic() by which the run in flight must answer
        self.running = ""  # the id of the run in flight ("" when idle)
        try:  # its first message (a few hundred bytes: the empty pipe takes it at once)
            write_all(self.to_child, frame(encoder.encode(setup)))
        except BaseException:
            self.kill()
            raise

    def wait_ready(self, timeout: float = 120.0) -> None:
        greeting = multiprocessing.connection.Connection(os.dup(self.from_child), writable=False)
        try:
            if not greeting.poll(timeout) or greeting.recv_bytes() != READY:
                raise RuntimeError("worker did not start")
        finally:
            greeting.close()
        os.set_blocking(self.from_child, False)

    def interrupt(self, run_id: str) -> bool:
        """Ask the worker to stop `run_id` (it does if that run is still in flight there)."""
        if self.control < 0 or not run_id:
            return False
        try:
            os.write(self.control, frame(run_id.encode("utf-8")))
        except (BlockingIOError, BrokenPipeError, OSError):
            return False  # a full control pipe holds interrupts already; a dead worker runs nothing
        return True

    async def answer_tools(self, answers: ToolAnswers) -> bool:
        """Hand the client's answers to the run waiting here for them (code mode), down the
        control pipe; a large batch is written off the loop (the pipe is non-blocking)."""
        if self.control < 0 or not answers.run_id or self.running != answers.run_id:
            return False
        framed = frame(TOOL_ANSWERS + encoder.encode(answers))
        try:
            if len(framed) <= PIPE_CAPACITY // 4:
                os.write(self.control, framed)  # an interrupt's few bytes may share the pipe
            else:
                await for_run(write_nonblocking, self.control, framed)
        except (BlockingIOError, BrokenPipeError, OSError):
            return False
        return True

    async def exchange(
        self, payload: bytes, deadline: float, on_output: OutputSink | None = None, run_id: str = "",
        on_tools: Callable[[ToolBatch], None] | None = None, tool_wait_s: float = 0.0,
    ) -> bytes:
        self.answer_by = time.monotonic() + deadline
        self.running = run_id
        framed = frame(payload)
        if len(framed) <= PIPE_CAPACITY:
            os.write(self.to_child, framed)
        else:  # a large request may fill the pipe: write it off the loop
            await for_run(write_all, self.to_child, framed)
        answer = await self.reader.read(deadline)
        while answer[:1] in (OUTPUT, TOOL_CALLS):  # a streamed run's output, its tool calls, before its result
            if answer[:1] == TOOL_CALLS:
                # the run waits up to tool_wait_s for the client (its own timeout is paused meanwhile)
                self.answer_by += tool_wait_s
                if on_tools is not None:
                    on_tools(tool_batch_decoder.decode(answer[1:]))
            elif on_output is not None:
                on_output(decode_chunks(answer))
            answer = await self.reader.read(max(0.0, self.answer_by - time.monotonic()))
        self.running = ""
        return answer

    def alive(self) -> bool:
        # A worker that died is seen by the registered pipe (EOF), without a
        # system call; poll() covers a worker never yet used in this loop.
        return self.reader.failure is None and (self.reader.loop is not None or self.process.poll() is None)

    def hang_up(self) -> None:
        """Close the request pipe: an idle worker sees EOF and exits."""
        if self.to_child >= 0:
            os.close(self.to_child)
            self.to_child = -1
        if self.control >= 0:
            os.close(self.control)
            self.control = -1

    def close_pipes(self) -> None:
        self.hang_up()
        if self.from_child >= 0:
            self.reader.detach()
            os.close(self.from_child)
            self.from_child = -1

    def kill(self) -> None:
        try:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=5)
        finally:
            self.close_pipes()

    @property
    def pid(self) -> int:
        return self.process.pid


def write_nonblocking(fd: int, data: bytes) -> None:
    """All of `data` to a non-blocking pipe, waiting for room (off the event loop)."""
    view = memoryview(data)
    while view:
        select.select([], [fd], [], 1.0)
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
