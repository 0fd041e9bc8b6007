"""A wheel from a clean clone with an empty guest cache, the way a newcomer makes
one: `git clone`, then `python -m build --wheel` (and `pip wheel .`, which builds
in pip's own isolated environment). The guest build inside downloads its pinned
inputs with pip, in an isolated environment that has only [build-system] requires.

Slow (the whole guest build, one to two minutes and about 190 MB of downloads):
one build from the empty cache, then `pip wheel .` reusing that cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.liveserver import REPO

pytestmark = pytest.mark.slow


def _env(cache: Path) -> dict[str, str]:
    # The user's pip configuration (index, find-links, certificates) passes through, as for any user.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_") and k != "PYTHONPATH"}
    env["WASMRUN_CACHE_DIR"] = str(cache)
    return env


def test_wheel_from_a_clean_clone_with_an_empty_guest_cache(tmp_path: Path) -> None:
    clone = tmp_path / "wasmrun"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    cache = tmp_path / "cache"
    cache.mkdir()

    start = time.monotonic()
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(clone)],
                           env=_env(cache), capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    print(f"python -m build --wheel from an empty cache: {time.monotonic() - start:.0f} s")
    (wheel,) = (tmp_path / "dist").glob("wasmrun-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert "python_wasm/guest/snapshot.wasm" in names and "python_wasm/guest/manifest.json" in names
    assert "wasmrun/playground/index.html" in names
    assert (cache / "downloads").is_dir()  # it did download into the empty cache

    # pip's own isolated build (what `pip install .` runs too), with the cache now warm.
    pip_built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "pip-dist"), str(clone)],
        env=_env(cache), capture_output=True, text=True, timeout=1800,
    )
    assert pip_built.returncode == 0, pip_built.stderr[-3000:]
    assert list((tmp_path / "pip-dist").glob("wasmrun-*.whl"))
