"""/metrics in the Prometheus text format, with `prometheus_client`.

    wasmrun_calls_total{tenant,method,status}         every call; status "ok" or the error's code
    wasmrun_runs_total{tenant,method,status}          runs; status "completed" or "failed"
    wasmrun_run_duration_seconds{method}              histogram of run call durations
    wasmrun_runs_queued / wasmrun_runs_running        runs waiting for / holding a tenant slot
    wasmrun_calls_queued / wasmrun_calls_running      other calls waiting for / holding a tenant slot
    wasmrun_workers_busy / wasmrun_workers_free       the sandbox pool
    wasmrun_blob_bytes{tenant} / wasmrun_blobs{tenant}  what each tenant stores (charged bytes)
    wasmrun_background_runs_total{kind,outcome}   guest runs the server made for no client
    wasmrun_background_cpu_seconds_total{kind}    (skill import runs, compile runs, warm-ups)
    wasmrun_sessions_open{tenant} / wasmrun_session_bytes{tenant}  sessions and their bytes on disk
    wasmrun_sessions_ended_total{tenant,reason}       sessions closed or expired
    wasmrun_session_rollbacks_total{tenant}           session runs a limit or a crash undid

A registry of its own per server (not the process-global one), so that two
apps in one process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from wasmrun.blobs.store import BlobStore
from wasmrun.observe.record import CallRecord
from wasmrun.sandbox import BackgroundTotals
from wasmrun.tenants.calls import CallGate
from wasmrun.tenants.quotas import RunGate

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Gauges(Collector):
    """Values read when scraped: nothing to keep up to date between scrapes."""

    def __init__(
        self,
        gate: RunGate,
        workers: Callable[[], tuple[int, int]],
        blobs: BlobStore,
        tenants: Callable[[], Iterable[str]],
        calls: CallGate | None = None,
        background: BackgroundTotals | None = None,
        sessions: Callable[[], dict[str, tuple[int, int]]] | None = None,
    ) -> None:
        self.background = background
        self.sessions = sessions  # tenant -> (sessions open, their bytes on disk)
        self.gate = gate
        self.workers = workers
        self.blobs = blobs
        self.tenants = tenants
        self.calls = calls

    def collect(self) -> Iterator[Metric]:
        yield from _slots("runs", "Runs", self.gate.load())
        if self.calls is not None:
            yield from _slots("calls", "Calls other than runs", self.calls.load())
        busy, free = self.workers()
        yield GaugeMetricFamily("wasmrun_workers_busy", "Sandbox workers running a call", value=busy)
        yield GaugeMetricFamily("wasmrun_workers_free", "Sandbox workers free", value=free)
        if self.background is not None:
            yield from _background(self.background.snapshot())
        stored = GaugeMetricFamily("wasmrun_blob_bytes", "Blob bytes a tenant stores (as charged)", labels=["tenant"])
        count = GaugeMetricFamily("wasmrun_blobs", "Blobs a tenant stores", labels=["tenant"])
        for tenant in sorted(set(self.tenants())):
            usage = self.blobs.usage(tenant)
            stored.add_metric([tenant], usage.bytes)
            count.add_metric([tenant], usage.count)
        yield stored
        yield count
        if self.sessions is not None:
            open_ = GaugeMetricFamily("wasmrun_sessions_open", "Sessions a tenant has open", labels=["tenant"])
            held = GaugeMetricFamily("wasmrun_session_bytes", "Bytes a tenant's sessions hold on disk", labels=["tenant"])
            for tenant, (opened, used) in sorted(self.sessions().items()):
                open_.add_metric([tenant], opened)
                held.add_metric([tenant], used)
            yield open_
            yield held


def _background(totals: dict[tuple[str, str], tuple[int, float]]) -> Iterator[Metric]:
    runs = CounterMetricFamily(
        "wasmrun_background_runs", "Guest runs the server started for no client, by kind and outcome",
        labels=["kind", "outcome"],
    )
    cpu = CounterMetricFamily("wasmrun_background_cpu_seconds", "CPU time of those runs", labels=["kind"])
    by_kind: dict[str, float] = {}
    for (kind, outcome), (count, cpu_s) in sorted(totals.items()):
        runs.add_metric([kind, outcome], count)
        by_kind[kind] = by_kind.get(kind, 0.0) + cpu_s
    for kind, cpu_s in sorted(by_kind.items()):
        cpu.add_metric([kind], cpu_s)
    yield runs
    yield cpu


def _slots(kind: str, what: str, load: dict[str, tuple[int, int]]) -> Iterator[Metric]:
    queued = GaugeMetricFamily(f"wasmrun_{kind}_queued", f"{what} waiting for one of their tenant's slots",
                               labels=["tenant"])
    running = GaugeMetricFamily(f"wasmrun_{kind}_running", f"{what} holding one of their tenant's slots",
                                labels=["tenant"])
    for tenant, (holding, waiting) in sorted(load.items()):
        running.add_metric([tenant], holding)
        queued.add_metric([tenant], waiting)
    yield queued
    yield running


class Metrics:
    def __init__(
        self,
        gate: RunGate,
        workers: Callable[[], tuple[int, int]],
        blobs: BlobStore,
        tenants: Callable[[], Iterable[str]],
        calls: CallGate | None = None,
        background: BackgroundTotals | None = None,
        sessions: Callable[[], dict[str, tuple[int, int]]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.sessions_ended = Counter(
            "wasmrun_sessions_ended", "Sessions ended", ["tenant", "reason"], registry=self.registry
        )
        self.rollbacks = Counter(
            "wasmrun_session_rollbacks", "Session runs a limit or a crash undid", ["tenant"], registry=self.registry
        )
        self.calls = Counter(
            "wasmrun_calls", "Protocol calls", ["tenant", "method", "status"], registry=self.registry
        )
        self.runs = Counter("wasmrun_runs", "Runs", ["tenant", "method", "status"], registry=self.registry)
        self.duration = Histogram(
            "wasmrun_run_duration_seconds", "Run calls, from the call to its answer", ["method"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
            registry=self.registry,
        )
        self.registry.register(_Gauges(gate, workers, blobs, tenants, calls, background, sessions))

    def record(self, call: CallRecord) -> None:
        status = "ok" if call.error_code is None else str(call.error_code)
        self.calls.labels(call.tenant, call.method, status).inc()
        if call.run_status is not None:  # a run method's call (only a run has an outcome)
            self.runs.labels(call.tenant, call.method, call.run_status).inc()
            self.duration.labels(call.method).observe(call.duration_ms / 1000)
        if call.session_rolled_back:
            self.rollbacks.labels(call.tenant).inc()
        if call.method == "close_session" and call.error_code is None:
            self.sessions_ended.labels(call.tenant, "closed").inc()
        if call.method == "session_expired":  # not a call: the store's own event
            self.sessions_ended.labels(call.tenant, "expired").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
