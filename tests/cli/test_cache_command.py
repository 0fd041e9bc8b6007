"""The bounded cache (issue #48 item 4): a server's start prunes a cache holding three old
image versions to the current one by its own rule (cachebound.py), keeps what a live pid's
lease holds and drops what a dead pid's lease held, while it goes on serving runs; the
`wasmrun cache` command lists and prunes with the same rule without harming that server.

Everything happens in a cache folder of the test's own (WASMRUN_CACHE_DIR): the current
guest and its compiled module are hard links to the shared cache's files (never changed
here); the old versions copy the current one's layout, file names and sizes (sparse files)
under other version ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from python_wasm import build as guest_build
from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.sandbox import cachebound, leases, precompiled_path

TWO_DAYS_AGO = time.time() - 2 * 86400


def _link_tree(src: Path, dst: Path) -> None:
    for top, _, files in os.walk(src):
        target = dst / Path(top).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.link(Path(top) / name, target / name)


def _shaped_like(src: Path, dst: Path) -> None:
    """`src`'s folders and file names, each file as big as its original (sparse), all two days old."""
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "wb") as f:
            f.truncate(src.stat().st_size)
        os.utime(dst, (TWO_DAYS_AGO, TWO_DAYS_AGO))
        return
    for top, _, files in os.walk(src):
        target = dst / Path(top).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            _shaped_like(Path(top) / name, target / name)
    for top, dirs, _ in os.walk(dst, topdown=False):
        for name in [*dirs, ""]:
            os.utime(Path(top) / name, (TWO_DAYS_AGO, TWO_DAYS_AGO))


def _old_version(cache: Path, guest: Path, module: Path, version: str) -> list[Path]:
    """A guest folder, its compiled module (+ lock) and bytecode folder under `version`."""
    folder = cache / "guest" / version
    _shaped_like(guest, folder)
    cwasm = cache / "compiled" / f"{version}{'0' * (32 - len(version))}.cwasm"
    _shaped_like(module, cwasm)
    lock = cwasm.with_suffix(".lock")
    _shaped_like(module.with_suffix(".lock") if module.with_suffix(".lock").exists() else module, lock)
    bytecode = cache / "bytecode" / version
    bytecode.mkdir(parents=True)
    os.utime(bytecode, (TWO_DAYS_AGO, TWO_DAYS_AGO))
    return [folder, cwasm, lock, bytecode]


def _lease(cache: Path, pid: int, names: list[str]) -> Path:
    path = leases.lease_path(cache, pid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "written": time.time(), "holds": names}))
    return path


def _run(server: LiveServer, code: str) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": {"language": "python", "code": code}}
    reply = httpx2.post(server.endpoint, json=body, timeout=120).json()
    assert reply["result"]["status"] == "completed", reply
    return reply["result"]["output"]


def _cache_cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "wasmrun", "cache", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def shared() -> tuple[Path, Path]:
    """The shared cache's current guest and its compiled module (made if missing, as any test's server would).
    Built again if the checkout's guest sources changed meanwhile (other work in the same tree)."""
    guest = guest_build.ready_guest()
    for _ in range(3):
        if guest.key == guest_build.guest_dir().name or guest.packaged:
            break
        guest = guest_build.ready_guest()
    module = precompiled_path(guest)
    if not module.exists():
        from wasmrun.sandbox import precompile

        precompile()
    return guest.folder, module


