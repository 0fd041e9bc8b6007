"""Putting the runtime together: settings → backends → blob store, skill registry, executor → app.

The backends (local files, or PostgreSQL and S3) are chosen once, in backends.py;
`make_executor` is the one place that decides how the server runs sandboxes.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import importlib.util
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from wasmrun.backends import Backends, open_backends
from wasmrun.blobs.store import BlobStore
from wasmrun.capabilities import facts_of
from wasmrun.e2b.front import e2b_routes
from wasmrun.observe.metrics import Metrics
from wasmrun.observe.record import Observers
from wasmrun.packages import layer as package_layer
from wasmrun.protocol.context import Context
from wasmrun.protocol.methods import Dispatcher
from wasmrun.protocol.sessionstore import session_expired
from wasmrun.registry import requirements
from wasmrun.registry.store import DirectoryRegistry
from wasmrun.sandbox import Executor, InProcessExecutor, WorkerPool, warmup
from wasmrun.served import ServedImage
from wasmrun.settings import Settings
from wasmrun.tenants.caller import LOCAL_TENANT, local_caller
from wasmrun.tenants.calls import CallGate, RequestsInFlight
from wasmrun.tenants.retention import BlobRetention
from wasmrun.tenants.store import TenantDirectory
from wasmrun.wire.app import Authenticated
from wasmrun.wire.app import create_app as create_wire_app
from wasmrun.wire.guard import RequestGuard, is_loopback
from wasmrun.wire.lazy import LazyEndpoint
from wasmrun.wire.tools_route import tools_route


def make_executor(settings: Settings, backends: Backends, served: ServedImage | None = None) -> Executor:
    """Worker processes, each opening the blob store of `backends` itself; `served` is
    told which image they serve (and of the move to the data image, on `auto`)."""
    from wasmrun.sandbox import precompile, release_freed_heap, resolve_image

    # Here, once, with progress on stderr, rather than in every worker at once. The module
    # loaded to check it is not kept: its memory goes back to the system.
    precompile()
    release_freed_heap()
    image = resolve_image(settings.image)
    if image == "data":
        from wasmrun.sandbox import data_engine, ready_image

        ready_image(data_engine(), quiet=False)
    logging.getLogger("wasmrun").info("serving the %s image", image)
    if served is not None:
        served.switch(image)
    pool = WorkerPool(
        backends.blobs.for_workers(), workers=settings.workers, queue_timeout=settings.queue_timeout, image=image,
        packages=settings.package_layers,
    )
    if settings.image == "auto" and image == "stdlib" and warmup.available():
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


def make_local_executor(settings: Settings, blobs: BlobStore) -> Executor:
    """Sandboxes on threads of this process: quicker to start, for one-off runs (`wasmrun run`)."""
    return InProcessExecutor(
        blobs, slots=settings.workers, queue_timeout=settings.queue_timeout, packages=settings.package_layers,
        image=settings.image,
    )


def open_registry(settings: Settings, backends: Backends | None = None) -> DirectoryRegistry:
    """The operator's skill folders (read-only; `skills add`'s folder made here, so that a
    skill added later is picked up without a restart) and the tenants' created skills
    (backends.py: in the shared database with --database-url, else under the data folder)."""
    if backends is None:
        backends = open_backends(settings)
    settings.installed_skills.mkdir(parents=True, exist_ok=True)
    layer = served_layer(settings)
    registry = backends.records.skill_registry(layer)
    warn_missing_packages(registry, layer)
    return registry


def serving_now(image: str) -> str:
    """The image a server started with `image` ("auto", "stdlib" or "data") serves now."""
    if image == "auto":
        from wasmrun.sandbox import image_state

        return "data" if image_state() is None else "stdlib"
    return image


def served_layer(settings: Settings) -> Path:
    """The package layer of the guest image this server runs (each image's Python has its own)."""
    image = serving_now(settings.image)
    return package_layer.tag_root(settings.data_dir, package_layer.IMAGE_TAGS.get(image, package_layer.DEFAULT_TAG))


def warn_missing_packages(registry: DirectoryRegistry, layer: Path) -> None:
    """Folder skills load whatever they declare; a missing package is said once, at start."""
    for skill in registry.loaded_operator_skills():
        wanted = requirements.missing(skill.manifest, layer)
        if wanted:
            logging.getLogger("wasmrun").warning("%s", requirements.missing_message(skill.manifest.name, wanted))


def build_context(
    settings: Settings, *, backends: Backends | None = None, blobs: BlobStore | None = None,
    executor: Executor | None = None,
) -> Context:
    """Everything the methods need, on `backends` (opened from `settings` when not given);
    pass `blobs` and `executor` to share them (tests do)."""
    if backends is None:
        backends = open_backends(settings)
    if blobs is None:
        blobs = backends.blobs.blob_store()
    served = ServedImage(package_layers=settings.package_layers)
    if executor is None:
        executor = make_executor(settings, backends, served)
    else:  # the caller's: on the image its settings name
        served.switch(serving_now(settings.image))
    return Context(
        registry=open_registry(settings, backends),
        blobs=blobs,
        executor=executor,
        secrets=settings.secrets,
        limits=settings.limits,
        egress=settings.egress,
        access=settings.access,
        max_full_read_bytes=settings.max_full_read_bytes,
        caller=local_caller(settings.access.limits),
        gate=backends.records.run_gate(),
        calls=CallGate(settings.queue_timeout),
        sessions=backends.blobs.session_store(),
        served=served,
    )


def create_app(
    settings: Settings, context: Context | None = None, *, backends: Backends | None = None,
    mcp_with_create_skill: bool = False,
) -> Starlette:
    """The server's ASGI app, on `backends` (opened from `settings` when not given). It closes
    the executor on shutdown only if it made it.

    /rpc, /tools and /mcp share one dispatcher and one app (so one middleware stack);
    /mcp only when the MCP SDK is installed (the `mcp` extra)."""
    owned = context is None
    if backends is None:
        backends = open_backends(settings)
    context = context if context is not None else build_context(settings, backends=backends)
    tenants = tenant_directory(settings, backends)
    metrics = Metrics(
        context.gate, context.executor.capacity, context.blobs, lambda: [LOCAL_TENANT, *tenants.names()],
        context.calls, getattr(context.executor, "background", None),
        context.sessions.tenants if context.sessions is not None else None,
    )
    audit = backends.records.audit_log()
    observers = Observers(metrics, *([audit] if audit is not None else []))
    stops = start_background_work(settings, context, backends, tenants, observers)

    def shutdown() -> None:
        for stop in stops:
            stop()
        if audit is not None:
            audit.close()
        if owned:
            context.executor.close()
            context.gate.close()

    dispatcher = Dispatcher(context, observers, require_caller=True)
    in_flight = RequestsInFlight()  # each tenant's HTTP requests, /rpc and /mcp together
    served = context.served
    routes: list[BaseRoute] = [
        tools_route(lambda: facts_of(context.limits, context.egress.network.run_code, served.facts()))
    ]
    routes.extend(e2b_routes(dispatcher, tenants.authenticate, in_flight))  # the E2B SDK's front (docs/e2b.md)
    lifespans = mcp_endpoint(settings, dispatcher, tenants, in_flight, routes, with_create_skill=mcp_with_create_skill)
    return create_wire_app(
        dispatcher,
        max_body_bytes=settings.max_body_bytes,
        body_timeout=settings.body_timeout,
        on_shutdown=shutdown,
        health=context.executor.health,
        image_status=context.served.status,
        routes=routes,
        lifespans=lifespans,
        guard=RequestGuard.for_server(settings.host, settings.access.allowed_hosts, settings.access.allowed_origins),
        authenticate=tenants.authenticate,
        metrics=metrics.render,
        metrics_refusal=functools.partial(metrics_refusal, settings.metrics_key, tenants),
        in_flight=in_flight,
        health_detail=functools.partial(health_detail, settings.metrics_key, tenants),
    )


def start_background_work(
    settings: Settings, context: Context, backends: Backends, tenants: TenantDirectory, observers: Observers
) -> list[Callable[[], None]]:
    """Start what the server does beside answering (sessions' expiry, blob retention, the
    object store's orphan sweep); what stops each, in order."""
    stops: list[Callable[[], None]] = []
    sessions = context.sessions
    if sessions is not None:
        sessions.on_end = lambda meta, reason: observers.record(session_expired(meta)) if reason == "expired" else None
        sessions.start()
        stops.append(sessions.stop)
    retention = BlobRetention(context.blobs, tenants, settings.access.limits.blob_ttl_s)
    retention.start()
    stops.append(retention.stop)
    orphans = backends.blobs.orphan_sweeper()
    if orphans is not None:
        stops.append(orphans.stop)
    return stops


def mcp_endpoint(
    settings: Settings, dispatcher: Dispatcher, tenants: TenantDirectory, in_flight: RequestsInFlight,
    routes: list[BaseRoute], *, with_create_skill: bool,
) -> list[Callable[[], AbstractAsyncContextManager[None]]]:
    """/mcp added to `routes` when the MCP SDK is installed; the lifespans it needs."""
    if importlib.util.find_spec("mcp") is None:
        logging.getLogger("wasmrun").info("no MCP at /mcp: the mcp SDK is not installed (wasmrun[mcp])")
        return []

    def build_mcp() -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
        from wasmrun.mcp_server import http_app

        return http_app(
            dispatcher, authenticate=tenants.authenticate,
            max_body_bytes=settings.max_body_bytes, with_create_skill=with_create_skill,
        )

    # The SDK is imported on the first authenticated /mcp request, not at start (see
    # wire/lazy.py). Every request is authenticated like /rpc's before the SDK sees it,
    # and each tool call runs as the key on its own request (mcp_server.http_app).
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


def tenant_directory(settings: Settings, backends: Backends | None = None) -> TenantDirectory:
    """API keys from the tenant store of `backends` (opened from `settings` when not given);
    with no tenants there, the implicit local tenant when this server may be anonymous
    (loopback, or --insecure)."""
    if backends is None:
        backends = open_backends(settings)
    anonymous = is_loopback(settings.host) or settings.insecure
    return TenantDirectory(
        backends.records.tenant_store(),
        settings.access.limits,
        anonymous=local_caller(settings.access.limits) if anonymous else None,
    )


def check_exposure(settings: Settings, backends: Backends | None = None) -> None:
    """Refuse to serve a non-loopback address to anonymous clients unless told to."""
    if is_loopback(settings.host) or tenant_directory(settings, backends).has_tenants():
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


def check_workers(settings: Settings, backends: Backends | None = None) -> None:
    """Refuse to serve several tenants from fewer than two workers unless told to: each tenant
    may hold all the sandboxes but one (tenants/quotas.py), and with one worker that is all of
    them, so one tenant's sleeping runs make every other tenant's run "server busy"."""
    tenants = len(tenant_directory(settings, backends).names())
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
    backends = open_backends(settings)  # here once: the database migrated, the stores chosen
    check_exposure(settings, backends)
    check_workers(settings, backends)
    backends.blobs.recount()  # quotas start from what is stored
    app = create_app(settings, backends=backends, mcp_with_create_skill=mcp_with_create_skill)
    logging.getLogger("wasmrun").info(
        "serving the Skills Protocol at http://%s:%d/rpc (data in %s)",
        settings.host, settings.port, settings.data_dir,
    )
    if any(getattr(route, "path", None) == "/mcp" for route in app.routes):
        logging.getLogger("wasmrun").info("MCP (streamable HTTP) at http://%s:%d/mcp", settings.host, settings.port)
    uvicorn.run(app, **uvicorn_options(settings))


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """How `serve` runs uvicorn (tests that start a server in-process use the same)."""
    from wasmrun.wire.http_protocol import HttpProtocol

    # No per-request access log: on a millisecond run it costs a tenth of the
    # server's CPU; runs are logged by the sandbox only when they fail on our side.
    # One write per JSON-RPC answer, a lingering close after one that closes the
    # connection (wire/http_protocol.py).
    return {"host": settings.host, "port": settings.port, "log_level": "info", "access_log": False,
            "http": HttpProtocol}


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
