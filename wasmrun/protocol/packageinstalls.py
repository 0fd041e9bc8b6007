"""Packages a run installs from inside (runtime.packages.install, `pip install` in the guest's
shell, a cell's `!pip install`): every run is granted the server's installer and policy
(wasmrun/packages/runinstalls.py: the process serving the run opens it from the grant), and what a run
installed is audited here, as create_session's `packages` are (method "packages.install").
A session's run records its new set (protocol/sessions.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from wasmrun.packages import runinstalls
from wasmrun.packages.ondemand import Installed, OnDemand
from wasmrun.protocol.context import Context
from wasmrun.sandbox import PackageInstalls, RunRequest, RunResult

_grants: dict[int, tuple[OnDemand, PackageInstalls]] = {}


def granted(ctx: Context, request: RunRequest) -> RunRequest:
    """`request` allowed to install packages under the server's policy (unless it has no installer)."""
    installer = ctx.packages
    if installer is None or request.package_installs is not None:
        return request
    known = _grants.get(id(installer))
    if known is None or known[0] is not installer:
        known = (installer, runinstalls.grant(installer))
        _grants[id(installer)] = known
    return msgspec.structs.replace(request, package_installs=known[1])


def audit(ctx: Context, result: RunResult, tenant: str) -> None:
    """Each set the run installed from inside: an audit line (the installer's on_install)."""
    installer = ctx.packages
    if installer is None:
        return
    for added in result.packages_added:
        folder = Path(added.folder)
        try:
            info = installer.info(folder)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            continue  # removed meanwhile: the run's own report stands
        installer.on_install(tenant, Installed(info, folder, added.cached, added.seconds, tuple(added.in_image)))
