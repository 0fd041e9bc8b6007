"""An answer that closes the connection reaches a client that is still sending: the server
half-closes, reads and discards what still comes, then closes (a lingering close,
wire/http_protocol.py), instead of a close that the client's next bytes turn into a reset.

The race is hit on purpose: each client waits, without reading, until the server has sent
its end of stream (or reset), and only then keeps writing, as a client that sends its
whole request before reading the answer does. Without the lingering close those writes
are answered with a reset (ConnectionResetError/BrokenPipeError) every time; with it they
are discarded and the client then reads the whole answer. The servers are real uvicorn
servers on loopback, run as `wasmrun serve` runs them (tests/liveserver.serving)."""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvicorn

from tests.liveserver import serving
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings
from wasmrun.wire.http_protocol import LINGER_BYTES, HttpProtocol

MAX_BODY = 65536
TCP_ESTABLISHED = 1  # tcpi_state in struct tcp_info (linux/tcp.h)
LIST_SKILLS = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "list_skills"}).encode()
# Padded (JSON allows trailing space) so that trickling it takes minutes: the 1 s deadline
# comes first however loaded the machine is.
TRICKLED = LIST_SKILLS + b" " * 2000


@pytest.fixture()
def app(tmp_path: Path, blob_store: FileBlobStore, executor: InProcessExecutor) -> tuple[object, Settings]:
    settings = Settings(
        data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS,), workers=1, body_timeout=1.0,
        max_body_bytes=MAX_BODY,
    )
    return create_app(assemble(settings, blobs=blob_store, executor=executor)), settings


@pytest.fixture()
def server(app: tuple[object, Settings]) -> Iterator[uvicorn.Server]:
    with serving(*app) as live:
        yield live


def head(path: bytes, length: int, extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n%sContent-Length: %d\r\n\r\n" % (path, extra, length))


def connect(server: uvicorn.Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.config.port), timeout=30)


def wait_for_the_servers_end_of_stream(conn: socket.socket) -> None:
    """Until the server has sent FIN (or a reset), reading nothing: the answer stays queued."""
    give_up = time.monotonic() + 30
    while struct.unpack("B", conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1))[0] == TCP_ESTABLISHED:
        assert time.monotonic() < give_up, "the server neither answered nor closed"
        time.sleep(0.005)


def keep_writing_then_read(conn: socket.socket, chunks: int = 16, size: int = 4096) -> bytes:
    """Write `chunks` more blocks of "request" after the server's end of stream, then read
    to the end. Without a lingering close the first write draws a reset (on loopback, before
    the send returns) and the next one fails. A burst, well inside the linger's 2 s."""
    for _ in range(chunks):
        conn.sendall(b"x" * size)
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def trickle_until_answered(conn: socket.socket, body: bytes) -> None:
    for byte in body[:-1]:  # one byte at a time, never the last one
        conn.sendall(bytes([byte]))
        if select.select([conn], [], [], 0.1)[0]:
            return
    raise AssertionError("the whole body but one byte was trickled and no answer came")


def status_and_error(answer: bytes) -> tuple[bytes, dict[str, object], bytes]:
    head_bytes, _, payload = answer.partition(b"\r\n\r\n")
    error = json.loads(payload)["error"] if payload.startswith(b"{") else {}
    return head_bytes.split(b"\r\n", 1)[0], error, head_bytes.lower()


@pytest.mark.parametrize("path", [b"/rpc", b"/mcp"])
def test_a_trickled_body_408_reaches_a_client_that_keeps_writing(server: uvicorn.Server, path: bytes) -> None:
    with connect(server) as conn:
        conn.sendall(head(path, len(TRICKLED)))
        trickle_until_answered(conn, TRICKLED)
        wait_for_the_servers_end_of_stream(conn)
        status, error, fields = status_and_error(keep_writing_then_read(conn))
    assert status.startswith(b"HTTP/1.1 408") and b"connection: close" in fields
    assert error["code"] == -32600 and "did not arrive within 1 seconds" in str(error["message"])


def test_a_declared_oversize_413_reaches_a_client_that_keeps_writing(server: uvicorn.Server) -> None:
    with connect(server) as conn:
        conn.sendall(head(b"/rpc", 10 * MAX_BODY) + b" " * 8192)  # a body is under way
        wait_for_the_servers_end_of_stream(conn)
        status, error, fields = status_and_error(keep_writing_then_read(conn))
    assert status.startswith(b"HTTP/1.1 413") and b"connection: close" in fields
    assert error["data"] == {"max_body_bytes": MAX_BODY}


