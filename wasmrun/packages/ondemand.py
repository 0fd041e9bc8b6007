"""Packages asked for at run time (a session's, a run's, a skill's), inside the
operator's policy (policy.py): resolved on the host by pip (resolve.py, wheels
only: no package code ever runs on the host), unpacked by us (wheels.py, strict:
RECORD hashes, no bombs, nothing shadowing the image's modules), and published
as a content-addressed read-only layer, built once per server:

    <data_dir>/packages/sets/<tag>/
        s-<id>/layer.json         what is in it (SetInfo); id: the hash of the tag and
        s-<id>/site-packages/     the resolved name==version set; mounted read-only at
        s-<id>/pycache/           /packages (and its bytecode at /pycache/packages)
        requests/<key>            a request already resolved -> its set's id (no pip again)
        .locks/<key>              held while a request is resolved (one pip per request)
    <data_dir>/packages/sets/tenants/<hash>.json    the sets each tenant made, their bytes

A set holds the operator's layer's packages too (its requirements are resolved with
the asked ones, so pip settles conflicts): a run mounts one folder at /packages, on
both images. What the image has built in (the data image's numpy, pandas, lxml...) is
satisfied and never downloaded. A set is built in a `.tmp-*` folder and renamed into
place: a reader sees all of it or none, and a killed install leaves only a `.tmp-*`
or `.work-*` folder, removed by the next install.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
from packaging.requirements import Requirement

from wasmrun.packages import layer, names, resolve, wheels
from wasmrun.packages.policy import PackagePolicy

SETS = "sets"
SET_PREFIX = "s-"
STALE_S = 3600.0  # leftovers of a killed install older than this are removed
# Import names of the data image's packages whose index names differ (a wheel may not shadow them).
IMPORT_NAMES = {
    "pillow": "PIL", "python-dateutil": "dateutil", "pyyaml": "yaml", "beautifulsoup4": "bs4",
    "scikit-learn": "sklearn", "fonttools": "fontTools",
}
GUEST_OWN = frozenset({"runtime", "_wasmrun", "_boot", "sitecustomize", "usercustomize"})


class Refused(resolve.PackageError):
    """A package the policy or the sandbox does not take: names it and the rule."""

    def __init__(self, message: str, package: str, rule: str) -> None:
        super().__init__(message)
        self.package = package
        self.rule = rule


class Package(msgspec.Struct, frozen=True):
    name: str
    version: str
    bytes: int  # its wheel, as downloaded
    requested: bool


class SetInfo(msgspec.Struct, frozen=True):
    id: str
    python: str
    requested: list[str]  # what was asked (the operator's layer's requirements with it)
    packages: list[Package]
    bytes: int  # all its wheels
    bytecode: bool

    @property
    def pins(self) -> list[str]:
        return sorted(f"{p.name}=={p.version}" for p in self.packages)


@dataclass(frozen=True)
class Installed:
    info: SetInfo
    folder: Path
    cached: bool  # built before (by anyone on this data dir): nothing downloaded
    seconds: float
    in_image: tuple[str, ...]  # asked names the image has built in (satisfied, not downloaded)


def set_id(tag: str, pins: list[str]) -> str:
    return hashlib.sha256("\n".join([tag, *sorted(pins)]).encode()).hexdigest()[:32]


def reserved_modules(tag: str) -> frozenset[str]:
    """Top-level names a wheel may not ship: the image's own modules."""
    built_in = layer.provided(tag)
    imports = {IMPORT_NAMES.get(n, n.replace("-", "_")) for n in built_in}
    return frozenset(sys.stdlib_module_names) | GUEST_OWN | imports


