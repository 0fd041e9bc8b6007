"""The guest build's cache: keyed by inputs, private, and pruned of stale builds."""

from __future__ import annotations

import os
import time

from python_wasm import build, downloads


def test_stale_builds_are_pruned_recent_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(tmp_path))
    guests, compiled = tmp_path / "guest", tmp_path / "compiled"
    for name in ("old", "recent", "current"):
        (guests / name / "lib").mkdir(parents=True)
    compiled.mkdir()
    (compiled / "old.cwasm").write_bytes(b"x")
    (compiled / "recent.cwasm").write_bytes(b"x")
    long_ago = time.time() - 30 * 24 * 3600
    for path in (guests / "old", guests / "current", compiled / "old.cwasm"):
        os.utime(path, (long_ago, long_ago))

    build.prune_stale(keep=guests / "current")

    assert sorted(p.name for p in guests.iterdir()) == ["current", "recent"]
    assert sorted(p.name for p in compiled.iterdir()) == ["recent.cwasm"]


def test_built_guest_is_found_by_its_input_key():
    guest = build.build(quiet=True)
    assert guest.snapshot_wasm.exists() and guest.zip_path.exists()
    assert guest.key == build.guest_dir().name
    manifest = guest.lib_dir.parent / "manifest.json"
    built_at = manifest.stat().st_mtime_ns
    assert build.build(quiet=True) == guest  # cached: found, not rebuilt
    assert build.built_guest() == guest
    assert manifest.stat().st_mtime_ns == built_at


def test_cache_dir_is_overridable(tmp_path, monkeypatch):
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert downloads.cache_root() == tmp_path / "elsewhere"
