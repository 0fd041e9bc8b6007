"""E2B's files at their size and calls cut short, through the real SDK against real
`wasmrun serve` processes: a 200 MiB file up and down on a server whose operator raised
the sandboxes' workspace quota (WASMRUN_E2B_WORKSPACE_MB), with the server's and its
workers' resident memory measured while it moves; over the quota, E2B's NotEnoughSpace
and nothing under the name; a server SIGKILLed mid-upload leaves the name absent or
whole and the sandbox answering after a restart; a sandbox killed by a second client
under a `run_code` or a `files.write` fails that call with the SDK's own exception."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from e2b import NotEnoughSpaceException, TimeoutException
from e2b.exceptions import SandboxNotRunningException
from e2b_code_interpreter import Sandbox

from tests.e2benv import e2b_environment
from tests.liveserver import LiveServer, wasmrun_env

MiB = 1024 * 1024
QUOTA_MB = 210  # room for the 200 MiB file, not for 16 MiB more beside it


def urls(server: LiveServer) -> dict[str, str]:
    return {"api_url": f"{server.base_url}/e2b/api", "sandbox_url": f"{server.base_url}/e2b/sandbox",
            "api_key": "any"}


# -- memory of a process tree ---------------------------------------------------------

def _tree(pid: int) -> list[int]:
    """The process and its descendants (the server's sandbox workers)."""
    found = [pid]
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += _tree(int(child))
    return found


def _status(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakRSS:
    """Each process's resident memory at the start and at its peak while the block runs:
    VmHWM reset at the start (where the kernel lets us) and VmRSS sampled every 10 ms."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.pids = _tree(root)
        self.reset = True
        for pid in self.pids:
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from now on
            except OSError:
                self.reset = False
        self.base = {pid: _status(pid, "VmRSS") for pid in self.pids}
        self.peak = dict(self.base)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            for pid in self.pids:
                self.peak[pid] = max(self.peak[pid], _status(pid, "VmRSS"))

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        if self.reset:
            for pid in self.pids:
                self.peak[pid] = max(self.peak[pid], _status(pid, "VmHWM"))

    def growth(self) -> dict[int, int]:
        """Bytes each process's peak rose above where it started."""
        return {pid: self.peak[pid] - self.base[pid] for pid in self.pids}

    def says(self) -> str:
        return ", ".join(f"{'server' if pid == self.root else 'worker'} {self.base[pid] / MiB:.0f}->"
                         f"{self.peak[pid] / MiB:.0f} MiB" for pid in self.pids)


def _digest_of_stream(sb: Sandbox, path: str) -> str:
    digest = hashlib.sha256()
    for chunk in sb.files.read(path, format="stream"):
        digest.update(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def big_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("e2b-large") / "data"
    server = LiveServer(data, env=wasmrun_env() | {"WASMRUN_E2B_WORKSPACE_MB": str(QUOTA_MB)})
    try:
        with e2b_environment():
            yield server
    finally:
        server.stop()


def test_a_200_mib_file_goes_up_and_down_in_bounded_server_memory(big_server: LiveServer, tmp_path: Path) -> None:
    source, digest = tmp_path / "source.bin", hashlib.sha256()
    with open(source, "wb") as f:
        for _ in range(200):
            piece = os.urandom(MiB)
            digest.update(piece)
            f.write(piece)
    sb = Sandbox.create(**urls(big_server))
    try:
        info = httpx2.get(f"{big_server.base_url}/e2b/api/sandboxes/{sb.sandbox_id}", headers={"X-API-KEY": "any"},
                          timeout=30).json()
        assert info["diskSizeMB"] == QUOTA_MB  # its disk: the operator's quota
        assert sb.run_code("1").text == "1"  # the worker's interpreter warm before measuring
        wanted = digest.hexdigest()

        def up() -> None:
            with open(source, "rb") as f:  # a file object: the SDK streams it (octet-stream)
                sb.files.write("/home/user/big.bin", f)

        def down_stream() -> None:
            assert _digest_of_stream(sb, "big.bin") == wanted

        def down_bytes() -> None:
            assert hashlib.sha256(sb.files.read("big.bin", format="bytes")).hexdigest() == wanted

        figures = []
        for what, move in (("up", up), ("down (stream)", down_stream), ("down (bytes)", down_bytes)):
            started = time.monotonic()
            with PeakRSS(big_server.process.pid) as rss:
                move()
            growth = rss.growth()
            figures.append(f"{what} {time.monotonic() - started:.1f} s: {rss.says()}")
            assert max(growth.values()) < 64 * MiB and sum(growth.values()) < 96 * MiB, figures[-1]
        print("\n".join(figures))
        assert sb.files.get_info("big.bin").size == 200 * MiB
        assert sb.run_code("import os; os.path.getsize('/home/user/big.bin')").text == str(200 * MiB)
        # Over the quota: E2B's own error, and nothing under the name; the big file stays.
        with pytest.raises(NotEnoughSpaceException, match="quota"):
            sb.files.write("more.bin", os.urandom(16 * MiB))
        assert not sb.files.exists("more.bin")
        assert [e.name for e in sb.files.list("/home/user")] == ["big.bin"]
    finally:
        sb.kill()


# -- calls cut short -------------------------------------------------------------------

class Paced:
    """An upload's body as the SDK streams an iterable: `size` bytes in 256 KiB pieces,
    `pause` seconds apart; `sent` counts what it handed over, `halfway` and `done` say when."""

    def __init__(self, size: int, pause: float) -> None:
        self.data = os.urandom(size)
        self.pause, self.sent = pause, 0
        self.halfway, self.done = threading.Event(), threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        for at in range(0, len(self.data), 256 * 1024):
            piece = self.data[at:at + 256 * 1024]
            self.sent += len(piece)
            if self.sent >= len(self.data) // 2:
                self.halfway.set()
            yield piece
            time.sleep(self.pause)
        self.done.set()


def _in_thread(call: object) -> tuple[threading.Thread, list[object]]:
    """`call()` in a thread: what it returned or raised, once joined."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())  # type: ignore[operator]
        except BaseException as exc:  # the call's failure is what the test looks at
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _staged(blobs: Path, size: int) -> threading.Event:
    """Set once a blob of `size` bytes is under `blobs`: the upload's, staged for the file program."""
    seen = threading.Event()

    def look() -> None:
        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            for path in blobs.rglob("*"):
                with contextlib.suppress(OSError):
                    if path.is_file() and path.stat().st_size == size:
                        seen.set()
                        return
            time.sleep(0.005)

    threading.Thread(target=look, daemon=True).start()
    return seen


# Where the kill lands: halfway through the body, as its last byte is sent, once it is a
# blob (the file program copying it into the sandbox's files, or about to).
@pytest.mark.parametrize("when", ["mid-body", "body-sent", "staged"])
def test_a_server_killed_mid_upload_leaves_the_name_absent_or_whole(tmp_path: Path, when: str) -> None:
    data = tmp_path / "data"
    with e2b_environment():
        server = LiveServer(data)
        try:
            sb = Sandbox.create(timeout=600, **urls(server))
            sb.run_code("kept = 'before the kill'")
            body = Paced(24 * MiB, 0.02 if when == "mid-body" else 0.001)
            staged = _staged(data / "blobs", len(body.data))
            thread, outcome = _in_thread(lambda: sb.files.write("/home/user/upload.bin", body))
            assert {"mid-body": body.halfway, "body-sent": body.done, "staged": staged}[when].wait(60)
            workers = _tree(server.process.pid)[1:]
            server.process.send_signal(signal.SIGKILL)
            server.process.communicate(timeout=30)
            thread.join(60)
            assert outcome and isinstance(outcome[0], Exception), outcome  # the SDK's error, or the transport's
            _wait_gone(workers)  # the workers end with their server
        except BaseException:
            if server.process.poll() is None:
                server.stop()
            raise
        server = LiveServer(data)  # restarted on the same data folder
        try:
            again = Sandbox.connect(sb.sandbox_id, **urls(server))
            assert again.run_code("kept").text == "'before the kill'"
            if again.files.exists("upload.bin"):  # whole, or not there at all
                assert _digest_of_stream(again, "upload.bin") == hashlib.sha256(body.data).hexdigest()
            assert [e.name for e in again.files.list("/home/user")] in ([], ["upload.bin"])
            again.files.write("after.txt", "written after the restart")  # the sandbox takes uploads again
            assert again.files.read("after.txt") == "written after the restart"
            again.kill()
        finally:
            server.stop()


def _wait_gone(pids: list[int]) -> None:
    give_up = time.monotonic() + 30
    while (alive := [pid for pid in pids if Path(f"/proc/{pid}").exists() and _status(pid, "VmRSS")]):
        assert time.monotonic() < give_up, f"workers {alive} outlived their server"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("e2b-cut") / "data")
    try:
        with e2b_environment():
            yield live
    finally:
        live.stop()


def _still_serving(server: LiveServer) -> None:
    assert httpx2.get(f"{server.base_url}/healthz", timeout=10).status_code == 200
    fresh = Sandbox.create(**urls(server))
    try:
        fresh.files.write("x.txt", "x")
        assert fresh.run_code("open('x.txt').read() * 2").text == "'xx'"
    finally:
        fresh.kill()


def test_a_sandbox_killed_under_a_running_cell_fails_it_as_the_sdk_does(server: LiveServer) -> None:
    sb = Sandbox.create(**urls(server))
    started = threading.Event()
    thread, outcome = _in_thread(lambda: sb.run_code(
        "import time\nprint('started', flush=True)\ntime.sleep(30)", on_stdout=lambda _: started.set()))
    assert started.wait(30)
    killed_at = time.monotonic()
    assert Sandbox.kill(sb.sandbox_id, **urls(server))  # a second client
    thread.join(30)
    assert outcome and isinstance(outcome[0], TimeoutException), outcome
    assert "killed" in str(outcome[0]) and time.monotonic() - killed_at < 15  # not the cell's 30 s
    assert not sb.is_running()
    _still_serving(server)


def test_a_sandbox_killed_under_an_upload_fails_it_as_the_sdk_does(server: LiveServer) -> None:
    sb = Sandbox.create(**urls(server))
    body = Paced(16 * MiB, 0.02)  # about 1.3 s of body
    thread, outcome = _in_thread(lambda: sb.files.write("/home/user/slow.bin", body))
    assert body.halfway.wait(30)
    assert Sandbox.kill(sb.sandbox_id, **urls(server))
    thread.join(30)
    assert outcome and isinstance(outcome[0], SandboxNotRunningException), outcome
    assert "was not found" in str(outcome[0])
    _still_serving(server)
