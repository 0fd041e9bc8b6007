"""Pure-Python wheels for a set of requirements, with their dependencies,
through pip itself (a subprocess of this interpreter): the operator's pip
configuration (index, extra index, certificates, proxies) applies as it does
to their own `pip install`.

1. resolve: `pip install --dry-run --report` names every distribution the
   requirements need (bounded to MAX_PACKAGES), and which one pulled in which;
2. fetch: each distribution as a wheel with no native code: a pure wheel from
   the index (`--platform any --abi none`), else, for a package whose C code is
   an optional speed-up (PyYAML, MarkupSafe, ...), its sdist built with no C
   compiler, so its setup falls back to the pure form; else it is refused with
   the chain of packages that pulled it in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from wasmrun.packages import wheels
from wasmrun.packages.names import canonical

MAX_PACKAGES = 200  # a dependency tree larger than this is refused
PIP_TIMEOUT = 900.0
# Packages whose native wheels are an optional C speed-up of a pure Python
# implementation in the same sdist: built with no compiler, their setup falls
# back to the pure form (the wheel built is checked for native code anyway).
PURE_FALLBACKS = frozenset({
    "pyyaml", "markupsafe", "simplejson", "msgpack", "wrapt", "pyrsistent",
    "multidict", "yarl", "frozenlist", "propcache",
})
# No compiler at all, and each project's own switch where it has one (PyYAML's
# `--without-libyaml` is what an absent libyaml/compiler amounts to).
NO_COMPILER_ENV = {
    "CC": "false", "CXX": "false", "LDSHARED": "false",
    "PYYAML_FORCE_LIBYAML": "0", "PYYAML_FORCE_CYTHON": "0", "MSGPACK_PUREPYTHON": "1",
    "WRAPT_INSTALL_EXTENSIONS": "false", "MULTIDICT_NO_EXTENSIONS": "1", "YARL_NO_EXTENSIONS": "1",
    "FROZENLIST_NO_EXTENSIONS": "1", "PROPCACHE_NO_EXTENSIONS": "1",
}


class PackageError(Exception):
    pass


class NativePackage(PackageError):
    def __init__(self, name: str, chain: list[str]) -> None:
        via = f" (required by {' <- '.join(chain)})" if chain else ""
        super().__init__(
            f"{name}{via} needs native code, which the sandbox cannot load; only pure-Python packages"
            " (and those with a pure fallback) can be added"
        )
        self.name = name


@dataclass
class Dist:
    name: str  # canonical
    version: str
    filename: str  # what pip would install for the host
    requested: bool
    requires: list[str] = field(default_factory=list)  # canonical names

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def _pip(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = PIP_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    if timeout <= 0:
        raise PackageError("pip did not finish within the download time allowed")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
            capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise PackageError(f"pip did not finish within {timeout:.0f} s (the download time allowed)") from None
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        raise PackageError(f"`wasmrun packages` runs pip in wasmrun's own Python ({sys.executable}), which has none:"
                           " install it there (python -m ensurepip)")
    return proc


def _pip_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    return "\n".join(lines[-4:]) or (proc.stderr.strip().splitlines() or ["pip failed"])[-1]


def _active_requires(metadata: dict[str, Any]) -> list[str]:
    """The dependencies pip installed for this distribution (extras aside, markers of this host)."""
    names = []
    for text in metadata.get("requires_dist") or []:
        try:
            req = Requirement(str(text))
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(canonical(req.name))
    return names


def resolve(
    requirements: list[str], work: Path, max_packages: int = MAX_PACKAGES, *,
    wheels_only: bool = False, timeout: float = PIP_TIMEOUT,
) -> list[Dist]:
    """Every distribution `requirements` need, as pip resolves them now (at most `max_packages`).
    `wheels_only`: pip never builds an sdist, not even for its metadata (no package code runs
    on the host): a package that publishes no wheel fails to resolve."""
    report = work / "report.json"
    binary = ["--only-binary=:all:"] if wheels_only else ["--prefer-binary"]
    proc = _pip([
        "install", "--dry-run", "--ignore-installed", "--quiet", *binary,
        "--report", str(report), "--", *requirements,
    ], timeout=timeout)
    if proc.returncode != 0:
        raise PackageError(f"pip could not resolve {' '.join(requirements)}:\n{_pip_error(proc)}")
    items = json.loads(report.read_text())["install"]
    if len(items) > max_packages:
        raise PackageError(
            f"{' '.join(requirements)} need {len(items)} packages with their dependencies;"
            f" at most {max_packages} are allowed (--max-packages)"
        )
    return [
        Dist(
            name=canonical(item["metadata"]["name"]),
            version=item["metadata"]["version"],
            filename=item["download_info"]["url"].rsplit("/", 1)[-1],
            requested=bool(item.get("requested")),
            requires=_active_requires(item["metadata"]),
        )
        for item in items
    ]


def chain(dists: list[Dist], name: str) -> list[str]:
    """The packages that pulled `name` in, nearest first, up to one the operator asked for."""
    parents = {d.name: d for d in dists}
    path: list[str] = []
    current = name
    while not parents.get(current, Dist(current, "", "", True)).requested and len(path) < 32:
        parent = next((d.name for d in dists if current in d.requires and d.name not in path), None)
        if parent is None:
            break
        path.append(parent)
        current = parent
    return path


def _pure_download(pins: list[str], python: str, dest: Path, timeout: float = PIP_TIMEOUT) -> bool:
    proc = _pip([
        "download", "--quiet", "--no-deps", "--only-binary=:all:", "--platform", "any",
        "--implementation", "py", "--abi", "none", "--python-version", python,
        "-d", str(dest), "--", *pins,
    ], timeout=timeout)
    return proc.returncode == 0


def _build_pure(dist: Dist, dest: Path) -> bool:
    """The sdist of `dist` built with no compiler; True if the wheel came out with no native code."""
    before = set(dest.iterdir())
    proc = _pip(["wheel", "--quiet", "--no-deps", "--no-binary", dist.name, "-w", str(dest), "--", dist.pin],
                env=NO_COMPILER_ENV)
    built = [p for p in set(dest.iterdir()) - before if p.suffix == ".whl"]
    if proc.returncode != 0 or not built:
        return False
    if any(wheels.native_members(p) for p in built):
        for p in built:
            p.unlink()
        return False
    return True


def fetch(
    dists: list[Dist], python: str, dest: Path, *, build: bool = True, deadline: float | None = None,
) -> list[Path]:
    """A wheel with no native code for every distribution, in `dest`, for the guest's Python
    `python` (its release: layer.guest_python). `build`: a pure
    fallback may be built from its sdist (the operator's `add`; never for on-demand
    installs); `deadline` (time.monotonic()) bounds pip's calls."""
    def left() -> float:
        return PIP_TIMEOUT if deadline is None else deadline - time.monotonic()

    dest.mkdir(parents=True, exist_ok=True)
    pure = [d for d in dists if d.filename.endswith("-none-any.whl")]
    if pure and not _pure_download([d.pin for d in pure], python, dest, left()):
        pure = []  # one of them has no wheel for the guest's Python: find which, one by one
    for dist in dists:
        if dist in pure or _pure_download([dist.pin], python, dest, left()):
            continue
        sdist_only = not dist.filename.endswith(".whl")
        if build and (dist.name in PURE_FALLBACKS or sdist_only) and _build_pure(dist, dest):
            continue
        raise NativePackage(dist.name, chain(dists, dist.name))
    return sorted(dest.glob("*.whl"))
