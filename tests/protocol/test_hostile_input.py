"""Hostile client input, over HTTP: every method, every param, many bad values.

Whatever a client sends, the answer is JSON, a client error (-32700, -32600 or
-32602 naming the field; or an in-band failed run), never -32603, and the
server keeps serving.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from wasmrun.blobs.store import FileBlobStore
from wasmrun.protocol.methods import METHODS
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings
from wasmrun.wire.jsonrpc import MAX_DEPTH

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

MARK = "\x00HOSTILE\x00"
MARK_JSON = json.dumps(MARK).encode()


def nested_array(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


def nested_object(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


# Raw JSON text (bytes), so that values Python's json would not write can be sent.
HOSTILE: dict[str, bytes] = {
    "deeper-than-wire-limit": nested_array(MAX_DEPTH + 40),
    "deep-array": nested_array(MAX_DEPTH - 8),
    "deep-object": nested_object(MAX_DEPTH - 8),
    "1e400": b"1e400",
    "-1e400": b"-1e400",
    "big-int": b"1" + b"0" * 30,
    "negative-big-int": b"-1" + b"0" * 30,
    "2**64": b"18446744073709551616",
    "int-4300-digits": b"9" * 4300,
    "int-5000-digits": b"9" * 5000,
    "float-5000-digits": b"1" * 5000 + b".5",
    "zero": b"0",
    "negative": b"-1",
    "float": b"1.5",
    "bool": b"true",
    "empty-string": b'""',
    "string-5000": json.dumps("a" * 5000).encode(),
    "string-100k": json.dumps("b" * 100_000).encode(),
    "dotdot": b'"../../../etc/passwd"',
    "absolute": b'"/etc/passwd"',
    "nul": b'"a\\u0000b"',
    "control-chars": b'"a\\nb\\tc\\u001b"',
    "lone-surrogate": b'"\\ud800"',
    "surrogate-pair": b'"\\ud83d\\ude00"',
    "arabic-digits": json.dumps("1.0.1\u0663").encode(),
    "invalid-utf8": b'"\xff\xfe"',
    "overlong-utf8": b'"\xc0\xaf"',
    "empty-object": b"{}",
    "empty-array": b"[]",
    "wide-array": b"[" + b"1," * 5000 + b"1]",
    "wide-object": b"{" + b",".join(b'"k%d":1' % i for i in range(2000)) + b"}",
    "long-segments": json.dumps("/".join(["x" * 300] * 3)).encode(),
    "many-segments": json.dumps("/".join(["d"] * 600)).encode(),
}

GOOD_CODE = "def main(args):\n    return 1\n"
SKILL_MD = "---\nname: Hostile\n---\n# Hostile\n"


def baseline(method: str, blob_id: str) -> dict[str, Any]:
    return {
        "list_skills": {},
        "describe_skill": {"name": "text.stats"},
        "read_skill_file": {"name": "text.stats", "path": "SKILL.md"},
        "execute_skill": {"name": "text.stats", "args": {"text": "a b"}},
        # a tool it never calls: the hostile values of tools.0.* have a tool to go in
        "run_code": {"language": "python", "code": GOOD_CODE,
                     "tools": [{"name": "lookup", "description": "Look a word up.", "parameters": {"type": "object"}}]},
        "create_blob": {"content": "x", "kind": "text/plain"},
        "read_blob": {"blob_id": blob_id},
        "delete_blob": {"blob_id": "blob:" + "0" * 32},  # none such: the sweep must not delete blob_id
        "load_skills_protocol_guide": {},
        "create_session": {"language": "python", "idle_timeout_s": 1},
        "fork_session": {"session_id": "ses_" + "0" * 32},  # none such: a client error, whatever else is sent
        "close_session": {"session_id": "ses_" + "0" * 32},
        "interrupt_session": {"session_id": "ses_" + "0" * 32},
        "list_sessions": {},
        "run_command": {"command": "true"},
        # none such: a client error, whatever else is sent
        "submit_tool_results": {"run_id": "run_" + "0" * 16, "results": [{"call_id": "call_" + "0" * 16, "result": 1}]},
        "create_skill": {
            "manifest": {
                "name": "user.hostile",
                "version": "0.1.0",
                "description": "Hostile.",
                "kind": "action",
                "runtime": {"language": "python", "entrypoint": "main.py"},
            },
            "skill_md": SKILL_MD,
            "files": [{"path": "main.py", "content": GOOD_CODE}],
        },
    }[method]


# Where a hostile value goes, besides every top-level param of every method.
NESTED: dict[str, list[tuple[Any, ...]]] = {
    "execute_skill": [("args", "text"), ("args", "top_n"), ("input_blobs", 0)],
    "run_code": [
        ("args", "x"),
        ("mount_skills", 0),
        ("input_blobs", 0),
        ("packages", 0),
        ("tools", 0, "name"),
        ("tools", 0, "description"),
        ("tools", 0, "parameters"),
        *[("limits", name) for name in ("timeout_ms", "memory_mb", "cpu_ms", "workspace_mb", "output_bytes")],
    ],
    "create_session": [("packages", 0)],
    "run_command": [("packages", 0)],
    "submit_tool_results": [("results", 0, "call_id"), ("results", 0, "result"), ("results", 0, "error")],
    "create_skill": [
        ("manifest", "name"),
        ("manifest", "version"),
        ("manifest", "description"),
        ("manifest", "namespace"),
        ("manifest", "tags"),
        ("manifest", "inputs"),
        ("manifest", "inputs", "x"),
        ("manifest", "runtime", "entrypoint"),
        ("manifest", "runtime", "export"),
        ("manifest", "permissions", "secrets"),
        ("manifest", "packages"),
        ("manifest", "packages", "requires"),
        ("manifest", "packages", "requires", 0),
        ("files", 0, "path"),
        ("files", 0, "content"),
        ("files", 0, "encoding"),
    ],
}


def points() -> Iterator[tuple[str, tuple[Any, ...]]]:
    for method, entry in METHODS.items():
        yield method, ()  # the whole params
        fields = entry.params.__struct_fields__ or ("unknown_member",)
        for name in fields:
            yield method, (name,)
        for path in NESTED.get(method, []):
            yield method, path


CASES = [
    pytest.param(method, path, value, id=f"{method}-{'.'.join(map(str, path)) or 'params'}-{label}")
    for method, path in points()
    for label, value in HOSTILE.items()
]


def put(params: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    target: Any = params
    for step, after in zip(path[:-1], path[1:], strict=True):
        if isinstance(target, dict):
            target = target.setdefault(step, [] if isinstance(after, int) else {})
        else:
            target = target[step]
    if isinstance(target, list) and path[-1] >= len(target):
        target.append(value)
    else:
        target[path[-1]] = value
    return params


@pytest.fixture(scope="module")
def hostile_client(
    tmp_path_factory: pytest.TempPathFactory, blob_store: FileBlobStore, executor: InProcessExecutor
) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("hostile-data"), skills_dirs=(BUNDLED_SKILLS,), workers=2
    )
    with TestClient(create_app(assemble(settings, blobs=blob_store, executor=executor)), base_url="http://localhost") as client:
        yield client


@pytest.fixture(scope="module")
def blob_id(blob_store: FileBlobStore) -> str:
    return blob_store.create(b"region,sales\nnorth,1\n", "text/csv")


def test_the_sweep_covers_every_method() -> None:
    assert {method for method, _ in points()} == set(METHODS)


@pytest.mark.parametrize("method, path, value", CASES)
def test_hostile_value_is_a_client_error(
    hostile_client: TestClient, blob_id: str, method: str, path: tuple[Any, ...], value: bytes
) -> None:
    check_hostile_value(hostile_client, blob_id, method, path, value)


def check_hostile_value(
    hostile_client: TestClient, blob_id: str, method: str, path: tuple[Any, ...], value: bytes
) -> None:
    """The answer to `method` with `value` at `path` is a client error or a result, never -32603."""
    params = put(baseline(method, blob_id), path, MARK)
    template = json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()
    body = template.replace(MARK_JSON, value)
    response = hostile_client.post("/rpc", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    answer = json.loads(response.content.decode("utf-8"))  # strict: valid UTF-8 and JSON
    assert answer["jsonrpc"] == "2.0"
    if "error" in answer:
        error = answer["error"]
        assert error["code"] in (-32700, -32600, -32602), error
        if error["code"] == -32602:
            assert isinstance(error["data"]["field"], str) and error["data"]["field"], error
        if error["code"] == -32700:
            assert answer["id"] is None
        else:
            assert answer["id"] == 7
    else:
        assert answer["id"] == 7
        result = answer["result"]
        if method in ("run_code", "execute_skill"):
            assert result["status"] in ("completed", "failed")
            if result["status"] == "failed":
                assert result["error"]["type"] not in ("SandboxError", "WorkerCrashed"), result["error"]
    # Still serving.
    still = hostile_client.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "list_skills"})
    assert "result" in still.json()


# -- the cases the review found, one by one --------------------------------------


def rpc_raw(client: TestClient, body: bytes) -> dict[str, Any]:
    response = client.post("/rpc", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    answer: dict[str, Any] = json.loads(response.content.decode("utf-8"))
    return answer


def call(method: str, params_json: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":3,"method":"' + method.encode() + b'","params":' + params_json + b"}"


def test_a_body_of_100k_brackets_is_a_parse_error(client: TestClient) -> None:
    error = rpc_raw(client, b"[" * 100_000)["error"]
    assert error["code"] == -32700
    assert "nest deeper" in error["message"]


def test_args_nested_2000_deep_are_a_parse_error(client: TestClient) -> None:
    body = call("run_code", b'{"language":"python","code":"","args":{"x":' + nested_object(2000) + b"}}")
    answer = rpc_raw(client, body)
    assert answer["error"]["code"] == -32700
    assert answer["error"]["data"] == {"max_depth": MAX_DEPTH}


def test_a_cursor_decoding_to_deep_nesting_is_invalid_params(client: TestClient) -> None:
    cursor = base64.urlsafe_b64encode(b"[" * 1000 + b"]" * 1000).decode().rstrip("=")
    body = call("list_skills", json.dumps({"cursor": cursor}).encode())
    error = rpc_raw(client, body)["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "cursor")


@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"1" + b"0" * 400 + b".5"])
def test_a_number_out_of_float_range_names_args(client: TestClient, number: bytes) -> None:
    body = call("run_code", b'{"language":"python","code":"","args":{"x":[' + number + b"]}}")
    error = rpc_raw(client, body)["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "args")


def test_invalid_utf8_inside_a_string_is_a_parse_error(client: TestClient) -> None:
    answer = rpc_raw(client, call("list_skills", b'{"namespace":"\xff\xfe"}'))
    assert answer["error"]["code"] == -32700
    assert "UTF-8" in answer["error"]["message"]


def test_an_id_that_is_not_utf8_gets_a_json_answer(client: TestClient) -> None:
    answer = rpc_raw(client, b'{"jsonrpc":"2.0","id":"\xff","method":"list_skills"}')
    assert answer["error"]["code"] == -32700
    assert answer["id"] is None


def test_a_5000_character_path_names_the_path(rpc: Any) -> None:
    error = rpc("read_skill_file", {"name": "text.stats", "path": "a" * 5000})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "path")
    assert "a" * 200 not in error["message"]  # the message shows a cut of it


def instruction_skill(**manifest: Any) -> dict[str, Any]:
    doc = {"name": "user.probe", "version": "1.0.0", "description": "d", "kind": "instruction"}
    doc.update(manifest)
    return doc


def test_a_300_character_file_name_names_the_file(rpc: Any, settings: Settings) -> None:
    files = [{"path": "a" * 300, "content": "x"}]
    error = rpc("create_skill", {"manifest": instruction_skill(), "skill_md": "hi", "files": files})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "files[0].path")
    assert not list((settings.skills_home / ".staging").glob("*/*"))


def test_a_version_of_300_characters_is_invalid(rpc: Any) -> None:
    manifest = instruction_skill(version="1.0.0-" + "a" * 300)
    error = rpc("create_skill", {"manifest": manifest, "skill_md": "hi"})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "manifest")
    assert "longer than" in error["message"]


def test_non_ascii_digits_are_not_a_version(rpc: Any) -> None:
    error = rpc("create_skill", {"manifest": instruction_skill(version="1.0.1\u0663"), "skill_md": "hi"})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "manifest")
    assert "semantic version" in error["message"]
    error = rpc("describe_skill", {"name": "text.stats", "version": "0.1.\u0660"})["error"]
    assert error["code"] == -32602


@pytest.mark.parametrize("depth, code", [(600, -32700), (40, -32602)])
def test_manifest_inputs_nested_deep(client: TestClient, depth: int, code: int) -> None:
    manifest = json.dumps(instruction_skill(inputs={"x": MARK})).encode().replace(MARK_JSON, nested_object(depth))
    error = rpc_raw(client, call("create_skill", b'{"skill_md":"hi","manifest":' + manifest + b"}"))["error"]
    assert error["code"] == code
    if code == -32602:
        assert error["data"]["field"] == "manifest"
        assert "deeper than" in error["message"]


@pytest.mark.parametrize(
    "front",
    [
        pytest.param("a: " + "[" * 5000 + "]" * 5000, id="flow-5000"),
        pytest.param("".join(" " * i + "k:\n" for i in range(5000)), id="block-5000"),
        pytest.param("a: " + "[" * 5000, id="unclosed-5000"),
    ],
)
def test_frontmatter_nested_5000_deep_names_skill_md(rpc: Any, front: str) -> None:
    params = {"manifest": instruction_skill(), "skill_md": f"---\n{front}\n---\nbody"}
    error = rpc("create_skill", params)["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "skill_md")


def test_base64_with_non_ascii_characters_is_invalid_params(rpc: Any) -> None:
    error = rpc("create_blob", {"content": "é===", "kind": "text/plain", "encoding": "base64"})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "content")
    files = [{"path": "x.bin", "content": "é===", "encoding": "base64"}]
    error = rpc("create_skill", {"manifest": instruction_skill(), "skill_md": "hi", "files": files})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "files[0].content")


def test_operator_skill_with_deep_toml_is_skipped_and_the_server_starts(tmp_path: Path) -> None:
    extra = tmp_path / "operator"
    bad = extra / "deep"
    bad.mkdir(parents=True)
    (bad / "skill.toml").write_text(
        'name = "op.deep"\nversion = "0.1.0"\ndescription = "d"\nkind = "instruction"\n'
        "tags = " + "[" * 5000 + "]" * 5000 + "\n"
    )
    (bad / "SKILL.md").write_text("# deep\n")
    settings = Settings(data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS, extra), workers=1)
    from wasmrun.registry.store import DirectoryRegistry

    registry = DirectoryRegistry(settings.skills_dirs, settings.skills_home)
    names = {s.name for s in registry.skills()}
    assert "op.deep" not in names and "text.stats" in names


@pytest.mark.parametrize("member", ["jsonrpc", "method", "id", "params"])
@pytest.mark.parametrize("label", list(HOSTILE))
def test_hostile_envelope_members_get_a_json_answer(hostile_client: TestClient, member: str, label: str) -> None:
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": 9, "method": "list_skills", "params": {}}
    envelope[member] = MARK
    body = json.dumps(envelope).encode().replace(MARK_JSON, HOSTILE[label])
    response = hostile_client.post("/rpc", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    # parse_int: an id is echoed byte for byte, and a 5000-digit one is JSON Python would refuse.
    answer = json.loads(response.content.decode("utf-8"), parse_int=lambda t: int(t) if len(t) < 4000 else t)
    if "error" in answer:
        assert answer["error"]["code"] in (-32700, -32600, -32601, -32602), answer


@pytest.mark.parametrize("label", list(HOSTILE))
def test_a_batch_with_hostile_calls_answers_each(hostile_client: TestClient, label: str) -> None:
    good = json.dumps({"jsonrpc": "2.0", "id": "good", "method": "list_skills"}).encode()
    hostile = json.dumps(
        {"jsonrpc": "2.0", "id": "bad", "method": "run_code", "params": {"language": "python", "code": GOOD_CODE,
                                                                       "args": {"x": MARK}}}
    ).encode().replace(MARK_JSON, HOSTILE[label])
    notification = json.dumps({"jsonrpc": "2.0", "method": "list_skills", "params": {"namespace": MARK}}).encode()
    notification = notification.replace(MARK_JSON, HOSTILE[label])
    body = b"[" + b",".join([good, hostile, notification]) + b"]"
    response = hostile_client.post("/rpc", content=body, headers={"content-type": "application/json"})
    answer = json.loads(response.content.decode("utf-8"))
    if isinstance(answer, dict):  # the whole body refused: only a parse error may do that
        assert answer["error"]["code"] == -32700
        return
    by_id = {a["id"]: a for a in answer}
    assert set(by_id) == {"good", "bad"}
    assert "result" in by_id["good"]
    bad = by_id["bad"]
    assert "result" in bad or bad["error"]["code"] == -32602, bad


def test_a_body_of_a_million_arrays_is_refused_before_decoding(client: TestClient) -> None:
    from wasmrun.wire.jsonrpc import MAX_CONTAINERS

    many = b"[" + b"[]," * MAX_CONTAINERS + b"[]]"
    answer = rpc_raw(client, call("run_code", b'{"language":"python","code":"","args":{"x":' + many + b"}}"))
    assert answer["error"]["code"] == -32700
    assert answer["error"]["data"] == {"max_containers": MAX_CONTAINERS}


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def test_the_depth_scan_agrees_with_decoding() -> None:
    """nests_deeper_than reads raw bytes; it must agree with the decoded document,
    brackets, quotes and backslashes inside strings included."""
    import random

    from wasmrun.wire.jsonrpc import nests_deeper_than

    rng = random.Random(7)
    tricky = ["x", '"[{', "\\", '\\"[', "]]", "", '"', "}{", "\\\\\"]"]

    def document(level: int) -> Any:
        roll = rng.random()
        if level > 10 or roll < 0.3:
            return rng.choice([1, None, *tricky])
        if roll < 0.65:
            return [document(level + 1) for _ in range(rng.randint(0, 4))]
        return {rng.choice(tricky) + str(i): document(level + 1) for i in range(rng.randint(0, 4))}

    for _ in range(400):
        doc = document(0)
        text, depth = json.dumps(doc).encode(), _depth(doc)
        for limit in range(12):
            assert nests_deeper_than(text, limit) == (depth > limit), (text, limit)
