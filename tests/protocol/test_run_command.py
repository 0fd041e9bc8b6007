"""run_command (docs/commands.md): a command line run by the guest's shell, over /rpc, in a
session, through the typed client, the `wasmrun exec` command and MCP's own client, against
a live `wasmrun serve`; hostile params are refused naming the field and the server keeps
serving. The shell itself (its commands, bash fidelity) is tests/sandbox/test_commands_guest.py's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client as MCPClient

from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.client import Client

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("commands-data"))
    yield srv
    srv.stop()


def rpc(server: LiveServer, method: str, **params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=120).json()
    return reply


def ran(server: LiveServer, **params: Any) -> dict[str, Any]:
    reply = rpc(server, "run_command", **params)
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def test_a_command_line_answers_its_exit_code_and_its_two_streams(server: LiveServer) -> None:
    got = ran(server, command="echo out; echo err >&2; ls / | grep -c work; exit 3")
    assert (got["status"], got["exit_code"], got["stdout"], got["stderr"]) == ("completed", 3, "out\n1\n", "err\n")
    assert got["summary"].startswith("The command exited 3 after ") and "'err'" in got["summary"]
    assert "displays" not in got  # the exit code is not a display of the command's
    ok = ran(server, command="true && echo yes || echo no")
    assert (ok["exit_code"], ok["stdout"], ok["summary"].endswith("ms.")) == (0, "yes\n", True)


def test_an_argv_is_words_not_shell_syntax(server: LiveServer) -> None:
    got = ran(server, command=["printf", "[%s]", "a b", "$HOME", "*", "; rm -rf /"])
    assert (got["exit_code"], got["stdout"]) == (0, "[a b][$HOME][*][; rm -rf /]")


def test_cwd_env_and_stdin_reach_the_command(server: LiveServer) -> None:
    got = ran(server, command="mkdir -p /tmp/w && cd /tmp/w && pwd && echo \"$GREETING\" && wc -l",
              env={"GREETING": "hello there"}, stdin="one\ntwo\n")
    assert (got["exit_code"], got["stdout"]) == (0, "/tmp/w\nhello there\n2\n")
    there = ran(server, command="pwd", cwd="/tmp")
    assert there["stdout"] == "/tmp\n"
    binary = ran(server, command="wc -c", stdin="a\x00b\n")  # stdin is data: a NUL passes
    assert (binary["exit_code"], binary["stdout"].strip()) == (0, "4")
    missing = ran(server, command="pwd", cwd="/no/such/folder")
    assert missing["exit_code"] == 1 and "No such file or directory" in missing["stderr"]


def test_in_a_session_files_carry_over_and_its_globals_stay_the_users(server: LiveServer) -> None:
    sid = rpc(server, "create_session", language="python")["result"]["session_id"]
    try:
        rpc(server, "run_code", language="python", code="main = 'mine'\njson = 'also mine'", session_id=sid)
        wrote = ran(server, command="printf 'region,v\\nnorth,1\\nsouth,2\\n' > data.csv && wc -l < data.csv",
                    session_id=sid)
        assert (wrote["exit_code"], wrote["stdout"].strip()) == (0, "3")
        seen = rpc(server, "run_code", language="python", session_id=sid,
                   code="(open('data.csv').read().count('\\n'), main, json)")["result"]
        assert seen["output"] == [3, "mine", "also mine"], seen
        # and the other way: what the code wrote, the command reads, python included
        rpc(server, "run_code", language="python", code="open('notes.txt', 'w').write('from code\\n')", session_id=sid)
        back = ran(server, command="cat notes.txt; python -c 'import sys; print(sys.argv[1:])' a b", session_id=sid)
        assert back["stdout"] == "from code\n['a', 'b']\n"
    finally:
        rpc(server, "close_session", session_id=sid)


def test_a_timeout_fails_the_run_naming_the_command_not_the_programs_insides(server: LiveServer) -> None:
    got = ran(server, command="sleep 30", timeout_ms=500)
    assert got["status"] == "failed" and "exit_code" not in got
    assert got["error"]["type"] == "Timeout"
    assert "while running the command 'sleep 30'" in got["error"]["message"]
    assert "__import__" not in got["error"]["message"] and "runtime/commands.py" not in got["error"]["message"]


def test_input_blobs_and_skills_are_mounted_as_for_run_code(server: LiveServer) -> None:
    blob = rpc(server, "create_blob", content="region,v\nnorth,1\nsouth,2\n", kind="text/csv")["result"]["blob_id"]
    got = ran(server, command=f"wc -l < /blobs/{blob} && ls /skills", input_blobs=[blob], mount_skills=["text.stats"])
    assert got["exit_code"] == 0 and got["stdout"].split() == ["3", "text.stats"], got
    unknown = rpc(server, "run_command", command="ls /blobs", input_blobs=["blob:" + "0" * 32])
    assert unknown["error"]["code"] == -32602 and unknown["error"]["data"]["field"].startswith("input_blobs")


def test_a_command_not_found_is_127_with_a_hint(server: LiveServer) -> None:
    got = ran(server, command="gcc main.c")
    assert got["exit_code"] == 127 and "gcc: command not found" in got["stderr"] and "hint:" in got["stderr"]


@pytest.mark.parametrize(("params", "field"), [
    ({"command": "echo a\x00b"}, "command"),
    ({"command": ["echo", "ok", "a\x00b"]}, "command[2]"),
    ({"command": "x" * (1024 * 1024 + 1)}, "command"),
    ({"command": ["w"] * 10_001}, "command"),
    ({"command": []}, "command"),
    ({"command": ""}, "command"),
    ({"command": 42}, "command"),
    ({"command": {"sh": "ls"}}, "command"),
    ({"command": "ls", "cwd": "/tmp\x00/x"}, "cwd"),
    ({"command": "ls", "cwd": "/" + "a" * 5000}, "cwd"),
    ({"command": "ls", "env": {"A-B": "x"}}, "env"),
    ({"command": "ls", "env": {"A": 1}}, "env"),
    ({"command": "ls", "env": {"A": "x\x00y"}}, "env.A"),
    ({"command": "ls", "env": {f"V{i}": "x" for i in range(1001)}}, "env"),
    ({"command": "ls", "limits": {"timeout_ms": 10**30}}, "limits.timeout_ms"),
    ({"command": "ls", "shell": "zsh"}, "shell"),
])
def test_hostile_params_are_refused_naming_the_field(server: LiveServer, params: dict[str, Any], field: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "run_command", "params": params})
    reply = httpx2.post(server.endpoint, content=body, headers={"content-type": "application/json"}, timeout=60).json()
    assert reply["error"]["code"] == -32602, reply
    named = reply["error"]["data"]["field"]
    assert named == field or named.startswith(field + "["), reply["error"]  # env[...]: a member of env
    assert "Traceback" not in reply["error"]["message"]


@pytest.mark.parametrize("params", [{"command": "echo \ud800"}, {"command": "ls", "stdin": "\udfff"}])
def test_a_lone_surrogate_is_refused_by_the_wire(server: LiveServer, params: dict[str, Any]) -> None:
    """JSON's \\ud800 escapes text with no UTF-8 form: the body does not parse, whatever the method."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "run_command", "params": params})
    reply = httpx2.post(server.endpoint, content=body, headers={"content-type": "application/json"}, timeout=60).json()
    assert reply["error"]["code"] == -32700, reply


