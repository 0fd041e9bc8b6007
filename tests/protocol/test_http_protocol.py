"""`wasmrun serve` answers over its own HTTP protocol (wire/http_protocol.py: one write per
sized response) exactly as HTTP/1.1 wants: pipelined requests answered in order on one
keep-alive connection, HEAD answered without a body, 204 and 413 and a real run's result."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.liveserver import LiveServer, wasmrun_env

HELLO = "def main(args):\n    print('hi')\n    return 41 + 1\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {**wasmrun_env(), "WASMRUN_MAX_BODY_BYTES": "65536"}
    live = LiveServer(Path(tmp_path_factory.mktemp("data")), env=env)
    try:
        yield live
    finally:
        live.stop()


def post(body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def read_answers(sock: socket.socket, count: int, heads: tuple[bool, ...] = ()) -> list[tuple[bytes, bytes]]:
    """`count` HTTP answers as (head, body); an answer to HEAD (heads[i]) has no body."""
    buffer, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
        size = 0 if (heads[len(answers)] if len(answers) < len(heads) else False) else int(
            fields.get(b"content-length", b"0"))
        while len(buffer) < size:
            buffer += sock.recv(65536)
        answers.append((head, buffer[:size]))
        buffer = buffer[size:]
    assert buffer == b""
    return answers


def call(method: str, params: object, id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


def test_pipelined_requests_are_answered_in_order_on_one_connection(server: LiveServer) -> None:
    requests = [
        post(call("run_code", {"language": "python", "code": HELLO}, 1)),
        post(b'{"jsonrpc":"2.0","method":"list_skills"}'),  # a notification: 204, no body
        b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        post(call("list_skills", {}, 2)),
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(b"".join(requests))
        (run_head, run), (empty_head, empty), (head_head, _), (list_head, listed) = read_answers(
            sock, 4, heads=(False, False, True, False))
        assert run_head.startswith(b"HTTP/1.1 200") and b"content-type: application/json" in run_head
        result = json.loads(run)["result"]
        assert json.loads(run)["id"] == 1 and result["status"] == "completed" and result["output"] == 42
        assert empty_head.startswith(b"HTTP/1.1 204") and empty == b""
        assert head_head.startswith(b"HTTP/1.1 200") and b"content-length" in head_head
        assert list_head.startswith(b"HTTP/1.1 200") and json.loads(listed)["id"] == 2
        # The connection is still good for more.
        sock.sendall(post(call("list_skills", {}, 3)))
        [(again_head, again)] = read_answers(sock, 1)
        assert again_head.startswith(b"HTTP/1.1 200") and json.loads(again)["id"] == 3


def test_refusals_are_whole_answers(server: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(post(b" " * 70000))  # over --max-body-bytes
        [(head, body)] = read_answers(sock, 1)
        assert head.startswith(b"HTTP/1.1 413")
        assert json.loads(body)["error"]["data"]["max_body_bytes"] == 65536
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(post(call("list_skills", {}, 1), b"Origin: https://evil.example\r\n"))
        [(head, body)] = read_answers(sock, 1)
        assert head.startswith(b"HTTP/1.1 403") and "Origin" in json.loads(body)["error"]["message"]
