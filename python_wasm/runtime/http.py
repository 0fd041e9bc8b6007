"""HTTP(S) requests from inside a run, made by the host on the run's behalf.

    from runtime import http
    r = http.request("GET", "https://api.example.com/v1/items", headers={"Accept": "application/json"})
    r.status, r.headers["content-type"], r.json()

The guest has no sockets. The host checks every request (and every redirect
hop) against the skill's `permissions.network` as granted by the operator,
connects only to public addresses it resolved itself, verifies TLS and bounds
sizes, counts and time. A refused request raises `NetworkNotAllowed`.

`urllib.request.urlopen` goes through here too (see `install_urllib`).

Secrets the operator keeps on the host appear here only as placeholders
(`wasmrun-secret:NAME`); put one in a header or the URL's query and the
host sends the real value, only to hosts this skill may reach.
"""

from __future__ import annotations

import io
import json as _json

import _wasmrun

__all__ = [
    "NetworkError",
    "NetworkLimitExceeded",
    "NetworkNotAllowed",
    "Response",
    "get",
    "post",
    "request",
]


class NetworkError(OSError):
    """The request could not be completed (connection, TLS, timeout, bad reply)."""


class NetworkNotAllowed(NetworkError, PermissionError):
    """The request is not allowed by this run's network permissions."""


class NetworkLimitExceeded(NetworkError):
    """A request, response or the run's request count went past its limit."""


_ERRORS = {
    "NetworkNotAllowed": NetworkNotAllowed,
    "NetworkLimitExceeded": NetworkLimitExceeded,
    "NetworkError": NetworkError,
}


class Headers:
    """Response headers: case-insensitive lookup; repeated headers joined with ", "."""

    def __init__(self, pairs):
        self._pairs = [(str(k), str(v)) for k, v in pairs]

    def get(self, name, default=None):
        found = [v for k, v in self._pairs if k.lower() == name.lower()]
        return ", ".join(found) if found else default

    def get_all(self, name):
        return [v for k, v in self._pairs if k.lower() == name.lower()]

    def __getitem__(self, name):
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name):
        return self.get(name) is not None

    def items(self):
        return list(self._pairs)

    def keys(self):
        return [k for k, _ in self._pairs]

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._pairs)

    def __repr__(self):
        return f"Headers({self._pairs!r})"


class Response:
    def __init__(self, status, reason, headers, body, url):
        self.status = status
        self.reason = reason
        self.headers = Headers(headers)
        self.body = body
        self.url = url

    @property
    def ok(self):
        return 200 <= self.status < 400

    @property
    def content(self):
        return self.body

    def bytes(self):
        return self.body

    def text(self, encoding=None):
        if encoding is None:
            ctype = self.headers.get("content-type", "")
            encoding = "utf-8"
            for part in ctype.split(";")[1:]:
                key, _, value = part.strip().partition("=")
                if key.lower() == "charset" and value:
                    encoding = value.strip('"')
        try:
            return self.body.decode(encoding, "replace")
        except LookupError:
            return self.body.decode("utf-8", "replace")

    def json(self):
        return _json.loads(self.body)

    def raise_for_status(self):
        if self.status >= 400:
            raise NetworkError(f"{self.status} {self.reason} for {self.url}")
        return self

    def __repr__(self):
        return f"<Response {self.status} {self.url}>"


def _header_pairs(headers):
    if headers is None:
        return []
    items = headers.items() if hasattr(headers, "items") else headers
    pairs = []
    for k, v in items:
        if not isinstance(k, str) or not isinstance(v, (str, int)):
            raise TypeError("header names must be str and values str or int")
        pairs.append([k, str(v)])
    return pairs


def request(method, url, headers=None, body=None, json=None, params=None, timeout=None, follow_redirects=True):
    """Make one HTTP(S) request through the host; returns a `Response`.

    `params` (a dict or pairs) is added to the URL's query.
    `body` may be bytes or str (UTF-8); `json` is serialised and sets
    Content-Type. `timeout` (seconds) bounds this request; the run's own
    time limit bounds it too. Redirects are followed (each hop checked)
    unless `follow_redirects` is false.
    """
    if not isinstance(method, str) or not isinstance(url, str):
        raise TypeError("method and url must be str")
    if params:
        import urllib.parse

        url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params, doseq=True)
    pairs = _header_pairs(headers)
    if json is not None:
        if body is not None:
            raise TypeError("give body or json, not both")
        body = _json.dumps(json).encode("utf-8")
        if not any(k.lower() == "content-type" for k, _ in pairs):
            pairs.append(["Content-Type", "application/json"])
    if body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode("utf-8")
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    elif hasattr(body, "read"):
        data = body.read()
        data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    else:
        raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if timeout is not None:
        timeout = float(timeout)
        if not timeout > 0:  # also refuses NaN
            raise ValueError("timeout must be a positive number of seconds")
    meta = {  # wasmrun/abi.py's HttpRequestMeta
        "method": method,
        "url": url,
        "headers": pairs,
        "has_body": body is not None,
        "timeout": timeout if timeout is None or timeout < 1e9 else None,
        "follow_redirects": bool(follow_redirects),
    }
    reply = _wasmrun.http_request(_json.dumps(meta).encode("utf-8"), data)
    head_len = int.from_bytes(reply[:4], "little")
    head = _json.loads(reply[4 : 4 + head_len])
    if "error" in head:
        raise _ERRORS.get(head["error"], NetworkError)(head["message"])
    return Response(head["status"], head["reason"], head["headers"], reply[4 + head_len :], head["url"])


def get(url, **kwargs):
    return request("GET", url, **kwargs)


def post(url, **kwargs):
    return request("POST", url, **kwargs)


# -- urllib.request over the host ---------------------------------------------

def _urllib_open(handler, req):
    import http.client
    import socket
    import urllib.error
    import urllib.response

    data = req.data
    if data is not None and not isinstance(data, (bytes, bytearray, memoryview, str)):
        data = data.read() if hasattr(data, "read") else b"".join(data)
    timeout = req.timeout if isinstance(req.timeout, (int, float)) else None
    if timeout is socket._GLOBAL_DEFAULT_TIMEOUT:
        timeout = None
    # urllib adds framing and Host itself; the host sets those.
    headers = {k: v for k, v in req.header_items() if k.lower() not in _HOST_SET}
    if data is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        r = request(req.get_method(), req.full_url, headers=headers, body=data, timeout=timeout)
    except NetworkNotAllowed:
        raise
    except NetworkError as exc:
        raise urllib.error.URLError(str(exc)) from None
    message = http.client.HTTPMessage()
    for k, v in r.headers.items():
        message[k] = v
    resp = urllib.response.addinfourl(io.BytesIO(r.body), message, r.url, r.status)
    resp.msg = r.reason
    resp.reason = r.reason
    return resp


_HOST_SET = {"host", "content-length", "connection", "transfer-encoding"}


def install_urllib():
    """Make every urllib opener (urlopen's default one included) send http and
    https requests through the host: `build_opener` always adds HTTPHandler."""
    import urllib.request

    urllib.request.HTTPHandler.http_open = _urllib_open
    urllib.request.HTTPHandler.https_open = _urllib_open
    # With `ssl` importable urllib has an HTTPSHandler too (urlopen(context=...)
    # builds one): it goes through the host as well; the host does the TLS.
    if hasattr(urllib.request, "HTTPSHandler"):
        urllib.request.HTTPSHandler.https_open = _urllib_open
