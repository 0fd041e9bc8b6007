"""What a new user meets first, against a real server: a call with several wrong params
gets one error naming each (an unknown member with the one it likely meant), over /rpc
and MCP; `wasmrun session create` prints the id its help promises; `from wasmrun import
Client` works as the docs write it, without making `import wasmrun` load the client."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client as MCPClient

from tests.liveserver import LiveServer, wasmrun_env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("first-call"))
    yield srv
    srv.stop()


def call(server: LiveServer, method: str, params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=120).json()
    return reply


def test_every_wrong_member_is_named_in_one_error(server: LiveServer) -> None:
    error = call(server, "run_code", {"langauge": "python", "code": 5, "limits": {"timout_ms": 10}})["error"]
    assert error["code"] == -32602
    message = error["message"]
    assert "missing required field `language`" in message, message  # language stays required (the spec)
    assert "unknown field `langauge`: did you mean `language`?" in message, message
    assert "`code`: Expected `str`, got `int`" in message, message
    assert "unknown field `timout_ms`: did you mean `timeout_ms`?" in message, message
    assert error["data"]["fields"] == ["language", "code", "limits.timout_ms", "langauge"], error
    assert error["data"]["field"] == "language"

    # Every method: create_session, read_blob, describe_skill ...
    for method, params, wanted in (
        ("create_session", {"langage": "python"}, "did you mean `language`?"),
        ("read_blob", {"blobid": "x"}, "did you mean `blob_id`?"),
        ("describe_skill", {"nme": "data.csv.profile"}, "did you mean `name`?"),
        ("list_skills", {"namespaces": "data"}, "did you mean `namespace`?"),
    ):
        message = call(server, method, params)["error"]["message"]
        assert wanted in message, (method, message)
    # One problem: the error reads as before, naming its field.
    single = call(server, "run_code", {"code": "1"})["error"]
    assert single["message"] == "invalid params: Object missing required field `language` (at `language`)"
    assert single["data"] == {"field": "language"}
    # A member nobody could mean: the members are listed instead of a guess.
    stray = call(server, "read_blob", {"blob_id": "x", "qqqqqqqq": 1})["error"]["message"]
    assert "unknown field `qqqqqqqq`; the members are: blob_id, mode, max_bytes" in stray, stray
    # Thousands of stray members: a bounded error, and the server answers on.
    flood = call(server, "run_code", {f"k{i}": i for i in range(5000)})["error"]
    assert flood["code"] == -32602 and len(flood["message"]) < 4000 and len(flood["data"]["fields"]) == 20
    assert call(server, "run_code", {"language": "python", "code": "1 + 1"})["result"]["output"] == 2


def test_mcp_names_the_same_problems(server: LiveServer) -> None:
    async def called() -> str:
        async with MCPClient(server.base_url + "/mcp") as mcp:
            result = await mcp.call_tool("run_code", {"langauge": "python", "code": "1"})
            assert result.is_error
            return str(result.content[0].text)  # type: ignore[union-attr]

    text = asyncio.run(called())
    assert "did you mean `language`?" in text and "missing required field `language`" in text, text


def _cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmrun", "session", "--url", server.base_url, *args],
                          env=wasmrun_env(), capture_output=True, text=True, timeout=120)


def test_session_create_prints_the_id_its_help_promises(server: LiveServer, tmp_path: Path) -> None:
    helped = subprocess.run([sys.executable, "-m", "wasmrun", "session", "create", "--help"], env=wasmrun_env(),
                            capture_output=True, text=True, timeout=60).stdout
    assert "print its session_id" in helped
    created = _cli(server, "create")
    assert created.returncode == 0, created.stderr
    session_id = created.stdout.strip()
    assert session_id.startswith("ses_") and "\n" not in session_id, created.stdout
    code = tmp_path / "cell.py"
    code.write_text("x = 20\nx * 2\n")
    ran = _cli(server, "run", session_id, str(code))
    assert ran.returncode == 0 and '"output": 40' in ran.stdout, ran.stdout
    forked = _cli(server, "fork", session_id)
    assert forked.stdout.strip().startswith("ses_") and forked.stdout.strip() != session_id, forked.stdout
    as_json = _cli(server, "create", "--json")
    assert '"session_id": "ses_' in as_json.stdout and '"expires_at"' in as_json.stdout, as_json.stdout


def test_the_client_imports_from_the_package_as_the_docs_write_it(server: LiveServer) -> None:
    script = (
        "import sys, wasmrun\n"
        "assert 'wasmrun.client' not in sys.modules and 'msgspec' not in sys.modules, 'import wasmrun is not cheap'\n"
        "from wasmrun import Client, AsyncClient\n"
        f"with Client({server.base_url!r}) as c:\n"
        "    print(c.run_code('6 * 7').output)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=wasmrun_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr
