"""A worker process of the pool (pool.py): one engine, runs served one at a time over a pipe.

Started as `python -m wasmrun.sandbox.pool ...` (a fresh interpreter, never a
fork); reads msgpack RunRequests framed by multiprocessing.connection and
answers each with its RunResult, a streamed run's output first (OUTPUT
messages, outstream.py).
"""

from __future__ import annotations

import json
import logging
import multiprocessing.connection
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from wasmrun.sandbox.outstream import encode_chunks
from wasmrun.sandbox.types import RunRequest, RunResult, host_failure

if TYPE_CHECKING:
    from wasmrun.sandbox.engine import SandboxEngine

READY = b"ready"  # a worker's first message: its engine is loaded

encoder = msgspec.msgpack.Encoder()
request_decoder = msgspec.msgpack.Decoder(RunRequest)
result_decoder = msgspec.msgpack.Decoder(RunResult)


def main(argv: list[str] | None = None) -> None:
    """Entry point of a worker process (`python -m wasmrun.sandbox.pool ...`)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    parser.add_argument("--blobs", required=True, help="module:callable that opens the blob store")
    parser.add_argument("--blobs-args", default="[]", help="JSON list of arguments for it")
    parser.add_argument("--workspace-parent", type=Path, required=True)
    parser.add_argument("--image", default="stdlib", choices=("auto", "stdlib", "data"))
    args = parser.parse_args(argv)
    # The parent handles Ctrl-C and shuts workers down by closing the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Into the server's stderr: a host failure in a run is logged there, with its traceback.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s[worker %(process)d]: %(message)s")
    from wasmrun.sandbox.images import make_engine

    module, _, name = args.blobs.partition(":")
    open_blobs = getattr(importlib.import_module(module), name)
    engine = make_engine(args.image, open_blobs(*json.loads(args.blobs_args)), args.workspace_parent)
    inbox = multiprocessing.connection.Connection(args.fd_in, writable=False)
    outbox = multiprocessing.connection.Connection(args.fd_out, readable=False)
    outbox.send_bytes(READY)
    try:
        while True:
            try:
                raw = inbox.recv_bytes()
            except (EOFError, OSError):
                return
            outbox.send_bytes(serve(engine, raw, outbox))
    finally:
        engine.close()


def serve(engine: SandboxEngine, raw: bytes, outbox: multiprocessing.connection.Connection) -> bytes:
    """One run, start to end; whatever fails, the answer is that run's result
    and the worker goes on serving (the parent names a run it lost an id)."""
    try:
        request = request_decoder.decode(raw)
    except Exception:
        request = RunRequest(kind="code")
        return encoder.encode(host_failure(request, "the sandbox could not read the run request"))
    on_output = (lambda chunks: outbox.send_bytes(encode_chunks(chunks))) if request.stream else None
    result = engine.run(request, on_output)  # never raises
    result.background = engine.background.drain()  # the engine's own runs, for /metrics
    try:
        return encoder.encode(result)
    except Exception:
        return encoder.encode(host_failure(request, "the sandbox could not send the run's result"))
