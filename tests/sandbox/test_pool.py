"""The worker-process pool: runs spread over processes, crashes are contained."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest

from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.guest.jsontext import encode_args
from wasmrun.sandbox.pool.executor import Busy
from wasmrun.sandbox.pool.pool import BlobOpener, WorkerPool

SLEEP = "import time\ndef main(args):\n    time.sleep(args.get('s', 1))\n    return 'done'"


@pytest.fixture()
def pool(tmp_path):
    p = WorkerPool(BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(tmp_path / "blobs")]), workers=2,
                   queue_timeout=0.5, workspace_parent=tmp_path / "ws")
    yield p
    p.close()


def wait_whole(pool: WorkerPool, timeout: float = 120.0) -> None:
    """Wait until every worker is up and idle again (replacements start in the background)."""
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        health = pool.health()
        if health.unavailable == 0 and health.free == health.total:
            return
        time.sleep(0.05)
    raise AssertionError(f"the pool did not recover: {pool.health()}")


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
        request = RunRequest(kind="code", code=source, args_json=encode_args({"url": server.url + "/json"}), network=grant)
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
    wait_whole(pool)
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
                      watchdog_grace=0.5, workspace_parent=tmp_path / "ws")
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
        wait_whole(pool)
        assert lost.error.type == "WorkerCrashed"
        assert "stopped answering" in lost.error.message
        assert after.output == "fresh worker"
        assert hung not in pool.worker_pids()
        # the killed worker's workspaces went with it
        assert [int(p.name.split("-")[0]) for p in (tmp_path / "ws").iterdir()] == pool.worker_pids()
    finally:
        pool.close()


def test_cancelled_runs_never_shrink_the_pool(pool):
    # A run cancelled mid-exchange (its client went away, the server shuts
    # down) leaves its worker to finish that run; then the worker is back.
    async def go():
        for _ in range(2):
            tasks = [asyncio.create_task(pool.run(code(SLEEP, timeout_ms=10_000))) for _ in range(2)]
            waiting = asyncio.create_task(pool.run(code("def main(args):\n    return 1")))
            await asyncio.sleep(0.3)
            for task in [*tasks, waiting]:  # two mid-run, one waiting for a worker
                task.cancel()
            for task in [*tasks, waiting]:
                with pytest.raises(asyncio.CancelledError):
                    await task

    pids = pool.worker_pids()
    asyncio.run(go())
    wait_whole(pool)
    after = asyncio.run(pool.run(code("def main(args):\n    return 'served'")))
    assert after.output == "served"
    assert pool.worker_pids() == pids  # finished their runs, not killed


def test_a_dead_workers_workspaces_are_removed(pool, tmp_path):
    parent = tmp_path / "ws"
    writer = "import time\ndef main(args):\n    open('marker', 'w').write('x')\n    time.sleep(30)\n"

    async def go():
        run = asyncio.create_task(pool.run(code(writer, timeout_ms=60_000)))
        give_up = time.monotonic() + 60
        while not (markers := list(parent.glob("*/run-*/workspace/marker"))):  # <root>/<run folder>/workspace
            assert time.monotonic() < give_up
            await asyncio.sleep(0.05)
        folder = markers[0].parent.parent.parent
        os.kill(int(folder.name.split("-")[0]), signal.SIGKILL)  # as the OOM killer would
        return folder, await run

    folder, lost = asyncio.run(go())
    assert lost.error.type == "WorkerCrashed"
    wait_whole(pool)
    assert not folder.exists()
    owners = sorted(int(p.name.split("-")[0]) for p in parent.iterdir())
    assert owners == sorted(pool.worker_pids())


def test_orphaned_workspaces_are_swept_at_start_and_live_ones_kept(tmp_path):
    from wasmrun import dirtree
    from wasmrun.sandbox.files.workroots import WorkRoot

    parent = tmp_path / "ws"
    parent.mkdir(mode=0o700)
    orphan = parent / "999999-left"  # from a server killed earlier: nobody holds its lock
    fd = os.open(parent, os.O_RDONLY)
    os.mkdir(orphan)
    for name in ["999999-left", *["d"] * 2000]:  # deeper than Python's recursion limit
        child = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
        os.mkdir("d", dir_fd=fd)
    os.close(fd)
    live = WorkRoot(parent)  # another server's worker, still running
    (live.path / "ws-0").mkdir()
    (parent / "not-ours").mkdir()  # a name no sandbox process claims: never touched
    try:
        pool = WorkerPool(BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(tmp_path / "blobs")]), workers=1,
                          workspace_parent=parent)
        pool.close()
        assert not orphan.exists()
        assert (live.path / "ws-0").is_dir()
        assert (parent / "not-ours").is_dir()
    finally:
        live.release()
        dirtree.remove(orphan)  # on failure: pytest's own cleanup would recurse into it
    assert not live.path.exists()
