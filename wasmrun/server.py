"""Putting the runtime together: settings → blob store, skill registry, executor → app.

`make_executor` is the one place that decides how the server runs sandboxes.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from wasmrun.blobs.store import BlobStore, FileBlobStore
from wasmrun.capabilities import facts_of
from wasmrun.observe.audit import AuditLog
from wasmrun.observe.metrics import Metrics
from wasmrun.observe.record import Observers
from wasmrun.packages import layer as package_layer
from wasmrun.protocol.context import Context
from wasmrun.protocol.methods import Dispatcher
from wasmrun.protocol.sessionstore import SessionStore, session_expired
from wasmrun.registry import requirements
from wasmrun.registry.store import DirectoryRegistry
from wasmrun.sandbox import warmup
from wasmrun.sandbox.executor import Executor, InProcessExecutor
from wasmrun.sandbox.packagelayer import ENV as PACKAGES_ENV
from wasmrun.sandbox.pool import BlobOpener, WorkerPool
from wasmrun.settings import Settings
from wasmrun.tenants.caller import LOCAL_TENANT, local_caller
from wasmrun.tenants.calls import CallGate, RequestsInFlight
from wasmrun.tenants.quotas import RunGate
from wasmrun.tenants.retention import BlobRetention
from wasmrun.tenants.store import TenantDirectory, TenantEditor, TenantStore
from wasmrun.wire.app import Authenticated
from wasmrun.wire.app import create_app as create_wire_app
from wasmrun.wire.guard import RequestGuard, is_loopback
from wasmrun.wire.lazy import LazyEndpoint
from wasmrun.wire.tools_route import tools_route

if TYPE_CHECKING:
    from wasmrun.database.audit import PgAuditLog
    from wasmrun.database.orphans import OrphanSweeper


def make_executor(settings: Settings) -> Executor:
    """Worker processes, each opening the blob store at `settings.blobs_dir` itself."""
    from wasmrun.sandbox.engine import precompile
    from wasmrun.sandbox.images import resolve_image

    # Here, once, with progress on stderr, rather than in every worker at once.
    precompile()
    # Workers find the operator's package layer (wasmrun/packages) through their environment.
    os.environ[PACKAGES_ENV] = str(settings.package_layers)
    image = resolve_image(settings.image)
    if image == "data":
        from wasmrun.sandbox.images import data_engine, ready_image

        ready_image(data_engine(), quiet=False)
    logging.getLogger("wasmrun").info("serving the %s image", image)
    if settings.blob_store is not None and settings.database_url is not None:
        # Workers read the URLs from their environment, never from their command line
        # (where any local user could read a password).
        os.environ["WASMRUN_DATABASE_URL"] = settings.database_url
        os.environ["WASMRUN_BLOB_STORE"] = settings.blob_store
        opener = BlobOpener("wasmrun.database.blobs:SharedBlobStore", [])
    else:
        opener = BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(settings.blobs_dir)])
    pool = WorkerPool(opener, workers=settings.workers, queue_timeout=settings.queue_timeout, image=image)
    if settings.image == "auto" and image == "stdlib" and warmup.available():
        # The data stack is installed but its image not made: made in the background
        # (minutes, low priority) while this server answers on the stdlib image.
        warming = warmup.DataImageWarmup()
        warming.start(on_ready=lambda: pool.roll("data"))
        return warmup.WarmingExecutor(pool, warming)
    return pool


def make_local_executor(settings: Settings, blobs: BlobStore) -> Executor:
    """Sandboxes on threads of this process: quicker to start, for one-off runs (`wasmrun run`)."""
    return InProcessExecutor(
        blobs, slots=settings.workers, queue_timeout=settings.queue_timeout, packages=settings.package_layers,
        image=settings.image,
    )


def open_registry(settings: Settings) -> DirectoryRegistry:
    """The operator's skill folders (read-only; `skills add`'s folder made here, so that a
    skill added later is picked up without a restart) and the tenants' created skills:
    in the shared database with --database-url, else under the data folder."""
    settings.installed_skills.mkdir(parents=True, exist_ok=True)
    if settings.database_url is None:
        registry = DirectoryRegistry(settings.operator_skill_dirs, settings.skills_home, served_layer(settings))
        warn_missing_packages(registry, settings)
        return registry
    from wasmrun.database.connection import Database
    from wasmrun.database.skills import PgSkillRegistry

    migrate_database(settings)
    objects = None
    if settings.blob_store is not None:  # bundles beside the blobs' bytes
        from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation

        objects = ObjectStore(ObjectStoreLocation.parse(settings.blob_store))
    shared = PgSkillRegistry(
        settings.operator_skill_dirs, settings.skills_home, Database(settings.database_url), settings.skill_cache,
        objects, cache_entries=settings.skill_cache_entries, cache_bytes=settings.skill_cache_bytes,
        package_layer=served_layer(settings),
    )
    warn_missing_packages(shared, settings)
    return shared


def served_layer(settings: Settings) -> Path:
    """The package layer of the guest image this server runs (each image's Python has its own)."""
    image = settings.image
    if image == "auto":
        from wasmrun.sandbox.images import image_state

        image = "data" if image_state() is None else "stdlib"
    return package_layer.tag_root(settings.data_dir, package_layer.IMAGE_TAGS.get(image, package_layer.DEFAULT_TAG))


def warn_missing_packages(registry: DirectoryRegistry, settings: Settings) -> None:
    """Folder skills load whatever they declare; a missing package is said once, at start."""
    for skill in registry.loaded_operator_skills():
        wanted = requirements.missing(skill.manifest, served_layer(settings))
        if wanted:
            logging.getLogger("wasmrun").warning("%s", requirements.missing_message(skill.manifest.name, wanted))


def build_context(
    settings: Settings, *, blobs: BlobStore | None = None, executor: Executor | None = None
) -> Context:
    """Everything the methods need; pass `blobs` and `executor` to share them (tests do)."""
    if blobs is None:
        blobs = open_blob_store(settings)
    return Context(
        registry=open_registry(settings),
        blobs=blobs,
        executor=executor if executor is not None else make_executor(settings),
        secrets=settings.secrets,
        limits=settings.limits,
        egress=settings.egress,
        access=settings.access,
        max_full_read_bytes=settings.max_full_read_bytes,
        caller=local_caller(settings.access.limits),
        gate=open_run_gate(settings),
        calls=CallGate(settings.queue_timeout),
        sessions=open_session_store(settings),
    )


def open_session_store(settings: Settings) -> SessionStore:
    """Sessions in the database and the object store with --blob-store (any server
    resumes any session), else under the data folder."""
    if settings.blob_store is None or settings.database_url is None:
        return SessionStore(settings.data_dir / "sessions", settings.sessions)
    from wasmrun.database.sessions import SharedSessionStore

    migrate_database(settings)
    # A cache of versions fetched or made here, one folder per process.
    cache = settings.data_dir / "session-cache"
    return SharedSessionStore(cache, settings.database_url, settings.blob_store, settings.sessions)


def open_run_gate(settings: Settings) -> RunGate:
    """Run admission; with --database-url a tenant's concurrent runs count across servers."""
    if settings.database_url is None:
        return RunGate(settings.queue_timeout, pool_size=settings.workers)
    from wasmrun.database.runs import SharedRunGate

    migrate_database(settings)
    return SharedRunGate(settings.database_url, settings.queue_timeout, pool_size=settings.workers)


def open_blob_store(settings: Settings) -> BlobStore:
    """Blobs in the object store and the database with --blob-store, else files under the data folder."""
    if settings.blob_store is not None:
        from wasmrun.database.blobs import SharedBlobStore

        migrate_database(settings)
        return SharedBlobStore(settings.database_url, settings.blob_store)
    store = FileBlobStore(settings.blobs_dir)
    store.sweep()  # what writers killed before this start left behind
    return store


def create_app(
    settings: Settings, context: Context | None = None, *, mcp_with_create_skill: bool = False
) -> Starlette:
    """The server's ASGI app. It closes the executor on shutdown only if it made it.

    /rpc, /tools and /mcp share one dispatcher and one app (so one middleware stack);
    /mcp only when the MCP SDK is installed (the `mcp` extra)."""
    owned = context is None
    context = context if context is not None else build_context(settings)
    migrate_database(settings)
    tenants = tenant_directory(settings)
    sessions = context.sessions
    metrics = Metrics(
        context.gate, context.executor.capacity, context.blobs, lambda: [LOCAL_TENANT, *tenants.names()],
        context.calls, getattr(context.executor, "background", None),
        sessions.tenants if sessions is not None else None,
    )
    audit = open_audit_log(settings)
    observers = Observers(metrics, *([audit] if audit is not None else []))
    if sessions is not None:
        sessions.on_end = lambda meta, reason: observers.record(session_expired(meta)) if reason == "expired" else None
        sessions.start()
    retention = BlobRetention(context.blobs, tenants, settings.access.limits.blob_ttl_s)
    retention.start()
    orphans = open_orphan_sweeper(settings)

    def shutdown() -> None:
        if sessions is not None:
            sessions.stop()
        retention.stop()
        if orphans is not None:
            orphans.stop()
        if audit is not None:
            audit.close()
        if owned:
            context.executor.close()
            context.gate.close()

    dispatcher = Dispatcher(context, observers, require_caller=True)
    in_flight = RequestsInFlight()  # each tenant's HTTP requests, /rpc and /mcp together
    routes: list[BaseRoute] = [tools_route(facts_of(context.limits, context.egress.network.run_code))]
    lifespans = []
    if importlib.util.find_spec("mcp") is None:
        logging.getLogger("wasmrun").info("no MCP at /mcp: the mcp SDK is not installed (wasmrun[mcp])")
    else:

        def build_mcp() -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
            from wasmrun.mcp_server import http_app

            return http_app(
                dispatcher, authenticate=tenants.authenticate,
                max_body_bytes=settings.max_body_bytes, with_create_skill=mcp_with_create_skill,
            )

        # The SDK is imported on the first authenticated /mcp request, not at start (see
        # wire/lazy.py). Every request is authenticated like /rpc's before the SDK sees it,
        # and each tool call runs as the key on its own request (mcp_server.http_app).
        mcp = LazyEndpoint(build_mcp)
        routes.append(Route("/mcp", endpoint=Authenticated(mcp, tenants.authenticate, in_flight)))
        lifespans.append(mcp.lifespan)
    return create_wire_app(
        dispatcher,
        max_body_bytes=settings.max_body_bytes,
        body_timeout=settings.body_timeout,
        on_shutdown=shutdown,
        health=context.executor.health,
        routes=routes,
        lifespans=lifespans,
        guard=RequestGuard.for_server(settings.host, settings.access.allowed_hosts, settings.access.allowed_origins),
        authenticate=tenants.authenticate,
        metrics=metrics.render,
        metrics_refusal=functools.partial(metrics_refusal, settings.metrics_key, tenants),
        in_flight=in_flight,
    )


def metrics_refusal(
    metrics_key: str | None, tenants: TenantDirectory, authorization: str | None, client: str | None
) -> str | None:
    """Why a /metrics request is refused, or None. /metrics (tenant names and usage) is the
    operator's: with WASMRUN_METRICS_KEY set, only `Authorization: Bearer <that key>` opens
    it, from anywhere; without one, only a loopback client of a server with no tenants (where
    the local user is the operator). A tenant's API key never opens it, and once tenants exist
    a loopback address proves nothing (a reverse proxy on this machine is loopback too)."""
    if metrics_key is not None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), metrics_key.encode()):
            return None
        return "/metrics needs the operator's metrics key (Authorization: Bearer <WASMRUN_METRICS_KEY>)"
    if tenants.has_tenants():
        return "/metrics is the operator's: set WASMRUN_METRICS_KEY on the server and send it as a Bearer token"
    if client is None or not is_loopback(client):
        return "/metrics is served to this machine only (or with WASMRUN_METRICS_KEY set, to its key)"
    return None


