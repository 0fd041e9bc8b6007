"""`wasmrun --version`, `wasmrun warm` and `wasmrun doctor` in a source checkout."""

from __future__ import annotations

import os
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest

from python_wasm import build as guest_build
from wasmrun.cli import doctor
from wasmrun.cli.main import main
from wasmrun.sandbox import precompile
from wasmrun.settings import BUNDLED_SKILLS


@pytest.fixture()
def guest() -> guest_build.Guest:
    return guest_build.build(quiet=True)


@pytest.fixture(scope="module")
def shared_cwasm() -> Path:
    """The guest compiled in the shared cache (compiling takes seconds; the wheel test does it)."""
    return precompile()


@pytest.fixture()
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guest: guest_build.Guest) -> Path:
    """A cache dir of its own that holds the checkout's guest (linked, not copied)."""
    cache = tmp_path / "cache"
    (cache / "guest").mkdir(parents=True)
    (cache / "guest" / guest.key).symlink_to(guest.folder)
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(cache))
    return cache


def _doctor(capsys: pytest.CaptureFixture[str], data_dir: Path) -> tuple[int, str]:
    code = main(["doctor", "--data-dir", str(data_dir)])
    return code, capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str], guest: guest_build.Guest) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"wasmrun 0.1.0 (wasmtime {version('wasmtime')}, guest {guest.key} built)\n"


def test_doctor_then_warm_then_doctor(
    shared_cwasm: Path, own_cache: Path, tmp_path: Path, guest: guest_build.Guest, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _doctor(capsys, tmp_path / "data")
    assert code == 0, out
    assert "compiled module  not compiled yet: the next start compiles it" in out
    (own_cache / "compiled").mkdir(mode=0o700, exist_ok=True)
    shutil.copy(shared_cwasm, own_cache / "compiled" / shared_cwasm.name)
    capsys.readouterr()
    assert main(["warm"]) == 0
    warmed = capsys.readouterr()
    assert warmed.err == ""  # found, not compiled again
    assert warmed.out == f"compiled module ready: {own_cache / 'compiled' / shared_cwasm.name}\n"
    code, out = _doctor(capsys, tmp_path / "data")
    assert code == 0, out
    lines = dict(line.split(None, 1) for line in out.splitlines() if line.startswith(("wasmrun", "wasmtime")))
    assert lines == {"wasmrun": "0.1.0", "wasmtime": version("wasmtime")}
    assert f"guest            {guest.key}, built in the cache: {own_cache / 'guest' / guest.key}" in out
    assert f"compiled module  ready: {own_cache / 'compiled' / shared_cwasm.name} (" in out
    assert f"cache            {own_cache} (" in out
    assert f"bundled skills   {BUNDLED_SKILLS} (4 skills)" in out
    assert out.rstrip().endswith("no problems found")


def test_no_guest_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WASMRUN_CACHE_DIR", str(tmp_path / "empty"))
    code, out = _doctor(capsys, tmp_path / "data")
    assert code == 1
    assert "no guest interpreter: this source checkout has not built it yet; run `make guest`" in out


def test_a_compiled_cache_others_can_write_is_a_problem(
    own_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (own_cache / "compiled").mkdir()
    os.chmod(own_cache / "compiled", 0o777)
    code, out = _doctor(capsys, tmp_path / "data")
    assert code == 1
    assert f"the compiled-module cache is unusable: compiled-module cache {own_cache / 'compiled'} is writable by others" in out


def test_a_data_dir_that_cannot_be_created_is_a_problem(
    own_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    code, out = _doctor(capsys, tmp_path / "a-file" / "data")
    assert code == 1
    assert f"the data dir {tmp_path / 'a-file' / 'data'} cannot be written or created by this user" in out


def test_low_free_disk_is_a_problem(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "MIN_FREE_BYTES", 1 << 62)
    code, out = _doctor(capsys, tmp_path / "data")
    assert code == 1
    assert "free for the cache; wasmrun needs at least" in out
    assert "free for the data dir; wasmrun needs at least" in out


def test_an_unusable_data_dir_is_a_problem_not_a_crash(
    own_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _doctor(capsys, tmp_path / ("a" * 5000))
    assert code == 1
    assert "the data dir " in out.split("problem(s):", 1)[1] and "File name too long" in out


def test_a_data_dir_name_that_is_not_utf8_is_shown_escaped(
    own_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _doctor(capsys, tmp_path / "data-\udcff")  # the byte 0xff, a valid name
    assert code == 0, out
    assert f"data dir         {tmp_path}/data-\\udcff (not created yet)" in out
