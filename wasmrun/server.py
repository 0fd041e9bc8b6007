"""Putting the runtime together: settings → backends → blob store, skill registry, executor → app.

`assemble` is the one place that reads the settings: it opens the backends (backends.py,
once), builds each store and directory once, and hands every piece the parts it needs
(`SandboxOptions`, `HttpOptions`, policies, paths), never the whole `Settings`;
`assemble_local` builds the same context, without the tenant directory and the HTTP
options, for `wasmrun mcp` and `wasmrun run` (one local caller, no API key). `create_app`
makes the HTTP app of an assembled `Server`; `make_executor` is the one place that decides
how the server runs sandboxes.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import importlib.util
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from wasmrun import tracing
from wasmrun.azure.front import azure_routes
from wasmrun.backends import Backends, open_backends
from wasmrun.blobs.store import BlobStore
from wasmrun.capabilities import facts_of
from wasmrun.e2b.front import e2b_routes
from wasmrun.jupyter.front import jupyter_routes
from wasmrun.observe.metrics import Metrics
from wasmrun.observe.record import CallRecord, Observers
from wasmrun.packages import layer as package_layer
from wasmrun.packages.ondemand import Installed, OnDemand
from wasmrun.protocol.context import Context
from wasmrun.protocol.methods import Dispatcher
from wasmrun.protocol.packages import prepare_folder_skills
from wasmrun.registry.store import DirectoryRegistry
from wasmrun.sandbox import Executor, InProcessExecutor, WorkerPool, cachebound, warmup
from wasmrun.served import ServedImage
from wasmrun.sessionstore.store import session_expired
from wasmrun.settings import Settings
from wasmrun.tenants.caller import LOCAL_TENANT, local_caller
from wasmrun.tenants.calls import CallGate, RequestsInFlight
from wasmrun.tenants.retention import BlobRetention
from wasmrun.tenants.store import TenantDirectory
from wasmrun.wire.app import Authenticated
from wasmrun.wire.app import create_app as create_wire_app
from wasmrun.wire.connections import KeyedRequests
from wasmrun.wire.guard import RequestGuard, is_loopback
from wasmrun.wire.lazy import LazyEndpoint
from wasmrun.wire.tools_route import tools_route


@dataclass(frozen=True)
class SandboxOptions:
    """How this server runs sandboxes (settings: --image, --workers, --queue-timeout, the
    operator's package layers)."""

    image: str  # "auto", "stdlib" or "data"
    workers: int
    queue_timeout: float
    package_layers: Path

    @classmethod
    def of(cls, settings: Settings) -> SandboxOptions:
        return cls(settings.image, settings.workers, settings.queue_timeout, settings.package_layers)


@dataclass(frozen=True)
class HttpOptions:
    """What the HTTP front needs of the settings."""

    guard: RequestGuard  # Host/Origin
    max_body_bytes: int
    body_timeout: float
    header_timeout: float
    unkeyed_connections: int  # connections not in a keyed request, server-wide (wire/connections.py)
    metrics_key: str | None = field(repr=False)  # the operator's /metrics key
    blob_ttl_s: int  # the local tenant's blobs' retention (the server's default tenant limit)
    e2b_workspace_mb: int | None = None  # each E2B sandbox's workspace quota (None: the runs' default)


@dataclass(frozen=True)
class LocalServer:
    """What `wasmrun mcp` and `wasmrun run` serve their one local caller from, built once by
    `assemble_local`: the backends and the context. No tenant directory (no API key is
    checked on stdin/stdout or a command line) and no HTTP options."""

    backends: Backends
    context: Context
    owns_executor: bool  # made by the assembly: closed with the server

    def close(self) -> None:
        """What the assembly opened for the server's lifetime (the caller's executor is its own)."""
        if self.owns_executor:
            self.context.executor.close()
            self.context.gate.close()


@dataclass(frozen=True)
class Server(LocalServer):
    """A server's parts, each built once by `assemble`: what `create_app` serves over HTTP,
    the tenant directory that authenticates each call among them."""

    tenants: TenantDirectory
    http: HttpOptions


def assemble(
    settings: Settings, *, executor: Executor | None = None, blobs: BlobStore | None = None, serving: bool = False,
) -> Server:
    """The server `settings` describe: the backends opened once (the database migrated),
    the tenant directory, blob store, executor, skill registry and context built once each.
    `serving` (`wasmrun serve`): refuse an unsafe exposure or worker count before any worker
    starts, and recount usage (quotas start from what is stored). Pass `blobs` and
    `executor` to share them (tests and `wasmrun run` do)."""
    backends = open_backends(settings)
    limits = settings.access.limits
    anonymous = is_loopback(settings.host) or settings.insecure
    tenants = TenantDirectory(
        backends.records.tenant_store(), limits, anonymous=local_caller(limits) if anonymous else None
    )
    if serving:
        check_exposure(settings.host, tenants, insecure=settings.insecure)
        check_workers(settings.workers, tenants, allow_one_worker=settings.allow_one_worker)
        backends.blobs.recount()
    context, owns_executor = _context(settings, backends, executor, blobs)
    http = HttpOptions(
        RequestGuard.for_server(settings.host, settings.access.allowed_hosts, settings.access.allowed_origins),
        settings.max_body_bytes, settings.body_timeout, settings.header_timeout, settings.unkeyed_connections,
        settings.metrics_key, limits.blob_ttl_s, settings.e2b_workspace_mb,
    )
    return Server(backends, context, owns_executor, tenants, http)


def assemble_local(
    settings: Settings, *, executor: Executor | None = None, blobs: BlobStore | None = None
) -> LocalServer:
    """`wasmrun mcp` and `wasmrun run`: the backends opened once, then the blob store,
    executor, skill registry and context, as `assemble` builds them, for the one local
    caller; the tenant store is never opened (with the shared backend, no connection for it)."""
    backends = open_backends(settings)
    context, owns_executor = _context(settings, backends, executor, blobs)
    return LocalServer(backends, context, owns_executor)


def _context(
    settings: Settings, backends: Backends, executor: Executor | None, blobs: BlobStore | None
) -> tuple[Context, bool]:
    """The context every door dispatches on; and whether its executor is made here (the
    server closes it) rather than the caller's."""
    limits = settings.access.limits
    if blobs is None:
        blobs = backends.blobs.blob_store()
    served = ServedImage(package_layers=settings.package_layers)
    owns_executor = executor is None
    if executor is None:
        executor = make_executor(SandboxOptions.of(settings), backends, served)
    else:  # the caller's: on the image its settings name
        served.switch(serving_now(settings.image))
    registry = open_registry(backends, settings.installed_skills, served_layer(settings.data_dir, settings.image))
    context = Context(
        registry=registry,
        blobs=blobs,
        executor=executor,
        secrets=settings.secrets,
        limits=settings.limits,
        egress=settings.egress,
        access=settings.access,
        max_full_read_bytes=settings.max_full_read_bytes,
        caller=local_caller(limits),
        gate=backends.records.run_gate(),
        calls=CallGate(settings.queue_timeout),
        sessions=backends.blobs.session_store(),
        served=served,
        packages=OnDemand(settings.data_dir, settings.packages),
    )
    prepare_folder_skills(context, registry.loaded_operator_skills())
    return context, owns_executor


def make_executor(options: SandboxOptions, backends: Backends, served: ServedImage | None = None) -> Executor:
    """Worker processes, each opening the blob store of `backends` itself; `served` is
    told which image they serve (and of the move to the data image, on `auto`)."""
    from wasmrun.sandbox import precompile, release_freed_heap, resolve_image

    # Here, once, with progress on stderr, rather than in every worker at once: compiled (or
    # made) if the cache lacks it. A module compiled here is not kept: its memory goes back to
    # the system. One already in the cache is left to the workers (loading the data image's
    # to check it took the server 1 s).
    precompile()
    release_freed_heap()
    image = resolve_image(options.image)
    if image == "data":
        from wasmrun.sandbox import data_engine, ready_image, ready_image_path

        if ready_image_path() is None:
            ready_image(data_engine(), quiet=False)
            release_freed_heap()
    logging.getLogger("wasmrun").info("serving the %s image", image)
    if served is not None:
        served.switch(image)
    pool = WorkerPool(
        backends.blobs.for_workers(), workers=options.workers, queue_timeout=options.queue_timeout, image=image,
        packages=options.package_layers,
    )
    if options.image == "auto" and image == "stdlib" and warmup.available():
        # The data stack is installed but its image not made: made in the background
        # (minutes, low priority) while this server answers on the stdlib image.
        warming = warmup.DataImageWarmup()

        def on_ready() -> None:
            pool.roll("data")
            if served is not None:
                served.switch("data")  # once every worker serves it: the texts say so then

        if served is not None:
            served.warming = warming.progress
        warming.start(on_ready=on_ready)
        return warmup.WarmingExecutor(pool, warming)
    return pool


def make_local_executor(options: SandboxOptions, blobs: BlobStore) -> Executor:
    """Sandboxes on threads of this process: quicker to start, for one-off runs (`wasmrun run`)."""
    return InProcessExecutor(
        blobs, slots=options.workers, queue_timeout=options.queue_timeout, packages=options.package_layers,
        image=options.image,
    )


def skills_served(settings: Settings) -> DirectoryRegistry:
    """The skills a server with these settings serves (`wasmrun skills list` and `add`)."""
    layer = served_layer(settings.data_dir, settings.image)
    return open_registry(open_backends(settings), settings.installed_skills, layer)


def open_registry(backends: Backends, installed_skills: Path, layer: Path) -> DirectoryRegistry:
    """The operator's skill folders (read-only; `skills add`'s folder `installed_skills` made
    here, so that a skill added later is picked up without a restart) and the tenants'
    created skills (backends.py: in the shared database with --database-url, else under the
    data folder); `layer`: the package layer of the served image (`served_layer`)."""
    installed_skills.mkdir(parents=True, exist_ok=True)
    return backends.records.skill_registry(layer)


def serving_now(image: str) -> str:
    """The image a server started with `image` ("auto", "stdlib" or "data") serves now."""
    if image == "auto":
        from wasmrun.sandbox import image_state

        return "data" if image_state() is None else "stdlib"
    return image


def served_layer(data_dir: Path, image: str) -> Path:
    """The package layer of the guest image a server started with `image` runs (each image's
    Python has its own), under `data_dir`."""
    served = serving_now(image)
    return package_layer.tag_root(data_dir, package_layer.IMAGE_TAGS.get(served, package_layer.DEFAULT_TAG))


def install_recorder(observers: Observers) -> Callable[[str, Installed], None]:
    """Each on-demand install as an audit line of its own (method "packages.install"): who,
    which set, what it holds, whether it was downloaded now and its bytes."""
    def record(tenant: str, installed: Installed) -> None:
        info = installed.info
        observers.record(CallRecord(
            time=datetime.now(UTC).isoformat(timespec="milliseconds"), tenant=tenant, method="packages.install",
            status="ok", duration_ms=round(installed.seconds * 1000, 3), bytes_in=0 if installed.cached else info.bytes,
            bytes_out=0, packages=info.pins, package_set=info.id, packages_cached=installed.cached,
        ))
    return record


def create_app(server: Server, *, mcp_with_create_skill: bool = False) -> Starlette:
    """The ASGI app of an assembled server. It closes the executor on shutdown only if the
    assembly made it.

    /rpc, /tools and /mcp share one dispatcher and one app (so one middleware stack);
    /mcp only when the MCP SDK is installed (the `mcp` extra)."""
    context, tenants, http = server.context, server.tenants, server.http
    metrics = Metrics(
        context.gate, context.executor.capacity, context.blobs, lambda: [LOCAL_TENANT, *tenants.names()],
        context.calls, getattr(context.executor, "background", None),
        context.sessions.tenants if context.sessions is not None else None,
    )
    audit = server.backends.records.audit_log()
    observers = Observers(metrics, *([audit] if audit is not None else []))
    if context.packages is not None:
        context.packages.on_install = install_recorder(observers)
    stops = start_background_work(server, observers)

    def shutdown() -> None:
        for stop in stops:
            stop()
        if audit is not None:
            audit.close()
        server.close()

    dispatcher = Dispatcher(context, observers, require_caller=True)
    # Each tenant's HTTP requests, /rpc, /mcp and /e2b together; a counted request's connection is keyed.
    in_flight = KeyedRequests()
    served = context.served
    routes: list[BaseRoute] = [
        tools_route(lambda: facts_of(context.limits, context.egress.network.run_code, served.facts()))
    ]
    e2b_lifespans: list[Callable[[], AbstractAsyncContextManager[None]]] = []  # its expiry sweep (docs/e2b.md)
    routes.extend(e2b_routes(dispatcher, tenants.authenticate, in_flight, tenants.caller, e2b_lifespans, http.e2b_workspace_mb))
    routes.extend(azure_routes(dispatcher, tenants.authenticate, in_flight))  # dynamic sessions' clients (docs/azure.md)
    # Jupyter clients' kernel gateway: /api/kernels and the channels WebSocket (docs/jupyter.md)
    routes.extend(jupyter_routes(dispatcher, tenants.authenticate, in_flight, http.guard))
    lifespans = mcp_endpoint(
        dispatcher, tenants, in_flight, routes, max_body_bytes=http.max_body_bytes,
        with_create_skill=mcp_with_create_skill,
    ) + e2b_lifespans
    return create_wire_app(
        dispatcher,
        max_body_bytes=http.max_body_bytes,
        body_timeout=http.body_timeout,
        header_timeout=http.header_timeout,
        unkeyed_connections=http.unkeyed_connections,
        on_shutdown=shutdown,
        health=context.executor.health,
        image_status=context.served.status,
        routes=routes,
        lifespans=lifespans,
        guard=http.guard,
        authenticate=tenants.authenticate,
        metrics=metrics.render,
        metrics_refusal=functools.partial(metrics_refusal, http.metrics_key, tenants),
        in_flight=in_flight,
        health_detail=functools.partial(health_detail, http.metrics_key, tenants),
    )


def start_background_work(server: Server, observers: Observers) -> list[Callable[[], None]]:
    """Start what the server does beside answering (sessions' expiry, blob retention, the
    object store's orphan sweep); what stops each, in order."""
    stops: list[Callable[[], None]] = []
    sessions = server.context.sessions
    if sessions is not None:
        sessions.on_end = lambda meta, reason: observers.record(session_expired(meta)) if reason == "expired" else None
        sessions.start()
        stops.append(sessions.stop)
    retention = BlobRetention(server.context.blobs, server.tenants, server.http.blob_ttl_s)
    retention.start()
    stops.append(retention.stop)
    orphans = server.backends.blobs.orphan_sweeper()
    if orphans is not None:
        stops.append(orphans.stop)
    return stops


def mcp_endpoint(
    dispatcher: Dispatcher, tenants: TenantDirectory, in_flight: RequestsInFlight, routes: list[BaseRoute], *,
    max_body_bytes: int, with_create_skill: bool,
) -> list[Callable[[], AbstractAsyncContextManager[None]]]:
    """/mcp added to `routes` when the MCP SDK is installed; the lifespans it needs."""
    if importlib.util.find_spec("mcp") is None:
        logging.getLogger("wasmrun").info("no MCP at /mcp: the mcp SDK is not installed (wasmrun[mcp])")
        return []

    def build_mcp() -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
        from wasmrun.mcp.server import http_app

        return http_app(
            dispatcher, authenticate=tenants.authenticate,
            max_body_bytes=max_body_bytes, with_create_skill=with_create_skill,
        )

    # The SDK is imported on the first authenticated /mcp request, not at start (see
    # wire/lazy.py). Every request is authenticated like /rpc's before the SDK sees it,
    # and each tool call runs as the key on its own request (mcp/server.py, http_app).
    mcp = LazyEndpoint(build_mcp)
    routes.append(Route("/mcp", endpoint=Authenticated(mcp, tenants.authenticate, in_flight)))
    return [mcp.lifespan]


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


def health_detail(metrics_key: str | None, tenants: TenantDirectory, authorization: str | None) -> bool:
    """Whether /healthz shows its worker and queue counts: on a server with no tenants
    (the local user is the operator), or to the operator's metrics key. Anyone else
    gets the status alone: "ok" (200) or "unavailable" (503)."""
    if not tenants.has_tenants():
        return True
    return metrics_key is not None and metrics_refusal(metrics_key, tenants, authorization, None) is None


def check_exposure(host: str, tenants: TenantDirectory, *, insecure: bool) -> None:
    """Refuse to serve a non-loopback address to anonymous clients unless told to."""
    if is_loopback(host) or tenants.has_tenants():
        return
    if not insecure:
        raise ValueError(
            f"--host {host} is reachable from other machines, and no API keys are configured:"
            " anyone who reaches the port could run code here. Add tenants (`wasmrun tenants add NAME`),"
            " or pass --insecure to serve anonymously anyway"
        )
    logging.getLogger("wasmrun").warning(
        "INSECURE: serving %s without API keys; anyone who reaches this port can run code and read blobs", host,
    )


def check_workers(workers: int, tenants: TenantDirectory, *, allow_one_worker: bool) -> None:
    """Refuse to serve several tenants from fewer than two workers unless told to: each tenant
    may hold all the sandboxes but one (tenants/quotas.py), and with one worker that is all of
    them, so one tenant's sleeping runs make every other tenant's run "server busy"."""
    count = len(tenants.names())
    if workers >= 2 or count < 2:
        return
    if not allow_one_worker:
        raise ValueError(
            f"--workers {workers} with {count} tenants: one tenant's runs could hold the only"
            " sandbox and every other tenant's runs would be refused as server busy meanwhile. Use"
            " --workers 2 or more (on one CPU the system time-slices them, and each tenant keeps one for"
            " the others), or pass --allow-one-worker (WASMRUN_ALLOW_ONE_WORKER=1) to accept that"
        )
    logging.getLogger("wasmrun").warning(
        "--allow-one-worker: %d tenants share one sandbox; one tenant's runs can hold it from the others", count
    )


def serve(settings: Settings, *, mcp_with_create_skill: bool = False) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tracing.setup("server")  # on only when OTEL_* asks for it (docs/observability.md)
    lease = cachebound.start_lease()  # what this server's workers may reload, kept by every prune
    cachebound.prune_on_start(settings.cache_max_bytes, lease)  # the cache within its cap (docs/hosting.md)
    app = create_app(assemble(settings, serving=True), mcp_with_create_skill=mcp_with_create_skill)
    logging.getLogger("wasmrun").info(
        "serving the Skills Protocol at http://%s:%d/rpc (data in %s)",
        settings.host, settings.port, settings.data_dir,
    )
    if any(getattr(route, "path", None) == "/mcp" for route in app.routes):
        logging.getLogger("wasmrun").info("MCP (streamable HTTP) at http://%s:%d/mcp", settings.host, settings.port)
    try:
        uvicorn.run(tracing.instrument(app), **uvicorn_options(settings.host, settings.port))
    finally:
        tracing.shutdown()  # the last spans exported
        if lease is not None:
            lease.release()


def uvicorn_options(host: str, port: int) -> dict[str, Any]:
    """How `serve` runs uvicorn (tests that start a server in-process use the same)."""
    from wasmrun.wire.http_protocol import HttpProtocol

    # No per-request access log: on a millisecond run it costs a tenth of the
    # server's CPU; runs are logged by the sandbox only when they fail on our side.
    # One write per JSON-RPC answer, a lingering close after one that closes the
    # connection (wire/http_protocol.py).
    return {"host": host, "port": port, "log_level": "info", "access_log": False, "http": HttpProtocol}


async def serve_mcp_stdio(settings: Settings, *, with_create_skill: bool = False) -> None:
    """`wasmrun mcp`: the tools over MCP on stdin/stdout, sandboxes in the worker pool."""
    from wasmrun.mcp.server import serve_stdio

    await serve_stdio(functools.partial(open_mcp_dispatcher, settings), with_create_skill=with_create_skill)


@contextlib.contextmanager
def open_mcp_dispatcher(settings: Settings) -> Iterator[Dispatcher]:
    """`wasmrun mcp`'s dispatcher, on a local server (`assemble_local`: no tenant store),
    its expired sessions deleted as under `serve`; closed with it."""
    server = assemble_local(settings)
    sessions = server.context.sessions
    if sessions is not None:
        sessions.start()
    try:
        yield Dispatcher(server.context)
    finally:
        if sessions is not None:
            sessions.stop()
        server.close()
