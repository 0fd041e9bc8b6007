"""The installer of a run's own installs (runtime.packages.install, the guest shell's `pip
install`, a cell's `!pip install`): the sandbox's PackageInstaller (its `packages_install` host
call, wasmrun/sandbox/guest/packagecall.py) on the server's OnDemand (ondemand.py: the same
policy, tenant quotas, cache and locks as create_session's `packages`).

`grant(installer)` is what a run is granted (RunRequest.package_installs): it names
`open_installer` and its data (the data dir, the policy as JSON), so the process that serves
the run, the server's or a pool worker's, opens the same installer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec

from wasmrun.abi import InstalledDist
from wasmrun.packages import layer, names, resolve, wheels
from wasmrun.packages.ondemand import OnDemand, Refused, SetInfo
from wasmrun.packages.policy import PackagePolicy
from wasmrun.sandbox import InstalledSet, InstallRefused, PackageInstalls

OPENER = f"{__name__}:open_installer"


def grant(installer: OnDemand) -> PackageInstalls:
    """A run's permission to install through `installer` (its data dir and policy)."""
    return PackageInstalls(OPENER, [str(installer.data_dir), msgspec.json.encode(installer.policy).decode()])


def open_installer(data_dir: str, policy: str) -> RunInstaller:
    """The installer a grant names (`grant`), in the process serving the run."""
    return RunInstaller(Path(data_dir), msgspec.json.decode(policy, type=PackagePolicy))


class RunInstaller:
    """A run's installs on the data dir's sets, under the operator's policy."""

    def __init__(self, data_dir: Path, policy: PackagePolicy) -> None:
        self.data_dir = data_dir
        self.policy = policy

    def install(self, requirements: list[str], current: Path | None, tag: str, tenant: str,
                timeout_s: float) -> InstalledSet:
        policy = dataclasses.replace(self.policy, download_timeout_s=min(self.policy.download_timeout_s, timeout_s))
        installer = OnDemand(self.data_dir, policy)
        try:
            combined = _with_current(installer, current, requirements)
            installed = installer.install(combined, tag, tenant)
        except Refused as exc:
            raise InstallRefused(str(exc), exc.package, exc.rule) from None
        except names.RequirementRefused as exc:
            raise InstallRefused(str(exc), _first(requirements), "name") from None
        except wheels.UnsafeWheel as exc:
            message = f"a wheel was refused, nothing was installed: {exc}"
            raise InstallRefused(message, _first(requirements), "unsafe-wheel") from None
        except resolve.PackageError as exc:
            raise InstallRefused(str(exc), _first(requirements), "resolve") from None
        info = installed.info
        before = _pins(current)
        return InstalledSet(
            info.id, installed.folder, info.pins,
            [InstalledDist(p.name, p.version, p.bytes, p.requested) for p in info.packages], info.bytes,
            installed.cached, installed.seconds, installed.in_image, [pin for pin in info.pins if pin not in before],
        )


def _with_current(installer: OnDemand, current: Path | None, asked: list[str]) -> list[str]:
    """What the run's current set was asked for, less the names asked again, plus `asked`:
    resolved together, so pip settles conflicts and an upgrade replaces a pin."""
    new = installer.check(asked)  # the policy's refusal before anything else
    new_names = {names.name_of(r) for r in new}
    kept: list[str] = []
    if current is not None and (current / layer.INFO).is_file():
        try:
            before = installer.info(current).requested
        except (msgspec.ValidationError, msgspec.DecodeError, OSError):
            before = []  # the operator's layer's layer.json: its requirements are added by install
        kept = [r for r in before if names.name_of(r) not in new_names]
    return sorted(kept) + new


def _pins(current: Path | None) -> set[str]:
    """The pins of the run's current set (none for the operator's layer, or no set)."""
    if current is None:
        return set()
    try:
        return set(msgspec.json.decode((current / layer.INFO).read_bytes(), type=SetInfo).pins)
    except (msgspec.ValidationError, msgspec.DecodeError, OSError):
        return set()


def _first(asked: list[str]) -> str:
    first = asked[0] if asked else ""
    return first[:80] if isinstance(first, str) else ""
