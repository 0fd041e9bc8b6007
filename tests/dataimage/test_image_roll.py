"""A server on `auto` whose data image is being made: its texts state the stdlib image,
then, once it moves to the data image, the data image's, on /tools, the guide and MCP,
whose connected clients (the official SDK, both protocol eras) are told with
`notifications/tools/list_changed`; a session made during the warm-up keeps running on
its own image after the move; /healthz shows the image served and the warm-up's progress,
whose countdown is this machine's measured make.

The roll is simulated as tests/dataimage/test_data_warmup.py does: a new data-image folder whose
make lock the test holds (the shared compiled-module cache makes the make quick).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client as MCPClient

from python_wasm import dataimage
from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.sandbox import warmup

MAKE_DEADLINE_S = 1800
MODERN = "2026-07-28"  # the MCP protocol version with subscriptions/listen


def rpc(server: LiveServer, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = httpx2.post(server.endpoint, json=body, timeout=300).json()
    assert "result" in reply, reply
    return reply["result"]


def run_code_text(server: LiveServer) -> str:
    tools = httpx2.get(server.base_url + "/tools", timeout=60).json()
    return str(next(t["description"] for t in tools if t["name"] == "run_code"))


class Watchers:
    """Two MCP clients connected through the roll: a 2026-07-28 one listening for
    tools_list_changed, and a 2025-era (initialize handshake) one with a message handler."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.modern: list[str] = []
        self.legacy: list[str] = []
        self.listing: list[str] = []  # run_code's text each client read after being told
        self.ready = asyncio.Event()

    async def watch_modern(self) -> None:
        # Pinned: "auto" probes server/discover and, on a loaded machine, may time out into
        # the 2025 handshake, where no listen stream exists (the legacy client covers that era).
        async with MCPClient(self.url, mode=MODERN) as mcp:
            async with mcp.listen(tools_list_changed=True) as subscription:
                self.ready.set()
                async for event in subscription:
                    self.modern.append(type(event).__name__)
                    tools = (await mcp.list_tools()).tools
                    self.listing.append(next(str(t.description) for t in tools if t.name == "run_code"))
                    return

    async def watch_legacy(self, told: asyncio.Event) -> None:
        async def handler(message: Any) -> None:
            if isinstance(message, mcp_types.ToolListChangedNotification):
                self.legacy.append(message.method)
                told.set()

        async with MCPClient(self.url, mode="legacy", message_handler=handler) as mcp:
            await mcp.list_tools()
            await told.wait()
            tools = (await mcp.list_tools()).tools
            self.listing.append(next(str(t.description) for t in tools if t.name == "run_code"))