def test_the_server_keeps_serving_after_hostile_commands(server: LiveServer) -> None:
    for command in (":(){ :|:& };:", "echo " + "$(" * 300 + "x" + ")" * 300, "cat /dev/zero | head -c 10",
                    "ls /proc /dev /../../etc", "ln -s /etc/passwd p; cat p", "touch " + "n" * 5000):
        got = ran(server, command=command, timeout_ms=20_000)
        assert got["status"] in ("completed", "failed"), got
        assert "/work/" not in json.dumps(got) and "/root/" not in json.dumps(got)  # no host path leaks
    assert ran(server, command="echo still here")["stdout"] == "still here\n"


def test_the_typed_client_runs_commands(server: LiveServer) -> None:
    with Client(server.base_url) as client:
        got = client.run_command("echo $X; pwd", env={"X": "typed"}, cwd="/tmp")
        assert (got.exit_code, got.stdout, got.stderr) == (0, "typed\n/tmp\n", "")
        session = client.create_session()
        try:
            client.run_command(["touch", "made-by-argv"], session_id=session.session_id)
            listed = client.run_command("ls", session_id=session.session_id)
            assert "made-by-argv" in listed.stdout.split()
        finally:
            client.close_session(session.session_id)


def _exec(server: LiveServer, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmrun", "exec", "--url", server.base_url, *args],
                          input=stdin, capture_output=True, text=True, env=wasmrun_env(), timeout=120)


