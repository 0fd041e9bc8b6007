"""Packages a run installs from inside (runtime.packages.install, `pip install` in the guest's
shell, `!pip install` in a cell): what the server grants a run (RunRequest.package_installs),
the installer the sandbox calls (PackageInstaller) and what the run reports back
(RunResult.packages_added). The host call itself is wasmrun/sandbox/guest/packagecall.py.

The sandbox knows no installer of its own: the grant names one (the server's, on its package
layer: wasmrun/packages/runinstalls.py) as a `module:callable` and the data it is opened with,
because a run may be served in a worker process, which has no server settings."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import msgspec

from wasmrun.abi import InstalledDist


class InstallRefused(Exception):
    """The installer does not install what was asked: a message the run may see (never a host
    path), the package it names ('' for none) and the rule ("allowlist", "native", "name"...)."""

    def __init__(self, message: str, package: str, rule: str) -> None:
        super().__init__(message)
        self.message = message
        self.package = package
        self.rule = rule


@dataclass(frozen=True)
class InstalledSet:
    """A set the installer built or found for a run: the run's current set with what it asked."""

    id: str
    folder: Path  # on the host: its site-packages is what the run gets
    pins: list[str]
    packages: list[InstalledDist]
    bytes: int  # all its wheels
    cached: bool  # built before: nothing downloaded
    seconds: float
    in_image: tuple[str, ...]  # asked names the image has built in (satisfied, not downloaded)
    added: list[str]  # its pins that the run's current set did not have


class PackageInstaller(Protocol):
    """What the `packages_install` host call installs through (in the run's thread: it blocks)."""

    def install(self, requirements: list[str], current: Path | None, tag: str, tenant: str,
                timeout_s: float) -> InstalledSet:
        """The set of `requirements` together with the run's current set (`current`, the folder
        mounted at /packages: a set, the operator's layer's version, or None), for the guest
        Python `tag`, charged to `tenant`, within `timeout_s`; InstallRefused when it will not.
        OSError: the host failed."""
        ...


class PackageInstalls(msgspec.Struct, frozen=True):
    """The run may install packages: its installer is `opener` (`module:callable`) called with
    `args` (the server's data dir, its policy...). A spec, not an object: it goes with the
    request to the process that runs it (a worker process has no server settings)."""

    opener: str
    args: list[str] = []

    def installer(self) -> PackageInstaller:
        """The installer the grant names, opened in this process."""
        module, _, name = self.opener.partition(":")
        opened: PackageInstaller = getattr(importlib.import_module(module), name)(*self.args)
        return opened


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
