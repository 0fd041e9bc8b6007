"""The compiled-module cache: made once with progress on stderr, shared by
processes starting together, and rebuilt when a cached file cannot be loaded."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import wasmtime

from wasmrun.sandbox.images import compiled

SETTINGS = "test"
ADDER = "(module (func (export \"add\") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "compiled"


@pytest.fixture()
def wasm(tmp_path: Path) -> Path:
    path = tmp_path / "adder.wasm"
    path.write_bytes(wasmtime.wat2wasm(ADDER))
    return path


def _add(engine: wasmtime.Engine, module: wasmtime.Module) -> int:
    store = wasmtime.Store(engine)
    add = wasmtime.Instance(store, module, []).exports(store)["add"]
    assert isinstance(add, wasmtime.Func)
    result: int = add(store, 2, 3)
    return result


def test_compiles_once_with_progress_then_loads_from_the_cache(
    cache: Path, wasm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = wasmtime.Engine()
    assert _add(engine, compiled.load_module(engine, wasm, SETTINGS)) == 5
    said = capsys.readouterr().err
    assert f"wasmrun: compiling adder.wasm to machine code (once; cached in {cache})" in said
    assert "wasmrun: compiled in " in said
    (cached,) = cache.glob("*.cwasm")
    assert cached == compiled.cached_path(wasm, SETTINGS)
    assert _add(engine, compiled.load_module(engine, wasm, SETTINGS)) == 5
    assert capsys.readouterr().err == ""  # loaded, not compiled again


@pytest.mark.parametrize("damage", [
    pytest.param(b"", id="empty"),
    pytest.param(b"\x7fELF garbage" * 100, id="garbage"),
    pytest.param(None, id="truncated"),
])
def test_a_cached_file_that_cannot_be_loaded_is_compiled_again(
    cache: Path, wasm: Path, damage: bytes | None, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = wasmtime.Engine()
    compiled.load_module(engine, wasm, SETTINGS)
    path = compiled.cached_path(wasm, SETTINGS)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2] if damage is None else damage)
    capsys.readouterr()
    with pytest.raises(wasmtime.WasmtimeError):
        compiled.deserialize(engine, path)
    assert _add(engine, compiled.load_module(engine, wasm, SETTINGS)) == 5
    assert "compiling adder.wasm" in capsys.readouterr().err
    assert compiled.deserialize(engine, path) is not None  # the cache holds a good one again


def test_a_cache_folder_others_can_write_is_refused(cache: Path, wasm: Path) -> None:
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    with pytest.raises(PermissionError, match="writable by others"):
        compiled.load_module(wasmtime.Engine(), wasm, SETTINGS)


def test_processes_starting_together_compile_once(cache: Path, wasm: Path) -> None:
    script = (
        "import sys, wasmtime\n"
        "from pathlib import Path\n"
        "from wasmrun.sandbox import compiled\n"
        f"compiled.load_module(wasmtime.Engine(), Path(sys.argv[1]), {SETTINGS!r})\n"
    )
    starting = [
        subprocess.Popen([sys.executable, "-c", script, str(wasm)], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errs = [p.communicate(timeout=120)[1] for p in starting]
    assert [p.returncode for p in starting] == [0, 0, 0, 0], errs
    assert sum(err.count("compiling adder.wasm") for err in errs) == 1, errs
    assert len(list(cache.glob("*.cwasm"))) == 1


def test_a_module_is_hashed_once_until_its_file_changes(cache: Path, wasm: Path) -> None:
    """The module's digest names its compiled file; it is remembered for the file as it is (a
    data image is 170 MB to hash at every start), and a changed file is never taken for the old."""
    first = compiled.cached_path(wasm, SETTINGS)
    memos = list((cache / "digests").iterdir())
    assert len(memos) == 1 and memos[0].read_text().endswith(compiled.file_digest(wasm))
    assert compiled.cached_path(wasm, SETTINGS) == first
    other = wasmtime.wat2wasm(ADDER.replace("i32.add", "i32.sub"))
    assert len(other) == wasm.stat().st_size  # the same size, another module
    time.sleep(0.05)  # past the file system clock's tick: a rewrite shows in the mtime
    wasm.write_bytes(other)
    changed = compiled.cached_path(wasm, SETTINGS)
    assert changed != first
    memos[0].write_text(memos[0].read_text().rsplit("\n", 1)[0] + "\n" + "0" * 64)  # a stale digest for this file...
    time.sleep(0.05)
    wasm.write_bytes(other)  # ...is not used once the file is written again
    assert compiled.cached_path(wasm, SETTINGS) == changed
