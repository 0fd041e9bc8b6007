"""The host-side HTTP(S) client a run's requests go through.

One `EgressSession` per run. Each request:
1. is checked against the run's `NetworkGrant` (manifest ∩ operator), and
   so is every redirect hop, which is followed here, not by the library;
2. gets its secret placeholders replaced (headers, URL query) only then;
3. has its host name resolved here, and each address classified
   (addresses.py): the connection goes to an address that passed, with the
   original name for TLS (SNI and certificate check) and the Host header,
   so a name that resolves differently later (DNS rebinding) changes nothing;
4. is bounded: request and response bytes, requests per run, and time,
   which ends at the run's deadline (a watchdog shuts the socket down).

urllib3 does the HTTP and TLS work (certificates verified, hostname matched).
"""

from __future__ import annotations

import concurrent.futures
import functools
import http.client
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import msgspec
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.util.ssl_match_hostname import CertificateError

from wasmrun import tracing
from wasmrun.abi import NETWORK_ERROR, NETWORK_LIMIT, NETWORK_NOT_ALLOWED, HttpRequestMeta, http_reply_frame
from wasmrun.egress import addresses
from wasmrun.egress.patterns import Target, UrlError, parse_url
from wasmrun.egress.policy import NetworkGrant
from wasmrun.egress.secrets import (
    PREFIX,
    BodyTooLarge,
    Redactor,
    UnknownSecret,
    has_placeholder,
    substitute,
    substitute_body,
    substitute_header,
)

# The guest's error types and request shape: the contract's (wasmrun/abi.py).
NOT_ALLOWED = NETWORK_NOT_ALLOWED
LIMIT = NETWORK_LIMIT
FAILED = NETWORK_ERROR
GuestRequest = HttpRequestMeta

MAX_META_BYTES = 256 * 1024
MAX_IDLE = 4  # connections a run keeps open for its next requests to the same address
MAX_ADDRESSES = 4  # tried in turn when a connection is refused (e.g. ::1 before 127.0.0.1)
MAX_HEADERS = 100
MAX_HEADER_BYTES = 64 * 1024
DEFAULT_TIMEOUT_S = 30.0
CHUNK = 64 * 1024
REDIRECTS = {301, 302, 303, 307, 308}
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Framing and routing are the host's: a guest-set Host could reach another
# virtual host behind an allowed address.
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
_CROSS_ORIGIN_DROPPED = {"authorization", "cookie", "proxy-authorization"}
_resolver = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="wasmrun-dns")


class _Stale(Exception):
    """A kept connection the server had closed: the request was not answered."""


_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class RunDeadline(Exception):
    """The run's own time limit passed during a request: the run must stop."""


