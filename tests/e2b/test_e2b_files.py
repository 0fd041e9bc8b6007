"""E2B's files upload and download through the real SDK, streamed (wasmrun/e2b/transfer.py):
files as large as the workspace quota go both ways, a large multipart body is parsed off
the event loop in little memory, an upload over the quota is the SDK's NotEnoughSpace with
nothing left under its name, and what the session's file program answers is checked."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2b import NotEnoughSpaceException, SandboxException
from e2b.sandbox.filesystem.filesystem import WriteEntry
from e2b_code_interpreter import Sandbox

from tests.e2benv import E2B_VARS, e2b_environment
from tests.liveserver import LiveServer, wasmrun_env
from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from wasmrun.tenants.store import TenantStore

MiB = 1024 * 1024


class Live:
    def __init__(self, server: LiveServer, alice: str, bob: str) -> None:
        self.server, self.alice, self.bob = server, alice, bob

    def sandbox(self, key: str | None = None) -> Sandbox:
        return new_sandbox(self.server, key or self.alice)


def new_sandbox(server: LiveServer, key: str) -> Sandbox:
    return Sandbox.create(api_url=f"{server.base_url}/e2b/api", sandbox_url=f"{server.base_url}/e2b/sandbox",
                          api_key=key)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("e2b-files") / "data"
    store = TenantStore(data)
    alice, bob = store.add("alice"), store.add("bob")
    server = LiveServer(data)
    try:
        with e2b_environment():
            yield Live(server, alice, bob)
    finally:
        server.stop()


@pytest.fixture
def sandbox(live: Live) -> Iterator[Sandbox]:
    sb = live.sandbox()
    try:
        yield sb
    finally:
        sb.kill()


def sha256_of_download(sb: Sandbox, path: str) -> str:
    """The file's digest, read as the SDK streams it (never held whole here either)."""
    digest = hashlib.sha256()
    for chunk in sb.files.read(path, format="stream"):
        digest.update(chunk)
    return digest.hexdigest()


def _kib(status: Path, field: str) -> int:
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def rss_growth(pid: int, action: Callable[[], Any]) -> int:
    """How far the process's resident memory rose above where it was while `action` ran:
    its peak (VmHWM, reset first where the kernel lets us), and samples every 10 ms."""
    status = Path(f"/proc/{pid}/status")
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from now on
        reset = True
    except OSError:
        reset = False
    base = _kib(status, "VmRSS")
    samples = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            samples.append(_kib(status, "VmRSS"))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        action()
    finally:
        done.set()
        sampler.join()
    peak = max(max(samples), _kib(status, "VmHWM") if reset else 0)
    return peak - base


class Prober:
    """/healthz asked every 50 ms from another thread: the longest answer it waited for."""

    def __init__(self, url: str) -> None:
        self.url, self.longest, self.answers = url, 0.0, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpx2.Client(timeout=30) as client:
            while not self._done.wait(0.05):
                started = time.monotonic()
                assert client.get(self.url).status_code == 200
                self.longest = max(self.longest, time.monotonic() - started)
                self.answers += 1

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def test_a_63_mib_file_goes_up_as_a_stream_and_comes_back_equal(sandbox: Sandbox) -> None:
    """The SDK sends a file object as an octet-stream body: 63 MiB (the 64 MiB workspace
    quota's worth) is written and streamed back byte for byte."""
    data = os.urandom(63 * MiB)
    written = sandbox.files.write("/home/user/big.bin", io.BytesIO(data))
    assert written.path == "/home/user/big.bin"
    assert sha256_of_download(sandbox, "big.bin") == hashlib.sha256(data).hexdigest()
    assert sandbox.files.get_info("big.bin").size == 63 * MiB
    assert sandbox.run_code("import os; os.path.getsize('big.bin')").text == str(63 * MiB)


