"""URL patterns (as manifests and the operator write them) and URL parsing."""

from __future__ import annotations

import pytest

from wasmrun.egress.patterns import PatternError, UrlError, UrlPattern, parse_url


def matches(pattern: str, url: str) -> bool:
    return UrlPattern.parse(pattern).matches(parse_url(url))


@pytest.mark.parametrize(
    "pattern, url, expected",
    [
        ("https://*.salesforce.com", "https://na1.salesforce.com/services", True),
        ("https://*.salesforce.com", "https://a.b.salesforce.com", True),
        ("https://*.salesforce.com", "https://NA1.SalesForce.COM.", True),
        ("https://*.salesforce.com", "https://na1.salesforce.com:443/", True),
        ("https://*.salesforce.com", "https://salesforce.com", False),  # not the apex
        ("https://*.salesforce.com", "https://evilsalesforce.com", False),
        ("https://*.salesforce.com", "https://salesforce.com.evil.com", False),
        ("https://*.salesforce.com", "http://na1.salesforce.com", False),  # scheme
        ("https://*.salesforce.com", "https://na1.salesforce.com:8443", False),  # port
        ("https://api.example.com", "https://api.example.com/any/path?q=1", True),
        ("https://api.example.com", "https://x.api.example.com", False),
        ("https://api.example.com:8443", "https://api.example.com:8443/", True),
        ("https://api.example.com:8443", "https://api.example.com/", False),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1", True),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/items", True),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v10", False),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/../admin", False),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/%2e%2e/admin", False),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/%2E%2e/admin", False),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/x", True),
        ("http://[::1]:8080", "http://[0:0::1]:8080/", True),
        ("https://*", "https://anything.example/", True),
        ("https://*", "http://anything.example/", False),
        ("https://bücher.example", "https://xn--bcher-kva.example/", True),
        ("*.example.com", "https://a.example.com/", True),  # a bare host means https
        ("*.example.com", "http://a.example.com/", False),
        ("api.example.com:8443/v1", "https://api.example.com:8443/v1/x", True),
    ],
)
def test_matching(pattern: str, url: str, expected: bool) -> None:
    assert matches(pattern, url) is expected


@pytest.mark.parametrize(
    "pattern",
    [
        "ftp://example.com",
        "ws:/example.com",
        "https://",
        "https://a*.example.com",
        "https://*example.com",
        "https://example.*",
        "https://example.com:0",
        "https://example.com:99999",
        "https://example.com:x",
        "https://user@example.com",
        "https://example.com/?q",
        "https://exa mple.com",
        "https://example.com\x00",
        "https://[::1",
        "https://" + "a" * 5000 + ".com",
        "",
    ],
)
def test_bad_patterns(pattern: str) -> None:
    with pytest.raises(PatternError):
        UrlPattern.parse(pattern)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "/relative",
        "https://user:pw@example.com/",
        "https://example.com:0/",
        "https://exa mple.com/",
        "https://example.com/\r\nX: y",
        "https://example.com\\@evil.com/",
        "https://" + "a" * 9000,
        "https://[::1/",
        "https://-bad-.com/",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(UrlError):
        parse_url(url)


def test_parsed_url_is_what_is_sent() -> None:
    target = parse_url("HTTPS://API.Example.com./v1/a/./b/../c?x=1&y=%20")
    assert (target.scheme, target.host, target.port) == ("https", "api.example.com", 443)
    assert target.request_target == "/v1/a/c?x=1&y=%20"
    assert target.host_header == "api.example.com"
    assert parse_url("http://[::1]:8080").host_header == "[::1]:8080"


AMBIGUOUS_PATHS = [
    "/v1/..;/admin", "/v1/..%2fadmin", "/v1/..%2Fadmin", "/v1/..\\admin", "/v1/..%5cadmin",
    "/v1/%2e%2e/admin", "/v1/.%2e/admin", "/v1/%252e%252e/admin", "/v1/%25252e/admin", "/v1/x;jsessionid=1",
    "/v1/x%3b/admin", "/v1/./x", "/v1/x/..", "/v1/%2e", "/v1/a%2fb", "/v1/x%00", "/v1/x%zz",
]


@pytest.mark.parametrize("path", AMBIGUOUS_PATHS)
def test_a_path_grant_refuses_paths_an_upstream_could_read_otherwise(path: str) -> None:
    target = parse_url("http://127.0.0.1:8080" + path)
    assert target.ambiguity is not None
    assert not UrlPattern.parse("http://127.0.0.1:8080/v1").matches(target)
    # A host-only grant does not judge paths: the same URL passes it.
    assert UrlPattern.parse("http://127.0.0.1:8080").matches(target)


@pytest.mark.parametrize(
    "path, expected",
    [("/%76%31/x", True), ("/v1/%7euser", True), ("/v1/caf%C3%A9", True), ("/V1/x", False), ("/v1x", False)],
)
def test_a_path_grant_compares_the_normalised_path(path: str, expected: bool) -> None:
    assert matches("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080" + path) is expected


@pytest.mark.parametrize("pattern", ["http://h.example/v1/../admin", "http://h.example/v1;x", "http://h.example/a%2fb"])
def test_a_path_pattern_must_be_written_plainly(pattern: str) -> None:
    with pytest.raises(PatternError, match="write the path plainly"):
        UrlPattern.parse(pattern)


def test_the_refusal_names_the_ambiguity() -> None:
    from wasmrun.egress.policy import NetworkGrant

    grant = NetworkGrant(subject="skill a", requested=["http://127.0.0.1:8080/v1"], granted=["http://127.0.0.1:8080/v1"])
    assert grant.refusal(parse_url("http://127.0.0.1:8080/v1/x")) is None
    why = grant.refusal(parse_url("http://127.0.0.1:8080/v1/..;/admin"))
    assert why is not None and "path-prefix grant cannot judge" in why and "';'" in why
