"""The JSON-RPC 2.0 envelope: single calls, batches, notifications, ids, error codes, HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from tests.images import current
from wasmrun.protocol.errors import InvalidParams, QuotaExceeded
from wasmrun.wire import jsonrpc
from wasmrun.wire.app import create_app

JSON_TYPE = {"content-type": "application/json"}


def post(client: TestClient, body: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body)
    response = client.post("/rpc", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    return response.json()


def call(method: str, params: Any = None, id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        body["params"] = params
    return body


GUIDE = call("load_skills_protocol_guide", {})


@pytest.mark.parametrize(
    "id",
    [
        pytest.param("abc", id="string"),
        pytest.param("", id="empty-string"),
        pytest.param(7, id="integer"),
        pytest.param(-3, id="negative"),
        pytest.param(2.5, id="float"),
        pytest.param(None, id="null"),
    ],
)
def test_id_is_echoed_with_its_type(client: TestClient, id: Any) -> None:
    answer = post(client, call("list_skills", {}, id=id))
    assert answer["jsonrpc"] == "2.0"
    assert "result" in answer
    assert answer["id"] == id and type(answer["id"]) is type(id)


def test_id_is_echoed_byte_for_byte(client: TestClient) -> None:
    body = b'{"jsonrpc": "2.0", "method": "list_skills", "id": 1.0e3}'
    response = client.post("/rpc", content=body, headers=JSON_TYPE)
    assert response.content.startswith(b'{"jsonrpc":"2.0","id":1.0e3,')


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"jsonrpc": "2.0", "method": "list_skills", "id": 1', id="truncated"),
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"", id="empty-body"),
        pytest.param(b"\xff\xfe{}", id="not-utf8"),
        pytest.param(b'{"a": 1} {"b": 2}', id="trailing-data"),
        pytest.param(b'[{"jsonrpc": "2.0", "method": "x", "id": 1}, ', id="truncated-batch"),
    ],
)
def test_parse_error(client: TestClient, body: bytes) -> None:
    answer = post(client, body)
    assert answer["error"]["code"] == -32700
    assert answer["id"] is None


@pytest.mark.parametrize(
    "body, says",
    [
        pytest.param(b'{"jsonrpc": "2.0", "method": "run_code", "params": {"code": "\\ud800"}, "id": 1}',
                     "lone UTF-16 surrogate", id="lone-high-surrogate-at-the-end"),
        pytest.param(b'{"jsonrpc": "2.0", "method": "run_code", "params": {"code": "\\udc00x"}, "id": 1}',
                     "surrogate", id="lone-low-surrogate"),
        pytest.param(b'{"jsonrpc": "2.0", "method": "list_skills", "id": 1', "truncated", id="truly-truncated"),
    ],
)
def test_a_parse_error_says_what_is_wrong(client: TestClient, body: bytes, says: str) -> None:
    answer = post(client, body)
    assert answer["error"]["code"] == -32700 and answer["id"] is None
    assert says in answer["error"]["message"], answer["error"]["message"]
    assert "result" in post(client, GUIDE)  # and the server goes on


@pytest.mark.parametrize(
    "body, id",
    [
        pytest.param({"jsonrpc": "2.0", "id": 1}, 1, id="no-method"),
        pytest.param({"jsonrpc": "2.0", "method": 5, "id": "x"}, "x", id="method-not-string"),
        pytest.param({"jsonrpc": "1.0", "method": "list_skills", "id": 2}, 2, id="wrong-version"),
        pytest.param({"method": "list_skills", "id": 3}, 3, id="no-version"),
        pytest.param({"jsonrpc": "2.0", "method": "list_skills", "id": {"a": 1}}, None, id="id-object"),
        pytest.param({"jsonrpc": "2.0", "method": "list_skills", "id": [1]}, None, id="id-array"),
        pytest.param({"jsonrpc": "2.0", "method": "list_skills", "id": True}, None, id="id-bool"),
        pytest.param(
            {"jsonrpc": "2.0", "method": "list_skills", "params": "x", "id": 4}, 4, id="params-string"
        ),
        pytest.param(
            {"jsonrpc": "2.0", "method": "list_skills", "params": 1, "id": 5}, 5, id="params-number"
        ),
        pytest.param(1, None, id="number"),
        pytest.param("call", None, id="string"),
        pytest.param(None, None, id="null"),
    ],
)
def test_invalid_request(client: TestClient, body: Any, id: Any) -> None:
    answer = post(client, body)
    assert answer["error"]["code"] == -32600
    assert answer["id"] == id


def test_empty_batch_gets_one_error(client: TestClient) -> None:
    answer = post(client, [])
    assert isinstance(answer, dict)
    assert answer["error"]["code"] == -32600
    assert answer["id"] is None


def test_batch_answers_each_call_and_skips_notifications(client: TestClient) -> None:
    batch = [
        call("list_skills", {}, id="a"),
        {"jsonrpc": "2.0", "method": "list_skills", "params": {}},  # notification
        call("no_such_method", {}, id="b"),
        1,
        call("list_skills", {"limit": "x"}, id="c"),
    ]
    answers = post(client, batch)
    assert isinstance(answers, list) and len(answers) == 4
    by_id = {a["id"]: a for a in answers if a["id"] is not None}
    assert "result" in by_id["a"]
    assert by_id["b"]["error"]["code"] == -32601
    assert by_id["c"]["error"]["code"] == -32602
    assert [a["error"]["code"] for a in answers if a["id"] is None] == [-32600]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"jsonrpc": "2.0", "method": "list_skills", "params": {}}, id="single"),
        pytest.param({"jsonrpc": "2.0", "method": "no_such_method"}, id="unknown-method"),
        pytest.param({"jsonrpc": "2.0", "method": "list_skills", "params": {"limit": "x"}}, id="bad-params"),
        pytest.param(
            [{"jsonrpc": "2.0", "method": "list_skills"}, {"jsonrpc": "2.0", "method": "read_blob"}],
            id="batch-of-notifications",
        ),
    ],
)
def test_notifications_get_no_response(client: TestClient, body: Any) -> None:
    response = client.post("/rpc", json=body)
    assert response.status_code == 204
    assert response.content == b""


def test_batch_too_long(client: TestClient) -> None:
    answer = post(client, [call("list_skills", {}, id=i) for i in range(jsonrpc.MAX_BATCH + 1)])
    assert answer["error"]["code"] == -32600
    assert str(jsonrpc.MAX_BATCH) in answer["error"]["message"]


def test_method_not_found(client: TestClient) -> None:
    answer = post(client, call("rpc.discover"))
    assert answer["error"]["code"] == -32601
    assert "rpc.discover" in answer["error"]["message"]


@pytest.mark.parametrize(
    "method, params, field",
    [
        pytest.param("list_skills", {"limit": "ten"}, "limit", id="wrong-type"),
        pytest.param("list_skills", {"limit": 0}, "limit", id="out-of-range"),
        pytest.param("list_skills", {"detail": "everything"}, "detail", id="bad-enum"),
        pytest.param("list_skills", {"namspace": "data"}, "namspace", id="unknown-field"),
        pytest.param("describe_skill", {}, "name", id="missing-field"),
        pytest.param(
            "run_code",
            {"language": "python", "code": "", "limits": {"timeout_ms": -1}},
            "limits.timeout_ms",
            id="nested",
        ),
        pytest.param(
            "run_code",
            {"language": "python", "code": "", "limits": {"memory": 1}},
            "limits.memory",
            id="nested-unknown",
        ),
        pytest.param(
            "run_code",
            {"language": "python", "code": "", "mount_skills": ["a", 3]},
            "mount_skills[1]",
            id="array-item",
        ),
        pytest.param("list_skills", [1, 2], "params", id="positional"),
    ],
)
def test_invalid_params_names_the_field(client: TestClient, method: str, params: Any, field: str) -> None:
    answer = post(client, call(method, params))
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"]["field"] == field
    assert answer["id"] == 1


@pytest.mark.parametrize(
    "params",
    [
        pytest.param(None, id="absent"),
        pytest.param({}, id="empty"),
        pytest.param([], id="empty-array"),
        pytest.param({"namespace": None, "cursor": None}, id="nulls"),
    ],
)
def test_absent_params_and_nulls_mean_defaults(client: TestClient, params: Any) -> None:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": "list_skills", "id": 1}
    if params is not None:
        body["params"] = params
    assert "result" in post(client, body)


def test_null_params_mean_defaults(client: TestClient) -> None:
    assert "result" in post(client, b'{"jsonrpc": "2.0", "method": "list_skills", "params": null, "id": 1}')


def test_body_over_the_limit_is_refused_clearly(client: TestClient, settings: Any) -> None:
    big = json.dumps(call("create_blob", {"content": "x" * settings.max_body_bytes, "kind": "text/plain"}))
    response = client.post("/rpc", content=big, headers=JSON_TYPE)
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == -32600
    assert error["data"]["max_body_bytes"] == settings.max_body_bytes
    assert "limit" in error["message"]


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    # The test app runs sandboxes in-process, on two slots (see conftest), on the suite's image.
    assert response.json() == {
        "status": "ok", "workers": {"total": 2, "free": 2, "unavailable": 0}, "queued": 0,
        "image": {"serving": current()},
    }


@pytest.mark.parametrize(
    "method, path",
    [pytest.param("GET", "/rpc", id="get-rpc"), pytest.param("POST", "/other", id="unknown-path")],
)
def test_http_misuse_is_4xx(client: TestClient, method: str, path: str) -> None:
    assert 400 <= client.request(method, path).status_code < 500


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\x00" * 100, id="nul-bytes"),
        pytest.param(b"[" * 10000, id="deep-nesting"),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"read_blob","params":{"blob_id":"../../etc/passwd"},"id":1}',
            id="path-as-blob-id",
        ),
        pytest.param(b'{"jsonrpc":"2.0","method":"' + b"m" * 100000 + b'","id":1}', id="huge-method"),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"list_skills","params":{"limit":1e400},"id":1}', id="huge-number"
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"list_skills","params":{"limit":99999999999999999999999},"id":1}',
            id="bigint",
        ),
    ],
)
def test_hostile_bodies_never_give_5xx(client: TestClient, body: bytes) -> None:
    response = client.post("/rpc", content=body, headers=JSON_TYPE)
    assert response.status_code < 500
    answer = response.json()
    assert "error" in answer or "result" in answer
    assert len(response.content) < 5000


# -- with a stand-in dispatcher ------------------------------------------------


def _app(dispatch: jsonrpc.Dispatch) -> TestClient:
    return TestClient(create_app(dispatch, max_body_bytes=1 << 20))


def test_internal_error_is_generic_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(method: str, params: msgspec.Raw) -> Any:
        raise RuntimeError("secret detail at /home/someone/wasmrun/x.py")

    with caplog.at_level(logging.ERROR, logger="wasmrun.rpc"), _app(broken) as client:
        answer = post(client, call("anything"))
    error = answer["error"]
    assert error["code"] == -32603
    assert "secret detail" not in json.dumps(answer) and "/home" not in json.dumps(answer)
    assert "ref" in error["message"]
    assert any("secret detail" in r.exc_text for r in caplog.records if r.exc_text)


def test_unencodable_result_is_an_internal_error() -> None:
    async def odd(method: str, params: msgspec.Raw) -> Any:
        return {"x": object()}

    with _app(odd) as client:
        assert post(client, call("anything"))["error"]["code"] == -32603


def test_batch_calls_run_concurrently() -> None:
    running = 0
    peak = 0

    async def slow(method: str, params: msgspec.Raw) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return {}

    with _app(slow) as client:
        answers = post(client, [call("x", id=i) for i in range(5)])
    assert [a["id"] for a in answers] == [0, 1, 2, 3, 4]
    assert peak == 5


def test_long_error_messages_are_cut() -> None:
    async def wordy(method: str, params: msgspec.Raw) -> Any:
        raise InvalidParams("x" * 100_000, field="x")

    with _app(wordy) as client:
        message = post(client, call("anything"))["error"]["message"]
    assert len(message) <= jsonrpc.MAX_MESSAGE_CHARS


def test_retry_after_is_the_longest_wait_the_answers_errors_ask_for() -> None:
    """The wire layer's Retry-After comes from the errors it answers (their `retry_after_s`):
    one call's, the longest of a batch's, a notification's (answered 204), none without."""
    waits = {"short": 3, "long": 9}

    async def limited(method: str, params: msgspec.Raw) -> Any:
        if method in waits:
            raise QuotaExceeded("quota exceeded: slow down", "runs_per_minute", 60, retry_after_s=waits[method])
        return {}

    with _app(limited) as client:
        one = client.post("/rpc", content=json.dumps(call("long")), headers=JSON_TYPE)
        assert one.status_code == 200
        assert int(one.headers["retry-after"]) == one.json()["error"]["data"]["retry_after_s"] == 9
        batch = client.post("/rpc", content=json.dumps([call("short", id=1), call("long", id=2), call("ok", id=3)]),
                            headers=JSON_TYPE)
        assert [a["error"]["data"]["retry_after_s"] for a in batch.json()[:2]] == [3, 9]
        assert batch.headers["retry-after"] == "9"
        quiet = client.post("/rpc", content=json.dumps({"jsonrpc": "2.0", "method": "short"}), headers=JSON_TYPE)
        assert quiet.status_code == 204 and quiet.headers["retry-after"] == "3"
        fine = client.post("/rpc", content=json.dumps(call("ok")), headers=JSON_TYPE)
        assert "retry-after" not in fine.headers


