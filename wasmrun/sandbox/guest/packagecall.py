"""The `packages_install` host call: packages a run installs from inside (runtime.packages.install,
the guest shell's `pip install`, a cell's `!pip install`).

The run's current set (the one mounted at /packages: a session's, a run's, the operator's layer)
plus the new requirements go through the server's installer (wasmrun/packages/ondemand.py:
the same policy, tenant quotas, cache and locks as create_session's `packages`), in this run's
thread of its worker process: the run waits for it, other runs do not.

A run's preopens are fixed when it starts, so the new set cannot appear at /packages in this
run. Its site-packages is copied instead into the run's /tmp (abi.PACKAGES_ADDED/<set>, charged
to the run's /workspace and /tmp quota) and the guest puts that folder on sys.path; the copy is
removed when the run ends (`after_run`), before a session keeps its version. A session's later
runs (its forks, after a restart) mount the set at /packages, the server having recorded it
(RunResult.packages_added), and the guest moves its modules' paths there (runtime/packages.py).
Copied, not linked: the set's files are shared by every run on the data dir, and a worker
running as root could write through a hard link.

Nothing the guest sends is trusted: the request is bounded and typed; every refusal is a reply
naming the package and the rule, never a host path or traceback.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from wasmrun.abi import (
    MAX_PACKAGES_REQUEST,
    PACKAGES_ADDED,
    InstalledDist,
    PackagesInstallReply,
    PackagesInstallRequest,
)
from wasmrun.packages import layer, names, resolve, wheels
from wasmrun.packages.ondemand import Installed, OnDemand, Refused, SetInfo
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.packageinstalls import AddedPackages, PackageInstalls
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.images.names import DATA_GUEST_PREFIX

if TYPE_CHECKING:
    from python_wasm.build import Guest

logger = logging.getLogger("wasmrun.packages")

_decode_request = msgspec.json.Decoder(PackagesInstallRequest).decode
_encode = msgspec.json.Encoder().encode
MAX_REQUIREMENTS = 256  # checked before anything is parsed (the installer's own bound is lower)
QUOTA_RULES = ("max_sets_per_tenant", "max_tenant_bytes")


class PackageCall:
    """One run's installs: its grant, its current set, what it added."""

    def __init__(self, grant: PackageInstalls | None, tag: str, tenant: str, current: Path | None, tmp: Path) -> None:
        self.grant = grant
        self.tag = tag
        self.tenant = tenant
        self.current = current  # the set (or operator's layer version) mounted at /packages
        self.tmp = tmp  # the run's /tmp on the host
        self.added: list[AddedPackages] = []

    def install(self, payload: bytes, deadline: float, charge: object) -> bytes:
        """The reply (PackagesInstallReply's JSON) to one `packages_install` request.
        `charge(nbytes, nfiles)`: the run's workspace quota (raises RunAborted when over)."""
        reply = self._install(payload, deadline, charge)
        return _encode(reply)

    def _install(self, payload: bytes, deadline: float, charge: object) -> PackagesInstallReply:
        if self.grant is None:
            return _refusal("this server installs no packages from inside a run", "", "off")
        if len(payload) > MAX_PACKAGES_REQUEST:
            return _refusal(f"the request is larger than {MAX_PACKAGES_REQUEST} bytes", "", "name")
        try:
            request = _decode_request(payload)
        except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
            return _refusal("the request is not a list of requirement strings", "", "name")
        asked = request.requirements
        if not asked:
            return _refusal("no package was named", "", "name")
        if len(asked) > MAX_REQUIREMENTS:
            return _refusal(f"{len(asked)} requirements at once; at most 64 may be asked for", "", "name")
        remaining = deadline - time.monotonic()
        if remaining <= 1:
            return _refusal("the run has no time left to install packages in", "", "timeout")
        policy = dataclasses.replace(
            self.grant.policy, download_timeout_s=min(self.grant.policy.download_timeout_s, remaining - 0.5),
        )
        installer = OnDemand(Path(self.grant.data_dir), policy)
        try:
            combined = self._with_current(installer, asked)
            installed = installer.install(combined, self.tag, self.tenant)
        except Refused as exc:
            return _refusal(str(exc), exc.package, exc.rule)
        except names.RequirementRefused as exc:
            return _refusal(str(exc), _first(asked), "name")
        except wheels.UnsafeWheel as exc:
            return _refusal(f"a wheel was refused, nothing was installed: {exc}", _first(asked), "unsafe-wheel")
        except resolve.PackageError as exc:
            return _refusal(str(exc), _first(asked), "resolve")
        except OSError:
            logger.exception("installing packages for run failed")
            return _refusal("the server could not install the packages (see its log)", _first(asked), "host")
        return self._mount(installed, charge)

    def _with_current(self, installer: OnDemand, asked: list[str]) -> list[str]:
        """What the run's current set was asked for, less the names asked again, plus `asked`:
        resolved together, so pip settles conflicts and an upgrade replaces a pin."""
        new = installer.check(asked)  # the policy's refusal before anything else
        new_names = {names.canonical(names.parse(r).name) for r in new}
        kept: list[str] = []
        if self.current is not None and (self.current / layer.INFO).is_file():
            try:
                before = installer.info(self.current).requested
            except (msgspec.ValidationError, msgspec.DecodeError, OSError):
                before = []  # the operator's layer's layer.json: its requirements are added by install
            kept = [r for r in before if names.canonical(names.parse(r).name) not in new_names]
        return sorted(kept) + new

    def _mount(self, installed: Installed, charge: object) -> PackagesInstallReply:
        info = installed.info
        before = set(self.added[-1].pins) if self.added else self._current_pins()
        site = installed.folder / "site-packages"
        target = self.tmp / Path(PACKAGES_ADDED).name / info.id
        if not target.exists():
            nbytes, nfiles = _size(site)
            try:
                charge(nbytes, nfiles)  # type: ignore[operator]
            except errors.RunAborted as exc:
                return _refusal(f"the packages do not fit in this run's files: {exc.message}", "", "workspace")
            _copy_tree(site, target)
        self.current = installed.folder
        added = AddedPackages(
            info.id, str(installed.folder), self.tag, info.pins, installed.cached, round(installed.seconds, 3),
            list(installed.in_image),
        )
        self.added.append(added)
        return PackagesInstallReply(
            ok=True, path=f"{PACKAGES_ADDED}/{info.id}", set=info.id,
            packages=[InstalledDist(p.name, p.version, p.bytes, p.requested) for p in info.packages],
            added=[pin for pin in info.pins if pin not in before], bytes=info.bytes, cached=installed.cached,
            seconds=round(installed.seconds, 3), in_image=list(installed.in_image),
        )

    def _current_pins(self) -> set[str]:
        if self.current is None:
            return set()
        try:
            return set(msgspec.json.decode((self.current / layer.INFO).read_bytes(), type=SetInfo).pins)
        except (msgspec.ValidationError, msgspec.DecodeError, OSError):
            return set()

    def after_run(self) -> None:
        """The copies under /tmp go: a session's next runs mount the set at /packages."""
        if self.added:
            _remove(self.tmp / Path(PACKAGES_ADDED).name)


