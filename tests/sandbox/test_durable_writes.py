"""Files are written all or nothing, and a damaged compiled-module cache is rebuilt."""

from __future__ import annotations

import pytest
import wasmtime

from wasmrun import durable
from wasmrun.sandbox.images import compiled, stdlibimage

WAT = '(module (func (export "answer") (result i32) (i32.const 42)))'


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(durable.TMP_PREFIX))


def test_atomic_write_replaces_whole_files(tmp_path):
    target = tmp_path / "f.bin"
    durable.atomic_write(target, b"old")
    durable.atomic_write(target, b"new" * 1000)
    assert target.read_bytes() == b"new" * 1000
    assert _leftovers(tmp_path) == []


def test_atomic_write_without_replace_refuses_an_existing_file(tmp_path):
    target = tmp_path / "f.bin"
    durable.atomic_write(target, b"first", replace=False)
    with pytest.raises(FileExistsError):
        durable.atomic_write(target, b"second", replace=False)
    assert target.read_bytes() == b"first"
    assert _leftovers(tmp_path) == []


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "inside").write_text("x")
    with pytest.raises(OSError):
        durable.atomic_write(tmp_path / "taken", b"data")  # cannot rename a file over a folder
    assert _leftovers(tmp_path) == []


@pytest.fixture()
def wasm_file(tmp_path, monkeypatch):
    cache = tmp_path / "compiled"
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(compiled, "cache_dir", lambda: cache)
    wasm = tmp_path / "answer.wasm"
    wasm.write_bytes(wasmtime.wat2wasm(WAT))
    return wasm, cache


def _answer(engine, module) -> int:
    store = wasmtime.Store(engine)
    store.set_epoch_deadline(10**6)
    return wasmtime.Instance(store, module, []).exports(store)["answer"](store)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_compiled_module_is_compiled_again_and_replaced(wasm_file, damage):
    wasm, cache = wasm_file
    engine = wasmtime.Engine(stdlibimage.engine_config())
    assert _answer(engine, compiled.load_module(engine, wasm, stdlibimage.ENGINE_SETTINGS)) == 42
    [cached] = cache.glob("*.cwasm")
    good = cached.read_bytes()
    cached.write_bytes({"garbage": b"\x7fELF" + b"\0garbage" * 100, "truncated": good[: len(good) // 2], "empty": b""}[damage])
    assert _answer(engine, compiled.load_module(engine, wasm, stdlibimage.ENGINE_SETTINGS)) == 42
    assert wasmtime.Module.deserialize(engine, cached.read_bytes()) is not None  # replaced by a good one
    assert _leftovers(cache) == []


def test_loading_sweeps_old_temporary_files_only(wasm_file):
    import os
    import time

    wasm, cache = wasm_file
    stale, fresh = cache / f"{durable.TMP_PREFIX}killed", cache / f"{durable.TMP_PREFIX}writing"
    stale.write_bytes(b"half a module")
    fresh.write_bytes(b"being written now")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    compiled.load_module(wasmtime.Engine(stdlibimage.engine_config()), wasm, stdlibimage.ENGINE_SETTINGS)
    assert not stale.exists()
    assert fresh.exists()
