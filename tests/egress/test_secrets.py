"""Placeholders in, values out only on the wire; values back to placeholders in anything returned."""

from __future__ import annotations

import base64

import pytest

from wasmrun.egress.secrets import (
    BodyTooLarge,
    Redactor,
    UnknownSecret,
    substitute,
    substitute_body,
    substitute_header,
)

SECRETS = {"API_KEY": 'k3y"with\\quotes/é', "TOKEN": "tok-123456"}


def test_substitute_in_headers_and_query() -> None:
    assert substitute("Bearer wasmrun-secret:TOKEN", SECRETS) == "Bearer tok-123456"
    assert substitute("key=wasmrun-secret:API_KEY", SECRETS, url_query=True) == "key=k3y%22with%5Cquotes%2F%C3%A9"
    assert substitute("a=1&key=wasmrun-secret%3ATOKEN", SECRETS, url_query=True) == "a=1&key=tok-123456"
    assert substitute("no placeholder", SECRETS) == "no placeholder"
    with pytest.raises(UnknownSecret):
        substitute("wasmrun-secret:NOT_GRANTED", SECRETS)


def test_substitute_inside_basic_credentials() -> None:
    encoded = base64.b64encode(b"wasmrun-secret:TOKEN:").decode()
    assert substitute_header(f"Basic {encoded}", SECRETS) == "Basic " + base64.b64encode(b"tok-123456:").decode()
    assert substitute_header("Basic not-base64!", SECRETS) == "Basic not-base64!"
    assert substitute_header("Bearer wasmrun-secret:TOKEN", SECRETS) == "Bearer tok-123456"
    with pytest.raises(UnknownSecret):
        substitute_header("Basic " + base64.b64encode(b"u:wasmrun-secret:OTHER").decode(), SECRETS)


def test_substitute_in_bodies_as_their_type_needs() -> None:
    import json

    body = json.dumps({"key": "wasmrun-secret:API_KEY", "n": 1}).encode()
    sent = substitute_body(body, "application/json; charset=utf-8", SECRETS)
    assert json.loads(sent) == {"key": SECRETS["API_KEY"], "n": 1}  # still valid JSON: escaped
    assert json.loads(substitute_body(body, "application/vnd.api+json", SECRETS))["key"] == SECRETS["API_KEY"]
    form = b"a=1&key=wasmrun-secret%3AAPI_KEY&t=wasmrun-secret:TOKEN"
    assert substitute_body(form, "application/x-www-form-urlencoded", SECRETS) == (
        b"a=1&key=k3y%22with%5Cquotes%2F%C3%A9&t=tok-123456"
    )
    assert substitute_body(b"token wasmrun-secret:TOKEN\n", "text/plain", SECRETS) == b"token tok-123456\n"
    assert substitute_body(b"wasmrun-secret:TOKEN", None, SECRETS) == b"tok-123456"
    raw = bytes(range(256)) * 4  # no placeholder: the very same bytes
    assert substitute_body(raw, "application/octet-stream", SECRETS) is raw
    with pytest.raises(UnknownSecret):
        substitute_body(b'{"k": "wasmrun-secret:NOT_GRANTED"}', "application/json", SECRETS)


def test_a_body_is_bounded_with_its_secrets_put_in() -> None:
    long = {"LONG": "v" * 3000}
    body = b"wasmrun-secret:LONG " * 60_000  # 1.2 MB of placeholders: 180 MB once substituted
    with pytest.raises(BodyTooLarge) as too_large:
        substitute_body(body, "text/plain", long, max_bytes=2 * 1024 * 1024)
    assert too_large.value.size == 60_000 * 3001
    small = b"k=wasmrun-secret:LONG"
    assert substitute_body(small, "text/plain", long, max_bytes=3002) == b"k=" + b"v" * 3000
    with pytest.raises(BodyTooLarge):
        substitute_body(small, "text/plain", long, max_bytes=3001)


def test_redactor_replaces_every_form() -> None:
    redact = Redactor(SECRETS)
    assert redact.text("got tok-123456!") == "got wasmrun-secret:TOKEN!"
    assert redact.text('{"k": "k3y\\"with\\\\quotes/\\u00e9"}') == '{"k": "wasmrun-secret:API_KEY"}'
    assert redact.data(b"x tok-123456 y") == b"x wasmrun-secret:TOKEN y"
    value = {"tok-123456": [["deep tok-123456"]], "n": 1}
    assert redact.value(value) == {"wasmrun-secret:TOKEN": [["deep wasmrun-secret:TOKEN"]], "n": 1}


def test_redactor_handles_deep_values_and_short_secrets() -> None:
    deep: list = []
    cur = deep
    for _ in range(50_000):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    cur.append("tok-123456")
    Redactor(SECRETS).value(deep)
    assert cur == ["wasmrun-secret:TOKEN"]
    assert not Redactor({"PIN": "12"})  # too short to redact without mangling output