def test_a_60_mib_multipart_upload_is_parsed_off_the_event_loop_in_little_memory(live: Live, sandbox: Sandbox) -> None:
    data = os.urandom(60 * MiB)
    with Prober(f"{live.server.base_url}/healthz") as prober:
        growth = rss_growth(live.server.process.pid, lambda: sandbox.files.write("multi.bin", data))  # bytes: multipart
    assert growth < 200 * MiB, f"the server grew {growth / MiB:.0f} MiB for a 60 MiB upload"
    assert prober.answers > 0 and prober.longest < 1.0, f"/healthz waited {prober.longest:.2f} s during the upload"
    assert sha256_of_download(sandbox, "/home/user/multi.bin") == hashlib.sha256(data).hexdigest()
    assert sandbox.files.read("multi.bin", format="bytes") == data


def test_an_upload_over_the_workspace_quota_is_not_enough_space_and_leaves_nothing(sandbox: Sandbox) -> None:
    kept = os.urandom(40 * MiB)
    sandbox.files.write("kept.bin", io.BytesIO(kept))
    with pytest.raises(NotEnoughSpaceException, match="quota"):  # fits alone, not beside kept.bin
        sandbox.files.write("second.bin", io.BytesIO(os.urandom(30 * MiB)))
    assert not sandbox.files.exists("second.bin")
    with pytest.raises(NotEnoughSpaceException, match="quota"):  # over the quota itself: refused before it is read
        sandbox.files.write("huge.bin", b"x" * (70 * MiB))
    assert not sandbox.files.exists("huge.bin")
    with pytest.raises(NotEnoughSpaceException):  # in place of kept.bin: kept.bin stays as it was
        sandbox.files.write("kept.bin", io.BytesIO(os.urandom(66 * MiB)))
    assert sha256_of_download(sandbox, "kept.bin") == hashlib.sha256(kept).hexdigest()
    assert sorted(e.name for e in sandbox.files.list("/home/user")) == ["kept.bin"]


def test_gzip_and_several_files_in_one_multipart_upload(sandbox: Sandbox) -> None:
    text = "line of text\n" * 200_000
    sandbox.files.write("packed.txt", text, gzip=True)
    assert sandbox.files.read("packed.txt") == text
    entries = [WriteEntry(path=f"/home/user/many/{i}.txt", data=f"file {i}") for i in range(5)]
    written = sandbox.files.write_files(entries)
    assert [w.path for w in written] == [e["path"] for e in entries]
    assert [sandbox.files.read(f"many/{i}.txt") for i in range(5)] == [f"file {i}" for i in range(5)]


# What a cell may do to the session's modules before the file program runs there.
HOSTILE = """
import os, base64, _wasmrun
_saved = (os.lstat, base64.b64encode, _wasmrun.blob_write)
class _Junk:
    def __init__(self, st):
        self.st_mode, self.st_size, self.st_mtime = st.st_mode, "huge", 1e300
os.lstat = lambda *a, **k: _Junk(_saved[0](*a, **k))
base64.b64encode = lambda *a, **k: 7
_wasmrun.blob_write = lambda data, kind: "blob:" + "0" * 32
"""
UNDO = "os.lstat, base64.b64encode, _wasmrun.blob_write = _saved"


def test_what_the_file_program_answers_is_checked(live: Live, sandbox: Sandbox) -> None:
    sandbox.files.write("x.txt", "content")
    assert sandbox.run_code(HOSTILE).error is None
    for call in (lambda: sandbox.files.list("/home/user"), lambda: sandbox.files.get_info("x.txt"),
                 lambda: sandbox.files.read("x.txt")):
        with pytest.raises(SandboxException) as refused:
            call()
        assert "unexpected" in str(refused.value) and "Internal Server Error" not in str(refused.value)
    assert httpx2.get(f"{live.server.base_url}/healthz", timeout=10).status_code == 200
    assert sandbox.run_code(UNDO).error is None
    assert sandbox.files.read("x.txt") == "content" and [e.name for e in sandbox.files.list("/home/user")] == ["x.txt"]


