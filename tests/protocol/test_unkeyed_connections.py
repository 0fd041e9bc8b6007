"""Connections that present no valid key cannot hold the server (issue 42, item 6): an
answer begun before the request's body has all arrived closes the connection (401, 403, the
E2B front's 502, on every route), the head and body deadlines run whatever the app does,
and the server keeps a bounded number of unkeyed connections, closing the oldest, so that a
flood of trickling connections leaves keyed tenants served (wire/http_protocol.py,
wire/connections.py, docs/threat-model.md). Real servers on loopback, raw sockets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.liveserver import LiveServer, serving, wasmrun_env
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings
from wasmrun.tenants.store import TenantStore
from wasmrun.wire.app import create_app as create_wire_app
from wasmrun.wire.connections import open_file_share
from wasmrun.wire.http_protocol import HEAD_BYTES, LINGER_SECONDS

MB = 1_000_000
LIST_SKILLS = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "list_skills"}).encode()
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "run_code",
         "params": {"language": "python", "code": "def main(args):\n    return 41 + 1\n"}}


@pytest.fixture()
def keyed(tmp_path: Path, blob_store: FileBlobStore, executor: InProcessExecutor) -> Iterator[tuple[uvicorn.Server, str]]:
    """A server with one tenant (so a key is needed), in this process; its key."""
    data = tmp_path / "data"
    key = TenantStore(data).add("alice")
    settings = Settings(data_dir=data, skills_dirs=(BUNDLED_SKILLS,), workers=1, body_timeout=2.0,
                        header_timeout=1.0, unkeyed_connections=4)
    with serving(create_app(assemble(settings, blobs=blob_store, executor=executor)), settings) as server:
        yield server, key


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def post_head(path: bytes, length: int, extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s"
            b"Content-Length: %d\r\n\r\n" % (path, extra, length))


def trickle_and_watch(conn: socket.socket, give_up_s: float, every_s: float = 0.2) -> tuple[bytes, float | None, float]:
    """Send a byte every `every_s` while reading: (what came, seconds to the server's end
    of stream or None, seconds to the server's end of the connection, when writes fail)."""
    start, data, eof_at = time.monotonic(), b"", None
    while time.monotonic() - start < give_up_s:
        try:
            conn.sendall(b" ")
        except (ConnectionResetError, BrokenPipeError):
            return data, eof_at, time.monotonic() - start
        while eof_at is None and select.select([conn], [], [], 0)[0]:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                return data, eof_at, time.monotonic() - start
            if not chunk:
                eof_at = time.monotonic() - start
            data += chunk
        time.sleep(every_s)
    raise AssertionError(f"the connection was still open after {give_up_s} s; got {data[:300]!r}")


EARLY_ANSWERS = [
    pytest.param(b"/rpc", b"Authorization: Bearer not-a-key\r\n", b"401", id="rpc-bad-key"),
    pytest.param(b"/e2b/sandbox/execute", b"E2b-Sandbox-Id: no-such-sandbox\r\n", b"502", id="e2b-unknown-sandbox"),
    pytest.param(b"/e2b/api/sandboxes", b"", b"401", id="e2b-api-no-key"),
    pytest.param(b"/rpc", b"Origin: https://evil.example\r\n", b"403", id="rpc-foreign-origin"),
]


@pytest.mark.parametrize(("path", "extra", "status"), EARLY_ANSWERS)
def test_an_answer_before_the_body_closes_the_connection(
    keyed: tuple[uvicorn.Server, str], path: bytes, extra: bytes, status: bytes
) -> None:
    """A 1 MB body is declared and never sent, only a byte now and then (which kept the
    connection open for ever): the answer says Connection: close, the server's end of
    stream follows it, and the lingering close ends the connection within its bound."""
    server, _ = keyed
    with connect(server.config.port) as conn:
        conn.sendall(post_head(path, MB, extra))
        answer, eof_at, ended_at = trickle_and_watch(conn, give_up_s=LINGER_SECONDS + 4)
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 " + status) and b"connection: close" in head, answer[:300]
    assert eof_at is not None and eof_at < 1.0, eof_at
    assert ended_at < LINGER_SECONDS + 1.5, ended_at


def test_a_body_the_app_never_reads_is_cut_off_at_the_deadline(tmp_path: Path) -> None:
    """A route that neither reads its body nor answers for a while: the deadline ran only
    while the app read, so this trickle held the connection until the app answered."""
    async def never_reads(request: Request) -> Response:
        await asyncio.sleep(3)
        return Response(b"late")

    async def dispatch(method: str, params: object) -> object:
        return None

    app = create_wire_app(dispatch, max_body_bytes=MB, body_timeout=1.0,
                          routes=[Route("/never-reads", never_reads, methods=["POST"])])
    with serving(app, Settings(data_dir=tmp_path)) as server, connect(server.config.port) as conn:
        conn.sendall(post_head(b"/never-reads", 1000))
        answer, eof_at, _ = trickle_and_watch(conn, give_up_s=LINGER_SECONDS + 4, every_s=1.0)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        assert eof_at is not None and eof_at < 2.5
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert "did not arrive within 1 seconds" in error["message"] and error["data"] == {"body_timeout_s": 1.0}
        assert eof_at < 3.0


def test_a_trickled_head_is_answered_408_and_a_silent_connection_closed(keyed: tuple[uvicorn.Server, str]) -> None:
    server, _ = keyed
    with connect(server.config.port) as silent, connect(server.config.port) as trickling:
        trickling.sendall(b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        answer, eof_at, _ = trickle_and_watch(trickling, give_up_s=4.0)
        silent.settimeout(2.0)
        assert silent.recv(100) == b""  # closed at the same deadline, with nothing to say
    assert answer.startswith(b"HTTP/1.1 408") and b"connection: close" in answer.lower()
    assert "headers did not arrive within 1 seconds" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["message"]
    assert eof_at is not None and eof_at < 2.5


def read_to_the_end(conn: socket.socket, give_up_s: float) -> bytes:
    conn.settimeout(give_up_s)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := conn.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize("one_header", [False, True], ids=["many-headers", "one-endless-header"])
def test_a_head_over_its_bound_is_answered_431(keyed: tuple[uvicorn.Server, str], one_header: bool) -> None:
    """httptools takes a head of any size (a header it holds until the next one begins):
    one that never ended was kept, all of it."""
    server, _ = keyed
    with connect(server.config.port) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + (b"X-Pad: " if one_header else b""))
        for i in range(HEAD_BYTES // 1024 + 2):
            conn.sendall(b"a" * 1024 if one_header else b"X-Pad-%d: %s\r\n" % (i, b"a" * 1024))
            time.sleep(0.001)
        answer = read_to_the_end(conn, give_up_s=LINGER_SECONDS + 1)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:300]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["data"] == {"max_head_bytes": HEAD_BYTES}


def test_past_the_cap_the_oldest_unkeyed_connection_is_closed_not_a_keyed_one(keyed: tuple[uvicorn.Server, str]) -> None:
    """unkeyed_connections=4: a request whose key was read is out of the count while its
    body arrives; of 6 idle connections opened meanwhile the two oldest are closed."""
    server, key = keyed
    port = server.config.port
    with connect(port) as keyed_conn, contextlib.ExitStack() as stack:
        keyed_conn.sendall(post_head(b"/rpc", len(LIST_SKILLS), b"Authorization: Bearer %s\r\n" % key.encode()))
        keyed_conn.sendall(LIST_SKILLS[:10])
        time.sleep(0.2)  # its key is read: it is keyed
        idle = [stack.enter_context(connect(port)) for _ in range(6)]
        time.sleep(0.2)
        ended = select.select(idle, [], [], 0)[0]  # the server sends an idle connection nothing but its end
        keyed_conn.sendall(LIST_SKILLS[10:])
        keyed_conn.settimeout(5)
        answer = keyed_conn.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200") and b'"result"' in answer, answer[:300]
    assert [conn in ended for conn in idle] == [True, True, False, False, False, False]


# -- a flood -------------------------------------------------------------------------

SERVER_FILES = 256  # the flooded server's open-file limit: a flood of FLOOD connections passes it
UNKEYED = 128  # what open_file_share makes of the default 1024 under that limit
FLOOD = 400
TRICKLE_S = 0.5
REOPENS_PER_TICK = 50  # the flood keeps itself up, at up to 100 new connections a second


class Flood(threading.Thread):
    """FLOOD unauthenticated connections trickling a byte every TRICKLE_S: a third their
    head, a third a bad-key /rpc body, a third an unknown sandbox's body; each one the
    server ends is opened again (a bounded number per tick). Stops by itself."""

    OPENINGS = (
        b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
        post_head(b"/rpc", MB, b"Authorization: Bearer not-a-key\r\n"),
        post_head(b"/e2b/sandbox/execute", MB, b"E2b-Sandbox-Id: no-such-sandbox\r\n"),
    )

    def __init__(self, port: int, seconds: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.port, self.end = port, time.monotonic() + seconds
        self.ready, self.stop = threading.Event(), threading.Event()
        self.conns: list[socket.socket | None] = []
        self.ended = 0  # connections the server ended

    def open(self, i: int) -> socket.socket | None:
        try:
            conn = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            conn.sendall(self.OPENINGS[i % 3])
        except OSError:
            return None
        conn.setblocking(False)
        return conn

    def run(self) -> None:
        self.conns = [self.open(i) for i in range(FLOOD)]
        self.ready.set()
        while not self.stop.wait(TRICKLE_S) and time.monotonic() < self.end:
            budget = REOPENS_PER_TICK
            for i, conn in enumerate(self.conns):
                if conn is not None and self.alive(conn):
                    continue
                if conn is not None:
                    conn.close()
                    self.ended += 1
                self.conns[i] = self.open(i) if budget > 0 else None
                budget -= 1
        for conn in self.conns:
            if conn is not None:
                conn.close()

    @staticmethod
    def alive(conn: socket.socket) -> bool:
        try:
            conn.send(b"x")
            return conn.recv(65536) != b""
        except BlockingIOError:
            return True  # nothing to read: still open
        except OSError:
            return False


@pytest.fixture()
def flooded_server(tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    data = tmp_path / "data"
    key = TenantStore(data).add("alice")
    # Long deadlines: only the cap on unkeyed connections may save the keyed client here.
    env = {**wasmrun_env(), "WASMRUN_HEADER_TIMEOUT": "60", "WASMRUN_BODY_TIMEOUT": "60",
           "WASMRUN_UNKEYED_CONNECTIONS": str(UNKEYED)}
    server = LiveServer(data, env=env)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (SERVER_FILES, hard))
    try:
        yield server, key
    finally:
        server.stop()


def test_the_cap_is_at_most_half_the_open_file_limit() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert open_file_share(10**9) == (10**9 if soft == resource.RLIM_INFINITY else soft // 2)
    assert open_file_share(8) == 8


def test_a_flood_of_unkeyed_trickling_connections_leaves_keyed_tenants_served(
    flooded_server: tuple[LiveServer, str],
) -> None:
    server, key = flooded_server
    flood = Flood(server.port)
    flood.start()
    try:
        assert flood.ready.wait(30)
        time.sleep(2 * TRICKLE_S)
        headers = {"authorization": f"Bearer {key}"}
        took = []
        for _ in range(3):
            started = time.monotonic()
            health = httpx2.get(f"{server.base_url}/healthz", headers=headers, timeout=5)
            assert health.status_code == 200, health.text
            answer = httpx2.post(server.endpoint, json=HELLO, headers=headers, timeout=10)
            assert answer.status_code == 200 and answer.json()["result"]["output"] == 42, answer.text
            took.append(time.monotonic() - started)
        assert flood.is_alive() and flood.ended > 0  # the flood was on, and the server ended some of it
    finally:
        flood.stop.set()
        flood.join(30)
    print(f"keyed /healthz + run_code under the flood: {', '.join(f'{t * 1000:.0f} ms' for t in took)}")