def open_orphan_sweeper(settings: Settings) -> OrphanSweeper | None:
    """With --blob-store: objects a killed server stored without their row are deleted
    (at start, then periodically); nothing to do for files (FileBlobStore.sweep)."""
    if settings.blob_store is None or settings.database_url is None:
        return None
    from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation
    from wasmrun.database.connection import Database
    from wasmrun.database.orphans import OrphanSweeper

    sweeper = OrphanSweeper(Database(settings.database_url), ObjectStore(ObjectStoreLocation.parse(settings.blob_store)))
    sweeper.start()
    return sweeper


def migrate_database(settings: Settings) -> list[int]:
    """Bring the shared database's schema up to date (nothing without --database-url)."""
    if settings.database_url is None:
        return []
    from wasmrun.database.connection import Database

    database = Database(settings.database_url)
    try:
        return database.migrate()
    finally:
        database.close()


def tenant_store(settings: Settings) -> TenantEditor:
    """The shared database's tenants with --database-url, else `<data_dir>/tenants.json`."""
    if settings.database_url is None:
        return TenantStore(settings.data_dir)
    from wasmrun.database.connection import Database
    from wasmrun.database.tenants import PgTenantStore

    return PgTenantStore(Database(settings.database_url))


def open_audit_log(settings: Settings) -> AuditLog | PgAuditLog | None:
    """Rows of the shared database with --database-url (unless --audit-log -), else the file."""
    if settings.audit_log is None:
        return None
    if settings.database_url is None:
        return AuditLog(settings.audit_log)
    from wasmrun.database.audit import PgAuditLog
    from wasmrun.database.connection import Database

    return PgAuditLog(Database(settings.database_url))


