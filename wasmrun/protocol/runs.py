"""execute_skill and run_code: params → a sandbox `RunRequest` → the spec's run result.

Secrets: execute_skill gives the guest only the secrets its manifest names in
`permissions.secrets`. run_code gets none: its code is written by the model,
and any mounted skill shares its interpreter, so a secret handed to a
mounted skill would be readable by that code.
"""

from __future__ import annotations

import asyncio
import logging

from wasmrun.protocol.blobs import blob_info
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, NotExecutable, ServerBusy
from wasmrun.protocol.run_result import needs_output_blob, to_spec_result
from wasmrun.protocol.skills import find_skill
from wasmrun.protocol.types import ExecuteSkillParams, RunCodeParams, RunResult
from wasmrun.registry.manifest import IDENTIFIER
from wasmrun.registry.store import Skill
from wasmrun.sandbox.executor import Busy
from wasmrun.sandbox.limits import MiB
from wasmrun.sandbox.types import MountedSkill, RunRequest

logger = logging.getLogger("wasmrun.runs")


def _mount(skill: Skill) -> MountedSkill:
    runtime = skill.manifest.runtime
    entrypoint = runtime.entrypoint if runtime is not None and skill.manifest.executable else None
    return MountedSkill(name=skill.name, root=str(skill.root), entrypoint=entrypoint)


def _input_blobs(ctx: Context, blob_ids: list[str]) -> list[str]:
    for i, blob_id in enumerate(blob_ids):
        blob_info(ctx, blob_id, f"input_blobs[{i}]")
    return list(dict.fromkeys(blob_ids))


def _granted_secrets(ctx: Context, skill: Skill) -> dict[str, str]:
    wanted = skill.manifest.permissions.secrets
    missing = [name for name in wanted if name not in ctx.secrets]
    if missing:
        logger.warning("skill %s asks for secrets not configured: %s", skill.name, ", ".join(missing))
    return {name: ctx.secrets[name] for name in wanted if name in ctx.secrets}


async def _checked_input_blobs(ctx: Context, blob_ids: list[str]) -> list[str]:
    if not blob_ids:  # the common case: no file I/O, no thread hop
        return []
    return await asyncio.to_thread(_input_blobs, ctx, blob_ids)


async def _run(ctx: Context, request: RunRequest) -> RunResult:
    try:
        result = await ctx.executor.run(request)
    except Busy as exc:
        raise ServerBusy(f"server busy: {exc}") from None
    # Only an output too large for the result is written to the blob store;
    # everything else is quick enough for the event loop, and a thread hop
    # costs a short run a noticeable share of its latency.
    if needs_output_blob(result):
        return await asyncio.to_thread(to_spec_result, result, ctx.blobs)
    return to_spec_result(result, ctx.blobs)


async def execute_skill(ctx: Context, p: ExecuteSkillParams) -> RunResult:
    skill = find_skill(ctx, p.name, p.version)
    runtime = skill.manifest.runtime
    if not skill.manifest.executable or runtime is None:
        raise NotExecutable(
            f"skill {skill.name!r} is an instruction skill: it has no runtime to execute;"
            " read it with describe_skill or read_skill_file",
            field="name",
        )
    input_blobs = await _checked_input_blobs(ctx, p.input_blobs)
    request = RunRequest(
        kind="skill",
        skill=skill.name,
        function=runtime.export,
        args=p.args,
        skills=[_mount(skill)],
        input_blobs=input_blobs,
        env=_granted_secrets(ctx, skill),
        limits=ctx.limits.resolve(timeout_ms=p.timeout_ms),
    )
    return await _run(ctx, request)


async def run_code(ctx: Context, p: RunCodeParams) -> RunResult:
    if not IDENTIFIER.fullmatch(p.entrypoint):
        raise InvalidParams(
            f"entrypoint {p.entrypoint!r} must be the name of a function", field="entrypoint"
        )
    mounted: dict[str, MountedSkill] = {}
    for i, name in enumerate(p.mount_skills):
        mounted.setdefault(name, _mount(find_skill(ctx, name, None, field=f"mount_skills[{i}]")))
    input_blobs = await _checked_input_blobs(ctx, p.input_blobs)
    request = RunRequest(
        kind="code",
        code=p.code,
        function=p.entrypoint,
        args=p.args,
        skills=list(mounted.values()),
        input_blobs=input_blobs,
        env={},
        limits=ctx.limits.resolve(
            timeout_ms=p.limits.timeout_ms,
            memory_bytes=None if p.limits.memory_mb is None else p.limits.memory_mb * MiB,
        ),
    )
    return await _run(ctx, request)
