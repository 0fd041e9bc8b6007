"""First try succeeds (issue 24): the traps a model falls into on its first calls are
named in the result, never silent. A real `wasmrun serve`, driven over JSON-RPC, MCP
and the typed clients: the run contract's warnings, tracebacks on Timeout and
CPULimitExceeded, limits at the wrong level, tool texts that state this server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client as MCPClient

from tests.liveserver import LiveServer
from wasmrun.client import AsyncClient, Client, InvalidParams

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("first-try"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[Client]:
    with Client(server.base_url) as c:
        yield c


def _rpc(server: LiveServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=60).json()
    return answer


# -- 1. the run contract cannot fail silently ----------------------------------------

TRAPS = [
    pytest.param("def mian(args):\n    return 42\n", ["defines mian() but no main(args)", "Rename it to `def main(args):`"],
                 id="typo"),
    pytest.param("def Main(args):\n    return 42\n", ["defines Main() but no main(args)"], id="case"),
    pytest.param("def main_(args):\n    return 42\n", ["defines main_() but no main(args)"], id="underscore"),
    pytest.param("def run(args):\n    return 42\n", ["defines run() but no main(args)"], id="run"),
    pytest.param("rows = [1, 2]\ntotal = sum(rows)\n", ["last statement assigns total", "a last line `total`"],
                 id="assignment"),
    pytest.param("x = 2\nprint(x * 21)\n", ["last statement is print(...)", "logs_preview"], id="print"),
    pytest.param("def go():\n    return 1\nif __name__ == '__main__':\n    go()\n", ['`if __name__ == "__main__":`'],
                 id="main-guard"),
    pytest.param("def main(args):\n    total = 42\n", ["main() returned None", "forget a `return`"], id="no-return"),
]


@pytest.mark.parametrize(("code", "phrases"), TRAPS)
def test_traps_are_named_in_warnings(server: LiveServer, code: str, phrases: list[str]) -> None:
    run = _rpc(server, "run_code", {"language": "python", "code": code})["result"]
    assert run["status"] == "completed" and run["output"] is None
    text = "\n".join(run["warnings"])
    assert all(phrase in text for phrase in phrases), run["warnings"]
    assert "see warnings" in run["summary"]


def test_args_the_code_cannot_read(client: Client) -> None:
    import msgspec

    plain = client.run_code("x = 1\nx\n", args={"n": 3})
    assert plain.output == 1 and plain.warnings and "defines no main(args)" in plain.warnings[0]
    no_param = client.run_code("def main():\n    return 'ran'\n", args={"n": 3})
    assert no_param.output == "ran"  # called without args, as the code asks ...
    assert no_param.warnings and "main() takes no parameter" in no_param.warnings[0]  # ... and said so
    assert client.run_code("def main():\n    return 'ran'\n").warnings is msgspec.UNSET


def test_correct_code_has_no_warnings(server: LiveServer) -> None:
    for code, args in (("def main(args):\n    return args['x']\n", {"x": 1}), ("x = 21\nx * 2\n", {}),
                       ("import math\nmath.pi\n", {}), ("def main():\n    return 1\n", {})):
        run = _rpc(server, "run_code", {"language": "python", "code": code, "args": args})["result"]
        assert run["status"] == "completed" and "warnings" not in run, run


def test_an_entrypoint_that_names_nothing_says_what_is_there(server: LiveServer) -> None:
    run = _rpc(server, "run_code", {"language": "python", "code": "def handler(args):\n    return 1\n",
                                    "entrypoint": "handle"})["result"]
    assert run["error"]["type"] == "EntrypointNotFound"
    assert "did you mean 'handler'" in run["error"]["message"]
    run = _rpc(server, "run_code", {"language": "python", "code": "def a(x): pass\ndef b(y): pass\n",
                                    "entrypoint": "zzz"})["result"]
    assert "it defines 'a', 'b'" in run["error"]["message"]


def test_warnings_are_bounded_whatever_the_guest_sends(server: LiveServer) -> None:
    """The guest's reply is untrusted: user code cannot forge or flood warnings."""
    code = (
        "import _wasmrun\n"
        "def main(args):\n"
        "    _wasmrun.respond(b'W' + b'[' + b','.join([b'\"' + b'x' * 5000 + b'\"'] * 100) + b']\\nC1')\n"
        "    return 2\n"
    )
    run = _rpc(server, "run_code", {"language": "python", "code": code})["result"]
    assert run["status"] in ("completed", "failed")
    assert len(run.get("warnings", [])) <= 8 and all(len(w) <= 1000 for w in run.get("warnings", []))