def test_wasmrun_exec_behaves_as_the_command(server: LiveServer) -> None:
    done = _exec(server, "--env", "WHO=cli", "--", "echo hi $WHO; echo oops >&2; exit 4")
    assert (done.returncode, done.stdout, done.stderr) == (4, "hi cli\n", "oops\n")
    counted = _exec(server, "-i", "--", "wc -l", stdin="a\nb\nc\n")
    assert (counted.returncode, counted.stdout.strip()) == (0, "3")
    words = _exec(server, "--", "printf", "%s,", "a b", "$Z")
    assert words.stdout == "a b,$Z,"
    slow = _exec(server, "--timeout-ms", "500", "--", "sleep 30")
    assert slow.returncode == 124 and "Timeout" in slow.stderr
    refused = _exec(server, "--env", "NOEQUALS", "--", "ls")
    assert refused.returncode == 125 and "NAME=VALUE" in refused.stderr


def test_over_mcp_with_its_own_client(server: LiveServer) -> None:
    async def go() -> tuple[list[str], Any, Any]:
        async with MCPClient(f"{server.base_url}/mcp") as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            done = await mcp.call_tool("run_command", {"command": "echo from mcp; echo warn >&2; exit 2"})
            bad = await mcp.call_tool("run_command", {"command": "a\x00b"})
            return names, done, bad

    names, done, bad = asyncio.run(go())
    assert "run_command" in names
    structured = done.structured_content
    assert structured["exit_code"] == 2 and structured["stdout"] == "from mcp\n" and structured["stderr"] == "warn\n"
    text = done.content[0].text
    assert "stdout:\nfrom mcp" in text and "stderr:\nwarn" in text
    assert bad.is_error and "NUL" in bad.content[0].text


def _streamed(server: LiveServer, command: str) -> list[tuple[float, dict[str, Any]]]:
    """A streamed run_command's events, each with the time it arrived."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_command", "params": {"command": command, "stream": True}}
    arrivals: list[tuple[float, dict[str, Any]]] = []
    with httpx2.stream("POST", server.endpoint, json=body, headers={"accept": "text/event-stream"}, timeout=60) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        data: list[str] = []
        for line in reply.iter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                arrivals.append((time.monotonic(), json.loads("\n".join(data))))
                data = []
    return arrivals


def test_streamed_its_output_comes_as_it_is_written(server: LiveServer) -> None:
    arrivals = _streamed(server, "echo first; sleep 1; echo second >&2")
    outputs = [(m["params"]["stream"], m["params"]["text"]) for _, m in arrivals if m.get("method") == "run/output"]
    assert outputs == [("stdout", "first\n"), ("stderr", "second\n")]
    result = arrivals[-1][1]["result"]
    assert (result["exit_code"], result["stdout"], result["stderr"]) == (0, "first\n", "second\n")
    first_at = next(t for t, m in arrivals if m.get("method") == "run/output")
    assert arrivals[-1][0] - first_at > 0.5  # the first line came before the sleep ended


@pytest.mark.parametrize("command", [
    "python -c 'import time; print(\"first\", flush=True); time.sleep(1.5); print(\"second\")'",
    "for i in 1 2; do echo step$i; sleep 0.8; done; echo second",
    "printf 'import time\\nprint(\"first\", flush=True)\\ntime.sleep(1.5)\\n' > job.py; "
    "{ python job.py; echo second; }",
])
def test_a_long_command_s_progress_streams_while_it_runs(server: LiveServer, command: str) -> None:
    """A script's prints arrive while it runs (the shell used to hand a command line's output on
    when it ended): in a loop, a group and `python` itself, in order."""
    arrivals = _streamed(server, command)
    texts = [(t, m["params"]["text"]) for t, m in arrivals if m.get("method") == "run/output"]
    joined = "".join(text for _, text in texts)
    assert joined.index("second") > 0 and joined.rstrip().endswith("second")
    first_at = texts[0][0]
    assert arrivals[-1][0] - first_at > 0.5, texts  # the first line came before the sleep ended
    assert arrivals[-1][1]["result"]["exit_code"] == 0


def test_a_huge_print_is_cut_at_the_output_limit_not_held_in_memory(server: LiveServer) -> None:
    """60 MB printed by `python` in the shell (the default memory is 256 MB): the command ends
    with its status, the output is cut at the run's limit as it is written, and the run's
    peak memory stays far from what holding the output (as text and as bytes) would need."""
    result = ran(server, command="python -c 'print(\"x\" * 60_000_000)'; echo after-$?")
    assert result["status"] == "completed" and result["exit_code"] == 0, result.get("error")
    assert result["output_truncated"] is True and len(result["stdout"]) < 2_000_000
    assert result["logs_preview"].endswith("after-0\n")
    assert result["usage"]["peak_memory_bytes"] < 250 * 1024 * 1024
    lines = ran(server, command="python -c 'for i in range(1_000_000): print(i)' | tail -1; seq 1000000 | wc -l")
    assert lines["stdout"] == "999999\n1000000\n"