def for_run(request: RunRequest, tag: str, current: Path | None, tmp: Path) -> PackageCall:
    return PackageCall(request.package_installs, tag, request.owner, current, tmp)


def tag_of(guest: Guest) -> str:
    """The Python tag of the image `guest` is (the data image's guest keeps the default tag)."""
    return layer.DATA_TAG if guest.key.startswith(DATA_GUEST_PREFIX) else guest.python_tag


def _refusal(message: str, package: str, rule: str) -> PackagesInstallReply:
    return PackagesInstallReply(ok=False, error=message, rule=rule, package=package)


def _first(asked: list[str]) -> str:
    first = asked[0] if asked else ""
    return first[:80] if isinstance(first, str) else ""


def _size(folder: Path) -> tuple[int, int]:
    nbytes = nfiles = 0
    for root, dirs, files in os.walk(folder):
        nfiles += len(dirs) + len(files)
        for name in files:
            nbytes += os.lstat(os.path.join(root, name)).st_size + 4096
    return nbytes, nfiles


def _copy_tree(source: Path, target: Path) -> None:
    """Plain files and folders, writable by the run (its /tmp is emptied after it)."""
    partial = target.with_name(f".{target.name}.partial")
    _remove(partial)
    for root, dirs, files in os.walk(source):
        out = partial / os.path.relpath(root, source)
        out.mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copyfile(os.path.join(root, name), out / name, follow_symlinks=False)
        dirs.sort()
    os.rename(partial, target)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
