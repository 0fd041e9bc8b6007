"""A worker process of the pool (pool.py): one engine, runs served one at a time over a pipe.

Started as `python -m wasmrun.sandbox.pool --fd-in N --fd-out M --fd-control C` (a
fresh interpreter, never a fork); its first message is its `WorkerSetup`, then it
reads msgpack RunRequests framed by multiprocessing.connection and answers
each with its RunResult, a streamed run's output first (OUTPUT messages,
outstream.py). The control pipe carries the ids of runs to interrupt; a thread
reads it, since the main thread is inside the run. It also carries the client's answers
to a run's tool calls (code mode: TOOL_ANSWERS, then msgpack ToolAnswers), which that
thread hands to the run waiting for them (guest/toolwait.py); the calls themselves come
up the result pipe, tagged TOOL_CALLS, while the run waits.
"""

from __future__ import annotations

import logging
import multiprocessing.connection
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from wasmrun import tracing
from wasmrun.sandbox.contract.tools import ToolAnswers, ToolBatch
from wasmrun.sandbox.contract.types import RunRequest, RunResult, host_failure
from wasmrun.sandbox.guest import toolwait
from wasmrun.sandbox.guest.outstream import encode_chunks
from wasmrun.sandbox.memory.heaptrim import release_freed_heap

if TYPE_CHECKING:
    from wasmrun.sandbox.engine import SandboxEngine

READY = b"ready"  # a worker's first message: its engine is loaded
# The other image's engine (for sessions made on it) costs a worker ~210 MB RSS (~65 MB PSS,
# the compiled module's pages being shared) when it is the stdlib one beside the data image:
# closed once no run has needed it for this long (docs/sessions.md).
OTHER_ENGINE_IDLE_S = 600.0


class BlobOpener(msgspec.Struct, frozen=True):
    """How a worker process opens the blob store: `module:callable` and its
    arguments. A spec, not an object, because it crosses a process."""

    target: str
    args: list[str] = []


class WorkerSetup(msgspec.Struct, frozen=True):
    """What a worker process serves, as the pool's first message down its request pipe:
    never on its command line nor in its environment, where the shared blob store's
    arguments (a database URL with its password) would be readable by other local users."""

    blobs: BlobOpener
    workspace_parent: str
    image: str = "stdlib"  # "auto", "stdlib" or "data" (engines.make_engine)
    packages: str | None = None  # the operator's package layers (<data_dir>/packages); None: none


encoder = msgspec.msgpack.Encoder()
setup_decoder = msgspec.msgpack.Decoder(WorkerSetup)
request_decoder = msgspec.msgpack.Decoder(RunRequest)
result_decoder = msgspec.msgpack.Decoder(RunResult)
TOOL_CALLS = b"T"  # a worker's message of a run's tool calls (a RunResult's msgpack never starts so)
TOOL_ANSWERS = b"\0"  # a control message of the client's answers (a run id never starts so)
tool_batch_decoder = msgspec.msgpack.Decoder(ToolBatch)
tool_answers_decoder = msgspec.msgpack.Decoder(ToolAnswers)


