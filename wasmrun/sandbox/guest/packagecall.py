"""The `packages_install` host call: packages a run installs from inside (runtime.packages.install,
the guest shell's `pip install`, a cell's `!pip install`).

The run's current set (the one mounted at /packages: a session's, a run's, the operator's layer)
plus the new requirements go through the installer the run's grant names (a PackageInstaller,
contract/packageinstalls.py: the server's is wasmrun/packages/runinstalls.py, with the same
policy, tenant quotas, cache and locks as create_session's `packages`), in this run's thread of
its worker process: the run waits for it, other runs do not.

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

import logging
import os
import shutil
import time
from pathlib import Path

import msgspec

from wasmrun.abi import (
    MAX_PACKAGES_REQUEST,
    PACKAGES_ADDED,
    PackagesInstallReply,
    PackagesInstallRequest,
)
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.packageinstalls import AddedPackages, InstalledSet, InstallRefused, PackageInstalls
from wasmrun.sandbox.contract.types import RunRequest

logger = logging.getLogger("wasmrun.packages")

_decode_request = msgspec.json.Decoder(PackagesInstallRequest).decode
_encode = msgspec.json.Encoder().encode
MAX_REQUIREMENTS = 256  # checked before anything is parsed (the installer's own bound is lower)


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
        try:
            installed = self.grant.installer().install(asked, self.current, self.tag, self.tenant, remaining - 0.5)
        except InstallRefused as exc:
            return _refusal(exc.message, exc.package, exc.rule)
        except OSError:
            logger.exception("installing packages for run failed")
            return _refusal("the server could not install the packages (see its log)", _first(asked), "host")
        return self._mount(installed, charge)

    def _mount(self, installed: InstalledSet, charge: object) -> PackagesInstallReply:
        site = installed.folder / "site-packages"
        target = self.tmp / Path(PACKAGES_ADDED).name / installed.id
        if not target.exists():
            nbytes, nfiles = _size(site)
            try:
                charge(nbytes, nfiles)  # type: ignore[operator]
            except errors.RunAborted as exc:
                return _refusal(f"the packages do not fit in this run's files: {exc.message}", "", "workspace")
            _copy_tree(site, target)
        self.current = installed.folder
        seconds = round(installed.seconds, 3)
        self.added.append(AddedPackages(
            installed.id, str(installed.folder), self.tag, installed.pins, installed.cached, seconds,
            list(installed.in_image),
        ))
        return PackagesInstallReply(
            ok=True, path=f"{PACKAGES_ADDED}/{installed.id}", set=installed.id, packages=list(installed.packages),
            added=list(installed.added), bytes=installed.bytes, cached=installed.cached, seconds=seconds,
            in_image=list(installed.in_image),
        )

    def after_run(self) -> None:
        """The copies under /tmp go: a session's next runs mount the set at /packages."""
        if self.added:
            _remove(self.tmp / Path(PACKAGES_ADDED).name)


def for_run(request: RunRequest, tag: str, current: Path | None, tmp: Path) -> PackageCall:
    """`request`'s installs, for a guest of Python `tag` (its image's: Image.python_tag)."""
    return PackageCall(request.package_installs, tag, request.owner, current, tmp)


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