def test_warnings_reach_mcp(server: LiveServer) -> None:
    async def call() -> mcp_types.CallToolResult:
        async with MCPClient(server.base_url + "/mcp") as mcp:
            return await mcp.call_tool("run_code", {"language": "python", "code": "def mian(args):\n    return 1\n"})

    result = asyncio.run(call())
    assert isinstance(result.structured_content, dict)
    assert "defines mian()" in result.structured_content["warnings"][0]
    text = result.content[0]
    assert isinstance(text, mcp_types.TextContent) and "warning: the code defines mian()" in text.text


# -- 2. errors carry the place; parameters at the wrong level ------------------------


def test_cpu_limit_says_which_loop(client: Client) -> None:
    code = ("def ok():\n    return 1\ndef spin():\n    n = 0\n    while True:\n        n += 1\n"
            "def main(args):\n    ok()\n    spin()\n")
    run = client.run_code(code, limits={"cpu_ms": 200})
    assert run.status == "failed" and run.error and run.error.type == "CPULimitExceeded"
    assert run.error.message.startswith("the run exceeded its CPU limit of 200 ms; it was stopped here:")
    # 3.11 stops on the loop's jump back (`while True:`), 3.15 on its body (the data image)
    assert 'line 9, in main' in run.error.message
    assert 'line 5, in spin' in run.error.message or 'line 6, in spin' in run.error.message


def test_timeout_in_a_sleep_says_where(client: Client) -> None:
    run = client.run_code("import time\ndef main(args):\n    time.sleep(30)\n", limits={"timeout_ms": 300})
    assert run.error and run.error.type == "Timeout"
    assert "line 3, in main" in run.error.message and "time.sleep(30)" in run.error.message


def test_code_that_swallows_the_stop_is_still_stopped(client: Client) -> None:
    code = ("def main(args):\n    n = 0\n    while True:\n        try:\n            while True:\n"
            "                n += 1\n        except BaseException:\n            pass\n")
    run = client.run_code(code, limits={"cpu_ms": 200, "timeout_ms": 20_000})
    assert run.error and run.error.type == "CPULimitExceeded"
    assert run.usage and run.usage.cpu_ms < 2_000  # stopped within the grace, not at the timeout
    assert "did not stop within 50 ms of being asked" in run.error.message
    returns = client.run_code(
        "def main(args):\n    n = 0\n    try:\n        while True:\n            n += 1\n"
        "    except BaseException:\n        return 'escaped'\n",
        limits={"cpu_ms": 200},
    )
    assert returns.status == "failed" and returns.error and returns.error.type == "CPULimitExceeded"
    assert "caught the request to stop" in returns.error.message


def test_a_c_level_loop_is_stopped_hard(client: Client) -> None:
    run = client.run_code("def main(args):\n    return sum(range(10**12))\n", limits={"cpu_ms": 200})
    assert run.error and run.error.type == "CPULimitExceeded"


def test_top_level_limits_are_moved_into_limits(server: LiveServer) -> None:
    run = _rpc(server, "run_code", {"language": "python", "code": "import time\ntime.sleep(5)\n", "timeout_ms": 200})
    assert run["result"]["error"]["type"] == "Timeout"
    both = _rpc(server, "run_code", {"language": "python", "code": "1", "timeout_ms": 200,
                                     "limits": {"timeout_ms": 300}})
    assert both["error"]["code"] == -32602 and both["error"]["data"]["field"] == "limits.timeout_ms"
    assert "give it once, as limits.timeout_ms" in both["error"]["message"]
    wrong = _rpc(server, "run_code", {"language": "python", "code": "1", "memory_mb": 1})
    assert wrong["error"]["code"] == -32602 and wrong["error"]["data"]["field"] == "limits.memory_mb"
    bad = _rpc(server, "run_code", {"language": "python", "code": "1", "timeout_ms": "soon"})
    assert bad["error"]["code"] == -32602 and "limits.timeout_ms" in bad["error"]["message"]


def test_execute_skill_takes_limits_in_both_shapes(server: LiveServer) -> None:
    blob = _rpc(server, "create_blob", {"content": "a\n1\n", "kind": "text/csv"})["result"]["blob_id"]
    base = {"name": "data.csv.profile", "args": {"blob_id": blob}, "input_blobs": [blob]}
    for extra in ({"timeout_ms": 20_000}, {"limits": {"timeout_ms": 20_000, "memory_mb": 128}},
                  {"timeout_ms": 20_000, "limits": {"timeout_ms": 20_000}}, {"cpu_ms": 20_000}):
        run = _rpc(server, "execute_skill", {**base, **extra})
        assert run["result"]["status"] == "completed", (extra, run)
    clash = _rpc(server, "execute_skill", {**base, "timeout_ms": 1000, "limits": {"timeout_ms": 2000}})
    assert clash["error"]["data"]["field"] == "limits.timeout_ms"
    over = _rpc(server, "execute_skill", {**base, "limits": {"memory_mb": 999_999}})
    assert over["error"]["data"]["field"] == "limits.memory_mb"