def tenant_directory(settings: Settings) -> TenantDirectory:
    """API keys from the tenant store; with no tenants there, the implicit
    local tenant when this server may be anonymous (loopback, or --insecure)."""
    anonymous = is_loopback(settings.host) or settings.insecure
    return TenantDirectory(
        tenant_store(settings),
        settings.access.limits,
        anonymous=local_caller(settings.access.limits) if anonymous else None,
    )


def check_exposure(settings: Settings) -> None:
    """Refuse to serve a non-loopback address to anonymous clients unless told to."""
    if is_loopback(settings.host) or tenant_directory(settings).has_tenants():
        return
    if not settings.insecure:
        raise ValueError(
            f"--host {settings.host} is reachable from other machines, and no API keys are configured:"
            " anyone who reaches the port could run code here. Add tenants (`wasmrun tenants add NAME`),"
            " or pass --insecure to serve anonymously anyway"
        )
    logging.getLogger("wasmrun").warning(
        "INSECURE: serving %s without API keys; anyone who reaches this port can run code and read blobs",
        settings.host,
    )


def check_workers(settings: Settings) -> None:
    """Refuse to serve several tenants from fewer than two workers unless told to: each tenant
    may hold all the sandboxes but one (tenants/quotas.py), and with one worker that is all of
    them, so one tenant's sleeping runs make every other tenant's run "server busy"."""
    tenants = len(tenant_directory(settings).names())
    if settings.workers >= 2 or tenants < 2:
        return
    if not settings.allow_one_worker:
        raise ValueError(
            f"--workers {settings.workers} with {tenants} tenants: one tenant's runs could hold the only"
            " sandbox and every other tenant's runs would be refused as server busy meanwhile. Use"
            " --workers 2 or more (on one CPU the system time-slices them, and each tenant keeps one for"
            " the others), or pass --allow-one-worker (WASMRUN_ALLOW_ONE_WORKER=1) to accept that"
        )
    logging.getLogger("wasmrun").warning(
        "--allow-one-worker: %d tenants share one sandbox; one tenant's runs can hold it from the others", tenants
    )


