"""A local HTTP/HTTPS server for the network tests: 127.0.0.1 only, port 0.

Every request it receives is recorded (`server.seen`), so a test can show
what did, and did not, reach the wire.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalServer:
    url: str  # e.g. http://127.0.0.1:PORT
    port: int
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends /slow early
    api_key: str = ""  # the fake leads API wants "Authorization: Bearer <api_key>"
    leads: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0  # connections accepted

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]


def _handler(server: LocalServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in separate writes: without this, Nagle's
            # algorithm and the client's delayed ACK add 40 ms to every kept-alive reply.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server.connections += 1

        def _reply(self, status: int, body: bytes, ctype: str = "application/json", extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            server.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            route = parts.path
            if route == "/json":
                self._reply(200, json.dumps({"hello": "world", "method": self.command}).encode())
            elif route == "/echo":
                payload = {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers.items()),
                    "body": body.decode("utf-8", "replace"),
                }
                self._reply(200, json.dumps(payload).encode())
            elif route == "/redirect":
                self._reply(int(query.get("status", "302")), b"", extra={"Location": query["to"]})
            elif route == "/loop":
                self._reply(302, b"", extra={"Location": "/loop"})
            elif route == "/big":
                self._reply(200, b"x" * int(query["n"]), "application/octet-stream")
            elif route == "/slow":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.write(b"a")
                self.wfile.flush()
                server.release.wait(60)
            elif route == "/services/data/v59.0/sobjects/Lead":  # a fake of Salesforce's REST API
                if self.headers.get("Authorization") != f"Bearer {server.api_key}" or not server.api_key:
                    self._reply(401, b'[{"errorCode": "INVALID_SESSION_ID"}]')
                    return
                lead = json.loads(body)
                server.leads.append(lead)
                lead_id = f"00Q{len(server.leads):015d}"
                self._reply(201, json.dumps({"id": lead_id, "success": True, "errors": []}).encode())
            elif route == "/drop":  # answers as if keeping the connection, then closes it
                self._reply(200, b'{"dropped": true}')
                self.close_connection = True
            elif route == "/status":
                self._reply(int(query["code"]), b'{"error": "nope"}')
            else:
                self._reply(404, b'{"error": "not found"}')

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    return Handler


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


@contextmanager
def serve(tls: ssl.SSLContext | None = None, host_name: str = "127.0.0.1") -> Iterator[LocalServer]:
    """A server on 127.0.0.1 (on ::1 when `host_name` is "[::1]")."""
    if host_name == "[::1]":
        httpd: ThreadingHTTPServer = _Server6(("::1", 0), BaseHTTPRequestHandler)
    else:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    httpd.daemon_threads = True
    port = httpd.server_address[1]
    scheme = "https" if tls is not None else "http"
    server = LocalServer(f"{scheme}://{host_name}:{port}", port)
    httpd.RequestHandlerClass = _handler(server)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
