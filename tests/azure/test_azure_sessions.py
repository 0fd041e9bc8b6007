"""An identifier's session lives as the service's do (wasmrun/azure/identifiers.py): it ends
after its cooldown unused (here the server's session idle timeout, 2 s) and the identifier's
next call gets a fresh one; each counts in its tenant's `sessions`, past which a new
identifier is 429 while those in use go on. Driven by LangChain's `SessionsPythonREPLTool`."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest
import requests

from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.tenants.store import TenantStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_azure_dynamic_sessions import SessionsPythonREPLTool

IDLE_S = 2


class Live:
    def __init__(self, server: LiveServer, keys: dict[str, str]) -> None:
        self.server, self.keys = server, keys

    def tool(self, tenant: str, identifier: str) -> SessionsPythonREPLTool:
        key = self.keys[tenant]
        return SessionsPythonREPLTool(pool_management_endpoint=f"{self.server.base_url}/azure/pools/p",
                                      access_token_provider=lambda: key, session_id=identifier)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("azure-sessions") / "data"
    store = TenantStore(data)
    keys = {"alice": store.add("alice"), "solo": store.add("solo", {"sessions": 1}),
            "carol": store.add("carol", {"concurrent_requests": 1})}
    env = {**wasmrun_env(), "WASMRUN_SESSION_IDLE_S": str(IDLE_S), "WASMRUN_SESSION_MAX_IDLE_S": str(IDLE_S)}
    server = LiveServer(data, env=env)
    try:
        yield Live(server, keys)
    finally:
        server.stop()


def test_a_session_unused_past_its_cooldown_is_replaced_by_a_fresh_one(live: Live) -> None:
    tool = live.tool("alice", "short-lived")
    tool.execute("state = 'kept'\nopen('/mnt/data/f.txt', 'w').write('x')")
    assert tool.execute("state")["result"] == "'kept'"  # within the cooldown: the same session
    time.sleep(IDLE_S + 2.5)
    after = tool.execute("state")
    assert after["status"] == "Failure" and "NameError" in after["stderr"]
    assert tool.list_files() == []  # a fresh session: its files too
    assert tool.execute("1 + 1")["result"] == 2


def test_each_identifier_counts_in_the_tenants_sessions(live: Live) -> None:
    first = live.tool("solo", "one")
    assert first.execute("a = 1\na")["result"] == 1
    with pytest.raises(requests.HTTPError) as refused:
        live.tool("solo", "two").execute("1")
    assert refused.value.response.status_code == 429
    assert "session" in refused.value.response.json()["error"]["message"]
    assert first.execute("a + 1")["result"] == 2  # the one in use goes on
    first.delete_session()  # LangChain deletes it in a thread of its own
    deadline = time.monotonic() + 10
    while True:
        try:
            assert live.tool("solo", "two").execute("'room again'")["result"] == "'room again'"
            break
        except requests.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_tenants_concurrent_requests_count_the_doors_calls(live: Live) -> None:
    import threading

    slow = threading.Thread(target=lambda: live.tool("carol", "c1").execute("import time\ntime.sleep(3)"))
    slow.start()
    time.sleep(1.0)
    try:
        with pytest.raises(requests.HTTPError) as refused:
            live.tool("carol", "c2").execute("1")
        assert refused.value.response.status_code == 429
        assert refused.value.response.json()["error"]["code"] == "TooManyRequests"
    finally:
        slow.join(30)
    assert live.tool("carol", "c2").execute("1")["result"] == 1  # its place given back
