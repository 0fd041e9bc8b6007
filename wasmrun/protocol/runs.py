"""execute_skill and run_code: params → a sandbox `RunRequest` → the spec's run result.

Secrets: a manifest's `permissions.secrets` only asks. execute_skill gives the
guest a secret when the skill asks for it and the operator's policy grants it
to this skill, for this tenant, reaching the skill's owner (tenants/grants.py:
a grant for everyone reaches only the operator's skills unless it says so). run_code gets none: its code is written by the model,
and any mounted skill shares its interpreter, so a secret handed to a
mounted skill would be readable by that code.

Network, the same way: execute_skill may reach what its manifest's
`permissions.network` requests *and* the operator's policy grants it;
run_code only what the operator grants run_code itself, whatever skills it
mounts (see wasmrun/egress/policy.py).

A secret in `host` mode (the operator's choice, wasmrun/egress/secrets.py) is
only a placeholder in the guest's environment; its value travels with the
run's network grant and is put into requests on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import msgspec

from wasmrun import phases
from wasmrun.blobs.quota import BlobQuotaExceeded
from wasmrun.egress.policy import NetworkGrant
from wasmrun.egress.secrets import placeholder
from wasmrun.limits import BY_FIELD, REQUESTABLE, TENANT_CAPS
from wasmrun.offload import for_run
from wasmrun.protocol.blobs import blob_info, quota_error
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, NotExecutable, QuotaExceeded, ServerBusy
from wasmrun.protocol.run_result import needs_output_blob, to_spec_result
from wasmrun.protocol.skills import find_skill, rpc_error
from wasmrun.protocol.streaming import OutputListener, output_listener
from wasmrun.protocol.types import MAX_ARGS_DEPTH, ExecuteSkillParams, RunCodeParams, RunLimits, RunResult
from wasmrun.registry.errors import RegistryError, SkillUnavailable
from wasmrun.registry.manifest import IDENTIFIER
from wasmrun.registry.skill import Skill
from wasmrun.sandbox import Busy, LimitPolicy, Limits, MountedSkill, NotSendable, RunRequest, encode_args
from wasmrun.sandbox import RunResult as SandboxResult
from wasmrun.tenants.limits import TenantLimits
from wasmrun.tenants.quotas import QueueTimeout, RunQuotaExceeded

logger = logging.getLogger("wasmrun.runs")

# What a request's `limits` may name: the sandbox's Limits field each sets, and
# how many of that field's units one unit of the request is.
REQUESTABLE_LIMITS: dict[str, tuple[str, int]] = {limit.name: (limit.field, limit.scale) for limit in REQUESTABLE}
# The tenant limit (tenants/limits.py) that can lower a Limits field's ceiling (wasmrun/limits.py).
TENANT_CEILINGS = TENANT_CAPS


def _in_units(bounds: tuple[int, int], unit: int) -> tuple[int, int]:
    lowest, highest = bounds
    return -(-lowest // unit), highest // unit


def run_limits(
    policy: LimitPolicy, requested: RunLimits, prefix: str = "limits.", server: LimitPolicy | None = None
) -> Limits:
    """The run's Limits; a value outside what `policy` allows is -32602 naming it.
    When `policy` is `server`'s lowered for a tenant and the tenant's ceiling is the
    one refusing, the error names that tenant limit too (`data.limit`, `data.value`)."""
    asked: dict[str, int] = {}
    for member, (field, unit) in REQUESTABLE_LIMITS.items():
        value = getattr(requested, member)
        if value is None:
            continue
        lowest, highest = _in_units(policy.allowed(field), unit)
        if not lowest <= value <= highest:
            data: dict[str, object] = {"minimum": lowest, "maximum": highest}
            where = "on this server"
            tenant_limit = TENANT_CEILINGS.get(field)
            if (
                server is not None
                and tenant_limit is not None
                and value > highest
                and highest < _in_units(server.allowed(field), unit)[1]
            ):
                where = f"for this tenant ({tenant_limit} = {highest})"
                data.update(limit=tenant_limit, value=highest)
            raise InvalidParams(
                f"{prefix}{member} must be from {lowest} to {highest} {where}, not {_shown(value)}",
                field=prefix + member,
                **data,
            )
        asked[field] = value * unit
    return policy.resolve(**asked)


def _shown(value: int) -> str:
    """A refused value as the message quotes it: a number of hundreds of digits by its length."""
    text = str(value)
    return text if len(text) <= 40 else f"a number of {len(text.lstrip('-'))} digits"


def _mount(skill: Skill) -> MountedSkill:
    runtime = skill.manifest.runtime
    entrypoint = runtime.entrypoint if runtime is not None and skill.manifest.executable else None
    return MountedSkill(name=skill.name, root=str(skill.root), entrypoint=entrypoint)


def _args_json(args: dict[str, Any]) -> bytes:
    """The args as the JSON text the guest gets; checked here, before any
    sandbox is taken (integers of any size pass through exactly)."""
    try:
        return encode_args(args, MAX_ARGS_DEPTH)
    except NotSendable as exc:
        raise InvalidParams(f"args {exc}", field="args") from None


def _input_blobs(ctx: Context, blob_ids: list[str]) -> list[str]:
    # Each checked for the caller: another tenant's id is "does not exist".
    for i, blob_id in enumerate(blob_ids):
        blob_info(ctx, blob_id, f"input_blobs[{i}]")
    return list(dict.fromkeys(blob_ids))


def _granted_secrets(ctx: Context, skill: Skill) -> dict[str, str]:
    wanted = skill.manifest.permissions.secrets
    if not wanted:
        return {}
    # Grants follow ownership (tenants/grants.py): a tenant's created `data.evil` gets
    # nothing from the operator's `"data.*"`, only what names that tenant or created skills.
    granted = ctx.access.granted(ctx.caller.tenant, skill.name, skill.owner)
    missing = [name for name in wanted if name in granted and name not in ctx.secrets]
    if missing:
        logger.warning("skill %s is granted secrets not configured: %s", skill.name, ", ".join(missing))
    return {name: ctx.secrets[name] for name in wanted if name in granted and name in ctx.secrets}


@functools.lru_cache(maxsize=1024)
def tenant_policy(server: LimitPolicy, tenant: TenantLimits) -> LimitPolicy:
    """The server's defaults and ceilings, lowered to the tenant's own ceilings."""
    caps = {
        field: max(BY_FIELD[field].minimum, getattr(tenant, cap)) * BY_FIELD[field].scale
        for field, cap in TENANT_CAPS.items()
    }
    ceilings = dataclasses.replace(
        server.ceilings, **{name: min(getattr(server.ceilings, name), cap) for name, cap in caps.items()}
    )
    defaults = dataclasses.replace(
        server.defaults, **{name: min(getattr(server.defaults, name), getattr(ceilings, name)) for name in caps}
    )
    return LimitPolicy(defaults=defaults, ceilings=ceilings)


def _limits(ctx: Context, requested: RunLimits, prefix: str = "limits.") -> Limits:
    """The run's limits: the server's, within the tenant's own ceilings; asking for more
    than either allows is -32602 naming the field (and the tenant's limit, if it binds)."""
    policy = tenant_policy(ctx.limits, ctx.caller.limits)
    return run_limits(policy, requested, prefix, server=ctx.limits)


def _skill_env_and_network(ctx: Context, skill: Skill) -> tuple[dict[str, str], NetworkGrant]:
    """The run's environment (env-mode secrets, placeholders for host-mode ones)
    and its network grant (carrying the host-mode values)."""
    env: dict[str, str] = {}
    host_held: dict[str, str] = {}
    for name, value in _granted_secrets(ctx, skill).items():
        if ctx.egress.secret_mode(name) == "host":
            env[name] = placeholder(name)
            host_held[name] = value
        else:
            env[name] = value
    network = ctx.egress.network.for_skill(
        skill.name, skill.manifest.permissions.network, host_held, tenant=ctx.caller.tenant,
        body_secrets=ctx.egress.body_secrets, owner=skill.owner,
    )
    return env, network


async def _checked_input_blobs(ctx: Context, blob_ids: list[str]) -> list[str]:
    if not blob_ids:  # the common case: no file I/O, no thread hop
        return []
    return await for_run(_input_blobs, ctx, blob_ids)


@contextlib.asynccontextmanager
async def _skill_folders(ctx: Context, skills: Sequence[Skill]) -> AsyncIterator[None]:
    """The mounted skills' folders, kept for the run when they are cached copies
    (a shared cache evicts only what no run holds)."""
    cached = [s for s in skills if ctx.registry.cached(s)]
    if not cached:  # the common case: the skills' own folders, no thread hop
        yield
        return
    holding = asyncio.ensure_future(for_run(ctx.registry.hold, cached))
    try:
        held = await asyncio.shield(holding)
    except asyncio.CancelledError:
        # The thread finishes anyway: let go of what it took.
        holding.add_done_callback(lambda done: None if done.cancelled() or done.exception() else done.result().close())
        raise
    with held:
        yield


async def _run(
    ctx: Context, request: RunRequest, skills: Sequence[Skill] = (),
    on_result: Callable[[SandboxResult], None] | None = None, on_output: OutputListener | None = None,
) -> RunResult:
    """The run's spec result; `on_result` sees the sandbox's own first (a session keeps its outcome);
    `on_output` gets the output as it is written (streamed runs)."""
    request.owner = ctx.caller.tenant
    request.stream = on_output is not None
    request.blob_quota = ctx.caller.blob_quota
    try:
        # The skills' folders first (a fetch that fails costs the tenant no start), kept
        # for the run's whole length; then the run's admission.
        async with _skill_folders(ctx, skills), ctx.gate.admit(ctx.caller):
            phases.mark("admitted")
            result = await ctx.executor.run(request, on_output)
        if on_result is not None:
            on_result(result)
    except RunQuotaExceeded as exc:
        raise QuotaExceeded(f"quota exceeded: {exc.message}", exc.limit, exc.value, exc.retry_after_s) from None
    except (Busy, QueueTimeout, SkillUnavailable) as exc:
        raise ServerBusy(f"server busy: {exc}") from None
    except RegistryError as exc:  # SkillDamaged: an evicted version's bundle is not the one stored
        raise rpc_error(exc) from None
    # Only an output too large for the result is written to the blob store;
    # everything else is quick enough for the event loop, and a thread hop
    # costs a short run a noticeable share of its latency.
    try:
        if needs_output_blob(result):
            answer = await for_run(to_spec_result, result, ctx.blobs, request.owner, request.blob_quota)
        else:
            answer = to_spec_result(result, ctx.blobs)
        phases.mark("answered")
        return answer
    except BlobQuotaExceeded as exc:
        raise quota_error(exc) from None


def _skill_limits(p: ExecuteSkillParams) -> tuple[RunLimits, str]:
    """execute_skill's limits: `limits`, with the spec's top-level `timeout_ms` in it
    (and named that way in errors when it is the one given)."""
    if p.timeout_ms is None:
        return p.limits, "limits."
    if p.limits.timeout_ms is not None and p.limits.timeout_ms != p.timeout_ms:
        raise InvalidParams(
            "timeout_ms is given twice, at the top level and as limits.timeout_ms, with different"
            " values: give it once",
            field="limits.timeout_ms",
        )
    only_top = p.limits == RunLimits()
    return msgspec.structs.replace(p.limits, timeout_ms=p.timeout_ms), "" if only_top else "limits."


async def execute_skill(ctx: Context, p: ExecuteSkillParams) -> RunResult:
    on_output = output_listener(p.stream)
    args_json = _args_json(p.args)
    skill = await find_skill(ctx, p.name, p.version, for_runs=True)
    runtime = skill.manifest.runtime
    if not skill.manifest.executable or runtime is None:
        raise NotExecutable(
            f"skill {skill.name!r} is an instruction skill: it has no runtime to execute;"
            " read it with describe_skill or read_skill_file",
            field="name",
        )
    input_blobs = await _checked_input_blobs(ctx, p.input_blobs)
    env, network = _skill_env_and_network(ctx, skill)
    request = RunRequest(
        kind="skill",
        skill=skill.name,
        function=runtime.export,
        args_json=args_json,
        skills=[_mount(skill)],
        input_blobs=input_blobs,
        env=env,
        network=network,
        limits=_limits(ctx, *_skill_limits(p)),
    )
    return await _run(ctx, request, [skill], on_output=on_output)


async def run_code(ctx: Context, p: RunCodeParams) -> RunResult:
    if not IDENTIFIER.fullmatch(p.entrypoint):
        raise InvalidParams(
            f"entrypoint {p.entrypoint!r} must be the name of a function", field="entrypoint"
        )
    on_output = output_listener(p.stream)
    args_json = _args_json(p.args)
    skills = await mounted_skills(ctx, p.mount_skills)
    input_blobs = await _checked_input_blobs(ctx, p.input_blobs)
    request = code_request(ctx, p, args_json, skills, input_blobs, _limits(ctx, p.limits))
    return await _run(ctx, request, skills, on_output=on_output)


def code_request(
    ctx: Context, p: RunCodeParams, args_json: bytes, skills: list[Skill], input_blobs: list[str], limits: Limits,
) -> RunRequest:
    return RunRequest(
        kind="code",
        code=p.code,
        function=p.entrypoint,
        args_json=args_json,
        skills=[_mount(skill) for skill in skills],
        input_blobs=input_blobs,
        env={},
        network=ctx.egress.network.for_run_code(),  # never a mounted skill's grant
        limits=limits,
    )


async def mounted_skills(ctx: Context, entries: Sequence[str], param: str = "mount_skills") -> list[Skill]:
    """The skills `entries` name: "name" mounts the highest version, "name@1.2.0" that version."""
    mounted: dict[str, Skill] = {}
    for i, entry in enumerate(entries):
        name, _, version = entry.partition("@")
        where = f"{param}[{i}]"
        skill = await find_skill(ctx, name, version or None, field=where, version_field=where, for_runs=True)
        if skill.name in mounted and mounted[skill.name].root != skill.root:
            raise InvalidParams(f"skill {skill.name!r} is listed twice with different versions", field=where)
        mounted[skill.name] = skill
    return list(mounted.values())
