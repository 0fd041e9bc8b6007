"""Streamed runs (docs/streaming.md): `stream: true` posted with `Accept: text/event-stream`
answers as Server-Sent Events, `run/output` notifications as the guest writes, then the
response; against a real server with two tenants. No timed assertions: order only."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer, wasmrun_env
from tests.skillfiles import write_skill
from wasmrun.client import AsyncClient, Client, OutputEvent
from wasmrun.egress.secrets import Redactor
from wasmrun.protocol.types import ExecutionResult
from wasmrun.sandbox import OutputChunk, OutputStream
from wasmrun.wire.events import RunEvents

METRICS_KEY = "streaming-metrics-key"
PRINT_SLEEP_PRINT = (
    "import sys, time\n"
    "def main(args):\n"
    "    print('first')\n"
    "    print('to stderr', file=sys.stderr)\n"
    "    time.sleep(1)\n"
    "    print('second')\n"
    "    return 42\n"
)


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    from wasmrun.tenants.store import TenantStore

    data = tmp_path_factory.mktemp("data")
    skills = tmp_path_factory.mktemp("skills")
    talk = "import time\ndef main(args):\n    print('talking')\n    time.sleep(0.3)\n    return 'done'\n"
    write_skill(skills, "demo.talk", code=talk)
    store = TenantStore(data)
    keys = {"alice": store.add("alice", {"concurrent_requests": 2}), "bob": store.add("bob")}
    server = LiveServer(data, "--skills-dir", str(skills), env={**wasmrun_env(), "WASMRUN_METRICS_KEY": METRICS_KEY})
    try:
        yield server, keys
    finally:
        server.stop()


def _runs(server: LiveServer, tenant: str, status: str = "") -> float:
    """The tenant's runs so far (of that status), as /metrics counts them."""
    text = httpx2.get(server.base_url + "/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=30).text
    pattern = r'wasmrun_runs_total\{[^}]*status="' + status + r'[^"]*"[^}]*tenant="' + tenant + r'"[^}]*\} ([0-9.e+]+)'
    return sum(float(v) for v in re.findall(pattern, text))


def _wait_until(done: Callable[[], bool], give_up_s: float = 120.0) -> None:
    """Until `done()`, however loaded the machine: the bound only stops a hang."""
    give_up = time.monotonic() + give_up_s
    while not done():
        assert time.monotonic() < give_up, "gave up waiting"
        time.sleep(0.05)


def _kill_workers(server: LiveServer) -> None:
    """SIGKILL the server's worker processes, ending the runs in them (the pool replaces them)."""
    workers = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True).stdout.split()
    for pid in workers:
        os.kill(int(pid), signal.SIGKILL)


def _wait_for_both_workers(server: LiveServer) -> None:
    # the counts are the operator's on a server with tenants
    _wait_until(lambda: httpx2.get(
        server.base_url + "/healthz", headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=30,
    ).json()["workers"]["free"] == 2)


def _call(method: str, params: dict[str, Any], id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def _headers(key: str, accept: str = "text/event-stream") -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "accept": accept}


def _events(response: httpx2.Response) -> Iterator[tuple[float, dict[str, Any]]]:
    """(arrival time, JSON-RPC message) of each SSE event, as it arrives."""
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            yield time.monotonic(), json.loads("\n".join(data))
            data = []