class OnDemand:
    """The server's on-demand installs (thread-safe; blocking: call it off the event loop)."""

    def __init__(self, data_dir: Path, policy: PackagePolicy | None = None) -> None:
        self.data_dir = data_dir
        self.policy = policy or PackagePolicy()
        self.root = data_dir / "packages" / SETS
        # Told of every install that was asked for (tenant, what was installed): the audit log.
        self.on_install: Callable[[str, Installed], None] = lambda tenant, installed: None

    # -- what may be asked --------------------------------------------------

    def check(self, requirements: list[str]) -> list[str]:
        """`requirements` parsed and within the policy, as canonical text; RequirementRefused
        (not a package name) or Refused (the policy's rule) naming the first that is not."""
        if self.policy.mode == "off" and requirements:
            first = requirements[0][:80] if isinstance(requirements[0], str) else "?"
            raise Refused(
                f"{first!r}: this server's operator turned installing packages on demand off"
                " (packages mode off); the packages it has are the image's and the operator's layer",
                first, "off",
            )
        parsed = names.parse_all(requirements)
        for requirement in parsed:
            if not self.policy.allows(requirement.name):
                raise Refused(
                    f"{requirement.name!r} is not in this server's list of packages that may be installed"
                    f" (packages mode allowlist: {', '.join(self.policy.allow[:20])})",
                    requirement.name, "allowlist",
                )
        # A name given twice is one requirement with both specifiers (and extras), as pip
        # takes `pip install 'x>=1' 'x<2'`: pins that cannot both hold are pip's refusal.
        seen: dict[str, Requirement] = {}
        for requirement in parsed:
            requirement.name = names.canonical(requirement.name)
            if (before := seen.get(requirement.name)) is not None:
                before.specifier &= requirement.specifier
                before.extras |= requirement.extras
            else:
                seen[requirement.name] = requirement
        return sorted(str(requirement) for requirement in seen.values())

    # -- installs -------------------------------------------------------------

    def install(self, requirements: list[str], tag: str, tenant: str) -> Installed:
        """The set `requirements` (with the operator's layer's) resolve to, built or found."""
        t0 = time.monotonic()
        asked = self.check(requirements)
        asked_names = {names.name_of(r) for r in asked}
        built_in = layer.provided(tag)
        in_image = tuple(sorted(asked_names & built_in))
        operator = layer.read_info(layer.tag_root(self.data_dir, tag))
        kept = [r for r in (operator.requested if operator else [])
                if names.name_of(r) not in asked_names]
        combined = sorted(kept) + asked
        version = layer.current(layer.tag_root(self.data_dir, tag))
        key = hashlib.sha256(json.dumps([tag, version.name if version else "", combined]).encode()).hexdigest()[:40]
        result = self._build(combined, tag, tenant, key, pinned=False, t0=t0, in_image=in_image)
        self.on_install(tenant, result)
        return result

    def ensure(self, pins: list[str], tag: str, tenant: str) -> Path:
        """The folder of the set of exactly `pins` (a session's, recorded): found, else built
        again from the index (a data dir whose sets were removed). Not counted again."""
        found = self.folder(set_id(tag, pins), tag)
        if found is not None:
            return found
        key = "pins-" + set_id(tag, pins)
        return self._build(list(pins), tag, tenant, key, pinned=True, t0=time.monotonic(), in_image=()).folder

    def folder(self, ident: str, tag: str) -> Path | None:
        if not ident.isalnum() or len(ident) > 64:
            return None
        folder = self._tag_root(tag) / f"{SET_PREFIX}{ident}"
        return folder if (folder / layer.INFO).is_file() else None

    def info(self, folder: Path) -> SetInfo:
        return msgspec.json.decode((folder / layer.INFO).read_bytes(), type=SetInfo)

    def _tag_root(self, tag: str) -> Path:
        layer.python_of(tag)
        return self.root / tag

    def _build(
        self, combined: list[str], tag: str, tenant: str, key: str, *, pinned: bool, t0: float,
        in_image: tuple[str, ...],
    ) -> Installed:
        root = self._tag_root(tag)
        (root / "requests").mkdir(parents=True, exist_ok=True)
        with _flock(root / ".locks" / key):
            known = self._request(root, key, tag)
            if known is not None:
                return Installed(self.info(known), known, True, time.monotonic() - t0, in_image)
            _sweep(root)
            work = Path(tempfile.mkdtemp(prefix=".work-", dir=root))
            try:
                deadline = time.monotonic() + self.policy.download_timeout_s
                dists = self._resolve(combined, work, tag, deadline)
                built_in = layer.provided(tag)
                dists = [d for d in dists if d.name not in built_in]
                ident = set_id(tag, [d.pin for d in dists])
                folder = self.folder(ident, tag)
                made = folder is None
                if folder is None:
                    if not pinned and dists:  # a set of nothing (all in the image) costs nothing
                        self._check_tenant(tenant, ident, 0)
                    folder = self._make(dists, combined, tag, ident, work, deadline, tenant, pinned)
                _write_atomic(root / "requests" / key, ident.encode())
                return Installed(self.info(folder), folder, not made, time.monotonic() - t0, in_image)
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def _request(self, root: Path, key: str, tag: str) -> Path | None:
        try:
            ident = (root / "requests" / key).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return self.folder(ident, tag)

    def _resolve(self, combined: list[str], work: Path, tag: str, deadline: float) -> list[resolve.Dist]:
        if not combined:
            return []
        try:
            return resolve.resolve(
                combined, work, self.policy.max_packages, wheels_only=True, timeout=deadline - time.monotonic(),
            )
        except resolve.PackageError as exc:
            text = str(exc)
            if "need" in text and "at most" in text:
                raise Refused(text.replace("(--max-packages)", "(the operator's max_packages)"),
                              combined[0], "max_packages") from None
            if "from versions: none" in text:
                raise Refused(
                    f"{text}\n(on-demand installs take wheels only, never an sdist: building one would run the"
                    " package's code on the host; a package that publishes no wheel cannot be installed)",
                    _unmatched(text, combined[-1]), "wheels-only",
                ) from None
            if "No matching distribution" in text:  # versions with wheels exist, none the one asked for
                raise Refused(
                    f"{text}\n(no version with a wheel matches what was asked for: the versions listed are those"
                    " with one; a name asked for twice must be satisfiable by both)",
                    _unmatched(text, combined[-1]), "version",
                ) from None
            raise

    def _make(
        self, dists: list[resolve.Dist], combined: list[str], tag: str, ident: str, work: Path, deadline: float,
        tenant: str, pinned: bool,
    ) -> Path:
        python = layer.python_of(tag)
        root = self._tag_root(tag)
        try:
            wheel_files = resolve.fetch(dists, layer.guest_python(tag), work / "wheels", build=False, deadline=deadline)
        except resolve.NativePackage as exc:
            raise self._native(exc, dists, tag) from None
        sizes: dict[str, int] = {}
        for wheel in wheel_files:
            dist = _dist_of(wheel, dists)
            sizes[dist] = sizes.get(dist, 0) + wheel.stat().st_size
        total = sum(sizes.values())
        if total > self.policy.max_set_bytes:
            biggest = max(sizes, key=lambda n: sizes[n])
            raise Refused(
                f"the packages asked for download {total} bytes, more than this server's limit of"
                f" {self.policy.max_set_bytes} per set (max_set_bytes); the largest is {biggest} ({sizes[biggest]} bytes)",
                biggest, "max_set_bytes",
            )
        if not pinned and dists:
            self._check_tenant(tenant, ident, total)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        try:
            site = staging / "site-packages"
            site.mkdir()
            reserved = reserved_modules(tag)
            for wheel in wheel_files:
                wheels.unpack(wheel, site, strict=True, reserved=reserved, max_bytes=self.policy.max_set_bytes * 8)
            bytecode = python == sys.version_info[:2]
            if bytecode:
                wheels.compile_bytecode(site, staging / "pycache")
            else:
                (staging / "pycache").mkdir()
            requested = {names.name_of(r) for r in combined}
            info = SetInfo(
                ident, tag, combined,
                [Package(d.name, d.version, sizes.get(d.name, 0), d.name in requested) for d in dists],
                total, bytecode,
            )
            (staging / layer.INFO).write_bytes(msgspec.json.encode(info))
            for path in [staging, *staging.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    os.chmod(path, 0o555)
            final = root / f"{SET_PREFIX}{ident}"
            try:
                os.rename(staging, final)
            except OSError:  # built meanwhile by another server on this data dir: theirs stands
                if self.folder(ident, tag) is None:
                    raise
                _remove(staging)
            if not pinned and dists:
                self._charge(tenant, ident, total)
            return final
        except BaseException:
            _remove(staging)
            raise

    def _native(self, exc: resolve.NativePackage, dists: list[resolve.Dist], tag: str) -> Refused:
        name = exc.name
        via = resolve.chain(dists, name)
        shown = f"{name}{' (required by ' + ' <- '.join(via) + ')' if via else ''}"
        python = layer.python_of(tag)
        hint = ""
        if tag != layer.DATA_TAG and name in layer.provided(layer.DATA_TAG):
            hint = "; the data image has it built in (the server's operator serves it with `wasmrun serve --image data`)"
        return Refused(
            f"{shown} has no pure-Python wheel for the sandbox's Python {python[0]}.{python[1]}: it needs native"
            f" code, which the sandbox cannot load, and on-demand installs never build from source{hint}",
            name, "native",
        )

    # -- the tenant's share -------------------------------------------------------

    def _tenant_file(self, tenant: str) -> Path:
        folder = self.root / "tenants"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{hashlib.sha256(tenant.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}.json"

    def usage(self, tenant: str) -> tuple[list[str], int]:
        """The sets `tenant` has had built (a set someone built already costs nothing), and the
        bytes they downloaded."""
        try:
            doc = json.loads(self._tenant_file(tenant).read_text())
            return [str(s) for s in doc["sets"]], int(doc["bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return [], 0

    def _check_tenant(self, tenant: str, ident: str, adding: int) -> None:
        sets, used = self.usage(tenant)
        if ident in sets:
            return
        if len(sets) >= self.policy.max_sets_per_tenant:
            raise Refused(
                f"quota: you have {len(sets)} package sets on this server, its limit (max_sets_per_tenant);"
                " ask for a set you used before, or for fewer distinct sets",
                "", "max_sets_per_tenant",
            )
        if used + adding > self.policy.max_tenant_bytes:
            raise Refused(
                f"quota: your package sets downloaded {used} bytes and this one needs {adding} more;"
                f" the limit is {self.policy.max_tenant_bytes} (max_tenant_bytes)",
                "", "max_tenant_bytes",
            )

    def _charge(self, tenant: str, ident: str, adding: int) -> None:
        path = self._tenant_file(tenant)
        with _flock(path.with_suffix(".lock")):
            sets, used = self.usage(tenant)
            if ident in sets:
                return
            _write_atomic(path, json.dumps({"sets": [*sets, ident], "bytes": used + adding}).encode())


def _unmatched(pip_error: str, default: str) -> str:
    """The package pip found no distribution for (`No matching distribution found for X`)."""
    marker = "No matching distribution found for "
    for line in pip_error.splitlines():
        if marker in line:
            return names.name_or_none(line.split(marker, 1)[1].strip()) or default
    return default


def _dist_of(wheel: Path, dists: list[resolve.Dist]) -> str:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        return names.canonical(parse_wheel_filename(wheel.name)[0])
    except InvalidWheelFilename:
        return dists[0].name if dists else wheel.name


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    for sub in [path, *path.rglob("*")] if path.exists() else []:
        if sub.is_dir() and not sub.is_symlink():
            os.chmod(sub, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def _sweep(root: Path) -> None:
    """Leftovers of installs killed midway (a `.tmp-*` or `.work-*` folder not touched for an hour)."""
    now = time.time()
    for path in root.iterdir():
        if path.name.startswith((".tmp-", ".work-")):
            try:
                old = now - path.stat().st_mtime > STALE_S
            except OSError:
                continue
            if old:
                _remove(path)