def main(argv: list[str] | None = None) -> None:
    """Entry point of a worker process (`python -m wasmrun.sandbox.pool ...`)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--fd-control", type=int, required=True)
    args = parser.parse_args(argv)
    # The parent handles Ctrl-C and shuts workers down by closing the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Into the server's stderr: a host failure in a run is logged there, with its traceback.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s[worker %(process)d]: %(message)s")
    inbox = multiprocessing.connection.Connection(args.fd_in, writable=False)
    outbox = multiprocessing.connection.Connection(args.fd_out, readable=False)
    try:
        setup = setup_decoder.decode(inbox.recv_bytes())
    except (EOFError, OSError):
        return  # the pool went away before saying what to serve
    tracing.setup("worker")  # on when the server's is: the same OTEL_* environment
    engines = Engines(setup)
    control = multiprocessing.connection.Connection(args.fd_control, writable=False)
    threading.Thread(target=_interrupts, args=(control, engines), name="wasmrun-interrupts", daemon=True).start()
    toolwait.set_sink(lambda batch: outbox.send_bytes(TOOL_CALLS + encoder.encode(batch)))
    release_freed_heap()  # what making the engine (compiling, warm-up runs) freed
    outbox.send_bytes(READY)
    try:
        while True:
            try:
                raw = inbox.recv_bytes()
            except (EOFError, OSError):
                return
            outbox.send_bytes(serve(engines, raw, outbox))
    finally:
        engines.close()
        tracing.shutdown()  # this worker's last spans exported


def _interrupts(control: multiprocessing.connection.Connection, engines: Engines) -> None:
    """Interrupts the runs the pool names, until it hangs up. An id that is not running
    here (it ended meanwhile) is nothing to do: ids are never reused."""
    while True:
        try:
            message = control.recv_bytes(MAX_CONTROL_BYTES)
        except (EOFError, OSError):
            return
        try:
            if message[:1] == TOOL_ANSWERS:
                toolwait.answer(tool_answers_decoder.decode(message[1:]))
                continue
            run_id = message[:MAX_RUN_ID_BYTES].decode("utf-8", "replace")
            engines.interrupt(run_id)
        except Exception:  # this thread outlives any fault: later interrupts depend on it
            logging.getLogger("wasmrun.sandbox").exception("interrupting run %s failed", run_id)


MAX_RUN_ID_BYTES = 256
MAX_CONTROL_BYTES = 64 << 20  # a batch of tool answers, each within the run's max_tool_result_bytes


class Engines:
    """A worker's engines: the one of the image it serves, and, made when first needed and
    kept, the other image's, for the runs of sessions made on it. A session keeps the image
    it was made on (its memory is that interpreter's) whatever the server serves for new
    runs: a session made on the stdlib image while the data image was being made keeps
    running there after the move (docs/sessions.md)."""

    def __init__(self, setup: WorkerSetup) -> None:
        from wasmrun.sandbox.images.names import image_name

        self.setup = setup
        self.serving = open_engine(setup)
        self.image = image_name(self.serving.image.guest.key)
        self._others: dict[str, SandboxEngine] = {}
        self._used: dict[str, float] = {}  # when each of _others last took a run (time.monotonic())

    def for_request(self, request: RunRequest) -> SandboxEngine:
        from wasmrun.sandbox.sessions.state import image_of

        self._close_idle()
        wanted = image_of(request)
        if wanted is None or wanted == self.image:
            return self.serving
        engine = self._others.get(wanted)
        if engine is None:
            engine = self._others[wanted] = open_engine(msgspec.structs.replace(self.setup, image=wanted))
        self._used[wanted] = time.monotonic()
        return engine

    def interrupt(self, run_id: str) -> bool:
        """From the interrupts thread: stop `run_id` on whichever engine runs it."""
        return any(engine.interrupt(run_id) for engine in (self.serving, *list(self._others.values())))

    def _close_idle(self) -> None:
        for image, used in list(self._used.items()):
            if time.monotonic() - used > OTHER_ENGINE_IDLE_S:
                del self._used[image]
                self._others.pop(image).close()
                release_freed_heap()

    def close(self) -> None:
        for engine in (self.serving, *self._others.values()):
            engine.close()


def open_engine(setup: WorkerSetup) -> SandboxEngine:
    """The engine `setup` describes, on the blob store its opener opens."""
    import importlib

    from wasmrun.sandbox.engines import make_engine

    module, _, name = setup.blobs.target.partition(":")
    open_blobs = getattr(importlib.import_module(module), name)
    packages = Path(setup.packages) if setup.packages is not None else None
    return make_engine(setup.image, open_blobs(*setup.blobs.args), Path(setup.workspace_parent), packages=packages)


def serve(engines: Engines, raw: bytes, outbox: multiprocessing.connection.Connection) -> bytes:
    """One run, start to end; whatever fails, the answer is that run's result
    and the worker goes on serving (the parent names a run it lost an id)."""
    try:
        request = request_decoder.decode(raw)
    except Exception:
        request = RunRequest(kind="code")
        return encoder.encode(host_failure(request, "the sandbox could not read the run request"))
    with tracing.continued("worker.run", request.traceparent):  # the child of the server's pool.dispatch
        return _serve_request(engines, request, outbox)


def _serve_request(engines: Engines, request: RunRequest, outbox: multiprocessing.connection.Connection) -> bytes:
    on_output = (lambda chunks: outbox.send_bytes(encode_chunks(chunks))) if request.stream else None
    try:
        engine = engines.for_request(request)
    except Exception:
        message = "this session's image cannot be loaded on this server any more; start a new session"
        return encoder.encode(host_failure(request, message))
    with tracing.span("guest.run") as guest:
        started = time.time_ns()
        result = engine.run(request, on_output)  # never raises
        tracing.record_phases(guest, started, result.usage)
    result.background = engine.loop.background.drain()  # the engine's own runs, for /metrics
    try:
        return encoder.encode(result)
    except Exception:
        return encoder.encode(host_failure(request, "the sandbox could not send the run's result"))