@pytest.mark.slow
def test_the_roll_to_the_data_image_changes_the_texts_and_keeps_sessions(tmp_path: Path) -> None:
    dataimage.ready(quiet=False)  # the shared cache's interpreter (fetched once by `make guest`)
    folder = tmp_path / "dataimage"
    folder.mkdir(mode=0o700)
    env = wasmrun_env() | {"WASMRUN_IMAGE": "auto", dataimage.DIR_ENV: str(folder), "WASMRUN_SESSION_MAX_IDLE_S": "10800"}
    held = open(os.open(folder / warmup.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600))
    fcntl.flock(held, fcntl.LOCK_EX)  # the server's make waits for it
    server = LiveServer(tmp_path / "data", "--workers", "1", env=env)
    try:
        before = run_code_text(server)
        assert "CPython 3.11 " in before and "no third-party packages built in" in before, before
        health = httpx2.get(server.base_url + "/healthz", timeout=30).json()
        assert health["image"]["serving"] == "stdlib", health
        warming = health["image"]["warming_up"]
        assert warming["image"] == "data" and not warming["measured"], health
        assert warming["expected_s"] == warmup.DEFAULT_BUILD_S and warming["seconds_left"] > 0, health

        # Idle through the make (minutes on a loaded machine): longer than the default idle timeout.
        session = rpc(server, "create_session", {"language": "python", "idle_timeout_s": 3 * 3600})["session_id"]
        first = rpc(server, "run_code", {"language": "python", "session_id": session,
                                         "code": "import sys\nkept = 41\nsys.version_info[:2]"})
        assert first["status"] == "completed" and first["output"] == [3, 11], first

        watchers = Watchers(server.base_url + "/mcp")
        made_in = asyncio.run(_through_the_roll(watchers, held, server, folder / warmup.TIMING_NAME))

        after = run_code_text(server)
        assert "CPython 3.15 " in after and "pandas 3" in after and "numpy" in after, after
        guide = rpc(server, "load_skills_protocol_guide", {})["content"]
        assert "Image served: data. Python: CPython 3.15 " in guide
        assert watchers.modern == ["ToolsListChanged"], watchers.modern
        assert watchers.legacy == ["notifications/tools/list_changed"], watchers.legacy
        assert len(watchers.listing) == 2 and all(text == after for text in watchers.listing), watchers.listing
        health = httpx2.get(server.base_url + "/healthz", timeout=30).json()
        assert health["image"] == {"serving": "data"}, health

        # The session made on the stdlib image during the warm-up keeps running there.
        later = rpc(server, "run_code", {"language": "python", "session_id": session,
                                         "code": "import sys\n[kept + 1, list(sys.version_info[:2])]"})
        assert later["status"] == "completed" and later["output"] == [42, [3, 11]], later
        fresh = rpc(server, "run_code", {"language": "python", "code": "import numpy\nint(numpy.arange(10).sum())"})
        assert fresh["status"] == "completed" and fresh["output"] == 45, fresh
        newer = rpc(server, "create_session", {"language": "python"})["session_id"]
        on_data = rpc(server, "run_code", {"language": "python", "session_id": newer,
                                           "code": "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\n3"})
        assert on_data["status"] == "completed", on_data

        # The make's time is recorded: the next warm-up's countdown starts from it.
        recorded = float((folder / warmup.TIMING_NAME).read_text())
        assert abs(recorded - made_in) <= 0.3 * made_in + 2, (recorded, made_in)
        os.environ[dataimage.DIR_ENV] = str(folder)  # as the next server on this cache starts
        try:
            following = warmup.DataImageWarmup()
        finally:
            del os.environ[dataimage.DIR_ENV]
        assert following.measured and following.expected_s == recorded, (following.expected_s, recorded)
    finally:
        held.close()
        log = server.stop()
    assert "serving the data image" in log, log


async def _through_the_roll(watchers: Watchers, held: Any, server: LiveServer, timing: Path) -> float:
    """How long the make took, as the test saw it (from letting it go to its time recorded)."""
    told = asyncio.Event()
    modern = asyncio.create_task(watchers.watch_modern())
    legacy = asyncio.create_task(watchers.watch_legacy(told))
    await asyncio.wait_for(watchers.ready.wait(), 120)
    await asyncio.sleep(1)  # the legacy client has listed the tools
    released = time.monotonic()
    fcntl.flock(held, fcntl.LOCK_UN)  # let the server's make go on
    deadline = released + MAKE_DEADLINE_S
    while not timing.exists():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
    made_in = time.monotonic() - released
    async with httpx2.AsyncClient(timeout=30) as http:
        while True:
            health = (await http.get(server.base_url + "/healthz")).json()
            if health["image"]["serving"] == "data":
                break
            assert time.monotonic() < deadline, health
            await asyncio.sleep(1)
    await asyncio.wait_for(asyncio.gather(modern, legacy), 120)
    return made_in


