"""The expiry sweep runs on its own (wasmrun/e2b/sweeper.py): a sandbox past its timeout is
ended by the server's periodic task while no E2B request arrives, and is then gone for the
SDK."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import NotFoundException, SandboxException, TimeoutException
from e2b.exceptions import SandboxNotFoundException
from e2b_code_interpreter import Sandbox

from tests.e2benv import e2b_environment
from tests.liveserver import LiveServer

GONE = (NotFoundException, SandboxNotFoundException, TimeoutException, SandboxException)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    data = tmp_path_factory.mktemp("e2b-expiry") / "data"
    server = LiveServer(data)
    try:
        with e2b_environment(server, "any-key"):
            yield server, data
    finally:
        server.stop()


def records(data: Path, sandbox_id: str) -> list[Path]:
    folder = data / "session-records" / "e2b_sandbox"
    return [p for p in folder.glob("*") if sandbox_id in p.name] if folder.exists() else []


def test_a_timed_out_sandbox_ends_with_no_request_arriving(served: tuple[LiveServer, Path]) -> None:
    _, data = served
    sandbox = Sandbox.create(timeout=2)
    sandbox.files.write("/home/user/x.txt", "x")
    assert records(data, sandbox.sandbox_id), "the sandbox's record is stored"
    deadline = time.monotonic() + 20  # its timeout, then at most two sweeps of 5 s
    while records(data, sandbox.sandbox_id) and time.monotonic() < deadline:
        time.sleep(0.25)  # no request to the server meanwhile: only its own sweep can end it
    assert not records(data, sandbox.sandbox_id), "the sweep ended the sandbox on its own"
    with pytest.raises(GONE):
        sandbox.run_code("1")
    assert Sandbox.create(timeout=30).run_code("1 + 1").text == "2"  # the server keeps serving