def test_files_move_through_the_shared_blob_store(
    tmp_path: Path, s3_server: S3Server, database_url: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """On --database-url and --blob-store the transfer's blobs are objects in the S3 store."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    for name in E2B_VARS:
        monkeypatch.delenv(name, raising=False)
    server = LiveServer(tmp_path / "data", "--database-url", database_url, "--blob-store", s3_server.new_bucket(),
                        env=wasmrun_env() | s3_server.env())
    try:
        sb = new_sandbox(server, "any")
        try:
            data = os.urandom(9 * MiB + 5)  # two of the download's blobs
            sb.files.write("shared.bin", io.BytesIO(data))
            sb.files.write("multi.bin", data[:3 * MiB])
            assert sha256_of_download(sb, "shared.bin") == hashlib.sha256(data).hexdigest()
            assert sb.files.read("multi.bin", format="bytes") == data[:3 * MiB]
        finally:
            sb.kill()
    finally:
        server.stop()


def test_hostile_upload_and_download_requests_are_refused_clearly(live: Live, sandbox: Sandbox) -> None:
    import gzip

    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"}
    url = f"{live.server.base_url}/e2b/sandbox/files"

    def post(params: dict[str, str] | None = None, **kw: Any) -> httpx2.Response:
        return httpx2.post(url, params=params, headers={**headers, **kw.pop("headers", {})}, timeout=60, **kw)

    octet = {"Content-Type": "application/octet-stream"}
    assert post(content=b"x", headers=octet).status_code == 400  # no path
    bomb = gzip.compress(bytes(200 * MiB), compresslevel=1)  # 200 KiB that inflate past the quota
    refused = post({"path": "bomb.bin"}, content=bomb, headers={**octet, "Content-Encoding": "gzip"})
    assert refused.status_code == 507 and "quota" in refused.json()["message"]
    for body in (b"not gzip", gzip.compress(b"cut short")[:-4], gzip.compress(b"x") + b"trailing"):
        refused = post({"path": "z.bin"}, content=body, headers={**octet, "Content-Encoding": "gzip"})
        assert refused.status_code == 400 and "gzip" in refused.json()["message"]
    assert post({"path": "z.bin"}, content=b"x", headers={**octet, "Content-Encoding": "br"}).status_code == 400
    many = [("file", (f"{i}.txt", b"x")) for i in range(101)]
    assert "Too many files" in post(files=many).json()["message"]
    assert post(data={"field": "x" * 100_000}, files=[("file", ("a.txt", b"x"))]).status_code == 400
    assert post(data={"field": "x"}).status_code == 400  # no file
    assert post(content=b"--nope--", headers={"Content-Type": "multipart/form-data"}).status_code == 400  # no boundary
    sandbox.files.make_dir("folder")
    assert sandbox.run_code("import os; os.symlink('..', 'out')").error is None
    for path, status in (("folder", 400), ("out/escape.txt", 403), ("../x", 400)):
        assert post({"path": path}, content=b"x", headers=octet).status_code == status, path
        got = httpx2.get(url, params={"path": path}, headers=headers, timeout=60)
        assert got.status_code == status, (path, got.text)
    assert httpx2.get(url, params={"path": "missing.bin"}, headers=headers, timeout=60).status_code == 404
    # The session's own blob, handed back by a replaced blob_write: not streamed, not deleted.
    own = sandbox.run_code("from runtime import blobs\nmine = blobs.write_bytes(b'mine')\nmine").text
    sandbox.files.write("y.txt", "y")
    replace = f"import _wasmrun\n_keep = _wasmrun.blob_write\n_wasmrun.blob_write = lambda d, k: {own}"
    assert sandbox.run_code(replace).error is None
    with pytest.raises(SandboxException, match="unexpected"):
        sandbox.files.read("y.txt")
    assert sandbox.run_code("_wasmrun.blob_write = _keep").error is None
    read = httpx2.post(live.server.endpoint, headers={"Authorization": f"Bearer {live.alice}"}, timeout=60, json={
        "jsonrpc": "2.0", "id": 1, "method": "read_blob", "params": {"blob_id": own.strip("'")}}).json()
    assert read["result"]["content"] == "bWluZQ==", read  # b"mine", still there
    assert sandbox.files.read("y.txt") == "y"