def test_a_server_prunes_old_versions_to_the_current_one_and_keeps_leases(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    guest_src, module_src = shared
    cache = tmp_path / "cache"
    _link_tree(guest_src, cache / "guest" / guest_src.name)
    (cache / "compiled").mkdir(mode=0o700)
    os.link(module_src, cache / "compiled" / module_src.name)

    old = [p for version in ("0ld1", "0ld2", "0ld3") for p in _old_version(cache, guest_src, module_src, version)]
    kept_by_lease = _old_version(cache, guest_src, module_src, "1eased")
    held_by_the_dead = _old_version(cache, guest_src, module_src, "dead")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    try:
        _lease(cache, sleeper.pid, [p.relative_to(cache).as_posix() for p in kept_by_lease])
        dead_lease = _lease(cache, finished.pid, [p.relative_to(cache).as_posix() for p in held_by_the_dead])
        # Hostile shapes: a symlinked "version" pointing out of the cache, a name starting with "..".
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "precious").write_text("not the cache's")
        (cache / "guest" / "evil").symlink_to(outside, target_is_directory=True)
        os.utime(cache / "guest" / "evil", (TWO_DAYS_AGO, TWO_DAYS_AGO), follow_symlinks=False)
        dots = cache / "guest" / "..dots"
        dots.mkdir()
        os.utime(dots, (TWO_DAYS_AGO, TWO_DAYS_AGO))
        before = cachebound.total_bytes(cache)
        assert before > 6 * module_src.stat().st_size  # the old versions count at their real sizes

        env = wasmrun_env() | {"WASMRUN_CACHE_DIR": str(cache), "WASMRUN_IMAGE": "stdlib", "WASMRUN_CACHE_MAX_MB": "1"}
        server = LiveServer(tmp_path / "data", "--workers", "1", env=env)
        try:
            assert _run(server, "6 * 7") == 42
            assert not any(p.exists() for p in old), [p for p in old if p.exists()]
            assert all(p.exists() for p in kept_by_lease)  # a live pid's fresh lease
            assert not any(p.exists() for p in held_by_the_dead) and not dead_lease.exists()
            assert not (cache / "guest" / "evil").is_symlink() and (outside / "precious").read_text() == "not the cache's"
            assert not dots.exists()
            assert (cache / "guest" / guest_src.name / "snapshot.wasm").exists()
            assert (cache / "compiled" / module_src.name).exists()
            # The server's own lease holds its version.
            own = leases.read_lease(leases.lease_path(cache, server.process.pid))
            assert own is not None and f"guest/{guest_src.name}" in own[1], own

            # The command's rule is the server's: with the server up, its version is kept.
            listing = _cache_cli(env, "list")
            assert f"guest/{guest_src.name}  (current)" in listing, listing
            assert "guest/1eased  (leased by pid" in listing, listing
            sleeper.kill()
            sleeper.wait()
            pruned = _cache_cli(env, "prune")
            assert "removed guest/1eased" in pruned, pruned
            assert not any(p.exists() for p in kept_by_lease)
            assert (cache / "compiled" / module_src.name).exists()
            assert _run(server, "'still serving'") == "still serving"
        finally:
            server.stop()
        assert not leases.lease_path(cache, server.process.pid).exists()  # released on a clean stop
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_cap_removes_the_least_recently_used_first(tmp_path: Path, shared: tuple[Path, Path]) -> None:
    guest_src, module_src = shared
    cache = tmp_path / "cache"
    versions = {}
    for age, version in enumerate(("newest", "middle", "oldest")):
        paths = _old_version(cache, guest_src, module_src, version)
        when = TWO_DAYS_AGO - age * 3600
        for path in paths:
            os.utime(path, (when, when))
        versions[version] = paths
    one = sum(cachebound.tree_size(p)[0] for p in versions["oldest"])
    total = cachebound.total_bytes(cache)
    env = wasmrun_env() | {"WASMRUN_CACHE_DIR": str(cache)}
    out = _cache_cli(env, "prune", "--max-bytes", str(total - one))  # room for all but one version
    assert not any(p.exists() for p in versions["oldest"]), out
    assert all(p.exists() for p in versions["middle"] + versions["newest"]), out
    assert cachebound.total_bytes(cache) <= total - one

    bad = subprocess.run([sys.executable, "-m", "wasmrun", "cache", "prune", "--max-bytes", "lots"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a size" in bad.stderr


def test_a_start_measures_the_cache_again_only_once_it_gained_a_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measuring the cache walks all of it (2 s for a source build's): a server's start skips it
    when nothing was added since the last prune under the same cap, and never misses a version
    added since, nor a cap changed."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(cache))

    def old_guest(version: str) -> Path:
        folder = cache / "guest" / version
        folder.mkdir(parents=True)
        (folder / "snapshot.wasm").write_bytes(b"\0" * 4096)
        for path in (folder / "snapshot.wasm", folder):
            os.utime(path, (TWO_DAYS_AGO, TWO_DAYS_AGO))
        return folder

    first = old_guest("0ld1")
    pruned = cachebound.prune_on_start(1000, None)
    assert pruned is not None and [e.name for e in pruned.removed] == ["guest/0ld1"] and not first.exists()
    assert cachebound.prune_on_start(1000, None) is None  # nothing new: not measured again
    time.sleep(0.05)  # (a later mtime than the last prune's, past the file system clock's tick)
    second = old_guest("0ld2")
    os.utime(cache / "guest")  # added now, as a build adds a version
    again = cachebound.prune_on_start(1000, None)
    assert again is not None and [e.name for e in again.removed] == ["guest/0ld2"] and not second.exists()
    assert cachebound.prune_on_start(2000, None) is not None  # another cap: measured again