class Refused(Exception):
    """A request that ends with an error the guest sees (type and message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


_request_decoder = msgspec.json.Decoder(GuestRequest)


@dataclass
class Usage:
    requests: int = 0
    bytes_out: int = 0
    bytes_in: int = 0


@dataclass
class Reply:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    url: str


@dataclass
class EgressSession:
    """One run's network: its grant, its counters, and the reply being handed over."""

    grant: NetworkGrant | None
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        secrets = self.grant.host_secrets if self.grant is not None else {}
        self._redact = Redactor(secrets)
        # Kept-alive connections, by (scheme, host, port, address): a request reuses
        # one only to an address its own resolution and check just allowed.
        self._idle: dict[tuple[str, str, int, str], HTTPConnection] = {}

    # -- the host call -----------------------------------------------------------

    def handle(self, meta: bytes, body: bytes, deadline: float) -> bytes:
        """The reply for the guest: 4-byte head length, JSON head, body.
        Raises RunDeadline when the run's time is up."""
        try:
            reply = self.request(self._decode(meta), body, deadline)
        except Refused as refused:
            return http_reply_frame({"error": refused.kind, "message": self._redact.text(refused.message)}, b"")
        head: dict[str, Any] = {
            "status": reply.status,
            "reason": self._redact.text(reply.reason),
            "headers": [[self._redact.text(k), self._redact.text(v)] for k, v in reply.headers],
            "url": self._redact.text(reply.url),
        }
        return http_reply_frame(head, self._redact.data(reply.body))

    def _decode(self, meta: bytes) -> GuestRequest:
        if len(meta) > MAX_META_BYTES:
            raise Refused(LIMIT, f"the request's URL and headers are larger than {MAX_META_BYTES} bytes")
        try:
            return _request_decoder.decode(meta)
        except msgspec.DecodeError as exc:
            raise Refused(FAILED, f"malformed request: {exc}") from None

    # -- one request, redirects included ---------------------------------------------

    def request(self, req: GuestRequest, body: bytes, deadline: float) -> Reply:
        grant = self.grant
        if grant is None:
            raise Refused(NOT_ALLOWED, self._no_network_message(req.url))
        method = req.method.upper()
        if not _TOKEN.fullmatch(method) or len(method) > 20 or method == "CONNECT":
            raise Refused(FAILED, f"{req.method[:40]!r} is not an HTTP method that can be sent")
        headers = _checked_headers(req.headers)
        if len(body) > grant.max_request_bytes:
            raise Refused(LIMIT, f"the request body is larger than this run's limit of {grant.max_request_bytes} bytes")
        stop = deadline
        if req.timeout is not None:
            stop = min(deadline, time.monotonic() + max(0.001, req.timeout))
        url = req.url
        send_body: bytes | None = body if req.has_body or body else None
        origin: str | None = None
        for hop in range(grant.max_redirects + 1):
            target = self._allowed(url, hop)
            if origin is not None and target.origin != origin:
                # Credentials are for the origin they were written for.
                headers = [(k, v) for k, v in headers if k.lower() not in _CROSS_ORIGIN_DROPPED and PREFIX not in v]
                if send_body is not None and has_placeholder(send_body):
                    # A 307/308 sends the body again: a secret in it stays with its origin.
                    raise Refused(NOT_ALLOWED, f"redirect to {target.host_header}: the request body holds a"
                                  " secret placeholder, which is only sent to the origin it was written for")
            origin = target.origin
            reply = self._send(target, method, headers, send_body, stop, deadline)
            location = dict((k.lower(), v) for k, v in reply.headers).get("location")
            if not req.follow_redirects or reply.status not in REDIRECTS or location is None:
                return reply
            url = urljoin(target.url, location)
            if reply.status == 303 or (reply.status in (301, 302) and method == "POST"):
                method, send_body = ("GET" if method != "HEAD" else "HEAD"), None
                headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        raise Refused(LIMIT, f"more than {grant.max_redirects} redirects")

    def _no_network_message(self, url: str) -> str:
        try:
            where = parse_url(url).host_header
        except UrlError:
            where = "this URL"
        return f"{where}: this run has no network access (nothing is both requested by the skill and granted by the operator)"

    def _allowed(self, url: str, hop: int) -> Target:
        assert self.grant is not None
        try:
            target = parse_url(url)
        except UrlError as exc:
            raise Refused(NOT_ALLOWED if hop else FAILED, f"{'redirect: ' if hop else ''}{exc}") from None
        why = self.grant.refusal(target)
        if why is not None:
            raise Refused(NOT_ALLOWED, f"redirect to {why}" if hop else why)
        return target

    def _connect_addresses(self, target: Target, stop: float, deadline: float) -> list[str]:
        """The addresses to try, in order: resolved here and each checked; the
        connection only ever goes to one of these, never to the guest's say."""
        assert self.grant is not None
        literal = addresses.parse(target.host)
        if literal is not None:
            candidates = [str(literal)]
        else:
            future = _resolver.submit(socket.getaddrinfo, target.host, target.port, 0, socket.SOCK_STREAM)
            try:
                infos = future.result(timeout=max(0.0, min(stop, deadline) - time.monotonic()))
            except concurrent.futures.TimeoutError:
                self._out_of_time(stop, deadline, target)
                raise Refused(FAILED, f"resolving {target.host} timed out") from None
            except OSError as exc:
                raise Refused(FAILED, f"cannot resolve {target.host}: {exc.strerror or exc}") from None
            candidates = list(dict.fromkeys(str(info[4][0]) for info in infos))
        reasons = []
        allowed = []
        for address in candidates:
            refused = addresses.refused_class(address, allow_private=self.grant.allow_private)
            if refused is None:
                allowed.append(address.split("%", 1)[0])
            else:
                reasons.append(f"{address} is {refused}")
        if allowed:
            return allowed[:MAX_ADDRESSES]
        what = "" if literal is not None else f"{target.host} resolves to an address that may not be reached: "
        raise Refused(
            NOT_ALLOWED,
            f"{what}{'; '.join(reasons)}:"
            " loopback, private, link-local and metadata addresses are refused",
        )

    def _out_of_time(self, stop: float, deadline: float, target: Target) -> None:
        now = time.monotonic()
        if now >= deadline:
            raise RunDeadline()
        if now >= stop:
            raise Refused(FAILED, f"the request to {target.host_header} timed out")

    def _send(
        self, target: Target, method: str, headers: list[tuple[str, str]], body: bytes | None,
        stop: float, deadline: float,
    ) -> Reply:
        grant = self.grant
        assert grant is not None
        if self.usage.requests >= grant.max_requests:
            raise Refused(LIMIT, f"this run may make at most {grant.max_requests} requests")
        try:
            wire_headers = [(k, substitute_header(v, grant.host_secrets)) for k, v in headers]
            if sum(len(k) + len(v) for k, v in wire_headers) > MAX_HEADER_BYTES:
                raise Refused(LIMIT, f"the request's headers with their secrets put in are larger than"
                              f" {MAX_HEADER_BYTES} bytes")
            if any(c in v for _, v in wire_headers for c in "\r\n\0"):
                raise Refused(FAILED, "a secret's value cannot be sent in a header (it contains a line break)")
            wire_target = target.path + ("?" + substitute(target.query, grant.host_secrets, url_query=True)
                                         if target.query else "")
            content_type = next((v for k, v in headers if k.lower() == "content-type"), None)
            # The limit is on what goes out: values may be longer than their placeholders.
            wire_body = self._body_with_secrets(body, content_type) if body is not None else None
        except BodyTooLarge:
            raise Refused(LIMIT, "the request body with its secrets put in is larger than this run's"
                          f" limit of {grant.max_request_bytes} bytes") from None
        except UnknownSecret as exc:
            raise Refused(NOT_ALLOWED, f"secret {exc.name} is not granted to {grant.subject} in host mode") from None
        candidates = self._connect_addresses(target, stop, deadline)
        self.usage.requests += 1
        out_headers = {"Host": target.host_header}
        for k, v in wire_headers:
            out_headers[k] = f"{out_headers[k]}, {v}" if k in out_headers else v
        if tracing.enabled() and not any(k.lower() == "traceparent" for k in out_headers):
            tracing.inject(out_headers)  # the host called joins the run's trace (a run's own traceparent wins)
        exchange = (target, method, wire_target, out_headers, wire_body, stop, deadline)
        conn = self._idle_connection(target, candidates)
        if conn is not None:
            try:
                return self._exchange(conn, *exchange, reused=True)
            except _Stale:
                # The server closed the kept connection before answering (nothing of a
                # reply came back): the request goes once more, on a new connection.
                pass
        return self._exchange(self._connect(target, candidates, stop, deadline), *exchange, reused=False)

    def _body_with_secrets(self, body: bytes, content_type: str | None) -> bytes:
        """The body with the placeholders of the secrets the operator lets into bodies put in."""
        grant = self.grant
        assert grant is not None
        in_bodies = {name: grant.host_secrets[name] for name in grant.body_secrets if name in grant.host_secrets}
        try:
            return substitute_body(body, content_type, in_bodies, grant.max_request_bytes)
        except UnknownSecret as exc:
            if exc.name not in grant.host_secrets:
                raise
            raise Refused(NOT_ALLOWED, f"secret {exc.name} may be sent in headers and the URL query but not in a"
                          " request body: the operator lists the secrets allowed in bodies in the policy's"
                          " [secrets] in_bodies") from None

    def _idle_connection(self, target: Target, candidates: list[str]) -> HTTPConnection | None:
        """A connection this run kept open to one of the addresses just checked."""
        for address in candidates:
            conn = self._idle.pop((target.scheme, target.host, target.port, address), None)
            if conn is not None:
                return conn
        return None

    def _exchange(
        self, conn: HTTPConnection, target: Target, method: str, wire_target: str, headers: dict[str, str],
        body: bytes | None, stop: float, deadline: float, *, reused: bool,
    ) -> Reply:
        grant = self.grant
        assert grant is not None
        remaining = max(0.001, min(stop, deadline) - time.monotonic())
        conn.timeout = remaining
        # Bounds the whole exchange, not each socket call: at the end the socket
        # is shut down, and whatever blocks on it returns.
        fired = threading.Event()
        watchdog = threading.Timer(remaining, _shutdown, (conn, fired))
        watchdog.daemon = True
        keep = False
        got_response = False
        try:
            watchdog.start()
            conn.request(method, wire_target, body=body, headers=headers, preload_content=False, decode_content=False)
            self.usage.bytes_out += len(body or b"") + len(wire_target) + sum(len(k) + len(v) for k, v in headers.items())
            response = conn.getresponse()
            got_response = True
            data = self._read_body(response, grant.max_response_bytes, target, stop, deadline)
            if fired.is_set():  # cut short by the watchdog: what was read is not the reply
                self._out_of_time(stop, deadline, target)
                raise Refused(FAILED, f"the request to {target.host_header} timed out")
            reply_headers = [(str(k), str(v)) for k, v in response.headers.items()]
            self.usage.bytes_in += len(data) + sum(len(k) + len(v) for k, v in reply_headers)
            keep = _reusable(response, method)
            return Reply(response.status, str(response.reason or ""), reply_headers, data, target.url)
        except (Urllib3Error, OSError, ValueError, http.client.HTTPException) as exc:
            self._out_of_time(stop, deadline, target)
            if reused and not got_response and not fired.is_set() and isinstance(exc, _STALE_ERRORS):
                raise _Stale() from None
            raise Refused(FAILED, _describe(exc, target)) from None
        finally:
            watchdog.cancel()
            key = (target.scheme, target.host, target.port, str(conn.host))
            if keep and not fired.is_set() and len(self._idle) < MAX_IDLE and key not in self._idle:
                self._idle[key] = conn
            else:
                conn.close()

    def close(self) -> None:
        """Close the connections kept for the run (at its end)."""
        while self._idle:
            _, conn = self._idle.popitem()
            conn.close()

    def _connect(self, target: Target, candidates: list[str], stop: float, deadline: float) -> HTTPConnection:
        error: BaseException | None = None
        for address in candidates:
            remaining = min(stop, deadline) - time.monotonic()
            if remaining <= 0:
                break
            conn = self._connection(target, address, remaining)
            try:
                conn.connect()
                return conn
            except (Urllib3Error, OSError, ValueError) as exc:
                conn.close()
                error = exc
                if isinstance(exc, ssl.SSLError):
                    break  # the server answered: another address would not change its certificate
        self._out_of_time(stop, deadline, target)
        raise Refused(FAILED, _describe(error or TimeoutError(), target))

    def _read_body(self, response: urllib3.HTTPResponse, limit: int, target: Target, stop: float,
                   deadline: float) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = response.read(CHUNK)
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            if size > limit:
                raise Refused(LIMIT, f"the response from {target.host_header} is larger than this run's limit of {limit} bytes")
            parts.append(chunk)
            if time.monotonic() >= min(stop, deadline):
                self._out_of_time(stop, deadline, target)

    def _connection(self, target: Target, address: str, timeout: float) -> HTTPConnection:
        if target.scheme == "http":
            return HTTPConnection(address, target.port, timeout=timeout)
        is_name = addresses.parse(target.host) is None
        return HTTPSConnection(
            address,
            target.port,
            timeout=timeout,
            server_hostname=target.host if is_name else None,
            assert_hostname=target.host,
            ssl_context=self._tls(),
        )

    def _tls(self) -> ssl.SSLContext:
        return tls_context(self.grant.ca_file if self.grant is not None else None)


