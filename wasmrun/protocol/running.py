"""What every run shares, whether run_code, execute_skill or a run in a session
(runs.py, sessions.py): the call's params checked and turned into one whole, frozen
`sandbox.types.RunRequest`, and the run itself, through its skills' folders and
admission, to the spec's `ExecutionResult`.

A request is built once, here, with everything the sandbox needs (the caller's tenant
and blob quota, whether its output streams, a session's state): nothing changes it
after it is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from wasmrun import phases, tracing
from wasmrun.blobs.quota import BlobQuotaExceeded
from wasmrun.limits import BY_FIELD, REQUESTABLE, TENANT_CAPS
from wasmrun.offload import for_run
from wasmrun.protocol import packageinstalls, toolcalls
from wasmrun.protocol.blobs import blob_info, quota_error
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, QuotaExceeded, ServerBusy
from wasmrun.protocol.run_result import needs_output_blob, to_spec_result
from wasmrun.protocol.skills import find_skill, rpc_error
from wasmrun.protocol.streaming import OutputListener
from wasmrun.protocol.types import MAX_ARGS_DEPTH, ExecutionResult, RunCodeParams, RunLimits
from wasmrun.registry.errors import RegistryError, SkillUnavailable
from wasmrun.registry.skill import Skill
from wasmrun.sandbox import Busy, LimitPolicy, Limits, MountedSkill, NotSendable, RunRequest, RunResult, SessionRun, encode_args
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


def request_limits(ctx: Context, requested: RunLimits, prefix: str = "limits.") -> Limits:
    """The run's limits: the server's, within the tenant's own ceilings; asking for more
    than either allows is -32602 naming the field (and the tenant's limit, if it binds)."""
    policy = tenant_policy(ctx.limits, ctx.caller.limits)
    return run_limits(policy, requested, prefix, server=ctx.limits)


def args_json(args: dict[str, Any]) -> bytes:
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


async def checked_input_blobs(ctx: Context, blob_ids: list[str]) -> list[str]:
    """`blob_ids` without repeats, each one the caller may read (else -32602 naming it)."""
    if not blob_ids:  # the common case: no file I/O, no thread hop
        return []
    return await for_run(_input_blobs, ctx, blob_ids)


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


def mount(skill: Skill) -> MountedSkill:
    """`skill` as a run mounts it (its entry point only when it is executable)."""
    runtime = skill.manifest.runtime
    entrypoint = runtime.entrypoint if runtime is not None and skill.manifest.executable else None
    return MountedSkill(name=skill.name, root=str(skill.root), entrypoint=entrypoint)


def code_request(
    ctx: Context, p: RunCodeParams, args: bytes, skills: Sequence[Skill], input_blobs: list[str], limits: Limits,
    *, stream: bool, session: SessionRun | None = None,
) -> RunRequest:
    """run_code's request, whole: `args` the checked JSON text of the args, `stream`
    whether its output is listened to, `session` the session's state it runs in."""
    return RunRequest(
        kind="code",
        tools=toolcalls.tool_specs(p.tools),
        tool_limits=toolcalls.tool_limits(p.tool_wait_ms),
        code=p.code,
        function=p.entrypoint,
        args_json=args,
        skills=[mount(skill) for skill in skills],
        input_blobs=input_blobs,
        env={},
        network=ctx.egress.network.for_run_code(),  # never a mounted skill's grant
        limits=limits,
        owner=ctx.caller.tenant,
        blob_quota=ctx.caller.blob_quota,
        session=session,
        stream=stream,
    )


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


async def run(
    ctx: Context, request: RunRequest, skills: Sequence[Skill] = (),
    on_result: Callable[[RunResult], None] | None = None, on_output: OutputListener | None = None,
    on_tools: toolcalls.ToolSink | None = None,
) -> ExecutionResult:
    """The run's spec result; `on_result` sees the sandbox's own first (a session keeps its outcome);
    `on_output` gets the output as it is written (streamed runs: `request.stream`)."""
    try:
        # The skills' folders first (a fetch that fails costs the tenant no start), kept
        # for the run's whole length; then the run's admission.
        request = packageinstalls.granted(ctx, request)  # `pip install` from inside (packageinstalls.py)
        async with _skill_folders(ctx, skills), tracing.entering("admission", ctx.gate.admit(ctx.caller)):
            phases.mark("admitted")
            if on_tools is None:
                result = await ctx.executor.run(request, on_output)
            else:  # code mode: the run waits here for its tools' answers too (toolcalls.py)
                result = await ctx.executor.run(request, on_output, on_tools)
        if result.packages_added:
            packageinstalls.audit(ctx, result, ctx.caller.tenant)
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