def serve(settings: Settings, *, mcp_with_create_skill: bool = False) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    migrate_database(settings)
    check_exposure(settings)
    check_workers(settings)
    if settings.blob_store is None:  # the database's counters change with its rows: nothing to recount
        FileBlobStore(settings.blobs_dir).recount()  # quotas start from what is on disk
    app = create_app(settings, mcp_with_create_skill=mcp_with_create_skill)
    logging.getLogger("wasmrun").info(
        "serving the Skills Protocol at http://%s:%d/rpc (data in %s)",
        settings.host, settings.port, settings.data_dir,
    )
    if any(getattr(route, "path", None) == "/mcp" for route in app.routes):
        logging.getLogger("wasmrun").info("MCP (streamable HTTP) at http://%s:%d/mcp", settings.host, settings.port)
    # No per-request access log: on a millisecond run it costs a tenth of the
    # server's CPU; runs are logged by the sandbox only when they fail on our side.
    # A JSON-RPC answer's head and body in one write (wire/http_protocol.py).
    from wasmrun.wire.http_protocol import OneWriteHttpToolsProtocol

    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", access_log=False,
                http=OneWriteHttpToolsProtocol)


async def serve_mcp_stdio(settings: Settings, *, with_create_skill: bool = False) -> None:
    """`wasmrun mcp`: the tools over MCP on stdin/stdout, sandboxes in the worker pool."""
    from wasmrun.mcp_server import serve_stdio

    @contextlib.contextmanager
    def open_dispatcher() -> Iterator[Dispatcher]:
        context = build_context(settings)
        if context.sessions is not None:
            context.sessions.start()  # expired sessions deleted as under `serve`
        try:
            yield Dispatcher(context)
        finally:
            if context.sessions is not None:
                context.sessions.stop()
            context.executor.close()

    await serve_stdio(open_dispatcher, with_create_skill=with_create_skill)
