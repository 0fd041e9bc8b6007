"""interrupt_session: a session's run in flight is stopped on request (a loop in wasm, a
sleep in host code, a shell command), fails with `Interrupted` and the traceback of where
it was, the session keeps the state it had before that run, and the worker serves the next
run at once. A real server with its worker pool, on both images."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

LONG = {"timeout_ms": 120_000, "cpu_ms": 120_000}


class Caller:
    def __init__(self, server: LiveServer, key: str) -> None:
        self.server, self.key = server, key

    def __call__(self, method: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer: dict[str, Any] = httpx2.post(
            self.server.endpoint, json=body, headers={"authorization": f"Bearer {self.key}"}, timeout=180
        ).json()
        return answer

    def result(self, method: str, **params: Any) -> Any:
        answer = self(method, **params)
        assert "result" in answer, answer
        return answer["result"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Caller, Caller]]:
    data: Path = tmp_path_factory.mktemp("interrupt")
    store = TenantStore(data)
    alice, bob = store.add("alice", {}), store.add("bob", {})
    live = LiveServer(data)
    yield Caller(live, alice), Caller(live, bob)
    live.stop()


def in_background(call: Caller, method: str, **params: Any) -> tuple[threading.Thread, dict[str, Any]]:
    answer: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: answer.update(call(method, **params)), daemon=True)
    thread.start()
    return thread, answer


def interrupt_when_running(call: Caller, session_id: str) -> dict[str, Any]:
    """interrupt_session as soon as the session's run is in flight (it is not at once)."""
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        if _busy(call, session_id):
            time.sleep(1.0)  # in flight: let it reach the code after its first lines
            got: dict[str, Any] = call.result("interrupt_session", session_id=session_id)
            if got["interrupted"]:
                return got
        time.sleep(0.05)
    raise AssertionError("the session's run was never seen in flight")


def _busy(call: Caller, session_id: str) -> bool:
    sessions = call.result("list_sessions")["sessions"]
    return any(s["session_id"] == session_id and s["busy"] for s in sessions)


@pytest.mark.parametrize(
    "code, where",
    [
        pytest.param("n = 0\nwhile True:\n    n += 1\n", ("while True:", "n += 1"), id="a-loop-in-wasm"),
        pytest.param("import time\ntime.sleep(100)\n", ("time.sleep(100)",), id="a-sleep-in-host-code"),
    ],
)
def test_an_interrupted_run_fails_with_where_it_was_and_the_session_goes_on(
    servers: tuple[Caller, Caller], code: str, where: tuple[str, ...]
) -> None:
    alice, _ = servers
    session_id = alice.result("create_session", language="python")["session_id"]
    kept = alice.result("run_code", language="python", session_id=session_id, code="x = 41\nopen('/workspace/a', 'w').write('a')")
    assert kept["status"] == "completed"
    started = time.monotonic()
    thread, answer = in_background(
        alice, "run_code", language="python", session_id=session_id, limits=LONG,
        code="x = 0\nopen('/workspace/a', 'w').write('changed')\n" + code,
    )
    got = interrupt_when_running(alice, session_id)
    thread.join(60)
    assert not thread.is_alive()
    assert time.monotonic() - started < 30  # not its 120 s limit
    result = answer["result"]
    assert result["status"] == "failed" and result["error"]["type"] == "Interrupted", result
    assert result["run_id"] == got["run_id"]
    message = result["error"]["message"]
    # Where it was: a line of this cell (which one depends on how far it got when interrupted).
    assert "stopped here" in message and '"<cell 2>"' in message, message
    assert any(line in message for line in (*where, "open('/workspace/a', 'w')", "x = 0")), message
    assert result["session_rolled_back"] is True
    after = alice.result("run_code", language="python", session_id=session_id, code="x + 1, open('/workspace/a').read()")
    assert after["status"] == "completed" and after["output"] == [42, "a"], after
    # Nothing is running now: interrupting again is a no-op, said as such.
    assert alice.result("interrupt_session", session_id=session_id) == {"interrupted": False}


def test_a_shell_command_in_a_session_is_interrupted(servers: tuple[Caller, Caller]) -> None:
    alice, _ = servers
    session_id = alice.result("create_session", language="python")["session_id"]
    thread, answer = in_background(
        alice, "run_command", session_id=session_id, limits=LONG,
        command="echo started; python3 -c 'while True: pass'",
    )
    interrupt_when_running(alice, session_id)
    thread.join(60)
    result = answer["result"]
    assert result["status"] == "failed" and result["error"]["type"] == "Interrupted", result
    assert "exit_code" not in result  # a limit-like stop, not an exit


def test_another_tenants_session_cannot_be_interrupted_nor_seen(servers: tuple[Caller, Caller]) -> None:
    alice, bob = servers
    session_id = alice.result("create_session", language="python")["session_id"]
    thread, answer = in_background(
        alice, "run_code", language="python", session_id=session_id, limits={"timeout_ms": 3000},
        code="import time\ntime.sleep(2)\n'done'",
    )
    time.sleep(0.5)
    refused = bob("interrupt_session", session_id=session_id)
    assert refused["error"]["code"] == -32003 or "does not exist" in refused["error"]["message"], refused
    thread.join(60)
    assert answer["result"]["status"] == "completed" and answer["result"]["output"] == "done"


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="no-session-id"),
        pytest.param({"session_id": "../../etc"}, id="a-path"),
        pytest.param({"session_id": "x" * 5000}, id="5000-chars"),
        pytest.param({"session_id": 7}, id="a-number"),
        pytest.param({"session_id": "s\u0000"}, id="nul"),
    ],
)
def test_a_bad_session_id_is_a_clear_error(servers: tuple[Caller, Caller], params: dict[str, Any]) -> None:
    alice, _ = servers
    answer = alice("interrupt_session", **params)
    assert "error" in answer and answer["error"]["code"] in (-32602, -32003), answer
    assert "session_id" in answer["error"]["message"] or answer["error"].get("data", {}).get("field") == "session_id"