def _stream(server: LiveServer, key: str, method: str, params: dict[str, Any]) -> list[tuple[float, dict[str, Any]]]:
    with httpx2.stream("POST", server.endpoint, json=_call(method, {**params, "stream": True}),
                       headers=_headers(key), timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(_events(response))


def _output(events: list[tuple[float, dict[str, Any]]], stream: str | None = None) -> str:
    return "".join(m["params"]["text"] for _, m in events
                   if m.get("method") == "run/output" and (stream is None or m["params"]["stream"] == stream))


def test_output_arrives_while_the_run_goes_then_the_response_last(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    started = time.monotonic()
    events = _stream(server, keys["alice"], "run_code", {"language": "python", "code": PRINT_SLEEP_PRINT})
    notifications = [m for _, m in events[:-1]]
    assert all(m["method"] == "run/output" and "id" not in m for m in notifications)
    said: list[list[str]] = []  # each stream's text in order; a watchdog tick may split one print's writes
    for m in notifications:
        if said and said[-1][0] == m["params"]["stream"]:
            said[-1][1] += m["params"]["text"]
        else:
            said.append([m["params"]["stream"], m["params"]["text"]])
    assert said == [["stdout", "first\n"], ["stderr", "to stderr\n"], ["stdout", "second\n"]]
    final_at, final = events[-1]
    assert final["id"] == 1 and final["result"]["status"] == "completed" and final["result"]["output"] == 42
    assert final["result"]["logs_preview"] == "first\nto stderr\nsecond\n"  # as without streaming
    first_at = events[0][0]
    # The run sleeps 1 s between its prints: the first arrived before it ended (no bound asserted).
    assert first_at < final_at
    print(f"first event after {first_at - started:.3f} s, response {final_at - first_at:.3f} s after it")


def test_execute_skill_streams_too(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    events = _stream(server, keys["bob"], "execute_skill", {"name": "demo.talk"})
    assert _output(events) == "talking\n" and events[-1][1]["result"]["output"] == "done"


def test_without_the_stream_flag_or_the_accept_header(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    code = {"language": "python", "code": "def main(args):\n    print('hi')\n    return 1\n"}
    plain = httpx2.post(server.endpoint, json=_call("run_code", code), headers=_headers(keys["bob"]), timeout=60)
    assert plain.headers["content-type"] == "application/json" and plain.json()["result"]["output"] == 1
    streamed = {**code, "stream": True}
    refused = httpx2.post(server.endpoint, json=_call("run_code", streamed),
                          headers=_headers(keys["bob"], "application/json"), timeout=60).json()
    assert refused["error"]["code"] == -32602 and refused["error"]["data"]["field"] == "stream"
    batch = [_call("run_code", streamed, 1), _call("run_code", code, 2)]
    answers = httpx2.post(server.endpoint, json=batch, headers=_headers(keys["bob"]), timeout=60).json()
    assert answers[0]["error"]["data"]["field"] == "stream" and answers[1]["result"]["output"] == 1
    for bad in ("yes", 1, [True]):
        wrong = httpx2.post(server.endpoint, json=_call("run_code", {**code, "stream": bad}),
                            headers=_headers(keys["bob"]), timeout=60)
        assert wrong.json()["error"]["code"] == -32602 and "stream" in wrong.json()["error"]["message"]


def test_errors_before_the_run_are_the_last_and_only_event(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    events = _stream(server, keys["bob"], "run_code", {"language": "python", "code": "x", "mount_skills": ["no.such"]})
    assert len(events) == 1 and "result" not in events[0][1]
    error = events[0][1]["error"]
    assert error["code"] == -32602 and "no.such" in error["message"] and error["data"]["field"].startswith("mount_skills")
    # An error in the run is no error before it: its output streamed, then the failed run's
    # result, the exception's type and line in it, as the last event.
    code = "def main(a):\n    print('before')\n    1/0\n"
    events = _stream(server, keys["bob"], "run_code", {"language": "python", "code": code})
    assert [m.get("method") for _, m in events[:-1]] == ["run/output"] and _output(events, "stdout") == "before\n"
    result = events[-1][1]["result"]
    assert result["status"] == "failed" and result["error"]["type"] == "ZeroDivisionError"
    assert "line 3" in result["error"]["message"]


def test_output_cap_holds_for_the_stream(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    code = "def main(args):\n    for i in range(100000):\n        print('x' * 99)\n    return 'ok'\n"
    events = _stream(server, keys["bob"], "run_code",
                     {"language": "python", "code": code, "limits": {"output_bytes": 20000}})
    streamed = [m["params"] for _, m in events[:-1]]
    assert sum(len(p["text"].encode()) for p in streamed if not p.get("truncated")) == 20000
    assert streamed[-1]["truncated"] is True and "20000 bytes" in streamed[-1]["text"]
    result = events[-1][1]["result"]
    assert result["status"] == "completed" and "bytes of logs cut" in result["logs_preview"]


def test_bytes_are_decoded_across_writes(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    """A character split across writes (and a sleep, so across events) arrives whole;
    invalid UTF-8 is U+FFFD; \\r, NUL and a lone surrogate pass as JSON escapes."""
    server, keys = tenants
    code = (
        "import os, sys, time\n"
        "def main(args):\n"
        "    snake = 'é🐍'.encode()\n"
        "    os.write(1, snake[:3]); time.sleep(0.1); os.write(1, snake[3:])\n"
        "    sys.stdout.buffer.write(b'[\\xff\\xc3]'); sys.stdout.flush()\n"
        "    print('a\\rb\\x00c', '\\udc80')\n"
        "    os.write(2, snake[:1]); time.sleep(0.1); os.write(2, snake[1:])\n"
    )
    events = _stream(server, keys["bob"], "run_code", {"language": "python", "code": code})
    assert _output(events, "stdout") == "é🐍[\ufffd\ufffd]a\rb\x00c \\udc80\n"
    assert _output(events, "stderr") == "é🐍"
    assert events[-1][1]["result"]["status"] == "completed"


def test_a_client_that_leaves_does_not_stop_the_run(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    before = _runs(server, "alice")
    with httpx2.stream("POST", server.endpoint, json=_call("run_code", {"language": "python", "code": PRINT_SLEEP_PRINT,
                       "stream": True}), headers=_headers(keys["alice"]), timeout=60) as response:
        first = next(_events(response))[1]
        assert first["params"]["text"] == "first\n"
    # Gone mid-run; the run finishes and is counted, and alice's request slot comes back.
    _wait_until(lambda: _runs(server, "alice") > before)
    assert _runs(server, "alice") == before + 1
    assert httpx2.get(server.base_url + "/healthz", timeout=30).status_code == 200
    events = _stream(server, keys["alice"], "run_code", {"language": "python", "code": "def main(a):\n    print(1)\n"})
    assert _output(events) == "1\n"


def test_a_reader_that_stalls_does_not_stall_the_run(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    """A client that reads nothing until the run has ended: the run ends anyway, and
    what it then reads ends with the response (output past what the server and the
    kernel buffer for it is dropped with a marker: see the RunEvents test below)."""
    server, keys = tenants
    code = "def main(args):\n    for i in range(40):\n        print(str(i) * 50000)\n    return 'fast'\n"
    body = json.dumps(_call("run_code", {"language": "python", "code": code, "stream": True,
                                         "limits": {"output_bytes": 1_000_000}})).encode()
    before = _runs(server, "bob", "completed")
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.sendall(
            b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
            + f"Authorization: Bearer {keys['bob']}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
        # Not reading: the run still completes (the metrics count it), then read it all.
        _wait_until(lambda: _runs(server, "bob", "completed") > before)
        assert _runs(server, "bob", "completed") == before + 1
        received = bytearray()
        sock.settimeout(30)
        while not received.endswith(b"\r\n0\r\n\r\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            received += chunk
    finally:
        sock.close()
    messages = [json.loads(line[6:]) for line in received.decode().splitlines() if line.startswith("data: ")]
    assert messages[-1]["result"]["output"] == "fast"
    outputs = [m["params"] for m in messages[:-1]]
    dropped = sum(p.get("dropped", 0) for p in outputs)
    streamed = sum(len(p["text"]) for p in outputs if not p.get("dropped") and not p.get("truncated"))
    assert streamed + dropped == 1_000_000 and outputs[-1]["truncated"] is True or outputs[-1].get("dropped")


def test_the_buffer_to_a_slow_client_is_bounded() -> None:
    """What the server keeps for a client that does not read: at most its limit, then
    a count of what was dropped, said once the client caught up, before the response."""
    import asyncio

    async def fill() -> list[bytes]:
        events = RunEvents(limit=1000)
        for i in range(50):
            events.put([OutputChunk("stdout", f"line {i}\n" * 10)])
        events.finish(b'{"jsonrpc":"2.0","id":1,"result":{}}')
        got = []
        while (event := await events.next(1.0)) is not None:
            got.append(event)
        return got

    got = asyncio.run(fill())
    assert sum(map(len, got[:-2])) <= 1000
    marker = json.loads(got[-2][6:])["params"]
    kept = "".join(json.loads(e[6:])["params"]["text"] for e in got[:-2])
    assert marker["stream"] == "log" and len(kept) + marker["dropped"] == sum(len(f"line {i}\n" * 10) for i in range(50))
    assert json.loads(got[-1][6:])["id"] == 1


def test_streams_count_against_the_tenants_requests_in_flight(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    """alice may have 2 requests in flight: two open streams take both (the second may
    wait for her share of the sandboxes, in flight all the same), a third is 429, bob is
    served meanwhile. The runs would sleep 10 minutes, so they are still in flight however
    slow the machine; the test ends them by killing the workers."""
    server, keys = tenants
    slow = {"language": "python", "code": "import time\ndef main(a):\n    print('up')\n    time.sleep(600)\n",
            "stream": True, "limits": {"timeout_ms": 600_000}}
    with httpx2.Client(timeout=60) as http:
        opened = []
        try:
            for _ in range(2):
                response = http.send(http.build_request("POST", server.endpoint, json=_call("run_code", slow),
                                                        headers=_headers(keys["alice"])), stream=True)
                opened.append((response, _events(response)))
                assert response.status_code == 200  # the stream's headers come at once
            assert next(opened[0][1])[1]["params"]["text"] == "up\n"
            third = http.post(server.endpoint, json=_call("run_code", slow), headers=_headers(keys["alice"]))
            assert third.status_code == 429 and third.json()["error"]["data"]["limit"] == "concurrent_requests"
            assert _output(_stream(server, keys["bob"], "run_code", {"language": "python", "code": "print(2)"})) == "2\n"
        finally:  # end the runs: the second may start only once the first has ended
            for response, events in opened:
                _kill_workers(server)
                for _, message in events:
                    if message.get("method") == "run/output":  # it has just started: end it too
                        _kill_workers(server)
                response.close()
            _wait_for_both_workers(server)


def test_typed_client_iterates_events_then_the_result(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    with Client(server.base_url, api_key=keys["bob"]) as client:
        events = list(client.run_code_stream(PRINT_SLEEP_PRINT))
        assert [e.text for e in events if isinstance(e, OutputEvent)] == ["first\n", "to stderr\n", "second\n"]
        assert isinstance(events[-1], ExecutionResult) and events[-1].output == 42
        skill = list(client.execute_skill_stream("demo.talk"))
        assert isinstance(skill[0], OutputEvent) and skill[0].stream == "stdout" and isinstance(skill[-1], ExecutionResult)
        plain = client.run_code("def main(a):\n    return 3\n")  # no `stream` member sent
        assert plain.output == 3

    async def run_async() -> list[OutputEvent | ExecutionResult]:
        async with AsyncClient(server.base_url, api_key=keys["bob"]) as client:
            return [event async for event in client.run_code_stream("print('async')")]

    import asyncio

    got = asyncio.run(run_async())
    assert isinstance(got[0], OutputEvent) and got[0].text == "async\n" and isinstance(got[-1], ExecutionResult)


def test_secrets_are_redacted_even_split_across_batches() -> None:
    sent: list[OutputChunk] = []
    stream = OutputStream(sent.extend, 1 << 20, Redactor({"TOKEN": "s3cr3t-value"}))
    stream.write("stdout", b"key=s3cr")
    stream.flush()
    stream.write("stdout", b"3t-value; next s3")
    stream.flush()
    stream.finish()
    text = "".join(chunk.text for chunk in sent)
    assert "s3cr3t" not in text and text.startswith("key=") and text.endswith("; next s3")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_mcp_tool_calls_send_progress_and_log_notifications_when_asked(
    tenants: tuple[LiveServer, dict[str, str]], mode: str
) -> None:
    """With the official MCP SDK's client: a progress callback gets the run's output as
    `notifications/progress` before the result; a log level (2026-07-28+ sessions) gets
    `notifications/message`; a call that asks for neither gets none."""
    import asyncio

    from mcp import Client as MCPClient
    from mcp.client.streamable_http import streamable_http_client

    server, keys = tenants
    url = server.base_url + "/mcp"

    async def session(log_level: str | None) -> tuple[list[str], list[Any], Any, Any]:
        progress: list[str] = []
        logs: list[Any] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        async def on_log(params: Any) -> None:
            logs.append(params.data)

        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {keys['bob']}"}, timeout=60) as http:
            client = MCPClient(streamable_http_client(url, http_client=http), mode=mode,  # type: ignore[arg-type]
                               logging_callback=on_log, log_level=log_level)  # type: ignore[arg-type]
            async with client as mcp:
                streamed = await mcp.call_tool("run_code", {"language": "python", "code": PRINT_SLEEP_PRINT},
                                               progress_callback=on_progress)
                done_at = len(progress)
                quiet = await mcp.call_tool("run_code", {"language": "python", "code": "print('quiet')"})
                assert len(progress) == done_at
                return progress, logs, streamed, quiet

    progress, logs, streamed, quiet = asyncio.run(session(None))
    assert "".join(progress) == "first\nto stderr\nsecond\n"
    assert streamed.structured_content["output"] == 42 and quiet.structured_content["status"] == "completed"
    assert logs == []
    if mode == "auto":
        progress, logs, _, _ = asyncio.run(session("info"))
        assert [(d["stream"], d["text"]) for d in logs][:3] == [
            ("stdout", "first\n"), ("stderr", "to stderr\n"), ("stdout", "second\n")
        ]


@pytest.mark.parametrize(("code", "limits", "error"), [
    ("def main(a):\n    print('before')\n    while True:\n        pass\n", {"timeout_ms": 1000}, "Timeout"),
    ("def main(a):\n    print('before')\n    x = [bytearray(1 << 20) for _ in range(10000)]\n", {"memory_mb": 64}, "Memory"),
])
def test_output_before_a_limit_stops_the_run_is_streamed(
    tenants: tuple[LiveServer, dict[str, str]], code: str, limits: dict[str, int], error: str
) -> None:
    server, keys = tenants
    events = _stream(server, keys["bob"], "run_code", {"language": "python", "code": code, "limits": limits})
    assert _output(events, "stdout") == "before\n"
    result = events[-1][1]["result"]
    assert result["status"] == "failed" and error in result["error"]["type"]


def test_a_worker_killed_mid_stream_ends_it_with_the_lost_run(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    code = "import time\ndef main(a):\n    print('started', flush=True)\n    time.sleep(30)\n"
    call = _call("run_code", {"language": "python", "code": code, "stream": True})
    with httpx2.stream("POST", server.endpoint, json=call, headers=_headers(keys["bob"]), timeout=60) as response:
        events = _events(response)
        assert next(events)[1]["params"]["text"] == "started\n"
        _kill_workers(server)  # the run's worker is one of them
        rest = [m for _, m in events]
    assert rest[-1]["result"]["status"] == "failed" and rest[-1]["result"]["error"]["type"] == "WorkerCrashed"
    _wait_for_both_workers(server)  # replaced: the server serves streams again
    again = _stream(server, keys["bob"], "run_code", {"language": "python", "code": "print('back')"})
    assert _output(again) == "back\n"


def test_hostile_bodies_asking_to_stream_get_the_usual_errors(tenants: tuple[LiveServer, dict[str, str]]) -> None:
    server, keys = tenants
    deep = '{"jsonrpc":"2.0","id":1,"method":"run_code","params":{"stream":true,"args":' + "[" * 100_000 + "]" * 100_000 + "}}"
    for body in (deep.encode(), b'{"jsonrpc":"2.0","id":1,"method":"run_code","params":{"stream":true,"code":"\xff"}}'):
        answer = httpx2.post(server.endpoint, content=body, headers={**_headers(keys["bob"]), "content-type": "application/json"},
                             timeout=60)
        assert answer.headers["content-type"] == "application/json", answer.text[:200]
        assert answer.json()["error"]["code"] in (-32700, -32600, -32602)
    # Members named twice: the stream's one event is the usual error.
    twice = b'{"jsonrpc":"2.0","id":1,"method":"run_code","params":{"stream":false,"x":1,"stream":true}}'
    with httpx2.stream("POST", server.endpoint, content=twice, timeout=60,
                       headers={**_headers(keys["bob"]), "content-type": "application/json"}) as response:
        only = [m for _, m in _events(response)]
    assert len(only) == 1 and only[0]["error"]["code"] == -32600 and "params.stream" in only[0]["error"]["message"]
    # A notification that streams: its output, then the stream ends (a notification has no response).
    note = {"jsonrpc": "2.0", "method": "run_code", "params": {"language": "python", "code": "print('n')", "stream": True}}
    with httpx2.stream("POST", server.endpoint, json=note, headers=_headers(keys["bob"]), timeout=60) as response:
        messages = [m for _, m in _events(response)]
    assert [m.get("method") for m in messages] == ["run/output"] and "id" not in messages[0]
