"""Host-held secrets: the guest sees `wasmrun-secret:NAME`; the value stays on the host.

The host puts the value into an outgoing request (a header, the URL's query
or the body) only once the request has passed the run's network check, and
replaces it by its placeholder in anything coming back: a reply the server
echoes, and everything the run returns (output, logs, error messages).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

PREFIX = "wasmrun-secret:"
PLACEHOLDER = re.compile(r"wasmrun-secret:([A-Za-z_][A-Za-z0-9_]*)")
_ENCODED_PREFIX = re.compile(r"wasmrun-secret%3a(?=[A-Za-z_])", re.IGNORECASE)
_BODY_PLACEHOLDER = re.compile(rb"wasmrun-secret(?::|%3[aA])([A-Za-z_][A-Za-z0-9_]*)")
# Shorter values are too likely to occur by chance to be replaced in output.
MIN_REDACTED_LENGTH = 4


class UnknownSecret(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def placeholder(name: str) -> str:
    return PREFIX + name


def substitute(text: str, secrets: Mapping[str, str], *, url_query: bool = False) -> str:
    """`text` with each placeholder replaced by its value (percent-encoded in a
    URL query); a placeholder for a secret this run does not hold raises."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in secrets:
            raise UnknownSecret(name)
        return quote(secrets[name], safe="") if url_query else secrets[name]

    if url_query:  # a placeholder put through urlencode() has its ':' encoded
        text = _ENCODED_PREFIX.sub(PREFIX, text)
    return PLACEHOLDER.sub(value, text) if PREFIX in text else text


def substitute_header(value: str, secrets: Mapping[str, str]) -> str:
    """A header value with its placeholders replaced, including inside HTTP Basic
    credentials (`Basic base64(user:password)`), where code puts them encoded."""
    scheme, _, token = value.partition(" ")
    if scheme.lower() == "basic" and token and PREFIX not in value:
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return value
        if PREFIX in decoded:
            return f"{scheme} " + base64.b64encode(substitute(decoded, secrets).encode("utf-8")).decode("ascii")
        return value
    return substitute(value, secrets)


def has_placeholder(body: bytes) -> bool:
    return _BODY_PLACEHOLDER.search(body) is not None


def substitute_body(
    body: bytes, content_type: str | None, secrets: Mapping[str, str], max_bytes: int | None = None
) -> bytes:
    """A request body with its placeholders replaced, written as the body's type needs:
    JSON-escaped in JSON (the placeholder sits in a string literal), percent-encoded in
    a form (also found as `wasmrun-secret%3ANAME`, as urlencode writes it), as UTF-8
    text in anything else."""
    if not has_placeholder(body):
        return body
    media = (content_type or "").partition(";")[0].strip().lower()
    form = media == "application/x-www-form-urlencoded"
    json_text = media == "application/json" or media.endswith("+json")

    encoded: dict[bytes, bytes] = {}

    def value(match: re.Match[bytes]) -> bytes:
        name = match.group(1)
        if name not in encoded:
            text = name.decode("ascii")
            if text not in secrets:
                raise UnknownSecret(text)
            if form:
                encoded[name] = quote(secrets[text], safe="").encode("ascii")
            elif json_text:
                encoded[name] = json.dumps(secrets[text])[1:-1].encode("ascii")
            else:
                encoded[name] = secrets[text].encode("utf-8", "surrogatepass")
        return encoded[name]

    if max_bytes is not None:
        # Bound the result before building it: a body of many placeholders of a long value
        # would otherwise grow far past the limit in host memory first.
        grown = sum(len(value(m)) - len(m.group(0)) for m in _BODY_PLACEHOLDER.finditer(body))
        if len(body) + grown > max_bytes:
            raise BodyTooLarge(len(body) + grown)
    return _BODY_PLACEHOLDER.sub(value, body)


class BodyTooLarge(ValueError):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _forms(value: str) -> list[str]:
    """The value as it may appear in returned text: raw and JSON-escaped."""
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], quote(value, safe="")}
    return sorted((f for f in forms if len(f) >= MIN_REDACTED_LENGTH), key=len, reverse=True)


class Redactor:
    """Replaces secret values by their placeholders in text and bytes."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        pairs = [(form, placeholder(name)) for name, v in secrets.items() for form in _forms(v)]
        self._pairs = sorted(pairs, key=lambda p: len(p[0]), reverse=True)
        self._byte_pairs = [(f.encode("utf-8", "surrogatepass"), p.encode()) for f, p in self._pairs]

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def text(self, text: str) -> str:
        for form, name in self._pairs:
            if form in text:
                text = text.replace(form, name)
        return text

    def pending(self, text: str) -> int:
        """How many characters at the end of `text` could begin a secret that more
        text would complete: what a stream of text must hold back before sending."""
        longest = 0
        for form, _ in self._pairs:
            for k in range(min(len(form) - 1, len(text)), longest, -1):
                if text.endswith(form[:k]):
                    longest = k
                    break
        return longest

    def value(self, value: Any) -> Any:
        """A decoded JSON value with every string (keys too) redacted; no recursion,
        so any depth the JSON decoder accepted is fine."""
        root: list[Any] = [value]
        stack: list[tuple[Any, Any]] = [(root, 0)]
        while stack:
            parent, key = stack.pop()
            item = parent[key]
            if isinstance(item, str):
                parent[key] = self.text(item)
            elif isinstance(item, list):
                stack.extend((item, i) for i in range(len(item)))
            elif isinstance(item, dict):
                renamed = {self.text(k): v for k, v in item.items()}
                item.clear()
                item.update(renamed)
                stack.extend((item, k) for k in item)
        return root[0]

    def data(self, data: bytes) -> bytes:
        for form, name in self._byte_pairs:
            if form in data:
                data = data.replace(form, name)
        return data
