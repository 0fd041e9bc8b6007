"""Putting the runtime together: settings → blob store, skill registry, executor → app.

`make_executor` is the one place that decides how the server runs sandboxes.
"""

from __future__ import annotations

import logging

import uvicorn
from starlette.applications import Starlette

from wasmrun.blobs.store import BlobStore, FileBlobStore
from wasmrun.protocol.context import Context
from wasmrun.protocol.methods import Dispatcher
from wasmrun.registry.store import DirectoryRegistry
from wasmrun.sandbox.executor import Executor, InProcessExecutor
from wasmrun.sandbox.pool import BlobOpener, WorkerPool
from wasmrun.settings import Settings
from wasmrun.wire.app import create_app as create_wire_app


def make_executor(settings: Settings) -> Executor:
    """Worker processes, each opening the blob store at `settings.blobs_dir` itself."""
    opener = BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(settings.blobs_dir)])
    return WorkerPool(opener, workers=settings.workers, queue_timeout=settings.queue_timeout)


def make_local_executor(settings: Settings, blobs: BlobStore) -> Executor:
    """Sandboxes on threads of this process: quicker to start, for one-off runs (`wasmrun run`)."""
    return InProcessExecutor(blobs, slots=settings.workers, queue_timeout=settings.queue_timeout)


def build_context(
    settings: Settings, *, blobs: BlobStore | None = None, executor: Executor | None = None
) -> Context:
    """Everything the methods need; pass `blobs` and `executor` to share them (tests do)."""
    if blobs is None:
        store = FileBlobStore(settings.blobs_dir)
        store.sweep()  # what writers killed before this start left behind
        blobs = store
    return Context(
        registry=DirectoryRegistry(settings.skills_dirs, settings.skills_home),
        blobs=blobs,
        executor=executor if executor is not None else make_executor(settings),
        secrets=settings.secrets,
        limits=settings.limits,
        max_full_read_bytes=settings.max_full_read_bytes,
    )


def create_app(settings: Settings, context: Context | None = None) -> Starlette:
    """The server's ASGI app. It closes the executor on shutdown only if it made it."""
    owned = context is None
    context = context if context is not None else build_context(settings)
    return create_wire_app(
        Dispatcher(context),
        max_body_bytes=settings.max_body_bytes,
        body_timeout=settings.body_timeout,
        on_shutdown=context.executor.close if owned else None,
    )


def serve(settings: Settings) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    logging.getLogger("wasmrun").info(
        "serving the Skills Protocol at http://%s:%d/rpc (data in %s)",
        settings.host, settings.port, settings.data_dir,
    )
    # No per-request access log: on a millisecond run it costs a tenth of the
    # server's CPU; runs are logged by the sandbox only when they fail on our side.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", access_log=False)
