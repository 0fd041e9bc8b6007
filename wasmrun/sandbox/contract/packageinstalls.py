"""Packages a run installs from inside (runtime.packages.install, `pip install` in the guest's
shell, `!pip install` in a cell): what the server grants a run (RunRequest.package_installs)
and what the run reports back (RunResult.packages_added). The host call itself is
wasmrun/sandbox/guest/packagecall.py; the installer, wasmrun/packages/ondemand.py."""

from __future__ import annotations

import msgspec

from wasmrun.packages.policy import PackagePolicy


class PackageInstalls(msgspec.Struct, frozen=True):
    """The run may install packages: where sets are built (<data_dir>/packages/sets) and the
    operator's policy. Sent with the request (a worker process has no server settings)."""

    data_dir: str
    policy: PackagePolicy


class AddedPackages(msgspec.Struct, frozen=True):
    """A set a run installed from inside: the server records it (a session's later runs mount
    it) and audits it."""

    set: str
    folder: str  # the set's folder on the host
    tag: str  # its Python (cp311, cp315)
    pins: list[str]
    cached: bool
    seconds: float
    in_image: list[str] = []
