"""The worker-process pool: runs spread over processes, crashes are contained."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

from wasmrun.sandbox.executor import Busy
from wasmrun.sandbox.limits import Limits
from wasmrun.sandbox.pool import BlobOpener, WorkerPool
from wasmrun.sandbox.types import RunRequest

SLEEP = "import time\ndef main(args):\n    time.sleep(args.get('s', 1))\n    return 'done'"


@pytest.fixture()
def pool(tmp_path):
    p = WorkerPool(BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(tmp_path / "blobs")]), workers=2,
                   queue_timeout=0.5)
    yield p
    p.close()


def code(source: str, **limits: int) -> RunRequest:
    return RunRequest(kind="code", code=source, limits=Limits(**limits) if limits else Limits())


def test_runs_complete_across_workers(pool):
    async def go():
        return await asyncio.gather(*[pool.run(code("def main(args):\n    return 7")) for _ in range(20)])

    results = asyncio.run(go())
    assert [r.output for r in results] == [7] * 20
    assert len(set(r.run_id for r in results)) == 20


def test_network_grant_and_host_secret_reach_a_worker(pool):
    from tests.egress_server import serve
    from wasmrun.egress.policy import NetworkGrant

    source = (
        "from runtime import http\n"
        "def main(args):\n"
        "    return http.get(args['url'], headers={'X-Key': 'wasmrun-secret:KEY'}).json()['hello']\n"
    )
    with serve() as server:
        grant = NetworkGrant(subject="run_code", requested=None, granted=[server.url], allow_private=True,
                             host_secrets={"KEY": "value-in-the-worker"})
        request = RunRequest(kind="code", code=source, args={"url": server.url + "/json"}, network=grant)
        result = asyncio.run(pool.run(request))
    assert result.output == "world", result.error
    assert server.seen[0].headers["X-Key"] == "value-in-the-worker"
    assert result.usage.http_requests == 1


def test_blobs_written_in_a_worker_are_in_the_store(pool, tmp_path):
    from wasmrun.blobs.store import FileBlobStore

    result = asyncio.run(pool.run(code("from runtime import blobs\ndef main(args):\n    return blobs.write_text('from worker')")))
    store = FileBlobStore(tmp_path / "blobs")
    assert store.read(result.output, 0, 100) == b"from worker"


def test_worker_killed_mid_run_fails_that_run_and_is_replaced(pool):
    async def go():
        victim = pool.worker_pids()[0]

        async def kill_soon():
            await asyncio.sleep(0.5)
            os.kill(victim, signal.SIGKILL)

        first, second, _ = await asyncio.gather(
            pool.run(code(SLEEP, timeout_ms=10_000)), pool.run(code(SLEEP, timeout_ms=10_000)), kill_soon()
        )
        after = await pool.run(code("def main(args):\n    return 'still serving'"))
        return victim, [first, second], after

    victim, results, after = asyncio.run(go())
    crashed = [r for r in results if r.status == "failed"]
    assert len(crashed) == 1
    assert crashed[0].error.type == "WorkerCrashed"
    assert crashed[0].run_id.startswith("run_")
    assert after.output == "still serving"
    assert victim not in pool.worker_pids()
    assert len(pool.worker_pids()) == 2


def test_busy_when_every_worker_stays_taken(pool):
    async def go():
        slow = [asyncio.create_task(pool.run(code(SLEEP, timeout_ms=10_000))) for _ in range(2)]
        await asyncio.sleep(0.2)
        with pytest.raises(Busy):
            await pool.run(code("def main(args):\n    return 1"))
        await asyncio.gather(*slow)

    asyncio.run(go())


def test_a_worker_that_stops_answering_is_replaced(tmp_path):
    pool = WorkerPool(BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(tmp_path / "blobs")]), workers=1,
                      watchdog_grace=0.5)
    try:
        async def go():
            hung = pool.worker_pids()[0]
            os.kill(hung, signal.SIGSTOP)  # alive, but never answers
            try:
                lost = await pool.run(code("def main(args):\n    return 1", timeout_ms=200))
            finally:
                with contextlib.suppress(ProcessLookupError):  # already replaced (killed)
                    os.kill(hung, signal.SIGCONT)
            after = await pool.run(code("def main(args):\n    return 'fresh worker'"))
            return hung, lost, after

        hung, lost, after = asyncio.run(go())
        assert lost.error.type == "WorkerCrashed"
        assert "stopped answering" in lost.error.message
        assert after.output == "fresh worker"
        assert hung not in pool.worker_pids()
    finally:
        pool.close()
