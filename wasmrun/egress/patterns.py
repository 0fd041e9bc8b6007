"""URL patterns, as a manifest's `permissions.network` and the operator write them.

    https://api.example.com          that host, port 443, any path
    https://*.salesforce.com         any subdomain (a.salesforce.com, a.b.salesforce.com),
                                     not salesforce.com itself
    http://127.0.0.1:8080/v1         that host and port, paths /v1 and /v1/...
    https://*                        any host over HTTPS (an operator's "anything")
    api.example.com                  a bare host: https://api.example.com

The scheme is http or https; without one, https. Without a port a pattern means the
scheme's default port. A path prefix matches whole segments (`/v1` does not
match `/v10`). Hosts compare case-insensitively, in their IDNA (ASCII) form.

A path prefix is compared with the request's *normalised* path (dot segments
removed, percent-encoded unreserved characters decoded, `%xx` in upper case),
and a request whose path an upstream could read in more than one way is refused
by every path-prefix pattern: a dot segment (`..`, `.`, `%2e%2e`), an encoded
slash or backslash (`%2f`, `%5c`), a backslash, a `;` (path parameters, `..;/`),
an encoded `%` (double encoding, `%252e`), or an encoded control character.
Whether `/v1/..;/admin` reaches `/admin` depends on the upstream; with a
path grant it never leaves the host.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_PATTERN = 2048
MAX_URL = 8192
_HOST_LABELS = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*")


class PatternError(ValueError):
    """A pattern that is not `scheme://host[:port][/path]` as described above."""


class UrlError(ValueError):
    """A URL a run asked for that cannot be requested (bad scheme, host, port...)."""


@dataclass(frozen=True)
class Target:
    """A URL taken apart the way the allowlist and the client see it."""

    scheme: str  # "http" or "https"
    host: str  # lower-case ASCII name, or an IP literal without brackets
    port: int
    path: str  # dot segments removed; starts with "/"; what is sent
    query: str  # without "?"
    plain_path: str = ""  # `path` normalised for comparing with path prefixes
    ambiguity: str | None = None  # why path prefixes may not judge this path, or None

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    @property
    def request_target(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.request_target}"


def normalize_host(host: str) -> str:
    """Lower-case ASCII (IDNA) form of a host name, or an IPv6 literal without brackets."""
    if host.startswith("[") and host.endswith("]"):
        inner = host[1:-1]
        if ":" not in inner or not re.fullmatch(r"[0-9a-fA-F:.]+", inner):
            raise ValueError(f"{host!r} is not an IPv6 address")
        import ipaddress

        return ipaddress.IPv6Address(inner).compressed
    name = host.rstrip(".") if host.endswith(".") and not host.endswith("..") else host
    try:
        name = name.encode("idna").decode("ascii") if not name.isascii() else name
    except UnicodeError:
        raise ValueError(f"{host!r} is not a valid host name") from None
    name = name.lower()
    if not name or len(name) > 253 or not _HOST_LABELS.fullmatch(name):
        raise ValueError(f"{host!r} is not a valid host name")
    return name


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, with percent-encoded dots treated as dots, so
    `/v1/%2e%2e/admin` cannot slip past a `/v1` prefix."""
    segments = path.split("/")
    out: list[str] = []
    for seg in segments[1:]:
        plain = unquote(seg) if "%" in seg else seg
        if plain == ".":
            continue
        if plain == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    trailing = segments[-1] if len(segments) > 1 else ""
    if unquote(trailing) in (".", "..") and (not out or out[-1] != ""):
        out.append("")
    return "/" + "/".join(out)


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _normal_escape(match: re.Match[str]) -> str:
    byte = int(match.group(1), 16)
    return chr(byte) if byte in _UNRESERVED else "%" + match.group(1).upper()


def path_ambiguity(raw_path: str) -> str | None:
    """Why an upstream could read `raw_path` (as the URL spelled it) otherwise than a
    prefix comparison does, or None when it is plain."""
    lowered = raw_path.lower()
    if "\\" in raw_path or "%5c" in lowered:
        return "a backslash in the path"
    if "%2f" in lowered:
        return "an encoded '/' (%2F) in the path"
    if ";" in raw_path or "%3b" in lowered:
        return "a ';' (path parameters) in the path"
    if "%25" in lowered:
        return "an encoded '%' (double encoding) in the path"
    if _BAD_PERCENT.search(raw_path):
        return "a '%' that is not a %XX escape in the path"
    if any(int(m.group(1), 16) < 0x20 or int(m.group(1), 16) == 0x7F for m in _PERCENT.finditer(raw_path)):
        return "an encoded control character in the path"
    for segment in raw_path.split("/"):
        if segment and unquote(segment).strip(".") == "":
            return f"a dot segment ({segment[:20]!r}) in the path"
    return None