@functools.lru_cache(maxsize=8)
def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificates verified against the system's CAs (plus the operator's `ca_file`).
    Loading them takes milliseconds, so one context serves every run."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context


def _reusable(response: urllib3.HTTPResponse, method: str) -> bool:
    """Whether the connection can carry another request: HTTP/1.1, not closing,
    and the body's end known from its framing (read to the end already)."""
    if response.version != 11 or "close" in response.headers.get("connection", "").lower():
        return False
    framed = "content-length" in response.headers or "chunked" in response.headers.get("transfer-encoding", "").lower()
    return framed or method == "HEAD" or response.status in (204, 304)


def _shutdown(conn: HTTPConnection, fired: threading.Event) -> None:
    fired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _describe(exc: BaseException, target: Target) -> str:
    if isinstance(exc, CertificateError):
        return f"TLS certificate of {target.host} could not be verified: it is not for this name"
    if isinstance(exc, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return f"TLS certificate of {target.host} could not be verified"
    if isinstance(exc, ssl.SSLError):
        return f"TLS with {target.host_header} failed"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"the request to {target.host_header} timed out"
    if isinstance(exc, ConnectionRefusedError):
        return f"{target.host_header} refused the connection"
    if isinstance(exc, ValueError):  # its text could quote a header, and so a secret
        return f"the request to {target.host_header} could not be sent (a header or the body is not valid)"
    return f"the request to {target.host_header} failed ({type(exc).__name__})"


def _checked_headers(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if len(pairs) > MAX_HEADERS:
        raise Refused(LIMIT, f"a request may have at most {MAX_HEADERS} headers")
    if sum(len(k) + len(v) for k, v in pairs) > MAX_HEADER_BYTES:
        raise Refused(LIMIT, f"the request's headers are larger than {MAX_HEADER_BYTES} bytes")
    checked = []
    for name, value in pairs:
        if not _TOKEN.fullmatch(name):
            raise Refused(FAILED, f"{name[:60]!r} is not a valid header name")
        if any(c in value for c in "\r\n\0"):
            raise Refused(FAILED, f"the value of header {name} contains a line break or NUL")
        if name.lower() in _RESERVED_HEADERS:
            raise Refused(FAILED, f"the {name} header is set by the host, not by the run")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise Refused(FAILED, f"the value of header {name} must be ISO-8859-1 text") from None
        checked.append((name, value))
    return checked

