"""OpenTelemetry traces (issue #48 item 3), from a live `wasmrun serve` configured the
standard way (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME): the real SDK in the server
and its worker exports over OTLP/HTTP to a receiver this test runs, which decodes the
protobuf requests with OpenTelemetry's own message types.

One run_code over HTTP: the spans in order with their durations, each the child of the
right one, the caller's `traceparent` the parent of the server's span, the worker's spans
in the same trace. A Jupyter request gets its spans too. A garbage or 5000-character
traceparent starts a new trace and the call is answered.
"""

from __future__ import annotations

import http.server
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer, free_port, wasmrun_env
from wasmrun import tracing
from wasmrun.tenants.store import TenantStore

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent: str
    start_ns: int
    end_ns: int
    process: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


class Receiver:
    """An OTLP/HTTP traces endpoint (POST /v1/traces, protobuf) on a loopback port."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, request: Any) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    span = Span(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.start_time_unix_nano,
                        s.end_time_unix_nano, str(resource.get("wasmrun.process")), str(resource.get("service.name")),
                        {a.key: _value(a.value) for a in s.attributes}, [(e.name, e.time_unix_nano) for e in s.events],
                    )
                    with self.lock:
                        self.spans.append(span)

    def trace(self, trace_id: str, names: set[str], timeout: float = 30) -> dict[str, Span]:
        """The spans of `trace_id` by name, once all of `names` have come."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = {s.name: s for s in self.spans if s.trace_id == trace_id}
            if names <= set(found) or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Receiver, str]]:
    receiver = Receiver()
    data = tmp_path_factory.mktemp("tracing") / "data"
    token = TenantStore(data).add("alice")
    env = wasmrun_env() | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_SERVICE_NAME": "wasmrun-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds between the batch exports
    }
    server = LiveServer(data, "--workers", "2", env=env)
    try:
        yield server, receiver, token
    finally:
        server.stop()
        receiver.close()


def _rpc(server: LiveServer, token: str, method: str, params: dict[str, Any], headers: dict[str, str]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = httpx2.post(server.endpoint, json=body, timeout=120,
                        headers={"Authorization": f"Bearer {token}", **headers})
    assert reply.status_code == 200, reply.text
    return reply.json()["result"]


RUN_SPANS = {"POST rpc", "rpc run_code", "admission", "pool.dispatch", "pool.queue", "worker.run", "guest.run"}


def test_a_run_code_over_http_is_one_trace_from_the_request_to_the_guest(traced: tuple[LiveServer, Receiver, str]) -> None:
    server, receiver, token = traced
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    result = _rpc(server, token, "run_code", {"language": "python", "code": "sum(range(10))"},
                  {"traceparent": f"00-{trace_id}-{caller_span}-01"})
    assert result["status"] == "completed" and result["output"] == 45, result

    spans = receiver.trace(trace_id, RUN_SPANS)
    assert RUN_SPANS <= set(spans), sorted(spans)
    http_span, call, admission, dispatch, queue, worker, guest = (spans[n] for n in (
        "POST rpc", "rpc run_code", "admission", "pool.dispatch", "pool.queue", "worker.run", "guest.run"))
    # Parent and child: the caller's span, then the server's, down to the guest's.
    assert http_span.parent == caller_span
    assert call.parent == http_span.span_id
    assert admission.parent == call.span_id and dispatch.parent == call.span_id
    assert queue.parent == dispatch.span_id
    assert worker.parent == dispatch.span_id  # across the process boundary, through the run request
    assert guest.parent == worker.span_id
    assert {http_span.process, call.process, dispatch.process} == {"server"}
    assert {worker.process, guest.process} == {"worker"}
    assert http_span.service == worker.service == "wasmrun-under-test"
    # In order, each inside its parent, each with a duration.
    assert admission.end_ns <= dispatch.start_ns
    for child, parent in ((call, http_span), (admission, call), (dispatch, call), (queue, dispatch),
                          (worker, dispatch), (guest, worker)):
        assert parent.start_ns <= child.start_ns <= child.end_ns <= parent.end_ns, (child.name, parent.name)
    assert all(s.end_ns > s.start_ns for s in spans.values())
    assert guest.ms < worker.ms < dispatch.ms < http_span.ms
    # The guest's phases: its usage figures, and its entry and return at their times.
    assert guest.attributes["wasmrun.run_ms"] > 0 and guest.attributes["wasmrun.instantiate_ms"] >= 0
    assert [name for name, _ in guest.events] == ["guest entered", "guest returned"]
    entered, returned = (t for _, t in guest.events)
    assert guest.start_ns <= entered <= returned
    assert http_span.attributes["http.response.status_code"] == 200 and http_span.attributes["http.route"] == "rpc"


ZERO_IDS = "00-" + "0" * 32 + "-" + "0" * 16 + "-01"  # well-formed, but W3C's invalid ids


@pytest.mark.parametrize("header", ["garbage", "00-" + "f" * 4990 + "-01", ZERO_IDS])
def test_a_malformed_traceparent_starts_a_new_trace(traced: tuple[LiveServer, Receiver, str], header: str) -> None:
    server, receiver, token = traced

    def roots() -> list[Span]:
        with receiver.lock:
            return [s for s in receiver.spans if s.name == "POST rpc" and s.parent == ""]

    time.sleep(0.5)  # the batches of earlier calls exported
    before = {s.span_id for s in roots()}
    marker = secrets.token_hex(4)
    result = _rpc(server, token, "run_code", {"language": "python", "code": f"'{marker}'"}, {"traceparent": header})
    assert result["output"] == marker
    deadline = time.monotonic() + 30
    while not (new := [s for s in roots() if s.span_id not in before]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(new) == 1, "the call with a malformed traceparent has no root server span of its own"
    assert new[0].trace_id not in header and new[0].trace_id != "0" * 32
    spans = receiver.trace(new[0].trace_id, {"guest.run"})
    assert "guest.run" in spans  # the new trace goes on down to the guest


def test_a_jupyter_request_gets_its_spans(traced: tuple[LiveServer, Receiver, str]) -> None:
    server, receiver, token = traced
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"Authorization": f"token {token}", "traceparent": f"00-{trace_id}-{caller_span}-01"}
    reply = httpx2.post(f"{server.base_url}/api/kernels", json={"name": "python3"}, headers=headers, timeout=120)
    assert reply.status_code in (200, 201), reply.text
    spans = receiver.trace(trace_id, {"POST jupyter kernels", "rpc create_session"})
    assert spans["POST jupyter kernels"].parent == caller_span, sorted(spans)
    assert spans["rpc create_session"].parent == spans["POST jupyter kernels"].span_id
    httpx2.delete(f"{server.base_url}/api/kernels/{reply.json()['id']}", headers=headers, timeout=60)


def test_off_by_default_and_route_names_hold_no_ids() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing.route_name("/e2b/sandbox/sbx-123/files") == "e2b sandbox"
    assert tracing.route_name("/azure/pools/p1/code/execute") == "azure code"
    assert tracing.route_name("/api/kernels/0f3c/channels") == "jupyter channels"
    assert tracing.route_name("/" + "../" * 2000) == "other"


@pytest.fixture(autouse=True)
def _quiet(tmp_path: Path) -> None:
    """Nothing here turns tracing on in the test process itself."""
    assert not tracing.enabled()
