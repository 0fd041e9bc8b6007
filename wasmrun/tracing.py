"""OpenTelemetry traces of wasmrun's requests (the optional `otel` extra).

On only when the extra is installed AND the operator asked for an exporter the
standard way: OTEL_TRACES_EXPORTER set to `otlp` or `console`, or
OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set (then OTLP
over HTTP/protobuf). OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it
off. The SDK reads the rest itself (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*...); the service name defaults to
`wasmrun`.

Off, every hook here is one global load and a test of None: `span()` hands back
one shared no-op context manager, `traceparent()` an empty string, `inject()`
nothing; the SDK is never imported.

The spans (docs/observability.md): one server span per HTTP request or
WebSocket (the ASGI middleware, every door), the JSON-RPC call, the run's
admission, the pool's dispatch to a worker, the worker's run (a child through
the W3C `traceparent` carried in the run request), the guest's run with its
phases, and the stores' calls. Egress requests a run makes carry the run's
`traceparent`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger("wasmrun.tracing")

# A W3C traceparent is 55 characters; anything much longer is not one, and is not parsed.
MAX_TRACEPARENT_CHARS = 128
DEFAULT_SERVICE_NAME = "wasmrun"

_tracer: Tracer | None = None
_NOOP: AbstractContextManager[Any] = contextlib.nullcontext()
T = TypeVar("T")
P = ParamSpec("P")


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the operator asked for traces (the standard variables), extra or not."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def enabled() -> bool:
    return _tracer is not None


def setup(process: str) -> bool:
    """Turn tracing on in this process (the server's, or a pool worker's) if it is wanted
    and the extra is installed; True if it is on. Safe to call twice."""
    global _tracer
    if _tracer is not None or not wanted():
        return _tracer is not None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        logger.warning("OTEL_* asks for traces but the `otel` extra is not installed: pip install 'wasmrun[otel]'")
        return False
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*
        else:
            logger.warning("OTEL_TRACES_EXPORTER=%s is not one wasmrun knows (otlp, console, none): ignored", name)
    if not exporters:
        return False
    defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create({**defaults, "wasmrun.process": process}))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # other libraries' spans (if instrumented) join the same traces
    _tracer = provider.get_tracer("wasmrun")
    _providers.append(provider)
    return True


_providers: list[Any] = []


def shutdown() -> None:
    """Export what is still buffered (the server's and a worker's last spans)."""
    global _tracer
    for provider in _providers:
        provider.shutdown()
    _providers.clear()
    _tracer = None


def span(name: str, attributes: Mapping[str, str | int | float | bool] | None = None) -> AbstractContextManager[Any]:
    """A span around a block (the current one's child); the shared no-op when off."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    return tracer.start_as_current_span(name, attributes=attributes)


def traced(name: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """A span around each call of the decorated function (the stores' calls). Decided per
    call, since tracing is set up after import: off, one more Python call and a test."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            tracer = _tracer
            if tracer is None:
                return fn(*args, **kwargs)
            with tracer.start_as_current_span(name):
                return fn(*args, **kwargs)

        return call

    return decorate


def entering(name: str, manager: AbstractAsyncContextManager[T]) -> AbstractAsyncContextManager[T]:
    """`manager` with a span around its entry only: the time a run waits to be admitted
    (quotas, queue), not the time it then runs."""
    if _tracer is None:
        return manager
    return _timed_entry(name, manager)


@contextlib.asynccontextmanager
async def _timed_entry(name: str, manager: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    with span(name):
        value = await manager.__aenter__()
    try:
        yield value
    except BaseException as exc:
        if not await manager.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        await manager.__aexit__(None, None, None)


def traceparent() -> str:
    """The current span's W3C traceparent ('' when off or outside a span): what a run
    request carries to its worker."""
    if _tracer is None:
        return ""
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent", "")


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current trace's `traceparent` (and `tracestate`) to outgoing headers."""
    if _tracer is None:
        return
    from opentelemetry.propagate import inject as otel_inject

    otel_inject(headers)


def continued(name: str, parent: str, attributes: Mapping[str, str | int | float | bool] | None = None
              ) -> AbstractContextManager[Any]:
    """A span whose parent is the W3C traceparent `parent` (a worker continuing its
    server's trace); a root span if it is empty or not a valid one; the no-op when off."""
    tracer = _tracer
    if tracer is None:
        return _NOOP
    return tracer.start_as_current_span(name, context=_extract(parent), attributes=attributes)


def _extract(parent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not parent or len(parent) > MAX_TRACEPARENT_CHARS:
        return None
    return TraceContextTextMapPropagator().extract({"traceparent": parent})


def record_phases(current: Any, started_ns: int, usage: Any) -> None:
    """The guest run's phases on its span: the usage figures as attributes, and the
    guest's entry and return as events at their times (from the run's own timings)."""
    if current is None:
        return
    instantiate_ms, run_ms = float(usage.instantiate_ms), float(usage.run_ms)
    current.set_attributes({
        "wasmrun.instantiate_ms": instantiate_ms, "wasmrun.run_ms": run_ms, "wasmrun.cpu_ms": float(usage.cpu_ms),
        "wasmrun.peak_memory_bytes": int(usage.peak_memory_bytes), "wasmrun.prepared_ahead": bool(usage.prepared_ahead),
    })
    entered = started_ns + int(instantiate_ms * 1e6)
    current.add_event("guest entered", timestamp=entered)
    current.add_event("guest returned", timestamp=entered + int(run_ms * 1e6))


# A span's name is its door and route, never the raw path: the ids in it would make
# every span name unique (and put tenants' session ids in span names).
_PLAIN = ("rpc", "mcp", "tools", "healthz", "metrics", "kernelspecs")


def route_name(path: str) -> str:
    """`/rpc` -> `rpc`, `/e2b/sandbox/...` -> `e2b sandbox`, `/azure/pools/P/code/execute`
    -> `azure code`, `/api/kernels/K/channels` -> `jupyter channels`; else `other`."""
    parts = [p for p in path.split("/") if p][:6]
    if not parts:
        return "other"
    head = parts[0]
    if head in _PLAIN:
        return head if head != "kernelspecs" else "jupyter kernelspecs"
    if head == "e2b" and len(parts) > 1 and parts[1] in ("api", "sandbox"):
        return f"e2b {parts[1]}"
    if head == "azure" and len(parts) > 3 and parts[1] == "pools" and parts[3] in ("code", "files", "session"):
        return f"azure {parts[3]}"
    if head == "api":
        if parts[-1] == "channels" and parts[1:2] == ["kernels"]:
            return "jupyter channels"
        return "jupyter kernels" if parts[1:2] == ["kernels"] else "jupyter api"
    return "other"


def instrument(app: ASGIApp) -> ASGIApp:
    """`app` with a server span per HTTP request and WebSocket; `app` itself when off."""
    if _tracer is None:
        return app
    return TracingMiddleware(app)


class TracingMiddleware:
    """A server span per request, the child of the caller's `traceparent` if it sent a
    valid one (a missing, malformed or oversized one: a new trace)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = _tracer
        if tracer is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode

        parent = ""
        for key, value in scope.get("headers", ()):
            if key == b"traceparent":
                parent = value.decode("latin-1")
        method = scope.get("method", "WS") if scope["type"] == "http" else "WS"
        route = route_name(scope.get("path", ""))
        attributes = {"http.request.method": method, "http.route": route}
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        with tracer.start_as_current_span(f"{method} {route}", context=_extract(parent), kind=SpanKind.SERVER,
                                          attributes=attributes) as current:
            await self.app(scope, receive, sending)
            if status:
                current.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    current.set_status(Status(StatusCode.ERROR))