# -- 3. tool texts and the guide state this server -----------------------------------


def test_guide_covers_network_limits_and_modules(client: Client) -> None:
    guide = client.load_skills_protocol_guide().content
    for phrase in ("## This server", "main(args)", "/blobs/<id>", "stateless", "Network:", "timeout_ms 30000",
                   "run_module", "Importable top-level modules:", "sqlite3", "delete_blob", "create_skill"):
        assert phrase in guide, phrase


# -- 5. the typed clients --------------------------------------------------------------


def test_client_limits_and_delete_blob(client: Client) -> None:
    run = client.run_code("def main(args):\n    return bytearray(200 << 20) and 1\n", limits={"memory_mb": 64})
    assert run.error and run.error.type in ("MemoryError", "MemoryLimitExceeded")
    blob = client.create_blob(b"\x00\x01", kind="application/octet-stream")
    assert client.delete_blob(blob.blob_id).deleted is True
    with pytest.raises(InvalidParams, match="does not exist"):  # deleted: gone
        client.delete_blob(blob.blob_id)
    with pytest.raises(InvalidParams) as refused:
        client.run_code("1", limits={"memory_mb": 10**9})
    assert refused.value.data["field"] == "limits.memory_mb"
    with pytest.raises(TypeError, match="unknown limits"):
        client.run_code("1", limits={"memroy_mb": 64})


def test_async_client(server: LiveServer) -> None:
    async def go() -> list[Any]:
        async with AsyncClient(server.base_url) as client:
            runs = await asyncio.gather(*(client.run_code(f"{i} * 2", limits={"timeout_ms": 10_000}) for i in range(3)))
            skill = await client.execute_skill("text.stats", args={"text": "a b"}, limits={"cpu_ms": 5_000})
            blob = await client.create_blob("x")
            deleted = await client.delete_blob(blob.blob_id)
            return [[r.output for r in runs], skill.status, deleted.deleted]

    assert asyncio.run(go()) == [[0, 2, 4], "completed", True]


@pytest.mark.parametrize("params", [
    {"timeout_ms": 10**30},
    {"timeout_ms": -1},
    {"timeout_ms": 0.5},
    {"timeout_ms": {"deep": [[[[1]]]]}},
    {"timeout_ms": 5, "limits": 3},
    {"memory_mb": "\\udcff"},
    {"limits": {"limits": {"timeout_ms": 5}}},
    {"entrypoint": "m" * 5000},
    {"entrypoint": "main\x00"},
])
def test_hostile_limits_and_entrypoints_are_clear_errors(server: LiveServer, params: dict[str, Any]) -> None:
    body = {"language": "python", "code": "def main(args):\n    return 1\n", **params}
    answer = _rpc(server, "run_code", body)
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["data"]["field"].split(".")[0] in ("limits", "entrypoint", "params"), answer
    assert _rpc(server, "run_code", {"language": "python", "code": "1"})["result"]["output"] == 1  # still serving


@pytest.mark.parametrize(("reply", "warnings", "rest"), [
    (b"W" + b"[" + b",".join([b'"' + b"x" * 5000 + b'"'] * 100) + b"]\nC1", ["x" * 1000] * 8, b"C1"),
    (b'W["a"]', [], b""),  # no reply after the warnings: malformed, a crash
    (b'W{"a":1}\nC1', [], b"C1"),  # not a list: dropped
    (b'W[[[[["deep"]]]]]\nC1', [], b"C1"),
    (b'W["\\ud800"]\nC1', [], b"C1"),  # a lone surrogate: dropped, never passed on
    (b"W\xff\xfe\nC1", [], b"C1"),
])
def test_guest_warnings_are_bounded_and_never_fatal(reply: bytes, warnings: list[str], rest: bytes) -> None:
    from wasmrun.sandbox import guest_warnings

    assert guest_warnings(reply) == (warnings, rest)


def test_runs_stopped_beside_runs_that_finish(server: LiveServer) -> None:
    """The epoch is engine-wide: a stop request reaches only the run over its limit."""
    spin = "def main(args):\n    n = 0\n    while True:\n        n += 1\n"

    async def go() -> list[Any]:
        async with AsyncClient(server.base_url) as client:
            return list(await asyncio.gather(
                *(client.run_code(spin, limits={"cpu_ms": 200}) for _ in range(2)),
                *(client.run_code("import time\ndef main(args):\n    time.sleep(0.3)\n    return 'ok'\n") for _ in range(2)),
            ))

    stopped_a, stopped_b, fine_a, fine_b = asyncio.run(go())
    for run in (stopped_a, stopped_b):
        assert run.error and run.error.type == "CPULimitExceeded"
        assert "line 3, in main" in run.error.message or "line 4, in main" in run.error.message  # the loop (3.11, 3.15)
    assert fine_a.output == fine_b.output == "ok"
