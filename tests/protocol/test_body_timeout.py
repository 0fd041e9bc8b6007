"""A request body that does not arrive in time is answered 408 and the connection closed,
over a real socket to a real uvicorn server run as `wasmrun serve` runs it (a test
client cannot trickle). A client that keeps writing after the 408: test_lingering_close.py."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.liveserver import serving
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings

BODY_TIMEOUT_S = 1.0


@pytest.fixture()
def server_port(tmp_path: Path, blob_store: FileBlobStore, executor: InProcessExecutor) -> Iterator[int]:
    settings = Settings(
        data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS,), workers=1, body_timeout=BODY_TIMEOUT_S
    )
    app = create_app(assemble(settings, blobs=blob_store, executor=executor))
    with serving(app, settings) as server:  # as `wasmrun serve` runs it (its HTTP protocol)
        yield server.config.port


def read_until_closed(conn: socket.socket, limit_s: float = 30.0) -> bytes:
    data = b""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the server kept the connection open; got {data!r}")


@pytest.mark.parametrize("path", ["/rpc", "/mcp"])
def test_a_trickled_body_is_answered_408_and_the_connection_closed(server_port: int, path: str) -> None:
    # Padded (JSON allows trailing space) so that trickling it takes minutes: the 1 s
    # deadline comes first however loaded the machine is.
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "list_skills"}).encode() + b" " * 1000
    with socket.create_connection(("127.0.0.1", server_port), timeout=30) as conn:
        conn.sendall(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % (path.encode(), server_port, len(body))
        )
        answered = False
        for byte in body[:-1]:  # one byte at a time, never the last one
            conn.sendall(bytes([byte]))
            if select.select([conn], [], [], 0.25)[0]:
                answered = True
                break
        assert answered, "the whole body but one byte was trickled and no answer came"
        response = read_until_closed(conn)
    head, _, payload = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    error = json.loads(payload)["error"]
    assert error["code"] == -32600
    assert "did not arrive within 1 seconds" in error["message"]


def test_a_body_sent_in_time_is_served(server_port: int) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "load_skills_protocol_guide"}).encode()
    with socket.create_connection(("127.0.0.1", server_port), timeout=30) as conn:
        conn.sendall(
            b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        response = read_until_closed(conn)
    assert response.startswith(b"HTTP/1.1 200")
    assert b'"result"' in response
