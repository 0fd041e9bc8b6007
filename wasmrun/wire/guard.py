"""Which requests the server answers at all: a browser page must not drive it.

A web page the operator visits can POST to a server on localhost, and with DNS
rebinding it can even read the answers (the browser then sends the attacker's
name as `Host`). So every request must name a `Host` the server answers to, and
a request carrying an `Origin` (browsers add it) must come from an allowed one.
`/rpc` also requires `Content-Type: application/json`, which a page cannot send
cross-origin without a CORS preflight that this server never grants.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """`Host` without its port: "example.com:8080" -> "example.com", "[::1]:80" -> "[::1]"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


@dataclass(frozen=True)
class RequestGuard:
    hosts: frozenset[str] | None  # lower-case names (with or without port); None: any Host
    origins: frozenset[str]  # exact origins, e.g. "https://agents.example.com"

    @classmethod
    def for_server(cls, bind_host: str, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]) -> RequestGuard:
        """The loopback names and the address bound, plus the operator's list. Bound to every
        interface with no list given, any Host is answered (API keys are then the guard)."""
        listed = {h.strip().lower() for h in allowed_hosts if h.strip()}
        origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins if o.strip())
        if bind_host in WILDCARD_HOSTS and not listed:
            return cls(None, origins)
        names = set(LOOPBACK_NAMES) | listed
        if bind_host not in WILDCARD_HOSTS:
            names.add(bind_host.lower())
            if ":" in bind_host and not bind_host.startswith("["):
                names.add(f"[{bind_host.lower()}]")
        return cls(frozenset(names), origins)

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused, or None when it is answered."""
        if self.hosts is not None:
            given = (host or "").strip().lower()
            if not given or (given not in self.hosts and host_name(given) not in self.hosts):
                return "the Host header names a host this server does not answer to"
        if origin is not None:
            given = origin.strip().rstrip("/").lower()
            if given not in self.origins and not self._same_origin(given, host):
                return "requests from this Origin are not allowed (a web page cannot drive this server)"
        return None

    def _same_origin(self, origin: str, host: str | None) -> bool:
        """The page this server served (the playground at /) calling it back: its Origin
        names the very Host the request went to, and that Host is one this server
        answers to by name (checked above). A server answering any Host (bound to
        every interface with no allowed_hosts) cannot tell a rebound name from its
        own, so there the page's origin must be listed in allowed_origins."""
        if self.hosts is None or not host:
            return False
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and rest == host.strip().lower()
