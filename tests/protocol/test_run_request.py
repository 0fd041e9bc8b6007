"""A run's request is built once, whole, and frozen (protocol/running.py): what reaches the
sandbox already names the caller's tenant and blob quota, whether its output streams, and a
session's state; nothing on the way changes it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from wasmrun.sandbox import BackgroundTotals, ExecutorHealth, InProcessExecutor, OutputSink, RunRequest, RunResult
from wasmrun.server import assemble, create_app
from wasmrun.settings import Settings
from wasmrun.tenants.store import TenantStore

_ids = itertools.count(1)


class Recording:
    """The session's real executor, keeping each request it is handed (and the request as
    it was then, encoded, to tell whether anything changed it during the run)."""

    def __init__(self, executor: InProcessExecutor) -> None:
        self.executor = executor
        self.background: BackgroundTotals = executor.background
        self.seen: list[tuple[RunRequest, bytes]] = []

    async def run(self, request: RunRequest, on_output: OutputSink | None = None) -> RunResult:
        self.seen.append((request, msgspec.msgpack.encode(request)))
        return await self.executor.run(request, on_output)

    def health(self) -> ExecutorHealth:
        return self.executor.health()

    def capacity(self) -> tuple[int, int]:
        return self.executor.capacity()

    def close(self) -> None:
        pass  # the session's executor: closed by its fixture


@pytest.fixture()
def recording(executor: InProcessExecutor) -> Recording:
    return Recording(executor)


@pytest.fixture()
def alice(settings: Settings, recording: Recording, blob_store: Any) -> Iterator[Any]:
    key = TenantStore(settings.data_dir).add("alice", {"blob_bytes": 5_000_000})
    with TestClient(create_app(assemble(settings, blobs=blob_store, executor=recording)), base_url="http://localhost") as c:

        def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}
            answer = c.post("/rpc", json=body, headers={"authorization": f"Bearer {key}"})
            assert answer.status_code == 200, answer.text
            return answer.json()

        yield call


def test_a_run_code_request_reaches_the_sandbox_whole_and_unchanged(alice: Any, recording: Recording) -> None:
    result = alice("run_code", {"language": "python", "code": "def main(args):\n    return args['n'] + 1\n",
                                "args": {"n": 41}})["result"]
    assert result["status"] == "completed" and result["output"] == 42
    [(request, as_sent)] = recording.seen
    assert request.kind == "code" and request.owner == "alice" and not request.stream
    assert request.blob_quota is not None and request.blob_quota.max_bytes == 5_000_000
    assert request.session is None
    assert msgspec.msgpack.encode(request) == as_sent  # nothing changed it while it ran
    with pytest.raises(AttributeError):
        request.owner = "bob"  # type: ignore[misc]


def test_a_session_run_request_carries_its_session_from_the_start(alice: Any, recording: Recording) -> None:
    session = alice("create_session", {"language": "python"})["result"]["session_id"]
    first = alice("run_code", {"language": "python", "session_id": session, "code": "x = 20\n"})["result"]
    second = alice("run_code", {"language": "python", "session_id": session, "code": "def main(a):\n    return x + 22\n"})
    assert first["status"] == "completed" and second["result"]["output"] == 42
    (one, one_sent), (two, two_sent) = recording.seen
    assert one.session is not None and two.session is not None
    assert one.session.folder == two.session.folder and two.session.version == one.session.version + 1
    assert one.owner == two.owner == "alice"
    assert [msgspec.msgpack.encode(one), msgspec.msgpack.encode(two)] == [one_sent, two_sent]
