"""A real `wasmrun serve` on a free loopback port, for tests that talk to it over HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import uvicorn

from tests import images
from wasmrun.server import uvicorn_options
from wasmrun.settings import Settings

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"  # the tests' own folder: artifacts/ and the data beside the tests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wasmrun_env() -> dict[str, str]:
    """This environment without WASMRUN_* settings, with the checkout importable, on the
    running test's image (tests/images.py; never "auto", which would pick the data image
    wherever `make guest` built it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_")}
    env["PYTHONPATH"] = str(REPO)
    env["WASMRUN_IMAGE"] = images.current()
    return env


class LiveServer:
    def __init__(self, data_dir: Path, *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.endpoint = f"{self.base_url}/rpc"
        cmd = [sys.executable, "-m", "wasmrun", "serve", "--port", str(self.port),
               "--data-dir", str(data_dir), "--workers", "2", *extra_args]
        self.process = subprocess.Popen(
            cmd, env=wasmrun_env() if env is None else env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.process.communicate()[1]}")
            try:
                if httpx2.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx2.TransportError:
                time.sleep(0.1)
        self.process.kill()
        raise RuntimeError("server did not start")

    def stop(self) -> str:
        self.process.send_signal(signal.SIGINT)
        _, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, err
        return err


@contextlib.contextmanager
def serving(app: Any, settings: Settings, **overrides: Any) -> Iterator[uvicorn.Server]:
    """`app` served in this process by uvicorn as `wasmrun serve` runs it (server.uvicorn_options:
    the same HTTP protocol class), on a free loopback port: `server.config.port`. `overrides`
    change an option (e.g. `http=` a subclass with other bounds)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    options = {**uvicorn_options(settings.host, settings.port), "log_level": "warning", **overrides}
    options.update(host="127.0.0.1", port=sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    give_up = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < give_up, "the server did not start"
        time.sleep(0.02)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
