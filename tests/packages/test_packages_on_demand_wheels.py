"""Hostile wheels and the operator's policy, through the on-demand installer itself
(wasmrun/packages/ondemand.py) with real pip: each hostile wheel is served by a local
index (pip's own configuration: PIP_FIND_LINKS, PIP_NO_INDEX), refused by name, and
leaves nothing behind; the policy's modes and caps refuse what they should."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from wasmrun.packages import names, wheels
from wasmrun.packages.ondemand import OnDemand, Refused
from wasmrun.packages.policy import PackagePolicy, load_package_policy

TAG = "cp311"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    folder: Path, name: str, files: dict[str, bytes], *, record: Callable[[dict[str, bytes]], str] | None = None,
    symlink: str | None = None, compress: bool = True, version: str = "1.0",
) -> Path:
    """A wheel `name`-`version` holding `files` (and its metadata), its RECORD right unless `record` says otherwise."""
    dist = f"{name}-{version}.dist-info"
    members = dict(files)
    members[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = record(members) if record else "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in members.items())
    path = folder / f"{name}-{version}-py3-none-any.whl"
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        if symlink is not None:
            info = zipfile.ZipInfo(f"{name}/link")
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, symlink)
        zf.writestr(f"{dist}/RECORD", rows + f"{dist}/RECORD,,\n")
    return path


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local package index, as pip's configuration names it (the operator's own)."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


def _left(data: Path) -> list[str]:
    root = data / "packages" / "sets" / TAG
    return sorted(p.name for p in root.iterdir() if p.name.startswith(("s-", ".tmp-", ".work-"))) if root.exists() else []


def test_a_good_local_wheel_installs(index: Path, tmp_path: Path) -> None:
    make_wheel(index, "goodpkg", {"goodpkg/__init__.py": b"VALUE = 42\n"})
    installed = OnDemand(tmp_path / "data").install(["goodpkg"], TAG, "alice")
    site = installed.folder / "site-packages"
    assert (site / "goodpkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert not os.access(site / "goodpkg" / "__init__.py", os.W_OK) or os.geteuid() == 0
    assert [p.name for p in installed.info.packages] == ["goodpkg"]


HOSTILE: dict[str, tuple[dict[str, bytes], dict[str, object], str]] = {
    "zip-slip": ({"../../escape.py": b"x = 1\n"}, {}, "climbs out"),
    "absolute": ({"/etc/evil.py": b"x = 1\n"}, {}, "absolute"),
    "symlink": ({"evilpkg/__init__.py": b""}, {"symlink": "/etc/passwd"}, "symbolic link"),
    "native": ({"evilpkg/_speed.so": b"\x7fELF"}, {}, "native code"),
    "shadows-stdlib": ({"json/__init__.py": b"HACKED = 1\n"}, {}, "shadow the image's own module 'json'"),
    "shadows-runtime": ({"runtime/__init__.py": b""}, {}, "shadow the image's own module 'runtime'"),
    "bad-hash": ({"evilpkg/__init__.py": b"x = 1\n"},
                 {"record": lambda m: "".join(f"{p},sha256=AAAA,{len(d)}\n" for p, d in m.items())}, "does not match"),
    "not-in-record": ({"evilpkg/__init__.py": b"x = 1\n"},
                      {"record": lambda m: "".join(f"{p},{_digest(d)},{len(d)}\n" for p, d in m.items()
                                                   if not p.endswith("__init__.py"))}, "not in the wheel's RECORD"),
    "bomb": ({"evilpkg/__init__.py": b"", "evilpkg/big.txt": b"\0" * (64 << 20)}, {}, "compression bomb"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_wheel_is_refused_with_nothing_left(index: Path, tmp_path: Path, case: str) -> None:
    files, extra, said = HOSTILE[case]
    make_wheel(index, "evilpkg", files, **extra)  # type: ignore[arg-type]
    data = tmp_path / "data"
    with pytest.raises(wheels.UnsafeWheel, match=said):
        OnDemand(data).install(["evilpkg"], TAG, "mallory")
    assert _left(data) == []  # no set, no half-built folder
    assert OnDemand(data).usage("mallory") == ([], 0)  # nothing charged
    assert not (tmp_path / "escape.py").exists()


def test_too_many_members_are_refused(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "MAX_MEMBERS", 50)
    make_wheel(index, "manypkg", {f"manypkg/m{i}.py": b"" for i in range(60)})
    with pytest.raises(wheels.UnsafeWheel, match="more than 50 members"):
        OnDemand(tmp_path / "data").install(["manypkg"], TAG, "alice")
    assert _left(tmp_path / "data") == []


def test_a_name_asked_for_twice_must_satisfy_both(index: Path, tmp_path: Path) -> None:
    """As pip takes `pip install 'x>=2' 'x<3'`: one requirement with both specifiers (not the
    last one silently); pins that cannot both hold, or a version the index lacks, are refused
    by name as such (not as a package without wheels)."""
    for version in ("1.0", "2.0", "3.0"):
        make_wheel(index, "twice", {"twice/__init__.py": f"V = {version!r}\n".encode()}, version=version)
    installer = OnDemand(tmp_path / "data", PackagePolicy(max_sets_per_tenant=10))
    both = installer.install(["twice>=2", "Twice<3"], TAG, "alice")
    assert [(p.name, p.version) for p in both.info.packages] == [("twice", "2.0")]
    assert both.info.requested == ["twice<3,>=2"]
    for asked in (["twice==1.0", "twice==3.0"], ["twice==9"]):
        with pytest.raises(Refused) as refused:
            installer.install(asked, TAG, "alice")
        assert (refused.value.package, refused.value.rule) == ("twice", "version"), refused.value
        assert "no version with a wheel matches" in str(refused.value)
    assert len(installer.usage("alice")[0]) == 1  # nothing stored for the refused ones


def test_an_sdist_is_never_built(index: Path, tmp_path: Path) -> None:
    """A package with only an sdist (whose setup.py would run on the host) is refused."""
    marker = tmp_path / "ran"
    sdist = io.BytesIO()
    import tarfile

    with tarfile.open(fileobj=sdist, mode="w:gz") as tf:
        setup = f"open({str(marker)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='sdistonly', version='1.0')\n"
        for member, text in (("sdistonly-1.0/setup.py", setup), ("sdistonly-1.0/PKG-INFO",
                             "Metadata-Version: 2.1\nName: sdistonly\nVersion: 1.0\n")):
            info = tarfile.TarInfo(member)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    (index / "sdistonly-1.0.tar.gz").write_bytes(sdist.getvalue())
    with pytest.raises(Refused) as refused:
        OnDemand(tmp_path / "data").install(["sdistonly"], TAG, "alice")
    assert refused.value.rule == "wheels-only" and "never an sdist" in str(refused.value)
    assert not marker.exists()  # its code never ran on the host


def test_the_policy_off_refuses_everything(tmp_path: Path) -> None:
    with pytest.raises(Refused) as refused:
        OnDemand(tmp_path, PackagePolicy(mode="off")).install(["humanize"], TAG, "alice")
    assert refused.value.rule == "off" and "humanize" in str(refused.value)


def test_the_allowlist_takes_names_and_patterns(index: Path, tmp_path: Path) -> None:
    make_wheel(index, "types_goodthing", {"types_goodthing/__init__.py": b""})
    policy = load_package_policy({"mode": "allowlist", "allow": ["humanize", "types-*"]}, {})
    ondemand = OnDemand(tmp_path / "data", policy)
    assert ondemand.install(["Types_GoodThing"], TAG, "alice").info.packages[0].name == "types-goodthing"
    with pytest.raises(Refused) as refused:
        ondemand.install(["requests"], TAG, "alice")
    assert refused.value.rule == "allowlist" and refused.value.package == "requests"


def test_bytes_per_set_cap(index: Path, tmp_path: Path) -> None:
    make_wheel(index, "bigpkg", {"bigpkg/__init__.py": os.urandom(300_000)}, compress=False)
    with pytest.raises(Refused) as refused:
        OnDemand(tmp_path / "data", PackagePolicy(max_set_bytes=100_000)).install(["bigpkg"], TAG, "alice")
    assert refused.value.rule == "max_set_bytes" and refused.value.package == "bigpkg"
    assert _left(tmp_path / "data") == []


@pytest.mark.parametrize("table, said", [
    ({"mode": "sometimes"}, "one of off, allowlist, pure-python"),
    ({"mode": "allowlist"}, "needs names"),
    ({"allow": ["../x"]}, "not a package name"),
    ({"max_set_bytes": -1}, "whole number"),
    ({"download_timeout_s": float("nan")}, "seconds"),
    ({"nonsense": 1}, "unknown keys"),
])
def test_a_bad_policy_is_refused_at_start(table: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        load_package_policy(table, {})


def test_names_are_checked_before_pip(tmp_path: Path) -> None:
    ondemand = OnDemand(tmp_path)
    for bad in ("-e .", "x @ https://evil/x.whl", "a" * 5000, "x\x00", "x; sys_platform=='linux'"):
        with pytest.raises(names.RequirementRefused):
            ondemand.install([bad], TAG, "alice")
