"""The guest appended to a one-file executable (python_wasm/payload.py): found after any
leading bytes, unpacked once and all or nothing, hostile archives and folders refused."""

from __future__ import annotations

import hashlib
import os
import threading
import zipfile
from pathlib import Path

import pytest

from python_wasm import payload


def _exe(tmp_path: Path, members: dict[str, bytes]) -> Path:
    archive = tmp_path / "guest.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    exe = tmp_path / "exe"
    exe.write_bytes(os.urandom(4096) + b"MEI\x0c\x0b\x0a\x0b\x0e" + os.urandom(100))  # stands in for PyInstaller's part
    payload.append(exe, archive, hashlib.sha256(archive.read_bytes()).digest())
    return exe


def test_unpacked_once_then_reused(tmp_path: Path) -> None:
    exe = _exe(tmp_path, {"manifest.json": b'{"key": "k"}', "lib/x.zip": b"z" * 1000, "compiled/a.cwasm": b"c"})
    folder = payload.unpack(exe, tmp_path / "cache")
    assert folder is not None and (folder / "lib" / "x.zip").read_bytes() == b"z" * 1000
    (folder / "marker").write_text("still here")
    assert payload.unpack(exe, tmp_path / "cache") == folder
    assert (folder / "marker").exists()  # not unpacked again
    assert oct((tmp_path / "cache" / "onefile").stat().st_mode & 0o777) == "0o700"


def test_no_trailer_means_no_guest(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(os.urandom(10_000))
    assert payload.unpack(plain, tmp_path / "cache") is None
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert payload.unpack(empty, tmp_path / "cache") is None


def test_a_member_escaping_the_folder_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    exe = _exe(tmp_path, {"manifest.json": b"{}", "../evil": b"x"})
    with pytest.raises(ValueError, match="bad member"):
        payload.unpack(exe, tmp_path / "cache")
    assert list((tmp_path / "cache" / "onefile").iterdir()) == []
    assert not (tmp_path / "cache" / "evil").exists()


def test_a_cache_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    exe = _exe(tmp_path, {"manifest.json": b"{}"})
    (tmp_path / "cache" / "onefile").mkdir(parents=True)
    (tmp_path / "cache" / "onefile").chmod(0o777)
    with pytest.raises(PermissionError):
        payload.unpack(exe, tmp_path / "cache")


def test_starts_at_once_unpack_one_folder(tmp_path: Path) -> None:
    exe = _exe(tmp_path, {"manifest.json": b"{}", "big": os.urandom(2_000_000)})
    found: list[Path | None] = []
    threads = [threading.Thread(target=lambda: found.append(payload.unpack(exe, tmp_path / "cache"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(found)) == 1 and found[0] is not None
    assert [p.name for p in (tmp_path / "cache" / "onefile").iterdir()] == [found[0].name]