def test_a_client_that_sends_all_it_declared_before_reading_reads_the_answer(server: uvicorn.Server) -> None:
    """Far past the 4 MiB a flood is granted: what the Content-Length promised is let in
    (an SDK uploading a file the quota refuses writes it all, then reads the 507)."""
    promised = 40 * 1024 * 1024
    assert promised > 4 * LINGER_BYTES
    with connect(server) as conn:
        conn.sendall(head(b"/rpc", promised))
        wait_for_the_servers_end_of_stream(conn)
        status, error, fields = status_and_error(keep_writing_then_read(conn, chunks=promised // 65536, size=65536))
    assert status.startswith(b"HTTP/1.1 413") and b"connection: close" in fields
    assert error["data"] == {"max_body_bytes": MAX_BODY}


def test_a_counted_oversize_413_reaches_a_client_that_keeps_writing(server: uvicorn.Server) -> None:
    """Chunked, so no length is declared: the server counts the body past the limit."""
    with connect(server) as conn:
        conn.sendall(head(b"/rpc", 0).replace(b"Content-Length: 0", b"Transfer-Encoding: chunked"))
        chunk = b"%x\r\n%s\r\n" % (4096, b" " * 4096)
        for _ in range(MAX_BODY // 4096 + 2):
            conn.sendall(chunk)
        wait_for_the_servers_end_of_stream(conn)
        status, error, fields = status_and_error(keep_writing_then_read(conn))
    assert status.startswith(b"HTTP/1.1 413") and b"connection: close" in fields
    assert error["data"] == {"max_body_bytes": MAX_BODY}


def test_a_malformed_request_400_reaches_a_client_that_keeps_writing(server: uvicorn.Server) -> None:
    with connect(server) as conn:
        conn.sendall(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n")
        wait_for_the_servers_end_of_stream(conn)
        status, _, fields = status_and_error(keep_writing_then_read(conn))
    assert status.startswith(b"HTTP/1.1 400") and b"connection: close" in fields


def test_a_request_asking_to_close_is_answered_and_what_follows_is_not_served(server: uvicorn.Server) -> None:
    request = head(b"/rpc", len(LIST_SKILLS), b"Connection: close\r\n") + LIST_SKILLS
    with connect(server) as conn:
        conn.sendall(request + request)  # a second request after the close asked for
        wait_for_the_servers_end_of_stream(conn)
        answer = keep_writing_then_read(conn)
    assert answer.count(b"HTTP/1.1 ") == 1 and answer.startswith(b"HTTP/1.1 200")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["id"] == 1


def writes_until_the_server_ends(conn: socket.socket, write: Callable[[], None], limit_s: float = 60.0) -> int:
    """How many writes went through before the server ended the connection."""
    give_up, writes = time.monotonic() + limit_s, 0
    try:
        while time.monotonic() < give_up:
            write()
            writes += 1
    except (ConnectionResetError, BrokenPipeError):
        return writes
    raise AssertionError("the server kept taking a client's bytes after its answer")


def test_a_client_that_trickles_forever_is_closed_after_the_time_bound(server: uvicorn.Server) -> None:
    with connect(server) as conn:
        conn.sendall(head(b"/rpc", 10 * MAX_BODY))
        wait_for_the_servers_end_of_stream(conn)

        def trickle() -> None:
            conn.sendall(b"x")
            time.sleep(0.02)

        # Taken for a while (a plain close resets the first write), then ended.
        assert writes_until_the_server_ends(conn, trickle) > 1
        assert conn.recv(65536).startswith(b"HTTP/1.1 413")  # the answer was there to read all along


class _BytesBoundOnly(HttpProtocol):
    linger_seconds = 3600.0  # so that only the byte bound can end the linger


def test_a_client_that_floods_is_closed_after_the_byte_bound(app: tuple[object, Settings]) -> None:
    with serving(*app, http=_BytesBoundOnly) as server, connect(server) as conn:
        conn.sendall(head(b"/rpc", 10 * MAX_BODY))
        wait_for_the_servers_end_of_stream(conn)
        sent = 0

        def flood() -> None:
            nonlocal sent
            sent += conn.send(b"x" * 65536)

        writes_until_the_server_ends(conn, flood)
        # What the server took, plus what the two kernels' buffers held when it stopped.
        assert LINGER_BYTES < sent < LINGER_BYTES + 64 * 1024 * 1024
        assert conn.recv(65536).startswith(b"HTTP/1.1 413")
