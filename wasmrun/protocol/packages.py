"""Packages installed on demand for a call (`packages` on create_session, run_code,
run_command): the server's OnDemand (wasmrun/packages/ondemand.py) off the event loop,
its refusals mapped to JSON-RPC errors naming the param (-32602; a quota: -32002), and
what was installed as the result's `packages` / `packages_installed`."""

from __future__ import annotations

import logging

import msgspec

from wasmrun import offload
from wasmrun.packages import layer, names, resolve, wheels
from wasmrun.packages.ondemand import Installed, Refused
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, QuotaExceeded
from wasmrun.protocol.types import InstalledPackage, PackagesInstalled
from wasmrun.sandbox import RunRequest

logger = logging.getLogger("wasmrun.packages")


def served_tag(ctx: Context) -> str:
    """The Python tag of the image new runs get (cp311: stdlib, cp315: data)."""
    return layer.IMAGE_TAGS.get(ctx.served.name, layer.DEFAULT_TAG)


async def install(ctx: Context, requirements: list[str], field: str = "packages") -> Installed:
    """The set `requirements` resolve to for the served image, built or found; the policy's
    refusal as InvalidParams naming `field` (the package and the rule in its data)."""
    if ctx.packages is None:
        raise InvalidParams(f"{field}: this server installs no packages on demand", field=field, rule="off")
    try:
        return await offload.for_run(ctx.packages.install, list(requirements), served_tag(ctx), ctx.caller.tenant)
    except Refused as exc:
        if exc.rule in ("max_sets_per_tenant", "max_tenant_bytes"):
            value = getattr(ctx.packages.policy, exc.rule)
            raise QuotaExceeded(str(exc), exc.rule, int(value)) from None
        raise InvalidParams(str(exc), field=field, package=exc.package, rule=exc.rule) from None
    except names.RequirementRefused as exc:
        raise InvalidParams(f"{field}: {exc}", field=field, rule="name") from None
    except wheels.UnsafeWheel as exc:
        raise InvalidParams(f"{field}: a wheel was refused, nothing was installed: {exc}", field=field,
                            rule="unsafe-wheel") from None
    except resolve.PackageError as exc:
        raise InvalidParams(f"{field}: {exc}", field=field, rule="resolve") from None


def not_in_a_session(requirements: list[str]) -> None:
    if requirements:
        raise InvalidParams(
            "packages: a session's packages are named at create_session (its runs mount them all);"
            " create a session with them, or fork one that has them", field="packages",
        )


async def mounted(ctx: Context, pins: list[str], tag: str, request: RunRequest) -> RunRequest:
    """`request` mounting a session's recorded set (built again if it was removed), if it has one."""
    if not pins or ctx.packages is None:
        return request
    try:
        folder = await offload.for_run(ctx.packages.ensure, list(pins), tag, ctx.caller.tenant)
    except (resolve.PackageError, wheels.UnsafeWheel, names.RequirementRefused) as exc:
        raise InvalidParams(f"the session's packages cannot be mounted: {exc}", field="session_id") from None
    return msgspec.structs.replace(request, packages=str(folder))


def answer(installed: Installed) -> PackagesInstalled:
    info = installed.info
    return PackagesInstalled(
        set=info.id,
        packages=[InstalledPackage(p.name, p.version, p.bytes, p.requested) for p in info.packages],
        bytes=info.bytes, cached=installed.cached, seconds=round(installed.seconds, 3),
        in_image=list(installed.in_image),
    )