def _reference_duplicates(text: bytes) -> set[str]:
    """What a decoder that keeps every member says: the names repeated in the call object
    or in its (first) params object."""
    import json as stdjson

    def repeated(pairs: list[tuple[str, object]], prefix: str) -> set[str]:
        names = [name for name, _ in pairs]
        return {prefix + n for n in names if names.count(n) > 1}

    pairs = stdjson.loads(text, object_pairs_hook=lambda p: p)
    found = repeated(pairs, "")
    params = [v for k, v in pairs if k == "params"]
    if params and isinstance(params[0], list) and all(isinstance(p, tuple) for p in params[0]):
        found |= repeated(params[0], "params.")
    return found


def test_duplicate_members_are_found_as_a_full_decoder_finds_them() -> None:
    import json as stdjson
    import random

    from wasmrun.wire.jsonrpc import duplicate_member

    rng = random.Random(19)
    names = ["method", "params", "id", "jsonrpc", "name", "args", 'a"b', "a\\b", "é", "\u006d", "x y"]

    def value(depth: int) -> str:
        roll = rng.random()
        if depth > 2 or roll < 0.4:
            return stdjson.dumps(rng.choice([1, "s", "method", None, "a\\\"", [1]]))
        if roll < 0.7:
            return "[" + ",".join(value(depth + 1) for _ in range(rng.randint(0, 3))) + "]"
        return obj(depth + 1)

    def key(name: str) -> str:
        text = stdjson.dumps(name, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.2 and name.isascii() and name.isalpha():  # spelled with an escape
            text = f'"\\u{ord(name[0]):04x}{name[1:]}"'
        return text

    def obj(depth: int) -> str:
        members = [rng.choice(names) for _ in range(rng.randint(0, 4))]
        return "{" + ", ".join(f"{key(n)} : {value(depth)}" for n in members) + "}"

    for _ in range(3000):
        text = obj(0).encode()
        expected = _reference_duplicates(text)
        found = duplicate_member(text)
        assert (found is None) == (not expected), (text, found, expected)
        assert found is None or found in expected, (text, found, expected)


@pytest.mark.parametrize(
    "params",
    ['{"blob_id":"a","blob\\u005fid":"b"}', '{"a\\/b":1,"a/b":2}', '{"x\\bz":1,"x\\u0008z":2}'],
)
def test_a_member_spelled_twice_two_ways_is_found(params: str) -> None:
    """Through the cheap pre-check too: escapes that spell one name two ways."""
    from wasmrun.wire.jsonrpc import _may_repeat, duplicate_member

    body = ('{"jsonrpc":"2.0","id":1,"method":"read_blob","params":' + params + "}").encode()
    assert _may_repeat(body, params.encode())
    assert duplicate_member(body) is not None


class _CountedBytes(bytes):
    """A body that adds up the bytes `count` scans in it."""

    scanned = 0

    def count(self, *args: Any) -> int:  # type: ignore[override]
        _CountedBytes.scanned += len(self)
        return super().count(*args)


def test_many_members_in_a_large_body_are_checked_in_one_pass() -> None:
    """5,000 members of a 25 MB params object: the cheap check does not count each
    name over the whole body (minutes of the event loop), and a repeat is still found."""
    from wasmrun.wire.jsonrpc import _may_repeat, duplicate_member

    members = {f"k{i}": "x" * 5000 for i in range(5000)}
    params = json.dumps(members)
    body = _CountedBytes(('{"jsonrpc":"2.0","id":1,"method":"run_code","params":' + params + "}").encode())
    _CountedBytes.scanned = 0
    assert _may_repeat(body, params.encode())
    assert _CountedBytes.scanned < 10 * len(body)  # not a scan per member
    assert duplicate_member(bytes(body)) is None
    twice = bytes(body)[:-2] + b',"k7":1}}'
    assert duplicate_member(twice) == "params.k7"
