"""execute_skill and run_code: params → one whole sandbox `RunRequest` → the spec's run result
(what every run shares, sessions' runs too, is in running.py).

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

import logging

import msgspec

from wasmrun.egress.policy import NetworkGrant
from wasmrun.egress.secrets import placeholder
from wasmrun.protocol import packages, running, toolcalls
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, NotExecutable
from wasmrun.protocol.skills import find_skill
from wasmrun.protocol.streaming import output_listener
from wasmrun.protocol.types import ExecuteSkillParams, ExecutionResult, RunCodeParams, RunLimits
from wasmrun.registry.manifest import IDENTIFIER
from wasmrun.registry.skill import Skill
from wasmrun.sandbox import RunRequest, new_run_id

logger = logging.getLogger("wasmrun.runs")


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


async def execute_skill(ctx: Context, p: ExecuteSkillParams) -> ExecutionResult:
    on_output = output_listener(p.stream)
    args_json = running.args_json(p.args)
    skill = await find_skill(ctx, p.name, p.version, for_runs=True)
    runtime = skill.manifest.runtime
    if not skill.manifest.executable or runtime is None:
        raise NotExecutable(
            f"skill {skill.name!r} is an instruction skill: it has no runtime to execute;"
            " read it with describe_skill or read_skill_file",
            field="name",
        )
    input_blobs = await running.checked_input_blobs(ctx, p.input_blobs)
    env, network = _skill_env_and_network(ctx, skill)
    request = RunRequest(
        kind="skill",
        skill=skill.name,
        function=runtime.export,
        args_json=args_json,
        skills=[running.mount(skill)],
        input_blobs=input_blobs,
        env=env,
        network=network,
        limits=running.request_limits(ctx, *_skill_limits(p)),
        owner=ctx.caller.tenant,
        blob_quota=ctx.caller.blob_quota,
        stream=on_output is not None,
    )
    installed = await packages.for_call(ctx, [skill], "name", [])
    if installed is None:
        return await running.run(ctx, request, [skill], on_output=on_output)
    request = msgspec.structs.replace(request, packages=str(installed.folder))
    result = await running.run(ctx, request, [skill], on_output=on_output)
    result.packages = packages.answer(installed)
    return result


async def run_code(ctx: Context, p: RunCodeParams) -> ExecutionResult:
    if not IDENTIFIER.fullmatch(p.entrypoint):
        raise InvalidParams(
            f"entrypoint {p.entrypoint!r} must be the name of a function", field="entrypoint"
        )
    on_output = output_listener(p.stream)
    args_json = running.args_json(p.args)
    skills = await running.mounted_skills(ctx, p.mount_skills)
    input_blobs = await running.checked_input_blobs(ctx, p.input_blobs)
    limits = running.request_limits(ctx, p.limits)
    request = running.code_request(ctx, p, args_json, skills, input_blobs, limits, stream=on_output is not None)
    if request.tools:  # code mode: it may pause at its tool calls (toolcalls.py)
        request = msgspec.structs.replace(request, run_id=request.run_id or new_run_id())
    installed = await packages.for_call(ctx, skills, "mount_skills", p.packages)
    if installed is None:
        if request.tools:
            return await toolcalls.with_tools(
                ctx, request.run_id, request.tool_limits,
                lambda on_tools: running.run(ctx, request, skills, on_output=on_output, on_tools=on_tools),
            )
        return await running.run(ctx, request, skills, on_output=on_output)
    request = msgspec.structs.replace(request, packages=str(installed.folder))

    async def installed_run(on_tools: toolcalls.ToolSink | None) -> ExecutionResult:
        result = await running.run(ctx, request, skills, on_output=on_output, on_tools=on_tools)
        result.packages = packages.answer(installed)
        return result

    if request.tools:
        return await toolcalls.with_tools(ctx, request.run_id, request.tool_limits, installed_run)
    return await installed_run(None)