def test_connected_mcp_clients_are_told_when_the_served_image_changes(tmp_path: Path) -> None:
    """The notification path alone, quickly: a real server in this process (so the test can
    switch its served image as the warm-up does when the data image is ready), the official
    SDK's clients of both eras connected to its /mcp; the texts they list again name the
    new image. (The slow test above does the same through a real roll.)"""
    import threading

    import uvicorn

    from tests.liveserver import free_port
    from wasmrun.blobs.store import FileBlobStore
    from wasmrun.sandbox import InProcessExecutor
    from wasmrun.server import assemble, create_app
    from wasmrun.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", image="stdlib")
    blobs = FileBlobStore(tmp_path / "blobs")
    executor = InProcessExecutor(blobs, slots=1)
    assembled = assemble(settings, blobs=blobs, executor=executor)
    context = assembled.context
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(assembled), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        watchers = Watchers(f"http://127.0.0.1:{port}/mcp")

        async def through_the_switch() -> None:
            told = asyncio.Event()
            modern = asyncio.create_task(watchers.watch_modern())
            legacy = asyncio.create_task(watchers.watch_legacy(told))
            await asyncio.wait_for(watchers.ready.wait(), 60)
            await asyncio.sleep(1)  # the legacy client has listed the tools
            before = len(watchers.listing)
            assert before == 0
            threading.Thread(target=context.served.switch, args=("data",)).start()  # as warmup's thread does
            await asyncio.wait_for(asyncio.gather(modern, legacy), 60)

        asyncio.run(through_the_switch())
        assert watchers.modern == ["ToolsListChanged"], watchers.modern
        assert watchers.legacy == ["notifications/tools/list_changed"], watchers.legacy
        from wasmrun.imagefacts import image_facts

        data_python = image_facts("data").python
        assert all(f"CPython {data_python} " in text for text in watchers.listing), watchers.listing
        tools = httpx2.get(f"http://127.0.0.1:{port}/tools", timeout=30).json()
        assert f"CPython {data_python} " in next(t["description"] for t in tools if t["name"] == "run_code")
    finally:
        server.should_exit = True
        thread.join(30)
        executor.close()


def test_a_session_keeps_its_image_when_the_workers_move_to_the_data_image(tmp_path: Path) -> None:
    """The worker pool's move itself (WorkerPool.roll, as the warm-up calls it), on the data
    image the cache already holds: a session made on the stdlib image runs on there after
    every worker serves the data image; new runs and new sessions get the data image."""
    import json
    import threading

    import msgspec

    from wasmrun.backends import open_backends
    from wasmrun.protocol.methods import Dispatcher
    from wasmrun.sandbox import WorkerPool, image_state
    from wasmrun.server import assemble
    from wasmrun.settings import Settings

    if image_state() is not None:
        pytest.skip(f"the data image is not made here ({image_state()})")
    settings = Settings(data_dir=tmp_path / "data", image="stdlib")
    backends = open_backends(settings)
    pool = WorkerPool(backends.blobs.for_workers(), workers=1, image="stdlib")
    context = assemble(settings, executor=pool).context
    dispatch = Dispatcher(context)

    def call(method: str, params: dict[str, Any]) -> Any:
        result = asyncio.run(dispatch(method, msgspec.Raw(json.dumps(params).encode())))
        return msgspec.json.decode(msgspec.json.encode(result))

    try:
        session = call("create_session", {"language": "python"})["session_id"]
        first = call("run_code", {"language": "python", "session_id": session,
                                  "code": "import sys\nkept = 41\nlist(sys.version_info[:2])"})
        assert first["output"] == [3, 11], first
        roll = threading.Thread(target=pool.roll, args=("data",))
        roll.start()
        roll.join(600)
        assert not roll.is_alive()
        later = call("run_code", {"language": "python", "session_id": session,
                                  "code": "import sys\n[kept + 1, list(sys.version_info[:2])]"})
        assert later["status"] == "completed" and later["output"] == [42, [3, 11]], later
        forked = call("fork_session", {"session_id": session})["session_id"]  # a copy keeps the image too
        assert call("run_code", {"language": "python", "session_id": forked, "code": "kept"})["output"] == 41
        fresh = call("run_code", {"language": "python", "code": "import sys\nlist(sys.version_info[:2])"})
        assert fresh["output"] != [3, 11], fresh
        newer = call("create_session", {"language": "python"})["session_id"]
        on_data = call("run_code", {"language": "python", "session_id": newer,
                                    "code": "import numpy\nint(numpy.arange(4).sum())"})
        assert on_data["output"] == 6, on_data
    finally:
        pool.close()