def normal_path(path: str) -> str:
    """RFC 3986 normalisation: unreserved characters decoded, other escapes upper-cased,
    dot segments removed."""
    return remove_dot_segments(_PERCENT.sub(_normal_escape, path))


def parse_url(url: str) -> Target:
    if not isinstance(url, str) or len(url) > MAX_URL:
        raise UrlError(f"a URL must be a string of at most {MAX_URL} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise UrlError("the URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlError(f"not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UrlError(f"only http and https URLs can be requested, not {scheme or 'a relative URL'!r}")
    if parts.username is not None or parts.password is not None:
        raise UrlError("credentials in the URL (user:password@) are not supported; send a header")
    raw_host = parts.netloc.rpartition("@")[2]
    raw_host = raw_host[: raw_host.rindex("]") + 1] if raw_host.startswith("[") else raw_host.split(":", 1)[0]
    try:
        host = normalize_host(raw_host)
    except ValueError as exc:
        raise UrlError(str(exc)) from None
    if port == 0:
        raise UrlError("port 0 cannot be requested")
    path = remove_dot_segments(parts.path or "/")
    return Target(
        scheme, host, port or DEFAULT_PORTS[scheme], path, parts.query,
        plain_path=normal_path(path), ambiguity=path_ambiguity(parts.path),
    )


@dataclass(frozen=True)
class UrlPattern:
    text: str
    scheme: str
    host: str  # "*" (any), "*.suffix" or an exact host
    port: int
    path: str  # "" or a prefix starting with "/"

    @classmethod
    def parse(cls, text: str) -> UrlPattern:
        if not isinstance(text, str) or not text or len(text) > MAX_PATTERN:
            raise PatternError(f"a network pattern must be a non-empty string of at most {MAX_PATTERN} characters")
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in text) or "?" in text or "#" in text or "@" in text:
            raise PatternError(f"{text!r} must be scheme://host[:port][/path] (no spaces, query, fragment or user)")
        # A bare host ("api.example.com", "*.example.com") means HTTPS.
        scheme, sep, rest = text.partition("://") if "://" in text else ("https", "://", text)
        scheme = scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise PatternError(f"{text!r} must start with http:// or https:// (or be a bare host, meaning https)")
        authority, slash, path = rest.partition("/")
        host_text, port_text = authority, ""
        if authority.startswith("["):
            end = authority.find("]")
            if end < 0:
                raise PatternError(f"{text!r}: unclosed IPv6 bracket")
            host_text, port_text = authority[: end + 1], authority[end + 1 :]
            if port_text and not port_text.startswith(":"):
                raise PatternError(f"{text!r}: bad port")
            port_text = port_text[1:]
        elif ":" in authority:
            host_text, _, port_text = authority.partition(":")
            if not port_text:
                raise PatternError(f"{text!r}: a ':' must be followed by a port")
        port = DEFAULT_PORTS[scheme]
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise PatternError(f"{text!r}: port must be 1-65535")
            port = int(port_text)
        host_text = host_text.lower()
        try:
            if host_text == "*":
                host = "*"
            elif host_text.startswith("*."):
                host = "*." + normalize_host(host_text[2:])
            elif "*" in host_text:
                raise PatternError(f"{text!r}: a wildcard may only be a whole first label (*.example.com)")
            else:
                host = normalize_host(host_text)
        except ValueError as exc:
            raise PatternError(f"{text!r}: {exc}") from None
        prefix = ""
        if slash:
            if why := path_ambiguity("/" + path):
                raise PatternError(f"{text!r}: {why}; write the path plainly")
            prefix = normal_path("/" + path)
            if prefix == "/":
                prefix = ""
        return cls(text, scheme, host, port, prefix)

    def matches(self, target: Target) -> bool:
        if target.scheme != self.scheme or target.port != self.port:
            return False
        if self.host == "*":
            pass
        elif self.host.startswith("*."):
            if not target.host.endswith(self.host[1:]) or ":" in target.host:
                return False
        elif target.host != self.host:
            return False
        if not self.path:
            return True
        if target.ambiguity is not None:  # a prefix cannot judge it: refused (see the module's text)
            return False
        path = target.plain_path or normal_path(target.path)
        if self.path.endswith("/"):
            return path.startswith(self.path)
        return path == self.path or path.startswith(self.path + "/")

    def matches_origin(self, target: Target) -> bool:
        """Whether the scheme, host and port match, whatever the path."""
        return dataclasses.replace(self, path="").matches(target)
