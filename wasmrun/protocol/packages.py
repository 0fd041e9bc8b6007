"""Packages installed on demand for a call (`packages` on create_session, run_code,
run_command, and what the skills a call mounts declare and the server lacks; a new skill's
at create_skill): the server's OnDemand (wasmrun/packages/ondemand.py) off the event loop,
its refusals mapped to JSON-RPC errors naming the param (-32602; a quota: -32002), and
what was installed as the result's `packages` / `packages_installed`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

import msgspec

from wasmrun import offload
from wasmrun.packages import layer, names, resolve, wheels
from wasmrun.packages.ondemand import Installed, Refused
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, QuotaExceeded, RPCError
from wasmrun.protocol.types import InstalledPackage, PackagesInstalled
from wasmrun.registry import requirements
from wasmrun.registry.skill import Skill
from wasmrun.sandbox import RunRequest

logger = logging.getLogger("wasmrun.packages")


def served_tag(ctx: Context) -> str:
    """The Python tag of the image new runs get (cp311: stdlib, cp315: data)."""
    return layer.IMAGE_TAGS.get(ctx.served.name, layer.DEFAULT_TAG)


# What an install may refuse with (Refused is a PackageError: the policy's rules, by name).
REFUSALS = (resolve.PackageError, names.RequirementRefused, wheels.UnsafeWheel)
QUOTA_RULES = ("max_sets_per_tenant", "max_tenant_bytes")


def refusal(ctx: Context, exc: Exception, field: str) -> RPCError:
    """The JSON-RPC error for an install's refusal (one of REFUSALS), naming `field`; a
    tenant's quota is -32002 naming the limit."""
    if isinstance(exc, Refused):
        if exc.rule in QUOTA_RULES and ctx.packages is not None:
            return QuotaExceeded(str(exc), exc.rule, int(getattr(ctx.packages.policy, exc.rule)))
        return InvalidParams(str(exc), field=field, package=exc.package, rule=exc.rule)
    if isinstance(exc, names.RequirementRefused):
        return InvalidParams(f"{field}: {exc}", field=field, rule="name")
    if isinstance(exc, wheels.UnsafeWheel):
        return InvalidParams(f"{field}: a wheel was refused, nothing was installed: {exc}", field=field,
                             rule="unsafe-wheel")
    return InvalidParams(f"{field}: {exc}", field=field, rule="resolve")


async def install(
    ctx: Context, requirements: list[str], field: str = "packages", fields: Mapping[str, str] | None = None,
) -> Installed:
    """The set `requirements` resolve to for the served image, built or found; the policy's
    refusal as InvalidParams naming `field` (or `fields[name]` for the package it names; the
    package and the rule in its data)."""
    if ctx.packages is None:
        raise InvalidParams(f"{field}: this server installs no packages on demand", field=field, rule="off")
    try:
        return await offload.for_run(ctx.packages.install, list(requirements), served_tag(ctx), ctx.caller.tenant)
    except REFUSALS as exc:
        named = names.canonical(exc.package) if isinstance(exc, Refused) else ""
        raise refusal(ctx, exc, (fields or {}).get(named, field)) from None


def installs_on_demand(ctx: Context) -> bool:
    return ctx.packages is not None and ctx.packages.policy.mode != "off"


def skills_lacking(ctx: Context, skills: Sequence[Skill]) -> list[str]:
    """What `skills` declare (`[packages] requires`) that a run cannot import as the server is
    (not in the image, not in the operator's layer), to be installed with the run's set. None
    when the operator turned installs off: the skills run with what the server has, as the
    warning at start (or create_skill's refusal) said."""
    declared = [r for skill in skills for r in skill.manifest.packages.requires]
    if not declared or not installs_on_demand(ctx):
        return []
    assert ctx.packages is not None
    return requirements.lacking(declared, layer.tag_root(ctx.packages.data_dir, served_tag(ctx)))


async def for_call(
    ctx: Context, skills: Sequence[Skill], skills_field: str, asked: list[str], asked_field: str = "packages",
) -> Installed | None:
    """The set a call mounts: what its skills lack plus what it asked for (`asked`: its
    `packages`; a name asked for replaces what a skill declares of it), or None when it
    needs none. A refusal names the field the package came from."""
    from_skills = skills_lacking(ctx, skills)
    if not from_skills and not asked:
        return None
    # A hostile entry of `asked` is not a name here: the policy refuses it (naming asked_field).
    asked_names = {names.name_or_none(r) for r in asked}
    # A skill's requirement is a name (its manifest was checked); one asked for by name replaces it.
    # (Two skills that name one package keep both: the install takes them as one requirement.)
    kept = [(name, r) for r in from_skills if (name := names.name_of(r)) not in asked_names]
    fields = {name: skills_field for name, _ in kept}
    return await install(ctx, [r for _, r in kept] + list(asked), asked_field if asked else skills_field, fields)


class SkillInstaller:
    """create_skill's installer of the packages a new skill declares and the server lacks
    (called in the registry's thread; charged to the creating tenant); what it installed."""

    def __init__(self, ctx: Context) -> None:
        assert ctx.packages is not None
        self.installer, self.tag, self.tenant = ctx.packages, served_tag(ctx), ctx.caller.tenant
        self.installed: Installed | None = None

    def __call__(self, lacking: list[str]) -> Installed:
        self.installed = self.installer.install(lacking, self.tag, self.tenant)
        return self.installed


def skill_installer(ctx: Context) -> SkillInstaller | None:
    """None when the operator turned installs off: create_skill then refuses what is lacking."""
    return SkillInstaller(ctx) if installs_on_demand(ctx) else None


def prepare_folder_skills(ctx: Context, skills: Sequence[Skill]) -> threading.Thread | None:
    """What the operator's folder skills declare and the server lacks, installed in the
    background at start (charged to the server's own tenant), so that their first run finds
    the set made and the server answers meanwhile; each refusal is a warning here (and the
    run's error later). With installs off, each lacking skill is one warning instead."""
    root = layer.tag_root(ctx.packages.data_dir, served_tag(ctx)) if ctx.packages is not None else None
    wanted = {skill.name: reqs for skill in skills if (reqs := requirements.missing(skill.manifest, root))}
    if not installs_on_demand(ctx):
        for name, reqs in wanted.items():
            logger.warning("%s", requirements.missing_message(name, reqs))
        return None
    if not wanted:
        return None
    assert ctx.packages is not None
    installer, tag, tenant = ctx.packages, served_tag(ctx), ctx.caller.tenant

    def install_each() -> None:
        for name, reqs in wanted.items():
            try:
                got = installer.install(reqs, tag, tenant)
            except REFUSALS as exc:
                logger.warning("skill %s requires packages this server cannot install (%s): %s",
                               name, " ".join(reqs), exc)
            except Exception:  # pip or the disk failing must not end the server's start
                logger.exception("skill %s: installing its packages failed", name)
            else:
                logger.info("skill %s: its packages are set %s (%s)", name, got.info.id, " ".join(got.info.pins))

    thread = threading.Thread(target=install_each, name="wasmrun-skill-packages", daemon=True)
    thread.start()
    return thread


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
